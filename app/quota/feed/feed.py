"""Device usage, limits and ledgers, from list + watch streams kept by one Feed per process.

ResourceQuotas are watched cluster-wide (they are few). Pods are watched only in the namespaces that have a
device quota: a namespace's stream starts when its first device ResourceQuota appears and stops when the last
one goes, so a worker's cost grows with the quota'd namespaces' Pods, not with the cluster's. Every Pod there
is counted, admitted by the webhook or not. The ledger Leases in the webhook's own namespace are watched too:
a cache that spares a read before each compare-and-swap (a stale copy only costs a 409).

The streams (list, watch, recovery) are app/quota/feed/stream.py's; what they keep is app/quota/feed/tables.py's.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from kubernetes import client

from app import metrics
from app.admission.devices.base import Device
from app.quota.core.amounts import Amounts
from app.quota.core.decision import Taken
from app.quota.core.encoding import MANAGED_BY, Snapshot, resource_version
from app.quota.core.standing import Standing, standing
from app.quota.feed.stream import Stream, Streams, cut
from app.quota.feed.tables import LedgerTable, NamespacePods, PodTable, QuotaTable

log = logging.getLogger("hami_webhook.quota")
GAUGES_EVERY = 1.0  # seconds between refreshes of the quota gauges (published only when they changed)


class Feed(Streams):
    """The process's view of device usage, limits and ledgers, kept current by daemon threads."""

    def __init__(
        self, api_client: client.ApiClient, devices: Sequence[Device], *, forget_after: float, home: str
    ) -> None:
        super().__init__()
        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)
        # Waiters wake only for what they wait on: a Pod stream moving on (the mark), or a ledger changing.
        self._pods_moved = threading.Condition(self._lock)
        self._ledgers_moved = threading.Condition(self._lock)
        self.pods = PodTable(devices, forget_after)
        self._ttl = forget_after  # the reservation TTL: what an entry written without one holds, for the gauges
        self.quotas = QuotaTable(devices)
        self.ledgers = LedgerTable()
        leases = client.CoordinationV1Api(api_client)
        self._quota_stream = Stream(
            "resourcequotas", "resourcequotas", self._core.list_resource_quota_for_all_namespaces, self.quotas
        )
        self._lease_stream = Stream(
            "leases",
            "leases",
            functools.partial(leases.list_namespaced_lease, home, label_selector=MANAGED_BY),
            self.ledgers,
        )
        self._pod_streams: dict[str, Stream] = {}
        self._synced = threading.Event()
        self._gauges: threading.Thread | None = None

    # --- reads (any thread) ------------------------------------------------------------------------

    def limits(self, namespace: str) -> Amounts:
        with self._lock:
            return self.quotas.limits(namespace)

    def seen(self, namespace: str, reservations: Iterable[str]) -> tuple[Amounts, dict[str, Taken]]:
        """The namespace's Pod usage, and what the Pods carrying each of ``reservations`` took, read together: a
        Pod is in both or in neither (read apart, a Pod seen in between would count in neither)."""
        with self._lock:
            taken = {r: self.pods.taken(namespace, r) for r in reservations}
            return self.pods.used(namespace), {
                r: Taken(dict(found.amounts), found.rv) for r, found in taken.items() if found is not None
            }

    def ledger(self, namespace: str) -> Snapshot | None:
        with self._lock:
            return self.ledgers.get(namespace)

    def first_seen(self, namespace: str) -> dict[str, float]:
        with self._lock:
            return self.ledgers.first_seen(namespace)

    def offer_ledger(self, found: Snapshot) -> None:
        """A ledger this process read or wrote: newer than the cache, unless the watch was quicker."""
        with self._lock:
            self.ledgers.offer(found)
            self._ledgers_moved.notify_all()

    def wait_ledger_newer(self, namespace: str, rv: int, timeout: float) -> Snapshot | None:
        """The cached ledger once it is newer than ``rv`` (None if it does not get newer within ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = self.ledgers.get(namespace)
                if found is not None and found.rv > rv:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._ledgers_moved.wait(remaining):
                    return None

    def wait_ledgers(self, timeout: float) -> None:
        """Until a ledger changes (the watch, or this process's own read or write), or ``timeout`` seconds."""
        with self._lock:
            self._ledgers_moved.wait(timeout)

    def caught_up(self, namespace: str, rv: int, timeout: float) -> bool:
        """This process has seen every Pod event of ``namespace`` up to resourceVersion ``rv`` (waits up to
        ``timeout``): Pods whose reservations another process dropped at ``rv`` are counted here too."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                stream = self._pod_streams.get(namespace)
                if stream is not None and stream.synced and resource_version(stream.rv) >= rv:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._pods_moved.wait(remaining):
                    return False

    def standings(self, now: float) -> list[Standing]:
        """Every quota'd namespace whose Pods have been listed, as this process sees it at ``now`` (its monotonic
        clock, the one its first sights of ledger entries are on); no API call."""
        with self._lock:
            listed = sorted(ns for ns, s in self._pod_streams.items() if s.listed.is_set())
            return [
                standing(
                    ns,
                    self.quotas,
                    self.pods,
                    self.ledgers.get(ns),
                    now=now,
                    ttl=self._ttl,
                    first_seen=self.ledgers.first_seen(ns),
                )
                for ns in listed
            ]

    def synced(self, wait: float = 0) -> bool:
        """The first lists are in: ResourceQuotas, and the Pods of every namespace that had a device quota
        then; waits up to ``wait`` seconds for it (a freshly started worker)."""
        return self._synced.wait(wait) if wait else self._synced.is_set()

    def namespace_synced(self, namespace: str, wait: float = 0) -> bool:
        """The Pods of a quota'd namespace have been listed (a quota that just appeared: its first list)."""
        with self._lock:
            stream = self._pod_streams.get(namespace)
        return stream is not None and (stream.listed.wait(wait) if wait else stream.listed.is_set())

    def broken_for(self) -> float:
        """Seconds the longest-broken ResourceQuota or Pod stream has been unable to list or watch (0 when all
        are connected). The ledger stream is not counted: a stale ledger cache costs retries, not exactness."""
        with self._lock:
            streams = [self._quota_stream, *self._pod_streams.values()]
        since = [s.broken_since for s in streams if s.broken_since is not None]
        return time.monotonic() - min(since) if since else 0.0

    def status(self) -> dict[str, Any]:
        with self._lock:
            pods = list(self._pod_streams.values())
        return {
            "synced": {"pods": all(s.synced for s in pods), "resourcequotas": self._quota_stream.synced},
            "broken_seconds": round(self.broken_for(), 1),
            "pods_tracked": len(self.pods),
            "namespaces_watched": len(pods),
        }

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        for name in ("pods", "resourcequotas"):
            metrics.quota_feed_synced(name, False)
        for stream in (self._quota_stream, self._lease_stream):
            self._start(stream)
        self._gauges = threading.Thread(target=self._publish_gauges, name="quota gauges", daemon=True)
        self._gauges.start()

    def _publish_gauges(self) -> None:
        """The quota gauges from this process's tables, refreshed apart from any admission: a scrape reads what
        was published last, and costs neither an API call nor the feed's lock."""
        last: list[Standing] | None = None
        while not self._stop.wait(GAUGES_EVERY):
            if not self._synced.is_set():  # a fresh worker publishes nothing rather than too little
                continue
            found = self.standings(time.monotonic())
            if found != last:
                rows = [(s.namespace, f.resource, f.quota, f.limit, f.used, f.held) for s in found for f in s.figures]
                metrics.quota_standings(rows)
                last = found

    def stop(self, timeout: float = 5.0) -> None:
        """End every thread: wake their backoff waits and cut their open watches."""
        self._stop.set()
        with self._lock:
            self._nudged.notify_all()
            streams = self._all()
        for stream in streams:
            cut(stream)
        for stream in streams:
            if stream.thread is not None:
                stream.thread.join(timeout)
        if self._gauges is not None:
            self._gauges.join(timeout)
        self._api_client.close()

    def threads(self) -> list[threading.Thread]:
        with self._lock:
            streams = self._all()
        return [s.thread for s in streams if s.thread is not None]

    def quota_in_play(self) -> bool:
        """A namespace has a device quota: only then does anything depend on reaching the API server."""
        with self._lock:
            return bool(self._pod_streams)

    def _all(self) -> list[Stream]:
        return [self._quota_stream, self._lease_stream, *self._pod_streams.values()]

    def _watch_namespaces(self) -> None:
        """Start a Pod stream for each namespace that got a device quota, stop those whose quota went.
        Called with the lock held, after the ResourceQuota table changed."""
        wanted = self.quotas.namespaces()
        for namespace in set(self._pod_streams) - wanted:
            stream = self._pod_streams.pop(namespace)
            stream.stopped = True
            cut(stream)
            self.pods.forget_namespace(namespace)
            log.info("quota feed: no device quota in namespace %s any more; its Pods are not watched", namespace)
        for namespace in wanted - set(self._pod_streams):
            list_call = functools.partial(self._core.list_namespaced_pod, namespace)
            stream = Stream(f"pods in {namespace}", "pods", list_call, NamespacePods(self.pods, namespace), namespace)
            self._pod_streams[namespace] = stream
            self._start(stream)
        self._report("pods")

    # --- what the streams' progress means (lock held) ------------------------------------------------

    def _changed(self, stream: Stream) -> None:
        if stream is self._quota_stream:
            self._watch_namespaces()

    def _report(self, resource: str) -> None:
        """Export the resource's sync state (pods: all namespaces' streams together)."""
        if resource == "leases":
            return
        streams = list(self._pod_streams.values()) if resource == "pods" else [self._quota_stream]
        metrics.quota_feed_synced(resource, all(s.synced and s.broken_since is None for s in streams))

    def _moved(self, stream: Stream) -> None:
        """Wake whoever waits on this kind of stream."""
        if stream is self._lease_stream:
            self._ledgers_moved.notify_all()
        elif stream.namespace:
            self._pods_moved.notify_all()

    def _listed(self, stream: Stream) -> None:
        """The first sync is complete once the quotas and every quota'd namespace's Pods are listed."""
        if (
            not self._synced.is_set()
            and self._quota_stream.synced
            and all(s.synced for s in self._pod_streams.values())
        ):
            self._synced.set()
