"""What one quota decision reads of a namespace (a ``Scene``: the feed's ``View`` of it, this worker's clock and
grants) and what it adds up to (``account``): what is taken at least and at most, and which entries a write keeps.
Pure, like the decision that reads it (app/quota/core/decision.py); app/quota/core/standing.py counts the figures
from the same ``account``.

Every time here is this worker's own monotonic clock: an entry lives for its ``ttl`` from this worker's first sight
of it, another's grant is certain from WINDOW + SLACK after that sight (docs/rules.md#no-clock-but-its-own).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from app.quota.core.amounts import Amounts, accumulate, is_zero, minus, per, plus, times, unseen, within
from app.quota.core.encoding import Ledger
from app.quota.core.entries import Ahead, Held, LedgerEntry, Places, Reserved, tag
from app.quota.core.gang import Gang

WINDOW = 1.0  # seconds a worker admits into a grant it wrote, counted from before the write
SLACK = 0.25  # others count a grant as possibly free this much longer, on their own clocks, from first sight
CAP = 2  # a hold holds its places this many lives at most from its first sight, however often its members renew it


@dataclass(slots=True)
class Taken:
    """What the Pods carrying one reservation (a ledger entry) took, as this process has seen them (alive or gone):
    usage, not room held for them any more (app/quota/feed/tables.py keeps it)."""

    amounts: Amounts
    rv: int  # the newest resourceVersion among those Pods when first seen here
    alive: int = 0
    forget_at: float = float("inf")
    since: float = -math.inf  # monotonic: when the last of those Pods was first seen here (a hold's renewal)
    nonces: set[str] = field(default_factory=set)  # the seals counted (app/quota/core/seal.py): each counts once


@dataclass(frozen=True)
class Ask:
    """One admission waiting on the ledger."""

    uid: str
    requested: Amounts
    dry_run: bool = False
    gang: Gang | None = None  # the Pod's gang: its room comes from the gang's hold, or a grant of its places
    # Reviewed again with a larger demand (another webhook changed the Pod): the entry its first review reserved in,
    # and what that charged; the entry grows by the difference (docs/rules.md#charged-once-per-pod)
    grows: str = ""
    charged: Amounts = field(default_factory=dict)

    @functools.cached_property
    def tag(self) -> str:
        """How an entry lists this request (app/quota/core/entries.py)."""
        return tag(self.uid)


@dataclass(eq=False)
class Grant:
    """Room this worker took ahead in a namespace (written as an open ledger entry): admissions go into it, without
    the API server, until it closes. ``closing``: a write closing it is being made, so nothing more goes in; the
    decision then writes it closed, cut to what was ``spent``.

    A gang's grant (``gang`` set) is ``slots`` of its hold's places, taken out of the hold (entry ``hold``) with the
    room of each: only that gang's members go into it, one place each; closing it gives the places not used back to
    the hold (docs/quota.md, "Gangs")."""

    id: str
    amounts: Amounts  # as written in the ledger
    spent: Amounts  # admitted into it so far
    closes_at: float  # monotonic: WINDOW after the write that made it was sent
    wanted: int  # the ledger's wanted count when it was made: a higher one asks for it to be closed at once
    closing: bool = False
    gang: str = ""  # a gang's grant: the gang's key ("" an ordinary grant, for Pods of no gang)
    hold: str = ""  # a gang's grant: the id of the hold its places came from
    slots: int = 0  # a gang's grant: the places it took
    count: int = 0  # a gang's grant: the members admitted into it
    tags: list[str] = field(default_factory=list)  # the requests admitted into it (its closed entry lists them)

    def room(self) -> Amounts:
        return minus(self.amounts, self.spent)

    def place(self) -> Amounts:
        """A gang's grant: the room of one place (a member bigger than that joins the hold through the ledger)."""
        return per(self.amounts, self.slots)

    def unused(self) -> bool:
        """Room to give back by closing it: room not spent (for a gang's grant also places not taken: members
        smaller than a place leave room in it, which its closing writes down to what they took)."""
        return (self.gang != "" and self.count < self.slots) or any(amount > 0 for amount in self.room().values())

    def admits(self, ask: Ask, now: float) -> bool:
        """Whether ``ask`` goes into this grant now (its room taken, unless a dry run): open, in its window, room
        (and for a gang's grant: a member of that gang, a place left)."""
        room = self.room() if not self.gang else self.place()
        if (
            (ask.gang.key if ask.gang is not None else "") != self.gang
            or self.closing
            or now >= self.closes_at
            or (self.gang and self.count >= self.slots)
            or not within(ask.requested, room)
        ):
            return False
        if not ask.dry_run:
            accumulate(self.spent, ask.requested)
            self.count += 1
            self.tags.append(ask.tag)
        return True

    def seen_by_decision(self) -> Grant:
        """A copy the decision reads apart from the lock that guards this one."""
        return replace(self, spent=dict(self.spent), tags=list(self.tags))


@dataclass(frozen=True)
class Scene:
    """Everything one decision reads about a namespace, taken at one moment."""

    namespace: str
    limits: Mapping[str, int]
    entries: Mapping[str, LedgerEntry]  # the ledger's, as read
    mark: int  # the ledger's mark, which this worker's Pod watch has reached
    used: Amounts  # the namespace's Pods as seen
    taken: Mapping[str, Taken]  # per entry id: what the Pods carrying it were seen to take
    wall: float  # unix seconds: only written into new entries' ``expires``, for the previous version's readers
    now: float  # monotonic seconds: every judgement of time
    ttl: float  # this worker's reservation TTL: new entries' life, and that of entries written without one
    mine: Mapping[str, Grant] = field(default_factory=dict)  # this worker's grants, by entry id
    first_seen: Mapping[str, float] = field(default_factory=dict)  # each entry's first sight here (default: now)
    members: Mapping[str, int] = field(default_factory=dict)  # per gang key: its Pods in the namespace, as seen
    gone: frozenset[str] = frozenset()  # gangs whose group object was deleted: their holds keep members' room only
    hold_ttl: float = 0.0  # a hold's life after its last member's write (this worker's setting)
    renewed: Mapping[str, float] = field(default_factory=dict)  # a hold's last sight of a member joining (or first)


@dataclass(slots=True)
class View:
    """What a process's feed knows of one namespace, read at one moment (app/quota/ports.py's FeedView.view): the
    parts of a Scene that come from watching the API server, and whether they can be trusted yet. A value nobody
    changes, not frozen only because one is made on every review and a frozen one takes three times as long."""

    namespace: str
    limits: Amounts  # the tightest device limits of its ResourceQuotas ({}: no device quota)
    ledger: Ledger | None  # the newest ledger seen (None: none yet)
    first_seen: Mapping[str, float]  # when this process first saw each entry of that ledger (monotonic)
    used: Amounts  # the namespace's Pods as seen
    taken: Mapping[str, Taken]  # per reservation asked about: what the Pods carrying it were seen to take
    pods_at: int  # the resourceVersion its Pod watch has reached (-1: its Pods not listed yet)
    synced: bool = True  # the first lists are in (ResourceQuotas, and the Pods of every namespace quota'd then)
    broken_for: float = 0.0  # seconds the longest-broken ResourceQuota or Pod stream has been broken
    members: Mapping[str, int] = field(default_factory=dict)  # per gang key: its Pods in the namespace, as seen
    gone: frozenset[str] = frozenset()  # gangs of the ledger's holds whose group object was deleted
    renewed: Mapping[str, float] = field(default_factory=dict)  # per hold: the last sight of a member joining it

    def scene(
        self, found: Ledger, *, wall: float, now: float, ttl: float, mine: Mapping[str, Grant], hold_ttl: float = 0.0
    ) -> Scene:  # fmt: skip
        """The scene to decide ``found`` on (a ledger this view's ``taken`` was read for)."""
        entries, mark, used, taken = found.entries, found.mark, self.used, self.taken
        return Scene(
            self.namespace, self.limits, entries, mark, used, taken, wall, now, ttl, mine, self.first_seen,
            self.members, self.gone, hold_ttl, self.renewed,
        )  # fmt: skip


@dataclass(frozen=True)
class Account:
    """What a scene adds up to."""

    live: Mapping[str, LedgerEntry]  # the entries not expired
    lower: Amounts  # taken at least: what a denial counts
    upper: Amounts  # taken at most: what an admission counts
    keep: Mapping[str, LedgerEntry]  # the entries a write keeps (this worker's closing grants cut to what they took)
    mark: int  # the mark a write sets (moved past the Pods of the entries it drops)
    first_seen: Mapping[str, float]  # others' open grants still live, with their first sight here


def account(scene: Scene) -> Account:
    """The live entries; what is taken at least and at most (Pods as seen, plus what entries hold beyond what
    their Pods were seen to take); the entries a write keeps, and the mark that dropping the others needs."""
    live = {i: e for i, e in scene.entries.items() if scene.now < until(scene, i, e)}
    first_seen = {
        i: scene.first_seen.get(i, scene.now) for i, e in live.items() if isinstance(e, Ahead) and i not in scene.mine
    }
    certain_until = scene.now - WINDOW - SLACK  # others' grants first seen before this can take nothing more
    granted = {e.gang for e in live.values() if isinstance(e, Places)}  # gangs some of whose places a grant holds
    back = given_back(scene, live)
    lower, upper = dict(scene.used), dict(scene.used)
    keep: dict[str, LedgerEntry] = {}
    mark = scene.mark
    for entry_id, held in live.items():
        held = back.get(entry_id, held)
        entry = released(scene, held) if isinstance(held, Held) and not whole(scene, entry_id, held) else held
        grant = scene.mine.get(entry_id)
        taken = scene.taken.get(entry_id)
        closing = grant is not None and grant.closing
        # this worker knows what went into its own grants; an open one may still take up to its amounts
        seen = taken.amounts if taken is not None else None
        at_least = unseen(grant.spent if grant is not None else entry.amounts, seen)
        at_most = at_least if closing or grant is None else unseen(entry.amounts, seen)
        accumulate(upper, at_most)
        certain = grant is not None or not isinstance(entry, Ahead) or first_seen[entry_id] <= certain_until
        if certain:
            accumulate(lower, at_least)
        placed = isinstance(entry, Held) and entry.hold.group in granted  # a grant may give it places back
        if certain and (closing or grant is None) and is_zero(at_least) and not placed:
            mark = max(mark, taken.rv if taken is not None else mark)  # its Pods took all its room: drop it
        elif grant is not None and closing:
            keep[entry_id] = entry.closed(grant.spent, grant.tags)
        else:
            keep[entry_id] = entry
    return Account(live, lower, upper, keep, mark, first_seen)


def given_back(scene: Scene, live: Mapping[str, LedgerEntry]) -> dict[str, Held]:
    """The holds that this worker's closing gang grants give their unused places back to, as they are after it:
    each place one member fewer, and ``each`` more room (counted in this decision, so nothing else takes it)."""
    out: dict[str, Held] = {}
    for grant in scene.mine.values():
        hold = out.get(grant.hold) or live.get(grant.hold)
        # still open: a write that closed it (its answer lost) gave them back already
        if not (grant.closing and isinstance(live.get(grant.id), Places) and isinstance(hold, Held)):
            continue
        places = grant.slots - grant.count
        if places <= 0 or hold.hold.group != grant.gang:
            continue
        room = times(hold.hold.each, places)
        members = replace(hold.hold, members=hold.hold.members - places)
        out[grant.hold] = replace(hold, amounts=plus(hold.amounts, room), hold=members)
    return out


def released(scene: Scene, entry: Held) -> Reserved:
    """A hold whose group object is gone, or whose places' life is over: its members' room only, an ordinary entry
    that lives the reservation TTL from each reader's sight of it as such (its Pods drop it sooner)."""
    return entry.released(round(scene.wall + scene.ttl, 1), scene.ttl)


def life(scene: Scene, entry: LedgerEntry) -> float:
    """How long ``entry`` holds room from this worker's first sight: its ``ttl``; one written by the previous
    version has none, and holds the longest any of ours would (a grant's)."""
    return entry.ttl if entry.ttl is not None else scene.ttl + WINDOW


def until(scene: Scene, entry_id: str, entry: LedgerEntry) -> float:
    """When ``entry`` stops holding room here (this worker's monotonic clock): its life from first sight; a hold
    also the reservation TTL from its last member's join seen here, for that member's room while it is on its way
    (places or not: a join renews no place, ``places_until``)."""
    first = scene.first_seen.get(entry_id, scene.now)
    if not isinstance(entry, Held):
        return first + life(scene, entry)
    return max(places_until(scene, entry_id, entry), scene.renewed.get(entry_id, first) + scene.ttl)


def places_until(scene: Scene, entry_id: str, entry: Held) -> float:
    """When a hold stops holding room for the members still to come: its life from the last sight of a Pod that
    carries its id (or of the hold), CAP lives from its first sight at most. A member's Pod seen renews it, never a
    join alone: a member admitted and never stored (a later admission stage refused it) renews nothing, and no run of
    members holds the namespace's room longer than CAP lives (docs/quota.md, "Gangs")."""
    first = scene.first_seen.get(entry_id, scene.now)
    taken = scene.taken.get(entry_id)
    seen = max(first, taken.since) if taken is not None else first
    return min(seen, first + (CAP - 1) * life(scene, entry)) + life(scene, entry)


def whole(scene: Scene, entry_id: str, entry: Held) -> bool:
    """A hold still holds its places: its group object is there, and their life is not over."""
    return entry.hold.group not in scene.gone and scene.now < places_until(scene, entry_id, entry)
