"""Enflame GCUs: whole cards (backend ``GCU``) and DRS slices or memory/core shares (backend ``Enflame``).

Both read the device-config section ``enflame``. Unlike every other vendor, the DRS
backend falls back to built-in resource names when the section leaves them empty,
so it is always active (docs/rules.md#an-unconfigured-vendor-is-inert, #enflame).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
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
from app.admission.devices.registered import DeviceRequest, RegisteredFits, go_int32
from app.admission.edit import ContainerEdit, PodEdit
from app.admission.fits import Profile, Registered
from app.admission.quantity import INT32_MAX

DEFAULT_DRS_NAME = "enflame.com/drs-gcu"
DEFAULT_MEMORY_NAME = "enflame.com/gcu-memory"
DEFAULT_CORE_NAME = "enflame.com/gcu-core"


@dataclass(frozen=True)
class DrsRequest(DeviceRequest):
    """A DRS request: the profile HAMi picks for it is asked by slices, else by memory (GB, or MiB when larger than
    twice the largest profile's GB) and core percentage (0: any)."""

    slices: int = 0
    spec_memory: int = 0
    spec_cores: int = 0


def drs_pick(profiles: tuple[Profile, ...], request: DrsRequest) -> Profile | None:
    """HAMi's selectProfileByRequest on a node's profiles (ordered by slices, then memory): the first of the asked
    slices, or the first with the memory and cores asked; None when none is, or HAMi's Fit refuses the one picked."""
    ordered = sorted(profiles, key=lambda p: (p.slices, p.memory))
    if not ordered:
        return None
    if request.slices:
        chosen = next((p for p in ordered if p.slices == request.slices), None)
    else:
        largest, memory = ordered[-1].memory // 1024, request.spec_memory
        if memory > 0 and largest > 0 and memory > largest * 2:
            memory = math.ceil(memory / 1024)
        chosen = next(
            (
                p
                for p in ordered
                if (memory <= 0 or p.memory // 1024 >= memory)
                and (request.spec_cores <= 0 or p.cores >= request.spec_cores)
            ),
            None,
        )
    return chosen if chosen is not None and chosen.memory // 1024 <= INT32_MAX // 1024 else None


@dataclass(frozen=True)
class EnflameDRS(RegisteredFits, OwnsItsQuotaNames):
    """HAMi's Enflame DRS rules: a slice count, or else a memory and/or core-percentage share of one card. Its
    filter (pkg/device/enflame device.go Fit) for fits nowhere: one device, the node's profile picked for the
    request, a device by ids; every profile fits every device of its node (its memory and cores are the largest)."""

    count_name: str
    memory_name: str
    core_name: str
    key: str = "Enflame"
    register_name = "enflame.com/gcu-drs-capacity"
    register_format = "drs"
    noun, short = "Enflame DRS device", "device"
    id_keys = (("enflame.com/use-gpuuuid", "enflame.com/nouse-gpuuuid"),)

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

    @cached_property
    def found_by(self) -> tuple[str, ...]:
        return tuple(name for name in (self.count_name, self.memory_name, self.core_name) if name)

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> DrsRequest | None:
        """GenerateResourceRequests: whole DRS slices above 0 (up to 2^31-1, else no request), else memory and cores
        rounded up (Go's int32 of them); neither: no request."""
        asked = replace(self.selected(annotations, DrsRequest), nums=1, memory=None, cores=None)
        slices = ctr.limit_or_request(self.count_name) if self.count_name else None
        whole = None if slices is None else slices.whole
        if whole is not None and whole > 0:
            return None if whole > INT32_MAX else replace(asked, slices=whole)
        memory = ctr.limit_or_request(self.memory_name) if self.memory_name else None
        cores = ctr.limit_or_request(self.core_name) if self.core_name else None
        if memory is None and cores is None:
            return None
        spec = [0 if amount is None else amount.value for amount in (memory, cores)]
        if any(value > INT32_MAX for value in spec):
            return None
        return replace(asked, spec_memory=go_int32(spec[0]), spec_cores=go_int32(spec[1]))

    def takes(self, request: DeviceRequest, device: Registered) -> int:
        """A device takes the container when its node has a profile for it (and the ids allow it)."""
        assert isinstance(request, DrsRequest)
        return int(drs_pick(device.profiles, request) is not None and super().takes(request, device))

    def lacking(self, head: str, request: DeviceRequest, chosen: list[Registered]) -> str:
        """No node's profiles have one for the request: what it asked, and the profiles registered (the largest
        first, as many as the line holds)."""
        assert isinstance(request, DrsRequest)
        found = sorted({(p.slices, p.memory, p.name) for d in chosen for p in d.profiles}, reverse=True)
        names = ", ".join(name for _, _, name in found)
        if request.slices:
            return f"{head} {self.count_name} {request.slices}; registered profiles: {names}"
        asked = f"{self.memory_name} {request.spec_memory}, {self.core_name} {request.spec_cores}"
        return f"{head} {asked}; registered profiles: {names}"


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
