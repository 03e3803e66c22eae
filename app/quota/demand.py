"""A Pod's demand on namespace device quota: HAMi's fitResourceQuota arithmetic
(docs/rules.md#hamis-quota-arithmetic).

One function serves admission (the mutated Pod) and usage (the Pods the feed
watches), so a Pod counts the same when it is admitted and when it runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.devices.base import Device
from app.edit import PodEdit

Amounts = dict[str, int]
"""Quota resource name -> amount in the units the limit is compared in (memory already scaled)."""


@dataclass(frozen=True)
class Demand:
    """One vendor's share of a Pod: device count, scaled memory and cores, with their quota keys."""

    device: str
    count_name: str
    count: int
    memory_name: str
    memory: int
    memory_factor: int
    cores_name: str
    cores: int


def demands(pod: PodEdit, devices: Sequence[Device]) -> list[Demand]:
    """Per vendor: app containers summed, init containers as a peak, the larger wins (HAMi's quota arithmetic)."""
    out: list[Demand] = []
    named = {name for ctr in pod.containers for side in (ctr.limits, ctr.requests) for name in side}
    apps, inits = pod.app_containers(), pod.init_containers()
    for device in devices:
        names = device.quota_names
        if not (names.memory or names.cores or names.count) or named.isdisjoint(device.resource_names):
            continue
        app = _totals(device, apps, peak=False)
        init = _totals(device, inits, peak=True)
        count, memory, cores = (max(a, i) for a, i in zip(app, init, strict=True))
        if count or memory or cores:
            out.append(
                Demand(device.key, names.count, count, names.memory, memory, names.memory_factor, names.cores, cores)
            )
    return out


def amounts(found: Sequence[Demand]) -> Amounts:
    """The demands keyed by quota resource name, memory first, then cores, then count (the denial's order)."""
    out: Amounts = {}
    for demand in found:
        for name, amount in (
            (demand.memory_name, demand.memory),
            (demand.cores_name, demand.cores),
            (demand.count_name, demand.count),
        ):
            if name and amount:
                out[name] = out.get(name, 0) + amount
    return out


def pod_amounts(pod: Mapping[str, Any], devices: Sequence[Device]) -> Amounts:
    """What a stored Pod holds of its namespace's quota: the admission arithmetic on the Pod as persisted."""
    return amounts(demands(PodEdit(pod), devices))


def _totals(device: Device, containers: Sequence[Any], *, peak: bool) -> tuple[int, int, int]:
    count = memory = cores = 0
    for ctr in containers:
        request = device.quota_request(ctr)
        if request is None or request.nums == 0:
            continue
        values = (request.nums, request.memory * request.nums, request.cores * request.nums)
        if peak:
            count, memory, cores = (max(t, v) for t, v in zip((count, memory, cores), values, strict=True))
        else:
            count, memory, cores = (t + v for t, v in zip((count, memory, cores), values, strict=True))
    return count, memory, cores
