"""Request recording, injected failures and "concurrent writer" hooks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import FakeKubeAPI, RecordedRequest


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_client)


def ledger(entries: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ledger"}, "data": entries}


def test_requests_are_recorded(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    kube_api.put(ledger({}))  # seeding is not recorded
    core.read_namespaced_config_map("ledger", "default")
    core.patch_namespaced_config_map("ledger", "default", {"data": {"a": "1"}}, dry_run="All")
    assert [(r.method, r.path) for r in kube_api.requests] == [
        ("GET", "/api/v1/namespaces/default/configmaps/ledger"),
        ("PATCH", "/api/v1/namespaces/default/configmaps/ledger"),
    ]
    (patch,) = kube_api.writes()
    assert patch == RecordedRequest(
        method="PATCH",
        path="/api/v1/namespaces/default/configmaps/ledger",
        query={"dryRun": ["All"]},
        content_type="application/strategic-merge-patch+json",
        body=patch.body,
    )
    assert patch.json() == {"data": {"a": "1"}} and patch.param("dryRun") == "All"


def test_fail_next(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    kube_api.fail_next("GET", r"/configmaps/ledger$", 503, times=2, message="etcd is sad")
    kube_api.fail_next("post", r"/configmaps$", 403)
    kube_api.put(ledger({}))
    for _ in range(2):
        with pytest.raises(ApiException) as unavailable:
            core.read_namespaced_config_map("ledger", "default")
        assert unavailable.value.status == 503
        assert json.loads(unavailable.value.body) == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "etcd is sad",
            "reason": "ServiceUnavailable",
            "code": 503,
        }
    assert core.read_namespaced_config_map("ledger", "default").metadata.name == "ledger"
    with pytest.raises(ApiException) as forbidden:
        core.create_namespaced_config_map("default", {"metadata": {"name": "x"}})
    assert (forbidden.value.status, json.loads(forbidden.value.body)["reason"]) == (403, "Forbidden")
    assert kube_api.get("v1", "ConfigMap", "x") is None  # the failed request was not applied
    core.create_namespaced_config_map("default", {"metadata": {"name": "x"}})


def append_entry(core: client.CoreV1Api, key: str, value: str) -> int:
    """Compare-and-swap: read, modify, replace with the read resourceVersion; retry on 409. Returns attempts."""
    for attempt in range(1, 5):
        current = core.read_namespaced_config_map("ledger", "default")
        current.data = {**(current.data or {}), key: value}
        try:
            core.replace_namespaced_config_map("ledger", "default", current)
            return attempt
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise AssertionError("no progress")


def test_before_simulates_a_concurrent_writer(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    kube_api.put(ledger({}))

    def other_writer(api: FakeKubeAPI) -> None:
        current = api.get("v1", "ConfigMap", "ledger")
        assert current is not None
        api.put({**current, "data": {**(current.get("data") or {}), "other": "1"}})

    kube_api.before("PUT", r"/configmaps/ledger$", other_writer)
    assert append_entry(core, "mine", "2") == 2
    stored = kube_api.get("v1", "ConfigMap", "ledger")
    assert stored is not None and stored["data"] == {"other": "1", "mine": "2"}
    assert [r.method for r in kube_api.writes()] == ["PUT", "PUT"]


def test_failing_callback_is_reported(tmp_path: Path) -> None:
    def broken(api: FakeKubeAPI) -> None:
        raise RuntimeError("callback bug")

    with FakeKubeAPI(kubeconfig_dir=tmp_path) as api:
        api.before("*", r"^/api/v1/namespaces$", broken)
        response = requests.get(f"{api.url}/api/v1/namespaces", timeout=5)
        assert response.status_code == 500 and response.json()["reason"] == "InternalError"
        assert requests.get(f"{api.url}/api/v1/namespaces", timeout=5).status_code == 200
    assert [str(e) for e in api.errors] == ["callback bug"]  # the kube_api fixture fails the test on these


def test_put_always_writes_and_seeding_helpers(kube_api: FakeKubeAPI) -> None:
    first = kube_api.put(ledger({"a": "1"}))
    second = kube_api.put(ledger({"a": "1"}))
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert [o["metadata"]["name"] for o in kube_api.list("v1", "Namespace")] == ["default", "kube-system"]
    assert [o["metadata"]["name"] for o in kube_api.list("v1", "ConfigMap", "kube-system")] == []
    kube_api.delete("v1", "ConfigMap", "ledger")
    kube_api.delete("v1", "ConfigMap", "ledger")  # absent: nothing to do
    assert kube_api.get("v1", "ConfigMap", "ledger") is None and kube_api.requests == []
    with pytest.raises(KeyError, match="register_resource"):
        kube_api.get("example.com/v1", "Widget", "w")
