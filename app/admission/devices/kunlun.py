"""Kunlunxin XPUs: whole cards (backend ``kunlun``) and vXPUs (backend ``XPU``), section ``kunlun``.

A vXPU is a fixed quarter, half or whole card, so its memory request is rounded up
to the next partition size (docs/rules.md#kunlunxin).
"""

from __future__ import annotations

from dataclasses import dataclass
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
class KunlunVXPU(OwnsItsQuotaNames):
    """HAMi's vXPU rules: found by vcount in limits; vmemory is rounded up in limits and requests."""

    count_name: str
    vmemory_name: str
    key: str = "XPU"

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


def build(root: ConfigSection) -> tuple[Device, ...]:
    """The whole-card backend, then the vXPU backend, both from the ``kunlun`` section."""
    section = root.section("kunlun")
    return CountDevice("kunlun", section.str("resourceCountName")), KunlunVXPU.from_config(section)
