"""Ascend vNPU: template rounding, hami-core mode, the 910C super pod, and the Go-tested errors.

Rule: docs/rules.md#ascend.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.devices.base import Device, QuotaRequest
from app.admission.edit import ContainerEdit
from app.settings import Settings
from testbed.pods import container, pod
from testbed.reviews import redirected, run

A = "huawei.com/Ascend910A"
A_MEM = "huawei.com/Ascend910A-memory"
A_CORE = "huawei.com/Ascend910A-core"
B2 = "huawei.com/Ascend910B2"
B2_MEM = "huawei.com/Ascend910B2-memory"
C = "huawei.com/Ascend910C"
C_MEM = "huawei.com/Ascend910C-memory"
HAMI_CORE = {"huawei.com/vnpu-mode": "hami-core"}


@pytest.fixture
def enabled(make_settings) -> Settings:
    """The chart's seven chips."""
    return make_settings(HAMI_ENABLE_ASCEND="true")


def chip_910a(**overrides: Any) -> dict[str, Any]:
    """A 910A config entry without templates unless given."""
    return {
        "commonWord": "Ascend910A",
        "chipName": "910A",
        "resourceName": A,
        "resourceMemoryName": A_MEM,
        "resourceCoreName": A_CORE,
        "memoryAllocatable": 32768,
        "memoryCapacity": 32768,
        "memoryFactor": 1,
        **overrides,
    }


def ascend(settings: Settings, key: str = "Ascend910A") -> Device:
    return next(d for d in settings.devices if d.key == key)


def both(resources: dict[str, str]) -> dict[str, dict[str, str]]:
    return {"limits": dict(resources), "requests": dict(resources)}


@pytest.mark.parametrize(
    ("limits", "annotations", "resources", "devices"),
    [
        ({A: "1", A_MEM: "8738"}, None, both({A: "1", A_MEM: "8738"}), "Ascend910A"),
        ({A: "1", A_MEM: "20000"}, None, both({A: "1", A_MEM: "32768"}), "Ascend910A"),
        ({A: "1", A_MEM: "100"}, None, both({A: "1", A_MEM: "2184"}), "Ascend910A"),
        ({A: "1"}, None, both({A: "1", A_MEM: "32768"}), "Ascend910A"),
        ({A: "1", A_MEM: "15360"}, HAMI_CORE, both({A: "1", A_MEM: "15360"}), "Ascend910A"),
        ({A: "1", A_MEM: "15360", A_CORE: "10"}, HAMI_CORE, both({A: "1", A_MEM: "15360", A_CORE: "10"}), "Ascend910A"),
        ({A: "1", A_CORE: "0"}, None, both({A: "1", A_CORE: "0", A_MEM: "32768"}), "Ascend910A"),
        ({A: "2"}, None, both({A: "2", A_MEM: "32768"}), "Ascend910A"),
        ({A: "2", A_MEM: "8738"}, HAMI_CORE, both({A: "2", A_MEM: "8738"}), "Ascend910A"),
        ({B2: "1", B2_MEM: "8000"}, None, both({B2: "1", B2_MEM: "8192"}), "Ascend910B2"),
        ({C: "1"}, None, both({C: "2", C_MEM: "65536"}), "Ascend910C"),
        ({C: "4"}, None, both({C: "4", C_MEM: "65536"}), "Ascend910C"),
    ],
    ids=[
        "8738-is-template-vir08",
        "20000-rounds-to-whole-card-32768",
        "100-rounds-to-smallest-template",
        "count-only-gets-whole-card",
        "hami-core-15360-kept-raw",
        "hami-core-accepts-cores",
        "hard-split-core-0-accepted",
        "two-whole-cards",
        "hami-core-allows-vnpu-on-several-devices",
        "910B2-8000-rounds-to-8192",
        "910C-super-pod-1-becomes-2",
        "910C-super-pod-4-kept",
    ],
)
def test_found(
    limits: dict[str, str],
    annotations: dict[str, str] | None,
    resources: dict[str, Any],
    devices: str,
    enabled: Settings,
) -> None:
    obj = pod(container(limits=limits), annotations=annotations)
    expected = redirected(obj, devices=devices)
    expected["spec"]["containers"][0]["resources"] = resources
    assert run(obj, enabled).patched == expected


def test_memory_request_is_created_when_requests_are_absent(enabled: Settings) -> None:
    obj = pod(container(limits={A: "1", A_MEM: "8738"}, defaulted=False))
    expected = redirected(obj, devices="Ascend910A")
    expected["spec"]["containers"][0]["resources"]["requests"] = {A: "1", A_MEM: "8738"}
    assert run(obj, enabled).patched == expected


@pytest.mark.parametrize(
    ("ctr", "annotations", "message"),
    [
        (container(limits={A: "1", A_MEM: "40000"}), None, f"{A_MEM} 40000 is invalid"),
        (container(limits={C: "3"}), None, "Ascend910C device request must be 1 or 2*n, got 3"),
        (container(limits={A: "1", A_CORE: "10"}), None, f"{A_CORE} is only supported in hami-core (soft split) mode"),
        (
            container(limits={A: "1"}, requests={A_CORE: "25"}),
            None,
            f"{A_CORE} is only supported in hami-core (soft split) mode",
        ),
        (
            container(limits={A: "1", A_CORE: "10"}),
            {"huawei.com/vnpu-mode": "template"},
            f"{A_CORE} is only supported in hami-core (soft split) mode",
        ),
        (container(limits={A: "2", A_MEM: "8738"}), None, "vNPU not supported for multiple devices"),
    ],
    ids=[
        "40000-invalid-on-910A",
        "910C-super-pod-odd-count",
        "hard-split-core-10",
        "hard-split-core-25-in-requests",
        "other-mode-is-hard-split",
        "vnpu-on-several-devices",
    ],
)
def test_invalid_requests_are_denied(
    ctr: dict[str, Any], annotations: dict[str, str] | None, message: str, enabled: Settings
) -> None:
    assert run(pod(ctr, annotations=annotations), enabled).denial() == (False, 400, "BadRequest", message)


@pytest.mark.parametrize(
    "ctr",
    [container(limits={A_MEM: "8738"}), container(requests={A: "1"}), container(limits={"cpu": "1"})],
    ids=["memory-without-count", "count-only-in-requests", "no-ascend-resource"],
)
def test_without_count_in_limits_nothing_changes(ctr: dict[str, Any], enabled: Settings) -> None:
    outcome = run(pod(ctr), enabled)
    assert outcome.response["allowed"] is True and outcome.ops == []


def test_disabled_by_default(settings: Settings) -> None:
    assert not any(d.key.startswith("Ascend") for d in settings.devices)
    assert run(pod(container(limits={A: "1", A_MEM: "40000"})), settings).ops == []


def test_without_templates_memory_rounds_to_whole_card(configured) -> None:
    settings = configured({"vnpus": {"configs": [chip_910a()]}}, HAMI_ENABLE_ASCEND="true")
    obj = pod(container(limits={A: "1", A_MEM: "15360"}))
    expected = redirected(obj, devices="Ascend910A")
    expected["spec"]["containers"][0]["resources"] = both({A: "1", A_MEM: "32768"})
    assert run(obj, settings).patched == expected


def test_templates_are_sorted_by_memory(configured) -> None:
    templates = [{"name": "big", "memory": 16384}, {"name": "small", "memory": 4096}]
    settings = configured({"vnpus": {"configs": [chip_910a(templates=templates)]}}, HAMI_ENABLE_ASCEND="true")
    obj = pod(container(limits={A: "1", A_MEM: "3000"}))
    expected = redirected(obj, devices="Ascend910A")
    expected["spec"]["containers"][0]["resources"] = both({A: "1", A_MEM: "4096"})
    assert run(obj, settings).patched == expected


@pytest.mark.parametrize("count", ["1", "3"], ids=["1-kept", "3-kept"])
def test_910c_without_super_pod_keeps_odd_counts(count: str, configured) -> None:
    entry = chip_910a(
        commonWord="Ascend910C", resourceName=C, resourceMemoryName=C_MEM, resourceCoreName="", superPod=False
    )
    settings = configured({"vnpus": {"configs": [entry]}}, HAMI_ENABLE_ASCEND="true")
    obj = pod(container(limits={C: count}))
    expected = redirected(obj, devices="Ascend910C")
    expected["spec"]["containers"][0]["resources"] = both({C: count, C_MEM: "32768"})
    assert run(obj, settings).patched == expected


@pytest.mark.parametrize(
    ("user_class", "expected_class"),
    [(None, "ascend"), ("kata", "kata")],
    ids=["set-when-unset", "user-value-kept"],
)
def test_runtime_class(user_class: str | None, expected_class: str, configured) -> None:
    settings = configured({"vnpus": {"configs": [chip_910a(runtimeClassName="ascend")]}}, HAMI_ENABLE_ASCEND="true")
    spec = {} if user_class is None else {"runtimeClassName": user_class}
    obj = pod(container(limits={A: "1", A_MEM: "32768"}), **spec)
    expected = redirected(obj, devices="Ascend910A")
    expected["spec"]["runtimeClassName"] = expected_class
    assert run(obj, settings).patched == expected


@pytest.mark.parametrize(
    ("env", "expected_env"),
    [
        (None, [{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}]),
        (
            [{"name": "ASCEND_VISIBLE_DEVICES", "value": "0"}, {"name": "B", "value": "2"}],
            [{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}, {"name": "B", "value": "2"}],
        ),
    ],
    ids=["set-once-for-two-chips", "user-value-replaced-in-place"],
)
def test_overwrite_env_hides_npus_from_other_containers(
    env: list[dict[str, str]] | None, expected_env: list[dict[str, str]], configured
) -> None:
    chips = [
        chip_910a(overwriteEnv=True),
        chip_910a(commonWord="Ascend910B2", resourceName=B2, resourceMemoryName=B2_MEM, overwriteEnv=True),
    ]
    settings = configured({"vnpus": {"configs": chips}}, HAMI_ENABLE_ASCEND="true")
    obj = pod(container("npu", limits={A: "1", A_MEM: "32768"}), container("sidecar", env=env))
    expected = redirected(obj, devices="Ascend910A")
    # HAMi lets the 910B2 backend hide NPUs from the 910A container too; a container using any Ascend chip is spared.
    expected["spec"]["containers"][1]["env"] = expected_env
    assert run(obj, settings).patched == expected


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (container(limits={A: "1", A_MEM: "8738"}), QuotaRequest(nums=1, memory=8738, cores=0)),
        (container(limits={A: "1", A_MEM: "15360", A_CORE: "10"}), QuotaRequest(nums=1, memory=15360, cores=10)),
        (container(requests={A: "2"}), QuotaRequest(nums=2, memory=0, cores=0)),
        (container(limits={A: "1", A_MEM: "3Gi"}), None),
        (container(limits={A: "0", A_MEM: "8738"}), None),
        (container(limits={A_MEM: "8738"}), None),
    ],
    ids=["memory", "soft-split-cores", "requests-only", "memory-over-int32", "zero-count", "no-count"],
)
def test_quota_request(ctr: dict[str, Any], expected: QuotaRequest | None, enabled: Settings) -> None:
    assert ascend(enabled).quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected


def test_quota_memory_factor(configured) -> None:
    device = ascend(configured({"vnpus": {"configs": [chip_910a(memoryFactor=4)]}}, HAMI_ENABLE_ASCEND="true"))
    assert device.quota_names.memory_factor == 4
    ctr = ContainerEdit(("spec", "containers", 0), container(limits={A: "1", A_MEM: "1000"}))
    assert device.quota_request(ctr) == QuotaRequest(nums=1, memory=4000, cores=0)
