"""Kunlunxin XPUs: whole cards (backend ``kunlun``) and vXPUs (backend ``XPU``), section ``kunlun``.

A vXPU is a fixed quarter, half or whole card, so its memory request is rounded up
to the next partition size (docs/rules.md#kunlunxin).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property

from app.admission.devices.base import (
    ConfigSection,
    CountDevice,
    Device,
    OwnsItsQuotaNames,
    QuotaNames,
    QuotaRequest,
    whole_in_range,
)
from app.admission.devices.registered import DeviceRequest, RegisteredFits, go_int32, whole
from app.admission.edit import ContainerEdit, PodEdit, Why
from app.admission.notices import ROUNDED
from app.admission.quantity import INT32_MAX

PARTITION_MEMORY = (24576, 49152, 98304)
CARD_MEMORY = PARTITION_MEMORY[-1]
PARTITION = Why("vXPU partition size", replaced=ROUNDED)


def partition(memory: int) -> int:
    """The smallest partition holding ``memory`` MiB; a whole card for anything larger."""
    return next((size for size in PARTITION_MEMORY if memory <= size), CARD_MEMORY)


@dataclass(frozen=True)
class KunlunVXPU(RegisteredFits, OwnsItsQuotaNames):
    """HAMi's vXPU rules: found by vcount in limits; vmemory is rounded up in limits and requests. Its filter
    (pkg/device/kunlun vdevice.go Fit, FitVXPU, topo.go graghSelect) for fits nowhere: 1, 2, 4 or 8 vXPUs, each on
    a healthy XPU with the partition's memory, ids by both pairs of annotations; no split count, no cores."""

    count_name: str
    vmemory_name: str
    key: str = "XPU"
    register_name = "hami.io/node-register-xpu"
    noun, short = "Kunlunxin XPU", "XPU"
    id_keys = (
        ("hami.io/use-xpu-uuid", "hami.io/no-use-xpu-uuid"),
        ("baidu.com/use-gpuuuid", "baidu.com/nouse-gpuuuid"),
    )
    counts = (1, 2, 4, 8)
    split_checked = False

    @classmethod
    def from_config(cls, section: ConfigSection) -> KunlunVXPU:
        return cls(count_name=section.str("resourceVCountName"), vmemory_name=section.str("resourceVMemoryName"))

    @cached_property
    def quota_names(self) -> QuotaNames:
        return QuotaNames(memory=self.vmemory_name, count=self.count_name)

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        if not self.count_name or self.count_name not in ctr.limits:
            return False
        memory = ctr.limit(self.vmemory_name) if self.vmemory_name else None
        if memory is not None:
            rounded = partition(memory.value)
            ctr.set_limit(self.vmemory_name, rounded, PARTITION)
        return True

    def quota_request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        """Only memory counts: the partition asked for, or a whole card when vmemory is absent or not whole."""
        count = ctr.limit_or_request(self.count_name) if self.count_name else None
        nums = whole_in_range(count, 1, INT32_MAX)
        if nums is None:
            return None
        memory = whole_in_range(ctr.limit_or_request(self.vmemory_name), 0, CARD_MEMORY)
        return QuotaRequest(nums=nums, memory=CARD_MEMORY if memory is None else partition(memory))

    @cached_property
    def fit_names(self) -> tuple[str, ...]:
        return tuple(name for name in (self.count_name, self.vmemory_name) if name)

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> DeviceRequest | None:
        """GenerateResourceRequests: the count as Go's int32 of it; vmemory's partition (trimMemory), a whole card
        when absent or fractional. HAMi's topology pick (two wings of four) only ever takes fewer: the count of
        devices that pass is an upper bound."""
        nums = whole(ctr.limit_or_request(self.count_name)) if self.count_name else None
        if nums is None or go_int32(nums) <= 0:
            return None
        memory = whole(ctr.limit_or_request(self.vmemory_name)) if self.vmemory_name else None
        asked = CARD_MEMORY if memory is None else partition(memory)
        return replace(self.selected(annotations), nums=go_int32(nums), memory=asked, cores=None)


def build(root: ConfigSection) -> tuple[Device, ...]:
    """The whole-card backend, then the vXPU backend, both from the ``kunlun`` section."""
    section = root.section("kunlun")
    return CountDevice("kunlun", section.str("resourceCountName")), KunlunVXPU.from_config(section)
