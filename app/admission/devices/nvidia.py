"""NVIDIA GPUs shared by HAMi-core (backend ``NVIDIA``, device-config section ``nvidia``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property

from app.admission import notices
from app.admission.devices.base import (
    ConfigError,
    ConfigSection,
    DeviceRequestError,
    QuotaNames,
    QuotaRequest,
    names,
    sliced_request,
)
from app.admission.devices.registered import NO_PERCENTAGE, DeviceRequest, RegisteredFits
from app.admission.edit import ContainerEdit, PodEdit, Why
from app.admission.fits import Registered, Shape
from app.admission.notices import POLICY_FROM_ANNOTATION
from app.admission.quantity import INT32_MAX

CORE_POLICY_ANNOTATION = "hami.io/core-policy"
CORE_POLICIES = ("default", "force", "disable")
DEFAULT_COUNT = Why("nvidia.defaultGPUNum")
EXCLUSIVE_CORES = Why("a whole GPU comes with all its cores")
NOT_VISIBLE = Why("no NVIDIA GPU asked, overwriteEnv", filled=None)
POLICY_FROM_CONFIG = Why("nvidia.gpuCorePolicy", filled=None)
POLICY_FROM_POD = Why(f"annotation {CORE_POLICY_ANNOTATION}", POLICY_FROM_ANNOTATION, POLICY_FROM_ANNOTATION)


# -- fits nowhere: HAMi's scheduler filter on one empty node (docs/rules.md#fits-nowhere) ------------------------

USE_TYPE, NO_USE_TYPE = "nvidia.com/use-gputype", "nvidia.com/nouse-gputype"
USE_UUID, NO_USE_UUID = "nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid"
NUMA_BIND, VGPU_MODE = "nvidia.com/numa-bind", "nvidia.com/vgpu-mode"
MIG = "mig"
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")


def _mig_instances(gpu: Registered, memory: int) -> int:
    """At most how many instances of ``memory`` MiB one empty MIG GPU holds: the most non-overlapping placements
    of the profiles big enough. HAMi fills them greedily, never more than this (an upper bound: never a false
    alarm); at least one exactly when HAMi's first choice exists."""
    spans = sorted(
        (start + size, start)
        for profile in gpu.profiles
        if profile.memory >= memory
        for start, size in profile.placements
    )
    count, free_from = 0, -1
    for end, start in spans:
        if start >= free_from:
            count, free_from = count + 1, end
    return count


class NvidiaFits(RegisteredFits):
    """HAMi's NVIDIA filter (pkg/scheduler/score.go fitInDevices, pkg/device/nvidia Fit) for one container on one
    empty node, with its MIG instances, vgpu-mode and NUMA binding; mixed into Nvidia."""

    register_name = "hami.io/node-nvidia-register"
    noun, short = "NVIDIA GPU", "GPU"
    type_keys = (USE_TYPE, NO_USE_TYPE)
    id_keys = ((USE_UUID, NO_USE_UUID),)
    more_keys = (NUMA_BIND, VGPU_MODE)
    key: str
    count_name: str
    memory_name: str
    percentage_name: str
    core_name: str
    default_memory: int
    default_cores: int
    memory_factor: int

    @cached_property
    def fit_names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.count_name, self.memory_name, self.percentage_name, self.core_name) if n)

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> DeviceRequest | None:
        count = ctr.limit_or_request(self.count_name) if self.count_name else None
        nums = None if count is None else count.whole
        if nums is None or nums <= 0:
            return None  # HAMi counts only requests of at least one GPU
        memory = 0
        raw = ctr.limit_or_request(self.memory_name) if self.memory_name else None
        if raw is not None:
            factor = max(self.memory_factor, 1)
            if raw.whole is None or not 0 <= raw.whole <= INT32_MAX // factor:
                return None  # HAMi refuses to read it: no request
            memory = raw.whole * factor
        percentage = NO_PERCENTAGE
        raw = ctr.limit_or_request(self.percentage_name) if self.percentage_name else None
        if raw is not None and raw.whole is not None and raw.whole > 0:
            percentage = min(raw.whole, 100)
        if percentage == NO_PERCENTAGE and memory == 0:
            if self.default_memory:
                memory = self.default_memory
            else:
                percentage = 100
        cores = self.default_cores
        raw = ctr.limit_or_request(self.core_name) if self.core_name else None
        if raw is not None and raw.whole is not None:
            cores = raw.whole
        return replace(
            self.selected(annotations),
            nums=min(nums, INT32_MAX),
            memory=memory,
            percentage=percentage,
            cores=min(cores, 100),  # HAMi's Fit reads more than 100 as 100
            numa=annotations.get(NUMA_BIND) in GO_TRUE,
            mode=annotations.get(VGPU_MODE),
        )

    def counted_out(self, request: DeviceRequest, shape: Shape) -> bool:
        """HAMi's count check, unless it is a MIG request (a MIG GPU on the node and no vgpu-mode excluding it: one
        GPU may hold several)."""
        mig = (request.mode is None or MIG in request.mode) and any(gpu.mode == MIG for gpu in shape)
        return request.nums > len(shape) and not mig

    def takes(self, request: DeviceRequest, device: Registered) -> int:
        """0 or 1, or several MIG instances."""
        taken = super().takes(request, device)
        return _mig_instances(device, request.memory_on(device) or 0) if taken and device.mode == MIG else taken

    def refused(self, head: str, request: DeviceRequest, healthy: list[Registered]) -> str:
        if request.mode is not None and not any(g.mode in request.mode for g in healthy):
            modes = ", ".join(sorted({g.mode for g in healthy}))
            return f"{head} {VGPU_MODE} {notices.value(request.mode)}; registered GPUs are in mode {modes}"
        return super().refused(head, request, healthy)

    def lacking(self, head: str, request: DeviceRequest, chosen: list[Registered]) -> str:
        if any(self.takes(request, g) for g in chosen):
            return ""
        return f"{head} {request.memory_on(chosen[0])} MiB per GPU; no registered MIG profile has room for it"


@dataclass(frozen=True)
class Nvidia(NvidiaFits):
    """HAMi's NVIDIA admission rules, plus a per-Pod core policy and invalid requests denied as the author's error."""

    count_name: str
    memory_name: str
    percentage_name: str
    core_name: str
    priority_name: str
    overwrite_env: bool
    default_memory: int
    default_cores: int
    default_gpu_num: int
    memory_factor: int
    core_policy: str
    runtime_class_name: str
    key: str = "NVIDIA"

    @classmethod
    def from_config(cls, section: ConfigSection) -> Nvidia:
        policy = section.str("gpuCorePolicy") or "default"
        if policy not in CORE_POLICIES:
            raise ConfigError(
                f"{section.path}.gpuCorePolicy: expected one of {', '.join(CORE_POLICIES)}, got {policy!r}"
            )
        return cls(
            count_name=section.str("resourceCountName"),
            memory_name=section.str("resourceMemoryName"),
            percentage_name=section.str("resourceMemoryPercentageName"),
            core_name=section.str("resourceCoreName"),
            priority_name=section.str("resourcePriorityName"),
            overwrite_env=section.bool("overwriteEnv"),
            default_memory=section.int("defaultMemory"),
            default_cores=section.int("defaultCores"),
            default_gpu_num=section.int("defaultGPUNum"),
            memory_factor=section.int("memoryFactor"),
            core_policy=policy,
            runtime_class_name=section.str("runtimeClassName"),
        )

    @cached_property
    def resource_names(self) -> frozenset[str]:
        return names(self.count_name, self.memory_name, self.percentage_name, self.core_name, self.priority_name)

    @cached_property
    def quota_names(self) -> QuotaNames:
        return QuotaNames(self.memory_name, self.core_name, self.count_name, max(self.memory_factor, 1))

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        self._check_percentage(ctr)
        if self.priority_name and self.priority_name in ctr.limits:
            priority = Why(f"limit {self.priority_name}", filled=None)
            ctr.set_env("CUDA_TASK_PRIORITY", str(ctr.limit_value(self.priority_name)), priority)
        found = self._count_or_default(ctr)
        found = self._default_exclusive_cores(ctr) or found
        if found:
            policy, why = self._pod_core_policy(pod)
            if policy != "default":
                ctr.set_env("GPU_CORE_UTILIZATION_POLICY", policy, why)
            if self.runtime_class_name and not pod.spec("runtimeClassName"):
                pod.set_spec("runtimeClassName", self.runtime_class_name)
        elif self.overwrite_env:
            ctr.set_env("NVIDIA_VISIBLE_DEVICES", "none", NOT_VISIBLE)
        return found

    def _check_percentage(self, ctr: ContainerEdit) -> None:
        if not self.percentage_name:
            return
        # HAMi reads the percentage rounded up, as its scheduler and device plugin do: 500m is 1%.
        percentage = ctr.limit_or_request(self.percentage_name)
        if percentage is not None and not 0 <= percentage.value <= 100:
            raise DeviceRequestError(
                f"invalid {self.percentage_name} value {percentage.value} in container {ctr.name}: "
                "must be an integer between 0 and 100"
            )

    def _count_or_default(self, ctr: ContainerEdit) -> bool:
        if self.count_name in ctr.limits:
            return True
        asked = [n for n in (self.core_name, self.memory_name, self.percentage_name) if n and n in ctr.limits]
        if not asked:
            return False
        if self.default_gpu_num <= 0:
            raise DeviceRequestError(
                f"container {ctr.name}: {asked[0]} requested without {self.count_name} "
                "and no default GPU count is configured (nvidia.defaultGPUNum is 0)"
            )
        ctr.set_limit(self.count_name, self.default_gpu_num, DEFAULT_COUNT)
        return True

    def _default_exclusive_cores(self, ctr: ContainerEdit) -> bool:
        """A whole-card request gets all of the card's cores, as HAMi's defaultExclusiveCoreIfNeeded."""
        if not self.core_name or not ctr.has(self.count_name) or ctr.has(self.core_name):
            return False
        percentage = ctr.limit_or_request(self.percentage_name) if self.percentage_name else None
        if percentage is not None:
            exclusive = percentage.value == 100
        else:
            exclusive = not self.memory_name or not ctr.has(self.memory_name)
        if exclusive:
            ctr.set_limit(self.core_name, 100, EXCLUSIVE_CORES)
        return exclusive

    def _pod_core_policy(self, pod: PodEdit) -> tuple[str, Why]:
        """The Pod's core policy (docs/rules.md#a-per-pod-core-policy) and where it came from."""
        policy = pod.annotations.get(CORE_POLICY_ANNOTATION)
        if policy is None:
            return self.core_policy, POLICY_FROM_CONFIG
        if policy not in CORE_POLICIES:
            raise DeviceRequestError(
                f"annotation {CORE_POLICY_ANNOTATION} must be one of {', '.join(CORE_POLICIES)}, got {policy!r}"
            )
        return policy, POLICY_FROM_POD

    def quota_request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        """HAMi's NVIDIA request: a count of 0 still counts, and a container asking no memory and no positive
        percentage is charged `defaultMemory` per GPU."""
        percentage = ctr.limit_or_request(self.percentage_name) if self.percentage_name else None
        by_default = percentage is None or percentage.value <= 0
        default_memory = self.default_memory if by_default else 0
        return sliced_request(ctr, self.quota_names, self.default_cores, min_count=0, default_memory=default_memory)


def build(root: ConfigSection) -> tuple[Nvidia, ...]:
    """The NVIDIA backend from the ``nvidia`` section."""
    return (Nvidia.from_config(root.section("nvidia")),)
