"""Where a quota'd namespace stands, per resource: its limit, what its Pods use, what the ledger holds for Pods not
seen yet, and what is free. The gauges (app/quota/feed/feed.py) and ``hami-webhook quota`` (app/quota/command.py) both
count with this, on the same tables the admission decides on, so the three never disagree on the arithmetic.

Pure: no clock (``now``, the reader's monotonic seconds, and its first sights are passed in; docs/rules.md,
"No clock but its own"), no I/O. What the figures mean: docs/quota.md ("Looking at quota").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from app.quota.core.amounts import Amounts, accumulate, unseen
from app.quota.core.decision import Scene, Taken, account, life
from app.quota.core.encoding import GangHold, Snapshot
from app.quota.core.limits import set_by


class Quotas(Protocol):
    """The device limits per ResourceQuota (app/quota/feed/tables.py's QuotaTable): what standing reads of them."""

    def objects(self, namespace: str) -> dict[str, Amounts]: ...


class Pods(Protocol):
    """The Pods' usage (app/quota/feed/tables.py's PodTable): what standing reads of it. Declared here so the core
    never imports the feed that calls it."""

    def used(self, namespace: str) -> Amounts: ...

    def taken(self, namespace: str, reservation: str) -> Taken | None: ...

    def count(self, namespace: str) -> int: ...


@dataclass(frozen=True)
class Figure:
    """One limited resource of one namespace. ``held`` counts every live ledger entry's room beyond what its Pods
    were seen to take, open grants at their full amounts: what any worker that has not taken it counts as taken."""

    resource: str
    limit: int
    quota: str  # the ResourceQuota that sets the limit (the smallest)
    used: int
    held: int
    gangs: int = 0  # of ``held``: room held for gangs' members not created yet (their holds' unfilled part)

    @property
    def free(self) -> int:
        return max(self.limit - self.used - self.held, 0)


@dataclass(frozen=True)
class Hold:
    """A ledger entry holding room for Pods not seen yet."""

    id: str
    left: float  # seconds until this reader lets it go: its life from this reader's first sight of it


@dataclass(frozen=True)
class Standing:
    namespace: str
    figures: tuple[Figure, ...]  # by resource name
    pods: int  # the Pods counted in ``used``
    oldest: Hold | None  # the hold let go first, if any
    gangs: tuple[GangHold, ...] = ()  # the gangs holding room, by group


def standing(
    namespace: str,
    quotas: Quotas,
    pods: Pods,
    ledger: Snapshot | None,
    *,
    now: float,
    ttl: float,
    first_seen: Mapping[str, float],
) -> Standing:
    """The namespace's figures from the tables (no figure when it has no device quota) and its ledger as read, an
    entry live for its life from ``first_seen`` (an entry not in it: first seen ``now``, as by a reader that just
    started, which holds its room the longest)."""
    limits = set_by(quotas.objects(namespace))
    entries = ledger.entries if ledger is not None else {}
    seen = {i: found for i in entries if (found := pods.taken(namespace, i)) is not None}
    used = pods.used(namespace)
    limited = {n: v[0] for n, v in limits.items()}
    scene = Scene(namespace, limited, entries, 0, used, seen, 0.0, now, ttl, first_seen=first_seen)
    counted = account(scene)
    taken = counted.upper  # no grant is this reader's: each counts at its full amounts
    holds = [
        Hold(i, first_seen.get(i, now) + life(scene, e) - now)
        for i, e in counted.live.items()
        if any(unseen(e.amounts, seen[i].amounts if i in seen else None).values())
    ]
    gangs = tuple(sorted((e.hold for e in counted.keep.values() if e.hold is not None), key=lambda h: h.group))
    unfilled: Amounts = {}
    for gang in gangs:
        accumulate(unfilled, gang.unfilled())
    figures = tuple(
        Figure(name, limit, quota, used.get(name, 0), taken.get(name, 0) - used.get(name, 0), unfilled.get(name, 0))
        for name, (limit, quota) in sorted(limits.items())
    )
    oldest = min(holds, key=lambda h: (h.left, h.id)) if holds else None
    return Standing(namespace, figures, pods.count(namespace), oldest, gangs)
