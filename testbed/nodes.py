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
    TEXT = ("id", "type", "mode")
    return "".join(
        ",".join(
            str(d.get(f, False)).lower() if f == "health" else str(d.get(f, "" if f in TEXT else 0)) for f in fields
        )
        + ":"
        for d in devices
    )


@dataclass(frozen=True)
class Vendor:
    """How a vendor's device plugin registers (its annotation, its format), the cards the tests give it, and what
    its generated Pods ask (the differential run against HAMi's scheduler)."""

    key: str
    annotation: str
    text: bool = False  # EncodeNodeDevices' text, else MarshalNodeDevices' JSON
    cards: tuple[tuple[str, int], ...] = ()  # (type, MiB)
    asks: tuple[tuple[str, tuple[int, ...], float], ...] = ()  # (resource, amounts, how often); the count first
    types: tuple[str, str] = ("", "")  # its use/nouse type annotations
    type_words: tuple[str, ...] = ()  # what they are given
    ids: tuple[str, str] = ("", "")  # its use/nouse id annotations

    def encode(self, devices: list[Obj]) -> str:
        return register_text(devices) if self.text else register(devices)


VENDORS = {
    "NVIDIA": Vendor("NVIDIA", NVIDIA_REGISTER),
    "DCU": Vendor(
        "DCU", "hami.io/node-dcu-register", True, (("DCU-Z100", 32752), ("DCU-K100_AI", 65520)),
        (("hygon.com/dcunum", (1, 1, 2, 3, 4, 5, 8), 1), ("hygon.com/dcumem", (1000, 16000, 32752, 40000, 65520, 70000),
         0.6), ("hygon.com/dcucores", (0, 30, 100, 150), 0.4)),
        ("hygon.com/use-dcutype", "hygon.com/nouse-dcutype"), ("Z100", "k100", "Z100,K100", "BW1000"),
        ("hygon.com/use-gpuuuid", "hygon.com/nouse-gpuuuid"),
    ),
    "AMD": Vendor(
        "AMD", "hami.io/node-amd-register", False, (("AMD-MI250X", 65520), ("AMD-MI300X", 196592)),
        (("amd.com/gpu", (1, 1, 2, 3, 4, 5, 8), 1), ("amd.com/gpumem", (0, 1000, 65520, 100000, 196592, 200000), 0.6),
         ("amd.com/gpucores", (1, 30, 100), 0.4)),
        ("amd.com/use-gputype", "amd.com/nouse-gputype"), ("MI300X", "mi250", "MI100", "MI250X,MI300X"),
        ("amd.com/use-gpu-uuid", "amd.com/nouse-gpu-uuid"),
    ),
    "Biren": Vendor(
        "Biren", "hami.io/node-biren-register", False, (("Biren-BR104", 32768),),
        (("birentech.com/gpu", (1, 1, 2, 3, 4, 5, 8), 1),),
        ids=("birentech.com/use-gpuuuid", "birentech.com/nouse-gpuuuid"),
    ),
    "Vastai": Vendor(
        "Vastai", "hami.io/node-va-register", False, (("Vastai-VA1L", 16384),),
        (("vastaitech.com/va", (1, 1, 2, 3, 4, 5, 8), 1),),
        ids=("vastaitech.com/use-gpuuuid", "vastaitech.com/nouse-gpuuuid"),
    ),
}  # fmt: skip
"""The vendors whose register annotations HAMi's scheduler reads with the chart's device config."""


def device(vendor: str, index: int, node: str, card: str, memory_mib: int, split: int = 10, **more: Any) -> Obj:
    """One device of ``vendor`` on ``node`` (its id derived from both and the index), in HAMi's DeviceInfo fields;
    no mode unless given (NVIDIA's alone)."""
    found = gpu(index, node, memory_mib, split, card=card, **({"mode": ""} | more))
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


def generated_nodes(rng: random.Random, prefix: str, count: int) -> list[tuple[str, str, list[Obj]]]:
    """``count`` nodes, each of one vendor's random cards, sizes, split counts, NUMA layouts, health (and for
    NVIDIA modes): (name, vendor, devices)."""
    found = []
    for n in range(count):
        name = f"{prefix}-{n}"
        vendor = rng.choices(list(VENDORS), (4, 2, 2, 1, 1))[0]
        cards = VENDORS[vendor].cards or CARDS
        card, memory = rng.choice(cards)
        mode = rng.choices(("hami-core", "mig", "mps"), (6, 2, 1))[0] if vendor == "NVIDIA" else ""
        gpus = rng.choice((1, 2, 4, 8))
        numa = rng.random() < 0.6
        devices = [
            device(
                vendor, i, name, card, memory, rng.choice((10, 10, 4, 1, 0)),
                cores=rng.choice((100, 100, 100, 50)), numa=i * 2 // gpus if numa else 0,
                mode=mode, health=rng.random() > 0.1, mig=MIG_A100 if mode == "mig" else None,
            )
            for i in range(gpus)
        ]  # fmt: skip
        if vendor == "NVIDIA":
            devices = [d | {"id": gpu(i, name)["id"]} for i, d in enumerate(devices)]
        found.append((name, vendor, devices))
    return found


def generated_pod(rng: random.Random, ids: list[str], vendors: tuple[str, ...] = ("NVIDIA",)) -> Obj:
    """A Pod asking one of ``vendors``' devices (or now and then another vendor's) with random counts, memory in MiB
    or percent, cores, and HAMi's selectors: types, ids (some of ``ids``, some no node has), NVIDIA's mode and NUMA
    binding."""
    from testbed.pods import container, pod

    vendor = VENDORS[rng.choice(vendors)]
    annotations: dict[str, str] = {}
    if vendor.key == "NVIDIA":
        limits, choices, id_keys = (
            _nvidia_limits,
            NVIDIA_CHOICES,
            ("nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid"),
        )
    else:
        limits, id_keys = (lambda rng: _limits(rng, vendor)), vendor.ids
        choices = {key: vendor.type_words for key in vendor.types if key}
    for key, values in choices.items():
        if rng.random() < 0.2:
            annotations[key] = rng.choice(values)
    for key in id_keys:
        if ids and rng.random() < 0.15:
            picked = rng.sample(ids, min(len(ids), rng.choice((1, 2, 3))))
            annotations[key] = ",".join(picked + (["GPU-not-registered"] if rng.random() < 0.3 else []))
    containers = [container(f"c{i}", limits=limits(rng), defaulted=False) for i in range(rng.choice((1, 1, 1, 2)))]
    init = [container("init", limits=limits(rng), defaulted=False)] if rng.random() < 0.1 else None
    return pod(*containers, name="fit-", namespace=None, scheduler=None, annotations=annotations or None, init=init)


NVIDIA_CHOICES: dict[str, tuple[str, ...]] = {
    "nvidia.com/use-gputype": ("A100", "a10", "H100", "T4,A10", "V100", " "),
    "nvidia.com/nouse-gputype": ("A100", "T4", "80GB"),
    "nvidia.com/vgpu-mode": ("hami-core", "mig", "mps", "mig,hami-core"),
    "nvidia.com/numa-bind": ("true", "false", "1", "yes"),
}


def _nvidia_limits(rng: random.Random) -> dict[str, str]:
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


def _limits(rng: random.Random, vendor: Vendor) -> dict[str, str]:
    if rng.random() < 0.05:
        return {"cambricon.com/vmlu": "1"}
    return {name: str(rng.choice(amounts)) for name, amounts, often in vendor.asks if rng.random() < often}


class Held:
    """An InventoryPort over a Store: what the webhook's NodeInventory hands a review, without its watch."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def current(self) -> Inventory | None:
        return self.store.current()

    def status(self) -> dict[str, Any]:
        return {}
