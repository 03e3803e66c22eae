"""Kunlunxin (docs/rules.md#kunlunxin): whole XPUs, vXPU memory rounded to a partition, and their quota requests."""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.devices import kunlun
from app.admission.devices.base import CountDevice, QuotaRequest
from app.admission.devices.config import load_device_config
from app.admission.devices.kunlun import KunlunVXPU, partition
from app.admission.edit import ContainerEdit
from testbed.pods import container, pod
from testbed.reviews import admitted, redirected, run

XPU = "kunlunxin.com/xpu"
VXPU = "kunlunxin.com/vxpu"
VMEM = "kunlunxin.com/vxpu-memory"

ADMITTED = [
    pytest.param(
        pod(container(limits={XPU: "8"})),
        redirected(pod(container(limits={XPU: "8"})), devices="kunlun"),
        id="xpu-in-limits-found",
    ),
    pytest.param(
        pod(container(requests={XPU: "1"}, defaulted=False)),
        pod(container(requests={XPU: "1"}, defaulted=False)),
        id="xpu-only-in-requests-not-found",
    ),
    pytest.param(
        pod(container(limits={VXPU: "1", VMEM: "30000"})),
        redirected(pod(container(limits={VXPU: "1", VMEM: "49152"})), devices="XPU"),
        id="vmemory-rounded-up-in-limits-and-requests",
    ),
    pytest.param(
        pod(container(limits={VXPU: "1", VMEM: "20000"}, defaulted=False)),
        redirected(pod(container(limits={VXPU: "1", VMEM: "24576"})), devices="XPU"),
        id="vmemory-written-to-missing-requests",
    ),
    pytest.param(
        pod(container(limits={VXPU: "1"})),
        redirected(pod(container(limits={VXPU: "1"})), devices="XPU"),
        id="vxpu-without-vmemory-unchanged",
    ),
    pytest.param(
        pod(container(limits={VMEM: "30000"})),
        pod(container(limits={VMEM: "30000"})),
        id="vmemory-without-vxpu-not-found",
    ),
    pytest.param(
        pod(container(requests={VXPU: "1", VMEM: "30000"}, defaulted=False)),
        pod(container(requests={VXPU: "1", VMEM: "30000"}, defaulted=False)),
        id="vxpu-only-in-requests-not-found",
    ),
    pytest.param(
        pod(container(limits={XPU: "1"}), container("v", limits={VXPU: "1", VMEM: "60000"})),
        redirected(
            pod(container(limits={XPU: "1"}), container("v", limits={VXPU: "1", VMEM: "98304"})), devices="kunlun,XPU"
        ),
        id="both-backends-in-registry-order",
    ),
]


@pytest.mark.parametrize(("source", "expected"), ADMITTED)
def test_admitted(source: dict[str, Any], expected: dict[str, Any], settings) -> None:
    assert admitted(source, settings) == expected


@pytest.mark.parametrize(
    ("memory", "expected"),
    [(1, 24576), (24576, 24576), (24577, 49152), (30000, 49152), (49152, 49152), (49153, 98304), (200000, 98304)],
    ids=["tiny", "quarter", "just-over-quarter", "go-test-30000", "half", "just-over-half", "over-a-card"],
)
def test_partition(memory: int, expected: int) -> None:
    assert partition(memory) == expected


def test_vmemory_written_as_plain_integer(settings) -> None:
    outcome = run(pod(container(limits={VXPU: "1", VMEM: "30Ki"})), settings)
    assert outcome.patched["spec"]["containers"][0]["resources"] == {
        "limits": {VXPU: "1", VMEM: "49152"},
        "requests": {VXPU: "1", VMEM: "49152"},
    }


@pytest.fixture(scope="module")
def backends() -> tuple[CountDevice, KunlunVXPU]:
    xpu, vxpu = kunlun.build(load_device_config("").root)
    assert isinstance(xpu, CountDevice) and isinstance(vxpu, KunlunVXPU)
    return xpu, vxpu


QUOTA = [
    pytest.param(container(limits={VXPU: "2", VMEM: "30000"}), QuotaRequest(nums=2, memory=49152), id="rounded-memory"),
    pytest.param(container(limits={VXPU: "1"}), QuotaRequest(nums=1, memory=98304), id="no-vmemory-whole-card"),
    pytest.param(
        container(limits={VXPU: "1", VMEM: "1.5"}),
        QuotaRequest(nums=1, memory=98304),
        id="fractional-vmemory-whole-card",
    ),
    pytest.param(
        container(requests={VXPU: "1", VMEM: "24576"}, defaulted=False),
        QuotaRequest(nums=1, memory=24576),
        id="requests-when-no-limits",
    ),
    pytest.param(container(limits={VMEM: "24576"}), None, id="no-vcount"),
]


@pytest.mark.parametrize(("ctr", "expected"), QUOTA)
def test_vxpu_quota_request(ctr: dict[str, Any], expected: QuotaRequest | None, backends) -> None:
    assert backends[1].quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected


def test_vxpu_quota_names(backends) -> None:
    names = backends[1].quota_names
    assert (names.memory, names.cores, names.count, names.memory_factor) == (VMEM, "", VXPU, 1)


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        pytest.param(container(limits={XPU: "4"}), QuotaRequest(nums=4), id="xpu-count"),
        pytest.param(container(limits={VXPU: "1"}), None, id="vxpu-is-not-xpu"),
    ],
)
def test_xpu_quota_request(ctr: dict[str, Any], expected: QuotaRequest | None, backends) -> None:
    assert backends[0].quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected
