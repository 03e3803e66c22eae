"""Enflame (docs/rules.md#enflame): GCU whole cards, DRS slices or memory/core shares, and their quota requests."""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.devices import enflame
from app.admission.devices.base import ConfigSection, CountDevice, QuotaRequest
from app.admission.devices.config import load_device_config
from app.admission.devices.enflame import EnflameDRS
from app.admission.edit import ContainerEdit
from testbed.pods import container, pod
from testbed.reviews import admitted, redirected, run

GCU = "enflame.com/gcu"
DRS = "enflame.com/drs-gcu"
MEM = "enflame.com/gcu-memory"
CORE = "enflame.com/gcu-core"

ADMITTED = [
    pytest.param(
        pod(container(limits={GCU: "2"})),
        redirected(pod(container(limits={GCU: "2"})), devices="GCU"),
        id="gcu-in-limits-found",
    ),
    pytest.param(
        pod(container(requests={GCU: "1"}, defaulted=False)),
        pod(container(requests={GCU: "1"}, defaulted=False)),
        id="gcu-only-in-requests-not-found",
    ),
    pytest.param(
        pod(container(limits={"cpu": "1"})),
        pod(container(limits={"cpu": "1"})),
        id="no-enflame-resource-not-found",
    ),
    pytest.param(
        pod(container(limits={DRS: "3"})),
        redirected(pod(container(limits={DRS: "3"})), devices="Enflame"),
        id="drs-in-limits-found",
    ),
    pytest.param(
        pod(container(requests={DRS: "3"}, defaulted=False)),
        redirected(pod(container(limits={DRS: "3"})), devices="Enflame"),
        id="drs-only-in-requests-fills-limits",
    ),
    pytest.param(
        pod(container(limits={DRS: "3"}, defaulted=False)),
        redirected(pod(container(limits={DRS: "3"})), devices="Enflame"),
        id="drs-only-in-limits-fills-requests",
    ),
    pytest.param(
        pod(container(limits={MEM: "20480", CORE: "50"})),
        redirected(pod(container(limits={MEM: "20480", CORE: "50"})), devices="Enflame"),
        id="memory-and-core-found",
    ),
    pytest.param(
        pod(container(requests={MEM: "20480"}, defaulted=False)),
        redirected(pod(container(limits={MEM: "20480"})), devices="Enflame"),
        id="memory-only-in-requests-fills-limits",
    ),
    pytest.param(
        pod(container(limits={CORE: "100"}, defaulted=False)),
        redirected(pod(container(limits={CORE: "100"})), devices="Enflame"),
        id="core-100-only-in-limits-fills-requests",
    ),
]


@pytest.mark.parametrize(("source", "expected"), ADMITTED)
def test_admitted(source: dict[str, Any], expected: dict[str, Any], settings) -> None:
    assert admitted(source, settings) == expected


DENIED = [
    pytest.param(pod(container(limits={DRS: "0"})), f"{DRS} must be greater than 0", id="drs-zero"),
    pytest.param(
        pod(container(requests={DRS: "0"}, defaulted=False)), f"{DRS} must be greater than 0", id="drs-zero-in-requests"
    ),
    pytest.param(
        pod(container(limits={DRS: "1.5"})),
        f"container main: {DRS} must be a whole number of devices, got 1.5",
        id="drs-fraction-core-check",
    ),
    pytest.param(pod(container(limits={MEM: "0", CORE: "50"})), f"{MEM} must be greater than 0", id="memory-zero"),
    pytest.param(pod(container(limits={MEM: "1024", CORE: "0"})), f"{CORE} must be in range (0,100]", id="core-zero"),
    pytest.param(pod(container(limits={CORE: "101"})), f"{CORE} must be in range (0,100]", id="core-over-100"),
    pytest.param(
        pod(container(requests={CORE: "101"}, defaulted=False)),
        f"{CORE} must be in range (0,100]",
        id="core-over-100-in-requests",
    ),
]


@pytest.mark.parametrize(("source", "message"), DENIED)
def test_denied(source: dict[str, Any], message: str, settings) -> None:
    assert run(source, settings).denial() == (False, 400, "BadRequest", message)


NAME_FALLBACKS = [
    pytest.param({}, EnflameDRS(DRS, MEM, CORE), id="empty-section-uses-built-in-names"),
    pytest.param(
        {"resourceNameVGCU": "enflame.com/vgcu"},
        EnflameDRS("enflame.com/vgcu", MEM, CORE),
        id="legacy-vgcu-name-when-drs-name-empty",
    ),
    pytest.param(
        {"resourceNameDRSGCU": "x.com/drs", "resourceNameVGCU": "enflame.com/vgcu", "resourceNameGCUMemory": "x.com/m"},
        EnflameDRS("x.com/drs", "x.com/m", CORE),
        id="configured-names-win",
    ),
]


@pytest.mark.parametrize(("section", "expected"), NAME_FALLBACKS)
def test_drs_name_fallbacks(section: dict[str, str], expected: EnflameDRS) -> None:
    assert EnflameDRS.from_config(ConfigSection(section, "enflame")) == expected


def test_drs_active_with_blank_names(configured) -> None:
    """A config that blanks every Enflame name still has a DRS backend, under its built-in names."""
    blank = {"resourceNameGCU": "", "resourceNameDRSGCU": "", "resourceNameGCUMemory": "", "resourceNameGCUCore": ""}
    settings = configured({"enflame": blank})
    source = pod(container(limits={GCU: "1"}), container("drs", requests={DRS: "2"}, defaulted=False))
    assert run(source, settings).patched == redirected(
        pod(container(limits={GCU: "1"}), container("drs", limits={DRS: "2"})), devices="Enflame"
    )


@pytest.fixture(scope="module")
def backends() -> tuple[CountDevice, EnflameDRS]:
    gcu, drs = enflame.build(load_device_config("").root)
    assert isinstance(gcu, CountDevice) and isinstance(drs, EnflameDRS)
    return gcu, drs


QUOTA = [
    pytest.param(container(limits={DRS: "3"}), QuotaRequest(nums=1, memory=3), id="drs-slices-charged-as-memory"),
    pytest.param(container(requests={DRS: "2"}, defaulted=False), QuotaRequest(nums=1, memory=2), id="drs-in-requests"),
    pytest.param(
        container(limits={MEM: "20480", CORE: "50"}), QuotaRequest(nums=1, memory=20480, cores=50), id="memory-and-core"
    ),
    pytest.param(container(limits={MEM: "20480"}), QuotaRequest(nums=1, memory=20480), id="memory-only"),
    pytest.param(container(limits={CORE: "30"}), QuotaRequest(nums=1, cores=30), id="core-only"),
    pytest.param(container(limits={DRS: "2", MEM: "20480", CORE: "50"}), QuotaRequest(nums=1, memory=2), id="drs-wins"),
    pytest.param(container(limits={GCU: "2"}), None, id="gcu-is-not-drs"),
]


@pytest.mark.parametrize(("ctr", "expected"), QUOTA)
def test_drs_quota_request(ctr: dict[str, Any], expected: QuotaRequest | None, backends) -> None:
    assert backends[1].quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        pytest.param(container(limits={GCU: "2"}), QuotaRequest(nums=2), id="gcu-count"),
        pytest.param(container(limits={DRS: "2"}), None, id="drs-is-not-gcu"),
    ],
)
def test_gcu_quota_request(ctr: dict[str, Any], expected: QuotaRequest | None, backends) -> None:
    assert backends[0].quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected
