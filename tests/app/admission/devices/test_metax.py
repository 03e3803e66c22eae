"""MetaX: whole GPUs by count; sGPU app-class and QoS annotation rules (the Go table); sGPU quota.

Rule: docs/rules.md#metax.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.devices.base import Device, QuotaRequest
from app.admission.edit import ContainerEdit
from app.settings import Settings
from testbed.pods import container, pod
from testbed.reviews import redirected, run

GPU = "metax-tech.com/gpu"
SGPU = "metax-tech.com/sgpu"
VMEMORY = "metax-tech.com/vmemory"
VCORE = "metax-tech.com/vcore"
APP_CLASS = "metax-tech.com/sgpu-app-class"
QOS = "metax-tech.com/sgpu-qos-policy"
APP_CLASS_ERROR = f"{APP_CLASS} must be set one of [online, offline]"
QOS_ERROR = f"{QOS} must be set one of [best-effort, fixed-share, burst-share]"


def sgpu(settings: Settings) -> Device:
    return next(d for d in settings.devices if d.key == "Metax-SGPU")


def test_whole_gpu_count_is_found_and_left_as_is(settings: Settings) -> None:
    obj = pod(container(limits={GPU: "2"}))
    assert run(obj, settings).patched == redirected(obj, devices="Metax-GPU")


def test_both_backends_are_named_in_registry_order(settings: Settings) -> None:
    obj = pod(container("a", limits={SGPU: "1"}), container("b", limits={GPU: "1"}))
    expected = redirected(obj, devices="Metax-GPU,Metax-SGPU")
    expected["metadata"]["annotations"][QOS] = "best-effort"
    assert run(obj, settings).patched == expected


# (pod annotations in, sGPU count, the annotations the webhook adds)
SGPU_FOUND = [
    pytest.param(None, "1", {QOS: "best-effort"}, id="no-annotations-map-gets-best-effort"),
    pytest.param({"team": "a"}, "2", {QOS: "best-effort"}, id="no-app-class-no-qos-gets-best-effort"),
    pytest.param({APP_CLASS: "offline"}, "1", {QOS: "best-effort"}, id="offline-no-qos-gets-best-effort"),
    pytest.param({QOS: "fixed-share"}, "2", {}, id="fixed-share-kept"),
    pytest.param({APP_CLASS: "offline", QOS: "burst-share"}, "1", {}, id="offline-burst-share-kept"),
    pytest.param({APP_CLASS: "online"}, "1", {}, id="online-needs-no-qos"),
    pytest.param({APP_CLASS: "online", QOS: "whatever"}, "1", {}, id="online-qos-not-checked"),
]


@pytest.mark.parametrize(("annotations", "count", "added"), SGPU_FOUND)
def test_sgpu_found(annotations: dict[str, str] | None, count: str, added: dict[str, str], settings: Settings) -> None:
    obj = pod(container(limits={SGPU: count, VMEMORY: "4"}), annotations=annotations)
    expected = redirected(obj, devices="Metax-SGPU")
    expected["metadata"]["annotations"].update(added)
    assert run(obj, settings).patched == expected


@pytest.mark.parametrize(
    ("annotations", "count", "message"),
    [
        ({APP_CLASS: "oNLine"}, "1", APP_CLASS_ERROR),
        ({APP_CLASS: ""}, "1", APP_CLASS_ERROR),
        ({APP_CLASS: "online"}, "2", "app-class pod must request single device"),
        ({APP_CLASS: "offline"}, "0", "app-class pod must request single device"),
        ({QOS: "guaranteed"}, "1", QOS_ERROR),
        ({APP_CLASS: "offline", QOS: "Best-Effort"}, "1", QOS_ERROR),
    ],
    ids=[
        "app-class-case-sensitive",
        "app-class-empty",
        "online-two-devices",
        "offline-zero-devices",
        "unknown-qos",
        "offline-qos-case-sensitive",
    ],
)
def test_sgpu_invalid_annotations_are_denied(
    annotations: dict[str, str], count: str, message: str, settings: Settings
) -> None:
    outcome = run(pod(container(limits={SGPU: count}), annotations=annotations), settings)
    assert outcome.denial() == (False, 400, "BadRequest", message)


@pytest.mark.parametrize(
    "ctr",
    [container(limits={VMEMORY: "4", VCORE: "50"}), container(requests={SGPU: "1"}), container(limits={"cpu": "1"})],
    ids=["memory-and-cores-without-count", "count-only-in-requests", "no-metax-resource"],
)
def test_without_count_in_limits_annotations_are_untouched(ctr: dict[str, Any], settings: Settings) -> None:
    outcome = run(pod(ctr, annotations={APP_CLASS: "bogus"}), settings)
    assert outcome.response["allowed"] is True and outcome.ops == []


def test_null_section_makes_both_backends_inert(configured) -> None:
    settings = configured({"metax": None})
    assert [d.resource_names for d in settings.devices if d.key.startswith("Metax")] == [frozenset(), frozenset()]
    assert run(pod(container(limits={GPU: "1", SGPU: "1"})), settings).ops == []


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({SGPU: "1", VMEMORY: "4"}, QuotaRequest(nums=1, memory=4 * 1024, cores=100)),
        ({SGPU: "2", VMEMORY: "4Gi"}, QuotaRequest(nums=2, memory=4096, cores=100)),
        ({SGPU: "1", VMEMORY: "3000Mi"}, QuotaRequest(nums=1, memory=3000, cores=100)),
        ({SGPU: "1", VCORE: "30"}, QuotaRequest(nums=1, memory=0, cores=30)),
        ({SGPU: "1", VMEMORY: "1.5"}, QuotaRequest(nums=1, memory=0, cores=100)),
        ({SGPU: "1", VMEMORY: str(2**31 // 1024)}, None),
        ({SGPU: "0"}, None),
        ({VMEMORY: "4"}, None),
    ],
    ids=[
        "bare-number-is-GiB",
        "unit-is-bytes-to-MiB",
        "Mi-unit",
        "cores-given",
        "fractional-memory-ignored",
        "bare-memory-over-int32",
        "zero-count",
        "no-count",
    ],
)
def test_sgpu_quota_request(limits: dict[str, str], expected: QuotaRequest | None, settings: Settings) -> None:
    device = sgpu(settings)
    assert device.quota_names.memory_factor == 1024
    assert device.quota_request(ContainerEdit(("spec", "containers", 0), container(limits=limits))) == expected


def test_sgpu_quota_reads_limits_only(settings: Settings) -> None:
    ctr = container(limits={SGPU: "1"}, requests={VMEMORY: "4", VCORE: "30"}, defaulted=False)
    assert sgpu(settings).quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == QuotaRequest(1, 0, 100)
