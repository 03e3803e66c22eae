"""The resource arithmetic of quota, in one place: amounts per quota resource name, added and compared.

The decision, the feed's tables and a worker's grants all count with these; nothing here knows where the amounts
came from (a Pod, a ledger entry, a ResourceQuota).
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


def unseen(amounts: Mapping[str, int], seen: Mapping[str, int] | None) -> Amounts:
    """What a reservation of ``amounts`` holds beyond what its Pods were ``seen`` to take (None: none seen)."""
    if seen is None:
        return dict(amounts)
    return {name: max(amount - seen.get(name, 0), 0) for name, amount in amounts.items()}
