"""``hami-webhook quota`` against the real kube-apiserver (``bare_kube``): the figures of a running port, read with
the caller's kubeconfig. Its bad input and the shipped viewer RBAC are tried on each pinned version in
tests/realkube/test_quota_view.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.admission.edit import PodEdit
from testbed.pods import container, pod
from testbed.polling import eventually
from tests.app.quota.conftest import GPU, MEM, Cluster

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


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


def test_the_command_shows_what_the_port_counts(cluster: Cluster, start_quota) -> None:
    """Pods of two shapes, one deleted, and a hold with no Pod: the JSON equals what the test works out itself."""
    cluster.quota({f"limits.{MEM}": "20000", f"limits.{GPU}": "8"})
    cluster.quota({f"limits.{MEM}": "30000"}, name="roomy")
    port, _ = start_quota()
    for name, devices, memory in (("a", 1, 1000), ("b", 2, 1500), ("c", 1, 3000)):
        cluster.create_pod(gpu_pod(name, devices, memory))
    cluster.delete_pod("c")
    hold = PodEdit(gpu_pod("phantom", 1, 2500))  # admitted, never created: its room is held, no Pod takes it
    assert port.admit(cluster.ns, hold, uid="phantom", dry_run=False).reservation.startswith("phantom.")  # sealed
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
        "NAMESPACE", "RESOURCE", "LIMIT", "USED", "HELD", "FREE", "PODS", "RESOURCEQUOTA", "OLDEST-HOLD", "EXPIRES-IN",
        "HELD-FOR-GANGS", "GANGS",
    ]  # fmt: skip
    mine_lines = [line.split() for line in lines if line.startswith(cluster.ns)]
    assert [(row[1], row[7], row[8]) for row in mine_lines] == [(GPU, "gpu", "phantom"), (MEM, "gpu", "phantom")]
