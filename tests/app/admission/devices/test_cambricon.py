"""Cambricon MLU: found by its count in limits, never mutated; quota in 256 MiB units.

Rule: docs/rules.md#cambricon-mlu-and-hygon-dcu.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.devices.base import Device, QuotaRequest
from app.admission.edit import ContainerEdit, PodEdit
from app.quota import Demand, demands
from testbed.pods import container, pod
from testbed.reviews import redirected, run

COUNT = "cambricon.com/vmlu"
MEMORY = "cambricon.com/mlu.smlu.vmemory"
CORES = "cambricon.com/mlu.smlu.vcore"


def mlu(settings) -> Device:
    return next(d for d in settings.devices if d.key == "MLU")


@pytest.mark.parametrize(
    "limits",
    [
        {COUNT: "1"},
        {COUNT: "2", MEMORY: "40", CORES: "50"},
        {COUNT: "1", "cpu": "1"},
    ],
    ids=["count-only", "count-memory-cores", "with-cpu"],
)
def test_count_in_limits_is_found_and_left_as_is(limits: dict[str, str], settings) -> None:
    obj = pod(container(limits=limits))
    assert run(obj, settings).patched == redirected(obj, devices="MLU")


def test_requests_missing_from_limits_are_mirrored(settings) -> None:
    obj = pod(container(limits={COUNT: "1", MEMORY: "8"}, requests={"cpu": "1"}, defaulted=False))
    expected = redirected(obj, devices="MLU")
    expected["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", COUNT: "1", MEMORY: "8"}
    assert run(obj, settings).patched == expected


@pytest.mark.parametrize(
    "ctr",
    [
        container(limits={MEMORY: "40", CORES: "50"}),
        container(requests={COUNT: "1"}),
        container(limits={"cpu": "1"}),
    ],
    ids=["memory-and-cores-without-count", "count-only-in-requests", "no-mlu-resource"],
)
def test_without_count_in_limits_nothing_changes(ctr: dict[str, Any], settings) -> None:
    outcome = run(pod(ctr), settings)
    assert outcome.response["allowed"] is True and outcome.ops == []


def test_go_test_resource_name(configured) -> None:
    settings = configured({"cambricon": {"resourceCountName": "cambricon.com/mlu"}})
    obj = pod(container(limits={"cambricon.com/mlu": "1"}))
    assert run(obj, settings).patched == redirected(obj, devices="MLU")


def test_null_section_makes_the_vendor_inert(configured) -> None:
    settings = configured({"cambricon": None})
    assert mlu(settings).resource_names == frozenset()
    assert run(pod(container(limits={COUNT: "1"})), settings).ops == []


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({COUNT: "1.5"}, f"container main: {COUNT} must be a whole number of devices, got 1.5"),
        ({COUNT: "1", MEMORY: "-4"}, f"container main: {MEMORY} must not be negative, got -4"),
    ],
    ids=["fractional-count", "negative-memory"],
)
def test_invalid_amounts_are_denied(limits: dict[str, str], message: str, settings) -> None:
    assert run(pod(container(limits=limits)), settings).denial() == (False, 400, "BadRequest", message)


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (container(limits={COUNT: "2", MEMORY: "40"}), QuotaRequest(nums=2, memory=40 * 256, cores=100)),
        (container(limits={COUNT: "1", CORES: "30"}), QuotaRequest(nums=1, memory=0, cores=30)),
        (container(requests={COUNT: "3", MEMORY: "4"}), QuotaRequest(nums=3, memory=1024, cores=100)),
        (container(limits={COUNT: "1", MEMORY: "1.5"}), None),
        (container(limits={COUNT: "1", MEMORY: str(2**31 // 256)}), None),
        (container(limits={COUNT: "1", MEMORY: str(2**31 // 256 - 1)}), QuotaRequest(1, (2**31 // 256 - 1) * 256, 100)),
        (container(limits={COUNT: "0", MEMORY: "4"}), None),
        (container(limits={MEMORY: "4", CORES: "10"}), None),
    ],
    ids=[
        "2-mlus-40-units",
        "cores-given",
        "requests-only",
        "fractional-memory",
        "memory-over-int32",
        "largest-memory",
        "zero-count",
        "no-count",
    ],
)
def test_quota_request(ctr: dict[str, Any], expected: QuotaRequest | None, settings) -> None:
    assert mlu(settings).quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected


def test_quota_demand_multiplies_by_device_count(settings) -> None:
    obj = pod(container(limits={COUNT: "2", MEMORY: "40"}))
    assert [d for d in demands(PodEdit(obj), settings.devices) if d.device == "MLU"] == [
        Demand("MLU", {MEMORY: 2 * 40 * 256, CORES: 200, COUNT: 2})
    ]
