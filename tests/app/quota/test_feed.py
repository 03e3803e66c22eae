"""The list + watch feed against a real API server: resume after a dropped connection, re-list on 410 Gone,
bookmarks, backoff, stop."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import pytest
from prometheus_client import REGISTRY

from app.kube import stream
from testbed.cluster import RealKube
from testbed.pods import container, pod
from testbed.polling import eventually
from tests.app.quota.conftest import GPU, MEM, Cluster, in_use, unique
from tests.realkube.faults import Request

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


def gpu_pod(name: str, memory: int) -> dict[str, Any]:
    obj = pod(container(limits={GPU: "1", MEM: str(memory)}))
    obj["metadata"] = {"name": name}
    return obj


def pod_path(cluster: Cluster) -> str:
    """Where the feed lists and watches the quota'd namespace's Pods (and no others)."""
    return f"/api/v1/namespaces/{cluster.ns}/pods"


def pod_requests(cluster: Cluster, *, watch: bool) -> list[Request]:
    return [
        r
        for r in cluster.proxy.requests
        if r.path == pod_path(cluster) and (parse_qs(r.query).get("watch", [""])[0] in ("true", "1")) == watch
    ]


def pod_lists(cluster: Cluster) -> int:
    return len(pod_requests(cluster, watch=False))


def memory(port, cluster: Cluster) -> int:
    return in_use(port.feed, cluster.ns, {}).get(MEM, 0)


def test_a_dropped_watch_resumes_without_missing_an_event(cluster: Cluster, start_quota) -> None:
    cluster.quota({MEM: "100000"})
    port, _ = start_quota()
    cluster.create_pod(gpu_pod("a", 1000))
    eventually(lambda: memory(port, cluster) == 1000, what="pod a")
    assert cluster.proxy.drop_watches() >= 3  # ResourceQuotas, ledgers, this namespace's Pods (and others')
    cluster.create_pod(gpu_pod("b", 2000))  # written while the feed reconnects
    cluster.delete_pod("a")
    eventually(lambda: memory(port, cluster) == 2000, what="pod b added and pod a deleted")
    assert pod_lists(cluster) == 1  # resumed from its resourceVersion: no re-list needed
    assert len(pod_requests(cluster, watch=True)) == 2


def test_events_split_over_chunks_are_read_whole(cluster: Cluster, start_quota) -> None:
    """A watch's events reach the feed in chunks of any size (a proxy in between re-chunks the stream): one event
    split over many chunks, the end of one and the start of the next in one chunk."""
    cluster.proxy.watch_chunk = 97  # a Pod event is kilobytes
    cluster.quota({MEM: "100000"})
    port, _ = start_quota()
    for i in range(5):
        cluster.create_pod(gpu_pod(f"split-{i}", 1000))
    eventually(lambda: memory(port, cluster) == 5000, what="five pods watched through 97-byte chunks")
    assert pod_requests(cluster, watch=True)  # they came by the watch, not a list


def test_only_the_pods_of_quotad_namespaces_are_listed_and_watched(cluster: Cluster, start_quota) -> None:
    """A worker's cost follows the quota'd namespaces' Pods: no cluster-wide Pod list or watch; a namespace's
    stream starts with its first device quota (counting the Pods already there, admitted by the webhook or
    not) and stops with its last."""
    cluster.create_pod(gpu_pod("before", 1000))  # never admitted by a webhook: counts once the quota comes
    port, _ = start_quota()
    assert pod_requests(cluster, watch=False) == [] and in_use(port.feed, cluster.ns, {}) == {}
    cluster.quota({MEM: "100000"})
    eventually(lambda: memory(port, cluster) == 1000, what="the namespace's Pods listed once it has a quota")
    cluster.quota({"limits.cpu": "4"})  # no device quota any more
    eventually(lambda: not any(cluster.ns in t.name for t in port.streams.threads()), what="its stream to stop")
    eventually(lambda: memory(port, cluster) == 0, what="its Pods forgotten")
    assert not any(r.path == "/api/v1/pods" for r in cluster.proxy.requests)


def test_410_gone_lists_again(cluster: Cluster, start_quota) -> None:
    """A watch that can no longer resume (its resourceVersion left the API server's window) gets 410: only a
    new list shows what happened meanwhile, deletions included. A real server answers so only once the
    resourceVersion is older than its watch cache holds, which a test cannot bring about on cue: the proxy
    answers the reconnecting watch with the 410, and the changes land just before the re-list."""
    cluster.quota({MEM: "100000"})
    port, _ = start_quota()
    cluster.create_pod(gpu_pod("a", 1000))
    eventually(lambda: memory(port, cluster) == 1000, what="pod a")

    def meanwhile(kube: RealKube) -> None:
        cluster.create_pod(gpu_pod("b", 2000))
        cluster.delete_pod("a")
        kube.compact()

    cluster.proxy.fail_next("GET", f"^{pod_path(cluster)}$", 410, message="too old resource version: 1 (2)")
    cluster.proxy.before("GET", f"^{pod_path(cluster)}$", meanwhile)
    cluster.proxy.drop_watches()
    eventually(lambda: memory(port, cluster) == 2000, what="the re-list")
    assert pod_lists(cluster) == 2


def test_a_quiet_watch_resumes_from_the_latest_resource_version(
    cluster: Cluster, start_quota, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Pod written in a namespace the feed does not watch advances the API server's Pod resourceVersion; the
    bookmark the server sends shortly before the watch times out carries it to the feed, so the next watch
    resumes from there and a quiet namespace never falls behind the window the server can resume from.
    The watches ask the server for a 5 s timeout instead of 30 to 45 s: the same bookmark, 30 s sooner."""
    monkeypatch.setattr(stream, "WATCH_SECONDS", (5, 5))
    cluster.quota({MEM: "100000"})
    start_quota()
    # ready once the lists are in: the first watch request follows them
    (first,) = eventually(lambda: pod_requests(cluster, watch=True), what="the first watch")
    elsewhere = unique("elsewhere")
    cluster.kube.namespace(elsewhere)
    try:
        cpu_pod = pod(container(limits={"cpu": "1"}))
        cpu_pod["metadata"] = {"name": "cpu"}
        written = cluster.core.create_namespaced_pod(elsewhere, cpu_pod).metadata.resource_version
        eventually(lambda: len(pod_requests(cluster, watch=True)) > 1, 30, "the watch to time out and resume")
    finally:
        cluster.kube.kubectl("delete", "namespace", "--wait=false", elsewhere)
    second = pod_requests(cluster, watch=True)[1]
    resumed_from = int(parse_qs(second.query)["resourceVersion"][0])
    assert resumed_from >= int(written) > int(parse_qs(first.query)["resourceVersion"][0])
    assert pod_lists(cluster) == 1


def test_failing_lists_back_off_then_sync(cluster: Cluster, start_quota) -> None:
    cluster.quota({MEM: "100000"})
    cluster.proxy.fail_next("GET", f"^{pod_path(cluster)}$", 500, times=3)
    port, _ = start_quota()
    assert pod_lists(cluster) == 4 and port.status()["ready"]  # three failures, each waited out (WATCH_RETRY)


def test_stop_is_prompt_with_open_watches(cluster: Cluster, start_quota) -> None:
    port, _ = start_quota()
    cluster.quota({MEM: "1"})
    eventually(lambda: port.feed.view(cluster.ns).limits, what="the quota")
    port.stop()  # joins each thread for at most 5 s: a watch that was not cut would run its 30 s and more
    assert not any(t.is_alive() for t in [*port.streams.threads(), port.gauges])


def synced(resource: str) -> float | None:
    return REGISTRY.get_sample_value("hami_webhook_quota_feed_synced", {"resource": resource})


def test_sync_state_is_exported_for_the_out_of_sync_alert(cluster: Cluster, start_quota) -> None:
    cluster.quota({MEM: "100000"})
    start_quota()
    assert synced("pods") == synced("resourcequotas") == 1
    cluster.proxy.fail_next("GET", f"^{pod_path(cluster)}$", 500, times=3)
    cluster.proxy.drop_watches()
    eventually(lambda: synced("pods") == 0, what="the broken pods stream reported")
    eventually(lambda: synced("pods") == 1, what="the pods stream reported in sync again")
    assert synced("resourcequotas") == 1


def test_a_podgroup_api_not_served_is_said_at_info_and_a_failing_one_warns(
    cluster: Cluster, start_quota, caplog: pytest.LogCaptureFixture
) -> None:  # fmt: skip
    """Volcano's PodGroup API is not served by a bare kube-apiserver (404): a cluster without Volcano is not broken.
    Coscheduling's list failing with a 500 is."""
    volcano = (
        "INFO",
        "quota feed: podgroups.scheduling.volcano.sh/v1beta1 is not served here; trying again with backoff",
    )
    failing = ("WARNING", "quota feed: podgroups.scheduling.x-k8s.io/v1alpha1 broken")

    def said() -> set[tuple[str, str]]:
        return {(r.levelname, r.getMessage().split(" (")[0]) for r in caplog.records if "podgroups" in r.getMessage()}

    cluster.proxy.fail_next("GET", r"^/apis/scheduling\.x-k8s\.io/v1alpha1/podgroups", 500, times=1)
    with caplog.at_level("INFO", logger="hami_webhook.quota"):
        start_quota()
        eventually(lambda: {volcano, failing} <= said(), timeout=10)
    assert not any(level == "WARNING" and "volcano" in message for level, message in said())
