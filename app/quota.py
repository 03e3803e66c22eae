"""Namespace device quota: what the review asks of it, and the port it asks through.

The review computes a Pod's demand per vendor (HAMi's fitResourceQuota arithmetic)
and hands it to a QuotaPort, which decides and reserves. The port is the seam for
the list/watch-fed, compare-and-swap ledger; until a cluster is reachable the
webhook runs with QuotaOff (decision Q5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.devices.base import Device
from app.edit import PodEdit


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


class QuotaPort(Protocol):
    def admit(self, namespace: str, demands: Sequence[Demand], *, uid: str, dry_run: bool) -> str | None:
        """Check (and, unless ``dry_run``, reserve) ``demands``; a denial message, or None when they fit."""
        ...

    def status(self) -> dict[str, Any]:
        """Readiness detail: ``{"ready": bool, ...}`` for /readyz."""
        ...


class QuotaOff:
    """No Kubernetes API, no quota: every Pod fits, and /readyz says why."""

    def admit(self, namespace: str, demands: Sequence[Demand], *, uid: str, dry_run: bool) -> str | None:
        return None

    def status(self) -> dict[str, Any]:
        return {"ready": True, "quota": "off", "reason": "no Kubernetes API configured"}


def demands(pod: PodEdit, devices: Sequence[Device]) -> list[Demand]:
    """Per vendor: app containers summed, init containers as a peak, the larger wins (HAMi §3.1)."""
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
