"""Moore Threads (docs/rules.md#moore-threads): whole-card rewriting, the sGPU memory slices, and the quota request."""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.annotations import GPU_TYPE_ANNOTATION
from app.admission.devices import mthreads
from app.admission.devices.base import QuotaRequest
from app.admission.devices.config import load_device_config
from app.admission.devices.mthreads import Mthreads
from app.admission.edit import ContainerEdit
from testbed.pods import container, pod
from testbed.reviews import admitted, redirected, run

GPU = "mthreads.com/vgpu"
MEM = "mthreads.com/sgpu-memory"
CORE = "mthreads.com/sgpu-core"
GPU_NUM = "mthreads.com/request-gpu-num"

ADMITTED = [
    pytest.param(
        pod(container(limits={GPU: "1"})),
        redirected(pod(container(limits={GPU: "1", CORE: "16", MEM: "96"})), devices="Mthreads"),
        id="one-card-without-memory-gets-whole-card",
    ),
    pytest.param(
        pod(container(limits={GPU: "1", CORE: "8"})),
        redirected(pod(container(limits={GPU: "1", CORE: "16", MEM: "96"})), devices="Mthreads"),
        id="one-card-without-memory-overwrites-core",
    ),
    pytest.param(
        pod(container(limits={GPU: "1", MEM: "8", CORE: "4"})),
        redirected(pod(container(limits={GPU: "1", MEM: "8", CORE: "4"})), devices="Mthreads"),
        id="one-card-valid-memory-slice-unchanged",
    ),
    pytest.param(
        pod(container(limits={GPU: "2"})),
        pod(
            container(limits={GPU: "2", CORE: "32", MEM: "192"}),
            annotations={GPU_TYPE_ANNOTATION: "Mthreads", GPU_NUM: "2"},
            scheduler="hami-scheduler",
        ),
        id="two-cards-whole-cards-and-annotation",
    ),
    pytest.param(
        pod(container(limits={GPU: "3", MEM: "8", CORE: "4"}), annotations={GPU_NUM: "7"}),
        pod(
            container(limits={GPU: "3", CORE: "48", MEM: "288"}),
            annotations={GPU_TYPE_ANNOTATION: "Mthreads", GPU_NUM: "3"},
            scheduler="hami-scheduler",
        ),
        id="three-cards-overwrite-user-values-and-annotation",
    ),
    pytest.param(
        pod(container(requests={GPU: "1"}, defaulted=False)),
        redirected(pod(container(limits={CORE: "16", MEM: "96"}, requests={GPU: "1"})), devices="Mthreads"),
        id="count-only-in-requests-found",
    ),
    pytest.param(
        pod(container(limits={MEM: "8"})),
        pod(container(limits={MEM: "8"})),
        id="memory-without-count-not-found",
    ),
    pytest.param(pod(container()), pod(container()), id="no-resources-not-found"),
]


@pytest.mark.parametrize(("source", "expected"), ADMITTED)
def test_admitted(source: dict[str, Any], expected: dict[str, Any], settings) -> None:
    assert admitted(source, settings) == expected


INVALID_SLICE = "sGPU memory request value is invalid, valid values are [2, 4, 8, 16, 32, 64, 96]"

DENIED = [
    pytest.param(pod(container(limits={GPU: "0"})), f"{GPU} must be greater than 0", id="count-zero"),
    pytest.param(
        pod(container(requests={GPU: "0"}, defaulted=False)),
        f"{GPU} must be greater than 0",
        id="count-zero-in-requests",
    ),
    pytest.param(
        pod(container(limits={GPU: "-1"})),
        f"container main: {GPU} must not be negative, got -1",
        id="count-negative-core-check",
    ),
    pytest.param(pod(container(limits={GPU: "1", MEM: "3"})), INVALID_SLICE, id="memory-not-a-slice"),
    pytest.param(pod(container(limits={GPU: "1", MEM: "128"})), INVALID_SLICE, id="memory-over-a-card"),
    pytest.param(pod(container(limits={GPU: "1", MEM: "8.5"})), INVALID_SLICE, id="memory-fraction"),
]


@pytest.mark.parametrize(("source", "message"), DENIED)
def test_denied(source: dict[str, Any], message: str, settings) -> None:
    assert run(source, settings).denial() == (False, 400, "BadRequest", message)


@pytest.fixture(scope="module")
def backend() -> Mthreads:
    (device,) = mthreads.build(load_device_config("").root)
    return device


def test_quota_names(backend: Mthreads) -> None:
    assert (backend.quota_names.memory, backend.quota_names.cores, backend.quota_names.memory_factor) == (
        MEM,
        CORE,
        512,
    )


QUOTA = [
    pytest.param(
        container(limits={GPU: "1", MEM: "8", CORE: "4"}), QuotaRequest(nums=1, memory=4096, cores=4), id="one-card"
    ),
    pytest.param(
        container(limits={GPU: "2", MEM: "192", CORE: "32"}),
        QuotaRequest(nums=2, memory=49152, cores=16),
        id="two-cards-split-per-card",
    ),
    pytest.param(
        container(limits={GPU: "3", MEM: "8", CORE: "5"}),
        QuotaRequest(nums=3, memory=1365, cores=1),
        id="integer-division",
    ),
    pytest.param(container(limits={GPU: "1"}), QuotaRequest(nums=1), id="count-only"),
    pytest.param(
        container(requests={GPU: "1", MEM: "4"}, defaulted=False),
        QuotaRequest(nums=1, memory=2048),
        id="requests-when-no-limits",
    ),
    pytest.param(container(limits={GPU: "0"}), None, id="count-zero"),
    pytest.param(container(limits={MEM: "8"}), None, id="no-count"),
]


@pytest.mark.parametrize(("ctr", "expected"), QUOTA)
def test_quota_request(ctr: dict[str, Any], expected: QuotaRequest | None, backend: Mthreads) -> None:
    assert backend.quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected
