"""A real quota port (feed + ledger) on the official client against tests/kubeapi."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.quota.kube import KubeQuota, open_quota
from app.settings import Settings
from tests.kubeapi import FakeKubeAPI

QUOTA_NS = "ai"
HOME = "hami-system"
MEM, CORES, GPU = "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpu"


def eventually(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def resource_quota(hard: dict[str, str], name: str = "gpu", namespace: str = QUOTA_NS) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": hard},
    }


def quota_settings(**env: str) -> Settings:
    """Quota required, the ledger in HOME, plus ``env``."""
    return Settings.from_env({"HAMI_QUOTA_ENABLED": "true", "HAMI_NAMESPACE": HOME, **env})


@pytest.fixture
def cluster(kube_api: FakeKubeAPI, kubeconfig: str, monkeypatch: pytest.MonkeyPatch) -> FakeKubeAPI:
    """The fake API server as the webhook's kubeconfig, with namespaces hami-system and ai."""
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # never in-cluster config in tests
    for name in (HOME, QUOTA_NS):
        kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return kube_api


@pytest.fixture
def start_quota(cluster: FakeKubeAPI) -> Iterator[Callable[..., tuple[KubeQuota, Settings]]]:
    """``start_quota(HAMI_QUOTA_RESERVATION_TTL="1", ...)``: a started, synced port; stopped afterwards."""
    ports: list[KubeQuota] = []

    def start(**env: str) -> tuple[KubeQuota, Settings]:
        settings = quota_settings(**env)
        port = open_quota(settings)
        assert isinstance(port, KubeQuota)
        ports.append(port)
        eventually(lambda: port.status()["ready"], what="the first lists to sync")
        return port, settings

    yield start
    for port in ports:
        port.stop()
