"""How HAMi's device plugins write a node's devices in its register annotations, read back as HAMi's scheduler
reads them (docs/rules.md#fits-nowhere): four formats, each a function from the annotation's text to the devices
with their ids. Pure; a text HAMi's reading refuses raises Unregistered (HAMi leaves that vendor's devices of the
node out, and so does the inventory).

- ``decode_json``: pkg/device/devices.go MarshalNodeDevices, read by UnMarshalNodeDevices (NVIDIA, AMD, Vastai,
  Biren, Kunlunxin vXPU, Ascend);
- ``decode_text``: the older EncodeNodeDevices text, read by DecodeNodeDevices (Hygon DCU, Iluvatar);
- ``decode_metax``: MetaX's own sGPU list (pkg/device/metax/protocol.go MetaxSDeviceInfo);
- ``decode_drs``: Enflame's DRS capacity and profiles (pkg/device/enflame/device.go GetNodeDevices).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from app.admission.fits import Profile, Registered, Unregistered, intern

Devices = list[tuple[Registered, str]]
Decoder = Callable[[str, str], Devices]
"""A register annotation's text and its node's name (Enflame's ids carry it) -> the devices and their ids."""
INT32 = (-(2**31), 2**31 - 1)
UINT32 = (0, 2**32 - 1)
INT64 = (-(2**63), 2**63 - 1)
GO_INT = re.compile(r"[+-]?[0-9]+")  # what strconv.ParseInt and Atoi accept: no spaces, no underscores
GO_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True}
GO_BOOLS |= {"0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}
SEPARATOR = ":"  # OneContainerMultiDeviceSplitSymbol


def _json(raw: str) -> Any:
    import orjson

    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Unregistered(f"not JSON: {exc}") from None


def _list(raw: str) -> list[Any]:
    """A JSON array of at least one device (null or [] decode, but HAMi then finds no device)."""
    items = _json(raw)
    if items is not None and not isinstance(items, list):
        raise Unregistered("not a list of devices")
    if not items:
        raise Unregistered("no device registered")
    return items


def _object(item: Any) -> dict[str, Any]:
    """A JSON object's fields as Go's encoding/json fills a struct: keys matched case aside, so each key's folded
    name, the last of the keys that fold alike winning (each sets the field in turn). Read with lower-case names."""
    if not isinstance(item, dict):
        raise Unregistered("a device is not an object")
    return {name.lower(): value for name, value in item.items()}


def _int(value: Any, bounds: tuple[int, int] = INT32) -> int:
    """A JSON number Go reads into an integer field: an integer literal within range (Go refuses ``1.0`` and
    ``1e3`` there too), else the decode fails; null is 0."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unregistered(f"not an integer: {value!r}")
    if not bounds[0] <= int(value) <= bounds[1]:
        raise Unregistered(f"out of range: {value!r}")
    return int(value)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Unregistered(f"not a string: {value!r}")
    return value


def _bool(value: Any) -> bool:
    if value is not None and not isinstance(value, bool):
        raise Unregistered(f"not a boolean: {value!r}")
    return bool(value)


def decode_json(raw: str, _node: str = "") -> Devices:
    """HAMi's DeviceInfo list (MarshalNodeDevices): id, count, devmem, devcore, type, numa, mode, health, MIG
    profiles. Go's uint index: a negative one fails the whole annotation."""
    found = []
    for item in map(_object, _list(raw)):
        _int(item.get("index"), (0, 2**64 - 1))
        profiles = item.get("migprofiles") or []
        if not isinstance(profiles, list):
            raise Unregistered("migProfiles is not a list")
        device = Registered(
            count=_int(item.get("count")),
            memory=_int(item.get("devmem")),
            cores=_int(item.get("devcore")),
            type=intern(_text(item.get("type"))),
            numa=_int(item.get("numa"), INT64),
            mode=intern(_text(item.get("mode"))),
            health=_bool(item.get("health")),
            profiles=tuple(_mig(p) for p in profiles),
        )
        found.append((device, _text(item.get("id"))))
    return found


def _mig(raw: Any) -> Profile:
    item = _object(raw)
    placements = item.get("placements") or []
    if not isinstance(placements, list):
        raise Unregistered("placements is not a list")
    return Profile(
        name=intern(_text(item.get("name"))),
        memory=_int(item.get("memorymb")),
        cores=_int(item.get("core")),
        slices=_int(item.get("slicecount"), UINT32),
        placements=tuple((_int(p.get("start"), UINT32), _int(p.get("size"), UINT32)) for p in map(_object, placements)),
    )


def _go_int(text: str, bounds: tuple[int, int]) -> int:
    if not GO_INT.fullmatch(text) or not bounds[0] <= int(text) <= bounds[1]:
        raise Unregistered(f"not an integer: {text!r}")
    return int(text)


def decode_text(raw: str, _node: str = "") -> Devices:
    """EncodeNodeDevices' text: ``id,count,devmem,devcore,type,numa,health[,index,mode]:`` per device (seven fields
    mean HAMi-core mode)."""
    if SEPARATOR not in raw:
        raise Unregistered("no device separator")
    found = []
    for part in raw.split(SEPARATOR):
        if not part:
            continue
        items = part.split(",")
        if len(items) not in (7, 9):
            raise Unregistered(f"{len(items)} fields in {part!r}")
        if items[6] not in GO_BOOLS:
            raise Unregistered(f"health is not a boolean: {items[6]!r}")
        mode = "hami-core"
        if len(items) == 9:
            _go_int(items[7], (0, INT64[1]))
            mode = items[8]
        device = Registered(
            count=_go_int(items[1], INT32),
            memory=_go_int(items[2], INT32),
            cores=_go_int(items[3], INT32),
            type=intern(items[4]),
            numa=_go_int(items[5], INT64),
            mode=intern(mode),
            health=GO_BOOLS[items[6]],
        )
        found.append((device, items[0]))
    if not found:
        raise Unregistered("no device registered")
    return found


METAX_SGPU = "Metax-SGPU"


def decode_metax(raw: str, _node: str = "") -> Devices:
    """MetaX's sGPU list: uuid, totalDevCount, totalCompute, totalVRam, numa, healthy (its type is always
    Metax-SGPU)."""
    found = []
    for item in map(_object, _list(raw)):
        device = Registered(
            count=_int(item.get("totaldevcount")),
            memory=_int(item.get("totalvram")),
            cores=_int(item.get("totalcompute")),
            type=METAX_SGPU,
            numa=_int(item.get("numa")),
            mode="",
            health=_bool(item.get("healthy")),
        )
        for key in ("bdf", "model", "qosPolicy"):  # read by Go too: a wrong type fails the whole list
            _text(item.get(key.lower()))
        for key in ("availableDevCount", "availableCompute", "availableVRam", "linkZone"):
            _int(item.get(key.lower()))
        found.append((device, _text(item.get("uuid"))))
    return found


ENFLAME = "Enflame"


def drs_profile(name: str) -> tuple[int, int]:
    """Enflame's parseProfile: a profile name ``<slices>g.<memory>gb`` read as (slices, GiB); 0 where unreadable."""
    parts = name.strip().lower().split(".")
    if len(parts) < 2:
        return 0, 0
    size, memory = parts[0].strip().removesuffix("g"), parts[1].strip().removesuffix("gb")
    if not GO_INT.fullmatch(size):
        return 0, 0
    return int(size), int(memory) if GO_INT.fullmatch(memory) else 0


def decode_drs(raw: str, node: str = "") -> Devices:
    """Enflame's DRS capacity: each device its slice capacity, the node's profiles shared by all. A device's memory
    is the largest profile's (GiB as MiB), its cores 100, and its profiles those HAMi may pick, each with its core
    percentage as HAMi derives it (slices x 100 / the most slices, rounded up)."""
    spec = _json(raw)
    if not isinstance(spec, dict):
        raise Unregistered("not an object")
    spec = _object(spec)
    names = spec.get("profiles") or {}
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        raise Unregistered("profiles is not a map of strings")
    sizes = [drs_profile(name) for name in names]
    most_slices = max((s for s, _ in sizes), default=0)
    if most_slices <= 0:
        raise Unregistered("no valid DRS profile")
    most_memory = max((m for _, m in sizes), default=0) or most_slices
    profiles = tuple(
        sorted(
            Profile(intern(name.strip()), m * 1024, math.ceil(s * 100 / most_slices), s, ())
            for name, (s, m) in zip(names, sizes, strict=True)
            if s > 0 and m > 0
        )
    )
    devices = spec.get("devices") or []
    if not isinstance(devices, list):
        raise Unregistered("devices is not a list")
    found = []
    for position, item in enumerate(map(_object, devices)):
        index = _text(item.get("index"))
        _text(item.get("minor"))
        capacity = _capacity(item.get("capacity"))
        if capacity <= 0:
            raise Unregistered(f"invalid DRS capacity {capacity}")
        number = int(index) if GO_INT.fullmatch(index) else position
        device = Registered(capacity, most_memory * 1024, 100, ENFLAME, 0, "", True, profiles)
        found.append((device, f"{node}-enflame-drs-{number}"))
    if not found:
        raise Unregistered("no DRS device")
    return found


def _capacity(value: Any) -> int:
    """parseDRSCapacity: a number or a numeric string, clamped to int32."""
    if isinstance(value, str) and GO_INT.fullmatch(value.strip()):
        return max(min(int(value.strip()), INT32[1]), INT32[0])
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
        if not INT32[0] <= value <= INT32[1]:
            raise Unregistered(f"capacity out of range: {value!r}")
        return int(value)
    raise Unregistered(f"capacity is not a number: {value!r}")


FORMATS: dict[str, Decoder] = {"json": decode_json, "text": decode_text, "metax": decode_metax, "drs": decode_drs}
"""Each register format by the name a vendor gives it."""
