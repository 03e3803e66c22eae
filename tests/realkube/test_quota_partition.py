"""Namespace device quota through the real API server with one of three replicas cut off from it mid-burst (a
black hole: nothing copied, nothing closed), behind a Service whose endpoints follow the manifests'
readinessProbe: nothing over-admitted, every refusal before the webhook timeout, the cut replica out of the
endpoints in seconds, and all the room back within the reservation TTL after the heal."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from app.quota.core.encoding import LEDGER_PREFIX
from app.quota.core.gang import KUEUE_LABEL, KUEUE_TOTAL
from testbed.api import Created, create_at_once, pod
from testbed.install import Installed, WebhookServer
from testbed.replicas import Replicas
from tests.realkube.faults import FaultyProxy
from tests.realkube.quota_replicas import (
    FAULT_PODS,
    FAULT_ROOM,
    MEM,
    ONE_GPU,
    SHORT_TTL,
    explained,
    quota_namespace,
    refusals,
    replicas_of,
    stored,
)
from tests.realkube.service import ReadyService

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

WEBHOOK_TIMEOUT = 10  # the MutatingWebhookConfiguration's timeoutSeconds
LEAVES_WITHIN = 15  # seconds from the cut until the replica is out of the endpoints (the readinessProbe's reach)
PARTITION = SHORT_TTL + 2  # seconds the replica stays cut off: longer than a hold, so all it held has run out
BURST_PODS, BURST_CLIENTS = 90, 16


@dataclass
class Partition:
    replicas: Replicas
    proxies: list[FaultyProxy]  # each replica's only way to the API server
    service: ReadyService


@pytest.fixture
def partitionable(installed: Installed, webhook: WebhookServer, tmp_path: Path) -> Iterator[Partition]:
    """Three replicas, each talking to kube-apiserver through its own proxy that can black-hole it, behind a
    Service whose endpoints follow the manifests' readinessProbe; a short reservation TTL."""
    token = yaml.safe_load(Path(installed.webhook_kubeconfig).read_text())["users"][0]["user"]["token"]
    proxies = [FaultyProxy(installed.kube).start() for _ in range(3)]
    configs = [p.kubeconfig(tmp_path / f"replica-{i}.kubeconfig", token) for i, p in enumerate(proxies)]
    env = {"HAMI_QUOTA_RESERVATION_TTL": str(SHORT_TTL)}
    service: ReadyService | None = None
    try:
        for replicas in replicas_of(installed, env, faults=True, kubeconfigs=configs, forwarder=False):
            service = ReadyService((installed.cluster_ip, 443), replicas.servers).start()
            yield Partition(replicas, proxies, service)
    finally:
        if service is not None:
            service.stop()
        for proxy in proxies:
            proxy.stop()


def answered_in_time(calls: list[Created]) -> None:
    """Every refusal says why, and none waited out kube-apiserver's webhook timeout."""
    assert all(explained(c) for c in calls if c.status != 201), [c.refusal for c in calls if not explained(c)]
    slowest = max(c.ended - c.started for c in calls)
    assert slowest < WEBHOOK_TIMEOUT - 1, slowest
    assert not [c for c in calls if "deadline" in str(c.refusal.get("message"))]


@pytest.mark.parametrize("heal", ["resumed", "reset"])
def test_a_replica_cut_off_mid_burst(installed: Installed, partitionable: Partition, heal: str) -> None:
    """Replica 0 loses the API server (a black hole: nothing copied, nothing closed) a third into a burst into
    room for FAULT_ROOM: nothing over-admitted, every refusal says why and comes before the webhook timeout; the
    replica leaves the endpoints within LEAVES_WITHIN s, and a burst then admits every Pod it has room for, none
    refused (the cut replica answers none of it) and none waiting out the timeout; healed after PARTITION s (held
    connections resumed, or reset), all the room is usable again within the reservation TTL. How fast the others
    admit meanwhile is the benchmark's to say (bench/quota.py), not a timed assertion's."""
    kube, service = installed.kube, partitionable.service
    spare = quota_namespace(kube, BURST_PODS, f"limits.{MEM}")
    ns = quota_namespace(kube, FAULT_ROOM, f"limits.{MEM}")
    try:
        cut_at: list[float] = []

        def cut() -> None:
            partitionable.proxies[0].black_hole()
            cut_at.append(time.monotonic())

        calls: list[Created] = []
        burst = threading.Thread(target=create_at_once, args=(kube, ns, pod("cut-", ONE_GPU), FAULT_PODS, 16, calls))
        burst.start()
        kube.wait_for(
            lambda: sum(c.status == 201 for c in calls) >= FAULT_ROOM // 3 or not burst.is_alive(), 60, interval=0.005
        )
        cut()
        burst.join(120)
        answered_in_time(calls)
        assert len(stored(kube, ns)) <= FAULT_ROOM
        refused = Counter(explained(c) for c in calls if c.status != 201)
        sample = next((c.refusal["message"] for c in calls if c.status != 201 and not c.quota_denial), "")
        left = kube.wait_for(lambda: service.left_at(0, cut_at[0]), LEAVES_WITHIN + 5, interval=0.2)
        assert left - cut_at[0] <= LEAVES_WITHIN, service.changes
        started, during = create_at_once(kube, spare, pod("during-", ONE_GPU), BURST_PODS, BURST_CLIENTS)
        answered_in_time(during)
        assert refusals(during) == [] and len(stored(kube, spare)) == BURST_PODS
        rate = BURST_PODS / (max(c.ended for c in during) - started)
        time.sleep(max(cut_at[0] + PARTITION - time.monotonic(), 0))
        partitionable.proxies[0].heal(reset=heal == "reset")
        healed = time.monotonic()
        cut_replica = partitionable.replicas.servers[0]
        ready_at: list[float] = []  # when the cut replica's /readyz answers 200 again

        def ready_again() -> bool:
            if cut_replica.status("/readyz") != 200:
                return False
            ready_at.append(time.monotonic())
            return True

        poll = threading.Thread(target=kube.wait_for, args=(ready_again, 20), kwargs={"interval": 0.2})
        poll.start()
        while len(stored(kube, ns)) < FAULT_ROOM:
            assert time.monotonic() - healed < SHORT_TTL + 5, f"room not back: {len(stored(kube, ns))} Pods"
            _, (call,) = create_at_once(kube, ns, pod("after-", ONE_GPU), 1, 1)
            answered_in_time([call])
            if call.status != 201:
                time.sleep(0.5)
        back = time.monotonic() - healed
        _, (over,) = create_at_once(kube, ns, pod("over-", ONE_GPU), 1, 1)
        assert over.quota_denial and len(stored(kube, ns)) == FAULT_ROOM, over.refusal
        poll.join(25)
        ready = ready_at[0] - healed
        kube.wait_for(lambda: 0 in service.ready, 20, interval=0.5)  # and back in the endpoints
        print(f"\ncut mid-burst, healed ({heal}): refused {dict(refused)} ({sample}); left the endpoints "
              f"{left - cut_at[0]:.1f} s after the cut; a burst then {rate:.0f}/s; ready {ready:.1f} s after the "
              f"heal; all {FAULT_ROOM} Pods' room usable {back:.1f} s after the heal; connections per replica "
              f"{service.connections}")  # fmt: skip
    finally:
        kube.kubectl("delete", "namespace", "--wait=false", ns, spare)


def test_a_gang_member_whose_join_answer_is_lost_joins_once(installed: Installed, partitionable: Partition) -> None:
    """A gang of four in room for four (a Kueue group: no group object), each member created alone. The write of
    the second member's join lands, but its answer is lost on every replica's way to the API server (the request
    forwarded, the answer held until the write times out): the replica reads the ledger again, finds its own join
    listed in the hold, and admits that member once. So the last member still finds its place, and all four are
    stored; a join decided again would take a second place and leave the last member charged alone, into no room
    (docs/rules.md#a-gang-is-admitted-whole-or-not-at-all)."""
    kube = installed.kube
    ns = quota_namespace(kube, 4, f"limits.{MEM}")
    group = {"labels": {KUEUE_LABEL: "lost"}, "annotations": {KUEUE_TOTAL: "4"}}
    member = pod("member-", ONE_GPU)
    member["metadata"] |= group
    try:
        _, first = create_at_once(kube, ns, member, 1, 1)
        assert [c.status for c in first] == [201], first[0].refusal
        writes = [len(p.writes()) for p in partitionable.proxies]
        for proxy in partitionable.proxies:
            proxy.hold_next("PUT", rf"/leases/{LEDGER_PREFIX}{ns}$", answer=True)
        _, lost = create_at_once(kube, ns, member, 1, 1)
        assert [c.status for c in lost] == [201], lost[0].refusal
        assert lost[0].ended - lost[0].started >= 1.5  # it waited for an answer that never came
        held = [p.writes()[n:] for p, n in zip(partitionable.proxies, writes, strict=True)]
        assert sum(w.method == "PUT" for one in held for w in one) == 1, held  # its one write, never sent again
        for proxy in partitionable.proxies:
            proxy.release()
        _, rest = create_at_once(kube, ns, member, 2, 1)
        assert [c.status for c in rest] == [201, 201], [c.refusal for c in rest]
        assert len(stored(kube, ns)) == 4
    finally:
        kube.kubectl("delete", "namespace", "--wait=false", ns)
