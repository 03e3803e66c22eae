"""The real QuotaPort: limits and usage from the feed, atomic check-and-reserve through the ledger.

Rules: docs/rules.md#no-over-admission-under-concurrency, #undecided-quota-is-an-error-never-an-admission.

A Pod is admitted only if used + reserved + requested <= limit for every limited
resource, decided against the ledger Lease read fresh from the API and written
back with compare-and-swap. A reservation counts until this process's feed has
seen its Pod (the Pod's ``hami.io/quota-reservation`` names it; it is usage
then) or until it expires. Entries are dropped only once expired, so no replica
can see a Pod as neither reserved nor used while its own feed is still behind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from kubernetes import client

from app.kube.backoff import Backoff
from app.kube.config import LOAD_ERRORS, load_configuration
from app.kube.errors import CONFLICT, ApiError, describe
from app.quota.demand import Demand, amounts
from app.quota.feed import Feed
from app.quota.ledger import Entry, Ledger
from app.quota.limits import check, limited
from app.quota.port import FITS, QuotaOff, QuotaPort, QuotaUnavailable, Verdict
from app.settings import Settings

ADMIT_BUDGET = 5.0  # seconds for one admission, sync wait included: half the API server's 10 s webhook timeout
REQUEST_TIMEOUT = 2.0  # seconds for one ledger read or write
SYNC_WAIT = 3.0  # seconds an admission waits for a just-started worker's first lists
ATTEMPTS = 16  # compare-and-swap rounds; only admissions write, so a round is lost only to another admission
LEDGER_RETRY = Backoff(first=0.01, jitter=1.0)  # after a lost round; the admission's deadline caps it
log = logging.getLogger("hami_webhook.quota")


class QuotaStartError(RuntimeError):
    """HAMI_QUOTA_ENABLED=true but the Kubernetes API cannot be used."""


class KubeQuota:
    """Namespace device quota enforced across workers and replicas."""

    def __init__(self, feed: Feed, ledger: Ledger, *, ttl: float, stale_after: float) -> None:
        self.feed = feed
        self.ledger = ledger
        self._ttl = ttl
        self._stale_after = stale_after
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def governs(self, namespace: str) -> bool:
        """Also true while the feed cannot tell (not synced, broken too long): admit() must then refuse,
        or a fresh worker would admit everything before its first ResourceQuota list arrives."""
        return bool(self._unfit()) or bool(self.feed.limits(namespace))

    def admit(self, namespace: str, demands: Sequence[Demand], *, uid: str, dry_run: bool) -> Verdict:
        requested = amounts(demands)
        if not requested:
            return FITS  # no device resource: nothing to count
        deadline = time.monotonic() + ADMIT_BUDGET
        unfit = self._unfit(wait=SYNC_WAIT)  # before reading limits: an unsynced feed knows of no quota at all
        if unfit:
            raise QuotaUnavailable(unfit)
        limits = self.feed.limits(namespace)
        if not limited(limits, requested):
            return FITS  # no device quota here: the ledger is never touched
        lock = self._lock(namespace)  # this process's threads take turns; other processes meet at the CAS
        if not lock.acquire(timeout=max(deadline - time.monotonic(), 0)):
            raise QuotaUnavailable(f"namespace {namespace}: timed out waiting for other admissions in this worker")
        try:
            for attempt in range(ATTEMPTS):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    return self._try(namespace, limits, requested, uid, dry_run, min(remaining, REQUEST_TIMEOUT))
                except Exception as exc:
                    if not (isinstance(exc, ApiError) and exc.code == CONFLICT):
                        raise QuotaUnavailable(f"quota ledger {self._where(namespace)}: {describe(exc)}") from exc
                    time.sleep(min(LEDGER_RETRY.delay(attempt), max(deadline - time.monotonic(), 0)))
        finally:
            lock.release()
        raise QuotaUnavailable(
            f"quota ledger {self._where(namespace)} stayed contended for {ADMIT_BUDGET:g} s or {ATTEMPTS} attempts"
        )

    def _try(
        self, namespace: str, limits: dict[str, int], requested: dict[str, int], uid: str, dry_run: bool, timeout: float
    ) -> Verdict:
        snapshot = self.ledger.read(namespace, timeout)
        now = time.time()
        live = {u: e for u, e in snapshot.entries.items() if e.expires > now}  # expired entries are pruned here
        if uid in live:  # the API server sent this very request again: it is already reserved
            return Verdict(reserved=True)
        used = self.feed.in_use(namespace, {u: e.amounts for u, e in live.items()})
        denial = check(namespace, limits, used, requested)
        if denial or dry_run:  # dry runs check but never reserve (dry runs change nothing)
            return Verdict(denial)
        live[uid] = Entry(now + self._ttl, requested)
        self.ledger.write(snapshot, live, timeout)
        return Verdict(reserved=True)

    def _where(self, namespace: str) -> str:
        return f"{self.ledger.home}/{self.ledger.name(namespace)}"

    def _unfit(self, wait: float = 0) -> str:
        """Why the feed cannot be trusted now ("" when it can); waits up to ``wait`` s for a first sync."""
        if not self.feed.synced(wait=wait):
            return "the Pod and ResourceQuota lists have not synced yet"
        broken = self.feed.broken_for()
        if broken > self._stale_after:
            return f"the Pod/ResourceQuota watch has been broken for {broken:.0f} s"
        return ""

    def _lock(self, namespace: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(namespace, threading.Lock())

    def status(self) -> dict[str, Any]:
        feed = self.feed.status()
        synced = all(feed["synced"].values())
        ready = synced and feed["broken_seconds"] <= self._stale_after
        return {"ready": ready, "quota": "on", **feed}

    def start(self) -> None:
        self.feed.start()

    def stop(self) -> None:
        self.feed.stop()
        self.ledger.close()


def open_quota(settings: Settings) -> QuotaPort:
    """The port HAMI_QUOTA_ENABLED asks for, started (call once per process, after any fork).

    Raises QuotaStartError when quota is required and the API cannot be used.
    """
    if settings.quota_enabled == "false":
        return QuotaOff("HAMI_QUOTA_ENABLED=false")
    try:
        configuration = load_configuration()
    except LOAD_ERRORS as exc:
        if settings.quota_enabled == "true":
            raise QuotaStartError(f"HAMI_QUOTA_ENABLED=true but no Kubernetes API configuration: {exc}") from exc
        log.warning("namespace device quota is off: no in-cluster config or kubeconfig (%s)", exc)
        return QuotaOff(f"no in-cluster config or kubeconfig: {exc}")
    if settings.quota_enabled == "true":
        _probe(configuration)
    ttl = settings.quota_reservation_ttl
    feed = Feed(client.ApiClient(configuration), settings.devices, forget_after=ttl)
    ledger = Ledger(client.CoordinationV1Api(client.ApiClient(configuration)), settings.namespace)
    port = KubeQuota(feed, ledger, ttl=ttl, stale_after=settings.quota_stale_after)
    port.start()
    log.info("namespace device quota is on: API %s, ledger in namespace %s", configuration.host, settings.namespace)
    return port


def _probe(configuration: client.Configuration) -> None:
    with client.ApiClient(configuration) as api_client:
        try:
            client.CoreV1Api(api_client).list_resource_quota_for_all_namespaces(limit=1, _request_timeout=5)
        except Exception as exc:
            where = configuration.host
            raise QuotaStartError(
                f"HAMI_QUOTA_ENABLED=true but the Kubernetes API at {where} cannot be used: {describe(exc)}"
            ) from exc
