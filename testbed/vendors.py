"""Every vendor's register format as its device plugin writes it, and the generated clusters and Pods of fits
nowhere's differential run against HAMi's scheduler (docs/rules.md#fits-nowhere): one place for the unit tests, the
differential and the CLI's test.

The formats, from HAMi's code: MarshalNodeDevices' JSON (NVIDIA, AMD, Biren, Vastai, Kunlunxin vXPU, Ascend),
EncodeNodeDevices' text (Hygon DCU, Iluvatar), MetaX's MetaxSDeviceInfo list, Enflame's DRS capacity.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass
from typing import Any

from testbed.nodes import CARDS, MIG_A100, NVIDIA_REGISTER, Encoder, gpu, register

Obj = dict[str, Any]


def register_text(devices: list[Obj]) -> str:
    """HAMi's older text (EncodeNodeDevices): ``id,count,devmem,devcore,type,numa,health,index,mode:`` per device."""
    fields = ("id", "count", "devmem", "devcore", "type", "numa", "health", "index", "mode")
    words = ("id", "type", "mode")
    return "".join(
        ",".join(
            str(d.get(f, False)).lower() if f == "health" else str(d.get(f, "" if f in words else 0)) for f in fields
        )
        + ":"
        for d in devices
    )


def register_metax(devices: list[Obj]) -> str:
    """MetaX's sGPU list (MetaxSDeviceInfo): each device's uuid, split count, compute, memory, NUMA node, health."""
    return json.dumps(
        [
            {"uuid": d["id"], "totalDevCount": d.get("count", 0), "totalCompute": d.get("devcore", 0),
             "totalVRam": d.get("devmem", 0), "numa": d.get("numa", 0), "healthy": d.get("health", False)}
            for d in devices
        ],
        separators=(",", ":"),
    )  # fmt: skip


def register_drs(devices: list[Obj]) -> str:
    """Enflame's DRS capacity: each device's index, minor and slice capacity (its split count), and the node's
    profiles (the first device's ``drs`` names; ids made up)."""
    profiles = {name: str(10 + i) for i, name in enumerate(devices[0].get("drs", ()))} if devices else {}
    listed = [
        {"index": str(d.get("index", 0)), "minor": str(d.get("index", 0)), "capacity": d["count"]} for d in devices
    ]
    return json.dumps({"devices": listed, "profiles": profiles}, separators=(",", ":"))


DRS_PROFILES = ("1g.8gb", "2g.16gb", "3g.24gb", "6g.48gb")


@dataclass(frozen=True)
class Vendor:
    """How a vendor's device plugin registers (its annotation, its format), the cards the tests give it, and what
    its generated Pods ask (the differential run against HAMi's scheduler)."""

    key: str
    annotation: str
    encode: Encoder = register
    cards: tuple[tuple[str, int], ...] = ()  # (type, MiB)
    asks: tuple[tuple[str, tuple[int, ...], float], ...] = ()  # (resource, amounts, how often)
    marks: tuple[tuple[str, tuple[str, ...]], ...] = ()  # Pod annotations its Fit reads, and what they are given
    ids: tuple[str, str] = ("", "")  # its use/nouse id annotations


COUNTS = (1, 1, 2, 3, 4, 5, 8)
VENDORS = {
    "NVIDIA": Vendor(
        "NVIDIA", NVIDIA_REGISTER, register, CARDS, ids=("nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid")
    ),
    "DCU": Vendor(
        "DCU", "hami.io/node-dcu-register", register_text, (("DCU-Z100", 32752), ("DCU-K100_AI", 65520)),
        (("hygon.com/dcunum", COUNTS, 1), ("hygon.com/dcumem", (1000, 16000, 32752, 40000, 65520, 70000), 0.6),
         ("hygon.com/dcucores", (0, 30, 100, 150), 0.4)),
        (("hygon.com/use-dcutype", ("Z100", "k100", "Z100,K100", "BW1000")), ("hygon.com/nouse-dcutype", ("K100",))),
        ("hygon.com/use-gpuuuid", "hygon.com/nouse-gpuuuid"),
    ),
    "AMD": Vendor(
        "AMD", "hami.io/node-amd-register", register, (("AMD-MI250X", 65520), ("AMD-MI300X", 196592)),
        (("amd.com/gpu", COUNTS, 1), ("amd.com/gpumem", (0, 1000, 65520, 100000, 196592, 200000), 0.6),
         ("amd.com/gpucores", (1, 30, 100), 0.4)),
        (("amd.com/use-gputype", ("MI300X", "mi250", "MI100", "MI250X,MI300X")), ("amd.com/nouse-gputype", ("MI300",))),
        ("amd.com/use-gpu-uuid", "amd.com/nouse-gpu-uuid"),
    ),
    "Biren": Vendor(
        "Biren", "hami.io/node-biren-register", register, (("Biren-BR104", 32768),),
        (("birentech.com/gpu", COUNTS, 1),),
        ids=("birentech.com/use-gpuuuid", "birentech.com/nouse-gpuuuid"),
    ),
    "Vastai": Vendor(
        "Vastai", "hami.io/node-va-register", register, (("Vastai-VA1L", 16384),), (("vastaitech.com/va", COUNTS, 1),),
        ids=("vastaitech.com/use-gpuuuid", "vastaitech.com/nouse-gpuuuid"),
    ),
    "XPU": Vendor(
        "XPU", "hami.io/node-register-xpu", register, (("XPU-P800", 98304), ("XPU-R200", 32768)),
        (("kunlunxin.com/vxpu", (1, 1, 2, 3, 4, 8), 1),
         ("kunlunxin.com/vxpu-memory", (1000, 24576, 30000, 49152, 98304, 100000), 0.6)),
        ids=("hami.io/use-xpu-uuid", "hami.io/no-use-xpu-uuid"),
    ),
    "Metax-SGPU": Vendor(
        "Metax-SGPU", "metax-tech.com/node-gpu-devices", register_metax, (("Metax-SGPU", 65536), ("Metax-SGPU", 32768)),
        (("metax-tech.com/sgpu", COUNTS, 1), ("metax-tech.com/vmemory", (1, 16, 32, 64, 70), 0.6),
         ("metax-tech.com/vcore", (0, 30, 100, 150), 0.4)),
        (("metax-tech.com/sgpu-app-class", ("online", "offline")),),
        ("metax-tech.com/use-gpuuuid", "metax-tech.com/nouse-gpuuuid"),
    ),
    "Enflame": Vendor(
        "Enflame", "enflame.com/gcu-drs-capacity", register_drs, (("Enflame", 49152),),
        (("enflame.com/drs-gcu", (0, 1, 2, 3, 5, 6, 7), 0.5),
         ("enflame.com/gcu-memory", (0, 8, 20, 48, 60, 16384), 0.5), ("enflame.com/gcu-core", (0, 20, 50, 100), 0.4)),
        ids=("enflame.com/use-gpuuuid", "enflame.com/nouse-gpuuuid"),
    ),
    "BI-V150": Vendor(
        "BI-V150", "hami.io/node-BI-V150-register", register_text, (("BI-V150", 32768), ("BI-V150", 16384)),
        (("iluvatar.ai/BI-V150-vgpu", COUNTS, 1), ("iluvatar.ai/BI-V150.vMem", (1, 64, 128, 129, 200), 0.6),
         ("iluvatar.ai/BI-V150.vCore", (0, 30, 100, 150), 0.4)),
        ids=("hami.io/use-BI-V150-uuid", "hami.io/no-use-BI-V150-uuid"),
    ),
    "Ascend910B3": Vendor(
        "Ascend910B3", "hami.io/node-register-Ascend910B3", register, (("Ascend910B3", 65536), ("Ascend910B3", 32768)),
        (("huawei.com/Ascend910B3", COUNTS, 1),
         ("huawei.com/Ascend910B3-memory", (1000, 16384, 32768, 60000, 65536, 70000), 0.6),
         ("huawei.com/Ascend910B3-core", (0, 30, 100), 0.2)),
        (("huawei.com/vnpu-mode", ("hami-core",)),),
        ("hami.io/use-Ascend910B3-uuid", "hami.io/no-use-Ascend910B3-uuid"),
    ),
}  # fmt: skip
"""The vendors whose register annotations HAMi's scheduler reads: with the chart's device config, and Iluvatar's and
Ascend's (one chip each here) with its --enable-iluvatar and --enable-ascend."""


def device(vendor: str, index: int, node: str, card: str, memory_mib: int, split: int = 10, **more: Any) -> Obj:
    """One device of ``vendor`` on ``node`` in HAMi's DeviceInfo fields, its id as the vendor's plugin makes it (as
    Enflame's reading makes it), else derived from the node and index; no mode unless given (NVIDIA's alone)."""
    found = gpu(index, node, memory_mib, split, card=card, **({"mode": ""} | more))
    if vendor == "NVIDIA":
        return found
    if vendor == "Enflame":
        return found | {"id": f"{node}-enflame-drs-{index}", "index": index}
    return found | {"id": f"{vendor}-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}-{index}')}"}


def generated_nodes(rng: random.Random, prefix: str, count: int, first: int = 0) -> list[tuple[str, str, list[Obj]]]:
    """``count`` nodes, each of one vendor's random cards, sizes, split counts, NUMA layouts, health (NVIDIA's
    modes, Enflame's profiles): (name, vendor, devices). The vendors take turns from the ``first``-th (a run
    passing how many nodes it made so far covers them all in as many nodes)."""
    found = []
    for n in range(count):
        name = f"{prefix}-{n}"
        vendor = list(VENDORS)[(first + n) % len(VENDORS)]
        card, memory = rng.choice(VENDORS[vendor].cards)
        mode = rng.choices(("hami-core", "mig", "mps"), (6, 2, 1))[0] if vendor == "NVIDIA" else ""
        gpus = rng.choice((1, 2, 4, 8))
        numa = rng.random() < 0.6
        drs = sorted(rng.sample(DRS_PROFILES, rng.randint(1, len(DRS_PROFILES))))
        devices = [
            device(
                vendor, i, name, card, memory, rng.choice((10, 10, 4, 1, 0)),
                cores=rng.choice((100, 100, 100, 50)), numa=i * 2 // gpus if numa else 0,
                mode=mode, health=rng.random() > 0.1, mig=MIG_A100 if mode == "mig" else None,
            ) | ({"drs": drs, "count": rng.choice((6, 6, 3))} if vendor == "Enflame" else {})
            for i in range(gpus)
        ]  # fmt: skip
        found.append((name, vendor, devices))
    return found


def generated_pod(rng: random.Random, ids: list[str], vendors: tuple[str, ...] = ("NVIDIA",)) -> Obj:
    """A Pod asking one of ``vendors``' devices (or now and then another vendor's) with random counts, memory,
    cores, and the annotations its Fit reads: types, ids (some of ``ids``, some no node has), NVIDIA's mode and
    NUMA binding, MetaX's app class."""
    from testbed.pods import container, pod

    vendor = VENDORS[rng.choice(vendors)]
    annotations: dict[str, str] = {}
    marks = NVIDIA_MARKS if vendor.key == "NVIDIA" else vendor.marks
    for key, values in marks:
        if rng.random() < 0.2:
            annotations[key] = rng.choice(values)
    for key in vendor.ids:
        if ids and rng.random() < 0.15:
            picked = rng.sample(ids, min(len(ids), rng.choice((1, 2, 3))))
            annotations[key] = ",".join(picked + (["GPU-not-registered"] if rng.random() < 0.3 else []))
    containers = [
        container(f"c{i}", limits=_limits(rng, vendor), defaulted=False) for i in range(rng.choice((1, 1, 1, 2)))
    ]
    init = [container("init", limits=_limits(rng, vendor), defaulted=False)] if rng.random() < 0.1 else None
    return pod(*containers, name="fit-", namespace=None, scheduler=None, annotations=annotations or None, init=init)


NVIDIA_MARKS = (
    ("nvidia.com/use-gputype", ("A100", "a10", "H100", "T4,A10", "V100", " ")),
    ("nvidia.com/nouse-gputype", ("A100", "T4", "80GB")),
    ("nvidia.com/vgpu-mode", ("hami-core", "mig", "mps", "mig,hami-core")),
    ("nvidia.com/numa-bind", ("true", "false", "1", "yes")),
)


def _limits(rng: random.Random, vendor: Vendor) -> dict[str, str]:
    if rng.random() < 0.05:
        return {"cambricon.com/vmlu": "1"}
    if vendor.key != "NVIDIA":
        return {name: str(rng.choice(amounts)) for name, amounts, often in vendor.asks if rng.random() < often}
    asked = {"nvidia.com/gpu": str(rng.choice((1, 1, 1, 2, 2, 3, 4, 5, 8, 9)))}
    if rng.random() < 0.6:
        asked["nvidia.com/gpumem"] = str(rng.choice((1000, 9000, 15360, 20000, 24576, 40000, 50000, 81920, 90000)))
    elif rng.random() < 0.4:
        asked["nvidia.com/gpumem-percentage"] = str(rng.choice((10, 50, 100)))
    if rng.random() < 0.5:
        asked["nvidia.com/gpucores"] = str(rng.choice((0, 10, 30, 50, 60, 100, 120)))
    return asked
