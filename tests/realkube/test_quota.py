"""Namespace device quota through the real API server, with three webhook processes behind the Service's
ClusterIP (a round-robin forwarder plays kube-proxy), as a Deployment scaled to three replicas runs them:
exactly the Pods that fit are created, whoever creates them (clients at once, a Job's controller), and
nothing is refused except by the quota."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import ROOT
from testbed.api import Created, create_at_once, pod
from testbed.cluster import RealKube
from testbed.install import Installed, WebhookServer, apply, get
from testbed.ports import free_port
from testbed.replicas import Replicas, start_replicas
from tests.realkube.faults import FaultyProxy
from tests.realkube.fixtures import CI
from tests.realkube.service import ReadyService

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

MEM = "nvidia.com/gpumem"
ONE_GPU = {"nvidia.com/gpu": "1", MEM: "1000"}  # K of these fit in a quota of K * 1000


def replicas_of(
    installed: Installed, env: dict[str, str] | None = None, faults: bool = False, **start: Any
) -> Iterator[Replicas]:
    """Three webhook processes behind the installed webhook's ClusterIP; their logs checked once stopped: no
    Traceback, and no admission left undecided unless the test injects faults (then that is the answer)."""
    replicas = start_replicas(installed, 3, installed.work / f"replicas-{uuid.uuid4().hex[:6]}", env, **start)
    try:
        yield replicas
    finally:
        logs = replicas.stop()
    for log in logs:
        assert "Traceback" not in log and (faults or "quota undecided" not in log), log


@pytest.fixture
def three_webhooks(installed: Installed, webhook: WebhookServer) -> Iterator[Replicas]:
    """The installed webhook replaced by three processes behind its ClusterIP (it is restarted afterwards)."""
    yield from replicas_of(installed)


@pytest.fixture(scope="class")
def bursts_webhooks(installed: Installed) -> Iterator[Replicas]:
    """Three processes as `three_webhooks`, shared by the tests of one class (each in namespaces of its own):
    starting and stopping three replicas and the installed one again costs more than a burst."""
    yield from replicas_of(installed)
    if not installed.webhook.running:
        installed.webhook.start()


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


def test_exactly_k_of_n_concurrent_creates(installed: Installed, three_webhooks: Replicas) -> None:
    """Several rounds of N >> K creates at once, each in a namespace with room for K."""
    kube = installed.kube
    for room in (1, 4, 9):
        ns = quota_namespace(kube, room)
        try:
            _, calls = create_at_once(kube, ns, pod("gpu-", ONE_GPU), 40, 16)
            assert refusals(calls) == []
            assert sum(c.status == 201 for c in calls) == room
            denials = {c.refusal["message"] for c in calls if c.quota_denial}
            assert denials == {f'admission webhook "pods.hami.io" denied the request: {full(ns, room)}'}
            pods = stored(kube, ns)
            assert len(pods) == room
            assert all("hami.io/quota-reservation" in p["metadata"]["annotations"] for p in pods)
            if room == 9:  # kubectl prints the denial's reason, GPUQuotaExceeded, where other denials say Forbidden
                one_more = json.dumps(pod("one-more", ONE_GPU))
                done = kube.kubectl("create", "-n", ns, "-f", "-", stdin=one_more, check=False)
                assert done.stderr.strip() == (
                    'Error from server (GPUQuotaExceeded): error when creating "STDIN": admission webhook '
                    f'"pods.hami.io" denied the request: {full(ns, room)}'
                )
        finally:
            kube.kubectl("delete", "namespace", "--wait=false", ns)
    three_webhooks.stop()
    assert len(three_webhooks.connections) == 3 and all(three_webhooks.connections.values())


class TestBursts:
    """Bursts through the same three replicas (`bursts_webhooks`, stopped after the class)."""

    @pytest.mark.parametrize("room", [300, 50])
    def test_300_creates_at_once(self, installed: Installed, bursts_webhooks: Replicas, room: int) -> None:
        """What a Job with high parallelism or a Deployment scale-up does: 300 device Pods at once, 32 clients."""
        kube = installed.kube
        ns = quota_namespace(kube, room)
        try:
            _, calls = create_at_once(kube, ns, pod("burst-", ONE_GPU), 300, 32)
            assert refusals(calls) == []
            assert sum(c.status == 201 for c in calls) == room
            assert sum(c.quota_denial for c in calls) == 300 - room
            assert len(stored(kube, ns)) == room
        finally:
            kube.kubectl("delete", "namespace", "--wait=false", ns)

    def test_a_job_with_parallelism_300(self, installed: Installed, bursts_webhooks: Replicas) -> None:
        """The Job controller creates the Pods: exactly those that fit exist, its events carry the quota's message
        for the others, and none of its creates failed for any other reason (the webhook never failed)."""
        kube, room = installed.kube, 40
        ns = quota_namespace(kube, room)
        template = pod("worker", ONE_GPU, restartPolicy="Never")
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "wide", "namespace": ns},
            "spec": {"parallelism": 300, "completions": 300, "template": {"spec": template["spec"]}},
        }
        try:
            apply(kube, job)

            def settled() -> list[dict[str, Any]] | None:
                events = get(kube, "events", "--field-selector", "involvedObject.kind=Job", namespace=ns)["items"]
                failed = [e for e in events if e["reason"] == "FailedCreate"]
                return failed if len(stored(kube, ns)) == room and failed else None

            failed = kube.wait_for(settled, 120, interval=1)
            messages = {e["message"] for e in failed}
            assert any(full(ns, room) in m for m in messages), messages
            assert all("exceeding resource quota" in m for m in messages), messages
            assert len(stored(kube, ns)) == room  # and the controller's retries did not squeeze one more in
        finally:
            kube.kubectl("delete", "namespace", "--wait=false", ns)


# --- crashes in the middle of a burst ---------------------------------------------------------------------------
CRASH_ROOM, CRASH_PODS = 30, 90
CRASH_TTL = 15  # HAMI_QUOTA_RESERVATION_TTL: room reserved for Pods that never landed comes back after it


@pytest.fixture
def crashable(installed: Installed, webhook: WebhookServer) -> Iterator[Replicas]:
    """Three webhook processes with a short reservation TTL, so a crash test waits out 15 s, not 60 s."""
    yield from replicas_of(installed, {"HAMI_QUOTA_RESERVATION_TTL": str(CRASH_TTL)}, faults=True)


def explained(call: Created) -> str:
    """What a refusal says, shortened to its kind; "" when it says nothing."""
    message = str(call.refusal.get("message") or "")
    for kind in ("exceeding resource quota", "failed calling webhook", "no answer", "quota"):
        if kind in message:
            return kind
    return message[:80]


def crash_mid_burst(kube: RealKube, fault: Callable[[], None], what: str) -> None:
    """CRASH_PODS creates at once into room for CRASH_ROOM; ``fault`` runs (and heals) once a third of the room
    is taken. Never more Pods than the room; every refusal says why; afterwards, all the room can be used
    again, exactly: the time that takes, from the fault's end, is printed."""
    # limits.<name>: only the webhook counts it. kube-apiserver's own quota admission enforces requests.<name>
    # too, and charges its status.used before a create completes: killed in between, it refuses the room it
    # charged until the controller-manager's quota resync (5 min), which is not what these tests measure.
    ns = quota_namespace(kube, CRASH_ROOM, f"limits.{MEM}")
    try:
        calls: list[Created] = []
        burst = threading.Thread(target=create_at_once, args=(kube, ns, pod("crash-", ONE_GPU), CRASH_PODS, 16, calls))
        burst.start()

        def created() -> int:
            return sum(c.status == 201 for c in calls)

        kube.wait_for(lambda: created() >= CRASH_ROOM // 3 or not burst.is_alive(), 60, interval=0.005)
        fault()
        healed = time.monotonic()
        burst.join(180)
        assert len(stored(kube, ns)) <= CRASH_ROOM
        assert all(explained(c) for c in calls if c.status != 201), [c.refusal for c in calls if not explained(c)]
        refused = Counter(explained(c) for c in calls if c.status != 201)
        # Then Pods one at a time until the room is full: what orphaned reservations held comes back by their TTL.
        while len(stored(kube, ns)) < CRASH_ROOM:
            assert time.monotonic() - healed < CRASH_TTL + 45, f"room not back: {len(stored(kube, ns))} Pods"
            _, (call,) = create_at_once(kube, ns, pod("after-", ONE_GPU), 1, 1)
            assert call.status == 201 or explained(call), call.refusal
            if call.status != 201:
                time.sleep(0.5)
        back = time.monotonic() - healed
        _, (over,) = create_at_once(kube, ns, pod("over-", ONE_GPU), 1, 1)
        assert over.quota_denial and len(stored(kube, ns)) == CRASH_ROOM, over.refusal
        print(f"\n{what}: {created()} of {CRASH_PODS} created in the burst, refused: "
              f"{dict(refused)}; all {CRASH_ROOM} Pods' room usable {back:.1f} s after the fault ended")  # fmt: skip
    finally:
        kube.kubectl("delete", "namespace", "--wait=false", ns)


def test_a_replica_killed_mid_burst(installed: Installed, crashable: Replicas) -> None:
    """SIGKILL one replica while it holds grants; a new one starts in its place (as its Deployment would)."""
    victim = crashable.servers[0]

    def kill() -> None:
        assert victim._proc is not None
        victim._proc.kill()
        victim._proc.wait(10)
        victim.launch().ready()

    crash_mid_burst(installed.kube, kill, "replica SIGKILLed")


# A client connecting just as kube-apiserver dies can leak the TLS socket inside CPython's ssl module:
# SSLSocket._create (3.11) re-raises a reset seen before the handshake without closing the socket it made, and
# its finalizer then warns "unclosed <ssl.SSLSocket ...>". That socket is the test's client's, not the
# webhook's; the test's subject is what the quota admitted.
@pytest.mark.filterwarnings("ignore:Exception ignored in. <ssl.SSLSocket:pytest.PytestUnraisableExceptionWarning")
def test_the_api_server_killed_mid_burst(installed: Installed, crashable: Replicas) -> None:
    """SIGKILL kube-apiserver and start it again: admissions in flight never reach their Pods' creation."""
    crash_mid_burst(installed.kube, installed.kube.restart_apiserver, "kube-apiserver SIGKILLed and restarted")


def test_etcd_paused_mid_burst(installed: Installed, crashable: Replicas) -> None:
    """SIGSTOP etcd for 6 s, then SIGCONT: every write and watch stalls, then resumes."""
    kube = installed.kube

    def pause() -> None:
        kube.signal("etcd", signal.SIGSTOP)
        try:
            time.sleep(6)
        finally:
            kube.signal("etcd", signal.SIGCONT)

    crash_mid_burst(kube, pause, "etcd paused 6 s")


# --- one replica cut off from the API server ----------------------------------------------------------------
WEBHOOK_TIMEOUT = 10  # the MutatingWebhookConfiguration's timeoutSeconds
LEAVES_WITHIN = 15  # seconds from the cut until the replica is out of the endpoints (the readinessProbe's reach)
PARTITION = CRASH_TTL + 2  # seconds the replica stays cut off: longer than a hold, so all it held has run out
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
    env = {"HAMI_QUOTA_RESERVATION_TTL": str(CRASH_TTL)}
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
    room for CRASH_ROOM: nothing over-admitted, every refusal says why and comes before the webhook timeout; the
    replica leaves the endpoints within LEAVES_WITHIN s, and a burst then admits every Pod it has room for, none
    refused (the cut replica answers none of it) and none waiting out the timeout; healed after PARTITION s (held
    connections resumed, or reset), all the room is usable again within the reservation TTL. How fast the others
    admit meanwhile is the benchmark's to say (bench/quota.py), not a timed assertion's."""
    kube, service = installed.kube, partitionable.service
    spare = quota_namespace(kube, BURST_PODS, f"limits.{MEM}")
    ns = quota_namespace(kube, CRASH_ROOM, f"limits.{MEM}")
    try:
        cut_at: list[float] = []

        def cut() -> None:
            partitionable.proxies[0].black_hole()
            cut_at.append(time.monotonic())

        calls: list[Created] = []
        burst = threading.Thread(target=create_at_once, args=(kube, ns, pod("cut-", ONE_GPU), CRASH_PODS, 16, calls))
        burst.start()
        kube.wait_for(
            lambda: sum(c.status == 201 for c in calls) >= CRASH_ROOM // 3 or not burst.is_alive(), 60, interval=0.005
        )
        cut()
        burst.join(120)
        answered_in_time(calls)
        assert len(stored(kube, ns)) <= CRASH_ROOM
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
        while len(stored(kube, ns)) < CRASH_ROOM:
            assert time.monotonic() - healed < CRASH_TTL + 5, f"room not back: {len(stored(kube, ns))} Pods"
            _, (call,) = create_at_once(kube, ns, pod("after-", ONE_GPU), 1, 1)
            answered_in_time([call])
            if call.status != 201:
                time.sleep(0.5)
        back = time.monotonic() - healed
        _, (over,) = create_at_once(kube, ns, pod("over-", ONE_GPU), 1, 1)
        assert over.quota_denial and len(stored(kube, ns)) == CRASH_ROOM, over.refusal
        poll.join(25)
        ready = ready_at[0] - healed
        kube.wait_for(lambda: 0 in service.ready, 20, interval=0.5)  # and back in the endpoints
        print(f"\ncut mid-burst, healed ({heal}): refused {dict(refused)} ({sample}); left the endpoints "
              f"{left - cut_at[0]:.1f} s after the cut; a burst then {rate:.0f}/s; ready {ready:.1f} s after the "
              f"heal; all {CRASH_ROOM} Pods' room usable {back:.1f} s after the heal; connections per replica "
              f"{service.connections}")  # fmt: skip
    finally:
        kube.kubectl("delete", "namespace", "--wait=false", ns, spare)


# --- one replica's clocks off ---------------------------------------------------------------------------------
SKEW_ROOM, SKEW_PODS, SKEW_BURSTS = 100, 300, 2  # bursts on each side of the jump
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
    env = {"HAMI_QUOTA_RESERVATION_TTL": str(CRASH_TTL)}
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
    either way): SKEW_BURSTS bursts of SKEW_PODS creates on each side of the jump, each into room for SKEW_ROOM,
    never store more than the room, and the skewed replica admits Pods in every burst (else this proves
    nothing); after the bursts, FREED Pods deleted and a TTL waited out, exactly the free room is admitted
    again."""
    kube = installed.kube
    namespaces = [quota_namespace(kube, SKEW_ROOM, f"limits.{MEM}") for _ in range(SKEW_BURSTS * len(SKEWS))]
    try:
        # A replica refuses (explained) in a quota'd namespace whose Pods it has not listed yet: the burst starts
        # once the skewed one publishes every namespace's quota gauges (it lists them when their quota appears).
        kube.wait_for(lambda: all(f'namespace="{ns}"' in scraped(skewed.metrics) for ns in namespaces), 60)
        counts, by_skewed, others = [], [], []
        for i, ns in enumerate(namespaces):
            if i and i % SKEW_BURSTS == 0:
                skewed.jump(SKEWS[i // SKEW_BURSTS])
            before = admitted_by(skewed.metrics)
            _, calls = create_at_once(kube, ns, pod("skew-", ONE_GPU), SKEW_PODS, 32)
            counts.append(len(stored(kube, ns)))
            by_skewed.append(admitted_by(skewed.metrics) - before)
            others += [c.refusal for c in calls if c.status != 201 and not explained(c)]
        print(f"\nclock {' then '.join(SKEWS)}: stored {counts} (room {SKEW_ROOM}), the skewed replica admitted "
              f"{by_skewed}")  # fmt: skip
        assert max(counts) <= SKEW_ROOM and others == [], (counts, others[:3])  # every refusal says why
        assert all(by_skewed), by_skewed
        burst_end = time.monotonic()
        for ns in namespaces:
            names = [p["metadata"]["name"] for p in stored(kube, ns)[:FREED]]
            kube.kubectl("delete", "pods", "-n", ns, "--wait=false", *names)
        time.sleep(max(burst_end + CRASH_TTL + 1 - time.monotonic(), 0))
        for ns in namespaces:
            free = SKEW_ROOM - len(stored(kube, ns))
            _, calls = create_at_once(kube, ns, pod("after-", ONE_GPU), free + 5, 8)
            assert refusals(calls) == []
            assert sum(c.status == 201 for c in calls) == free and len(stored(kube, ns)) == SKEW_ROOM, free
    finally:
        for ns in namespaces:
            kube.kubectl("delete", "namespace", "--wait=false", ns)
