"""Device usage, limits and ledgers, as one Feed per process knows them from its list + watch streams.

ResourceQuotas are watched cluster-wide (they are few). Pods are counted only in the namespaces that have a device
quota: a namespace's Pods are counted from its first device ResourceQuota's arrival to its last one's going, so a
worker's cost grows with the quota'd namespaces' Pods, not with the cluster's. Every Pod there is counted, admitted
by the webhook or not. The ledger Leases in the webhook's own namespace are watched too: a cache that spares a read
before each compare-and-swap (a stale copy only costs a 409).

The Feed does no I/O: which streams run, and their threads and health, are app/quota/feed/life.py's; the list +
watch machinery is app/kube/stream.py's; what the Feed keeps is app/quota/feed/tables.py's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from app.admission.devices.base import Device
from app.kube.stream import Stream
from app.quota.core.encoding import Ledger, resource_version
from app.quota.core.gang import Gang
from app.quota.core.scene import View
from app.quota.core.standing import Standing, standing
from app.quota.feed.groups import GroupTable
from app.quota.feed.tables import LedgerTable, PodTable, QuotaTable, say_found_at_start, say_uncounted


class Feed:
    """The process's view of device usage, limits and ledgers (app/quota/ports.py's FeedView and FeedPort): what its
    streams found (app/quota/feed/life.py's FeedStreams run them and hand it their finds), and what the decisions, the
    command and the gauges read of it.

    ``_lock`` guards the tables and what the feed knows of its Pods' and ResourceQuotas' freshness: which namespaces'
    Pods are counted and how far each has been seen, and since when a stream has been unable to list or watch. Every
    method takes it once (a wait lets it go while it waits); nothing else is locked or called out (metrics set, lines
    logged) while it is held, so FeedStreams may call in while holding its own lock."""

    def __init__(
        self, devices: Sequence[Device], *, forget_after: float, monotonic: Callable[[], float] = time.monotonic
    ) -> None:  # fmt: skip
        self._clock = monotonic  # every time the feed keeps or waits by: the Committer's clock (app/quota/ports.py)
        self._lock = threading.Lock()
        # Waiters wake only for what they wait on: a Pod stream moving on, or a ledger changing.
        self._pods_moved = threading.Condition(self._lock)
        self._ledgers_moved = threading.Condition(self._lock)
        # each holds the other's reader: the Pods' seals are checked with the key a ledger brings (PodTable.key)
        self.ledgers = LedgerTable(monotonic, on_key=lambda namespace, key: self.pods.key(namespace, key))
        self.pods = PodTable(devices, forget_after, monotonic, self.ledgers.names)
        self._ttl = forget_after  # the reservation TTL: what an entry written without one holds, for the gauges
        self.quotas = QuotaTable(devices)
        self.groups = GroupTable()
        self._pods_at: dict[str, int] = {}  # per quota'd namespace: the rv its Pod watch reached (-1: not listed)
        self._quotas_in = False  # the ResourceQuotas have been listed
        self._broken_since: float | None = None  # monotonic: since when a ResourceQuota or Pod stream is broken
        self._synced = threading.Event()

    # --- the view (FeedView, FeedPort) ---------------------------------------------------------------

    def view(self, namespace: str, entries: Iterable[str] | None = None) -> View:
        """What this process knows of ``namespace`` now, read at once (a Pod counts in ``used`` and in ``taken``, or
        in neither); ``taken`` for ``entries`` (None: each entry of the ledger in the view)."""
        with self._lock:
            return self._view(namespace, entries)

    def gang(self, namespace: str, pod: Mapping[str, Any]) -> tuple[Gang | None, str]:
        """The Pod's gang from the group objects watched (app/quota/ports.py's Groups)."""
        with self._lock:
            return self.groups.gang(namespace, pod)

    def key(self, namespace: str) -> str:
        """The namespace's sealing key, as its newest ledger brought it (app/quota/ports.py's FeedPort)."""
        with self._lock:
            found = self.ledgers.get(namespace)
            return found.key if found is not None else ""

    def consumed(self, namespace: str, entry: str, nonce: str) -> bool:
        """A Pod carrying this seal has been counted (app/quota/ports.py's FeedPort)."""
        with self._lock:
            return self.pods.consumed(namespace, entry, nonce)

    def offer(self, found: Ledger) -> None:
        """A ledger this process read or wrote: newer than the cache, unless the watch was quicker."""
        with self._lock:
            self.ledgers.offer(found)
            self._ledgers_moved.notify_all()

    def wait_ledger(self, namespace: str, rv: int, timeout: float) -> Ledger | None:
        """The cached ledger once it is newer than ``rv`` (None if it does not get newer within ``timeout``)."""
        deadline = self._clock() + timeout
        with self._lock:
            while True:
                found = self.ledgers.get(namespace)
                if found is not None and found.rv > rv:
                    return found
                remaining = deadline - self._clock()
                if remaining <= 0 or not self._ledgers_moved.wait(remaining):
                    return None

    def wait_pods(self, namespace: str, rv: int, timeout: float) -> bool:
        """This process has listed the namespace's Pods and seen every Pod event up to resourceVersion ``rv`` (waits
        up to ``timeout``): Pods whose reservations another process dropped at ``rv`` are counted here too."""
        deadline = self._clock() + timeout
        with self._lock:
            while self._pods_at.get(namespace, -1) < max(rv, 0):
                remaining = deadline - self._clock()
                if remaining <= 0 or not self._pods_moved.wait(remaining):
                    return False
            return True

    def wait_synced(self, timeout: float) -> bool:
        """The first lists are in: ResourceQuotas, and the Pods of every namespace that had a device quota then;
        waits up to ``timeout`` seconds for it (a freshly started worker)."""
        return self._synced.wait(timeout) if timeout > 0 else self._synced.is_set()

    def standings(self, now: float) -> list[Standing]:
        """Every quota'd namespace whose Pods have been listed, as this process sees it at ``now`` (its monotonic
        clock, the one its first sights of ledger entries are on); no API call. Viewed under the lock, counted
        after it."""
        with self._lock:
            listed = sorted(ns for ns, at in self._pods_at.items() if at >= 0)
            views = [(self._view(ns, None), self.quotas.objects(ns), self.pods.count(ns)) for ns in listed]
        return [standing(view, quotas, pods, now=now, ttl=self._ttl) for view, quotas, pods in views]

    # --- how fresh it is (FeedStreams' status and sync gauges) -------------------------------------

    def listed(self) -> dict[str, bool]:
        """Per resource the sync gauges export, whether it is listed: the ResourceQuotas, and the Pods of every
        quota'd namespace."""
        with self._lock:
            return {"pods": self._pods_listed(), "resourcequotas": self._quotas_in}

    def tracked(self) -> int:
        """How many Pods are counted, all quota'd namespaces together."""
        with self._lock:
            return len(self.pods)

    def broken(self, since: float | None) -> None:
        """Since when (monotonic) a ResourceQuota or Pod stream has been unable to list or watch (None: every one
        answers): what each view says of the feed's age, from FeedStreams, which knows the streams."""
        with self._lock:
            self._broken_since = since

    # --- what the streams find (their threads, no lock held on the way in) ----------------------------

    def quotas_listed(self, items: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
        """A fresh list of the ResourceQuotas: the namespaces whose Pods are counted from now on, and those whose
        Pods are not any more (their streams to start and to end)."""
        with self._lock:
            self.quotas.replace(items)
            self._quotas_in = True
            changed = self._count_namespaces()
            synced = self._first_sync()
        if synced:
            self._synced.set()
        return changed

    def quota_event(self, kind: str, obj: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        """A ResourceQuota changed: as ``quotas_listed``."""
        with self._lock:
            self.quotas.apply(kind, obj)
            changed = self._count_namespaces()
            synced = self._first_sync()
        if synced:
            self._synced.set()
        return changed

    def ledgers_listed(self, stream: Stream, items: list[dict[str, Any]], rv: str) -> None:
        with self._lock:
            found = self.ledgers.replace(items)
            self._ledgers_moved.notify_all()
        say_found_at_start(found)

    def ledger_event(self, stream: Stream, kind: str, obj: Mapping[str, Any], rv: str) -> None:
        if kind == "BOOKMARK":
            return
        with self._lock:
            self.ledgers.apply(kind, obj)
            self._ledgers_moved.notify_all()

    def groups_listed(self, api: str, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self.groups.replace(api, items)

    def group_event(self, api: str, kind: str, obj: Mapping[str, Any]) -> None:
        with self._lock:
            self.groups.apply(api, kind, obj)

    def pods_listed(self, stream: Stream, items: list[dict[str, Any]], rv: str) -> None:
        with self._lock:
            if not self._counts(stream):
                return
            uncounted = self.pods.replace(stream.namespace, items)
            self._pods_at[stream.namespace] = max(resource_version(rv), 0)
            self._pods_moved.notify_all()
            synced = self._first_sync()
        say_uncounted(uncounted)
        if synced:
            self._synced.set()

    def pod_event(self, stream: Stream, kind: str, obj: Mapping[str, Any], rv: str) -> None:
        with self._lock:
            if not self._counts(stream):
                return
            uncounted = self.pods.apply(kind, obj) if kind != "BOOKMARK" else None
            self._pods_at[stream.namespace] = max(resource_version(rv), 0)
            self._pods_moved.notify_all()
        if uncounted is not None:
            say_uncounted([uncounted])

    # --- helpers (lock held) ------------------------------------------------------------------------------

    def _count_namespaces(self) -> tuple[list[str], list[str]]:
        """The namespaces that got a device quota and those whose last one went, after the ResourceQuota table
        changed: the first are counted from their first Pod list on, the others' Pods forgotten."""
        wanted = self.quotas.namespaces()
        ended = sorted(set(self._pods_at) - wanted)
        for namespace in ended:
            del self._pods_at[namespace]
            self.pods.forget_namespace(namespace)
        started = sorted(wanted - set(self._pods_at))
        for namespace in started:
            self._pods_at[namespace] = -1
        return started, ended

    def _counts(self, stream: Stream) -> bool:
        """What the Pod stream found counts: its namespace is quota'd, and the stream was not ended meanwhile (a
        stream is ended before the next ResourceQuota change is taken in, so one that found something before its
        namespace lost its quota and got one again is not counted)."""
        return stream.namespace in self._pods_at and not stream.stopped

    def _pods_listed(self) -> bool:
        return all(at >= 0 for at in self._pods_at.values())

    def _first_sync(self) -> bool:
        """The first sync is complete once the quotas and every quota'd namespace's Pods are listed."""
        return self._quotas_in and self._pods_listed()

    def _view(self, namespace: str, entries: Iterable[str] | None) -> View:
        limits, pods_at = self.quotas.limits(namespace), self._pods_at.get(namespace, -1)
        synced = self._synced.is_set()
        broken = self._clock() - self._broken_since if self._broken_since is not None else 0.0
        if not limits:  # no device quota: nothing else of it counts (the common case, asked on every review)
            return View(namespace, limits, None, {}, {}, {}, pods_at, synced, broken)
        ledger = self.ledgers.get(namespace)
        wanted = entries if entries is not None else (ledger.entries if ledger is not None else ())
        taken = self.pods.seen(namespace, wanted)
        used, first_seen = self.pods.used(namespace), self.ledgers.first_seen(namespace)
        members = self.pods.members(namespace)
        holds = ledger.gangs if ledger is not None else frozenset()
        gone = self.groups.gone(namespace, holds) if holds else frozenset()
        renewed = self.ledgers.renewed(namespace)
        return View(namespace, limits, ledger, first_seen, used, taken, pods_at, synced, broken, members, gone, renewed)
