"""Enflame GCUs: whole cards (backend ``GCU``) and DRS slices or memory/core shares (backend ``Enflame``).

Both read the device-config section ``enflame``. Unlike every other vendor, the DRS
backend falls back to built-in resource names when the section leaves them empty,
so it is always active (docs/rules.md#an-unconfigured-vendor-is-inert, #enflame).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from app.admission.devices.base import (
    ConfigSection,
    CountDevice,
    Device,
    DeviceRequestError,
    OwnsItsQuotaNames,
    QuotaNames,
    QuotaRequest,
    whole_in_range,
)
from app.admission.edit import ContainerEdit, PodEdit
from app.admission.quantity import INT32_MAX

DEFAULT_DRS_NAME = "enflame.com/drs-gcu"
DEFAULT_MEMORY_NAME = "enflame.com/gcu-memory"
DEFAULT_CORE_NAME = "enflame.com/gcu-core"


@dataclass(frozen=True)
class EnflameDRS(OwnsItsQuotaNames):
    """HAMi's Enflame DRS rules: a slice count, or else a memory and/or core-percentage share of one card."""

    count_name: str
    memory_name: str
    core_name: str
    key: str = "Enflame"

    @classmethod
    def from_config(cls, section: ConfigSection) -> EnflameDRS:
        return cls(
            count_name=section.str("resourceNameDRSGCU") or section.str("resourceNameVGCU") or DEFAULT_DRS_NAME,
            memory_name=section.str("resourceNameGCUMemory") or DEFAULT_MEMORY_NAME,
            core_name=section.str("resourceNameGCUCore") or DEFAULT_CORE_NAME,
        )

    @cached_property
    def quota_names(self) -> QuotaNames:
        return QuotaNames(memory=self.memory_name, cores=self.core_name, count=self.count_name)

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        """Found when any of the three is named in limits or requests; the side that lacks it gets a copy."""
        slices = ctr.limit_or_request(self.count_name)
        if slices is not None:
            if slices.nanos <= 0:
                raise DeviceRequestError(f"{self.count_name} must be greater than 0")
            _fill_both_sides(ctr, self.count_name)
            return True
        memory = ctr.limit_or_request(self.memory_name)
        cores = ctr.limit_or_request(self.core_name)
        if memory is None and cores is None:
            return False
        if memory is not None:
            if memory.value <= 0:
                raise DeviceRequestError(f"{self.memory_name} must be greater than 0")
            _fill_both_sides(ctr, self.memory_name)
        if cores is not None:
            if not 0 < cores.value <= 100:
                raise DeviceRequestError(f"{self.core_name} must be in range (0,100]")
            _fill_both_sides(ctr, self.core_name)
        return True

    def quota_request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        """HAMi's quirk kept: DRS slices are charged as memory (one device, Memreq = slices, no cores)."""
        slices = ctr.limit_or_request(self.count_name)
        if slices is not None:
            whole = whole_in_range(slices, 1, INT32_MAX)
            return None if whole is None else QuotaRequest(nums=1, memory=whole)
        memory = ctr.limit_or_request(self.memory_name)
        cores = ctr.limit_or_request(self.core_name)
        if memory is None and cores is None:
            return None
        return QuotaRequest(
            nums=1,
            memory=0 if memory is None else memory.value,
            cores=0 if cores is None else cores.value,
        )


def _fill_both_sides(ctr: ContainerEdit, name: str) -> None:
    """Copy the amount, as written, into whichever of limits/requests lacks it."""
    if name not in ctr.limits:
        ctr.limits[name] = ctr.requests[name]
    elif name not in ctr.requests:
        ctr.requests[name] = ctr.limits[name]


def build(root: ConfigSection) -> tuple[Device, ...]:
    """The whole-card backend, then the DRS backend, both from the ``enflame`` section."""
    section = root.section("enflame")
    return CountDevice("GCU", section.str("resourceNameGCU")), EnflameDRS.from_config(section)
