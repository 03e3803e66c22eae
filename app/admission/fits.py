"""Fits nowhere: could any registered node hold a device container on an empty cluster? Pure.

HAMi's device plugins register each node's devices in a Node annotation (docs/rules.md#fits-nowhere); the
inventory (app/inventory/) keeps them, grouped by *shape*: nodes whose devices are alike but for their ids fit the
same containers, so a review looks at the few shapes, not at every node. A vendor that can tell (``Fitting``)
answers for one container and one shape by HAMi's filter arithmetic; the review only asks, and warns (or denies)
with the vendor's words and the best the cluster has. Every uncertainty is resolved towards "it fits": a Pod HAMi's
scheduler could place is never warned.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, cast

from app.admission import notices
from app.admission.edit import ContainerEdit, PodEdit
from app.admission.notices import Notice

MEMO_SIZE = 4096
FITS_NOWHERE_REASON = "FitsNowhere"
"""The denial's reason (HAMI_FITS_NOWHERE=deny); the warning's kind is notices.FITS_NOWHERE."""


@dataclass(frozen=True, slots=True, order=True)
class Profile:
    """A profile a device can be cut into: an NVIDIA MIG profile (HAMi's MigProfile: where its instances may start)
    or an Enflame DRS profile (no placements)."""

    name: str
    memory: int
    cores: int
    slices: int
    placements: tuple[tuple[int, int], ...]  # (start, size)


@dataclass(frozen=True, slots=True, order=True)
class Registered:
    """One device as its plugin registers it (HAMi's DeviceInfo), without its id: alike devices are one value."""

    count: int  # how many containers may share it (deviceSplitCount)
    memory: int  # MiB
    cores: int
    type: str
    numa: int
    mode: str
    health: bool
    profiles: tuple[Profile, ...] = ()


Shape = tuple[Registered, ...]
"""A node's devices of one vendor, ids left out, in a canonical order: nodes of one shape fit alike."""


def canonical(devices: Iterable[tuple[Registered, str]]) -> tuple[Shape, tuple[str, ...]]:
    """Devices with their ids in the canonical order, as a shape and its ids position by position."""
    pairs = sorted(devices)
    return tuple(d for d, _ in pairs), tuple(i for _, i in pairs)


@dataclass(frozen=True)
class NodeDevices:
    """One node's devices of one vendor: its name, its shape and, position by position, the devices' ids."""

    node: str
    shape: Shape
    ids: tuple[str, ...]


@dataclass(frozen=True)
class Kind:
    """One shape of a vendor: how many nodes have it, and one of them (the message names it)."""

    nodes: int
    example: str


@dataclass(frozen=True)
class Inventory:
    """What the cluster registers, per vendor key: its shapes, and each device id's node (for the id selectors).
    Immutable: a review reads one without a lock."""

    shapes: Mapping[str, Mapping[Shape, Kind]]
    by_id: Mapping[str, Mapping[str, NodeDevices]] = field(default_factory=dict)  # vendor -> device id -> node's
    nodes: int = 0  # nodes with any registered device
    memo: dict[Hashable, bool] = field(default_factory=dict, compare=False, repr=False)
    """What was found for each request in this inventory (requests carry their selectors); cleared when full."""

    def remember(self, key: Hashable, fits: bool) -> bool:
        if len(self.memo) >= MEMO_SIZE:
            self.memo.clear()
        self.memo[key] = fits
        return fits

    def holding(self, vendor: str, ids: Iterable[str]) -> dict[str, NodeDevices]:
        """The nodes of ``vendor`` holding any of ``ids``, by node name."""
        index = self.by_id.get(vendor) or {}
        return {hit.node: hit for hit in (index.get(i) for i in ids) if hit is not None}


class FitRequest(Protocol):
    """A container's request as a vendor reads it, with the Pod's selectors: hashable (a memo's key)."""

    def __hash__(self) -> int: ...
    @property
    def ids(self) -> frozenset[str]:
        """The device ids the Pod asks for (empty: any)."""
        ...

    @property
    def refuse_ids(self) -> frozenset[str]:
        """The device ids the Pod refuses."""
        ...


class Fitting(Protocol):
    """A vendor whose devices are registered on Nodes, and who can say whether one container fits one node."""

    @property
    def key(self) -> str:
        """HAMi's request type: a node's devices of any vendor whose type holds it (case aside) are this vendor's
        to fit (HAMi's getNodeResources)."""
        ...

    @property
    def count_name(self) -> str:
        """The device count resource: the fits-nowhere metric's label."""
        ...

    @property
    def register_annotation(self) -> str:
        """The Node annotation its device plugin registers the devices in."""
        ...

    def decode(self, raw: str, node: str) -> list[tuple[Registered, str]]:
        """The devices and their ids in ``raw``, that annotation's text on ``node`` (app/admission/registers.py);
        raises Unregistered where HAMi's reading fails."""
        ...

    def fit_key(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> Hashable | None:
        """What the answer depends on, as written (no parsing): the memo's key; None when the container names
        none of the vendor's count resource."""
        ...

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> FitRequest | None:
        """The container's request as HAMi's scheduler reads it, or None when it asks for no device."""
        ...

    def fits(self, request: Any, shape: Shape, ids: tuple[str, ...] | None) -> bool:
        """Whether a node of ``shape`` (``ids``: its devices' ids; None: none of them is named by the request),
        empty, could hold ``request`` by HAMi's filter."""
        ...

    def unfit(self, ctr: str, request: Any, inventory: Inventory) -> str:
        """The author's line for a container no node holds: what it asked and the best the cluster has."""
        ...


def fitting(devices: Iterable[object]) -> list[Fitting]:
    """The vendors among ``devices`` that register devices on Nodes (they say which annotation)."""
    return [cast(Fitting, d) for d in devices if isinstance(getattr(d, "register_annotation", None), str)]


class InventoryPort(Protocol):
    """The cluster's registered devices as this process knows them now (app/nodes/ keeps them)."""

    def current(self) -> Inventory | None:
        """The inventory, or None when unknown (not listed yet, no RBAC to list Nodes, no device registered): the
        check then says nothing. Never waits on the API server."""
        ...

    def status(self) -> dict[str, Any]:
        """Readiness detail for /readyz; never makes the process unready."""
        ...


class NoInventory:
    """No inventory: nothing is ever said to fit nowhere."""

    def __init__(self, reason: str = "off") -> None:
        self.reason = reason

    def current(self) -> Inventory | None:
        return None

    def status(self) -> dict[str, Any]:
        return {"inventory": self.reason}


NO_INVENTORY = NoInventory()


class FitsCheck(StrEnum):
    """What the webhook does with a device container no registered node could hold (HAMI_FITS_NOWHERE)."""

    WARN = "warn"
    """Admitted with a warning naming the container, what it asked and the best the cluster has."""
    DENY = "deny"
    """Refused (403) with the same words: for clusters whose nodes do not come and go."""
    OFF = "off"
    """No inventory is kept and nothing is said."""


def nowhere(pod: PodEdit, devices: Iterable[object], inventory: Inventory | None) -> list[tuple[str, Notice]]:
    """The device resource and warning of each device container no registered node could hold, alone, empty.

    Containers are checked one by one and vendor by vendor: a Pod whose containers fit apart but not together is
    not warned (HAMi's scheduler decides that, with what is running). An answer is remembered with the inventory
    it was found in, by what the container and the Pod wrote: device Pods ask for the same few things."""
    if inventory is None:
        return []
    found: list[tuple[str, Notice]] = []
    annotations = pod.annotations
    for device in fitting(devices):
        for ctr in pod.containers:
            key = device.fit_key(ctr, annotations)
            if key is None:
                continue
            fits = inventory.memo.get(key)
            if fits is None:
                request = device.fit_request(ctr, annotations)
                fits = inventory.remember(key, request is None or _fits_somewhere(device, request, inventory))
            if not fits:
                request = device.fit_request(ctr, annotations)
                text = device.unfit(notices.name(ctr.name), request, inventory)
                found.append((device.count_name, Notice(notices.FITS_NOWHERE, text)))
    return found


def _fits_somewhere(device: Fitting, request: FitRequest, inventory: Inventory) -> bool:
    """Some node of the vendor could hold ``request``. With no id selector a shape answers for all its nodes; ids
    asked for narrow to the nodes holding one (on any other every device fails HAMi's id check); the nodes holding
    a refused id go through their own ids, the others through their shapes."""
    if request.ids:
        named = inventory.holding(device.key, request.ids)
        return any(device.fits(request, node.shape, node.ids) for node in named.values())
    touched = inventory.holding(device.key, request.refuse_ids) if request.refuse_ids else {}
    if any(device.fits(request, node.shape, node.ids) for node in touched.values()):
        return True
    left = {shape: kind.nodes for shape, kind in (inventory.shapes.get(device.key) or {}).items()}
    for node in touched.values():
        if node.shape in left:  # the id index is live: a node may have changed since the shapes were published
            left[node.shape] -= 1
    return any(device.fits(request, shape, None) for shape, count in left.items() if count > 0)


def intern(text: str) -> str:
    """One string object for each device type and mode: thousands of nodes share a handful of them."""
    return sys.intern(text)


class Unregistered(ValueError):
    """A register annotation HAMi's scheduler cannot read either: the node's devices of that vendor are left out,
    as HAMi leaves them out."""
