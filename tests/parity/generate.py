"""Pods to send to both webhooks, generated with hypothesis.

Resource names come from the device config the chart renders (every `domain/name` string in it), so a new vendor
or a renamed resource in the next HAMi release is generated without touching this file. Values cover valid,
zero, negative, fractional, huge and non-canonical amounts. A review is shaped either as kube-apiserver sends it
(canonical quantities, requests defaulted from limits, a scheduler name) or as a direct client might (anything a
JSON body can carry: numbers, `2.0`, `1000m`, `01`, no requests, no scheduler name).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import yaml
from hypothesis import strategies as st

RESOURCE_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
OTHER_RESOURCES = ("cpu", "memory", "example.com/widget")
"""Resources no vendor reads: a device webhook must leave them alone."""

CANONICAL = (
    "0", "1", "2", "3", "4", "8", "16", "50", "99", "100", "101", "-1", "-3",
    "100m", "500m", "1500m", "1k", "3k", "1024", "2048", "4096", "24576", "49152", "98304", "1Gi",
    "2147483647", "2147483648", "9223372036854775807",
)  # fmt: skip
"""Amounts as kube-apiserver re-encodes them (resource.Quantity's canonical form)."""
NON_CANONICAL = ("2.0", "1000m", "01", "+1", "1e0", "1e3", "0.5", "1.5", "3000", "100000m", "1e20", "abc", "")
"""Amounts only a direct client sends: whole numbers spelt otherwise, exponents, and some that are no quantity."""

ENV = (
    ("NVIDIA_VISIBLE_DEVICES", "all"),
    ("CUDA_TASK_PRIORITY", "5"),
    ("GPU_CORE_UTILIZATION_POLICY", "disable"),
    ("ASCEND_VISIBLE_DEVICES", "0"),
    ("SOL_CONTINER_NAME", "x"),
    ("PATH", "/bin"),
)
"""Env vars an author may already have set: the ones vendors write, and one they do not."""

ANNOTATIONS = {
    "huawei.com/vnpu-mode": ("hami-core", "other"),
    "metax-tech.com/sgpu-app-class": ("online", "offline", "bad"),
    "metax-tech.com/sgpu-qos-policy": ("best-effort", "fixed-share", "burst-share", "bad"),
    "hami.io/gpu-scheduler-policy": ("binpack", "spread"),
    "hami.io/node-scheduler-policy": ("spread",),
    "nvidia.com/use-gputype": ("A100",),
    "hami.io/core-policy": ("force", "disable"),
    "team": ("ml",),
}
"""HAMi's Pod annotations (and one of ours, and one of nobody's) with values its readers take and ignore."""
FORGED = {
    "hami.io/vgpu-devices-to-allocate": "GPU-0,NVIDIA,20000,100:;",
    "hami.io/bind-phase": "allocating",
    "hami.io/vgpu-node": "node-1",
}
"""Annotations HAMi's scheduler writes, which an author may try to write first (one Pod in ten carries one)."""

SCHEDULERS = ("default-scheduler", "hami-scheduler", "other-scheduler")


def resource_names(device_config: str) -> tuple[str, ...]:
    """Every resource name the device config declares, in a stable order."""
    found: set[str] = set()
    for value in _strings(yaml.safe_load(device_config)):
        if RESOURCE_NAME.match(value):
            found.add(value)
    return tuple(sorted(found))


def _strings(node: Any) -> Iterable[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def amounts(direct: bool) -> st.SearchStrategy[Any]:
    canonical = st.sampled_from(CANONICAL)
    if not direct:
        return canonical
    return st.one_of(canonical, st.sampled_from(NON_CANONICAL), st.integers(-2, 120))


@st.composite
def containers(draw: st.DrawFn, name: str, names: Sequence[str], direct: bool, sidecar: bool = False) -> dict:
    resource = st.sampled_from((*names, *OTHER_RESOURCES))
    limits = draw(st.dictionaries(resource, amounts(direct), max_size=4))
    requests = draw(st.dictionaries(resource, amounts(direct), max_size=2))
    ctr: dict[str, Any] = {"name": name, "image": "cuda:12"}
    if not direct:
        requests = {**limits, **requests} if draw(st.booleans()) else {**requests, **limits}
    resources = {key: value for key, value in (("limits", limits), ("requests", requests)) if value}
    if resources or not direct:
        ctr["resources"] = resources
    env = draw(st.lists(st.sampled_from(ENV), max_size=2, unique_by=lambda e: e[0]))
    if env:
        ctr["env"] = [{"name": key, "value": value} for key, value in env]
    privileged = draw(st.sampled_from((None, None, None, False, True)))
    if privileged is not None:
        ctr["securityContext"] = {"privileged": privileged}
    if sidecar:
        ctr["restartPolicy"] = "Always"
    return ctr


@st.composite
def pods(draw: st.DrawFn, names: Sequence[str], direct: bool) -> dict:
    count = draw(st.sampled_from((1, 1, 1, 2, 2, 3, 0)))
    spec: dict[str, Any] = {"containers": [draw(containers(f"c{i}", names, direct)) for i in range(count)]}
    inits = draw(st.integers(0, 2))
    if inits:
        spec["initContainers"] = [
            draw(containers(f"i{i}", names, direct, sidecar=draw(st.booleans()))) for i in range(inits)
        ]
    scheduler = draw(st.sampled_from((*SCHEDULERS, None, "") if direct else SCHEDULERS))
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if draw(st.integers(0, 9)) == 0:
        spec["nodeName"] = "node-1"
    if draw(st.integers(0, 5)) == 0:
        spec["runtimeClassName"] = "custom"
    metadata: dict[str, Any] = {"name": "p", "namespace": "default"}
    keys = draw(st.lists(st.sampled_from(sorted(ANNOTATIONS)), max_size=3, unique=True))
    if keys:
        metadata["annotations"] = {key: draw(st.sampled_from(ANNOTATIONS[key])) for key in keys}
    if draw(st.integers(0, 9)) == 0:
        key = draw(st.sampled_from(sorted(FORGED)))
        metadata.setdefault("annotations", {})[key] = FORGED[key]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@st.composite
def reviews(draw: st.DrawFn, names: Sequence[str]) -> dict:
    """An AdmissionReview of a Pod CREATE, in either version and either shape."""
    direct = draw(st.booleans())
    version = draw(st.sampled_from(("admission.k8s.io/v1", "admission.k8s.io/v1beta1")))
    return review(draw(pods(names, direct)), version)


def review(pod: dict, version: str = "admission.k8s.io/v1", uid: str = "parity") -> dict:
    return {
        "apiVersion": version,
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": pod.get("metadata", {}).get("namespace", "default"),
            "operation": "CREATE",
            "userInfo": {"username": "parity"},
            "object": pod,
            "dryRun": False,
        },
    }


def defaulted(pod: dict) -> dict:
    """What kube-apiserver fills in before webhooks see a Pod: the scheduler name, requests copied from limits."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for field in ("initContainers", "containers"):
        for ctr in spec.get(field) or []:
            resources = ctr.get("resources") or {}
            if resources.get("limits"):
                resources["requests"] = {**resources["limits"], **(resources.get("requests") or {})}
    return pod
