"""Which namespaces' Pods the Feed counts, and from which Pod stream (app/quota/feed/feed.py, no I/O): a namespace
from its first device ResourceQuota to its last, each Pod stream's finds only while its namespace is counted and the
stream has not been ended. The streams are never run here: what they would find is handed to the Feed as
FeedStreams hands it (app/quota/feed/life.py)."""

from __future__ import annotations

from typing import Any

from app.kube.stream import Stream, Streams
from app.quota.feed.feed import Feed
from app.settings import Settings
from testbed.pods import container, pod

MEM, GPU = "nvidia.com/gpumem", "nvidia.com/gpu"
NS = "ai"


def rq(hard: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "gpu", "namespace": NS}, "spec": {"hard": hard}}


def stored(uid: str, memory: int, rv: int) -> dict[str, Any]:
    obj = pod(container(limits={GPU: "1", MEM: str(memory)}), name=uid, namespace=NS)
    obj["metadata"] |= {"uid": uid, "resourceVersion": str(rv)}
    return obj


def pod_stream(feed: Feed) -> Stream:
    """A Pod stream of NS as FeedStreams makes it, never run (its list call is never made)."""
    return Stream(f"pods in {NS}", "pods", lambda **_: None, feed.pods_listed, feed.pod_event, NS)


def test_a_namespace_is_counted_from_its_first_device_quota_to_its_last() -> None:
    feed = Feed(Settings.from_env({}).devices, forget_after=60)
    assert feed.quotas_listed([rq({"limits.cpu": "4"})]) == ([], [])  # no device quota: no Pod stream
    assert feed.wait_synced(0) and feed.listed() == {"pods": True, "resourcequotas": True}
    assert feed.quota_event("MODIFIED", rq({MEM: "8000"})) == ([NS], [])
    assert feed.listed() == {"pods": False, "resourcequotas": True} and feed.view(NS).pods_at == -1
    stream = pod_stream(feed)
    stream.listed(stream, [stored("a", 1000, 10)], "12")
    assert feed.view(NS).used == {MEM: 1000, GPU: 1} and feed.view(NS).pods_at == 12 and feed.tracked() == 1
    assert feed.quota_event("DELETED", rq({MEM: "8000"})) == ([], [NS])
    assert feed.tracked() == 0 and feed.standings(0.0) == [] and feed.view(NS).pods_at == -1


def test_a_pod_stream_ended_counts_nothing_it_finds_late() -> None:
    """A stream's thread may deliver what it found just after its namespace lost its quota, even after the namespace
    got one again and a new stream was made: the Feed counts it only while the namespace is counted and the stream
    was not ended (FeedStreams ends it before the next ResourceQuota change is taken in)."""
    feed = Feed(Settings.from_env({}).devices, forget_after=60)
    feed.quotas_listed([rq({MEM: "8000"})])
    old = pod_stream(feed)
    old.listed(old, [stored("a", 1000, 10)], "10")
    feed.quota_event("DELETED", rq({MEM: "8000"}))
    old.event(old, "ADDED", stored("b", 2000, 11), "11")  # not ended yet, but its namespace is not counted
    assert feed.tracked() == 0
    Streams(lambda stream: None).end(old)
    assert feed.quota_event("ADDED", rq({MEM: "8000"})) == ([NS], [])
    old.event(old, "ADDED", stored("c", 3000, 13), "13")  # counted again, by another stream
    assert feed.view(NS).used == {} and feed.view(NS).pods_at == -1
    new = pod_stream(feed)
    new.listed(new, [stored("a", 1000, 10)], "14")
    assert feed.view(NS).used == {MEM: 1000, GPU: 1} and feed.view(NS).pods_at == 14
