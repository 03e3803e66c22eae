"""NVIDIA GPUs shared by HAMi-core (backend ``NVIDIA``, device-config section ``nvidia``)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
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
from app.admission.edit import ContainerEdit, PodEdit, Why
from app.admission.fits import Inventory, Registered, Shape
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

REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
USE_TYPE, NO_USE_TYPE = "nvidia.com/use-gputype", "nvidia.com/nouse-gputype"
USE_UUID, NO_USE_UUID = "nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid"
NUMA_BIND, VGPU_MODE = "nvidia.com/numa-bind", "nvidia.com/vgpu-mode"
FIT_ANNOTATIONS = (USE_TYPE, NO_USE_TYPE, USE_UUID, NO_USE_UUID, NUMA_BIND, VGPU_MODE)
MIG = "mig"
NO_PERCENTAGE = 101  # HAMi's "no memory percentage asked"
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")


@dataclass(frozen=True)
class GpuRequest:
    """One container's NVIDIA request as HAMi's GenerateResourceRequests reads it from the mutated container, with
    the Pod's selectors as its filter reads them: what decides where it fits, and nothing else (a memo's key)."""

    nums: int
    memory: int  # MiB per GPU; 0 with a percentage
    percentage: int  # of each GPU's memory; NO_PERCENTAGE when memory is given
    cores: int
    use_types: tuple[str, ...] = ()  # upper-cased
    refuse_types: tuple[str, ...] = ()
    ids: frozenset[str] = frozenset()
    refuse_ids: frozenset[str] = frozenset()
    numa: bool = False
    mode: str | None = None

    def memory_on(self, gpu: Registered) -> int:
        """The memory asked of ``gpu``: HAMi's memreq."""
        if self.percentage != NO_PERCENTAGE and self.memory == 0:
            return gpu.memory * self.percentage // 100
        return max(self.memory, 0)

    def allows(self, gpu: Registered) -> bool:
        """HAMi's CheckType (each listed type matched case-insensitively within the model) and vgpu-mode."""
        card = gpu.type.upper()
        if self.use_types and not any(t in card for t in self.use_types):
            return False
        if any(t in card for t in self.refuse_types):
            return False
        return self.mode is None or gpu.mode in self.mode


def _listed(annotations: Mapping[str, str], key: str) -> list[str]:
    """A comma-separated annotation's entries, trimmed; empty when absent or blank (HAMi: no constraint)."""
    return [part.strip() for part in (annotations.get(key) or "").split(",") if part.strip()]


def _mig_instances(gpu: Registered, memory: int) -> int:
    """At most how many instances of ``memory`` MiB one empty MIG GPU holds: the most non-overlapping placements
    of the profiles big enough. HAMi fills them greedily, never more than this (an upper bound: never a false
    alarm); at least one exactly when HAMi's first choice exists."""
    spans = sorted(
        (start + size, start) for profile in gpu.mig if profile.memory >= memory for start, size in profile.placements
    )
    count, free_from = 0, -1
    for end, start in spans:
        if start >= free_from:
            count, free_from = count + 1, end
    return count


class NvidiaFits:
    """HAMi's NVIDIA filter (pkg/scheduler/score.go fitInDevices, pkg/device/nvidia Fit) for one container on one
    empty node; mixed into Nvidia."""

    register_annotation = REGISTER_ANNOTATION
    key: str
    count_name: str
    memory_name: str
    percentage_name: str
    core_name: str
    default_memory: int
    default_cores: int
    memory_factor: int

    @cached_property
    def _fit_names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.count_name, self.memory_name, self.percentage_name, self.core_name) if n)

    def fit_key(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> Hashable | None:
        if not self.count_name or not ctr.has(self.count_name):
            return None
        limits, requests = ctr.limits.get, ctr.requests.get  # quantities as written: strings or numbers (schemas.POD)
        get = annotations.get
        return (
            self.key,
            *(limits(n) for n in self._fit_names),
            *(requests(n) for n in self._fit_names),
            *(get(key) for key in FIT_ANNOTATIONS),
        )

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> GpuRequest | None:
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
        return GpuRequest(
            nums=min(nums, INT32_MAX),
            memory=memory,
            percentage=percentage,
            cores=min(cores, 100),  # HAMi's Fit reads more than 100 as 100
            use_types=tuple(t.upper() for t in _listed(annotations, USE_TYPE)),
            refuse_types=tuple(t.upper() for t in _listed(annotations, NO_USE_TYPE)),
            ids=frozenset(_listed(annotations, USE_UUID)),
            refuse_ids=frozenset(_listed(annotations, NO_USE_UUID)),
            numa=annotations.get(NUMA_BIND) in GO_TRUE,
            mode=annotations.get(VGPU_MODE),
        )

    def fits(self, request: GpuRequest, shape: Shape, ids: tuple[str, ...] | None) -> bool:
        return max(self._takers(request, shape, ids).values(), default=0) >= request.nums

    def _takers(
        self, request: GpuRequest, shape: Shape, ids: tuple[str, ...] | None, *, counted: bool = True
    ) -> dict[int, int]:
        """How many of the container's GPUs the node's devices could take, per NUMA node when the Pod binds to
        one (HAMi takes them from one NUMA node then), else all under 0. Empty when HAMi's count check refuses
        (``counted``: made first, as HAMi makes it)."""
        if counted and _counted_out(request, shape):
            return {}
        typed = [(i, gpu) for i, gpu in enumerate(shape) if "NVIDIA" in gpu.type.upper()]
        takers: dict[int, int] = {}
        for i, gpu in typed:
            if not gpu.health or not request.allows(gpu):
                continue
            if ids is not None and ((request.ids and ids[i] not in request.ids) or ids[i] in request.refuse_ids):
                continue
            group = gpu.numa if request.numa else 0
            takers[group] = takers.get(group, 0) + _takes(request, gpu)
        return takers

    def unfit(self, ctr: str, request: GpuRequest, inventory: Inventory) -> str:
        """The first of HAMi's checks no node passes, with what the container asked of it and the best the cluster
        has, in at most notices.MAX_CHARS characters."""
        shapes = inventory.shapes.get(self.key) or {}
        head = f"container {ctr} asks"
        gpus = [(g, kind.example) for shape, kind in shapes.items() for g in shape if "NVIDIA" in g.type.upper()]
        if not gpus:
            return f"{head} {self.count_name}; no node registers an NVIDIA GPU"
        most, node = _best(
            (sum("NVIDIA" in g.type.upper() for g in shape), kind.example) for shape, kind in shapes.items()
        )
        if all(_counted_out(request, shape) for shape in shapes):
            return f"{head} {_gpus(request.nums)}; the most a registered node has is {most} (node {node})"
        healthy = [(g, node) for g, node in gpus if g.health]
        if not healthy:
            return f"{head} {self.count_name}; every registered NVIDIA GPU is unhealthy"
        chosen = [(g, node) for g, node in healthy if request.allows(g)]
        if not chosen:
            if request.mode is not None and not any(g.mode in request.mode for g, _ in healthy):
                modes = ", ".join(sorted({g.mode for g, _ in healthy}))
                return f"{head} {VGPU_MODE} {notices.value(request.mode)}; registered GPUs are in mode {modes}"
            asked = ",".join(request.use_types or request.refuse_types)
            key = USE_TYPE if request.use_types else NO_USE_TYPE
            kinds = ", ".join(sorted({g.type for g, _ in healthy}))
            return f"{head} {key} {notices.value(asked)}; registered: {kinds}"
        if request.ids and not inventory.holding(self.key, request.ids):
            asked = ",".join(sorted(request.ids))
            return f"{head} {USE_UUID} {notices.value(asked)}; no registered GPU has such an id"
        if request.ids or request.refuse_ids:
            key = USE_UUID if request.ids else NO_USE_UUID
            return f"{head} {_gpus(request.nums)} by {key}; no node has that many of the GPUs it allows"
        if not any(request.memory_on(g) <= g.memory for g, _ in chosen):
            roomy, node = _best((g.memory, n) for g, n in chosen)
            return (
                f"{head} {request.memory} MiB per GPU; the largest registered NVIDIA GPU has {roomy} MiB (node {node})"
            )
        if not any(request.cores <= g.cores for g, _ in chosen):
            cores, node = _best((g.cores, n) for g, n in chosen)
            return (
                f"{head} {request.cores} cores per GPU; the most a registered NVIDIA GPU has is {cores} (node {node})"
            )
        if not any(_takes(request, g) for g, _ in chosen):
            return f"{head} {request.memory_on(chosen[0][0])} MiB per GPU; no registered MIG profile has room for it"
        most, node = _best(
            (max(self._takers(request, shape, None, counted=False).values(), default=0), kind.example)
            for shape, kind in shapes.items()
        )
        where = " on one NUMA node" if request.numa else ""
        return (
            f"{head} {_gpus(request.nums)}; the most a registered node has that fit it{where} is {most} (node {node})"
        )


def _counted_out(request: GpuRequest, shape: Shape) -> bool:
    """HAMi's count check, before any device is looked at: more GPUs asked than the node has of type NVIDIA, unless
    it is a MIG request (a MIG GPU on the node and no vgpu-mode excluding it: one GPU may hold several)."""
    typed = [gpu for gpu in shape if "NVIDIA" in gpu.type.upper()]
    mig = (request.mode is None or MIG in request.mode) and any(gpu.mode == MIG for gpu in typed)
    return request.nums > len(typed) and not mig


def _best(found: Iterable[tuple[int, str]]) -> tuple[int, str]:
    """The largest figure, and of the nodes that have it the first by name (the same on every replica)."""
    return min(found, key=lambda pair: (-pair[0], pair[1]))


def _gpus(count: int) -> str:
    return "1 NVIDIA GPU" if count == 1 else f"{count} NVIDIA GPUs"


def _takes(request: GpuRequest, gpu: Registered) -> int:
    """How many of the container's GPUs one empty healthy ``gpu`` could be: 0 or 1, or several MIG instances."""
    memory = request.memory_on(gpu)
    if gpu.count <= 0 or gpu.memory < memory or gpu.cores < request.cores:
        return 0
    return _mig_instances(gpu, memory) if gpu.mode == MIG else 1


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
