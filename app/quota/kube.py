"""The real QuotaPort: limits and usage from the feed, atomic check-and-reserve through the ledger.

Rules: docs/rules.md#no-over-admission-under-concurrency, #undecided-quota-is-an-error-never-an-admission.

A Pod is admitted only if used + reserved + requested <= limit for every limited resource, decided against
the namespace's ledger Lease and written back with compare-and-swap, so workers and replicas never admit
past the limit together. A worker decides the admissions that wait on the same namespace together and writes
them in one compare-and-swap (group commit), starting from its cached copy of the ledger (kept fresh by the
feed's watch): no read before the write; a 409 brings the newer copy. A reservation counts until the
deciding worker has seen its Pod, which then counts as usage; the writer drops the reservations whose Pods it
has seen and moves the ledger's mark to their resourceVersion, and no worker decides on a ledger before its
own Pod watch has reached the mark. So the ledger holds only admissions not seen yet, and a denial needs no
write: a copy older than the stored ledger can only count less than it, so what it denies, the newest denies.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from app import metrics
from app.kube.backoff import Backoff
from app.kube.config import LOAD_ERRORS, load_configuration
from app.kube.errors import CONFLICT, ApiError, describe
from app.quota.demand import Amounts, Demand, amounts
from app.quota.feed import Feed
from app.quota.ledger import MAX_LEDGER_BYTES, Entry, Ledger, Snapshot, encode
from app.quota.limits import check, limited
from app.quota.port import FITS, QuotaOff, QuotaPort, QuotaUnavailable, Verdict
from app.settings import Settings

ADMIT_BUDGET = 5.0  # seconds for one admission, sync wait included: half the API server's 10 s webhook timeout
REQUEST_TIMEOUT = 2.0  # seconds for one ledger read or write
SYNC_WAIT = 3.0  # seconds an admission waits for a just-started worker's (or a new quota's) first lists
MARK_WAIT = 2.0  # seconds a decision waits for this worker's Pod watch to reach the ledger's mark
NEWER_WAIT = 0.5  # seconds a lost compare-and-swap waits for the watch to bring the winner's ledger, then reads
LOST_ROUND = Backoff(first=0.005, jitter=1.0)  # a round is followed at once by the fresher ledger's wait
log = logging.getLogger("hami_webhook.quota")


class QuotaStartError(RuntimeError):
    """HAMI_QUOTA_ENABLED=true but the Kubernetes API cannot be used."""


@dataclass(eq=False)
class _Ticket:
    """One admission waiting on its namespace's ledger; settled with a verdict or an error."""

    requested: Amounts
    uid: str
    dry_run: bool
    deadline: float
    verdict: Verdict | None = None
    error: QuotaUnavailable | None = None

    @property
    def settled(self) -> bool:
        return self.verdict is not None or self.error is not None


@dataclass(eq=False)
class _Queue:
    """The admissions of one namespace in this process: one thread commits, the others wait for it."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    waiting: list[_Ticket] = field(default_factory=list)
    busy: bool = False


class KubeQuota:
    """Namespace device quota enforced across workers and replicas."""

    def __init__(self, feed: Feed, ledger: Ledger, *, ttl: float, stale_after: float) -> None:
        self.feed = feed
        self.ledger = ledger
        self._ttl = ttl
        self._stale_after = stale_after
        self._queues: dict[str, _Queue] = {}
        self._queues_lock = threading.Lock()

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
        if not limited(self.feed.limits(namespace), requested):
            return FITS  # no device quota here: the ledger is never touched
        if not self.feed.namespace_synced(namespace, wait=max(min(SYNC_WAIT, deadline - time.monotonic()), 0)):
            raise QuotaUnavailable(f"the Pods of namespace {namespace} have not been listed yet")
        return self._settle(namespace, _Ticket(requested, uid, dry_run, deadline))

    def _settle(self, namespace: str, ticket: _Ticket) -> Verdict:
        """Queue the ticket; the first waiter with no commit in flight commits everything queued (group commit)."""
        queue = self._queue(namespace)
        with queue.cond:
            queue.waiting.append(ticket)
            while not ticket.settled:
                if not queue.busy:
                    queue.busy = True
                    batch, queue.waiting = queue.waiting, []
                    queue.cond.release()
                    try:
                        self._commit(namespace, queue, batch)
                    finally:
                        queue.cond.acquire()
                        queue.busy = False
                        queue.cond.notify_all()
                    continue
                remaining = ticket.deadline - time.monotonic()
                if remaining <= 0 and ticket in queue.waiting:  # never picked up: give up on our own
                    queue.waiting.remove(ticket)
                    ticket.error = QuotaUnavailable(
                        f"namespace {namespace}: timed out waiting for other admissions in this worker"
                    )
                    break
                # in a commit already: that commit ends by the earliest deadline of its batch, plus one request
                queue.cond.wait(max(remaining, 0) + REQUEST_TIMEOUT)
        if ticket.error is not None:
            raise ticket.error
        assert ticket.verdict is not None
        return ticket.verdict

    def _commit(self, namespace: str, queue: _Queue, batch: list[_Ticket]) -> None:
        """Decide ``batch`` (and whatever queues meanwhile) against the ledger; write the reservations in one
        compare-and-swap. Every ticket taken in is settled on return."""
        found = self.feed.ledger(namespace)
        lost = 0
        contended = QuotaUnavailable(f"quota ledger {self._where(namespace)} stayed contended for {ADMIT_BUDGET:g} s")
        try:
            while True:
                remaining = min(t.deadline for t in batch) - time.monotonic()
                if remaining <= 0:
                    raise contended
                timeout = min(remaining, REQUEST_TIMEOUT)
                try:
                    if found is None:
                        found = self.ledger.read(namespace, timeout)
                        self.feed.offer_ledger(found)
                    if not self.feed.caught_up(namespace, found.mark, min(remaining, MARK_WAIT)):
                        raise QuotaUnavailable(
                            f"namespace {namespace}: this worker's Pod watch has not reached resourceVersion "
                            f"{found.mark}, which the quota ledger {self._where(namespace)} requires"
                        )
                    with queue.cond:  # what queued meanwhile joins this commit
                        batch += queue.waiting
                        queue.waiting = []
                    self._decide(namespace, found, batch, timeout)
                    return
                except ApiError as exc:
                    if exc.code != CONFLICT:
                        raise QuotaUnavailable(f"quota ledger {self._where(namespace)}: {describe(exc)}") from exc
                    lost += 1
                    metrics.quota_ledger_write("conflict")
                    rv = found.rv if found is not None else -1
                    for ticket in batch:  # decided on a ledger that is gone: all of them again
                        ticket.verdict = ticket.error = None
                    time.sleep(LOST_ROUND.delay(0))  # losers of one round do not all retry at once
                    found = self.feed.wait_ledger_newer(namespace, rv, min(NEWER_WAIT, timeout))
                except QuotaUnavailable:
                    raise
                except Exception as exc:
                    if lost and min(t.deadline for t in batch) <= time.monotonic():
                        raise contended from exc  # the budget ran out mid-request, after lost rounds
                    raise QuotaUnavailable(f"quota ledger {self._where(namespace)}: {describe(exc)}") from exc
        except QuotaUnavailable as exc:  # the batch was decided together: none of its verdicts stands alone
            for ticket in batch:
                ticket.verdict, ticket.error = None, exc

    def _decide(self, namespace: str, found: Snapshot, batch: list[_Ticket], timeout: float) -> None:
        """Verdicts for the batch on ``found``; one compare-and-swap when any Pod is to be reserved."""
        now = time.time()
        limits = self.feed.limits(namespace)
        live = {u: e for u, e in found.entries.items() if e.expires > now}  # expired entries are pruned here
        keep, mark = {}, found.mark
        for uid, entry in live.items():
            seen = self.feed.seen(namespace, uid)
            if seen is None:
                keep[uid] = entry
            else:  # its Pod counts as usage here, and for every worker whose Pod watch is past the mark
                mark = max(mark, seen)
        used = self.feed.in_use(namespace, {u: e.amounts for u, e in live.items()})
        reserve: list[_Ticket] = []
        for ticket in batch:
            if ticket.uid in live:  # the API server sent this very request again: it is already reserved
                ticket.verdict = Verdict(reserved=True)
                continue
            if not limited(limits, ticket.requested):
                ticket.verdict = FITS  # the quota went meanwhile
                continue
            denial = check(namespace, limits, used, ticket.requested)
            if denial or ticket.dry_run:  # dry runs check but never reserve (docs/rules.md#dry-runs-change-nothing)
                ticket.verdict = Verdict(denial)
                continue
            for name, amount in ticket.requested.items():
                used[name] = used.get(name, 0) + amount
            keep[ticket.uid] = Entry(round(now + self._ttl, 1), ticket.requested)
            reserve.append(ticket)
        if not reserve:
            return  # denials and dry runs only: no write (an older copy never counts more than the newest)
        text = encode(keep)
        while len(text) > MAX_LEDGER_BYTES and reserve:
            full = reserve.pop()
            del keep[full.uid]
            metrics.quota_ledger_full(namespace)
            full.error = QuotaUnavailable(
                f"quota ledger {self._where(namespace)} is full: {len(keep)} reservations of admitted Pods "
                f"not seen yet fill the {MAX_LEDGER_BYTES} bytes one Lease can hold; they leave it as their "
                f"Pods appear, or after HAMI_QUOTA_RESERVATION_TTL ({self._ttl:g} s) if they never do"
            )
            text = encode(keep)
        if not reserve:
            return
        written = self.ledger.write(found, text, mark, timeout)
        metrics.quota_ledger_write("written")
        self.feed.offer_ledger(written)
        for ticket in reserve:
            ticket.verdict = Verdict(reserved=True)

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

    def _queue(self, namespace: str) -> _Queue:
        with self._queues_lock:
            return self._queues.setdefault(namespace, _Queue())

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
    feed = Feed(client.ApiClient(configuration), settings.devices, forget_after=ttl, home=settings.namespace)
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
