"""Namespace device quota through the real API server, with three webhook processes behind the Service's
ClusterIP (a round-robin forwarder plays kube-proxy), as a Deployment scaled to three replicas runs them:
exactly the Pods that fit are created, whoever creates them (clients at once, a Job's controller), and
nothing is refused except by the quota. Faults mid-burst: test_quota_crashes.py, test_quota_partition.py and
test_quota_clock.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.api import create_at_once, pod
from testbed.install import Installed, WebhookServer, apply, get
from testbed.replicas import Replicas
from tests.realkube.quota_replicas import ONE_GPU, full, quota_namespace, refusals, replicas_of, stored

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


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
