"""The register formats, read as HAMi's scheduler reads them (app/admission/registers.py): the texts are what HAMi's
device plugins write (pkg/device/devices.go MarshalNodeDevices and EncodeNodeDevices, MetaX's MetaxSDeviceInfo
list, Enflame's DRS capacity), and what HAMi's reading refuses leaves the vendor's devices of that node out."""

from __future__ import annotations

import pytest

from app.admission.fits import Unregistered
from app.admission.registers import decode_drs, decode_json, decode_metax, decode_text
from testbed.nodes import MIG_A100, gpu, register

# MarshalNodeDevices: Go's field order, zero values left out (index 0, numa 0, health false).
AMD_JSON = (
    '[{"id":"GPU-0","count":10,"devmem":196608,"devcore":100,"type":"AMD-INSTINCT MI300X","health":true},'
    '{"id":"GPU-1","index":1,"count":10,"devmem":196608,"devcore":100,"type":"AMD-INSTINCT MI300X","numa":1}]'
)
# EncodeNodeDevices: id,count,devmem,devcore,type,numa,health,index,mode then ':' per device.
DCU_TEXT = "DCU-a,4,65520,100,DCU-Z100L,0,true,0,hami-core:DCU-b,4,65520,100,DCU-Z100L,1,false,1,hami-core:"
METAX_JSON = (
    '[{"uuid":"GPU-m0","bdf":"0000:3b:00.0","model":"MXC500","totalDevCount":16,"totalCompute":100,'
    '"totalVRam":65536,"availableDevCount":16,"availableCompute":100,"availableVRam":65536,"healthy":true,'
    '"qosPolicy":"best-effort"}]'
)
DRS_JSON = (
    '{"devices":[{"index":"0","minor":"0","capacity":6},{"index":"1","minor":"1","capacity":"6"}],'
    '"profiles":{"1g.8gb":"11","2g.16gb":"12","6g.48gb":"13"}}'
)


def test_hamis_json_as_go_reads_it() -> None:
    found = decode_json(AMD_JSON)
    assert [i for _, i in found] == ["GPU-0", "GPU-1"]
    first, second = (d for d, _ in found)
    assert (first.count, first.memory, first.cores, first.numa, first.health) == (10, 196608, 100, 0, True)
    assert (second.numa, second.health) == (1, False)  # a zero value is left out: false


def test_go_matches_json_keys_case_insensitively() -> None:
    ((device, id_),) = decode_json('[{"ID":"GPU-b","Count":10,"DevMem":1000,"Type":"NVIDIA-X","Health":true}]')
    assert (id_, device.count, device.memory, device.type, device.health) == ("GPU-b", 10, 1000, "NVIDIA-X", True)


def test_mig_profiles_are_read() -> None:
    ((device, _),) = decode_json(register([gpu(0, "n", 81920, 7, mode="mig", mig=MIG_A100)]))
    assert device.mode == "mig"
    assert [(p.name, p.memory, len(p.placements)) for p in device.profiles][:2] == [
        ("1g.10gb", 9728, 7), ("2g.20gb", 19968, 3)
    ]  # fmt: skip


def test_hamis_text_as_decode_node_devices_reads_it() -> None:
    found = decode_text(DCU_TEXT)
    assert [i for _, i in found] == ["DCU-a", "DCU-b"]
    assert [(d.memory, d.numa, d.health, d.mode) for d, _ in found] == [
        (65520, 0, True, "hami-core"), (65520, 1, False, "hami-core")
    ]  # fmt: skip
    ((seven, _),) = decode_text("DCU-c,4,1024,100,DCU-Z100,0,T:")  # seven fields: HAMi-core mode
    assert (seven.mode, seven.health) == ("hami-core", True)


def test_metax_sgpus_as_hami_converts_them() -> None:
    ((device, id_),) = decode_metax(METAX_JSON)
    assert id_ == "GPU-m0"
    assert (device.count, device.memory, device.cores, device.type, device.health) == (
        16, 65536, 100, "Metax-SGPU", True
    )  # fmt: skip


def test_enflame_drs_capacity_as_hami_reads_it() -> None:
    found = decode_drs(DRS_JSON, "gcu-0")
    assert [i for _, i in found] == ["gcu-0-enflame-drs-0", "gcu-0-enflame-drs-1"]
    device = found[0][0]
    assert (device.count, device.memory, device.cores, device.type) == (6, 48 * 1024, 100, "Enflame")
    assert [(p.name, p.memory, p.cores, p.slices) for p in device.profiles] == [
        ("1g.8gb", 8192, 17, 1), ("2g.16gb", 16384, 34, 2), ("6g.48gb", 49152, 100, 6)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("decode", "raw"),
    [
        pytest.param(decode_json, DCU_TEXT, id="json-given-text"),
        pytest.param(decode_json, "[]", id="json-no-device"),
        pytest.param(decode_json, "null", id="json-null"),
        pytest.param(decode_json, '[{"id":"a","count":1.5}]', id="json-fraction"),
        pytest.param(decode_json, '[{"id":"a","count":1.0}]', id="json-float-literal"),
        pytest.param(decode_json, '[{"id":"a","count":2147483648}]', id="json-int32-overflow"),
        pytest.param(decode_json, '[{"id":"a","index":-1}]', id="json-negative-index"),
        pytest.param(decode_json, '[{"health":"yes"}]', id="json-health-not-bool"),
        pytest.param(decode_text, AMD_JSON, id="text-given-json"),
        pytest.param(decode_text, "DCU-a,4,1024,100,DCU,0,true", id="text-no-separator"),
        pytest.param(decode_text, "DCU-a,4,1024,100,DCU,0,true,0:", id="text-eight-fields"),
        pytest.param(decode_text, "DCU-a,4,1024,100,DCU,0,yes:", id="text-health-not-bool"),
        pytest.param(decode_text, "DCU-a,4, 1024,100,DCU,0,true:", id="text-space-in-number"),
        pytest.param(decode_text, "DCU-a,4,1024,100,DCU,0,true,-1,hami-core:", id="text-negative-index"),
        pytest.param(decode_text, ":::", id="text-no-device"),
        pytest.param(decode_metax, "[]", id="metax-no-device"),
        pytest.param(decode_metax, '[{"uuid":"a","totalVRam":"64Gi"}]', id="metax-memory-not-a-number"),
        pytest.param(decode_drs, '{"devices":[{"capacity":1}],"profiles":{"x":"1"}}', id="drs-no-valid-profile"),
        pytest.param(decode_drs, '{"devices":[{"capacity":0}],"profiles":{"1g.8gb":"1"}}', id="drs-zero-capacity"),
        pytest.param(decode_drs, '{"devices":[{"capacity":true}],"profiles":{"1g.8gb":"1"}}', id="drs-bool-capacity"),
        pytest.param(decode_drs, '{"devices":[],"profiles":{"1g.8gb":"1"}}', id="drs-no-device"),
    ],
)
def test_what_hami_cannot_read_is_left_out(decode, raw: str) -> None:
    with pytest.raises(Unregistered):
        decode(raw, "n")


def test_registered_text_is_what_the_helpers_write() -> None:
    devices = [gpu(0, "n"), gpu(1, "n", mig=MIG_A100, mode="mig")]
    found = decode_json(register(devices))
    assert sorted(i for _, i in found) == sorted(d["id"] for d in devices)
    assert {d.mode for d, _ in found} == {"hami-core", "mig"}
