"""GPU Nodes as HAMi's device plugins register them: one builder for the unit tests, the real-cluster tests, the
differential run against HAMi's scheduler and the inventory's benchmark.

A device is HAMi's DeviceInfo as MarshalNodeDevices writes it (pkg/device/devices.go: Go's field order, zero values
left out), with the chart's defaults: deviceSplitCount 10, memory and core scaling 1, HAMi-core mode.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from typing import Any

from app.admission.fits import Inventory
from app.inventory.store import Store

Obj = dict[str, Any]
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


def register_text(devices: list[Obj]) -> str:
    """The register annotation's value in HAMi's older text (EncodeNodeDevices, Hygon and Iluvatar):
    ``id,count,devmem,devcore,type,numa,health,index,mode:`` per device."""
    fields = ("id", "count", "devmem", "devcore", "type", "numa", "health", "index", "mode")
    return "".join(
        ",".join(str(d.get(f, False)).lower() if f == "health" else str(d.get(f, 0)) for f in fields) + ":"
        for d in devices
    )


@dataclass(frozen=True)
class Vendor:
    """How a vendor's device plugin registers: its annotation, its format, and the cards the tests give it."""

    key: str
    annotation: str
    text: bool = False  # EncodeNodeDevices' text, else MarshalNodeDevices' JSON
    cards: tuple[tuple[str, int], ...] = ()  # (type, MiB)

    def encode(self, devices: list[Obj]) -> str:
        return register_text(devices) if self.text else register(devices)


VENDORS = {
    "NVIDIA": Vendor("NVIDIA", NVIDIA_REGISTER),
    "DCU": Vendor("DCU", "hami.io/node-dcu-register", True, (("DCU-Z100", 32752), ("DCU-K100_AI", 65520))),
    "AMD": Vendor("AMD", "hami.io/node-amd-register", False, (("AMD-MI250X", 65520), ("AMD-MI300X", 196592))),
    "Biren": Vendor("Biren", "hami.io/node-biren-register", False, (("Biren-BR104", 32768),)),
    "Vastai": Vendor("Vastai", "hami.io/node-va-register", False, (("Vastai-VA1L", 16384),)),
}
"""The vendors whose register annotations HAMi's scheduler reads with the chart's device config."""


def device(vendor: str, index: int, node: str, card: str, memory_mib: int, split: int = 10, **more: Any) -> Obj:
    """One device of ``vendor`` on ``node`` (its id derived from both and the index), in HAMi's DeviceInfo fields."""
    found = gpu(index, node, memory_mib, split, card=card, **more)
    return found | {"id": f"{vendor}-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}-{index}')}"}


def node_metadata(name: str, devices: list[Obj], key: str = NVIDIA_REGISTER, text: bool = False) -> Obj:
    """A Node as a PartialObjectMetadata list item carries it: its name and the register annotation (in HAMi's
    older text with ``text``: Hygon's, Iluvatar's)."""
    return {"metadata": {"name": name, "annotations": {key: register_text(devices) if text else register(devices)}}}


# -- generated clusters and Pods, for the differential run against HAMi's scheduler -------------------------------

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


def generated_nodes(rng: random.Random, prefix: str, count: int) -> list[tuple[str, list[Obj]]]:
    """``count`` GPU nodes of random cards, sizes, split counts, NUMA layouts, modes and health."""
    found = []
    for n in range(count):
        name = f"{prefix}-{n}"
        card, memory = rng.choice(CARDS)
        mode = rng.choices(("hami-core", "mig", "mps"), (6, 2, 1))[0]
        gpus = rng.choice((1, 2, 4, 8))
        numa = rng.random() < 0.6
        devices = [
            gpu(
                i, name, memory, rng.choice((10, 10, 4, 1, 0)),
                cores=rng.choice((100, 100, 100, 50)), card=card, numa=i * 2 // gpus if numa else 0,
                mode=mode, health=rng.random() > 0.1, mig=MIG_A100 if mode == "mig" else None,
            )
            for i in range(gpus)
        ]  # fmt: skip
        found.append((name, devices))
    return found


def generated_pod(rng: random.Random, ids: list[str]) -> Obj:
    """A Pod asking NVIDIA GPUs (or now and then another vendor's devices) with random counts, memory in MiB or
    percent, cores, and HAMi's selectors: types, ids (some of ``ids``, some no node has), mode, NUMA binding."""
    from testbed.pods import container, pod

    def limits() -> dict[str, str]:
        if rng.random() < 0.05:
            return {"cambricon.com/vmlu": "1"}
        asked = {"nvidia.com/gpu": str(rng.choice((1, 1, 1, 2, 2, 3, 4, 5, 8, 9)))}
        if rng.random() < 0.6:
            asked["nvidia.com/gpumem"] = str(rng.choice((1000, 9000, 15360, 20000, 24576, 40000, 50000, 81920, 90000)))
        elif rng.random() < 0.4:
            asked["nvidia.com/gpumem-percentage"] = str(rng.choice((10, 50, 100)))
        if rng.random() < 0.5:
            asked["nvidia.com/gpucores"] = str(rng.choice((0, 10, 30, 50, 60, 100, 120)))
        return asked

    annotations: dict[str, str] = {}
    choices: dict[str, tuple[str, ...]] = {
        "nvidia.com/use-gputype": ("A100", "a10", "H100", "T4,A10", "V100", " "),
        "nvidia.com/nouse-gputype": ("A100", "T4", "80GB"),
        "nvidia.com/vgpu-mode": ("hami-core", "mig", "mps", "mig,hami-core"),
        "nvidia.com/numa-bind": ("true", "false", "1", "yes"),
    }
    for key, values in choices.items():
        if rng.random() < 0.2:
            annotations[key] = rng.choice(values)
    for key in ("nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid"):
        if ids and rng.random() < 0.15:
            picked = rng.sample(ids, min(len(ids), rng.choice((1, 2, 3))))
            annotations[key] = ",".join(picked + (["GPU-not-registered"] if rng.random() < 0.3 else []))
    containers = [container(f"c{i}", limits=limits(), defaulted=False) for i in range(rng.choice((1, 1, 1, 2)))]
    init = [container("init", limits=limits(), defaulted=False)] if rng.random() < 0.1 else None
    return pod(*containers, name="fit-", namespace=None, scheduler=None, annotations=annotations or None, init=init)


class Held:
    """An InventoryPort over a Store: what the webhook's NodeInventory hands a review, without its watch."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def current(self) -> Inventory | None:
        return self.store.current()

    def status(self) -> dict[str, Any]:
        return {}
