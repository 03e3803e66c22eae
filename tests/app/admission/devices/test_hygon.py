"""Hygon DCU: found by its count in limits, never mutated; quota memory scaled by ``memoryFactor``.

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

COUNT = "hygon.com/dcunum"
MEMORY = "hygon.com/dcumem"
CORES = "hygon.com/dcucores"


def dcu(settings) -> Device:
    return next(d for d in settings.devices if d.key == "DCU")


@pytest.mark.parametrize(
    "limits",
    [{COUNT: "1"}, {COUNT: "1", MEMORY: "2000", CORES: "60"}],
    ids=["count-only", "count-memory-cores"],
)
def test_count_in_limits_is_found_and_left_as_is(limits: dict[str, str], settings) -> None:
    obj = pod(container(limits=limits))
    assert run(obj, settings).patched == redirected(obj, devices="DCU")


@pytest.mark.parametrize(
    "ctr",
    [container(limits={MEMORY: "2000"}), container(requests={COUNT: "1"}), container(limits={"cpu": "1"})],
    ids=["memory-without-count", "count-only-in-requests", "no-dcu-resource"],
)
def test_without_count_in_limits_nothing_changes(ctr: dict[str, Any], settings) -> None:
    outcome = run(pod(ctr), settings)
    assert outcome.response["allowed"] is True and outcome.ops == []


def test_count_only_in_requests_still_counts_for_quota(settings) -> None:
    """HAMi's quota arithmetic runs on every Pod, so a DCU asked for in requests only is counted."""
    obj = pod(container(requests={COUNT: "1", MEMORY: "1000"}))
    assert [d for d in demands(PodEdit(obj), settings.devices) if d.device == "DCU"] == [
        Demand("DCU", {MEMORY: 1000, CORES: 100, COUNT: 1})
    ]


def test_null_section_makes_the_vendor_inert(configured) -> None:
    settings = configured({"hygon": None})
    assert dcu(settings).resource_names == frozenset()
    assert run(pod(container(limits={COUNT: "1"})), settings).ops == []


def test_negative_cores_are_denied(settings) -> None:
    outcome = run(pod(container(limits={COUNT: "1", CORES: "-1"})), settings)
    assert outcome.denial() == (False, 400, "BadRequest", f"container main: {CORES} must not be negative, got -1")


@pytest.mark.parametrize(
    ("factor", "ctr", "expected"),
    [
        (1, container(limits={COUNT: "2", MEMORY: "1000"}), QuotaRequest(nums=2, memory=1000, cores=100)),
        (2, container(limits={COUNT: "1", MEMORY: "1024"}), QuotaRequest(nums=1, memory=2048, cores=100)),
        (1, container(limits={COUNT: "1", CORES: "30"}), QuotaRequest(nums=1, memory=0, cores=30)),
        (1, container(requests={COUNT: "1", MEMORY: "64"}), QuotaRequest(nums=1, memory=64, cores=100)),
        (2, container(limits={COUNT: "1", MEMORY: str(2**30)}), None),
        (1, container(limits={COUNT: "1", MEMORY: "16Gi"}), None),
        (1, container(limits={COUNT: "0"}), None),
        (1, container(limits={MEMORY: "64"}), None),
    ],
    ids=[
        "factor-1",
        "factor-2-doubles-memory",
        "cores-given",
        "requests-only",
        "scaled-memory-over-int32",
        "16Gi-over-int32",
        "zero-count",
        "no-count",
    ],
)
def test_quota_request(factor: int, ctr: dict[str, Any], expected: QuotaRequest | None, configured) -> None:
    device = dcu(configured({"hygon": {"memoryFactor": factor}}))
    assert device.quota_names.memory_factor == factor
    assert device.quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected
