"""Fits nowhere for the vendors whose devices HAMi's device plugins register on Nodes: HAMi's filter for one
container on one empty node (pkg/scheduler/score.go fitInDevices, then the vendor's Fit), shared by them all
(docs/rules.md#fits-nowhere).

HAMi's vendors filter alike: the node's devices whose type holds the request's type, the count checked first, then
device by device health, type selectors, id selectors, split count, memory (MiB, a percentage of the card's, or
its whole), cores, each device taken at most once. ``RegisteredFits`` is that filter and the author's line when no
node passes it; a vendor module says how HAMi reads its container (``fit_request``) and which checks its Fit makes
(class attributes), and overrides a step only where its Fit differs (NVIDIA's MIG, Enflame's DRS profiles).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import ClassVar, TypeVar

from app.admission import notices
from app.admission.edit import ContainerEdit
from app.admission.fits import Inventory, Registered, Shape
from app.admission.quantity import Quantity
from app.admission.registers import FORMATS

NO_PERCENTAGE = 101  # HAMi's "no memory percentage asked"


@dataclass(frozen=True)
class DeviceRequest:
    """One container's request as the vendor's GenerateResourceRequests reads it from the mutated container, with
    the Pod's selectors as its Fit reads them: what decides where it fits, and nothing else (a memo's key)."""

    nums: int
    memory: int | None = 0  # MiB per device; 0 with a percentage; None: the vendor's Fit checks no memory
    percentage: int = NO_PERCENTAGE  # of each device's memory, when memory is 0
    cores: int | None = 0  # per device, as the Fit compares it; None: not checked
    use_types: tuple[str, ...] = ()  # upper-cased
    refuse_types: tuple[str, ...] = ()
    ids: frozenset[str] = frozenset()
    refuse_ids: frozenset[str] = frozenset()
    numa: bool = False
    mode: str | None = None

    def memory_on(self, device: Registered) -> int | None:
        """The memory asked of ``device``: HAMi's memreq (None: not checked)."""
        if self.memory is None:
            return None
        if self.percentage != NO_PERCENTAGE and self.memory == 0:
            return device.memory * self.percentage // 100
        return max(self.memory, 0)

    def allows(self, device: Registered) -> bool:
        """HAMi's CheckType (each listed type matched case-insensitively within the model) and NVIDIA's mode."""
        card = device.type.upper()
        if self.use_types and not any(t in card for t in self.use_types):
            return False
        if any(t in card for t in self.refuse_types):
            return False
        return self.mode is None or device.mode in self.mode


Asked = TypeVar("Asked", bound=DeviceRequest)


def listed(annotations: Mapping[str, str], key: str) -> list[str]:
    """A comma-separated annotation's entries, trimmed; empty when absent or blank (HAMi: no constraint)."""
    return [part.strip() for part in (annotations.get(key) or "").split(",") if part.strip()] if key else []


def go_int32(value: int) -> int:
    """Go's int32(n) of an int64: wrapped, as the vendors that check no range read a count."""
    return (value + 2**31) % 2**32 - 2**31


def whole(amount: Quantity | None) -> int | None:
    """Go's AsInt64: the integer, or None when there is a fraction (or nothing)."""
    return None if amount is None else amount.whole


def best(found: Iterable[tuple[int, str]]) -> tuple[int, str]:
    """The largest figure, and of the nodes that have it the first by name (the same on every replica)."""
    return min(found, key=lambda pair: (-pair[0], pair[1]))


class RegisteredFits:
    """HAMi's filter for one container on one empty node of registered devices, for a vendor mixing it in."""

    key: str
    count_name: str
    register_name: ClassVar[str]
    """The register annotation; ``{key}`` stands for the vendor's key (Iluvatar, Ascend: one per chip)."""
    noun: ClassVar[str]  # what a device is called in a warning ("Hygon DCU"); ``{key}`` as above
    short: ClassVar[str] = "device"  # and in a short phrase ("MiB per DCU")
    register_format: ClassVar[str] = "json"  # how its plugin writes the annotation: a key of registers.FORMATS
    type_keys: ClassVar[tuple[str, str]] = ("", "")  # the use/nouse type annotations, where the Fit reads them
    id_keys: ClassVar[tuple[tuple[str, str], ...]] = ()  # the use/nouse id annotations (the Fit checks each pair)
    more_keys: ClassVar[tuple[str, ...]] = ()  # any other annotation its request reads
    # (``{key}`` in an annotation's name stands for the vendor's key, as in the register annotation's)
    counts: ClassVar[tuple[int, ...]] = ()  # the only counts the Fit can hand out (empty: any)
    split_checked: ClassVar[bool] = True  # the Fit refuses a device whose split count is 0

    @cached_property
    def register_annotation(self) -> str:
        return self.register_name.format(key=self.key)

    @cached_property
    def what(self) -> str:
        return self.noun.format(key=self.key)

    def decode(self, raw: str, node: str) -> list[tuple[Registered, str]]:
        return FORMATS[self.register_format](raw, node)

    @cached_property
    def type_pair(self) -> tuple[str, str]:
        use, refuse = self.type_keys
        return use.format(key=self.key), refuse.format(key=self.key)

    @cached_property
    def id_pairs(self) -> tuple[tuple[str, str], ...]:
        return tuple((use.format(key=self.key), refuse.format(key=self.key)) for use, refuse in self.id_keys)

    @cached_property
    def found_by(self) -> tuple[str, ...]:
        """The resources any of which makes the container ask for this vendor's devices."""
        return (self.count_name,) if self.count_name else ()

    @cached_property
    def fit_names(self) -> tuple[str, ...]:
        """The resources the request reads (a memo's key)."""
        candidates = (self.count_name, getattr(self, "memory_name", ""), getattr(self, "core_name", ""))
        return tuple(name for name in candidates if name)

    @cached_property
    def fit_annotations(self) -> tuple[str, ...]:
        """The annotations the request reads (a memo's key)."""
        keys = (*self.type_pair, *(k for pair in self.id_pairs for k in pair), *self.more_keys)
        return tuple(k for k in keys if k)

    def fit_key(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> Hashable | None:
        if not any([ctr.has(name) for name in self.found_by]):
            return None
        names, limits, requests = self.fit_names, ctr.limits, ctr.requests
        return (
            self.key,
            *[limits.get(n) for n in names],  # quantities as written: strings or numbers (schemas.POD)
            *[requests.get(n) for n in names],
            *[annotations.get(k) for k in self.fit_annotations],
        )  # asked of every device container of every review: lists, each piece computed once per vendor

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> DeviceRequest | None:
        raise NotImplementedError  # each vendor reads its container as its GenerateResourceRequests does

    def selected(self, annotations: Mapping[str, str], kind: type[Asked] = DeviceRequest) -> Asked:  # type: ignore[assignment]
        """The Pod's type and id selectors as the Fit reads them, in a request (of ``kind``) of nothing yet
        (``replace`` fills in the rest). Where two id pairs are read (Kunlunxin), a device must pass both: the ids
        asked are those both lists name (where those are none, either list's: a miss, never a false alarm). (The
        ignore: mypy cannot see that the default is of the TypeVar's bound.)"""
        use, refuse = self.type_pair
        asked = [set(found) for found in (listed(annotations, u) for u, _ in self.id_pairs) if found]
        ids = set.intersection(*asked) if asked else set()
        return kind(
            nums=0,
            use_types=tuple(t.upper() for t in listed(annotations, use)),
            refuse_types=tuple(t.upper() for t in listed(annotations, refuse)),
            ids=frozenset(ids or (set.union(*asked) if asked else set())),
            refuse_ids=frozenset(i for _, r in self.id_pairs for i in listed(annotations, r)),
        )

    # -- the filter ----------------------------------------------------------------------------------------------

    def fits(self, request: DeviceRequest, shape: Shape, ids: tuple[str, ...] | None) -> bool:
        if self.counts and request.nums not in self.counts:
            return False
        return max(self.takers(request, shape, ids).values(), default=0) >= request.nums

    def takers(
        self, request: DeviceRequest, shape: Shape, ids: tuple[str, ...] | None, *, counted: bool = True
    ) -> dict[int, int]:
        """How many of the container's devices the node's could take, per NUMA node when the Pod binds to one
        (HAMi then takes them from one), else all under 0. Empty when HAMi's count check refuses (``counted``: made
        first, as HAMi makes it). ``ids``: the devices' ids (None: the request names none of them)."""
        if counted and self.counted_out(request, shape):
            return {}
        found: dict[int, int] = {}
        for i, device in enumerate(shape):
            if not device.health or not self.allows(request, device):
                continue
            if ids is not None and ((request.ids and ids[i] not in request.ids) or ids[i] in request.refuse_ids):
                continue
            group = device.numa if request.numa else 0
            found[group] = found.get(group, 0) + self.takes(request, device)
        return found

    def counted_out(self, request: DeviceRequest, shape: Shape) -> bool:
        """HAMi's count check, before any device is looked at: more devices asked than the node has."""
        return request.nums > len(shape)

    def allows(self, request: DeviceRequest, device: Registered) -> bool:
        return request.allows(device)

    def takes(self, request: DeviceRequest, device: Registered) -> int:
        """How many of the container's devices one empty healthy ``device`` could be: 0 or 1."""
        memory = request.memory_on(device)
        if self.split_checked and device.count <= 0:
            return 0
        if memory is not None and device.memory < memory:
            return 0
        return int(request.cores is None or request.cores <= device.cores)

    # -- the author's line -----------------------------------------------------------------------------------------

    def many(self, count: int) -> str:
        return f"1 {self.what}" if count == 1 else f"{count} {self.what}s"

    def unfit(self, ctr: str, request: DeviceRequest, inventory: Inventory) -> str:
        """The first of HAMi's checks no node passes, with what the container asked of it and the best the cluster
        has, in at most notices.MAX_CHARS characters."""
        shapes = inventory.shapes.get(self.key) or {}
        head = f"container {ctr} asks"
        devices = [(d, kind.example) for shape, kind in shapes.items() for d in shape]
        if not devices:
            return f"{head} {self.count_name}; no node registers any {self.what}"
        if self.counts and request.nums not in self.counts:
            allowed = ", ".join(map(str, self.counts))
            return f"{head} {self.many(request.nums)}; HAMi hands them out only by {allowed}"
        if all(self.counted_out(request, shape) for shape in shapes):
            most, node = best((len(shape), kind.example) for shape, kind in shapes.items())
            return f"{head} {self.many(request.nums)}; the most a registered node has is {most} (node {node})"
        healthy = [(d, node) for d, node in devices if d.health]
        if not healthy:
            return f"{head} {self.count_name}; every registered {self.what} is unhealthy"
        chosen = [(d, node) for d, node in healthy if self.allows(request, d)]
        if not chosen:
            return self.refused(head, request, [d for d, _ in healthy])
        line = self._selected(head, request, inventory) or self._short_of(head, request, chosen)
        if line:
            return line
        most, node = best(
            (max(self.takers(request, shape, None, counted=False).values(), default=0), kind.example)
            for shape, kind in shapes.items()
        )
        where = " on one NUMA node" if request.numa else ""
        asked = self.many(request.nums)
        return f"{head} {asked}; the most a registered node has that fit it{where} is {most} (node {node})"

    def refused(self, head: str, request: DeviceRequest, healthy: list[Registered]) -> str:
        """No healthy device passes the type selectors."""
        use, refuse = self.type_pair
        asked = ",".join(request.use_types or request.refuse_types)
        kinds = ", ".join(sorted({d.type for d in healthy}))
        return f"{head} {use if request.use_types else refuse} {notices.value(asked)}; registered: {kinds}"

    def _selected(self, head: str, request: DeviceRequest, inventory: Inventory) -> str:
        """The id selectors' line, when they leave too few devices."""
        if not self.id_pairs or not (request.ids or request.refuse_ids):
            return ""
        use, refuse = self.id_pairs[0]
        if request.ids and not inventory.holding(self.key, request.ids):
            asked = ",".join(sorted(request.ids))
            return f"{head} {use} {notices.value(asked)}; no registered {self.short} has such an id"
        key = use if request.ids else refuse
        return f"{head} {self.many(request.nums)} by {key}; no node has that many of the {self.short}s it allows"

    def _short_of(self, head: str, request: DeviceRequest, chosen: list[tuple[Registered, str]]) -> str:
        """The split count's, memory's or cores' line, when no allowed device has enough."""
        if self.split_checked and not any(d.count > 0 for d, _ in chosen):
            return f"{head} {self.count_name}; every registered {self.what} has a split count of 0"
        asked = [(request.memory_on(d), d, n) for d, n in chosen]
        if not any(m is None or m <= d.memory for m, d, _ in asked):
            roomy, node = best((d.memory, n) for _, d, n in asked)
            memory = request.memory if request.memory else asked[0][0]
            largest = f"the largest registered {self.what} has {roomy} MiB (node {node})"
            return f"{head} {memory} MiB per {self.short}; {largest}"
        if request.cores is not None and not any(request.cores <= d.cores for d, _ in chosen):
            cores, node = best((d.cores, n) for d, n in chosen)
            return (
                f"{head} {request.cores} cores per {self.short}; the most a registered {self.what} has is {cores} "
                f"(node {node})"
            )
        return self.lacking(head, request, [d for d, _ in chosen])

    def lacking(self, head: str, request: DeviceRequest, chosen: list[Registered]) -> str:
        """A vendor's own line when each allowed device is big enough but none can take the container (NVIDIA's
        MIG profiles); empty when none applies."""
        return ""


def count_request(ctr: ContainerEdit, name: str, selected: DeviceRequest) -> DeviceRequest | None:
    """The request of a vendor whose Fit only counts devices (Vastai, Biren): a count read from limits, else
    requests, as Go's int32 of it; no memory and no cores checked."""
    nums = whole(ctr.limit_or_request(name)) if name else None
    if nums is None or go_int32(nums) <= 0:
        return None
    return replace(selected, nums=go_int32(nums), memory=None, cores=None)


def share(selected: DeviceRequest, nums: int, memory: int, cores: int) -> DeviceRequest:
    """The request of a vendor whose Fit shares a card by memory and cores (Hygon, Iluvatar, AMD): ``memory`` in
    MiB, 0 for the whole card (HAMi's 100 per cent); the Fit reads more than 100 cores as 100."""
    return replace(
        selected, nums=nums, memory=memory, percentage=NO_PERCENTAGE if memory else 100, cores=min(cores, 100)
    )
