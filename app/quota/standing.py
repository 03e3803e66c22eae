"""Where a quota'd namespace stands, per resource: its limit, what its Pods use, what the ledger holds for Pods not
seen yet, and what is free. The gauges (app/quota/feed.py) and ``hami-webhook quota`` (app/quota/command.py) both
count with this, on the same tables the admission decides on, so the three never disagree on the arithmetic.

Pure: no clock (``wall`` is passed in), no I/O. What the figures mean: docs/quota.md ("Looking at quota").
"""

from __future__ import annotations

from dataclasses import dataclass

from app.quota.amounts import unseen
from app.quota.decision import Scene, account
from app.quota.ledger import Snapshot
from app.quota.limits import set_by
from app.quota.tables import PodTable, QuotaTable


@dataclass(frozen=True)
class Figure:
    """One limited resource of one namespace. ``held`` counts every live ledger entry's room beyond what its Pods
    were seen to take, open grants at their full amounts: what any worker that has not taken it counts as taken."""

    resource: str
    limit: int
    quota: str  # the ResourceQuota that sets the limit (the smallest)
    used: int
    held: int

    @property
    def free(self) -> int:
        return max(self.limit - self.used - self.held, 0)


@dataclass(frozen=True)
class Hold:
    """A ledger entry holding room for Pods not seen yet."""

    id: str
    expires: float  # unix seconds


@dataclass(frozen=True)
class Standing:
    namespace: str
    figures: tuple[Figure, ...]  # by resource name
    pods: int  # the Pods counted in ``used``
    oldest: Hold | None  # the hold that expires first, if any


def standing(namespace: str, quotas: QuotaTable, pods: PodTable, ledger: Snapshot | None, wall: float) -> Standing:
    """The namespace's figures from the tables (no figure when it has no device quota) and its ledger as read."""
    limits = set_by(quotas.objects(namespace))
    entries = ledger.entries if ledger is not None else {}
    seen = {i: found for i in entries if (found := pods.held(namespace, i)) is not None}
    used = pods.used(namespace)
    scene = Scene(namespace, {n: v[0] for n, v in limits.items()}, entries, 0, used, seen, wall, 0.0)
    taken = account(scene).upper  # no grant is this reader's: each counts at its full amounts
    holds = [
        Hold(i, e.expires)
        for i, e in entries.items()
        if e.expires > wall and any(unseen(e.amounts, seen[i].amounts if i in seen else None).values())
    ]
    figures = tuple(
        Figure(name, limit, quota, used.get(name, 0), taken.get(name, 0) - used.get(name, 0))
        for name, (limit, quota) in sorted(limits.items())
    )
    oldest = min(holds, key=lambda h: (h.expires, h.id)) if holds else None
    return Standing(namespace, figures, pods.count(namespace), oldest)
