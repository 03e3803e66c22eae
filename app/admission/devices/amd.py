"""AMD GPUs (backend ``AMD``, device-config section ``amd``): count, memory and a compute-unit percentage, the devices
registered on Nodes in HAMi's JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from app.admission.devices.base import (
    ConfigSection,
    CountMemoryCore,
    DeviceRequestError,
    QuotaRequest,
    whole_in_range,
)
from app.admission.devices.registered import DeviceRequest, RegisteredFits, share
from app.admission.edit import ContainerEdit, PodEdit
from app.admission.fits import Registered
from app.admission.quantity import INT32_MAX

WHOLE_CARD_PERCENTAGE = 100


@dataclass(frozen=True)
class AMD(RegisteredFits, CountMemoryCore):
    """HAMi's AMD rules: limits only; the percentage is checked when a count is asked for. Its filter (pkg/device/amd
    Fit) for fits nowhere."""

    key: str = "AMD"
    register_name = "hami.io/node-amd-register"
    noun, short = "AMD GPU", "GPU"
    type_keys = ("amd.com/use-gputype", "amd.com/nouse-gputype")
    id_keys = (("amd.com/use-gpu-uuid", "amd.com/nouse-gpu-uuid"),)

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        if self.count_name in ctr.limits and self.core_name in ctr.limits:
            if whole_in_range(ctr.limit(self.core_name), 1, 100) is None:
                raise DeviceRequestError(f"{self.core_name} must be an integer percentage between 1 and 100")
        return not self.resource_names.isdisjoint(ctr.limits)

    def quota_request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        """Counted only with a device count in limits; a missing percentage means the whole card."""
        nums = whole_in_range(ctr.limit(self.count_name), 1, INT32_MAX) if self.count_name else None
        if nums is None:
            return None
        memory = ctr.limit(self.memory_name) if self.memory_name else None
        percentage = ctr.limit_or_request(self.core_name) if self.core_name else None
        cores = WHOLE_CARD_PERCENTAGE if percentage is None else whole_in_range(percentage, 1, 100)
        if cores is None:
            return None
        return QuotaRequest(nums=nums, memory=0 if memory is None else memory.value, cores=cores)

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> DeviceRequest | None:
        """GenerateResourceRequests, limits only: a count of 1 to 2^31-1, memory a whole 0 to 2^31-1 MiB (0 or none:
        the whole card), a core percentage of 1 to 100, else no request (its cores: ``takes``)."""
        nums = whole_in_range(ctr.limit(self.count_name), 1, INT32_MAX) if self.count_name else None
        if nums is None:
            return None
        memory = ctr.limit(self.memory_name) if self.memory_name else None
        mib = 0 if memory is None else whole_in_range(memory, 0, INT32_MAX)
        percentage = ctr.limit(self.core_name) if self.core_name else None
        if mib is None or (percentage is not None and whole_in_range(percentage, 1, 100) is None):
            return None
        return replace(share(self.selected(annotations), nums, mib, 0), cores=None)

    def takes(self, request: DeviceRequest, device: Registered) -> int:
        """The Fit asks a share of the card's cores, at least one, at most all: an empty card only needs some."""
        return int(device.cores > 0 and super().takes(request, device))

    def lacking(self, head: str, request: DeviceRequest, chosen: list[Registered]) -> str:
        if any(device.cores > 0 for device in chosen):
            return ""
        return f"{head} {self.count_name}; no registered AMD GPU it allows has any cores"


def build(root: ConfigSection) -> tuple[AMD, ...]:
    """The AMD backend from the ``amd`` section."""
    return (AMD.from_config(root.section("amd")),)
