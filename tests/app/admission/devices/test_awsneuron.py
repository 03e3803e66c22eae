"""AWS Neuron: device and core counts, their exact validation messages, and quota requests.

Rule: docs/rules.md#aws-neuron.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.devices import awsneuron
from app.admission.devices.awsneuron import AWSNeuron
from app.admission.devices.base import QuotaRequest
from app.admission.devices.config import load_device_config
from app.admission.edit import ContainerEdit
from testbed.pods import container, pod
from testbed.reviews import admitted, redirected, run

NEURON = "aws.amazon.com/neuron"
CORE = "aws.amazon.com/neuroncore"

ADMITTED = [
    pytest.param(
        pod(container(limits={NEURON: "2"})),
        redirected(pod(container(limits={NEURON: "2"})), devices="AWSNeuron"),
        id="neuron-count-found",
    ),
    pytest.param(
        pod(container(requests={NEURON: "2"}, defaulted=False)),
        redirected(pod(container(requests={NEURON: "2"}, defaulted=False)), devices="AWSNeuron"),
        id="request-only-neuron-count-found",
    ),
    pytest.param(
        pod(container(limits={CORE: "2"})),
        redirected(pod(container(limits={CORE: "2"})), devices="AWSNeuron"),
        id="neuron-cores-found",
    ),
    pytest.param(
        pod(container(limits={CORE: "1"})),
        redirected(pod(container(limits={CORE: "1"})), devices="AWSNeuron"),
        id="one-neuron-core-found",
    ),
    pytest.param(
        pod(container(limits={CORE: "4"})),
        redirected(pod(container(limits={CORE: "4"})), devices="AWSNeuron"),
        id="multiple-of-two-cores-found",
    ),
    pytest.param(pod(container(limits={"cpu": "1"})), pod(container(limits={"cpu": "1"})), id="no-neuron-devices"),
]


@pytest.mark.parametrize(("source", "expected"), ADMITTED)
def test_admitted(source: dict[str, Any], expected: dict[str, Any], settings) -> None:
    assert admitted(source, settings) == expected


DENIED = [
    pytest.param(
        pod(container(requests={NEURON: str(2**31)}, defaulted=False)),
        f"container main: {NEURON} must be at most 2147483647 devices, got 2147483648",
        id="request-only-neuron-count-overflows",
    ),
    pytest.param(pod(container(limits={NEURON: "0"})), f"{NEURON} must be greater than 0", id="zero-neuron-count"),
    pytest.param(
        pod(container(limits={NEURON: "1.5"})),
        f"container main: {NEURON} must be a whole number of devices, got 1.5",
        id="fractional-neuron-count-core-check",
    ),
    pytest.param(
        pod(container(limits={CORE: "3"})), f"{CORE} must be 1 or a multiple of 2, got 3", id="odd-core-count"
    ),
    pytest.param(
        pod(container(requests={CORE: "3"}, defaulted=False)),
        f"{CORE} must be 1 or a multiple of 2, got 3",
        id="request-only-odd-core-count",
    ),
    pytest.param(pod(container(limits={CORE: "0"})), f"{CORE} must be greater than 0", id="zero-core-count"),
    pytest.param(
        pod(container(limits={CORE: "-2"})),
        f"container main: {CORE} must not be negative, got -2",
        id="negative-core-count-core-check",
    ),
    pytest.param(
        pod(container(limits={CORE: str(2 * (2**31 - 1) + 2)})),
        f"{CORE} must not exceed 4294967294",
        id="core-count-overflows-device-count",
    ),
    pytest.param(pod(container(limits={CORE: "1.5"})), f"{CORE} must be an integer", id="fractional-core-count"),
]


@pytest.mark.parametrize(("source", "message"), DENIED)
def test_denied(source: dict[str, Any], message: str, settings) -> None:
    assert run(source, settings).denial() == (False, 400, "BadRequest", message)


@pytest.fixture(scope="module")
def backend() -> AWSNeuron:
    (device,) = awsneuron.build(load_device_config("").root)
    return device


QUOTA = [
    pytest.param(container(limits={NEURON: "1"}), QuotaRequest(nums=1), id="device-count-carries-no-cores"),
    pytest.param(container(limits={CORE: "1"}), QuotaRequest(nums=1, cores=1), id="one-core"),
    pytest.param(container(limits={CORE: "2"}), QuotaRequest(nums=1, cores=2), id="one-device-of-cores"),
    pytest.param(container(limits={CORE: "6"}), QuotaRequest(nums=3, cores=2), id="cores-split-into-devices"),
    pytest.param(container(limits={CORE: "3"}), None, id="odd-cores-no-request"),
    pytest.param(container(limits={CORE: "0"}), None, id="zero-cores-no-request"),
    pytest.param(container(requests={NEURON: str(2**31)}, defaulted=False), None, id="overflowing-count-no-request"),
    pytest.param(container(limits={"cpu": "1"}), None, id="nothing-asked"),
]


@pytest.mark.parametrize(("ctr", "expected"), QUOTA)
def test_quota_request(ctr: dict[str, Any], expected: QuotaRequest | None, backend: AWSNeuron) -> None:
    assert backend.quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected


def test_quota_names(backend: AWSNeuron) -> None:
    names = backend.quota_names
    assert (names.memory, names.cores, names.count) == ("", CORE, NEURON)
