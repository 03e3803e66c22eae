"""The rendered matchConditions, evaluated with cel-python (tests/kubeapi/cel.py) against sample Pods.

The expected resource names come from app/devices with every vendor enabled, so a vendor added to the
registry or the chart's device config without being added to the configuration fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.devices.registry import build_devices
from app.settings import load_device_config
from tests.kubeapi.cel import Outcome, Result, evaluate
from tests.manifests.conftest import Obj, one

VENDOR_RESOURCES = sorted(
    {
        name
        for device in build_devices(load_device_config(""), enable_ascend=True, enable_iluvatar=True)
        for name in device.resource_names
    }
)
PLACES = ("containers/limits", "containers/requests", "initContainers/limits", "initContainers/requests")


@pytest.fixture(scope="module")
def conditions(base: list[Obj]) -> list[dict[str, str]]:
    (hook,) = one(base, "MutatingWebhookConfiguration", "hami-webhook-pods")["webhooks"]
    return hook["matchConditions"]


def pod(spec: Any = None, **metadata: Any) -> Obj:
    obj: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", **metadata}}
    if spec is not None:
        obj["spec"] = spec
    return obj


def app(resources: Any = None, name: str = "app") -> Obj:
    container: Obj = {"name": name, "image": "busybox"}
    if resources is not None:
        container["resources"] = resources
    return container


def placed(resource: str, place: str, amount: str = "1") -> Obj:
    """A Pod asking for ``resource`` in one place, next to a CPU-only container."""
    kind, field = place.split("/")
    spec: Obj = {"containers": [app({"limits": {"cpu": "1"}})]}
    spec.setdefault(kind, []).append(app({field: {resource: amount, "memory": "1Gi"}}, name="device"))
    return pod(spec)


def review(obj: Obj) -> dict[str, Any]:
    return {
        "uid": "0a1b",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "default",
        "operation": "CREATE",
        "userInfo": {"username": "admin"},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
    }


def check(conditions: list[dict[str, str]], obj: Obj) -> Result:
    return evaluate(conditions, review(obj))


def test_the_registry_knows_the_vendors_of_the_chart() -> None:
    """Guard the derivation itself: every vendor section of the chart defaults contributes names."""
    assert {"nvidia.com/gpu", "huawei.com/Ascend910B3", "iluvatar.ai/BI-V150-vgpu", "birentech.com/gpu"} <= set(
        VENDOR_RESOURCES
    )


@pytest.mark.parametrize("resource", VENDOR_RESOURCES)
def test_every_vendor_resource_reaches_the_webhook(conditions: list[dict[str, str]], resource: str) -> None:
    # Each name in one place (rotating), so all four places are covered without 4x the slow evaluations.
    place = PLACES[VENDOR_RESOURCES.index(resource) % len(PLACES)]
    assert check(conditions, placed(resource, place)) == Result(Outcome.MATCH)


@pytest.mark.parametrize("place", PLACES)
def test_a_gpu_in_any_place_reaches_the_webhook(conditions: list[dict[str, str]], place: str) -> None:
    assert check(conditions, placed("nvidia.com/gpu", place)) == Result(Outcome.MATCH)


def test_a_zero_amount_still_reaches_the_webhook(conditions: list[dict[str, str]]) -> None:
    """The webhook, not CEL, judges amounts (a negative or zero request gets HAMi's answer)."""
    assert check(conditions, placed("nvidia.com/gpumem", "containers/limits", "0")) == Result(Outcome.MATCH)


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(pod({"containers": [app({"limits": {"cpu": "2", "memory": "1Gi"}})]}), id="cpu-only"),
        pytest.param(pod({"containers": [app()], "initContainers": [app(name="init")]}), id="no-resources"),
        pytest.param(pod({"containers": [app({})]}), id="empty-resources"),
        pytest.param(pod({"containers": [app({"limits": {}, "requests": {}})]}), id="empty-limits-requests"),
        pytest.param(
            pod({"containers": [app({"limits": {"example.com/fpga": "1", "hugepages-2Mi": "1Gi"}})]}),
            id="unrelated-extended-resources",
        ),
        pytest.param(
            pod({"containers": [app({"limits": {"nvidia.com/gpu-x": "1", "nvidia.com": "1", "gpu": "1"}})]}),
            id="near-miss-names",
        ),
        pytest.param(pod({"initContainers": [app({"requests": {"cpu": "1"}})]}), id="init-only-cpu-no-containers"),
        pytest.param(pod({}), id="empty-spec"),
        pytest.param(pod(None), id="no-spec"),
        pytest.param({}, id="empty-object"),
    ],
)
def test_pods_without_accelerators_never_reach_the_webhook_and_never_error(
    conditions: list[dict[str, str]], obj: Obj
) -> None:
    assert check(conditions, obj) == Result(Outcome.NO_MATCH)


def test_mirror_pods_never_reach_the_webhook(conditions: list[dict[str, str]]) -> None:
    mirror = placed("nvidia.com/gpu", "containers/limits")
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    assert check(conditions, mirror) == Result(Outcome.NO_MATCH)
    mirror["metadata"]["annotations"] = {"other": "x"}
    assert check(conditions, mirror) == Result(Outcome.MATCH)


def test_a_defaulted_pod_as_the_api_server_sends_it(conditions: list[dict[str, str]]) -> None:
    limits = {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4000"}
    obj = pod(
        {
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "resources": {"limits": limits, "requests": dict(limits)},
                    "terminationMessagePath": "/dev/termination-log",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
        },
        uid="5e1c",
        creationTimestamp=None,
    )
    assert check(conditions, obj) == Result(Outcome.MATCH)
