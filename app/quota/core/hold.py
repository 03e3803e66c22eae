"""A gang's hold in a decision (app/quota/core/decision.py): a member joins its gang's hold, or its first member
writes the hold for the whole gang; in a burst, a worker takes some of the hold's places into a grant of its own, so
the members that follow go into it without the API server, as ordinary Pods go into grants. Pure.

Why places and not room: a hold's room is the gang's already, so a grant of places takes no free room; and a place is
one member, so a worker that dies with a grant open loses at most its places (the members it admitted into it carry
its id; the places it did not use expire with the grant), never lets more members in than the gang's size.
docs/quota.md, "Gangs".
"""

from __future__ import annotations

from dataclasses import replace

from app.admission.ports import FITS, Verdict
from app.quota.core.amounts import Amounts, beyond, minus, plus, times
from app.quota.core.entries import JOINERS, Held, Hold, LedgerEntry, Places
from app.quota.core.gang import KUEUE, KUEUE_TOTAL
from app.quota.core.limits import gang_overflow, overflow
from app.quota.core.scene import SLACK, WINDOW, Account, Ask, Scene


def join(
    scene: Scene, counted: Account, keep: dict[str, LedgerEntry], taking: Amounts, one: Ask
) -> tuple[Verdict | None, Amounts] | None:  # fmt: skip
    """A gang member's verdict and the room it adds to the ledger, its gang's hold written into ``keep``; None when
    it is charged alone (its gang's hold is full, or all but it are there). The first member holds room for every
    member missing (``size`` less its Pods seen); a later one takes its room from the hold, and only what it asks
    beyond the first member's charge from free room. (None, {}): it must wait for others' grants to close (a full
    hold whose places another worker's grant may still give back waits for them too); a member the hold lists as
    joined already gets its verdict again and adds nothing."""
    assert one.gang is not None
    key = one.gang.key
    found = held(keep, key)
    if found is not None:
        hold_id, entry = found
        if one.tag in entry.hold.joined:  # decided again (a lost answer, a request sent again): it joined already
            return Verdict(reservation=hold_id), {}
        if entry.hold.declared and one.gang.size != entry.hold.declared:
            return Verdict(disagrees(scene.namespace, entry.hold, one.gang.size), gang=True), {}
        if entry.hold.members >= entry.hold.size:
            return (None, {}) if granted_elsewhere(scene, counted, key) else None
        need = beyond(one.requested, entry.hold.each)
        members, joined = entry.hold.members + 1, (*entry.hold.joined, one.tag)[-JOINERS:]
        hold, denied = replace(entry.hold, members=members, joined=joined), ""
        amounts = plus(minus(entry.amounts, entry.hold.each), one.requested)
    else:
        missing = one.gang.size - scene.members.get(key, 0)
        if missing <= 1:
            return None
        need = times(one.requested, missing)
        declared = one.gang.size if key.startswith(f"{KUEUE}/") else 0  # the author's word: every member's too
        hold_id, hold, amounts = one.uid, Hold(key, missing, 1, dict(one.requested), declared=declared), need
        denied = gang_overflow(scene.namespace, scene.limits, plus(counted.lower, taking), one.gang, missing, need)
    if denied or (denied := overflow(scene.namespace, scene.limits, plus(counted.lower, taking), need)):
        return Verdict(denied, gang=True), {}
    if overflow(scene.namespace, scene.limits, plus(counted.upper, taking), need):
        return None, {}
    if one.dry_run:
        return FITS, {}
    ttl = max(scene.hold_ttl, scene.ttl)
    keep[hold_id] = Held(round(scene.wall + ttl, 1), amounts, ttl, hold=hold)
    return Verdict(reservation=hold_id), need


def grant_places(scene: Scene, keep: dict[str, LedgerEntry], key: str, most: int, grant_id: str) -> tuple[str, int]:
    """Up to ``most`` of the places still open in gang ``key``'s hold moved into a new open entry ``grant_id``, a
    grant of this worker's (written into ``keep``), each with the room of one (the hold's ``each``): the hold's id
    and the places moved (0: none open)."""
    found = held(keep, key)
    if found is None:
        return "", 0
    hold_id, entry = found
    places = min(most, entry.hold.size - entry.hold.members)
    if places <= 0:
        return "", 0
    room = times(entry.hold.each, places)
    hold = replace(entry.hold, members=entry.hold.members + places)
    keep[hold_id] = replace(entry, amounts=minus(entry.amounts, room), hold=hold)
    ttl = scene.ttl + WINDOW  # a member admitted into it as its window ends may appear a TTL later
    keep[grant_id] = Places(round(scene.wall + ttl, 1), room, ttl, gang=key)
    return hold_id, places


def disagrees(namespace: str, hold: Hold, size: int) -> str:
    """The denial of a member whose declared size is not its hold's: a size that is its author's word binds the
    whole gang, or one Pod declaring a huge one would hold the namespace for the others to renew."""
    return (
        f"exceeding resource quota: namespace {namespace} {KUEUE_TOTAL}: gang {hold.group} holds room for "
        f"{hold.declared} Pods, this Pod says {size}"
    )


def held(entries: dict[str, LedgerEntry], key: str) -> tuple[str, Held] | None:
    """Gang ``key``'s hold among ``entries``, and its id (None: it has none)."""
    return next(((i, e) for i, e in entries.items() if isinstance(e, Held) and e.hold.group == key), None)


def granted_elsewhere(scene: Scene, counted: Account, key: str) -> bool:
    """Another worker's grant of gang ``key``'s places may still admit members, or give places back: one window
    past the time it could admit (WINDOW + SLACK from this worker's first sight), for its worker's closing write,
    which starts at its window's end; a member waits that long (asking for them) before it is charged alone."""
    since = scene.now - 2 * WINDOW - SLACK
    return any(
        isinstance(entry, Places) and entry.gang == key and counted.first_seen.get(entry_id, scene.now) > since
        for entry_id, entry in counted.live.items()
        if entry_id not in scene.mine
    )
