"""Device usage and limits per namespace, from a list + watch of Pods and ResourceQuotas.

Rules: docs/rules.md#usage-is-counted-by-the-webhook, #limits-come-from-every-resourcequota.

One Feed per process, shared by its threads; gunicorn forks workers and threads do
not survive a fork, so each worker starts its own after the fork. Each kind has one
thread: list (paged), then watch from the list's resourceVersion with bookmarks;
410 Gone re-lists; any other failure waits a capped, jittered backoff and resumes
from the last resourceVersion seen. Only a small summary per Pod is kept.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from app import metrics
from app.annotations import QUOTA_RESERVATION_ANNOTATION
from app.devices.base import Device
from app.kube.backoff import Backoff
from app.kube.errors import describe
from app.quota.demand import Amounts, pod_amounts
from app.quota.limits import hard_limits, quota_factors, tightest

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
PAGE_SIZE = 500
WATCH_SECONDS = (30, 45)  # the server ends each watch after a random time in this range; we resume
READ_SLACK = 15  # a watch silent this long past its own timeout is a dead connection
WATCH_RETRY = Backoff(first=0.5, cap=30.0, jitter=0.5)  # after a broken list or watch
log = logging.getLogger("hami_webhook.quota")


class Gone(Exception):
    """The resourceVersion is too old (410): list again."""


@dataclass(slots=True)
class _Pod:
    namespace: str
    reservation: str
    amounts: Amounts


class PodTable:
    """Per-Pod demand summaries, the per-namespace sums, and which reservations Pods have consumed."""

    def __init__(self, devices: Sequence[Device], forget_after: float) -> None:
        self._devices = devices
        self._forget_after = forget_after
        self._pods: dict[str, _Pod] = {}
        self._used: dict[str, Amounts] = {}
        self._consumed: dict[str, float] = {}  # reservation uid -> when it may be forgotten (inf: Pod alive)
        self._forget: deque[tuple[float, str]] = deque()

    def replace(self, items: Iterable[Mapping[str, Any]]) -> None:
        fresh = {uid: pod for uid, pod in (self._summary(o) for o in items) if pod is not None}
        for uid in set(self._pods) - set(fresh):
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

    def used(self, namespace: str) -> Amounts:
        return dict(self._used.get(namespace) or {})

    def consumed(self, reservation: str) -> bool:
        """A Pod carrying this reservation has been seen: it is counted as usage (or was, and is gone)."""
        return reservation in self._consumed

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
        return uid, _Pod(sys.intern(meta.get("namespace") or ""), reservation, amounts)

    def _add(self, uid: str, pod: _Pod) -> None:
        self._pods[uid] = pod
        used = self._used.setdefault(pod.namespace, {})
        for name, amount in pod.amounts.items():
            used[name] = used.get(name, 0) + amount
        if pod.reservation:
            self._consumed[pod.reservation] = float("inf")

    def _remove(self, uid: str) -> None:
        pod = self._pods.pop(uid, None)
        if pod is None:
            return
        used = self._used[pod.namespace]
        for name, amount in pod.amounts.items():
            used[name] = max(used.get(name, 0) - amount, 0)
        if not any(used.values()):
            del self._used[pod.namespace]
        now = time.monotonic()
        if pod.reservation:  # its ledger entry may outlive the Pod until it expires: keep not counting it
            self._consumed[pod.reservation] = now + self._forget_after
            self._forget.append((now + self._forget_after, pod.reservation))
        while self._forget and self._forget[0][0] <= now:
            _, reservation = self._forget.popleft()
            if self._consumed.get(reservation, 0) <= now:
                self._consumed.pop(reservation, None)


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


@dataclass
class _Stream:
    """One watched kind: how to list it, where its events go, and its health."""

    name: str
    list_call: Callable[..., Any]
    table: PodTable | QuotaTable
    rv: str = ""  # where to resume: the last event's or bookmark's resourceVersion ("" = list first)
    synced: bool = False
    broken_since: float | None = None
    response: Any = None


class Feed:
    """The process's view of device usage and limits, kept current by two daemon threads."""

    def __init__(self, api_client: client.ApiClient, devices: Sequence[Device], *, forget_after: float) -> None:
        self._api_client = api_client
        core = client.CoreV1Api(api_client)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.pods = PodTable(devices, forget_after)
        self.quotas = QuotaTable(devices)
        self._streams = (
            _Stream("pods", core.list_pod_for_all_namespaces, self.pods),
            _Stream("resourcequotas", core.list_resource_quota_for_all_namespaces, self.quotas),
        )
        self._threads: list[threading.Thread] = []
        self._synced = threading.Event()

    # --- reads (any thread) ------------------------------------------------------------------------

    def limits(self, namespace: str) -> Amounts:
        with self._lock:
            return self.quotas.limits(namespace)

    def in_use(self, namespace: str, reservations: Mapping[str, Amounts]) -> Amounts:
        """The namespace's Pod usage plus every reservation whose Pod this process has not seen: counted once."""
        with self._lock:
            total = self.pods.used(namespace)
            for reservation, amounts in reservations.items():
                if not self.pods.consumed(reservation):
                    for name, amount in amounts.items():
                        total[name] = total.get(name, 0) + amount
        return total

    def synced(self, wait: float = 0) -> bool:
        """Both kinds have been listed; waits up to ``wait`` seconds for it (a freshly started worker)."""
        return self._synced.wait(wait) if wait else self._synced.is_set()

    def broken_for(self) -> float:
        """Seconds the feed has been unable to list or watch (0 when every stream is connected)."""
        since = [s.broken_since for s in self._streams if s.broken_since is not None]
        return time.monotonic() - min(since) if since else 0.0

    def status(self) -> dict[str, Any]:
        return {
            "synced": {s.name: s.synced for s in self._streams},
            "broken_seconds": round(self.broken_for(), 1),
            "pods_tracked": len(self.pods),
        }

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        for stream in self._streams:
            metrics.quota_feed_synced(stream.name, False)
            thread = threading.Thread(target=self._run, args=(stream,), name=f"quota-feed-{stream.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """End both threads: wake their backoff waits and cut their open watches."""
        self._stop.set()
        for stream in self._streams:
            response = stream.response
            if response is not None:
                try:
                    response.shutdown()
                except Exception:  # already closed
                    pass
        for thread in self._threads:
            thread.join(timeout)
        self._api_client.close()

    # --- the loop ----------------------------------------------------------------------------------

    def _run(self, stream: _Stream) -> None:
        failures = 0
        while not self._stop.is_set():
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
                if self._stop.is_set():
                    break
                if stream.broken_since is None:
                    stream.broken_since = time.monotonic()
                    metrics.quota_feed_synced(stream.name, False)
                    log.warning("quota feed: %s broken (%s); retrying with backoff", stream.name, describe(exc))
                failures += 1
                self._stop.wait(WATCH_RETRY.delay(failures - 1))
        stream.response = None

    def _healthy(self, stream: _Stream) -> None:
        if stream.broken_since is not None:
            log.info("quota feed: %s connected again", stream.name)
            metrics.quota_feed_synced(stream.name, stream.synced)
        stream.broken_since = None

    def _list(self, stream: _Stream) -> None:
        items: list[dict[str, Any]] = []
        cont, rv = None, ""
        while True:
            try:
                response = stream.list_call(
                    limit=PAGE_SIZE, _continue=cont, _preload_content=False, _request_timeout=(5, 60)
                )
            except ApiException as exc:
                if exc.status == 410:  # the continue token expired: start over
                    raise Gone() from None
                raise
            page = json.loads(response.data)
            rv = rv or page["metadata"]["resourceVersion"]
            items.extend(page.get("items") or [])
            cont = page["metadata"].get("continue")
            if not cont:
                break
        with self._lock:
            stream.table.replace(items)
        stream.rv, stream.synced = rv, True
        metrics.quota_feed_synced(stream.name, True)
        if all(s.synced for s in self._streams):
            self._synced.set()
        self._healthy(stream)

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
            if exc.status == 410:
                raise Gone() from None
            raise
        stream.response = response
        try:
            self._healthy(stream)
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    break
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise RuntimeError(f"watch error: {obj.get('message') or obj}")
                if kind != "BOOKMARK":
                    with self._lock:
                        stream.table.apply(kind, obj)
                stream.rv = (obj.get("metadata") or {}).get("resourceVersion") or stream.rv
        finally:
            stream.response = None
            response.close()
