"""Huawei Ascend NPUs (one backend per ``vnpus.configs[]`` entry, keyed by its ``commonWord``).

Outside hami-core (soft split) mode an Ascend NPU is split by fixed templates, so a
memory request is rounded up to a template and cores cannot be asked for. Each chip's
devices are registered on Nodes in HAMi's JSON, one annotation per chip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property

from app.admission.devices.base import (
    ConfigSection,
    DeviceRequestError,
    OwnsItsQuotaNames,
    QuotaNames,
    QuotaRequest,
    sliced_request,
)
from app.admission.devices.registered import DeviceRequest, RegisteredFits, share, whole
from app.admission.edit import ContainerEdit, PodEdit, Why
from app.admission.notices import ROUNDED
from app.admission.quantity import INT32_MAX

VNPU_MODE_ANNOTATION = "huawei.com/vnpu-mode"
HAMI_CORE_MODE = "hami-core"
SUPER_POD_CHIP = "Ascend910C"
"""The 910C is allocated by physical module (2 NPUs) when ``superPod`` is on."""
VISIBLE_DEVICES_ENV = "ASCEND_VISIBLE_DEVICES"
NOT_VISIBLE = Why("no Ascend NPU asked, overwriteEnv", filled=None)
SUPER_POD_MODULES = Why(f"{SUPER_POD_CHIP} super pod: whole modules of 2 NPUs", replaced=ROUNDED)
WHOLE_NPU = Why("no memory asked: the whole NPU")
TEMPLATE = Why("the smallest vNPU template that fits", replaced=ROUNDED)
WHOLE_NPU_MEMORY = Why("no vNPU template fits: the whole NPU", replaced=ROUNDED)
AS_ASKED = Why("hami-core mode: whole units", replaced=ROUNDED)


@dataclass(frozen=True)
class Ascend(RegisteredFits, OwnsItsQuotaNames):
    """HAMi's Ascend vNPU admission rules for one chip, and its filter (pkg/device/ascend Fit) for fits nowhere:
    health, ids, split count, memory, cores (a card's, or 100 in hami-core mode). A 910's topology and a 910C's
    module pairs only ever take fewer of the devices that pass: their count is an upper bound."""

    register_name = "hami.io/node-register-{key}"
    noun, short = "{key} NPU", "NPU"
    id_keys = (("hami.io/use-{key}-uuid", "hami.io/no-use-{key}-uuid"),)
    more_keys = (VNPU_MODE_ANNOTATION,)

    key: str
    count_name: str
    memory_name: str
    core_name: str
    memory_allocatable: int
    memory_capacity: int
    memory_factor: int
    runtime_class_name: str
    overwrite_env: bool
    super_pod: bool
    template_memory: tuple[int, ...]
    """The templates' memory sizes, ascending: a hard-split request rounds up to the first that fits."""
    ascend_counts: frozenset[str] = frozenset()
    """Every configured chip's count name: a container using any Ascend chip is not hidden from NPUs."""

    @classmethod
    def from_config(cls, entry: ConfigSection, ascend_counts: frozenset[str] = frozenset()) -> Ascend:
        return cls(
            key=entry.str("commonWord"),
            count_name=entry.str("resourceName"),
            memory_name=entry.str("resourceMemoryName"),
            core_name=entry.str("resourceCoreName"),
            memory_allocatable=entry.int("memoryAllocatable"),
            memory_capacity=entry.int("memoryCapacity"),
            memory_factor=entry.int("memoryFactor"),
            runtime_class_name=entry.str("runtimeClassName"),
            overwrite_env=entry.bool("overwriteEnv"),
            super_pod=entry.bool("superPod"),
            template_memory=tuple(sorted(t.int("memory") for t in entry.sections("templates"))),
            ascend_counts=ascend_counts,
        )

    @cached_property
    def quota_names(self) -> QuotaNames:
        return QuotaNames(self.memory_name, self.core_name, self.count_name, max(self.memory_factor, 1))

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        if self.count_name not in ctr.limits:
            if self.overwrite_env and not self.ascend_counts.intersection(ctr.limits):
                ctr.set_env(VISIBLE_DEVICES_ENV, "", NOT_VISIBLE)
            return False
        count = ctr.limit_value(self.count_name)
        self._round_super_pod_count(ctr, count)
        soft_split = pod.annotations.get(VNPU_MODE_ANNOTATION) == HAMI_CORE_MODE
        if not soft_split:
            self._reject_hard_split_cores(ctr)
        memory, why = self._memory(ctr, soft_split)
        if count > 1 and not soft_split and memory != self.memory_allocatable:
            raise DeviceRequestError("vNPU not supported for multiple devices")
        if self.memory_name:
            ctr.set_limit(self.memory_name, memory, why)
        if self.runtime_class_name and not pod.spec("runtimeClassName"):
            pod.set_spec("runtimeClassName", self.runtime_class_name)
        return True

    def _round_super_pod_count(self, ctr: ContainerEdit, count: int) -> None:
        """A 910C super pod allocates whole modules: 1 becomes 2, other odd counts are refused."""
        if self.key != SUPER_POD_CHIP or not self.super_pod:
            return
        if count == 1:
            ctr.set_limit(self.count_name, 2, SUPER_POD_MODULES)
        elif count % 2:
            raise DeviceRequestError(f"{SUPER_POD_CHIP} device request must be 1 or 2*n, got {count}")

    def _reject_hard_split_cores(self, ctr: ContainerEdit) -> None:
        cores = ctr.limit_or_request(self.core_name) if self.core_name else None
        if cores is not None and cores.value > 0:
            raise DeviceRequestError(f"{self.core_name} is only supported in hami-core (soft split) mode")

    def _memory(self, ctr: ContainerEdit, soft_split: bool) -> tuple[int, Why]:
        """The memory to write, and why: as asked in hami-core mode, else rounded to a template or the whole card."""
        if self.memory_name not in ctr.limits:
            return self.memory_allocatable, WHOLE_NPU
        asked = ctr.limit_value(self.memory_name)
        if soft_split:
            return asked, AS_ASKED
        rounded, why = next((m for m in self.template_memory if asked <= m), None), TEMPLATE
        if rounded is None and asked <= self.memory_capacity:
            rounded, why = self.memory_allocatable, WHOLE_NPU_MEMORY
        if rounded is None or rounded <= 0:
            raise DeviceRequestError(f"{self.memory_name} {asked} is invalid")
        return rounded, why

    def quota_request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        return sliced_request(ctr, self.quota_names, default_cores=0)

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> DeviceRequest | None:
        """GenerateResourceRequests: a count of 1 to 2^31-1; memory (0 when fractional: the whole card) times
        memoryFactor within int32, negative none; cores rounded up within int32; else no request. In hami-core mode
        the Fit compares cores with 100, which the Fit's clamp always meets."""
        nums = whole(ctr.limit_or_request(self.count_name)) if self.count_name else None
        if nums is None or not 0 < nums <= INT32_MAX:
            return None
        amount = ctr.limit_or_request(self.memory_name) if self.memory_name else None
        memory = 0 if amount is None or amount.whole is None else amount.whole * max(self.memory_factor, 1)
        raw = ctr.limit_or_request(self.core_name) if self.core_name else None
        cores = 0 if raw is None else raw.value
        if (amount is not None and amount.nanos < 0) or not 0 <= memory <= INT32_MAX or not 0 <= cores <= INT32_MAX:
            return None
        asked = share(self.selected(annotations), nums, memory, cores)
        return replace(asked, cores=None) if annotations.get(VNPU_MODE_ANNOTATION) == HAMI_CORE_MODE else asked


def build(root: ConfigSection) -> tuple[Ascend, ...]:
    """One backend per ``vnpus.configs[]`` entry."""
    entries = root.section("vnpus").sections("configs")
    counts = frozenset(name for entry in entries if (name := entry.str("resourceName")))
    return tuple(Ascend.from_config(entry, counts) for entry in entries)
