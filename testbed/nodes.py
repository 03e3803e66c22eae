"""GPU Nodes as HAMi's device plugins register them: one builder for the unit tests, the real-cluster tests, the
differential run against HAMi's scheduler and the inventory's benchmark.

A device is HAMi's DeviceInfo as MarshalNodeDevices writes it (pkg/device/devices.go: Go's field order, zero values
left out), with the chart's defaults: deviceSplitCount 10, memory and core scaling 1, HAMi-core mode.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

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


def node_metadata(name: str, devices: list[Obj], key: str = NVIDIA_REGISTER) -> Obj:
    """A Node as a PartialObjectMetadata list item carries it: its name and the register annotation."""
    return {"metadata": {"name": name, "annotations": {key: register(devices)}}}
