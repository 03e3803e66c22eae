"""Moore Threads sGPUs (backend ``Mthreads``, device-config section ``mthreads``).

A card has 16 cores and 96 memory units of 512 MiB. Several cards are only handed
out whole, so the webhook rewrites core and memory to whole cards (docs/rules.md#moore-threads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from app.admission.devices.base import (
    ConfigSection,
    CountMemoryCore,
    DeviceRequestError,
    QuotaRequest,
    whole_in_range,
)
from app.admission.edit import ContainerEdit, PodEdit, Why
from app.admission.quantity import INT32_MAX

REQUEST_GPU_NUM_ANNOTATION = "mthreads.com/request-gpu-num"
CORES_PER_GPU = 16
MEMORY_PER_GPU = 96
MEMORY_UNIT_MIB = 512
MEMORY_SLICES = (2, 4, 8, 16, 32, 64, 96)
SEVERAL_CARDS = Why("several sGPUs are whole cards")
ONE_CARD = Why("no memory asked: a whole card")
COUNT = Why("the device count", filled=None)


@dataclass(frozen=True)
class Mthreads(CountMemoryCore):
    """HAMi's Mthreads admission rules; the count is read from limits, else requests."""

    key: str = "Mthreads"
    memory_unit_mib: ClassVar[int] = MEMORY_UNIT_MIB

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        count = ctr.limit_or_request(self.count_name) if self.count_name else None
        if count is None:
            return False
        if count.nanos <= 0:
            raise DeviceRequestError(f"{self.count_name} must be greater than 0")
        gpus = count.value
        if gpus > 1:
            self._whole_cards(ctr, gpus, SEVERAL_CARDS)
            pod.set_annotation(REQUEST_GPU_NUM_ANNOTATION, str(gpus), COUNT)
        elif self.memory_name not in ctr.limits:
            self._whole_cards(ctr, 1, ONE_CARD)
        elif whole_in_range(ctr.limit(self.memory_name), 0, MEMORY_PER_GPU) not in MEMORY_SLICES:
            valid = ", ".join(map(str, MEMORY_SLICES))
            raise DeviceRequestError(f"sGPU memory request value is invalid, valid values are [{valid}]")
        return True

    def _whole_cards(self, ctr: ContainerEdit, gpus: int, why: Why) -> None:
        """All cores and memory of ``gpus`` cards, overwriting the user's values (requests mirror limits)."""
        for name, amount in ((self.core_name, gpus * CORES_PER_GPU), (self.memory_name, gpus * MEMORY_PER_GPU)):
            if name:
                ctr.set_limit(name, amount, why)

    def quota_request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        """Per card: memory in MiB (units x 512) and cores, each split evenly by integer division."""
        count = ctr.limit_or_request(self.count_name) if self.count_name else None
        gpus = whole_in_range(count, 1, INT32_MAX)
        if gpus is None:
            return None
        memory = whole_in_range(ctr.limit_or_request(self.memory_name), 0, INT32_MAX) or 0
        cores = whole_in_range(ctr.limit_or_request(self.core_name), 0, INT32_MAX) or 0
        return QuotaRequest(nums=gpus, memory=memory * MEMORY_UNIT_MIB // gpus, cores=cores // gpus)


def build(root: ConfigSection) -> tuple[Mthreads, ...]:
    """The Mthreads backend from the ``mthreads`` section."""
    return (Mthreads.from_config(root.section("mthreads")),)
