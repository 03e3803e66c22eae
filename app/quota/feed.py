"""Device usage, limits and ledgers, from list + watch streams kept by one Feed per process.

Rules: docs/rules.md#usage-is-counted-by-the-webhook, #limits-come-from-every-resourcequota.

ResourceQuotas are watched cluster-wide (they are few). Pods are watched only in the namespaces that have a
device quota: a namespace's stream starts when its first device ResourceQuota appears and stops when the last
one goes, so a worker's cost grows with the quota'd namespaces' Pods, not with the cluster's. Every Pod there
is counted, admitted by the webhook or not. The ledger Leases in the webhook's own namespace are watched too:
a cache that spares a read before each compare-and-swap (a stale copy only costs a 409).

gunicorn forks workers and threads do not survive a fork, so each worker starts its own Feed after the fork.
Each stream has one thread: list (paged), then watch from the list's resourceVersion with bookmarks; 410 Gone
re-lists; any other failure waits a capped, jittered backoff and resumes from the last resourceVersion seen.
Only a small summary per device Pod is kept.
"""

from __future__ import annotations

import functools
import logging
import random
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from app import metrics
from app.annotations import QUOTA_RESERVATION_ANNOTATION
from app.devices.base import Device
from app.kube.backoff import Backoff
from app.kube.errors import GONE, ApiError, describe
from app.quota.demand import Amounts, pod_amounts
from app.quota.ledger import LEDGER_PREFIX, MANAGED_BY, Snapshot, resource_version, snapshot
from app.quota.limits import hard_limits, quota_factors, tightest

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
PAGE_SIZE = 500
WATCH_SECONDS = (30, 45)  # the server ends each watch after a random time in this range; we resume
READ_SLACK = 15  # a watch silent this long past its own timeout is a dead connection
WATCH_RETRY = Backoff(first=0.5, cap=30.0, jitter=0.5)  # after a broken list or watch
log = logging.getLogger("hami_webhook.quota")


class Gone(Exception):
    """The resourceVersion is too old (410): list again."""


class Table(Protocol):
    def replace(self, items: Iterable[Mapping[str, Any]]) -> None: ...

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None: ...


@dataclass(slots=True)
class _Pod:
    namespace: str
    reservation: str
    amounts: Amounts
    rv: int


@dataclass(slots=True)
class Held:
    """What the Pods carrying one reservation hold, as this process has seen them (alive or gone)."""

    amounts: Amounts
    rv: int  # the newest resourceVersion among those Pods when first seen here
    alive: int = 0
    forget_at: float = float("inf")


class PodTable:
    """Per-Pod demand summaries, the per-namespace sums, and for each reservation (a ledger entry, which several
    Pods may carry) what its Pods have taken so far: those amounts are usage, not reservation, any more."""

    def __init__(self, devices: Sequence[Device], forget_after: float) -> None:
        self._devices = devices
        self._forget_after = forget_after
        self._pods: dict[str, _Pod] = {}
        self._by_namespace: dict[str, set[str]] = {}
        self._used: dict[str, Amounts] = {}
        # (namespace, reservation) -> what its Pods took: a Pod consumes only its own namespace's reservations.
        # Kept while a ledger entry may still name it (``forget_after`` past its last Pod).
        self._held: dict[tuple[str, str], Held] = {}
        self._forget: deque[tuple[float, tuple[str, str]]] = deque()

    def replace(self, namespace: str, items: Iterable[Mapping[str, Any]]) -> None:
        """The namespace's Pods are now exactly ``items`` (a fresh list)."""
        fresh = {uid: pod for uid, pod in (self._summary(o) for o in items) if pod is not None}
        for uid in self._by_namespace.get(namespace, set()) - set(fresh):
            self._remove(uid)
        for uid, pod in fresh.items():
            if uid not in self._pods:
                self._add(uid, pod)

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        uid = (obj.get("metadata") or {}).get("uid") or ""
        if kind == "DELETED" or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
            self._remove(uid)
        elif uid not in self._pods:  # device requests are immutable: a known Pod's summary stands
            _, pod = self._summary(obj)
            if pod is not None:
                self._add(uid, pod)

    def forget_namespace(self, namespace: str) -> None:
        """The namespace is no longer watched (its device quota is gone)."""
        for uid in list(self._by_namespace.get(namespace, ())):
            self._remove(uid)

    def used(self, namespace: str) -> Amounts:
        return dict(self._used.get(namespace) or {})

    def held(self, namespace: str, reservation: str) -> Held | None:
        """What the Pods carrying this reservation took, and the resourceVersion by which a watch has seen them."""
        return self._held.get((namespace, reservation))

    def __len__(self) -> int:
        return len(self._pods)

    def _summary(self, obj: Mapping[str, Any]) -> tuple[str, _Pod | None]:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid") or ""
        if (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return uid, None
        try:
            amounts = pod_amounts(obj, self._devices)
        except Exception as exc:  # a stored Pod the arithmetic refuses counts nothing; say which
            log.warning("quota: cannot count pod %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)
            return uid, None
        if not amounts:
            return uid, None
        reservation = (meta.get("annotations") or {}).get(QUOTA_RESERVATION_ANNOTATION) or ""
        namespace = sys.intern(meta.get("namespace") or "")
        return uid, _Pod(namespace, reservation, amounts, resource_version(meta.get("resourceVersion")))

    def _add(self, uid: str, pod: _Pod) -> None:
        self._pods[uid] = pod
        self._by_namespace.setdefault(pod.namespace, set()).add(uid)
        accumulate(self._used.setdefault(pod.namespace, {}), pod.amounts)
        if pod.reservation:
            held = self._held.setdefault((pod.namespace, pod.reservation), Held({}, -1))
            accumulate(held.amounts, pod.amounts)
            held.rv = max(held.rv, pod.rv)
            held.alive += 1
            held.forget_at = float("inf")

    def _remove(self, uid: str) -> None:
        pod = self._pods.pop(uid, None)
        if pod is None:
            return
        uids = self._by_namespace[pod.namespace]
        uids.discard(uid)
        if not uids:
            del self._by_namespace[pod.namespace]
        used = self._used[pod.namespace]
        for name, amount in pod.amounts.items():
            used[name] = max(used.get(name, 0) - amount, 0)
        if not any(used.values()):
            del self._used[pod.namespace]
        now = time.monotonic()
        held = self._held.get((pod.namespace, pod.reservation)) if pod.reservation else None
        if held is not None:  # its ledger entry may outlive the Pod: what it took stays taken until then
            held.alive -= 1
            if not held.alive:
                held.forget_at = now + self._forget_after
                self._forget.append((held.forget_at, (pod.namespace, pod.reservation)))
        while self._forget and self._forget[0][0] <= now:
            _, key = self._forget.popleft()
            gone = self._held.get(key)
            if gone is not None and gone.forget_at <= now:
                del self._held[key]


def accumulate(total: Amounts, amounts: Mapping[str, int]) -> None:
    """Add ``amounts`` into ``total`` in place."""
    for name, amount in amounts.items():
        total[name] = total.get(name, 0) + amount


@dataclass
class _NamespacePods:
    """The PodTable as one namespace's stream writes it."""

    table: PodTable
    namespace: str

    def replace(self, items: Iterable[Mapping[str, Any]]) -> None:
        self.table.replace(self.namespace, items)

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        self.table.apply(kind, obj)


class QuotaTable:
    """Device limits per ResourceQuota object, indexed by namespace."""

    def __init__(self, devices: Sequence[Device]) -> None:
        self._factors = quota_factors(devices)
        self._by_namespace: dict[str, dict[str, Amounts]] = {}

    def replace(self, items: Iterable[Mapping[str, Any]]) -> None:
        self._by_namespace = {}
        for obj in items:
            self.apply("ADDED", obj)

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name") or ""
        objects = self._by_namespace.setdefault(namespace, {})
        limits = {} if kind == "DELETED" else hard_limits((obj.get("spec") or {}).get("hard") or {}, self._factors)
        if limits:
            objects[name] = limits
        else:
            objects.pop(name, None)
        if not objects:
            del self._by_namespace[namespace]

    def limits(self, namespace: str) -> Amounts:
        return tightest((self._by_namespace.get(namespace) or {}).values())

    def namespaces(self) -> set[str]:
        """The namespaces with a device quota: the ones whose Pods are watched."""
        return set(self._by_namespace)


class LedgerTable:
    """The newest ledger Lease seen per quota'd namespace: from the watch, and from this process's own
    reads and writes (whichever is newer wins)."""

    def __init__(self) -> None:
        self._by_namespace: dict[str, Snapshot] = {}

    def replace(self, items: Iterable[Mapping[str, Any]]) -> None:
        self._by_namespace = {}
        for obj in items:
            self.apply("ADDED", obj)

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name") or ""
        if not name.startswith(LEDGER_PREFIX):
            return
        namespace = name[len(LEDGER_PREFIX) :]
        if kind == "DELETED":
            self._by_namespace.pop(namespace, None)
        elif self._newer(namespace, resource_version(meta.get("resourceVersion"))):
            # parsed only when newer: the writer's own write comes back by the watch after it offered it
            self.offer(snapshot(namespace, obj))

    def offer(self, found: Snapshot) -> None:
        if self._newer(found.namespace, found.rv):
            self._by_namespace[found.namespace] = found

    def _newer(self, namespace: str, rv: int) -> bool:
        current = self._by_namespace.get(namespace)
        return current is None or rv > current.rv

    def get(self, namespace: str) -> Snapshot | None:
        return self._by_namespace.get(namespace)


@dataclass
class _Stream:
    """One list + watch: what it lists, where its events go, and its health."""

    name: str  # for logs: "pods in <namespace>", "resourcequotas", "leases"
    resource: str  # the metric label: pods, resourcequotas, leases
    list_call: Callable[..., Any]
    table: Table
    namespace: str = ""  # the quota'd namespace whose Pods it lists ("" for the other kinds)
    rv: str = ""  # where to resume: the last event's or bookmark's resourceVersion ("" = list first)
    synced: bool = False
    broken_since: float | None = None
    response: Any = None
    stopped: bool = False
    thread: threading.Thread | None = None
    listed: threading.Event = field(default_factory=threading.Event)


class Feed:
    """The process's view of device usage, limits and ledgers, kept current by daemon threads."""

    def __init__(
        self, api_client: client.ApiClient, devices: Sequence[Device], *, forget_after: float, home: str
    ) -> None:
        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._lock = threading.Lock()
        # Waiters wake only for what they wait on: a Pod stream moving on (the mark), or a ledger changing.
        self._pods_moved = threading.Condition(self._lock)
        self._ledgers_moved = threading.Condition(self._lock)
        self._stop = threading.Event()
        self.pods = PodTable(devices, forget_after)
        self.quotas = QuotaTable(devices)
        self.ledgers = LedgerTable()
        leases = client.CoordinationV1Api(api_client)
        self._quota_stream = _Stream(
            "resourcequotas", "resourcequotas", self._core.list_resource_quota_for_all_namespaces, self.quotas
        )
        self._lease_stream = _Stream(
            "leases",
            "leases",
            functools.partial(leases.list_namespaced_lease, home, label_selector=MANAGED_BY),
            self.ledgers,
        )
        self._pod_streams: dict[str, _Stream] = {}
        self._synced = threading.Event()

    # --- reads (any thread) ------------------------------------------------------------------------

    def limits(self, namespace: str) -> Amounts:
        with self._lock:
            return self.quotas.limits(namespace)

    def seen(self, namespace: str, reservations: Iterable[str]) -> tuple[Amounts, dict[str, Held]]:
        """The namespace's Pod usage, and what the Pods carrying each of ``reservations`` took, read together: a
        Pod is in both or in neither (read apart, a Pod seen in between would count in neither)."""
        with self._lock:
            held = {r: self.pods.held(namespace, r) for r in reservations}
            return self.pods.used(namespace), {
                r: Held(dict(found.amounts), found.rv) for r, found in held.items() if found is not None
            }

    def ledger(self, namespace: str) -> Snapshot | None:
        with self._lock:
            return self.ledgers.get(namespace)

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

    def stop(self, timeout: float = 5.0) -> None:
        """End every thread: wake their backoff waits and cut their open watches."""
        self._stop.set()
        with self._lock:
            streams = [self._quota_stream, self._lease_stream, *self._pod_streams.values()]
        for stream in streams:
            _cut(stream)
        for stream in streams:
            if stream.thread is not None:
                stream.thread.join(timeout)
        self._api_client.close()

    def threads(self) -> list[threading.Thread]:
        with self._lock:
            streams = [self._quota_stream, self._lease_stream, *self._pod_streams.values()]
        return [s.thread for s in streams if s.thread is not None]

    def _start(self, stream: _Stream) -> None:
        stream.thread = threading.Thread(target=self._run, args=(stream,), name=f"quota-feed-{stream.name}")
        stream.thread.daemon = True
        stream.thread.start()

    def _watch_namespaces(self) -> None:
        """Start a Pod stream for each namespace that got a device quota, stop those whose quota went.
        Called with the lock held, after the ResourceQuota table changed."""
        wanted = self.quotas.namespaces()
        for namespace in set(self._pod_streams) - wanted:
            stream = self._pod_streams.pop(namespace)
            stream.stopped = True
            _cut(stream)
            self.pods.forget_namespace(namespace)
            log.info("quota feed: no device quota in namespace %s any more; its Pods are not watched", namespace)
        for namespace in wanted - set(self._pod_streams):
            list_call = functools.partial(self._core.list_namespaced_pod, namespace)
            stream = _Stream(f"pods in {namespace}", "pods", list_call, _NamespacePods(self.pods, namespace), namespace)
            self._pod_streams[namespace] = stream
            self._start(stream)
        self._report("pods")

    def _report(self, resource: str) -> None:
        """Export the resource's sync state (pods: all namespaces' streams together). Lock held."""
        if resource == "leases":
            return
        streams = list(self._pod_streams.values()) if resource == "pods" else [self._quota_stream]
        metrics.quota_feed_synced(resource, all(s.synced and s.broken_since is None for s in streams))

    # --- the loop ----------------------------------------------------------------------------------

    def _ended(self, stream: _Stream) -> bool:
        return self._stop.is_set() or stream.stopped

    def _run(self, stream: _Stream) -> None:
        failures = 0
        while not self._ended(stream):
            try:
                if not stream.rv:
                    self._list(stream)
                    failures = 0
                self._watch(stream)
                failures = 0
            except Gone:
                log.info("quota feed: %s resourceVersion %s expired; listing again", stream.name, stream.rv)
                stream.rv = ""
            except Exception as exc:
                if self._ended(stream):
                    break
                if stream.broken_since is None:
                    with self._lock:
                        stream.broken_since = time.monotonic()
                        self._report(stream.resource)
                    log.warning("quota feed: %s broken (%s); retrying with backoff", stream.name, describe(exc))
                failures += 1
                self._stop.wait(WATCH_RETRY.delay(failures - 1))
        stream.response = None

    def _healthy(self, stream: _Stream) -> None:
        """Lock held."""
        if stream.broken_since is not None:
            log.info("quota feed: %s connected again", stream.name)
        stream.broken_since = None
        self._report(stream.resource)

    def _list(self, stream: _Stream) -> None:
        items: list[dict[str, Any]] = []
        cont, rv = None, ""
        while True:
            try:
                response = stream.list_call(
                    limit=PAGE_SIZE, _continue=cont, _preload_content=False, _request_timeout=(5, 60)
                )
            except ApiException as exc:
                if exc.status == GONE:  # the continue token expired: start over
                    raise Gone() from None
                raise
            page = orjson.loads(response.data)
            rv = rv or page["metadata"]["resourceVersion"]
            items.extend(page.get("items") or [])
            cont = page["metadata"].get("continue")
            if not cont:
                break
        with self._lock:
            if self._ended(stream):
                return
            stream.table.replace(items)
            stream.rv, stream.synced = rv, True
            if stream is self._quota_stream:
                self._watch_namespaces()
            self._healthy(stream)
            self._moved(stream)
            self._check_synced()
        stream.listed.set()

    def _moved(self, stream: _Stream) -> None:
        """Lock held: wake whoever waits on this kind of stream."""
        if stream is self._lease_stream:
            self._ledgers_moved.notify_all()
        elif stream.namespace:
            self._pods_moved.notify_all()

    def _check_synced(self) -> None:
        """Lock held: the first sync is complete once the quotas and every quota'd namespace's Pods are listed."""
        if (
            not self._synced.is_set()
            and self._quota_stream.synced
            and all(s.synced for s in self._pod_streams.values())
        ):
            self._synced.set()

    def _watch(self, stream: _Stream) -> None:
        seconds = random.randint(*WATCH_SECONDS)
        try:
            response = stream.list_call(
                watch=True,
                resource_version=stream.rv,
                allow_watch_bookmarks=True,
                timeout_seconds=seconds,
                _preload_content=False,
                _request_timeout=(5, seconds + READ_SLACK),
            )
        except ApiException as exc:
            if exc.status == GONE:
                raise Gone() from None
            raise
        stream.response = response
        try:
            if self._ended(stream):
                return
            with self._lock:
                self._healthy(stream)
            for line in watch_lines(response):
                event = orjson.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":  # the event's object is a Status
                    if obj.get("code") == GONE:
                        raise Gone()
                    raise ApiError(int(obj.get("code") or 0), "", obj, f"watch {stream.name}")
                with self._lock:
                    if self._ended(stream):
                        break
                    if kind != "BOOKMARK":
                        stream.table.apply(kind, obj)
                        if stream is self._quota_stream:
                            self._watch_namespaces()
                    stream.rv = (obj.get("metadata") or {}).get("resourceVersion") or stream.rv
                    self._moved(stream)
        finally:
            stream.response = None
            response.close()


def watch_lines(response: Any) -> Iterator[bytes]:
    """The watch stream's events, one JSON document each, as bytes.

    The client's own iter_resp_lines decodes every line to str (which orjson then encodes again) and copies
    its buffer once per line; a Pod event is kilobytes, and every worker reads every Pod event of the
    quota'd namespaces, so this is the feed's hottest loop. Chunks and events need not line up (a proxy in
    between may re-chunk the stream): what follows a chunk's last newline waits for the next chunk."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        *lines, pending = (pending + chunk if pending else chunk).split(b"\n")
        for line in lines:
            if line:
                yield line


def unseen(amounts: Mapping[str, int], held: Held | None) -> Amounts:
    """What a reservation of ``amounts`` holds beyond what its Pods, as seen, took."""
    if held is None:
        return dict(amounts)
    return {name: max(amount - held.amounts.get(name, 0), 0) for name, amount in amounts.items()}


def _cut(stream: _Stream) -> None:
    """Close a stream's open watch, so its thread notices at once."""
    response = stream.response
    if response is not None:
        try:
            response.shutdown()
        except Exception:  # already closed
            pass
