"""Watch semantics: resumption from a resourceVersion, replay, expiry, bookmarks, selectors, shutdown."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import FakeKubeAPI


def cm(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}}


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_client)


def take(stream: Iterator[dict[str, Any]], count: int) -> list[tuple[str, str]]:
    return [
        (e["type"], e["raw_object"]["metadata"].get("name", "")) for _, e in zip(range(count), stream, strict=False)
    ]


def test_events_after_resource_version(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    kube_api.put(cm("a"))
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.patch_namespaced_config_map("a", "default", {"data": {"k": "v"}})
    core.create_namespaced_config_map("default", cm("b"))
    core.delete_namespaced_config_map("a", "default")
    w = watch.Watch()
    events = w.stream(core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=10)
    assert take(events, 3) == [("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    w.stop()


def test_replay_then_live_events(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    kube_api.put(cm("a"))
    kube_api.put(cm("b"))
    w = watch.Watch()
    events = w.stream(core.list_namespaced_config_map, "default", timeout_seconds=10)
    assert take(events, 2) == [("ADDED", "a"), ("ADDED", "b")]  # no resourceVersion: current state first
    assert core.read_namespace("default").metadata.name == "default"  # the open watch blocks nobody
    kube_api.put(cm("a", touched="yes"))  # put() always writes, as another client would
    event = next(events)
    assert (event["type"], event["object"].metadata.labels) == ("MODIFIED", {"touched": "yes"})
    assert w.resource_version == event["object"].metadata.resource_version
    w.stop()


def test_expired_resource_version_is_410(tmp_path: Any) -> None:
    with FakeKubeAPI(history_size=2, kubeconfig_dir=tmp_path) as api:
        start = api.resource_version
        for i in range(4):
            api.put(cm(f"c{i}"))
        with config.new_client_from_config(config_file=api.kubeconfig_path) as api_client:
            core = client.CoreV1Api(api_client)
            with pytest.raises(ApiException) as expired:
                for _ in watch.Watch().stream(
                    core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=5
                ):
                    pass
            assert expired.value.status == 410
            assert expired.value.reason == f"Expired: too old resource version: {start} (5)"
            recent = watch.Watch().stream(
                core.list_namespaced_config_map, "default", resource_version=str(int(start) + 2), timeout_seconds=5
            )
            assert take(recent, 2) == [("ADDED", "c2"), ("ADDED", "c3")]


def test_expired_watch_is_an_error_event_in_a_200_stream(tmp_path: Any) -> None:
    with FakeKubeAPI(history_size=1, kubeconfig_dir=tmp_path) as api:
        api.put(cm("a"))
        api.put(cm("b"))
        url = f"{api.url}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=1"
        with requests.get(url, stream=True, timeout=5) as response:
            assert response.status_code == 200
            lines = [json.loads(line) for line in response.iter_lines() if line]
    assert lines == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "too old resource version: 1 (4)",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]


def test_label_selector_transitions(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    rv = kube_api.resource_version
    kube_api.put(cm("a", app="web"))
    kube_api.put(cm("a", app="db"))  # stops matching: DELETED for this watcher
    kube_api.put(cm("b", app="db"))  # never matches: nothing
    kube_api.put(cm("b", app="web"))  # starts matching: ADDED
    w = watch.Watch()
    events = w.stream(
        core.list_namespaced_config_map, "default", label_selector="app=web", resource_version=rv, timeout_seconds=10
    )
    assert take(events, 3) == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b")]
    w.stop()


def test_bookmarks_and_timeout(tmp_path: Any) -> None:
    with FakeKubeAPI(bookmark_interval=0.05, kubeconfig_dir=tmp_path) as api:
        params: dict[str, str] = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": "0.3"}
        started = time.monotonic()
        with requests.get(f"{api.url}/api/v1/namespaces", params=params, stream=True, timeout=5) as response:
            events = [json.loads(line) for line in response.iter_lines() if line]
        assert 0.3 <= time.monotonic() - started < 2
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["ADDED", "ADDED"] and set(kinds[2:]) == {"BOOKMARK"}
    assert events[-1]["object"] == {"kind": "Namespace", "apiVersion": "v1", "metadata": {"resourceVersion": "2"}}


def test_send_initial_events_ends_with_annotated_bookmark(kube_api: FakeKubeAPI) -> None:
    params = {
        "watch": "1",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "0.1",
    }
    with requests.get(f"{kube_api.url}/api/v1/namespaces", params=params, stream=True, timeout=5) as response:
        events = [json.loads(line) for line in response.iter_lines() if line]
    assert [e["type"] for e in events[:3]] == ["ADDED", "ADDED", "BOOKMARK"]
    assert events[2]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_stop_ends_open_watches(tmp_path: Any) -> None:
    api = FakeKubeAPI(kubeconfig_dir=tmp_path).start()
    lines: list[bytes] = []

    def consume() -> None:
        with requests.get(f"{api.url}/api/v1/configmaps?watch=true", stream=True, timeout=5) as response:
            lines.extend(line for line in response.iter_lines() if line)

    reader = threading.Thread(target=consume)
    reader.start()
    deadline = time.monotonic() + 5
    while not any(r.query.get("watch") for r in api.requests) and time.monotonic() < deadline:
        time.sleep(0.01)
    api.put(cm("a"))
    started = time.monotonic()
    api.stop()
    reader.join(5)
    assert not reader.is_alive() and time.monotonic() - started < 2
    assert [json.loads(line)["type"] for line in lines] == ["ADDED"]
    assert api.errors == []


def test_drop_watches_cuts_streams_without_a_clean_end(kube_api: FakeKubeAPI) -> None:
    errors: list[BaseException] = []
    lines: list[bytes] = []

    def consume() -> None:
        try:
            with requests.get(f"{kube_api.url}/api/v1/configmaps?watch=true", stream=True, timeout=5) as response:
                lines.extend(line for line in response.iter_lines() if line)
        except requests.RequestException as exc:
            errors.append(exc)

    reader = threading.Thread(target=consume)
    reader.start()
    deadline = time.monotonic() + 5
    while not any(r.query.get("watch") for r in kube_api.requests) and time.monotonic() < deadline:
        time.sleep(0.01)
    kube_api.put(cm("a"))
    while not lines and time.monotonic() < deadline:
        time.sleep(0.01)
    assert kube_api.drop_watches() == 1
    reader.join(5)
    assert not reader.is_alive() and len(lines) == 1
    assert len(errors) == 1  # the chunked body ended without its terminating chunk


def test_compact_makes_older_resource_versions_expire(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    before = kube_api.resource_version
    kube_api.put(cm("a"))
    kube_api.compact()
    with pytest.raises(ApiException) as expired:
        for _ in watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=before, timeout_seconds=5
        ):
            pass
    assert expired.value.status == 410
    current = watch.Watch().stream(
        core.list_namespaced_config_map, "default", resource_version=kube_api.resource_version, timeout_seconds=1
    )
    kube_api.put(cm("b"))
    assert take(current, 1) == [("ADDED", "b")]
