"""Namespace device quota through the real API server when something dies in the middle of a burst: a webhook
replica, kube-apiserver, or etcd (stalled). Nothing is over-admitted, every refusal says why, and all the room is
usable again within the reservation TTL."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from testbed.api import Created, create_at_once, pod
from testbed.cluster import RealKube
from testbed.install import Installed, WebhookServer
from testbed.replicas import Replicas
from tests.realkube.quota_replicas import (
    FAULT_PODS,
    FAULT_ROOM,
    MEM,
    ONE_GPU,
    SHORT_TTL,
    explained,
    quota_namespace,
    replicas_of,
    stored,
)

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


@pytest.fixture
def crashable(installed: Installed, webhook: WebhookServer) -> Iterator[Replicas]:
    """Three webhook processes with a short reservation TTL, so a crash test waits out 15 s, not 60 s."""
    yield from replicas_of(installed, {"HAMI_QUOTA_RESERVATION_TTL": str(SHORT_TTL)}, faults=True)


def crash_mid_burst(kube: RealKube, fault: Callable[[], None], what: str) -> None:
    """FAULT_PODS creates at once into room for FAULT_ROOM; ``fault`` runs (and heals) once a third of the room
    is taken. Never more Pods than the room; every refusal says why; afterwards, all the room can be used
    again, exactly: the time that takes, from the fault's end, is printed."""
    # limits.<name>: only the webhook counts it. kube-apiserver's own quota admission enforces requests.<name>
    # too, and charges its status.used before a create completes: killed in between, it refuses the room it
    # charged until the controller-manager's quota resync (5 min), which is not what these tests measure.
    ns = quota_namespace(kube, FAULT_ROOM, f"limits.{MEM}")
    try:
        calls: list[Created] = []
        burst = threading.Thread(target=create_at_once, args=(kube, ns, pod("crash-", ONE_GPU), FAULT_PODS, 16, calls))
        burst.start()

        def created() -> int:
            return sum(c.status == 201 for c in calls)

        kube.wait_for(lambda: created() >= FAULT_ROOM // 3 or not burst.is_alive(), 60, interval=0.005)
        fault()
        healed = time.monotonic()
        burst.join(180)
        assert len(stored(kube, ns)) <= FAULT_ROOM
        assert all(explained(c) for c in calls if c.status != 201), [c.refusal for c in calls if not explained(c)]
        refused = Counter(explained(c) for c in calls if c.status != 201)
        # Then Pods one at a time until the room is full: what orphaned reservations held comes back by their TTL.
        while len(stored(kube, ns)) < FAULT_ROOM:
            assert time.monotonic() - healed < SHORT_TTL + 45, f"room not back: {len(stored(kube, ns))} Pods"
            _, (call,) = create_at_once(kube, ns, pod("after-", ONE_GPU), 1, 1)
            assert call.status == 201 or explained(call), call.refusal
            if call.status != 201:
                time.sleep(0.5)
        back = time.monotonic() - healed
        _, (over,) = create_at_once(kube, ns, pod("over-", ONE_GPU), 1, 1)
        assert over.quota_denial and len(stored(kube, ns)) == FAULT_ROOM, over.refusal
        print(f"\n{what}: {created()} of {FAULT_PODS} created in the burst, refused: "
              f"{dict(refused)}; all {FAULT_ROOM} Pods' room usable {back:.1f} s after the fault ended")  # fmt: skip
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
