"""The register formats read by HAMi's own code: each Node annotation below given to every vendor's GetNodeDevices
(tests/hami/registers/main.go, built in HAMi's module) and to app/admission/registers.py; both must find the same
devices, or both refuse (HAMi's error, our Unregistered). Valid texts as HAMi's device plugins write them, and the
malformed ones a plugin bug or a hand edit could leave (docs/rules.md#fits-nowhere).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.admission.fits import Unregistered, fitting
from app.settings import Settings
from testbed import hami

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

JSON_CASES = {
    "json-as-written": '[{"id":"G-0","count":10,"devmem":81920,"devcore":100,"type":"{T}-X","health":true},'
    '{"id":"G-1","index":1,"count":10,"devmem":81920,"devcore":100,"type":"{T}-X","numa":1,"mode":"hami-core"}]',
    "json-keys-any-case": '[{"ID":"G-0","Count":4,"DevMem":1024,"DevCore":50,"Type":"{T}-Y","Health":true}]',
    "json-keys-twice": '[{"id":"G-0","ID":"G-1","count":4,"COUNT":5,"type":"{T}"}]',
    "json-float-literal": '[{"id":"G-0","count":1.0,"type":"{T}"}]',
    "json-exponent": '[{"id":"G-0","devmem":1e3,"type":"{T}"}]',
    "json-fraction": '[{"id":"G-0","count":1.5,"type":"{T}"}]',
    "json-int32-overflow": '[{"id":"G-0","devmem":2147483648,"type":"{T}"}]',
    "json-int32-edge": '[{"id":"G-0","devmem":2147483647,"count":-2147483648,"type":"{T}"}]',
    "json-negative-index": '[{"id":"G-0","index":-1,"type":"{T}"}]',
    "json-health-string": '[{"id":"G-0","health":"true","type":"{T}"}]',
    "json-id-number": '[{"id":7,"type":"{T}"}]',
    "json-empty": "[]",
    "json-null": "null",
    "json-object": '{"id":"G-0"}',
    "json-text": "G-0,10,1024,100,{T},0,true:",
    "json-unknown-fields": '[{"id":"G-0","type":"{T}","health":true,"custominfo":{"a":1},"vendor":"x"}]',
}
TEXT_CASES = {
    "text-as-written": "D-0,4,65520,100,{T}-Z100,0,true,0,hami-core:D-1,4,65520,100,{T}-Z100,1,false,1,hami-core:",
    "text-seven-fields": "D-0,4,1024,100,{T},0,T:",
    "text-signed": "D-0,+4,-1,100,{T},+1,1:",
    "text-space": "D-0,4, 1024,100,{T},0,true:",
    "text-eight-fields": "D-0,4,1024,100,{T},0,true,0:",
    "text-health-word": "D-0,4,1024,100,{T},0,yes:",
    "text-negative-index": "D-0,4,1024,100,{T},0,true,-1,x:",
    "text-int32-overflow": "D-0,4,2147483648,100,{T},0,true:",
    "text-no-separator": "D-0,4,1024,100,{T},0,true",
    "text-only-separators": ":::",
    "text-empty-mode": "D-0,4,1024,100,{T},0,true,3,:",
    "text-json": '[{"id":"D-0","type":"{T}"}]',
}
METAX_CASES = {
    "metax-as-written": '[{"uuid":"M-0","bdf":"0000:3b:00.0","model":"MXC500","totalDevCount":16,"totalCompute":100,'
    '"totalVRam":65536,"availableDevCount":16,"numa":1,"healthy":true,"qosPolicy":"best-effort"}]',
    "metax-unhealthy": '[{"uuid":"M-0","totalDevCount":16,"totalCompute":100,"totalVRam":65536}]',
    "metax-memory-string": '[{"uuid":"M-0","totalVRam":"64Gi"}]',
    "metax-bdf-number": '[{"uuid":"M-0","bdf":3}]',
    "metax-empty": "[]",
}
DRS_CASES = {
    "drs-as-written": '{"devices":[{"index":"0","minor":"0","capacity":6},{"index":"1","minor":"1","capacity":"6"}],'
    '"profiles":{"1g.8gb":"11","2g.16gb":"12","6g.48gb":"13"}}',
    "drs-odd-profiles": '{"devices":[{"index":"x","capacity":" 3 "}],"profiles":{"3G.24GB":"1","bad":"2","4g.x":"3"}}',
    "drs-fractional-capacity": '{"devices":[{"index":"0","capacity":2.7}],"profiles":{"2g.16gb":"1"}}',
    "drs-zero-capacity": '{"devices":[{"index":"0","capacity":0}],"profiles":{"2g.16gb":"1"}}',
    "drs-bool-capacity": '{"devices":[{"index":"0","capacity":true}],"profiles":{"2g.16gb":"1"}}',
    "drs-no-valid-profile": '{"devices":[{"index":"0","capacity":6}],"profiles":{"x":"1"}}',
    "drs-no-device": '{"devices":[],"profiles":{"2g.16gb":"1"}}',
    "drs-slices-only": '{"devices":[{"index":"0","capacity":4}],"profiles":{"4g":"1","2g.8gb":"2"}}',
}
SETTINGS = Settings.from_env({"HAMI_ENABLE_ASCEND": "true", "HAMI_ENABLE_ILUVATAR": "true"})
VENDORS = {vendor.key: vendor for vendor in fitting(SETTINGS.devices)}
CHECKED = {  # vendor key -> the cases written in its format, the type word put into them
    "NVIDIA": (JSON_CASES, "NVIDIA"),
    "AMD": (JSON_CASES, "AMD"),
    "Biren": (JSON_CASES, "Biren"),
    "Vastai": (JSON_CASES, "Vastai"),
    "XPU": (JSON_CASES, "XPU"),
    "Ascend910B3": (JSON_CASES, "Ascend910B3"),
    "DCU": (TEXT_CASES, "DCU"),
    "BI-V150": (TEXT_CASES, "BI-V150"),
    "Metax-SGPU": (METAX_CASES, ""),
    "Enflame": (DRS_CASES, ""),
}
CASES = [(key, name, raw.replace("{T}", word)) for key, (cases, word) in CHECKED.items() for name, raw in cases.items()]


@pytest.fixture(scope="module")
def hamis_reading(hami_reference: hami.Reference, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """Every case on a Node of its own, read by HAMi with the chart's device config, Ascend and Iluvatar on."""
    config: Path = tmp_path_factory.mktemp("registers") / "device-config.yaml"
    config.write_text(hami_reference.render())
    nodes = [(f"n{i}", {VENDORS[key].register_annotation: raw}) for i, (key, _, raw) in enumerate(CASES)]
    return hami_reference.registers(nodes, config, "--enable-ascend=true", "--enable-iluvatar=true")


def _fields(device: dict[str, Any], vendor: str) -> tuple[Any, ...]:
    """What the check reads of a device HAMi returns (Biren's and Vastai's cores are set to 100 by their reading,
    and read by no check)."""
    cores = None if vendor in ("Biren", "Vastai") else device.get("devcore", 0)
    return (device.get("id", ""), device.get("count", 0), device.get("devmem", 0), cores, device.get("type", ""),
            device.get("numa", 0), device.get("health", False), device.get("mode", ""))  # fmt: skip


@pytest.mark.parametrize(("index", "case"), list(enumerate(CASES)), ids=[f"{key}-{name}" for key, name, _ in CASES])
def test_each_register_text_reads_as_hami_reads_it(
    hamis_reading: list[Any], index: int, case: tuple[str, str, str]
) -> None:
    key, _, raw = case
    hamis = hamis_reading[index][key]
    node = f"n{index}"
    try:
        ours = VENDORS[key].decode(raw, node)
    except Unregistered as exc:
        assert hamis.get("error"), f"we refuse ({exc}), HAMi reads {hamis['devices']}"
        return
    assert not hamis.get("error"), f"HAMi refuses ({hamis['error']}), we read {ours}"
    found = [(i, d.count, d.memory, None if key in ("Biren", "Vastai") else d.cores, d.type, d.numa, d.health, d.mode)
             for d, i in ours]  # fmt: skip
    assert found == [_fields(d, key) for d in hamis["devices"]]
