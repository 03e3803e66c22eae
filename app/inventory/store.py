"""The inventory's state: each node's register annotations, decoded once per change, indexed by shape and device id.

The Node watch's thread calls ``listed``/``event``; reviews call ``current``, which hands out the last published
Inventory without a lock. A node's devices are a vendor's as HAMi's scheduler counts them (getNodeResources): every
device the node registers, in any vendor's annotation, whose type holds the vendor's key, case aside. A Node event
whose register annotations did not change (a heartbeat, a handshake, a label) costs a dict lookup and a string
comparison: Nodes change often, their devices rarely.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.admission.fits import Fitting, Inventory, Kind, NodeDevices, Registered, Shape, Unregistered, canonical
from app.admission.registers import Decoder

log = logging.getLogger("hami_webhook.inventory")


@dataclass(frozen=True)
class Figures:
    """The inventory's size for its gauges: nodes and devices per vendor, and when it was last known current."""

    nodes: Mapping[str, int]
    devices: Mapping[str, int]
    updated: float  # Unix seconds; 0 before the first list


class Store:
    """Registered devices by node and vendor. ``_lock`` guards the mutable indexes; ``_current`` is replaced whole."""

    def __init__(self, vendors: Sequence[Fitting], clock: Callable[[], float] = time.time) -> None:
        self._decoders: dict[str, Decoder] = {vendor.register_annotation: vendor.decode for vendor in vendors}
        self._words = {vendor.key: vendor.key.lower() for vendor in vendors}
        self._typed: dict[str, tuple[str, ...]] = {}  # a device type -> the vendors whose key it holds
        self._clock = clock
        self._lock = threading.Lock()
        self._raw: dict[str, dict[str, str]] = {}  # node -> annotation -> its last value
        self._nodes: dict[str, dict[str, NodeDevices]] = {}  # node -> vendor -> its devices
        self._shapes: dict[str, dict[Shape, dict[str, None]]] = {}  # vendor -> shape -> nodes (insertion-ordered)
        self._by_id: dict[str, dict[str, NodeDevices]] = {}  # vendor -> device id -> the node's devices
        self._current: Inventory | None = None
        self._updated = 0.0
        self._unreadable: set[str] = set()  # nodes logged once for an annotation HAMi cannot read either

    def current(self) -> Inventory | None:
        """The inventory, None before the first list and while no node registers any device."""
        return self._current

    def figures(self) -> Figures:
        with self._lock:
            nodes = {v: sum(len(n) for n in shapes.values()) for v, shapes in self._shapes.items()}
            devices = {v: sum(len(s) * len(n) for s, n in shapes.items()) for v, shapes in self._shapes.items()}
            return Figures(nodes, devices, self._updated)

    # -- the stream's callbacks ---------------------------------------------------------------------------------

    def listed(self, _stream: object, items: list[dict[str, Any]], _rv: str) -> None:
        """A fresh list: every node replaced."""
        with self._lock:
            seen = set()
            for item in items:
                name, annotations = _meta(item)
                seen.add(name)
                self._take(name, annotations)
            for gone in [n for n in self._raw if n not in seen]:
                self._take(gone, {})
            self._publish()

    def event(self, _stream: object, kind: str, obj: Mapping[str, Any], _rv: str) -> None:
        """One watch event (a BOOKMARK only says the watch is current)."""
        with self._lock:
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                name, annotations = _meta(obj)
                changed = self._take(name, {} if kind == "DELETED" else annotations)
                if changed:
                    self._publish()
                    return
            self._updated = self._clock()

    # -- under the lock -----------------------------------------------------------------------------------------

    def _take(self, name: str, annotations: Mapping[str, Any]) -> bool:
        """Record a node's register annotations; whether its devices changed."""
        raw = {key: value for key in self._decoders if isinstance(value := annotations.get(key), str)}
        if self._raw.get(name, {}) == raw:
            return False
        for vendor, devices in self._nodes.pop(name, {}).items():
            self._forget(name, vendor, devices)
        self._raw.pop(name, None)
        if not raw:
            return True
        self._raw[name] = raw
        found: list[tuple[Registered, str]] = []
        for key, value in raw.items():
            try:
                found += self._decoders[key](value, name)
            except Unregistered as exc:
                if name not in self._unreadable:
                    self._unreadable.add(name)
                    log.warning("inventory: node %s: %s unreadable (%s); HAMi leaves it out too", name, key, exc)
        by_vendor: dict[str, list[tuple[Registered, str]]] = {}
        for pair in found:
            for vendor in self._vendors_of(pair[0].type):
                by_vendor.setdefault(vendor, []).append(pair)
        kept: dict[str, NodeDevices] = {}
        for vendor, pairs in by_vendor.items():
            shape, ids = canonical(pairs)
            devices = kept[vendor] = NodeDevices(name, shape, ids)
            self._shapes.setdefault(vendor, {}).setdefault(shape, {})[name] = None
            index = self._by_id.setdefault(vendor, {})
            for device_id in ids:
                index[device_id] = devices
        if kept:
            self._nodes[name] = kept
        return True

    def _vendors_of(self, card: str) -> tuple[str, ...]:
        """The vendors a device of type ``card`` counts for (remembered: a cluster has a handful of types)."""
        found = self._typed.get(card)
        if found is None:
            lowered = card.lower()
            found = self._typed[card] = tuple(v for v, word in self._words.items() if word in lowered)
        return found

    def _forget(self, name: str, vendor: str, devices: NodeDevices) -> None:
        shapes = self._shapes[vendor]
        holders = shapes[devices.shape]
        holders.pop(name, None)
        if not holders:
            del shapes[devices.shape]
        index = self._by_id[vendor]
        for device_id in devices.ids:
            if index.get(device_id) is devices:
                del index[device_id]

    def _publish(self) -> None:
        """A new Inventory from the indexes: the shapes copied (a review iterates them), the id index shared (a review
        only looks ids up in it)."""
        self._updated = self._clock()
        shapes = {
            vendor: {shape: Kind(len(nodes), next(iter(nodes))) for shape, nodes in found.items()}
            for vendor, found in self._shapes.items()
            if found
        }
        if not shapes:
            self._current = None
            return
        self._current = Inventory(shapes=shapes, by_id=self._by_id, nodes=len(self._nodes))


def _meta(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or ""), meta.get("annotations") or {}
