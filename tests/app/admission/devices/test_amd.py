"""AMD (docs/rules.md#amd): found by any of count, memory or percentage in limits; the percentage check; quota."""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.devices import amd
from app.admission.devices.amd import AMD
from app.admission.devices.base import QuotaRequest
from app.admission.devices.config import load_device_config
from app.admission.edit import ContainerEdit
from testbed.pods import container, pod
from testbed.reviews import admitted, redirected, run

GPU = "amd.com/gpu"
MEM = "amd.com/gpumem"
PCT = "amd.com/gpucores"

ADMITTED = [
    pytest.param(
        pod(container(limits={GPU: "1", PCT: "50"})),
        redirected(pod(container(limits={GPU: "1", PCT: "50"})), devices="AMD"),
        id="count-with-valid-percentage-found",
    ),
    pytest.param(
        pod(container(limits={GPU: "1", PCT: "100"})),
        redirected(pod(container(limits={GPU: "1", PCT: "100"})), devices="AMD"),
        id="count-with-full-percentage-found",
    ),
    pytest.param(
        pod(container(limits={GPU: "2"})),
        redirected(pod(container(limits={GPU: "2"})), devices="AMD"),
        id="count-only-found",
    ),
    pytest.param(
        pod(container(limits={MEM: "4096"})),
        redirected(pod(container(limits={MEM: "4096"})), devices="AMD"),
        id="memory-only-found",
    ),
    pytest.param(
        pod(container(limits={PCT: "150"})),
        redirected(pod(container(limits={PCT: "150"})), devices="AMD"),
        id="percentage-without-count-found-unchecked",
    ),
    pytest.param(
        pod(container(limits={GPU: "1"}, requests={PCT: "300"}, defaulted=False)),
        redirected(pod(container(limits={GPU: "1"}, requests={GPU: "1", PCT: "300"}, defaulted=False)), devices="AMD"),
        id="percentage-in-requests-unchecked",
    ),
    pytest.param(
        pod(container(requests={GPU: "1"}, defaulted=False)),
        pod(container(requests={GPU: "1"}, defaulted=False)),
        id="count-only-in-requests-not-found",
    ),
    pytest.param(pod(container()), pod(container()), id="no-resources-not-found"),
]


@pytest.mark.parametrize(("source", "expected"), ADMITTED)
def test_admitted(source: dict[str, Any], expected: dict[str, Any], settings) -> None:
    assert admitted(source, settings) == expected


BAD_PERCENTAGE = f"{PCT} must be an integer percentage between 1 and 100"


@pytest.mark.parametrize(
    "percentage",
    ["0", "101", "50.5", "500m"],
    ids=["zero", "over-100", "fraction", "milli"],
)
def test_bad_percentage_denied(percentage: str, settings) -> None:
    outcome = run(pod(container(limits={GPU: "1", MEM: "1024", PCT: percentage})), settings)
    assert outcome.denial() == (False, 400, "BadRequest", BAD_PERCENTAGE)


@pytest.fixture(scope="module")
def backend() -> AMD:
    (device,) = amd.build(load_device_config("").root)
    return device


QUOTA = [
    pytest.param(
        container(limits={GPU: "2", MEM: "4096", PCT: "50"}),
        QuotaRequest(nums=2, memory=4096, cores=50),
        id="count-memory-percentage",
    ),
    pytest.param(container(limits={GPU: "1"}), QuotaRequest(nums=1, cores=100), id="percentage-defaults-to-100"),
    pytest.param(
        container(limits={GPU: "1"}, requests={PCT: "30"}),
        QuotaRequest(nums=1, cores=30),
        id="percentage-from-requests",
    ),
    pytest.param(container(requests={GPU: "1"}, defaulted=False), None, id="count-only-in-requests"),
    pytest.param(container(limits={MEM: "4096", PCT: "50"}), None, id="no-count"),
    pytest.param(container(limits={GPU: "0"}), None, id="zero-count"),
]


@pytest.mark.parametrize(("ctr", "expected"), QUOTA)
def test_quota_request(ctr: dict[str, Any], expected: QuotaRequest | None, backend: AMD) -> None:
    assert backend.quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected


def test_go_test_resource_names(configured) -> None:
    """HAMi's Go test names the resources amd.com/gpu-mem and amd.com/gpu-core-pct: the YAML keys rename them."""
    settings = configured(
        {"amd": {"resourceMemoryName": "amd.com/gpu-mem", "resourceCoreName": "amd.com/gpu-core-pct"}}
    )
    outcome = run(pod(container(limits={GPU: "1", "amd.com/gpu-core-pct": "0"})), settings)
    assert outcome.denial() == (
        False,
        400,
        "BadRequest",
        "amd.com/gpu-core-pct must be an integer percentage between 1 and 100",
    )
