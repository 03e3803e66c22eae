"""NVIDIA (docs/rules.md#nvidia): the Go-tested cases, through the public review path; with env vars set, not
appended, a per-Pod core policy, and invalid device requests denied as the author's error."""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.devices.base import QuotaRequest
from app.admission.edit import ContainerEdit
from testbed.pods import container, pod
from testbed.reviews import redirected, run


def both(resources: dict[str, Any], **extra: str) -> dict[str, Any]:
    """The expected container resources: limits as given plus ``extra``, mirrored into requests."""
    limits = {**resources, **extra}
    return {"limits": limits, "requests": dict(limits)}


# (limits in, extra limits expected on the container or None when not a device container)
FOUND = [
    pytest.param(
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"},
        {"nvidia.com/gpucores": "100"},
        id="gpu+pct100-exclusive",
    ),
    pytest.param({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}, {}, id="pct50-not-exclusive"),
    pytest.param({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"}, {}, id="pct0-accepted-not-exclusive"),
    pytest.param({"nvidia.com/gpu": "1"}, {"nvidia.com/gpucores": "100"}, id="gpu-alone-exclusive"),
    pytest.param({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "70"}, {}, id="explicit-cores-kept"),
    pytest.param({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"}, {}, id="gpu+gpumem-not-exclusive"),
    pytest.param({"nvidia.com/gpu": "0"}, {"nvidia.com/gpucores": "100"}, id="zero-gpus-still-found"),
    pytest.param({"nvidia.com/gpumem": "3000"}, {"nvidia.com/gpu": "1"}, id="memory-only-gets-default-count"),
    pytest.param({"nvidia.com/gpucores": "30"}, {"nvidia.com/gpu": "1"}, id="cores-only-gets-default-count"),
]


@pytest.mark.parametrize(("limits", "extra"), FOUND)
def test_found_containers(limits: dict[str, str], extra: dict[str, str], settings) -> None:
    obj = pod(container(limits=limits))
    expected = redirected(obj)
    expected["spec"]["containers"][0]["resources"] = both(limits, **extra)
    assert run(obj, settings).patched == expected


def test_exclusive_from_requests_only_sets_limit(settings) -> None:
    obj = pod(container(requests={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}))
    expected = redirected(obj)
    expected["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpucores": "100"}
    expected["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpucores"] = "100"
    assert run(obj, settings).patched == expected


def test_cores_in_requests_leave_limits_alone(settings) -> None:
    obj = pod(container(limits={"nvidia.com/gpu": "1"}, requests={"nvidia.com/gpucores": "55"}))
    expected = redirected(obj)
    assert run(obj, settings).patched == expected


def test_gpu_and_memory_only_in_requests_is_not_found(settings) -> None:
    obj = pod(container(requests={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}))
    outcome = run(obj, settings)
    assert outcome.response["allowed"] is True and outcome.ops == []


def test_no_nvidia_resource_is_untouched(settings) -> None:
    obj = pod(container(limits={"cpu": "1", "memory": "1Gi"}))
    assert run(obj, settings).ops == []


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        pytest.param(
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "101"},
            "invalid nvidia.com/gpumem-percentage value 101 in container main: must be an integer between 0 and 100",
            id="pct101",
        ),
        pytest.param(
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"},
            "invalid nvidia.com/gpumem-percentage value 150 in container main: must be an integer between 0 and 100",
            id="pct150",
        ),
        pytest.param(
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100500m"},
            "invalid nvidia.com/gpumem-percentage value 101 in container main: must be an integer between 0 and 100",
            id="pct-fraction-rounded-past-100",
        ),
    ],
)
def test_percentage_errors(limits: dict[str, str], message: str, settings) -> None:
    assert run(pod(container(limits=limits)), settings).denial() == (False, 400, "BadRequest", message)


@pytest.mark.parametrize("percentage", ["500m", "50.5", "99900m"])
def test_fractional_percentage_is_read_rounded_up(percentage: str, settings) -> None:
    """As HAMi reads it (Quantity.Value()): admitted, and the Pod keeps the amount as written."""
    outcome = run(pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": percentage})), settings)
    assert outcome.response["allowed"] is True
    assert not any("gpumem-percentage" in op["path"] for op in outcome.ops)


def test_memory_without_count_and_no_default_is_denied(configured) -> None:
    settings = configured({"nvidia": {"defaultGPUNum": 0}})
    obj = pod(container(limits={"nvidia.com/gpumem": "3000"}))
    assert run(obj, settings).denial() == (
        False,
        400,
        "BadRequest",
        "container main: nvidia.com/gpumem requested without nvidia.com/gpu "
        "and no default GPU count is configured (nvidia.defaultGPUNum is 0)",
    )


def test_priority_env_and_core_policy_only_on_gpu_container(configured) -> None:
    settings = configured({"nvidia": {"gpuCorePolicy": "force"}})
    obj = pod(
        container(
            limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/priority": "5"},
            env=[{"name": "CUDA_TASK_PRIORITY", "value": "0"}],
        ),
        container("sidecar"),
    )
    expected = redirected(obj)
    expected["spec"]["containers"][0]["env"] = [
        {"name": "CUDA_TASK_PRIORITY", "value": "5"},
        {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"},
    ]
    assert run(obj, settings).patched == expected


@pytest.mark.parametrize(
    ("annotation", "configured_policy", "env"),
    [
        pytest.param("disable", "default", "disable", id="annotation-overrides-default"),
        pytest.param("default", "force", None, id="annotation-default-overrides-force"),
        pytest.param(None, "force", "force", id="configured-policy"),
    ],
)
def test_core_policy_annotation(annotation: str | None, configured_policy: str, env: str | None, configured) -> None:
    settings = configured({"nvidia": {"gpuCorePolicy": configured_policy}})
    annotations = {"hami.io/core-policy": annotation} if annotation else None
    obj = pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}), annotations=annotations)
    expected = redirected(obj)
    if env:
        expected["spec"]["containers"][0]["env"] = [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": env}]
    assert run(obj, settings).patched == expected


def test_invalid_core_policy_annotation_is_denied(settings) -> None:
    obj = pod(container(limits={"nvidia.com/gpu": "1"}), annotations={"hami.io/core-policy": "max"})
    assert run(obj, settings).denial() == (
        False,
        400,
        "BadRequest",
        "annotation hami.io/core-policy must be one of default, force, disable, got 'max'",
    )


def test_overwrite_env_marks_other_containers_and_runtime_class(configured) -> None:
    settings = configured({"nvidia": {"overwriteEnv": True, "runtimeClassName": "nvidia"}})
    obj = pod(
        container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
        container("mlu", limits={"cambricon.com/vmlu": "1"}),
        container("plain", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
    )
    expected = redirected(obj, devices="NVIDIA,MLU")
    expected["spec"]["runtimeClassName"] = "nvidia"
    expected["spec"]["containers"][1]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    expected["spec"]["containers"][2]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    assert run(obj, settings).patched == expected


def test_user_runtime_class_is_kept(configured) -> None:
    settings = configured({"nvidia": {"runtimeClassName": "nvidia"}})
    obj = pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}), runtimeClassName="kata")
    assert run(obj, settings).patched == redirected(obj)


def test_custom_resource_names(configured) -> None:
    settings = configured(
        {
            "nvidia": {
                "resourceCountName": "hami.io/gpu",
                "resourceCoreName": "hami.io/gpucores",
                "resourceMemoryName": "hami.io/gpumem",
            }
        }
    )
    obj = pod(container(limits={"hami.io/gpu": "1"}))
    expected = redirected(obj)
    expected["spec"]["containers"][0]["resources"] = both({"hami.io/gpu": "1"}, **{"hami.io/gpucores": "100"})
    assert run(obj, settings).patched == expected


QUOTA = [
    pytest.param({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1024"}, {}, QuotaRequest(2, 1024, 0), id="memory"),
    pytest.param(
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"},
        {"memoryFactor": 2},
        QuotaRequest(1, 2048, 0),
        id="factor-2",
    ),
    pytest.param({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16Gi"}, {}, None, id="16Gi-out-of-range"),
    pytest.param({"nvidia.com/gpu": "1"}, {"defaultMemory": 512}, QuotaRequest(1, 512, 0), id="default-memory"),
    pytest.param(
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"},
        {"defaultMemory": 512},
        QuotaRequest(1, 0, 0),
        id="percentage-means-no-memory",
    ),
    pytest.param({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"}, {}, QuotaRequest(1, 0, 30), id="cores"),
    pytest.param({"nvidia.com/gpu": "1"}, {"defaultCores": 20}, QuotaRequest(1, 0, 20), id="default-cores"),
    pytest.param({"nvidia.com/gpumem": "1000"}, {}, None, id="no-count"),
]


@pytest.mark.parametrize(("limits", "config", "expected"), QUOTA)
def test_quota_request(
    limits: dict[str, str], config: dict[str, int], expected: QuotaRequest | None, configured
) -> None:
    settings = configured({"nvidia": config})
    nvidia = settings.devices[0]
    ctr = ContainerEdit(("spec", "containers", 0), container(limits=limits))
    assert nvidia.quota_request(ctr) == expected
