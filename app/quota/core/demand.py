"""A Pod's demand on namespace device quota: HAMi's fitResourceQuota per-container arithmetic, summed the
way Kubernetes sums a Pod's effective request (native sidecars included).

One function serves admission (the mutated Pod) and usage (the Pods the feed
watches), so a Pod counts the same when it is admitted and when it runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.admission.devices.base import Device
from app.admission.edit import ContainerEdit, PodEdit
from app.quota.core.amounts import Amounts


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
    """Per vendor, the Pod's effective request (see ``_effective``)."""
    out: list[Demand] = []
    named = {name for ctr in pod.containers for side in (ctr.limits, ctr.requests) for name in side}
    apps, inits = pod.app_containers(), pod.init_containers()
    for device in devices:
        names = device.quota_names
        if not (names.memory or names.cores or names.count) or named.isdisjoint(device.resource_names):
            continue
        count, memory, cores = _effective(device, apps, inits)
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


_Triple = tuple[int, int, int]  # device count, memory, cores


def _effective(device: Device, apps: Sequence[ContainerEdit], inits: Sequence[ContainerEdit]) -> _Triple:
    """Kubernetes' effective request, per resource: app containers and native sidecars (init containers with
    ``restartPolicy: Always``) run together, so they add up; each other init container runs alone beside the
    sidecars started before it; the Pod needs the larger of that init-phase peak and the running sum."""
    sidecars = peak = (0, 0, 0)
    for ctr in inits:
        amounts = _amounts(device, ctr)
        if ctr.sidecar:
            sidecars = _add(sidecars, amounts)
            peak = _max(peak, sidecars)
        else:
            peak = _max(peak, _add(sidecars, amounts))
    running = sidecars
    for ctr in apps:
        running = _add(running, _amounts(device, ctr))
    return _max(running, peak)


def _amounts(device: Device, ctr: ContainerEdit) -> _Triple:
    request = device.quota_request(ctr)
    if request is None or request.nums == 0:
        return 0, 0, 0
    return request.nums, request.memory * request.nums, request.cores * request.nums


def _add(a: _Triple, b: _Triple) -> _Triple:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def _max(a: _Triple, b: _Triple) -> _Triple:
    return max(a[0], b[0]), max(a[1], b[1]), max(a[2], b[2])
