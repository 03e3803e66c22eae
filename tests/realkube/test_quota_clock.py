"""Namespace device quota through the real API server with one of three replicas' wall clock 90 s behind, then
jumping 90 s ahead (libfaketime): never more Pods stored than the room, and the free room admitted again after a
TTL (docs/rules.md#no-clock-but-its-own)."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.api import create_at_once, pod
from testbed.install import Installed, WebhookServer
from testbed.ports import free_port
from testbed.replicas import Replicas
from tests.realkube.fixtures import CI
from tests.realkube.quota_replicas import (
    MEM,
    ONE_GPU,
    SHORT_TTL,
    explained,
    quota_namespace,
    refusals,
    replicas_of,
    stored,
)

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

SKEW_ROOM, SKEW_PODS = 100, 300
SKEW_BURSTS, SKEW_TRIES = 2, 6  # bursts on each side of the jump: at least, at most
SKEWS = ("-90s", "+90s")  # replica 0's wall clock: behind, then jumping ahead (far beyond the TTL either way)
FREED = 10  # Pods deleted from each namespace after the bursts: the free room admitted again
FAKETIME_CACHE = 1  # seconds libfaketime keeps the offset it read from its file


def faketime() -> str:
    """libfaketime's path, installed by scripts/install-faketime.sh when missing (as root): skipped where it cannot
    be had, except under CI=true, where the test fails instead."""
    script = ROOT / "scripts" / "install-faketime.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        (pytest.fail if CI else pytest.skip)(f"libfaketime cannot be had ({script}): {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass
class Skewed:
    replicas: Replicas
    offset: Path  # libfaketime's offset of replica 0's wall clock, read again every second
    metrics: int  # replica 0's /metrics port

    def jump(self, offset: str) -> None:
        """Move replica 0's wall clock to ``offset`` from the true time, and wait until it has read it."""
        self.offset.write_text(offset)
        time.sleep(FAKETIME_CACHE + 0.5)


@pytest.fixture
def skewed(installed: Installed, webhook: WebhookServer, tmp_path: Path) -> Iterator[Skewed]:
    """Three replicas with a short reservation TTL; replica 0's wall clock runs SKEWS[0] off, its monotonic clock
    true (tests/realkube/faketime/sitecustomize.py says why it is loaded there)."""
    port = free_port()
    offset = tmp_path / "faketime"
    offset.write_text(SKEWS[0])
    shim = str(Path(__file__).with_name("faketime"))
    own = {
        "LD_PRELOAD": faketime(),
        "FAKETIME_TIMESTAMP_FILE": str(offset),
        "FAKETIME_CACHE_DURATION": str(FAKETIME_CACHE),
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [shim, os.environ.get("PYTHONPATH")])),
        "HAMI_METRICS_BIND": f"127.0.0.1:{port}",
    }
    env = {"HAMI_QUOTA_RESERVATION_TTL": str(SHORT_TTL)}
    # faults: on a loaded machine a replica may lose the API server for seconds mid-burst and refuse, as designed
    for replicas in replicas_of(installed, env, faults=True, own_env=[own]):
        yield Skewed(replicas, offset, port)


def scraped(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def admitted_by(port: int) -> int:
    """Pods a replica admitted (patched) so far, by its /metrics."""
    text = scraped(port)
    lines = [line for line in text.splitlines() if line.startswith('hami_webhook_decisions_total{outcome="patched"')]
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in lines)


def test_one_replica_with_its_clock_off(installed: Installed, skewed: Skewed) -> None:
    """Replica 0's wall clock 90 s behind, then jumping to 90 s ahead with its tables full (far beyond the TTL
    either way): bursts of SKEW_PODS creates on each side of the jump, each into room for SKEW_ROOM, never store
    more than the room, and the skewed replica admits Pods on each side of the jump (else this proves nothing).
    SKEW_BURSTS bursts a side, more (up to SKEW_TRIES) until it has: on a loaded machine the two true replicas
    often win every compare-and-swap of a burst and fill the room while it re-reads (on CI, 3 bursts of 4 left it
    only refusals at the limit, its ledger writes all conflicts), a race its clock has no part in. After the bursts,
    FREED Pods deleted and a TTL waited out, exactly the free room is admitted again."""
    kube = installed.kube
    ready = [quota_namespace(kube, SKEW_ROOM, f"limits.{MEM}") for _ in range(SKEW_TRIES * len(SKEWS))]
    namespaces: list[str] = []  # those a burst went into
    try:
        # A replica refuses (explained) in a quota'd namespace whose Pods it has not listed yet: the burst starts
        # once the skewed one publishes every namespace's quota gauges (it lists them when their quota appears).
        kube.wait_for(lambda: all(f'namespace="{ns}"' in scraped(skewed.metrics) for ns in ready), 60)
        counts, by_skewed, others = [], [], []
        for side, skew in enumerate(SKEWS):
            if side:
                skewed.jump(skew)
            admitted: list[int] = []
            for ns in ready[side * SKEW_TRIES : (side + 1) * SKEW_TRIES]:
                if len(admitted) >= SKEW_BURSTS and any(admitted):
                    break
                namespaces.append(ns)
                before = admitted_by(skewed.metrics)
                _, calls = create_at_once(kube, ns, pod("skew-", ONE_GPU), SKEW_PODS, 32)
                counts.append(len(stored(kube, ns)))
                admitted.append(admitted_by(skewed.metrics) - before)
                others += [c.refusal for c in calls if c.status != 201 and not explained(c)]
            by_skewed.append(admitted)
        print(f"\nclock {' then '.join(SKEWS)}: stored {counts} (room {SKEW_ROOM}), the skewed replica admitted "
              f"{by_skewed}")  # fmt: skip
        assert max(counts) <= SKEW_ROOM and others == [], (counts, others[:3])  # every refusal says why
        assert all(any(admitted) for admitted in by_skewed), by_skewed
        burst_end = time.monotonic()
        for ns in namespaces:
            names = [p["metadata"]["name"] for p in stored(kube, ns)[:FREED]]
            kube.kubectl("delete", "pods", "-n", ns, "--wait=false", *names)
        time.sleep(max(burst_end + SHORT_TTL + 1 - time.monotonic(), 0))
        for ns in namespaces:
            free = SKEW_ROOM - len(stored(kube, ns))
            _, calls = create_at_once(kube, ns, pod("after-", ONE_GPU), free + 5, 8)
            assert refusals(calls) == []
            assert sum(c.status == 201 for c in calls) == free and len(stored(kube, ns)) == SKEW_ROOM, free
    finally:
        for ns in ready:
            kube.kubectl("delete", "namespace", "--wait=false", ns)
