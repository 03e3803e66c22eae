"""What a device vendor is: the small protocol every vendor module implements.

A vendor looks at one container at a time (init containers first, then app
containers), may edit it or the Pod, says whether the container uses its device,
and says how much of its quota resources the container asks for.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Protocol, Self

from app.admission.edit import ContainerEdit, PodEdit
from app.admission.quantity import INT32_MAX, Quantity


class DeviceRequestError(Exception):
    """A container asks for a device in a way that cannot work: the user's error (denied, 400)."""


class ConfigError(ValueError):
    """The device configuration is invalid; the message names the key."""


@dataclass(frozen=True)
class QuotaRequest:
    """A container's per-device demand: ``nums`` devices, each with ``memory`` and ``cores``."""

    nums: int
    memory: int = 0
    cores: int = 0

    def amounts(self, names: QuotaNames) -> dict[str, int]:
        """The container's demand as named amounts, in ``names.factors``' order: all the quota reads of it (a
        vendor that counts one more resource returns a subclass that adds it)."""
        found = (
            (names.memory, self.memory * self.nums),
            (names.cores, self.cores * self.nums),
            (names.count, self.nums),
        )
        return {name: amount for name, amount in found if name}


@dataclass(frozen=True)
class QuotaNames:
    """The resource names a vendor's quota is kept under, and its memory unit factor."""

    memory: str = ""
    cores: str = ""
    count: str = ""
    memory_factor: int = 1

    @property
    def resource_names(self) -> frozenset[str]:
        """The non-empty names among them: every resource a vendor owns, unless it has more than these three."""
        return names(self.memory, self.cores, self.count)

    @cached_property
    def factors(self) -> dict[str, int]:
        """Each resource the quota counts -> the factor its ResourceQuota limit is scaled by (the memory unit, else
        1); memory first, then cores, then count: a denial's order. Empty: no quota."""
        found = ((self.memory, self.memory_factor), (self.cores, 1), (self.count, 1))
        return {name: max(factor, 1) for name, factor in found if name}


class OwnsItsQuotaNames:
    """A vendor that owns exactly the resources its quota counts (all but NVIDIA, which owns more): its
    ``resource_names`` are its ``quota_names``'."""

    @property
    def quota_names(self) -> QuotaNames:
        """Each subclass derives them from its configured resource names."""
        raise NotImplementedError

    @cached_property
    def resource_names(self) -> frozenset[str]:
        return self.quota_names.resource_names


class Device(Protocol):
    """One device backend (HAMi's ``Devices`` interface, admission half).

    Before any vendor runs, the review has checked every container: no resource
    a vendor owns is negative, and every ``quota_names.count`` resource is a whole
    number. Vendors rely on that and check only their own rules.
    """

    @property
    def key(self) -> str:
        """HAMi's backend key (``NVIDIA``, ``MLU``...), also the word in ``hami.io/gpu-type``."""
        ...

    @property
    def resource_names(self) -> frozenset[str]:
        """Every extended resource this vendor owns (non-empty names only)."""
        ...

    @property
    def quota_names(self) -> QuotaNames:
        """Where this vendor's quota lives; empty names mean no quota."""
        ...

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        """Edit the container or Pod in place; True when the container uses this device.

        Raises DeviceRequestError when the request is invalid.
        """
        ...

    def quota_request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        """The container's demand on this vendor's quota, or None when it asks for nothing countable; the quota
        reads it as named amounts (``amounts(self.quota_names)``)."""
        ...


class ConfigSection:
    """A typed, path-aware reader over one mapping of HAMi's device-config YAML."""

    def __init__(self, data: Mapping[str, Any] | None, path: str) -> None:
        if data is not None and not isinstance(data, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {type(data).__name__}")
        self._data: Mapping[str, Any] = data or {}
        self.path = path

    def _where(self, key: builtins.str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def str(self, key: builtins.str) -> builtins.str:
        """A string; a missing or null key reads as empty."""
        raw = self._data.get(key)
        if raw is None:
            return ""
        if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
            raise ConfigError(f"{self._where(key)}: expected a string, got {raw!r}")
        return str(raw)

    def int(self, key: builtins.str) -> builtins.int:
        """An integer; a missing key reads as 0."""
        raw = self._data.get(key, 0)
        if isinstance(raw, bool) or not isinstance(raw, int):
            if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
                return int(raw)
            raise ConfigError(f"{self._where(key)}: expected an integer, got {raw!r}")
        return raw

    def bool(self, key: builtins.str) -> builtins.bool:
        """A boolean; YAML's true/false or the strings "true"/"false" (the chart quotes some)."""
        raw = self._data.get(key, False)
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise ConfigError(f"{self._where(key)}: expected true or false, got {raw!r}")

    def section(self, key: builtins.str) -> ConfigSection:
        """A nested mapping (empty when missing)."""
        return ConfigSection(self._data.get(key), self._where(key))

    def sections(self, key: builtins.str) -> list[ConfigSection]:
        """A list of mappings (empty when missing)."""
        raw = self._data.get(key) or []
        if not isinstance(raw, list):
            raise ConfigError(f"{self._where(key)}: expected a list, got {type(raw).__name__}")
        return [ConfigSection(item, f"{self._where(key)}[{i}]") for i, item in enumerate(raw)]


def count_memory_core(section: ConfigSection) -> dict[str, str]:
    """The three resource-name keys most vendors share, as constructor arguments."""
    return {
        "count_name": section.str("resourceCountName"),
        "memory_name": section.str("resourceMemoryName"),
        "core_name": section.str("resourceCoreName"),
    }


@dataclass(frozen=True)
class CountMemoryCore(OwnsItsQuotaNames):
    """A vendor configured by the three names most share (``count_memory_core``), its quota kept under them;
    ``memory_unit_mib`` turns its memory units into the quota's MiB."""

    count_name: str
    memory_name: str
    core_name: str
    memory_unit_mib: ClassVar[int] = 1

    @classmethod
    def from_config(cls, section: ConfigSection) -> Self:
        return cls(**count_memory_core(section))

    @cached_property
    def quota_names(self) -> QuotaNames:
        return QuotaNames(self.memory_name, self.core_name, self.count_name, self.memory_unit_mib)


def names(*candidates: str) -> frozenset[str]:
    """The non-empty resource names of a vendor."""
    return frozenset(n for n in candidates if n)


def whole_in_range(amount: Quantity | None, low: int, high: int) -> int | None:
    """An exact integer within [low, high], else None (HAMi's "no request")."""
    whole = None if amount is None else amount.whole
    return whole if whole is not None and low <= whole <= high else None


@dataclass(frozen=True)
class CountDevice(OwnsItsQuotaNames):
    """A vendor that only recognises a device count in limits and never mutates.

    Metax GPU, Enflame GCU, Kunlun XPU, Vastai and Biren are exactly this.
    """

    key: str
    count_name: str

    @cached_property
    def quota_names(self) -> QuotaNames:
        return QuotaNames(count=self.count_name)

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        return bool(self.count_name) and self.count_name in ctr.limits

    def quota_request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        count = ctr.limit(self.count_name) if self.count_name else None
        return None if count is None else QuotaRequest(nums=count.value)


def sliced_request(
    ctr: ContainerEdit, quota: QuotaNames, default_cores: int, *, min_count: int = 1, default_memory: int = 0
) -> QuotaRequest | None:
    """HAMi's request: count devices, each with memory (times the unit) and cores, read from limits, else requests.

    The count must be a whole number of at least `min_count`, and the memory a whole number
    that stays within int32 once scaled; otherwise there is no request at all.
    """
    count = ctr.limit_or_request(quota.count) if quota.count else None
    nums = whole_in_range(count, min_count, INT32_MAX)
    if nums is None:
        return None
    memory = default_memory
    memory_raw = ctr.limit_or_request(quota.memory) if quota.memory else None
    if memory_raw is not None:
        whole = whole_in_range(memory_raw, 0, INT32_MAX // quota.memory_factor)
        if whole is None:
            return None
        memory = whole * quota.memory_factor
    cores_raw = ctr.limit_or_request(quota.cores) if quota.cores else None
    cores = default_cores if cores_raw is None else cores_raw.value
    return QuotaRequest(nums=nums, memory=memory, cores=cores)


@dataclass(frozen=True)
class SlicedDevice(OwnsItsQuotaNames):
    """A vendor found by its count in limits, never mutating, with memory and cores quota."""

    key: str
    count_name: str
    memory_name: str
    core_name: str
    memory_factor: int
    default_cores: int

    @cached_property
    def quota_names(self) -> QuotaNames:
        return QuotaNames(self.memory_name, self.core_name, self.count_name, max(self.memory_factor, 1))

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        return bool(self.count_name) and self.count_name in ctr.limits

    def quota_request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        return sliced_request(ctr, self.quota_names, self.default_cores)
