"""The resource arithmetic of quota, in one place: amounts per quota resource name, added, taken away, scaled and
compared, as Kubernetes' quota helpers do (``k8s.io/apiserver/pkg/quota/v1/resources.go``: Add, Subtract,
SubtractWithNonNegativeResult, Max, IsZero). Everything else in app/quota counts with these and writes no dict
arithmetic of its own.

The decision, the feed's tables and a worker's grants all count with these; nothing here knows where the amounts
came from (a Pod, a ledger entry, a ResourceQuota). A name missing from an amounts mapping is 0.
"""

from __future__ import annotations

from collections.abc import Mapping

Amounts = dict[str, int]
"""Quota resource name -> amount in the units the limit is compared in (memory already scaled)."""


def accumulate(total: Amounts, amounts: Mapping[str, int]) -> None:
    """Add ``amounts`` into ``total`` in place."""
    for name, amount in amounts.items():
        total[name] = total.get(name, 0) + amount


def plus(a: Mapping[str, int], b: Mapping[str, int]) -> Amounts:
    """``a`` + ``b``, a new mapping."""
    out = dict(a)
    accumulate(out, b)
    return out


def minus(a: Mapping[str, int], b: Mapping[str, int]) -> Amounts:
    """``a`` - ``b`` over ``a``'s names (may go below 0: room left after spending)."""
    return {name: amount - b.get(name, 0) for name, amount in a.items()}


def beyond(a: Mapping[str, int], b: Mapping[str, int]) -> Amounts:
    """``a`` - ``b`` over ``a``'s names, never below 0: what ``a`` holds that ``b`` does not cover."""
    return {name: max(amount - b.get(name, 0), 0) for name, amount in a.items()}


def times(a: Mapping[str, int], factor: int) -> Amounts:
    """``a`` for ``factor`` Pods (or places) alike."""
    return {name: amount * factor for name, amount in a.items()}


def per(a: Mapping[str, int], count: int) -> Amounts:
    """One of ``count`` equal shares of ``a``, rounded down (a place of a gang's grant)."""
    return {name: amount // count for name, amount in a.items()}


def larger(a: Mapping[str, int], b: Mapping[str, int]) -> Amounts:
    """The larger of ``a`` and ``b`` per name (a Pod's peak: its init containers' against its containers')."""
    out = dict(a)
    for name, amount in b.items():
        out[name] = max(out.get(name, 0), amount)
    return out


def within(asked: Mapping[str, int], room: Mapping[str, int]) -> bool:
    """``asked`` fits ``room`` in every name it asks."""
    return all(amount <= room.get(name, 0) for name, amount in asked.items())


def is_zero(a: Mapping[str, int]) -> bool:
    """Nothing in any name."""
    return not any(a.values())


def unseen(amounts: Mapping[str, int], seen: Mapping[str, int] | None) -> Amounts:
    """What a reservation of ``amounts`` holds beyond what its Pods were ``seen`` to take (None: none seen)."""
    return dict(amounts) if seen is None else beyond(amounts, seen)
