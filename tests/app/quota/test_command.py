"""``hami-webhook quota`` against the real kube-apiserver (``bare_kube``): the figures of a running port, read with
the caller's kubeconfig and the shipped hami-webhook-quota-viewer RBAC; every bad input a one-line error, exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.admission.edit import PodEdit
from app.quota.core.encoding import LEDGER_ANNOTATION
from testbed import ROOT
from testbed.pods import container, pod
from testbed.polling import eventually
from tests.app.quota.conftest import GPU, MEM, Cluster

VIEWER = ROOT / "manifests" / "base" / "rbac" / "quota-viewer.yaml"


def gpu_pod(name: str, devices: int, memory: int) -> dict[str, Any]:
    obj = pod(container(limits={GPU: str(devices), MEM: str(memory)}))
    obj["metadata"] = {"name": name}
    return obj


def quota(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: its own process, the installed console script."""
    program = str(Path(sys.executable).with_name("hami-webhook"))
    return subprocess.run(
        [program, "quota", "--kubeconfig", kubeconfig, *args], capture_output=True, text=True, timeout=60, check=False
    )


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1 and done.stdout == "", (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr.strip()


def test_the_command_shows_what_the_port_counts(cluster: Cluster, start_quota) -> None:
    """Pods of two shapes, one deleted, and a hold with no Pod: the JSON equals what the test works out itself."""
    cluster.quota({f"limits.{MEM}": "20000", f"limits.{GPU}": "8"})
    cluster.quota({f"limits.{MEM}": "30000"}, name="roomy")
    port, _ = start_quota()
    for name, devices, memory in (("a", 1, 1000), ("b", 2, 1500), ("c", 1, 3000)):
        cluster.create_pod(gpu_pod(name, devices, memory))
    cluster.delete_pod("c")
    hold = PodEdit(gpu_pod("phantom", 1, 2500))  # admitted, never created: its room is held, no Pod takes it
    assert port.admit(cluster.ns, hold, uid="phantom", dry_run=False).reservation == "phantom"
    used, held = {MEM: 1000 + 2 * 1500, GPU: 3}, {MEM: 2500, GPU: 1}

    def shown() -> dict[str, Any]:
        done = quota(cluster.kubeconfig, "-n", cluster.ns, "--webhook-namespace", cluster.home, "-o", "json")
        assert done.returncode == 0, done.stderr
        return {i["resource"]: i for i in json.loads(done.stdout)["items"]}

    items = eventually(lambda: (found := shown())[MEM]["used"] == used[MEM] and found, 20, what="Pods listed")
    fields = ("limit", "resourceQuota", "used", "held", "free", "pods")
    assert {r: tuple(i[f] for f in fields) for r, i in items.items()} == {
        MEM: (20000, "gpu", used[MEM], held[MEM], 20000 - used[MEM] - held[MEM], 2),
        GPU: (8, "gpu", used[GPU], held[GPU], 8 - used[GPU] - held[GPU], 2),
    }
    assert items[MEM]["oldestHold"]["id"] == "phantom"
    # The port's own tables say the same (the gauges are published from them).
    (mine,) = [s for s in port.feed.standings(time.monotonic()) if s.namespace == cluster.ns]
    assert {f.resource: (f.limit, f.used, f.held) for f in mine.figures} == {
        r: (i["limit"], i["used"], i["held"]) for r, i in items.items()
    }
    wide = quota(cluster.kubeconfig, "-A", "--webhook-namespace", cluster.home, "-o", "wide")
    header, *lines = wide.stdout.splitlines()
    assert header.split() == [
        "NAMESPACE", "RESOURCE", "LIMIT", "USED", "HELD", "FREE", "PODS", "RESOURCEQUOTA", "OLDEST-HOLD", "EXPIRES-IN"
    ]  # fmt: skip
    mine_lines = [line.split() for line in lines if line.startswith(cluster.ns)]
    assert [(row[1], row[7], row[8]) for row in mine_lines] == [(GPU, "gpu", "phantom"), (MEM, "gpu", "phantom")]


@pytest.fixture
def viewer(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A ServiceAccount bound to the shipped ClusterRole only (its Role in the ledgers' namespace not bound yet):
    its kubeconfig, and the ClusterRoleBinding to delete."""
    kube, name = cluster.kube, f"viewer-{cluster.home}"
    cluster_role, role = list(yaml.safe_load_all(VIEWER.read_text()))
    cluster_role["metadata"]["name"] = name
    role["metadata"] |= {"name": name, "namespace": cluster.home}
    kube.kubectl(
        "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [cluster_role, role]})
    )
    kube.kubectl("create", "serviceaccount", "viewer", "-n", cluster.home)
    user = f"system:serviceaccount:{cluster.home}:viewer"
    kube.kubectl(
        "create", "clusterrolebinding", name, f"--clusterrole={name}", f"--serviceaccount={cluster.home}:viewer"
    )
    kube.wait_for(
        lambda: kube.kubectl("auth", "can-i", "list", "pods", f"--as={user}", check=False).returncode == 0, 30
    )
    token = kube.kubectl("create", "token", "viewer", "-n", cluster.home).stdout.strip()
    try:
        yield kube.kubeconfig_for(token, tmp_path / "viewer.kubeconfig"), name
    finally:
        kube.kubectl("delete", "clusterrolebinding,clusterrole", name, check=False)


def test_bad_input_is_one_line_and_exit_1(cluster: Cluster, viewer: tuple[str, str], tmp_path: Path) -> None:
    kubeconfig, role = viewer
    home = ("--webhook-namespace", cluster.home)
    cluster.quota({"cpu": "4"})
    assert one_line_error(quota(kubeconfig, "-n", "no-such-namespace", *home)) == (
        'error: namespaces "no-such-namespace" not found'
    )
    assert one_line_error(quota(kubeconfig, "-n", cluster.ns, *home)) == (
        f"error: namespace {cluster.ns} has no device quota (no ResourceQuota limits "
        + ", ".join(sorted(n for n in quota_names()))
        + ")"
    )
    for name, text in (("absent", None), ("garbage", "clusters: [oops"), ("not-a-kubeconfig", "just text")):
        if text is not None:
            (tmp_path / name).write_text(text)
        said = one_line_error(quota(str(tmp_path / name), "-A"))
        assert said.startswith(f"error: cannot load the kubeconfig ({tmp_path / name}): "), said

    cluster.quota({f"limits.{MEM}": "10000"})
    forbidden = one_line_error(quota(kubeconfig, "-n", cluster.ns, *home))
    user = f"system:serviceaccount:{cluster.home}:viewer"
    assert forbidden.startswith(
        f"error: forbidden: cannot get leases.coordination.k8s.io hami-quota-{cluster.ns} in namespace {cluster.home}: "
    ), forbidden
    assert f'User "{user}" cannot get resource "leases"' in forbidden
    listing = one_line_error(quota(kubeconfig, "-A", *home))
    assert f"cannot list leases.coordination.k8s.io in namespace {cluster.home}" in listing

    kube = cluster.kube
    kube.kubectl(
        "create",
        "rolebinding",
        "viewer",
        "-n",
        cluster.home,
        f"--role={role}",
        f"--serviceaccount={cluster.home}:viewer",
    )
    can = ("auth", "can-i", "get", "leases.coordination.k8s.io", "-n", cluster.home, f"--as={user}")
    kube.wait_for(lambda: kube.kubectl(*can, check=False).returncode == 0, 30)
    fine = quota(kubeconfig, "-n", cluster.ns, *home)
    assert fine.returncode == 0 and fine.stdout.split()[:6] == ["RESOURCE", "LIMIT", "USED", "HELD", "FREE", "PODS"]

    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": f"hami-quota-{cluster.ns}", "namespace": cluster.home, "annotations": {}},
    }
    for text, says in (("{not json", "is not JSON"), ('{"x": {"expires": "soon"}}', "entry 'x' lacks")):
        lease["metadata"]["annotations"][LEDGER_ANNOTATION] = text
        kube.kubectl("apply", "-f", "-", stdin=json.dumps(lease))
        broken = one_line_error(quota(kubeconfig, "-n", cluster.ns, *home))
        where = f"{cluster.home}/hami-quota-{cluster.ns}"
        assert broken.startswith(f"error: quota ledger {where} is malformed: annotation {LEDGER_ANNOTATION}"), broken
        assert says in broken, broken


def quota_names() -> set[str]:
    from app.settings import Settings

    names = [d.quota_names for d in Settings.from_env({}).devices]
    return {n for q in names for n in (q.memory, q.cores, q.count) if n}
