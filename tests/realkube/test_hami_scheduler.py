"""HAMi's own scheduler, under another name than the chart's default, still binds through the allocation guard.

HAMi's cmd/scheduler (built from its source, testbed/hami.py) and kube-scheduler of the cluster's version,
configured and authorized as HAMi's Helm chart configures them for a release `gpu` in `hami-system`
(tests/realkube/hami_scheduler.py) with `schedulerName: gpu-scheduler`, and our webhook installed by the docs'
overlay that sets that name once, schedule and bind device Pods our webhook admitted onto GPU Nodes registered
as HAMi's NVIDIA device plugin registers them, writing their allocation annotations as the scheduler's
ServiceAccount `gpu-hami-scheduler`; the device plugin's update after Allocate passes as its ServiceAccount; the
very same update by a ServiceAccount of the Pod's namespace, whom RBAC lets patch Pods, is refused by the guard.
The guard names neither account: it admits them because the authorizer lets them patch Nodes. A cluster of its
own (it runs a scheduler: the shared clusters' Pods stay Pending), with our webhook installed as a user installs
it.

On each pinned version (the newest and the oldest the manifests support): the guard's verdicts on HAMi's own
writes depend on the API server's authorizer and CEL library, and kube-scheduler's extender calls to HAMi's
scheduler on its version; a minute of CPU per cluster.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import hami
from testbed.api import GPU, Api, create, pod
from testbed.cluster import RealKube
from testbed.install import Installed, install, token
from testbed.tls import client_context
from testbed.vendors import VENDORS, generated_nodes, generated_pod
from tests.manifests.conftest import overlay_file, write_overlay
from tests.realkube.fixtures import NEWEST, OLDEST, Clusters
from tests.realkube.hami_scheduler import (
    BIND_PHASE,
    DEVICE_PLUGIN,
    HAMI_NAMESPACE,
    HANDSHAKE,
    NODE_LOCK,
    TO_ALLOCATE,
    Scheduling,
    install_chart,
    patch,
    register_node,
    run_scheduler,
    updates_after_allocate,
)

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

Obj = dict[str, Any]
NODES = ("gpu-node-1", "gpu-node-2")
DIFFERENTIAL_CLUSTERS, PODS_PER_CLUSTER = 8, 45  # the suite's differential run: 360 Pods, all ten vendors
DOCUMENTED = ("several device containers", "another vendor's devices (not checked)", "Ascend hami-core mode")
"""Why the check may say nothing of a Pod HAMi leaves Pending (docs/rules.md#fits-nowhere): nothing else."""
PREFIXES = ("nvidia.com/", *(f"{vendor.asks[0][0].split('/')[0]}/" for vendor in VENDORS.values() if vendor.asks))
"""The resources of the vendors generated here, all of them checked."""
PODS = 3
# What HAMi's scheduler writes on a Pod it binds (pkg/util, pkg/device/nvidia): its /filter the node, the time
# and the devices, its /bind the bind phase and time.
NAME = "gpu-scheduler"  # HAMi's chart's schedulerName here, and the overlay's (docs/operations.md)
OVERLAY = "hami-gpu-scheduler"
WEBHOOK_CONFIGURATION = "hami-webhook-pods"
FILTER_WRITES = ("hami.io/vgpu-node", "hami.io/vgpu-time", TO_ALLOCATE, "hami.io/vgpu-devices-allocated")
WRITES = (*FILTER_WRITES, BIND_PHASE, "hami.io/bind-time")
GUARD = "ValidatingAdmissionPolicy 'hami-webhook-allocation-guard'"


@pytest.fixture(scope="module", params=sorted({NEWEST, OLDEST}, reverse=True))
def installed(
    request: pytest.FixtureRequest, clusters: Clusters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    """A cluster of its own per version with our webhook installed (and the guard with it) by the docs' overlay
    for HAMi's scheduler under another name (with the floor where MutatingAdmissionPolicy is served), stopped
    after its test: a scheduler's cluster is never shared, and keeping it would hold its memory for the rest of
    the run."""
    kube = clusters.own(request.param, "hami-scheduler")
    overlay = write_overlay(tmp_path_factory.mktemp("overlay") / OVERLAY, OVERLAY)
    overlay_file(overlay, OVERLAY, "scheduler-name.yaml")
    _enable_ascend_and_iluvatar(overlay)
    if kube.minor < 36:  # no floor before 1.36: the overlay leaves it out, as its comment says
        kustomization = overlay / "kustomization.yaml"
        kept = [line for line in kustomization.read_text().splitlines() if "components/floor" not in line]
        kustomization.write_text("\n".join(kept) + "\n")
    done = install(kube, tmp_path_factory.mktemp("hami-scheduler-webhook"), overlay)
    try:
        yield done
    finally:
        done.webhook.stop()
        clusters.discard(kube)


HAMI_VENDORS = {"devices.ascend.enabled": "true", "devices.iluvatar.enabled": "true"}
"""HAMi's chart values that switch on Ascend and Iluvatar (its scheduler's --enable-ascend, --enable-iluvatar), as
our webhook's HAMI_ENABLE_ASCEND and HAMI_ENABLE_ILUVATAR do: the differential covers them too."""


def _enable_ascend_and_iluvatar(overlay: Path) -> None:
    """The overlay's Deployment with HAMI_ENABLE_ASCEND and HAMI_ENABLE_ILUVATAR, a strategic-merge patch."""
    env = [{"name": f"HAMI_ENABLE_{name}", "value": "true"} for name in ("ASCEND", "ILUVATAR")]
    patch = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "hami-webhook", "namespace": HAMI_NAMESPACE},
        "spec": {"template": {"spec": {"containers": [{"name": "webhook", "env": env}]}}},
    }  # fmt: skip
    (overlay / "vendors.yaml").write_text(json.dumps(patch))
    kustomization = overlay / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text() + "patches:\n  - path: vendors.yaml\n")


@pytest.fixture(scope="module")
def scheduler(
    installed: Installed, hami_reference: hami.Reference, clusters: Clusters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scheduling]:
    """HAMi's chart installed and its scheduler running in the module's cluster, for every test of the module."""
    kube = installed.kube
    work = tmp_path_factory.mktemp("hami-scheduler")
    kube_scheduler = clusters.scheduler(kube.version.lstrip("v"))
    port = install_chart(kube, hami_reference, work, NAME, **HAMI_VENDORS)
    plugin_token = token(kube, DEVICE_PLUGIN, HAMI_NAMESPACE)
    device_plugin = kube.kubeconfig_for(plugin_token, work / "device-plugin.kubeconfig")
    with run_scheduler(kube, hami_reference, kube_scheduler, port, work, NAME) as running:
        yield Scheduling(running, port, device_plugin)


def test_fits_nowhere_never_warns_a_pod_hamis_scheduler_places(installed: Installed, scheduler: Scheduling) -> None:
    """The differential run (docs/rules.md#fits-nowhere): generated Nodes of NVIDIA, Hygon DCU, AMD, Biren, Vastai,
    Kunlunxin vXPU, MetaX sGPU, Enflame DRS, Iluvatar and Ascend devices (one vendor each, in its own register
    format) registered in the cluster, generated
    Pods created (server-side dry run) through the API server and our webhook, which warns or not from its inventory
    of the Nodes; each Pod as the webhook mutated it then given to HAMi's scheduler with those Nodes, empty. No Pod
    HAMi places may have been warned; a Pod warned must be one HAMi leaves Pending. HAMI_FITS_DIFFERENTIAL=CLUSTERS
    sets how many clusters (each of 1-3 nodes, PODS_PER_CLUSTER Pods) by hand; the suite's run is small."""
    kube = installed.kube
    clusters = int(os.environ.get("HAMI_FITS_DIFFERENTIAL", str(DIFFERENTIAL_CLUSTERS)))
    rng = random.Random(int(os.environ.get("HAMI_FITS_SEED", "54")))
    ns = kube.namespace(f"fits-diff-{uuid.uuid4().hex[:8]}")
    api = Api(kube)
    tally: Counter[str] = Counter()
    by_vendor: Counter[str] = Counter()
    false_alarms: list[str] = []
    misses: Counter[str] = Counter()
    made = 0  # nodes generated so far: the vendors take turns
    try:
        for k in range(clusters):
            generated = generated_nodes(rng, f"fit-{k}", rng.randint(1, 3), made)
            made += len(generated)
            for name, vendor, devices in generated:
                node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
                node["metadata"]["annotations"] = {VENDORS[vendor].annotation: VENDORS[vendor].encode(devices)}
                status, body = api.call("POST", "/api/v1/nodes", json.dumps(node).encode())
                assert status == 201, body
            count = len(generated)
            kube.wait_for(lambda n=count: _inventory_nodes(installed) == n, 30)
            names = {name for name, _, _ in generated}
            nodes = [n for n in kube.read("/api/v1/nodes")["items"] if n["metadata"]["name"] in names]
            ids = [d["id"] for _, _, devices in generated for d in devices]
            present = tuple(sorted({vendor for _, vendor, _ in generated}))
            for _ in range(PODS_PER_CLUSTER):
                manifest = generated_pod(rng, ids, present)
                path = f"/api/v1/namespaces/{ns}/pods?dryRun=All"
                status, body, warnings = api.call_warned("POST", path, json.dumps(manifest).encode())
                if status != 201:  # refused by the webhook's own rules (a percentage above 100): not a placement
                    tally["refused"] += 1
                    continue
                admitted = json.loads(body)
                warned = [w for w in warnings if " asks " in w and w.startswith("container ")]
                placed, reasons = scheduler.filter(admitted, nodes)
                outcome = f"{'warned' if warned else 'quiet'}, {'placed' if placed else 'pending'}"
                tally[outcome] += 1
                by_vendor[f"{_vendor(manifest)}: {outcome}"] += 1
                if warned and placed:
                    false_alarms.append(f"{json.dumps(manifest)}\n  on {json.dumps(generated)}\n  {warned}")
                elif not warned and not placed:  # said nothing of a Pod HAMi leaves Pending: why HAMi did
                    misses[_why_pending(admitted, reasons)] += 1
            for name in names:
                api.call("DELETE", f"/api/v1/nodes/{name}")
            kube.wait_for(lambda: _inventory_nodes(installed) == 0, 30)
    finally:
        api.close()
    print(f"differential: {clusters} clusters x {PODS_PER_CLUSTER} Pods: {dict(sorted(tally.items()))}")
    print(f"by vendor: {dict(sorted(by_vendor.items()))}")
    print(f"quiet and pending, by what HAMi said: {dict(misses.most_common())}")
    assert not false_alarms, "\n".join(false_alarms[:5])
    assert set(misses) <= set(DOCUMENTED), misses  # every other difference is a decision docs/rules.md states
    assert tally["warned, pending"] and tally["quiet, placed"], tally  # both answers were given: the run can fail


def _why_pending(pod: Obj, reasons: dict[str, str]) -> str:
    """A Pod HAMi leaves Pending that the check said nothing of, by the documented decision that explains it: a Pod
    of several device containers (checked one by one), another vendor's devices (not among those checked here), an
    Ascend Pod in hami-core mode (the node's switch is not read), or else HAMi's reasons on its nodes (words only,
    no counts), which would be a bug to look at."""
    containers = (*pod["spec"].get("initContainers", []), *pod["spec"]["containers"])
    asking = [c for c in containers if (c.get("resources") or {}).get("limits")]
    if len(asking) > 1:
        return "several device containers"
    names = {name for c in asking for name in c["resources"]["limits"]}
    if names and not any(name.startswith(PREFIXES) for name in names):
        return "another vendor's devices (not checked)"
    hami_core = pod["metadata"].get("annotations", {}).get("huawei.com/vnpu-mode") == "hami-core"
    if hami_core and any(name.startswith("huawei.com/") for name in names):
        return "Ascend hami-core mode"  # refused on a node without hami-vnpu-core, which the check does not read
    words = {part.split(" ", 1)[-1] for reason in reasons.values() for part in reason.split(", ")}
    return ", ".join(sorted(words))


def _vendor(pod: Obj) -> str:
    """The vendor a generated Pod asks for, by its first container's first resource's domain."""
    limits = pod["spec"]["containers"][0]["resources"].get("limits", {})
    return next(iter(limits), "none").split("/")[0]


def _inventory_nodes(installed: Installed) -> int:
    """How many Nodes the webhook's inventory holds (its /readyz), of every vendor (each node has one here)."""
    context = client_context(installed.webhook.ca)
    context.check_hostname = False  # the Service's name is the certificate's; the webhook listens on its ClusterIP
    connection = http.client.HTTPSConnection(installed.webhook.host, installed.webhook.port, context=context, timeout=5)
    try:
        connection.request("GET", "/readyz")
        ready = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    return sum(int(count) for count in ready["inventory"].get("nodes", {}).values())


def test_hami_scheduler_binds_through_the_guard(installed: Installed, scheduler: Scheduling, tmp_path: Path) -> None:
    kube = installed.kube
    running, device_plugin = scheduler.running, scheduler.device_plugin
    gpus = {name: register_node(kube, name, device_plugin) for name in NODES}
    ns = kube.namespace(f"hami-sched-{uuid.uuid4().hex[:8]}")
    # A ServiceAccount whom RBAC lets read and patch Pods (not Nodes): only the guard can refuse what follows.
    user = kube.account(ns, "someone", tmp_path / "user.kubeconfig", "--verb=get", "--verb=patch", "--resource=pods")
    # HAMi's scheduler registers each node with a handshake it writes itself.
    for name in NODES:
        handshake = kube.wait_for(lambda n=name: _annotations(kube, f"/api/v1/nodes/{n}").get(HANDSHAKE), 60)
        print(f"{name}: {HANDSHAKE}={handshake}")
    for i in range(PODS):
        name = f"gpu-{i}"
        code, created, err = create(installed, ns, pod(name, GPU))
        assert code == 0, err
        assert created["spec"]["schedulerName"] == NAME  # our webhook's doing, by the overlay's one name
        try:
            bound = kube.wait_for(lambda n=name: _bound(kube, ns, n), 60)
        except TimeoutError:
            raise AssertionError(f"{name} not bound:\n{running.logs()}") from None
        node = bound["spec"]["nodeName"]
        _check_allocation(bound, gpus[node][0]["id"])
        locked = kube.read(f"/api/v1/nodes/{node}")
        assert NODE_LOCK in locked["metadata"]["annotations"]  # HAMi's /bind took the node lock
        print(f"{name} bound to {node}, lock {locked['metadata']['annotations'][NODE_LOCK]}, HAMi wrote:")
        print(json.dumps({k: bound["metadata"]["annotations"][k] for k in WRITES}, indent=1))
        erased, success, unlock = updates_after_allocate(bound, locked)
        # The device plugin's update after Allocate, by the user: each write refused by the guard.
        for body, key in ((erased, TO_ALLOCATE), (success, BIND_PHASE)):
            refused = patch(kube, user, "pod", name, body, ns)
            assert refused.returncode != 0, f"a user changed {key}"
            assert GUARD in refused.stderr and key in refused.stderr, refused.stderr
            print(f"user {key}: {refused.stderr.strip()}")
        # By the device plugin's ServiceAccount: allowed, and the node lock released for the next Pod.
        for body in (erased, success):
            done = patch(kube, device_plugin, "pod", name, body, ns)
            assert done.returncode == 0, done.stderr
        done = patch(kube, device_plugin, "node", node, unlock)
        assert done.returncode == 0, done.stderr
        after = _annotations(kube, f"/api/v1/namespaces/{ns}/pods/{name}")
        assert after[BIND_PHASE] == "success" and after[TO_ALLOCATE] == ";", after
        assert NODE_LOCK not in _annotations(kube, f"/api/v1/nodes/{node}")
        print(f"device plugin: {BIND_PHASE}={after[BIND_PHASE]}, {TO_ALLOCATE}={after[TO_ALLOCATE]!r}, unlocked")
    assert "HAMI_SCHEDULER_NAME is" not in installed.webhook.log.read_text(), "the policies hold the webhook's name"
    if kube.minor >= 36:
        _the_floor_routes_to(installed, ns, NAME)


def _the_floor_routes_to(installed: Installed, ns: str, name: str) -> None:
    """With the webhook never called (a matchCondition always false, as the standby component adds), a device
    Pod on default-scheduler is routed by the floor alone: to the overlay's name, unmarked."""
    kube = installed.kube
    never = [{"op": "add", "path": "/webhooks/0/matchConditions/-", "value": {"name": "off", "expression": "false"}}]
    kube.kubectl("patch", "mutatingwebhookconfiguration", WEBHOOK_CONFIGURATION, "--type=json", "-p", json.dumps(never))

    def routed_by_floor() -> Obj | None:
        code, created, _ = create(installed, ns, pod("floor-", GPU), "--dry-run=server")
        return created if code == 0 and "hami.io/gpu-type" not in created["metadata"].get("annotations", {}) else None

    created = kube.wait_for(routed_by_floor, 30)  # until the API server has loaded the patched configuration
    assert created["spec"]["schedulerName"] == name, created["spec"]
    print(f"floor: a device Pod on default-scheduler stored for {created['spec']['schedulerName']}, unmarked")


def _check_allocation(bound: Obj, device: str) -> None:
    """What HAMi's /filter and /bind wrote on a bound Pod: its node, that node's GPU with the memory and cores
    the Pod asked for (GPU), and bind-phase `allocating` until the device plugin has allocated it."""
    written = bound["metadata"]["annotations"]
    assert set(WRITES) <= set(written), written
    assert written["hami.io/vgpu-node"] == bound["spec"]["nodeName"]
    assert written[BIND_PHASE] == "allocating"
    assert written[TO_ALLOCATE] == written["hami.io/vgpu-devices-allocated"] == f"{device},NVIDIA,4000,30:;"


def _bound(kube: RealKube, ns: str, name: str) -> Obj | None:
    found = kube.read(f"/api/v1/namespaces/{ns}/pods/{name}")
    return found if found["spec"].get("nodeName") else None


def _annotations(kube: RealKube, path: str) -> dict[str, str]:
    return kube.read(path)["metadata"].get("annotations") or {}
