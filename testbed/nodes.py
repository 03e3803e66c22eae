"""GPU Nodes as HAMi's device plugins register them: one builder for the unit tests, the real-cluster tests, the
differential run against HAMi's scheduler and the inventory's benchmark.

A device is HAMi's DeviceInfo as MarshalNodeDevices writes it (pkg/device/devices.go: Go's field order, zero values
left out), with the chart's defaults: deviceSplitCount 10, memory and core scaling 1, HAMi-core mode.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from app.admission.fits import Inventory
from app.inventory.store import Store

Obj = dict[str, Any]
Encoder = Callable[[list[Obj]], str]
NVIDIA_REGISTER = "hami.io/node-nvidia-register"
A10 = "NVIDIA-NVIDIA A10"


def gpu(
    index: int,
    node: str,
    memory_mib: int = 24576,
    split: int = 10,
    *,
    cores: int = 100,
    card: str = A10,
    numa: int = 0,
    mode: str = "hami-core",
    health: bool = True,
    mig: list[Obj] | None = None,
) -> Obj:
    """One GPU of ``node``, its id derived from the node's name and its index (the same on every run)."""
    device: Obj = {"id": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}-{index}')}"}
    device |= {"index": index} if index else {}
    device |= {"count": split, "devmem": memory_mib, "devcore": cores, "type": card}
    device |= {"numa": numa} if numa else {}
    device |= {"mode": mode} if mode else {}
    device |= {"migProfiles": mig} if mig else {}
    return device | ({"health": True} if health else {})


def register(devices: list[Obj]) -> str:
    """The register annotation's value for ``devices``, compact as Go's json.Marshal writes it."""
    return json.dumps(devices, separators=(",", ":"))


def node_metadata(name: str, devices: list[Obj], key: str = NVIDIA_REGISTER, encode: Encoder = register) -> Obj:
    """A Node as a PartialObjectMetadata list item carries it: its name and the register annotation, written by
    ``encode`` (a vendor's format: testbed/vendors.py)."""
    return {"metadata": {"name": name, "annotations": {key: encode(devices)}}}


CARDS = (
    ("NVIDIA-Tesla T4", 15360),
    (A10, 24576),
    ("NVIDIA-NVIDIA A100-SXM4-40GB", 40960),
    ("NVIDIA-NVIDIA A100-SXM4-80GB", 81920),
    ("NVIDIA-NVIDIA H100 80GB HBM3", 81559),
)
MIG_A100 = [  # an A100 80GB's profiles as HAMi's device plugin registers them: memory, cores, where each may start
    {"name": "1g.10gb", "memoryMB": 9728, "core": 14, "sliceCount": 1,
     "placements": [{"start": i, "size": 1} for i in range(7)]},
    {"name": "2g.20gb", "memoryMB": 19968, "core": 28, "sliceCount": 2,
     "placements": [{"start": i, "size": 2} for i in (0, 2, 4)]},
    {"name": "3g.40gb", "memoryMB": 40192, "core": 42, "sliceCount": 3,
     "placements": [{"start": i, "size": 4} for i in (0, 4)]},
    {"name": "7g.80gb", "memoryMB": 80896, "core": 100, "sliceCount": 7, "placements": [{"start": 0, "size": 8}]},
]  # fmt: skip


class Held:
    """An InventoryPort over a Store: what the webhook's NodeInventory hands a review, without its watch."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def current(self) -> Inventory | None:
        return self.store.current()

    def status(self) -> dict[str, Any]:
        return {}
