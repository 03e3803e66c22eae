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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubernetes import client

from app import metrics
from app.admission.devices.base import Device
from app.quota.core.encoding import MANAGED_BY, Ledger, resource_version
from app.quota.core.gang import Gang
from app.quota.core.scene import View
from app.quota.core.standing import Standing, standing
from app.quota.feed import gauges
from app.quota.feed.groups import GroupTable, group_streams
from app.quota.feed.stream import Stream, Streams
from app.quota.feed.tables import LedgerTable, PodTable, QuotaTable, say_found_at_start, say_uncounted

log = logging.getLogger("hami_webhook.quota")


class Feed:
    """The process's view of device usage, limits and ledgers (app/quota/ports.py's FeedView), kept current by its
    streams' threads, and what its readiness and gauges read of it.

    ``_lock`` guards the tables and what the feed knows of its streams: which namespaces' Pods are watched and how
    far each has been seen, and when each stream broke or was last answered. Every method takes it once (a wait lets
    it go while it waits); nothing else is locked or called out (streams started, metrics set, lines logged) while it
    is held."""

    def __init__(
        self,
        api_client: client.ApiClient,
        devices: Sequence[Device],
        *,
        forget_after: float,
        home: str,
        gangs: bool = True,
    ) -> None:
        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._lock = threading.Lock()
        # Waiters wake only for what they wait on: a Pod stream moving on, or a ledger changing.
        self._pods_moved = threading.Condition(self._lock)
        self._ledgers_moved = threading.Condition(self._lock)
        self.pods = PodTable(devices, forget_after)
        self._ttl = forget_after  # the reservation TTL: what an entry written without one holds, for the gauges
        self.quotas = QuotaTable(devices)
        self.ledgers = LedgerTable()
        self.streams = Streams(self._health)
        leases = client.CoordinationV1Api(api_client)
        quotas = self._core.list_resource_quota_for_all_namespaces
        self._quota_stream = Stream("resourcequotas", "resourcequotas", quotas, self._quotas_listed, self._quota_event)
        ledgers = functools.partial(leases.list_namespaced_lease, home, label_selector=MANAGED_BY)
        self._lease_stream = Stream("leases", "leases", ledgers, self._ledgers_listed, self._ledger_event)
        self.groups = GroupTable()
        self._group_streams = (
            [  # gangs' group objects: none when gang holds are off
                Stream(name, "podgroups", call, listed, event)
                for name, call, listed, event in group_streams(api_client, self._groups_listed, self._group_event)
            ]
            if gangs
            else []
        )
        self._pod_streams: dict[str, Stream] = {}  # the quota'd namespaces' Pod streams
        self._pods_at: dict[str, int] = {}  # per quota'd namespace: the rv its Pod watch reached (-1: not listed)
        self._quotas_in = False  # the ResourceQuotas have been listed
        self._broken: dict[Stream, float] = {}  # ResourceQuota and Pod streams broken now, since when
        self._answered: dict[Stream, float] = {}  # every stream: when its last list or watch was answered
        self._synced = threading.Event()
        self._gauges: threading.Thread | None = None

    # --- the view (FeedView) -------------------------------------------------------------------------

    def view(self, namespace: str, entries: Iterable[str] | None = None) -> View:
        """What this process knows of ``namespace`` now, read at once (a Pod counts in ``used`` and in ``taken``, or
        in neither); ``taken`` for ``entries`` (None: each entry of the ledger in the view)."""
        with self._lock:
            return self._view(namespace, entries)

    def gang(self, namespace: str, pod: Mapping[str, Any]) -> tuple[Gang | None, str]:
        """The Pod's gang from the group objects watched (app/quota/ports.py's Groups)."""
        with self._lock:
            return self.groups.gang(namespace, pod)

    def offer(self, found: Ledger) -> None:
        """A ledger this process read or wrote: newer than the cache, unless the watch was quicker."""
        with self._lock:
            self.ledgers.offer(found)
            self._ledgers_moved.notify_all()

    def wait_ledger(self, namespace: str, rv: int, timeout: float) -> Ledger | None:
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

    def wait_pods(self, namespace: str, rv: int, timeout: float) -> bool:
        """This process has listed the namespace's Pods and seen every Pod event up to resourceVersion ``rv`` (waits
        up to ``timeout``): Pods whose reservations another process dropped at ``rv`` are counted here too."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pods_at.get(namespace, -1) < max(rv, 0):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._pods_moved.wait(remaining):
                    return False
            return True

    def wait_synced(self, timeout: float) -> bool:
        """The first lists are in: ResourceQuotas, and the Pods of every namespace that had a device quota then;
        waits up to ``timeout`` seconds for it (a freshly started worker)."""
        return self._synced.wait(timeout) if timeout > 0 else self._synced.is_set()

    # --- its life and health (the port's readiness, the gauges, the command) ------------------------

    def status(self) -> dict[str, Any]:
        with self._lock:
            synced = {"pods": all(at >= 0 for at in self._pods_at.values()), "resourcequotas": self._quotas_in}
            broken, tracked, watched = self._broken_for(), len(self.pods), len(self._pod_streams)
        return {
            "synced": synced,
            "broken_seconds": round(broken, 1),
            "pods_tracked": tracked,
            "namespaces_watched": watched,
        }

    def answered_since(self, moment: float) -> bool:
        """Every stream's list or watch has been answered since ``moment`` (monotonic)."""
        with self._lock:
            streams = [self._quota_stream, self._lease_stream, *self._pod_streams.values()]
            return all(self._answered.get(s, 0.0) >= moment for s in streams)

    def quota_in_play(self) -> bool:
        """A namespace has a device quota: only then does anything depend on reaching the API server."""
        with self._lock:
            return bool(self._pod_streams)

    def nudge(self) -> None:
        self.streams.nudge()

    def standings(self, now: float) -> list[Standing]:
        """Every quota'd namespace whose Pods have been listed, as this process sees it at ``now`` (its monotonic
        clock, the one its first sights of ledger entries are on); no API call. Viewed under the lock, counted
        after it."""
        with self._lock:
            listed = sorted(ns for ns, at in self._pods_at.items() if at >= 0)
            views = [(self._view(ns, None), self.quotas.objects(ns), self.pods.count(ns)) for ns in listed]
        return [standing(view, quotas, pods, now=now, ttl=self._ttl) for view, quotas, pods in views]

    def threads(self) -> list[threading.Thread]:
        gauges = [self._gauges] if self._gauges is not None else []
        return self.streams.threads() + gauges

    def start(self) -> None:
        for name in ("pods", "resourcequotas"):
            metrics.quota_feed_synced(name, False)
        for stream in (self._quota_stream, self._lease_stream, *self._group_streams):
            self.streams.start(stream)
        what = (self.standings, self._synced, self.streams.stopping)
        self._gauges = threading.Thread(target=gauges.publish, args=what, name="quota gauges", daemon=True)
        self._gauges.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End every thread: wake their backoff waits and cut their open watches."""
        self.streams.stop(timeout)
        if self._gauges is not None:
            self._gauges.join(timeout)
        self._api_client.close()

    # --- what the streams find (their threads, no lock held on the way in) ----------------------------

    def _quotas_listed(self, stream: Stream, items: list[dict[str, Any]], rv: str) -> None:
        with self._lock:
            self.quotas.replace(items)
            self._quotas_in = True
            started, ended = self._watch_namespaces()
        self._restream(started, ended)

    def _quota_event(self, stream: Stream, kind: str, obj: Mapping[str, Any], rv: str) -> None:
        if kind == "BOOKMARK":
            return
        with self._lock:
            self.quotas.apply(kind, obj)
            started, ended = self._watch_namespaces()
        self._restream(started, ended)

    def _ledgers_listed(self, stream: Stream, items: list[dict[str, Any]], rv: str) -> None:
        with self._lock:
            found = self.ledgers.replace(items)
            self._ledgers_moved.notify_all()
        say_found_at_start(found)

    def _ledger_event(self, stream: Stream, kind: str, obj: Mapping[str, Any], rv: str) -> None:
        if kind == "BOOKMARK":
            return
        with self._lock:
            self.ledgers.apply(kind, obj)
            self._ledgers_moved.notify_all()

    def _groups_listed(self, api: str, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self.groups.replace(api, items)

    def _group_event(self, api: str, kind: str, obj: Mapping[str, Any]) -> None:
        with self._lock:
            self.groups.apply(api, kind, obj)

    def _pods_listed(self, stream: Stream, items: list[dict[str, Any]], rv: str) -> None:
        with self._lock:
            if self._pod_streams.get(stream.namespace) is not stream:
                return  # its namespace's quota went meanwhile
            uncounted = self.pods.replace(stream.namespace, items)
            self._pods_at[stream.namespace] = max(resource_version(rv), 0)
            self._pods_moved.notify_all()
            synced = self._first_sync()
        say_uncounted(uncounted)
        if synced:
            self._synced.set()

    def _pod_event(self, stream: Stream, kind: str, obj: Mapping[str, Any], rv: str) -> None:
        with self._lock:
            if self._pod_streams.get(stream.namespace) is not stream:
                return
            uncounted = self.pods.apply(kind, obj) if kind != "BOOKMARK" else None
            self._pods_at[stream.namespace] = max(resource_version(rv), 0)
            self._pods_moved.notify_all()
        if uncounted is not None:
            say_uncounted([uncounted])

    def _health(self, stream: Stream) -> None:
        """The stream was answered, or broke: what readiness and the sync gauges read."""
        with self._lock:
            current = stream in (self._quota_stream, self._lease_stream) or (
                self._pod_streams.get(stream.namespace) is stream
            )
            broken = stream.broken_since if current else None
            if current and broken is None:
                self._answered[stream] = time.monotonic()
                self._broken.pop(stream, None)
            elif broken is not None and stream is not self._lease_stream:  # a stale ledger costs retries only
                self._broken[stream] = broken
            synced = self._in_sync()
        self._publish_sync(synced)

    # --- helpers (lock held) ------------------------------------------------------------------------------

    def _watch_namespaces(self) -> tuple[list[Stream], list[Stream]]:
        """The Pod streams to start (namespaces that got a device quota) and to end (those whose quota went),
        after the ResourceQuota table changed; forgets the ended ones' Pods."""
        wanted = self.quotas.namespaces()
        ended = [self._pod_streams.pop(namespace) for namespace in set(self._pod_streams) - wanted]
        for stream in ended:
            del self._pods_at[stream.namespace]
            self._broken.pop(stream, None)
            self._answered.pop(stream, None)
            self.pods.forget_namespace(stream.namespace)
        started = []
        for namespace in wanted - set(self._pod_streams):
            list_call = functools.partial(self._core.list_namespaced_pod, namespace)
            stream = Stream(f"pods in {namespace}", "pods", list_call, self._pods_listed, self._pod_event, namespace)
            self._pod_streams[namespace] = stream
            self._pods_at[namespace] = -1
            started.append(stream)
        return started, ended

    def _restream(self, started: list[Stream], ended: list[Stream]) -> None:
        """Start and end the Pod streams ``_watch_namespaces`` chose (lock released)."""
        for stream in ended:
            self.streams.end(stream)
            log.info("quota feed: no device quota in namespace %s any more; its Pods are not watched", stream.namespace)
        for stream in started:
            self.streams.start(stream)
        with self._lock:
            synced, first = self._in_sync(), self._first_sync()
        self._publish_sync(synced)
        if first:
            self._synced.set()

    def _first_sync(self) -> bool:
        """The first sync is complete once the quotas and every quota'd namespace's Pods are listed."""
        return self._quotas_in and all(at >= 0 for at in self._pods_at.values())

    def _in_sync(self) -> dict[str, bool]:
        """Per resource the sync gauges export: listed, and no stream of it broken."""
        broken = {s.resource for s in self._broken}
        pods = all(at >= 0 for at in self._pods_at.values())
        return {
            "pods": pods and "pods" not in broken,
            "resourcequotas": self._quotas_in and self._quota_stream not in self._broken,
        }

    def _broken_for(self) -> float:
        """Seconds the longest-broken ResourceQuota or Pod stream has been unable to list or watch (0: none is)."""
        return time.monotonic() - min(self._broken.values()) if self._broken else 0.0

    def _view(self, namespace: str, entries: Iterable[str] | None) -> View:
        limits, pods_at = self.quotas.limits(namespace), self._pods_at.get(namespace, -1)
        synced, broken = self._synced.is_set(), self._broken_for()
        if not limits:  # no device quota: nothing else of it counts (the common case, asked on every review)
            return View(namespace, limits, None, {}, {}, {}, pods_at, synced, broken)
        ledger = self.ledgers.get(namespace)
        wanted = entries if entries is not None else (ledger.entries if ledger is not None else ())
        taken = self.pods.seen(namespace, wanted)
        used, first_seen = self.pods.used(namespace), self.ledgers.first_seen(namespace)
        members = self.pods.members(namespace)
        holds = [e.hold.group for e in (ledger.entries.values() if ledger else ()) if e.hold is not None]
        gone = self.groups.gone(namespace, holds) if holds else frozenset()
        return View(namespace, limits, ledger, first_seen, used, taken, pods_at, synced, broken, members, gone)

    @staticmethod
    def _publish_sync(synced: dict[str, bool]) -> None:
        for resource, value in synced.items():
            metrics.quota_feed_synced(resource, value)
