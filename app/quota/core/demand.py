"""A Pod's demand on namespace device quota: HAMi's fitResourceQuota per-container arithmetic, summed the
way Kubernetes sums a Pod's effective request (native sidecars included).

One function serves admission (the mutated Pod) and usage (the Pods the feed
watches), so a Pod counts the same when it is admitted and when it runs. Every amount is named, as in
Kubernetes' quota evaluator (a ResourceList): the vendor says which resources its quota counts
(``QuotaNames.factors``) and what a container asks of each (``QuotaRequest.amounts``); nothing here knows how many
there are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.admission.devices.base import Device, QuotaNames
from app.admission.edit import ContainerEdit, PodEdit
from app.quota.core.amounts import Amounts, accumulate, larger, plus


@dataclass(frozen=True)
class Demand:
    """One vendor's share of a Pod: its non-zero amounts by quota resource name, in the vendor's order."""

    device: str
    amounts: Amounts


def demands(pod: PodEdit, devices: Sequence[Device]) -> list[Demand]:
    """Per vendor, the Pod's effective request (see ``_effective``)."""
    out: list[Demand] = []
    named = {name for ctr in pod.containers for side in (ctr.limits, ctr.requests) for name in side}
    apps, inits = pod.app_containers(), pod.init_containers()
    for device in devices:
        names = device.quota_names
        if named.isdisjoint(device.resource_names) or not names.factors:
            continue
        found = {name: amount for name, amount in _effective(device, names, apps, inits).items() if amount}
        if found:
            out.append(Demand(device.key, found))
    return out


def amounts(found: Sequence[Demand]) -> Amounts:
    """The demands summed by quota resource name, each vendor's in its order (memory, cores, count: the denial's)."""
    out: Amounts = {}
    for demand in found:
        accumulate(out, demand.amounts)
    return out


def pod_amounts(pod: Mapping[str, Any], devices: Sequence[Device]) -> Amounts:
    """What a stored Pod holds of its namespace's quota: the admission arithmetic on the Pod as persisted."""
    return amounts(demands(PodEdit(pod), devices))


def _effective(
    device: Device, names: QuotaNames, apps: Sequence[ContainerEdit], inits: Sequence[ContainerEdit]
) -> Amounts:  # fmt: skip
    """Kubernetes' effective request, per resource: app containers and native sidecars (init containers with
    ``restartPolicy: Always``) run together, so they add up; each other init container runs alone beside the
    sidecars started before it; the Pod needs the larger of that init-phase peak and the running sum."""
    running: Amounts = {}  # the sidecars started so far, then the app containers beside them
    peak: Amounts = {}
    for ctr in inits:
        asked = _asked(device, names, ctr)
        if ctr.sidecar:
            accumulate(running, asked)
            peak = larger(peak, running)
        elif asked:
            peak = larger(peak, plus(running, asked))
    for ctr in apps:
        accumulate(running, _asked(device, names, ctr))
    return larger(running, peak) if peak else running


def _asked(device: Device, names: QuotaNames, ctr: ContainerEdit) -> Amounts:
    request = device.quota_request(ctr)
    return {} if request is None else request.amounts(names)
