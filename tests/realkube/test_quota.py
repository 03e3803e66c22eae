"""Namespace device quota under concurrency, through the real API server: two webhook processes behind the
Service's ClusterIP (a round-robin forwarder plays kube-proxy), N `kubectl create` at once, room for K."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.realkube.forwarder import RoundRobin
from tests.realkube.install import NAMESPACE, Installed, WebhookServer, apply, get, namespace
from tests.realkube.pods import pod
from tests.support.ports import free_port

N, K = 10, 4  # Pods asked for at once, Pods of 1000 MiB that fit
MEM = "nvidia.com/gpumem"


@pytest.fixture
def two_webhooks(installed: Installed, webhook: WebhookServer) -> Iterator[tuple[list[WebhookServer], RoundRobin]]:
    """The installed webhook replaced by two processes on 127.0.0.1 and a forwarder on the ClusterIP."""
    webhook.stop()
    servers: list[WebhookServer] = []
    forwarder = None
    try:
        for i in range(2):
            servers.append(webhook.with_address("127.0.0.1", free_port(), installed.work / f"quota-{i}.log"))
            servers[-1].start()
        forwarder = RoundRobin((installed.cluster_ip, 443), [(s.host, s.port) for s in servers]).start()
        yield servers, forwarder
    finally:
        if forwarder is not None:
            forwarder.stop()
        for server in servers:
            server.stop()
    for server in servers:
        log = server.log.read_text()
        assert "Traceback" not in log, log


def test_exactly_k_of_n_concurrent_creates(
    installed: Installed, two_webhooks: tuple[list[WebhookServer], RoundRobin]
) -> None:
    servers, forwarder = two_webhooks
    kube = installed.kube
    ns = f"e2e-quota-{uuid.uuid4().hex[:8]}"
    apply(kube, namespace(ns))
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": ns}}
    apply(kube, quota | {"spec": {"hard": {f"requests.{MEM}": str(K * 1000)}}})

    def create(i: int) -> subprocess.CompletedProcess[str]:
        body = pod(f"gpu-{i}", {"nvidia.com/gpu": "1", MEM: "1000"})
        return kube.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(body), check=False, timeout=120)

    with ThreadPoolExecutor(max_workers=N) as pool:
        results = list(pool.map(create, range(N)))

    created = [r for r in results if r.returncode == 0]
    denied = [r.stderr.strip() for r in results if r.returncode != 0]
    assert len(created) == K, [r.stderr for r in results]
    # kubectl prints the denial's reason, GPUQuotaExceeded, where other denials say Forbidden.
    message = (
        'Error from server (GPUQuotaExceeded): error when creating "STDIN": admission webhook "pods.hami.io" '
        f"denied the request: exceeding resource quota: namespace {ns} {MEM} "
        f"used {K * 1000} + requested 1000 > limit {K * 1000}"
    )
    assert denied == [message] * (N - K)
    stored = get(kube, "pods", namespace=ns)["items"]
    assert len(stored) == K
    reservations = {p["metadata"]["annotations"]["hami.io/quota-reservation"] for p in stored}
    assert len(reservations) == K
    # The reservations went through the ledger Lease (entries leave it once the watch sees their Pods).
    lease = get(kube, "lease", f"hami-quota-{ns}", namespace=NAMESPACE)
    assert "hami.io/quota-ledger" in lease["metadata"]["annotations"]
    # Both processes took connections from the API server through the "Service".
    assert all(forwarder.connections[(s.host, s.port)] > 0 for s in servers), forwarder.connections
