"""Namespace device-quota limits from ResourceQuota objects, and the fit check.

Rules: docs/rules.md#limits-come-from-every-resourcequota, #the-quota-denial-says-why.

Unlike HAMi (only ``limits.<name>``, last writer wins), every key form counts and
every ResourceQuota in the namespace is enforced: the smallest limit wins, as
Kubernetes' own quota does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.admission import quantity
from app.admission.devices.base import Device
from app.quota.core.amounts import Amounts
from app.quota.core.gang import Gang

PREFIXES = ("limits.", "requests.", "")


def quota_factors(devices: Sequence[Device]) -> dict[str, int]:
    """Every vendor's quota resource name -> the factor its limit is scaled by (memory factor, else 1)."""
    factors: dict[str, int] = {}
    for device in devices:
        factors.update(device.quota_names.factors)
    return factors


def hard_limits(hard: Mapping[str, Any], factors: Mapping[str, int]) -> Amounts:
    """One ResourceQuota's ``spec.hard`` as device limits in demand units; unparsable values are skipped."""
    out: Amounts = {}
    for key, raw in hard.items():
        name = next((key[len(p) :] for p in PREFIXES if key.startswith(p) and key[len(p) :] in factors), None)
        if name is None:
            continue
        try:
            # a fractional limit rounds down: stricter, never looser
            limit = quantity.parse(raw).nanos // quantity.NANO * factors[name]
        except quantity.QuantityError:
            continue
        out[name] = min(limit, out.get(name, limit))
    return out


def tightest(limits: Iterable[Amounts]) -> Amounts:
    """The smallest limit per resource over several quota objects."""
    out: Amounts = {}
    for one in limits:
        for name, limit in one.items():
            out[name] = min(limit, out.get(name, limit))
    return out


def set_by(objects: Mapping[str, Amounts]) -> dict[str, tuple[int, str]]:
    """The smallest limit per resource over a namespace's quota objects (by name), and the object that sets it:
    the first name in order among equals, so every reader names the same one."""
    out: dict[str, tuple[int, str]] = {}
    for obj in sorted(objects):
        for name, limit in objects[obj].items():
            if name not in out or limit < out[name][0]:
                out[name] = (limit, obj)
    return out


def limited(limits: Mapping[str, int], requested: Mapping[str, int]) -> bool:
    """The request touches a resource the namespace limits."""
    return any(name in limits for name in requested)


def over(limits: Mapping[str, int], used: Mapping[str, int], requested: Mapping[str, int]) -> tuple[str, int, int]:
    """The first requested resource that does not fit (equal fits): its name, the amount asked and its limit;
    ("", 0, 0) when all fit."""
    for name, amount in requested.items():
        limit = limits.get(name)
        if limit is not None and used.get(name, 0) + amount > limit:
            return name, amount, limit
    return "", 0, 0


def overflow(namespace: str, limits: Mapping[str, int], used: Mapping[str, int], requested: Mapping[str, int]) -> str:
    """The quota denial for the first requested resource that does not fit; "" when all fit, as in
    Verdict.denial."""
    name, amount, limit = over(limits, used, requested)
    if not name:
        return ""
    return (
        f"exceeding resource quota: namespace {namespace} {name} "
        f"used {used.get(name, 0)} + requested {amount} > limit {limit}"
    )


def gang_overflow(
    namespace: str, limits: Mapping[str, int], used: Mapping[str, int], gang: Gang, missing: int, need: Amounts
) -> str:  # fmt: skip
    """The denial of a gang's first member when the room its ``missing`` members ``need`` together does not fit:
    the group, its size, what it needs and what is free; "" when it fits. It says that every member not seen yet is
    counted as large as this one: a gang of mixed sizes, or whose members that ask for no device come later, is
    refused on a figure bigger than its own (docs/rules.md#a-gang-is-admitted-whole-or-not-at-all)."""
    name, amount, limit = over(limits, used, need)
    if not name:
        return ""
    free = max(limit - used.get(name, 0), 0)
    return (
        f"exceeding resource quota: namespace {namespace} {name}: gang {gang.key} of {gang.size} Pods "
        f"needs {amount} for {missing} Pods together, {free} free of limit {limit} "
        f"(each Pod not seen yet counted as large as this one)"
    )
