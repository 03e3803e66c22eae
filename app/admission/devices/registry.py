"""The vendors, in the one fixed order every container is shown to them.

Rule: docs/rules.md#vendors-are-asked-in-a-fixed-order.
"""

from __future__ import annotations

from collections.abc import Callable

from app.admission.devices import (
    amd,
    ascend,
    awsneuron,
    biren,
    cambricon,
    enflame,
    hygon,
    iluvatar,
    kunlun,
    metax,
    mthreads,
    nvidia,
    vastai,
)
from app.admission.devices.base import ConfigError, ConfigSection, Device

Builder = Callable[[ConfigSection], tuple[Device, ...]]

# (vendor builder, the flag that must be on for it to be registered, or None)
VENDORS: tuple[tuple[Builder, str | None], ...] = (
    (nvidia.build, None),
    (cambricon.build, None),
    (hygon.build, None),
    (iluvatar.build, "enable_iluvatar"),
    (ascend.build, "enable_ascend"),
    (metax.build, None),
    (enflame.build, None),
    (mthreads.build, None),
    (kunlun.build, None),
    (awsneuron.build, None),
    (amd.build, None),
    (vastai.build, None),
    (biren.build, None),
)


def build_devices(root: ConfigSection, *, enable_ascend: bool, enable_iluvatar: bool) -> tuple[Device, ...]:
    """Every registered backend, in registry order; fails like HAMi when nothing is configured."""
    flags = {"enable_ascend": enable_ascend, "enable_iluvatar": enable_iluvatar}
    devices = tuple(device for builder, flag in VENDORS if flag is None or flags[flag] for device in builder(root))
    keys = [device.key for device in devices]
    if "" in keys:
        raise ConfigError("every iluvatars[] and vnpus.configs[] entry needs a commonWord")
    if len(set(keys)) != len(keys):
        duplicate = next(key for key in keys if keys.count(key) > 1)
        raise ConfigError(f"commonWord {duplicate!r} names two device backends")
    if not any(device.resource_names for device in devices):
        raise ConfigError("all configurations are empty: no device vendor has a resource name")
    return devices


def switched_off(root: ConfigSection, *, enable_ascend: bool, enable_iluvatar: bool) -> dict[str, str]:
    """The resource names of every vendor a flag keeps off, each mapped to that flag's setting name.

    A Pod asking only for these passes unchanged, as in HAMi; knowing them lets the review say why.
    """
    flags = {"enable_ascend": enable_ascend, "enable_iluvatar": enable_iluvatar}
    return {
        name: flag
        for builder, flag in VENDORS
        if flag is not None and not flags[flag]
        for device in builder(root)
        for name in device.resource_names
    }
