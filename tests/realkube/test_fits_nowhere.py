"""Fits nowhere as a Pod's author meets it (docs/rules.md#fits-nowhere): GPU Nodes registered with HAMi's register
annotation in a real kube-apiserver, the webhook installed as users install it keeping its inventory by a watch of
the Nodes' metadata (with the shipped RBAC), and `kubectl create` / `kubectl apply` printing the warnings; Node
churn reflected within seconds. Each pinned version: the PartialObjectMetadata list + watch is the API server's.

The Nodes are the installed cluster's (no kubelet: nothing runs them) and are deleted at the end, so the tests
after these find no device registered, as before.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.api import create, pod
from testbed.cluster import RealKube
from testbed.install import Installed
from testbed.nodes import gpu, register
from testbed.vendors import VENDORS, device

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

A100 = "NVIDIA-NVIDIA A100-SXM4-80GB"
NODES = ("gpu-6", "gpu-7")
REGISTER = "hami.io/node-nvidia-register"
EXAMPLES = [  # the five: (limits, annotations, the warning kubectl prints)
    (
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100000"}, {},
        "container train asks 100000 MiB per GPU; the largest registered NVIDIA GPU has 81920 MiB (node gpu-6)",
    ),
    (
        {"nvidia.com/gpu": "8"}, {},
        "container train asks 8 NVIDIA GPUs; the most a registered node has is 4 (node gpu-6)",
    ),
    (
        {"nvidia.com/gpu": "1"}, {"nvidia.com/use-gputype": "H100"},
        f"container train asks nvidia.com/use-gputype 'H100'; registered: {A100}",
    ),
    (
        {"nvidia.com/gpu": "1"}, {"nvidia.com/use-gpuuuid": "GPU-00000000-0000-0000-0000-000000000000"},
        "container train asks nvidia.com/use-gpuuuid 'GPU-00000000-000'...; no registered GPU has such an id",
    ),
    (
        {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}, {"nvidia.com/vgpu-mode": "mig"},
        "container train asks nvidia.com/vgpu-mode 'mig'; registered GPUs are in mode hami-core",
    ),
]  # fmt: skip


def a100s(name: str, count: int = 4, health: bool = True) -> list[dict[str, Any]]:
    return [gpu(i, name, 81920, card=A100, numa=i // 2, health=health) for i in range(count)]


def put_node(installed: Installed, name: str, devices: list[dict[str, Any]]) -> None:
    """A Node with HAMi's register annotation, created or re-registered (as the device plugin patches it)."""
    kube = installed.kube
    annotations = {REGISTER: register(devices)}
    if kube.exists("node", name):
        kube.kubectl(
            "patch", "node", name, "--type=merge", "-p", json.dumps({"metadata": {"annotations": annotations}})
        )
    else:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations}}
        kube.kubectl("create", "-f", "-", stdin=json.dumps(node))


@pytest.fixture
def gpu_nodes(any_installed: Installed) -> Iterator[Installed]:
    """Two Nodes of four A100 80GB each, registered; deleted after the test."""
    try:
        for name in NODES:
            put_node(any_installed, name, a100s(name))
        yield any_installed
    finally:
        any_installed.kube.kubectl("delete", "node", *NODES, "gpu-8", "--ignore-not-found", check=False)


def warnings_for(installed: Installed, ns: str, limits: dict[str, str], annotations: dict[str, str]) -> list[str]:
    """The fits-nowhere lines `kubectl create --dry-run=server` prints for a Pod `train`."""
    body = pod("train", limits, metadata={"annotations": annotations} if annotations else None)
    body["spec"]["containers"][0]["name"] = "train"
    code, _, err = create(installed, ns, body, "--dry-run=server")
    assert code == 0, err
    return [line.removeprefix("Warning: ") for line in err.splitlines() if "container train asks" in line]


def test_the_five_examples_are_warned_at_create(gpu_nodes: Installed, tmp_path: Path) -> None:
    kube = gpu_nodes.kube
    ns = kube.namespace(f"fits-{uuid.uuid4().hex[:8]}")
    # The watch brings the Nodes in within a second or two of their registration.
    kube.wait_for(lambda: warnings_for(gpu_nodes, ns, *EXAMPLES[1][:2]), 30)
    for limits, marks, expected in EXAMPLES:
        body = pod("train", limits, metadata={"annotations": marks} if marks else None)
        body["spec"]["containers"][0]["name"] = "train"
        (tmp_path / "train.yaml").write_text(json.dumps(body))
        done = kube.kubectl("create", "-n", ns, "-f", str(tmp_path / "train.yaml"), check=False)
        assert done.returncode == 0, done.stderr
        printed = [line for line in done.stderr.splitlines() if "asks" in line]
        print(f"$ kubectl create -f train.yaml  # {limits} {marks}\n{done.stderr}{done.stdout}")
        assert printed == [f"Warning: {expected}"]
        kube.kubectl("delete", "pod", "train", "-n", ns, "--wait=false")
    # What fits is never warned: a whole A100, four of them on one node, two on one NUMA node.
    for limits, marks in (
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "81920"}, {}),
        ({"nvidia.com/gpu": "4"}, {"nvidia.com/use-gputype": "a100"}),
        ({"nvidia.com/gpu": "2"}, {"nvidia.com/numa-bind": "true"}),
    ):
        assert warnings_for(gpu_nodes, ns, limits, marks) == []


def test_other_vendors_are_warned_in_their_own_formats(any_installed: Installed) -> None:
    """A Kunlunxin vXPU node (HAMi's JSON) and a Hygon DCU node (HAMi's older text), registered as their device
    plugins register them: each vendor's Pods are warned by its own filter, what fits is not."""
    kube = any_installed.kube
    xpu, dcu = VENDORS["XPU"], VENDORS["DCU"]
    nodes = {
        "xpu-6": (xpu, [device("XPU", i, "xpu-6", "XPU-P800", 98304) for i in range(4)]),
        "dcu-6": (dcu, [device("DCU", i, "dcu-6", "DCU-K100_AI", 65520, 4) for i in range(2)]),
    }
    try:
        for name, (vendor, devices) in nodes.items():
            body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
            body["metadata"]["annotations"] = {vendor.annotation: vendor.encode(devices)}
            kube.kubectl("create", "-f", "-", stdin=json.dumps(body))
        ns = kube.namespace(f"fits-{uuid.uuid4().hex[:8]}")
        three = ({"kunlunxin.com/vxpu": "3"}, {})
        assert kube.wait_for(lambda: warnings_for(any_installed, ns, *three), 30) == [
            "container train asks 3 Kunlunxin XPUs; HAMi hands them out only by 1, 2, 4, 8"
        ]
        assert warnings_for(any_installed, ns, {"hygon.com/dcunum": "1", "hygon.com/dcumem": "70000"}, {}) == [
            "container train asks 70000 MiB per DCU; the largest registered Hygon DCU has 65520 MiB (node dcu-6)"
        ]
        for limits in ({"kunlunxin.com/vxpu": "4"}, {"hygon.com/dcunum": "2", "hygon.com/dcumem": "65520"}):
            assert warnings_for(any_installed, ns, limits, {}) == []
    finally:
        kube.kubectl("delete", "node", *nodes, "--ignore-not-found", check=False)


def test_a_workload_is_warned_at_apply(gpu_nodes: Installed, tmp_path: Path) -> None:
    kube = gpu_nodes.kube
    ns = kube.namespace(f"fits-{uuid.uuid4().hex[:8]}")
    kube.wait_for(lambda: warnings_for(gpu_nodes, ns, *EXAMPLES[1][:2]), 30)
    template = pod("train", {"nvidia.com/gpu": "8"})
    template["spec"]["containers"][0]["name"] = "train"
    template["spec"]["restartPolicy"] = "Never"
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
        "spec": {"template": {"metadata": {}, "spec": template["spec"]}},
    }  # fmt: skip
    (tmp_path / "job.yaml").write_text(json.dumps(job))
    done = kube.kubectl("apply", "-n", ns, "-f", str(tmp_path / "job.yaml"), check=False)
    assert done.returncode == 0, done.stderr
    print(f"$ kubectl apply -f job.yaml\n{done.stderr}{done.stdout}")
    assert done.stderr.splitlines() == [
        "Warning: template: container train asks 8 NVIDIA GPUs; the most a registered node has is 4 (node gpu-6)"
    ]


def test_node_churn_is_reflected_within_seconds(gpu_nodes: Installed) -> None:
    kube = gpu_nodes.kube
    ns = kube.namespace(f"fits-{uuid.uuid4().hex[:8]}")
    eight = ({"nvidia.com/gpu": "8"}, {})
    kube.wait_for(lambda: warnings_for(gpu_nodes, ns, *eight), 30)
    put_node(gpu_nodes, "gpu-8", a100s("gpu-8", 8))  # a node added
    kube.wait_for(lambda: warnings_for(gpu_nodes, ns, *eight) == [], 10)
    put_node(gpu_nodes, "gpu-8", [*a100s("gpu-8", 7), *a100s("gpu-8", 8, health=False)[7:]])  # one GPU unhealthy
    found = kube.wait_for(lambda: warnings_for(gpu_nodes, ns, *eight), 10)
    assert found == ["container train asks 8 NVIDIA GPUs; the most a registered node has that fit it is 7 (node gpu-8)"]
    put_node(gpu_nodes, "gpu-8", a100s("gpu-8", 8))  # healthy again
    kube.wait_for(lambda: warnings_for(gpu_nodes, ns, *eight) == [], 10)
    kube.kubectl("delete", "node", "gpu-8")  # deleted
    kube.wait_for(lambda: warnings_for(gpu_nodes, ns, *eight), 10)
    # Every registered Node gone: nothing is said any more (the inventory is empty, not "nothing fits").
    kube.kubectl("delete", "node", *NODES)
    kube.wait_for(lambda: warnings_for(gpu_nodes, ns, *eight) == [], 10)


def test_without_rbac_to_list_nodes_it_says_so_once_and_stays_quiet(
    bare_kube: RealKube, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A replica whose account may not list Nodes: one log line (the API server's 403), no inventory, so no
    warning; granted `list`/`watch`, it lists at its next try and the inventory fills."""
    from kubernetes import client

    from app.admission.fits import fitting
    from app.inventory.startup import NodeInventory
    from app.kube.config import load_configuration
    from app.settings import Settings

    kube = bare_kube
    ns = kube.namespace(f"fits-rbac-{uuid.uuid4().hex[:8]}")
    put_node_on(kube, "gpu-rbac-0", a100s("gpu-rbac-0"))
    kubeconfig = kube.account(ns, "no-nodes", tmp_path / "no-nodes.kubeconfig")
    configuration = load_configuration(kubeconfig)
    inventory = NodeInventory(client.ApiClient(configuration), fitting(Settings.from_env({}).devices))
    caplog.set_level(logging.INFO, logger="hami_webhook.inventory")
    inventory.start()
    try:
        time.sleep(5)  # several tries with back-off
        refused = [r.getMessage() for r in caplog.records if "broken" in r.getMessage()]
        assert len(refused) == 1 and "403" in refused[0], refused
        print(refused[0])
        assert inventory.current() is None
        role = f"{ns}-nodes"
        kube.kubectl("create", "clusterrole", role, "--verb=list", "--verb=watch", "--resource=nodes")
        kube.kubectl("create", "clusterrolebinding", role, f"--clusterrole={role}", f"--serviceaccount={ns}:no-nodes")
        try:
            found = kube.wait_for(inventory.current, 60)  # the back-off is capped at 30 s
            assert found.nodes == 1
        finally:
            kube.kubectl("delete", "clusterrolebinding,clusterrole", role)
    finally:
        inventory.stop()
        kube.kubectl("delete", "node", "gpu-rbac-0")


def put_node_on(kube: RealKube, name: str, devices: list[dict[str, Any]]) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {REGISTER: register(devices)}},
    }
    kube.kubectl("create", "-f", "-", stdin=json.dumps(node))
