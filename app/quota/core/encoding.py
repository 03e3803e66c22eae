"""Quota reservations in one Lease per quota'd namespace, written with resourceVersion compare-and-swap.

The Lease ``hami-quota-<namespace>`` lives in the webhook's own namespace, so the webhook's write access
stays inside it. Its annotation ``hami.io/quota-ledger`` holds
``{id: {"ttl": s, "expires": unix s, "amounts": {resource: amount}, "open": true?, "hold": {...}?, "gang": key?,
"uids": tags?}}`` (a hold: ``{"group", "size", "members", "each", "joined": tags?, "declared"?}``; ``tags``: the
requests it lists, their 12-character tags one after the other, app/quota/core/entries.py's ``tag``):
room set aside for Pods admitted (or, while open, about to be admitted) that some worker may not have seen yet; the
Pods carry the id in their ``hami.io/quota-reservation`` annotation. Its fields say its kind
(app/quota/core/entries.py): with a ``hold``, a gang's (``Held``); ``open``, a grant (``Ahead``), of some of a
hold's places with a ``gang`` (``Places``); else closed (``Reserved``).
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
from functools import cached_property
from typing import Any

from app.quota.core.entries import JOINERS, TAG_CHARS, Ahead, Held, Hold, LedgerEntry, Places, Reserved

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


@dataclass(frozen=True)
class Ledger:
    """The ledger as read: its entries, its mark, and the Lease it came from (None: not created yet)."""

    namespace: str
    entries: dict[str, LedgerEntry]
    lease: dict[str, Any] | None
    rv: int = -1  # the Lease's resourceVersion (-1: not created yet)
    mark: int = 0
    wanted: int = 0  # raised by a worker that cannot decide while grants hold room: their holders close them
    key: str = ""  # the sealing key ("": none stored yet; the next write stores one)

    @cached_property
    def gangs(self) -> frozenset[str]:
        """The gangs it holds room for (read with every view of its namespace: counted once per ledger read)."""
        return frozenset(e.hold.group for e in self.entries.values() if isinstance(e, Held))


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


def encode(entries: Mapping[str, LedgerEntry]) -> str:
    """The annotation's text (compact: it is read and written on every admission)."""
    return json.dumps({uid: _encoded(e) for uid, e in entries.items()}, separators=(",", ":"))


def _encoded(entry: LedgerEntry) -> dict[str, Any]:
    out: dict[str, Any] = {} if entry.ttl is None else {"ttl": entry.ttl}
    out |= {"expires": entry.expires, "amounts": entry.amounts}
    if isinstance(entry, Ahead):  # a Places too
        out["open"] = True
        if isinstance(entry, Places):
            out["gang"] = entry.gang
    if entry.tags:
        out["uids"] = "".join(entry.tags)
    if isinstance(entry, Held):
        hold = entry.hold
        out["hold"] = {"group": hold.group, "size": hold.size, "members": hold.members, "each": hold.each}
        if hold.joined:
            out["hold"]["joined"] = "".join(hold.joined)
        if hold.declared:
            out["hold"]["declared"] = hold.declared
    return out


def _entries(raw: Any) -> dict[str, LedgerEntry]:
    """Parse the annotation; malformed entries are dropped (they can only have been written by hand)."""
    out: dict[str, LedgerEntry] = {}
    if not isinstance(raw, dict):
        return out
    for uid, entry in raw.items():
        try:
            out[str(uid)] = _entry(entry)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return out


def _entry(entry: Mapping[str, Any]) -> LedgerEntry:
    """One entry, of the kind its fields say (app/quota/core/entries.py). Raises on a malformed one."""
    expires, ttl = float(entry["expires"]), _ttl(entry)
    amounts = {str(k): int(v) for k, v in entry["amounts"].items()}
    tags = _tags(entry.get("uids"))
    opened, gang, hold = entry.get("open") is True, str(entry.get("gang") or ""), _hold(entry)
    if hold is not None:  # never written open: a hold is one, whatever else a hand wrote beside it
        return Held(expires, amounts, ttl, tags, hold=hold)
    if gang and opened:
        return Places(expires, amounts, ttl, tags, gang=gang)
    return (Ahead if opened else Reserved)(expires, amounts, ttl, tags)


def _hold(entry: Mapping[str, Any]) -> Hold | None:
    """An entry's gang hold (None: an ordinary entry). Raises on a malformed one: the entry is dropped."""
    raw = entry.get("hold")
    if raw is None:
        return None
    each = {str(k): int(v) for k, v in raw["each"].items()}
    joined = _tags(raw.get("joined"))[-JOINERS:]
    return Hold(str(raw["group"]), int(raw["size"]), int(raw["members"]), each, joined, int(raw.get("declared") or 0))


def _tags(raw: Any) -> tuple[str, ...]:
    """The tags a field lists; none from anything but a string of whole tags: its entry still holds its room (a
    request it lists, sent again, is charged again: stricter, never over the limit)."""
    if not isinstance(raw, str) or len(raw) % TAG_CHARS:
        return ()
    return tuple(raw[i : i + TAG_CHARS] for i in range(0, len(raw), TAG_CHARS))


def _ttl(entry: Mapping[str, Any]) -> float | None:
    """An entry's ``ttl``; None when it has none (the previous version's) or one no writer of ours writes."""
    ttl = entry.get("ttl")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        return None
    return float(ttl)
