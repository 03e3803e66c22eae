"""The list + watch feed: resume after a dropped connection, re-list on 410 Gone, bookmarks, backoff, stop."""

from __future__ import annotations

import time
from typing import Any

from tests.app.quota.conftest import GPU, MEM, QUOTA_NS, eventually, resource_quota
from tests.app.reviews import container, pod
from tests.kubeapi import FakeKubeAPI


def gpu_pod(name: str, memory: int) -> dict[str, Any]:
    obj = pod(container(limits={GPU: "1", MEM: str(memory)}), namespace=QUOTA_NS)
    obj["metadata"]["name"] = name
    return obj


def pod_lists(api: FakeKubeAPI) -> int:
    return sum(1 for r in api.requests if r.path == "/api/v1/pods" and not r.query.get("watch"))


def memory(port) -> int:
    return port.feed.in_use(QUOTA_NS, {}).get(MEM, 0)


def test_a_dropped_watch_resumes_without_missing_an_event(cluster: FakeKubeAPI, start_quota) -> None:
    port, _ = start_quota()
    cluster.put(gpu_pod("a", 1000))
    eventually(lambda: memory(port) == 1000, what="pod a")
    assert cluster.drop_watches() == 2
    cluster.put(gpu_pod("b", 2000))  # written while the feed reconnects
    cluster.delete("v1", "Pod", "a", QUOTA_NS)
    eventually(lambda: memory(port) == 2000, what="pod b added and pod a deleted")
    assert pod_lists(cluster) == 1  # resumed from its resourceVersion: no re-list needed


def test_410_gone_lists_again(cluster: FakeKubeAPI, start_quota) -> None:
    port, _ = start_quota()
    cluster.put(gpu_pod("a", 1000))
    eventually(lambda: memory(port) == 1000, what="pod a")

    def meanwhile(api: FakeKubeAPI) -> None:
        """Changes the feed's next watch can no longer replay: only a new list shows them."""
        api.put(gpu_pod("b", 2000))
        api.delete("v1", "Pod", "a", QUOTA_NS)
        api.compact()

    cluster.before("GET", "^/api/v1/pods$", meanwhile)
    cluster.drop_watches()
    eventually(lambda: memory(port) == 2000, what="the re-list")
    assert pod_lists(cluster) == 2


def test_bookmarks_keep_the_resource_version_current(cluster: FakeKubeAPI, start_quota) -> None:
    """Other kinds' writes advance the resourceVersion; bookmarks (every second here) carry it to the feed,
    so a resume after compaction finds its place instead of re-listing."""
    port, _ = start_quota()
    for i in range(3):
        cluster.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}", "namespace": QUOTA_NS}})
    time.sleep(1.5)
    cluster.compact()
    cluster.drop_watches()
    cluster.put(gpu_pod("a", 1000))
    eventually(lambda: memory(port) == 1000, what="pod a")
    assert pod_lists(cluster) == 1


def test_failing_lists_back_off_then_sync(cluster: FakeKubeAPI, start_quota) -> None:
    cluster.fail_next("GET", "^/api/v1/pods$", 500, times=3)
    started = time.monotonic()
    port, _ = start_quota()
    assert time.monotonic() - started >= 0.25 + 0.5 + 1.0  # the jittered waits are at least half of 0.5, 1, 2 s
    assert pod_lists(cluster) == 4 and port.status()["ready"]


def test_stop_is_prompt_with_open_watches(cluster: FakeKubeAPI, start_quota) -> None:
    port, _ = start_quota()
    cluster.put(resource_quota({MEM: "1"}))
    eventually(lambda: port.feed.limits(QUOTA_NS), what="the quota")
    started = time.monotonic()
    port.stop()
    assert time.monotonic() - started < 2
    assert not any(t.is_alive() for t in port.feed._threads)
