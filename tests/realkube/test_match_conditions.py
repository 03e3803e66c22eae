"""The shipped matchConditions, evaluated by the API server itself (its CEL, not a copy), on each pinned version.

Pods of every shape go through `kubectl create --dry-run=server` (admission runs, nothing is stored). A Pod
reached the webhook when the API server's own counter of calls to it went up and the Pod came back mutated;
an expression that errors on some shape would refuse that Pod under `failurePolicy: Fail` and count in
`apiserver_admission_match_condition_evaluation_errors_total`. The expected resource names come from
app/admission/devices with every vendor enabled, so a vendor added to the chart's config but not to the
configuration fails here.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest

from app.admission.devices.config import load_device_config
from app.admission.devices.registry import build_devices
from testbed.cluster import RealKube
from testbed.install import CONFIGURATION, WEBHOOK, Installed
from testbed.pods import pod as build_pod

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

VENDOR_RESOURCES = sorted(
    {
        name
        for device in build_devices(load_device_config("").root, enable_ascend=True, enable_iluvatar=True)
        for name in device.resource_names
    }
)
# An extended resource must have a limit (the API server copies it to requests before admission), so a valid
# Pod always shows it in both; the places differ by container kind.
PLACES = ("containers", "initContainers", "sidecar")
Obj = dict[str, Any]


def metric(kube: RealKube, metric_name: str, **labels: str) -> float:
    """The sum of the API server's own metric over the series carrying `labels` (0 before its first sample)."""
    total = 0.0
    for line in kube.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if line.startswith(metric_name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def calls(kube: RealKube) -> float:
    return metric(kube, "apiserver_admission_webhook_request_total", name=WEBHOOK)


def errors(kube: RealKube) -> float:
    return metric(kube, "apiserver_admission_match_condition_evaluation_errors_total")


def pod(spec: Obj) -> Obj:
    """A Pod of `spec` as written (the API server defaults it), with a name of its own."""
    return build_pod(name=f"p-{uuid.uuid4().hex[:8]}", namespace=None, scheduler=None, **spec)


def app(resources: Any = None, name: str = "app", **extra: Any) -> Obj:
    container: Obj = {"name": name, "image": "busybox", **extra}
    if resources is not None:
        container["resources"] = resources
    return container


def placed(resource: str, place: str, amount: str = "1") -> Obj:
    """A Pod asking for `resource` in one place, next to a CPU-only container (a native sidecar is an init
    container that keeps running)."""
    spec: Obj = {"containers": [app({"limits": {"cpu": "1"}})]}
    device = app({"limits": {resource: amount, "memory": "1Gi"}}, name="device")
    if place == "sidecar":
        device["restartPolicy"] = "Always"
    spec.setdefault("containers" if place == "containers" else "initContainers", []).append(device)
    return pod(spec)


def dry_run(kube: RealKube, ns: str, objects: list[Obj]) -> list[Obj]:
    """`kubectl create --dry-run=server` of every object at once; the objects as admission left them."""
    listed = {"apiVersion": "v1", "kind": "List", "items": objects}
    out = kube.kubectl("create", "-n", ns, "--dry-run=server", "-f", "-", "-o", "json", stdin=json.dumps(listed)).stdout
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(out.rstrip()):  # kubectl prints one JSON document per object, back to back
        obj, end = decoder.raw_decode(out, at)
        found.append(obj)
        at = end + len(out[end:]) - len(out[end:].lstrip())
    return found


@pytest.fixture
def ns(any_installed: Installed) -> str:
    return any_installed.kube.namespace(f"mc-{uuid.uuid4().hex[:8]}")


def test_the_registry_knows_the_vendors_of_the_chart() -> None:
    """Guard the derivation itself: every vendor section of the chart defaults contributes names."""
    assert {"nvidia.com/gpu", "huawei.com/Ascend910B3", "iluvatar.ai/BI-V150-vgpu", "birentech.com/gpu"} <= set(
        VENDOR_RESOURCES
    )


def test_every_vendor_resource_in_every_place_reaches_the_webhook(any_installed: Installed, ns: str) -> None:
    kube = any_installed.kube
    sent = [placed(resource, place) for resource in VENDOR_RESOURCES for place in PLACES]
    sent.append(placed("nvidia.com/gpumem", "containers", "0"))  # the webhook, not CEL, judges amounts
    before, errors_before = calls(kube), errors(kube)
    admitted = dry_run(kube, ns, sent)
    assert calls(kube) - before == len(sent)
    assert errors(kube) == errors_before
    # One call per Pod, each admitted (what the webhook then does with a lone vcore resource, or with a
    # vendor whose backend is off, is the review's business, tested in tests/app).
    assert len(admitted) == len(sent)


NO_ACCELERATOR = {
    "cpu-only": {"containers": [app({"limits": {"cpu": "2", "memory": "1Gi"}})]},
    "no-resources": {"containers": [app()], "initContainers": [app(name="init")]},
    "empty-resources": {"containers": [app({})]},
    "empty-limits-requests": {"containers": [app({"limits": {}, "requests": {}})]},
    "unrelated-extended-resources": {
        "containers": [app({"limits": {"example.com/fpga": "1", "hugepages-2Mi": "2Mi", "memory": "1Gi"}})]
    },
    "near-miss-names": {"containers": [app({"limits": {"nvidia.com/gpu-x": "1", "example.com/gpu": "1"}})]},
    "cpu-sidecar": {
        "containers": [app()],
        "initContainers": [app({"limits": {"cpu": "1"}}, "side", restartPolicy="Always")],
    },
    "no-init-containers-key": {"containers": [app({"requests": {"memory": "1Gi"}})]},
}  # fmt: skip


def test_pods_without_accelerators_never_reach_the_webhook_and_never_error(any_installed: Installed, ns: str) -> None:
    kube = any_installed.kube
    sent = [pod(spec) for spec in NO_ACCELERATOR.values()]
    before, errors_before = calls(kube), errors(kube)
    admitted = dry_run(kube, ns, sent)
    assert calls(kube) == before
    assert errors(kube) == errors_before
    assert {p["spec"]["schedulerName"] for p in admitted} == {"default-scheduler"}


def test_mirror_pods_never_reach_the_webhook(any_installed: Installed, ns: str) -> None:
    """A mirror Pod (the kubelet's copy of a static Pod; the API server insists it names its node) is never
    sent: the webhook would refuse it for being bound to a node."""
    kube = any_installed.kube
    mirror = placed("nvidia.com/gpu", "containers")
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    mirror["spec"]["nodeName"] = "node-1"
    other = placed("nvidia.com/gpu", "containers")
    other["metadata"]["annotations"] = {"other": "x"}
    before = calls(kube)
    mirrored, annotated = dry_run(kube, ns, [mirror, other])
    assert calls(kube) - before == 1
    assert mirrored["spec"]["schedulerName"] == "default-scheduler"
    assert annotated["spec"]["schedulerName"] == "hami-scheduler"


def test_ephemeral_containers_never_reach_the_webhook(any_installed: Installed, ns: str) -> None:
    """An ephemeral container is added through the Pod's `ephemeralcontainers` subresource, which the
    configuration's rules leave out: no call, no expression error, whatever it asks for."""
    kube = any_installed.kube
    target = pod({"containers": [app()]})
    kube.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(target))
    name = target["metadata"]["name"]
    stored = kube.get("pod", name, namespace=ns)
    debug = {"name": "debug", "image": "busybox", "targetContainerName": "app"}
    stored["spec"]["ephemeralContainers"] = [debug]
    before, errors_before = calls(kube), errors(kube)
    kube.kubectl(
        "replace", "--raw", f"/api/v1/namespaces/{ns}/pods/{name}/ephemeralcontainers", "-f", "-",
        stdin=json.dumps(stored),
    )  # fmt: skip
    assert [c["name"] for c in kube.get("pod", name, namespace=ns)["spec"]["ephemeralContainers"]] == ["debug"]
    assert calls(kube) == before and errors(kube) == errors_before


def test_conditions_are_served_as_written(any_installed: Installed) -> None:
    """The API server kept every condition (an older one would drop the field silently)."""
    kube = any_installed.kube
    (hook,) = kube.get("mutatingwebhookconfiguration", CONFIGURATION)["webhooks"]
    (rendered,) = next(o for o in any_installed.objects if o["kind"] == "MutatingWebhookConfiguration")["webhooks"]
    assert hook["matchConditions"] == rendered["matchConditions"]
    assert re.fullmatch(r"v1\.\d+\.\d+", kube.version)
