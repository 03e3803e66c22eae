"""The controller path: Pods made by kube-controller-manager's controllers go through the webhook as a user's do.

A Deployment's ReplicaSet and a Job create their Pods through admission; in a namespace with a device quota,
each gets exactly the Pods that fit, and its events carry the webhook's quota message for the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from testbed.cluster import RealKube
from testbed.install import Installed

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

MEM = "nvidia.com/gpumem"
Obj = dict[str, Any]


def template(limits: dict[str, str]) -> Obj:
    ctr = {"name": "cuda", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04", "resources": {"limits": limits}}
    return {"metadata": {"labels": {"app": "gpu"}}, "spec": {"containers": [ctr]}}


def deployment(name: str, replicas: int, limits: dict[str, str]) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "gpu"}}, "template": template(limits)},
    }


def job(name: str, parallelism: int, limits: dict[str, str]) -> Obj:
    spec = template(limits)
    spec["spec"]["restartPolicy"] = "Never"
    body = {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 0, "template": spec}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": body}


def create(kube: RealKube, ns: str, obj: Obj) -> None:
    kube.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(obj))


def pods(kube: RealKube, ns: str) -> list[Obj]:
    return kube.get("pods", namespace=ns)["items"]  # type: ignore[no-any-return]


def events(kube: RealKube, ns: str, kind: str) -> list[str]:
    items = kube.get("events", "--field-selector", f"involvedObject.kind={kind}", namespace=ns)["items"]
    return [e["message"] for e in items]


def quota(kube: RealKube, ns: str, pods_that_fit: int) -> None:
    body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": ns}}
    body["spec"] = {"hard": {f"requests.{MEM}": str(pods_that_fit * 1000)}}
    kube.kubectl("apply", "-f", "-", stdin=json.dumps(body))


def test_a_deployments_pods_are_mutated(installed: Installed, namespaces: Callable[[str], str]) -> None:
    kube = installed.kube
    ns = namespaces("ctl")
    create(kube, ns, deployment("gpu", 3, {"nvidia.com/gpu": "1"}))
    made = kube.wait_for(lambda: len(pods(kube, ns)) == 3 and pods(kube, ns), 60)
    for stored in made:
        assert stored["spec"]["schedulerName"] == "hami-scheduler"
        assert stored["metadata"]["annotations"]["hami.io/gpu-type"] == "NVIDIA"
        assert stored["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"


@pytest.mark.parametrize(
    ("workload", "events_of"),
    [
        pytest.param(deployment("gpu", 5, {"nvidia.com/gpu": "1", MEM: "1000"}), "ReplicaSet", id="deployment"),
        pytest.param(job("train", 5, {"nvidia.com/gpu": "1", MEM: "1000"}), "Job", id="job"),
    ],
)
def test_a_workload_beyond_the_quota_gets_what_fits(
    installed: Installed, namespaces: Callable[[str], str], workload: Obj, events_of: str
) -> None:
    """Room for 2 of 5: the controller gets 2 Pods, and its events carry the webhook's quota message."""
    kube = installed.kube
    ns = namespaces("ctl")
    quota(kube, ns, 2)
    create(kube, ns, workload)
    denial = f'admission webhook "pods.hami.io" denied the request: exceeding resource quota: namespace {ns} {MEM}'
    kube.wait_for(lambda: any(denial in m for m in events(kube, ns, events_of)), 60)
    assert len(pods(kube, ns)) == 2
    assert all(p["spec"]["schedulerName"] == "hami-scheduler" for p in pods(kube, ns))
