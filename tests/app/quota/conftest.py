"""A real quota port (feed + ledger) on the official client, against the real kube-apiserver of `bare_kube`.

The port talks to the API server through `api` (a FaultyProxy), so a test can count its requests and inject
faults; the test seeds and reads objects with its own client, straight to the API server. Each test gets
its own namespaces (the quota'd one and the ledger's home), deleted afterwards: the cluster is shared.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from app.quota.core.amounts import Amounts, accumulate, unseen
from app.quota.core.encoding import LEDGER_ANNOTATION, LEDGER_PREFIX
from app.quota.evaluator import QuotaEvaluator
from app.quota.feed.feed import Feed
from app.quota.startup import open_quota
from app.readiness import Readiness
from app.settings import Settings
from testbed.cluster import RealKube
from testbed.polling import eventually
from tests.realkube.faults import FaultyProxy

MEM, CORES, GPU = "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpu"


def in_use(feed: Feed, namespace: str, reservations: Mapping[str, Amounts]) -> Amounts:
    """The namespace's Pod usage plus what each reservation holds beyond what its Pods were seen to take: a Pod
    counted once, as the port counts it."""
    view = feed.view(namespace, reservations)
    used, held = dict(view.used), view.taken
    for reservation, amounts in reservations.items():
        seen = held.get(reservation)
        accumulate(used, unseen(amounts, seen.amounts if seen is not None else None))
    return used


def resource_quota(hard: dict[str, str], namespace: str, name: str = "gpu") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": hard},
    }


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass
class Cluster:
    """The real API server as one test sees it: its namespaces, a client of its own, the proxy the port uses."""

    kube: RealKube
    proxy: FaultyProxy
    kubeconfig: str  # the proxy's: what the port is configured with
    api_client: client.ApiClient
    ns: str = field(default_factory=lambda: unique("ai"))  # the quota'd namespace
    home: str = field(default_factory=lambda: unique("hami"))  # HAMI_NAMESPACE: where the ledgers live

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @property
    def leases(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api_client)

    @property
    def ledger_name(self) -> str:
        return LEDGER_PREFIX + self.ns

    def settings(self, **env: str) -> Settings:
        """Quota required, the ledger in this test's home namespace, plus ``env``."""
        return Settings.from_env({"HAMI_QUOTA_ENABLED": "true", "HAMI_NAMESPACE": self.home, **env})

    def quota(self, hard: dict[str, str], name: str = "gpu") -> None:
        """Create or replace the ResourceQuota ``name`` in the quota'd namespace."""
        body = resource_quota(hard, self.ns, name)
        try:
            current = self.core.read_namespaced_resource_quota(name, self.ns)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.core.create_namespaced_resource_quota(self.ns, body)
            return
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        self.core.replace_namespaced_resource_quota(name, self.ns, body)

    def create_pod(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create the Pod as given (its namespace is the quota'd one); the object as stored."""
        response = self.core.create_namespaced_pod(self.ns, obj, _preload_content=False)
        return json.loads(response.data)  # type: ignore[no-any-return]

    def delete_pod(self, name: str) -> None:
        """Pods never bound to a node go at once (no kubelet has to confirm)."""
        self.core.delete_namespaced_pod(name, self.ns)

    def finish_pod(self, name: str, phase: str = "Succeeded") -> None:
        """What a kubelet reports when the Pod's containers end: its status phase."""
        self.core.patch_namespaced_pod_status(name, self.ns, {"status": {"phase": phase}})

    def lease(self) -> dict[str, Any] | None:
        """The quota'd namespace's ledger Lease as stored, or None."""
        try:
            response = self.leases.read_namespaced_lease(self.ledger_name, self.home, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(response.data)  # type: ignore[no-any-return]

    def ledger(self) -> dict[str, Any]:
        """The ledger's entries as stored: {request uid: {"expires", "amounts"}}."""
        lease = self.lease()
        return json.loads(lease["metadata"]["annotations"][LEDGER_ANNOTATION]) if lease else {}

    def ledger_requests(self) -> list[str]:
        """What the port asked of the API server about this test's ledger Lease, in order: "GET /apis/...",
        "PUT ..." (the POST that creates it included; the watch of all ledgers is not)."""
        collection = f"/apis/coordination.k8s.io/v1/namespaces/{self.home}/leases"
        return [
            f"{r.method} {r.path}"
            for r in self.proxy.requests
            if r.path == f"{collection}/{self.ledger_name}" or (r.path == collection and r.method == "POST")
        ]


@pytest.fixture
def cluster(
    api: FaultyProxy, bare_kube: RealKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cluster]:
    """The webhook's kubeconfig points at the proxy; this test's namespaces exist (and go afterwards)."""
    kubeconfig = api.kubeconfig(tmp_path / "proxy.kubeconfig")
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # never in-cluster config in tests
    with config.new_client_from_config(config_file=bare_kube.kubeconfig_path) as api_client:
        made = Cluster(bare_kube, api, kubeconfig, api_client)
        for name in (made.home, made.ns):
            bare_kube.namespace(name)
        try:
            yield made
        finally:
            bare_kube.kubectl("delete", "namespace", "--wait=false", made.ns, made.home, check=False)


@pytest.fixture
def start_quota(cluster: Cluster) -> Iterator[Callable[..., tuple[QuotaEvaluator, Settings]]]:
    """``start_quota(HAMI_QUOTA_RESERVATION_TTL="1", ...)``: a started, synced port; stopped afterwards."""
    ports: list[QuotaEvaluator] = []

    def start(**env: str) -> tuple[QuotaEvaluator, Settings]:
        settings = cluster.settings(**env)
        port = open_quota(settings, Readiness())
        assert isinstance(port, QuotaEvaluator)
        ports.append(port)
        eventually(lambda: port.status()["ready"], 30, what="the first lists to sync")
        return port, settings

    yield start
    for port in ports:
        port.stop()
