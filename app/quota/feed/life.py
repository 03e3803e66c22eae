"""Which of the feed's streams run, and how they are: the feed's I/O, apart from what it knows (app/quota/feed/feed.py).

The ResourceQuota, ledger Lease and PodGroup streams run from start to stop. A Pod stream runs per namespace with a
device quota: the Feed says, as each ResourceQuota change is taken in, which namespaces got their first and which
lost their last, and their streams start and end here. What readiness, the contact probe and the sync gauges read
of the streams (synced, broken, answered since) is kept here too; the Feed is told only since when a stream has been
broken, which each of its views reports.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from kubernetes import client

from app import metrics
from app.kube.stream import Stream, Streams
from app.quota.core.encoding import MANAGED_BY
from app.quota.feed.feed import Feed
from app.quota.feed.groups import group_streams

log = logging.getLogger("hami_webhook.quota")


class FeedStreams:
    """The streams that fill one Feed (app/quota/ports.py's StreamsPort): their threads (run by Streams), the Pod
    streams that follow the quota'd namespaces, and their health.

    ``_lock`` guards the Pod streams and when each stream broke or was last answered. The Feed may be called while it
    is held (the Feed calls nothing out, so this lock is always taken first): what it is told of the streams' health
    arrives in the order it changed. Threads are started and ended, metrics set and lines logged after it is let go.
    """

    def __init__(self, api_client: client.ApiClient, feed: Feed, *, home: str, gangs: bool = True) -> None:
        self._feed = feed
        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._lock = threading.Lock()
        self._streams = Streams(self._health)
        quotas = self._core.list_resource_quota_for_all_namespaces
        self._quotas = Stream("resourcequotas", "resourcequotas", quotas, self._quotas_listed, self._quota_event)
        leases = client.CoordinationV1Api(api_client)
        ledgers = functools.partial(leases.list_namespaced_lease, home, label_selector=MANAGED_BY)
        self._leases = Stream("leases", "leases", ledgers, feed.ledgers_listed, feed.ledger_event)
        self._groups = (
            [  # gangs' group objects: none when gang holds are off
                Stream(name, "podgroups", call, listed, event)
                for name, call, listed, event in group_streams(api_client, feed.groups_listed, feed.group_event)
            ]
            if gangs
            else []
        )
        self._pods: dict[str, Stream] = {}  # the quota'd namespaces' Pod streams
        self._broken: dict[Stream, float] = {}  # ResourceQuota and Pod streams broken now, since when
        self._answered: dict[Stream, float] = {}  # every stream: when its last list or watch was answered

    # --- readiness and the contact probe (StreamsPort) -----------------------------------------------

    def status(self) -> dict[str, Any]:
        synced, tracked = self._feed.listed(), self._feed.tracked()
        with self._lock:
            broken, watched = self._broken_for(), len(self._pods)
        return {
            "synced": synced,
            "broken_seconds": round(broken, 1),
            "pods_tracked": tracked,
            "namespaces_watched": watched,
        }

    def answered_since(self, moment: float) -> bool:
        """Every stream's list or watch has been answered since ``moment`` (monotonic)."""
        with self._lock:
            streams = [self._quotas, self._leases, *self._pods.values()]
            return all(self._answered.get(s, 0.0) >= moment for s in streams)

    def quota_in_play(self) -> bool:
        """A namespace has a device quota: only then does anything depend on reaching the API server."""
        with self._lock:
            return bool(self._pods)

    def nudge(self) -> None:
        self._streams.nudge()

    @property
    def stopping(self) -> threading.Event:
        """Set once the streams stop: what ends the threads that live as long as they do (the quota gauges)."""
        return self._streams.stopping

    def threads(self) -> list[threading.Thread]:
        return self._streams.threads()

    def start(self) -> None:
        for name in ("pods", "resourcequotas"):
            metrics.quota_feed_synced(name, False)
        for stream in (self._quotas, self._leases, *self._groups):
            self._streams.start(stream)

    def stop(self, timeout: float) -> None:
        """End every thread (waiting up to ``timeout`` for each): wake their backoff waits, cut their open watches."""
        self._streams.stop(timeout)
        self._api_client.close()

    # --- what the ResourceQuota stream finds, and the streams' health (their threads, no lock held) ---

    def _quotas_listed(self, stream: Stream, items: list[dict[str, Any]], rv: str) -> None:
        self._restream(*self._feed.quotas_listed(items))

    def _quota_event(self, stream: Stream, kind: str, obj: Mapping[str, Any], rv: str) -> None:
        if kind != "BOOKMARK":
            self._restream(*self._feed.quota_event(kind, obj))

    def _restream(self, started: list[str], ended: list[str]) -> None:
        """Start the Pod streams of the namespaces that got a device quota, end those of the namespaces whose last
        one went (the Feed's choice: it counts their Pods from their first list, or has forgotten them)."""
        with self._lock:
            gone = [self._pods.pop(namespace) for namespace in ended]
            for stream in gone:
                self._broken.pop(stream, None)
                self._answered.pop(stream, None)
            self._feed.broken(self._broken_since())
            new = [self._pod_stream(namespace) for namespace in started]
        for stream in gone:
            self._streams.end(stream)
            log.info("quota feed: no device quota in namespace %s any more; its Pods are not watched", stream.namespace)
        for stream in new:
            self._streams.start(stream)
        with self._lock:
            synced = self._in_sync()
        self._publish_sync(synced)

    def _health(self, stream: Stream) -> None:
        """The stream was answered, or broke: what readiness and the sync gauges read."""
        with self._lock:
            current = stream in (self._quotas, self._leases) or self._pods.get(stream.namespace) is stream
            broken = stream.broken_since if current else None
            if current and broken is None:
                self._answered[stream] = time.monotonic()
                self._broken.pop(stream, None)
            elif broken is not None and stream is not self._leases:  # a stale ledger costs retries only
                self._broken[stream] = broken
            self._feed.broken(self._broken_since())
            synced = self._in_sync()
        self._publish_sync(synced)

    # --- helpers (lock held) ------------------------------------------------------------------------------

    def _pod_stream(self, namespace: str) -> Stream:
        list_call = functools.partial(self._core.list_namespaced_pod, namespace)
        stream = Stream(
            f"pods in {namespace}", "pods", list_call, self._feed.pods_listed, self._feed.pod_event, namespace
        )
        self._pods[namespace] = stream
        return stream

    def _in_sync(self) -> dict[str, bool]:
        """Per resource the sync gauges export: listed, and no stream of it broken."""
        broken = {s.resource for s in self._broken}
        listed = self._feed.listed()
        return {
            "pods": listed["pods"] and "pods" not in broken,
            "resourcequotas": listed["resourcequotas"] and self._quotas not in self._broken,
        }

    def _broken_since(self) -> float | None:
        """Since when the longest-broken ResourceQuota or Pod stream has been unable to list or watch (None: none
        is)."""
        return min(self._broken.values()) if self._broken else None

    def _broken_for(self) -> float:
        since = self._broken_since()
        return time.monotonic() - since if since is not None else 0.0

    @staticmethod
    def _publish_sync(synced: dict[str, bool]) -> None:
        for resource, value in synced.items():
            metrics.quota_feed_synced(resource, value)
