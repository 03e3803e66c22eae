"""Where a quota'd namespace stands, per resource: its limit, what its Pods use, what the ledger holds for Pods not
seen yet, and what is free. The gauges (app/quota/feed/gauges.py) and ``hami-webhook quota`` (app/quota/command.py)
count it from the View a decision reads (app/quota/core/scene.py), so the three never disagree on the arithmetic.

Pure: no clock (``now``, the reader's monotonic seconds, and its first sights are passed in; docs/rules.md,
"No clock but its own"), no I/O. What the figures mean: docs/quota.md ("Looking at quota").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.quota.core.amounts import Amounts, accumulate, unseen
from app.quota.core.encoding import Ledger
from app.quota.core.entries import Held, Hold, Places
from app.quota.core.limits import set_by
from app.quota.core.scene import View, account, until


@dataclass(frozen=True)
class Figure:
    """One limited resource of one namespace. ``held`` counts every live ledger entry's room beyond what its Pods
    were seen to take, open grants at their full amounts: what any worker that has not taken it counts as taken."""

    resource: str
    limit: int
    quota: str  # the ResourceQuota that sets the limit (the smallest)
    used: int
    held: int
    gangs: int = 0  # of ``held``: room held for gangs' members not created yet (holds' unfilled part, their places
    # in grants not taken yet)

    @property
    def free(self) -> int:
        return max(self.limit - self.used - self.held, 0)


@dataclass(frozen=True)
class Expiry:
    """The ledger entry that lets its room go first, and when: a Standing's oldest."""

    id: str
    left: float  # seconds until this reader lets it go: its life from this reader's first sight of it


@dataclass(frozen=True)
class Standing:
    namespace: str
    figures: tuple[Figure, ...]  # by resource name
    pods: int  # the Pods counted in ``used``
    oldest: Expiry | None  # the entry let go first, if any
    gangs: tuple[Hold, ...] = ()  # the gangs holding room, by group


def standing(view: View, quotas: Mapping[str, Amounts], pods: int, *, now: float, ttl: float) -> Standing:
    """The namespace's figures from the ``view`` a decision would read (its ``taken`` for every ledger entry), with
    ``quotas`` (its device ResourceQuotas by name: which sets each limit; none, no figure) and ``pods`` (how many
    Pods ``used`` counts). An entry not first seen yet counts from ``now``, as by a reader that just started,
    which holds its room the longest."""
    limits = set_by(quotas)
    scene = view.scene(view.ledger or Ledger(view.namespace, {}, None), wall=0.0, now=now, ttl=ttl, mine={})
    seen, used = scene.taken, scene.used
    counted = account(scene)
    taken = counted.upper  # no grant is this reader's: each counts at its full amounts
    holds = [
        Expiry(i, until(scene, i, e) - now)
        for i, e in counted.live.items()
        if any(unseen(e.amounts, seen[i].amounts if i in seen else None).values())
    ]
    gangs = tuple(sorted((e.hold for e in counted.keep.values() if isinstance(e, Held)), key=lambda h: h.group))
    unfilled: Amounts = {}
    for gang in gangs:
        accumulate(unfilled, gang.unfilled())
    for i, e in counted.keep.items():  # places of a hold in a worker's grant: room for members not created yet
        if isinstance(e, Places):
            accumulate(unfilled, unseen(e.amounts, seen[i].amounts if i in seen else None))
    figures = tuple(
        Figure(name, limit, quota, used.get(name, 0), taken.get(name, 0) - used.get(name, 0), unfilled.get(name, 0))
        for name, (limit, quota) in sorted(limits.items())
    )
    oldest = min(holds, key=lambda h: (h.left, h.id)) if holds else None
    return Standing(view.namespace, figures, pods, oldest, gangs)
