"""Quota reservations in one Lease per quota'd namespace, written with resourceVersion compare-and-swap.

The Lease ``hami-quota-<namespace>`` lives in the webhook's own namespace, so the webhook's write access
stays inside it. Its annotation ``hami.io/quota-ledger`` holds
``{id: {"ttl": s, "expires": unix s, "amounts": {resource: amount}, "open": true?, "hold": {...}?, "gang": key?}}``
(a hold: ``{"group", "size", "members", "each", "joined"?, "declared"?}``):
room set aside for Pods admitted (or, while open, about to be admitted) that some worker may not have seen yet; the
Pods carry the id in their ``hami.io/quota-reservation`` annotation. An entry with a ``hold`` is a gang's: its
first member wrote it with room for the whole gang, and its later members take their room from it (Hold); an open
entry with a ``gang`` is a grant of some of that hold's places (app/quota/core/scene.py's Grant).
Each reader holds an entry's room for ``ttl`` seconds from when it first saw the entry (a hold: since it first saw
its last member's write), on its own monotonic clock; ``expires`` (the writer's wall clock plus ``ttl``) is
written only for the previous version's readers, which judge by it, and never read
(docs/rules.md#no-clock-but-its-own). ``hami.io/quota-ledger-mark`` is the resourceVersion up to which a worker
must have seen the namespace's Pods before it decides on this ledger: an entry is dropped once the writer has seen
its Pods take all its room, and the mark moves to their resourceVersion,
so every reader counts the Pods instead. ``hami.io/quota-ledger-wanted`` counts the times a worker could
not decide because open grants held the room: each raise asks their holders to close them. Every worker of
every replica decides against the same object: a write that lost a race gets 409 Conflict and decides
again from the fresh state (docs/rules.md#no-over-admission-under-concurrency).

This module is the ledger's encoding only (no I/O, no Kubernetes client): app/quota/lease.py reads and writes it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.quota.core.amounts import Amounts, times

LEDGER_ANNOTATION = "hami.io/quota-ledger"
MARK_ANNOTATION = "hami.io/quota-ledger-mark"
WANTED_ANNOTATION = "hami.io/quota-ledger-wanted"
# The namespace's sealing key (app/quota/core/seal.py): random, stored by the Lease's first write of this version,
# never changed; only readers of the webhook's own namespace's Leases can read it.
KEY_ANNOTATION = "hami.io/quota-ledger-key"
LEDGER_PREFIX = "hami-quota-"
MANAGED_BY_LABEL = {"app.kubernetes.io/managed-by": "hami-webhook"}  # on every ledger Lease
MANAGED_BY = ",".join(f"{k}={v}" for k, v in MANAGED_BY_LABEL.items())  # its selector, for the feed's watch
# The API server refuses more than 256 KiB of annotations on an object; this leaves room for the mark and keys.
MAX_LEDGER_BYTES = 250_000


JOINERS = 16  # request uids a hold lists of its last joiners: a join decided again within seconds is one of them


@dataclass(frozen=True)
class Hold:
    """A gang's room in its entry: ``size`` members of ``group`` (a key of app/quota/core/gang.py), ``members`` of
    them admitted so far or handed to a grant of its places, ``each`` the first member's charge. The entry's amounts
    are what its members were charged plus ``each`` for every member still to come (``unfilled``); a place handed to
    a grant takes its room along. ``joined``: the request uids of its last JOINERS members to join it through the
    ledger, so a join decided again (its write's answer lost and read again, or the API server sending the request
    again, to any replica) finds itself there and is not joined twice. ``declared``: the size its first member
    declared on itself (Kueue's total count; 0: a group object's), which every later member must declare too."""

    group: str
    size: int
    members: int
    each: Amounts
    joined: tuple[str, ...] = ()
    declared: int = 0

    def unfilled(self) -> Amounts:
        return times(self.each, max(self.size - self.members, 0))


@dataclass(frozen=True)
class Reservation:
    """Amounts set aside for the Pods that will carry this entry's id, for ``ttl`` seconds from each reader's
    first sight (None: written by the previous version, which wrote no ``ttl``: the reader's own TTL applies).
    ``expires`` is for the previous version's readers only.

    Closed (``open`` false): the amounts of Pods already admitted. Open: a grant, room a worker took ahead and
    may still admit into, on its own, for a short window after writing it; it closes it by writing what it
    admitted. Others count an open entry as wholly taken, but not as certainly taken (see app/quota/core/scene.py).
    """

    expires: float
    amounts: Amounts
    open: bool = False
    ttl: float | None = None
    hold: Hold | None = None
    gang: str = ""  # open: a grant of this gang's places, which only its members go into
    # the request uids admitted into it, where its id is none of theirs (a batch's; a grant's once closed): a request
    # the API server sends again, to any replica, finds its room here (docs/rules.md#charged-once-per-pod)
    uids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ledger:
    """The ledger as read: its entries, its mark, and the Lease it came from (None: not created yet)."""

    namespace: str
    entries: dict[str, Reservation]
    lease: dict[str, Any] | None
    rv: int = -1  # the Lease's resourceVersion (-1: not created yet)
    mark: int = 0
    wanted: int = 0  # raised by a worker that cannot decide while grants hold room: their holders close them
    key: str = ""  # the sealing key ("": none stored yet; the next write stores one)


def resource_version(text: Any) -> int:
    """A resourceVersion as a number (etcd's revision, which the API server compares the same way); -1 when
    it is not one, so nothing is ever dropped on its account."""
    try:
        return int(text)
    except (TypeError, ValueError):
        return -1


def decode(namespace: str, lease: Mapping[str, Any]) -> Ledger:
    """A ledger Lease as stored."""
    meta = lease.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    try:
        raw = json.loads(annotations.get(LEDGER_ANNOTATION) or "{}")
    except ValueError:
        raw = {}
    mark = max(resource_version(annotations.get(MARK_ANNOTATION) or 0), 0)
    wanted = max(resource_version(annotations.get(WANTED_ANNOTATION) or 0), 0)
    rv = resource_version(meta.get("resourceVersion"))
    key = annotations.get(KEY_ANNOTATION)
    return Ledger(namespace, _entries(raw), dict(lease), rv, mark, wanted, key if isinstance(key, str) else "")


def encode(entries: Mapping[str, Reservation]) -> str:
    """The annotation's text (compact: it is read and written on every admission)."""
    return json.dumps({uid: _encoded(e) for uid, e in entries.items()}, separators=(",", ":"))


def _encoded(entry: Reservation) -> dict[str, Any]:
    out: dict[str, Any] = {} if entry.ttl is None else {"ttl": entry.ttl}
    out |= {"expires": entry.expires, "amounts": entry.amounts}
    if entry.open:
        out["open"] = True
    if entry.gang:
        out["gang"] = entry.gang
    if entry.uids:
        out["uids"] = list(entry.uids)
    if entry.hold is not None:
        hold = entry.hold
        out["hold"] = {"group": hold.group, "size": hold.size, "members": hold.members, "each": hold.each}
        if hold.joined:
            out["hold"]["joined"] = list(hold.joined)
        if hold.declared:
            out["hold"]["declared"] = hold.declared
    return out


def _entries(raw: Any) -> dict[str, Reservation]:
    """Parse the annotation; malformed entries are dropped (they can only have been written by hand)."""
    out: dict[str, Reservation] = {}
    if not isinstance(raw, dict):
        return out
    for uid, entry in raw.items():
        try:
            amounts = {str(k): int(v) for k, v in entry["amounts"].items()}
            opened = entry.get("open") is True
            gang = str(entry.get("gang") or "")
            uids = tuple(str(u) for u in entry.get("uids") or ())
            out[str(uid)] = Reservation(float(entry["expires"]), amounts, opened, _ttl(entry), _hold(entry), gang, uids)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return out


def _hold(entry: Mapping[str, Any]) -> Hold | None:
    """An entry's gang hold (None: an ordinary entry). Raises on a malformed one: the entry is dropped."""
    raw = entry.get("hold")
    if raw is None:
        return None
    each = {str(k): int(v) for k, v in raw["each"].items()}
    joined = tuple(str(uid) for uid in raw.get("joined") or ())[-JOINERS:]
    return Hold(str(raw["group"]), int(raw["size"]), int(raw["members"]), each, joined, int(raw.get("declared") or 0))


def _ttl(entry: Mapping[str, Any]) -> float | None:
    """An entry's ``ttl``; None when it has none (the previous version's) or one no writer of ours writes."""
    ttl = entry.get("ttl")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        return None
    return float(ttl)
