"""What the quota tests through kube-apiserver share (test_quota.py, test_quota_crashes.py,
test_quota_partition.py, test_quota_clock.py): three webhook replicas behind the installed webhook's ClusterIP (a
round-robin forwarder plays kube-proxy, as a Deployment scaled to three runs them), namespaces with room for K
one-GPU Pods, what a refusal says, and what was stored; gangs' group objects and members, each way of declaring
them (test_quota.py, test_quota_view.py). Split in four modules so pytest-xdist runs them side by side, each on a
worker's own control plane."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from testbed.api import Created, pod
from testbed.cluster import RealKube, workload_api
from testbed.install import Installed, apply, get
from testbed.replicas import Replicas, start_replicas

MEM = "nvidia.com/gpumem"
ONE_GPU = {"nvidia.com/gpu": "1", MEM: "1000"}  # K of these fit in a quota of K * 1000
FAULT_ROOM, FAULT_PODS = 30, 90  # a burst of FAULT_PODS into room for FAULT_ROOM, with a fault a third in
SHORT_TTL = 15  # HAMI_QUOTA_RESERVATION_TTL: room reserved for Pods that never landed comes back after it


def replicas_of(
    installed: Installed, env: dict[str, str] | None = None, faults: bool = False, count: int = 3, **start: Any
) -> Iterator[Replicas]:
    """``count`` webhook processes behind the installed webhook's ClusterIP; their logs checked once stopped: no
    Traceback, and no admission left undecided unless the test injects faults (then that is the answer)."""
    replicas = start_replicas(installed, count, installed.work / f"replicas-{uuid.uuid4().hex[:6]}", env, **start)
    try:
        yield replicas
    finally:
        logs = replicas.stop()
    for log in logs:
        assert "Traceback" not in log and (faults or "quota undecided" not in log), log


def quota_namespace(kube: RealKube, room: int, key: str = f"requests.{MEM}") -> str:
    """A fresh namespace with a device quota that fits `room` one-GPU Pods of 1000 MiB, under ``key``."""
    ns = f"e2e-quota-{uuid.uuid4().hex[:8]}"
    kube.namespace(ns)
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": ns}}
    apply(kube, quota | {"spec": {"hard": {key: str(room * 1000)}}})
    return ns


def full(ns: str, room: int) -> str:
    return f"exceeding resource quota: namespace {ns} {MEM} used {room * 1000} + requested 1000 > limit {room * 1000}"


def refusals(calls: list[Created]) -> list[str]:
    """Every refusal that is not the quota's."""
    return [f"HTTP {c.status}: {c.refusal.get('message')}" for c in calls if c.status != 201 and not c.quota_denial]


def stored(kube: RealKube, ns: str) -> list[dict[str, Any]]:
    return get(kube, "pods", namespace=ns)["items"]  # type: ignore[no-any-return]


def explained(call: Created) -> str:
    """What a refusal says, shortened to its kind; "" when it says nothing."""
    message = str(call.refusal.get("message") or "")
    for kind in ("exceeding resource quota", "failed calling webhook", "no answer", "quota"):
        if kind in message:
            return kind
    return message[:80]


CRD_GROUPS = {"scheduling.x-k8s.io": "v1alpha1", "scheduling.volcano.sh": "v1beta1"}
WAYS = ("scheduling.k8s.io", "scheduling.x-k8s.io", "scheduling.volcano.sh", "kueue.x-k8s.io")


def podgroup_crds(kube: RealKube) -> None:
    """coscheduling's and Volcano's PodGroup as CRDs, as small as what the webhook reads (spec.minMember)."""
    for group, version in CRD_GROUPS.items():
        schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        names = {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups", "singular": "podgroup"}
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"podgroups.{group}"},
            "spec": {
                "group": group,
                "names": names,
                "scope": "Namespaced",
                "versions": [{"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
            },
        }
        apply(kube, crd)
    for group in CRD_GROUPS:
        kube.kubectl("wait", "--for=condition=Established", f"crd/podgroups.{group}", "--timeout=60s")


def podgroup(kube: RealKube, way: str, ns: str, name: str, size: int) -> dict[str, Any]:
    """The group object of ``way`` declaring a gang of ``size`` (upstream: in the version ``kube`` serves)."""
    if way == "scheduling.k8s.io":
        api, spec = workload_api(kube.minor), {"schedulingPolicy": {"gang": {"minCount": size}}}
    else:
        api, spec = f"{way}/{CRD_GROUPS[way]}", {"minMember": size}
    return {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def member(way: str, group: str, size: int) -> dict[str, Any]:
    """A one-GPU Pod of ``group``, named the way ``way`` names a group (Kueue's carries its size)."""
    marks: dict[str, Any] = {
        "scheduling.x-k8s.io": {"labels": {"scheduling.x-k8s.io/pod-group": group}},
        "scheduling.volcano.sh": {"annotations": {"scheduling.k8s.io/group-name": group}},
        "kueue.x-k8s.io": {
            "labels": {"kueue.x-k8s.io/pod-group-name": group},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": str(size)},
        },
    }.get(way, {})
    spec = {"schedulingGroup": {"podGroupName": group}} if way == "scheduling.k8s.io" else {}
    return pod(f"{group}-", ONE_GPU, metadata=marks, **spec)
