"""The Committer: one per process, it decides every queued admission of a namespace together (the pure decision,
app/quota/core/decision.py), writes the ledger Lease once with compare-and-swap, and settles the tickets; it also
closes this process's grants when they fall due. Kubernetes' ResourceQuota admission has the same shape
(k8s.io/apiserver plugin/resourcequota/controller.go): the admitting thread queues a waiter and waits for it
with a deadline; a few worker threads take a namespace's waiters, evaluate them, write once, settle them all.

Rules: docs/rules.md#no-over-admission-under-concurrency, #undecided-quota-is-an-error-never-an-admission.
How it stays exact: docs/quota.md. One lock guards the queue and every namespace's state (app/quota/state.py:
tickets waiting, grants, recent pace); it is only ever held for bookkeeping (``with`` blocks), never across a
request, and no other lock is taken under it: what the feed says is read before it is taken. A namespace is
worked on by one committer thread at a time; its tickets, or its due grants, are the reasons to take it. Built by
app/quota/startup.py, its I/O goes through two ports (``FeedView``, ``Leases``) and a ``Clock`` that also waits
(app/quota/ports.py): the simulation (tests/app/quota/simulation.py) runs this very code on a schedule of its own.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable

from app import metrics
from app.admission.ports import QuotaUnavailable, Verdict
from app.kube.backoff import Backoff
from app.kube.errors import CONFLICT, ApiError, describe
from app.quota.core.decision import Ruling, Write, decide
from app.quota.core.encoding import MAX_LEDGER_BYTES, Ledger
from app.quota.core.scene import Ask, Scene, View
from app.quota.ports import (
    Clock,
    FeedView,
    Leases,
    ledger_full,
    queued_out,
    still_contended,
    still_undecided,
    unanswered,
)
from app.quota.state import NamespaceState, Ticket, due

ADMIT_BUDGET = 5.0  # seconds for one admission, sync wait included: half the API server's 10 s webhook timeout
REQUEST_TIMEOUT = 2.0  # seconds for one ledger read or write
MARK_WAIT = 2.0  # seconds a decision waits for this worker's Pod watch to reach the ledger's mark
NEWER_WAIT = 0.02  # seconds a lost compare-and-swap waits for the watch to bring the winner's ledger, then reads
# A lost compare-and-swap is retried after a short random pause only: one writer wins every round anyway, so a
# longer back-off only makes the last workers of a burst wait (measured: p99 2.6-3.1x -> 1.5-2x the no-quota p99)
LOST_ROUND = Backoff(first=0.002, cap=0.005, jitter=1.0)
MIN_READ = 0.1  # seconds at least for the read that tells whether a write without an answer landed
UNDECIDED_STEP = 0.05  # seconds between decisions while a grant of another worker may hold the room
# While this process holds open grants, an idle committer looks this often whether another worker asked for
# their room (a raised wanted count arrives by the feed's Lease watch, which does not wake it).
GRANT_LOOK = 0.02
CLOSE_RETRY = 0.02  # seconds before a grant whose closing failed is tried again
COMMIT_FAILED = "the quota commit failed"
log = logging.getLogger("hami_webhook.quota")


class _Lost(Exception):
    """The compare-and-swap did not store this write: another writer's won (``fresh`` None: the feed brings its
    ledger), or the write's answer was lost and ``fresh``, read since, does not hold it."""

    def __init__(self, fresh: Ledger | None) -> None:
        super().__init__()
        self.fresh = fresh


class _Tries:
    """One commit's requests to the API server, and what went wrong so far: what it says when time runs out."""

    def __init__(self, where: str, clock: Clock) -> None:
        self.where = where
        self._clock = clock
        self.lost = 0  # compare-and-swaps lost
        self.asked = False  # the ledger's wanted count was raised: another worker's grant holds the room
        self.unanswered: QuotaUnavailable | None = None  # the last request that got no answer
        self.until = 0.0  # monotonic: when the batch's first admission must be answered

    def call(self, request: Callable[[], Ledger]) -> Ledger:
        """``request``'s answer. A conflict raises _Lost; any other failure QuotaUnavailable saying what it was."""
        sent = self._clock.monotonic()
        try:
            return request()
        except ApiError as exc:
            if exc.code != CONFLICT:
                raise QuotaUnavailable(f"quota ledger {self.where}: {describe(exc)}") from exc
            metrics.quota_ledger_write("conflict")
            log.debug("quota ledger conflict", extra={"fields": {"ledger": self.where}})
            raise _Lost(None) from exc
        except Exception as exc:  # no answer (timeout, reset, refused): urllib3's or the socket's error
            self.unanswered = unanswered(self.where, self._clock.monotonic() - sent, describe(exc))
            raise self.unanswered from exc

    def why(self, namespace: str) -> QuotaUnavailable:
        """The true reason the admission's budget ran out."""
        if self.unanswered is not None:
            return self.unanswered
        if self.lost:
            return still_contended(self.where, ADMIT_BUDGET)
        if self.asked:
            return still_undecided(namespace, self.where, ADMIT_BUDGET)
        return queued_out(namespace, ADMIT_BUDGET)


class Committer:
    """Commits for every namespace of this process. Admission threads call ``alone``, ``scene`` and ``settle``;
    ``run`` is a committer thread's loop (``start`` runs ``threads`` of them; the simulation runs ``run`` in
    threads of its own)."""

    def __init__(
        self,
        feed: FeedView,
        leases: Leases,
        *,
        ttl: float,
        clock: Clock,
        new_id: Callable[[], str],
        hold_ttl: float = 0.0,
    ) -> None:
        self.feed = feed
        self.leases = leases
        self._ttl = ttl
        self._hold_ttl = hold_ttl
        self._clock = clock
        self._new_id = new_id
        lock = threading.Lock()
        self._work = threading.Condition(lock)  # committers wait here for a namespace to take
        self._settled = threading.Condition(lock)  # admissions wait here for their ticket
        self._namespaces: dict[str, NamespaceState] = {}
        self._taken: set[str] = set()  # namespaces a committer works on now
        self._stopped = False
        self._threads: list[threading.Thread] = []

    # --- the admission's side ------------------------------------------------------------------------

    def alone(self, namespace: str, ask: Ask) -> Verdict | None:
        """The verdict this process gives without the ledger (the same request again, room in an open grant)."""
        with self._work:
            return self._state(namespace).alone(ask, self._clock.monotonic())

    def scene(self, view: View, found: Ledger) -> Scene:
        """What this process knows of the namespace now, for one decision on ``found``."""
        wall, now = self._clock.time(), self._clock.monotonic()
        with self._work:
            mine = self._state(view.namespace).mine()
        return view.scene(found, wall=wall, now=now, ttl=self._ttl, mine=mine, hold_ttl=self._hold_ttl)

    def settle(self, namespace: str, ticket: Ticket) -> None:
        """Queue the ticket and wait until a committer settles it, by its deadline. A commit that took it in ends by
        then too (its requests wait no longer than its tickets' earliest deadline): its answer, which says why, is
        awaited a little longer, never a ticket still queued."""
        settled = lambda: ticket.settled  # noqa: E731
        with self._work:
            self._state(namespace).waiting.append(ticket)
            self._work.notify()
            if self._clock.wait_for(self._settled, settled, ticket.deadline - self._clock.monotonic()):
                return
            waiting = self._state(namespace).waiting
            if ticket in waiting or not self._clock.wait_for(self._settled, settled, REQUEST_TIMEOUT):
                if ticket in waiting:  # never taken up: no commit will settle it
                    waiting.remove(ticket)
                ticket.error = queued_out(namespace, ADMIT_BUDGET)

    # --- the committer's side ------------------------------------------------------------------------

    def start(self, threads: int) -> None:
        for index in range(threads):
            thread = threading.Thread(target=self.run, name=f"quota-committer-{index}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        with self._work:
            self._stopped = True
            self._work.notify_all()

    def run(self) -> None:
        """A committer thread: take a namespace with tickets or due grants, commit it, and again, until stopped."""
        while (namespace := self._take()) is not None:
            try:
                self._commit(namespace)
            finally:
                with self._work:
                    self._taken.discard(namespace)
                    self._work.notify()  # tickets queued meanwhile: the namespace is free to take again

    def _take(self) -> str | None:
        """The next namespace to commit (claimed), waiting until there is one; None once stopped."""
        while True:
            wanted = self._wanted_counts()
            with self._work:
                if self._stopped:
                    return None
                namespace = self._next(wanted)
                if namespace is not None:
                    self._taken.add(namespace)
                    return namespace
                self._clock.wait_for(self._work, functools.partial(self._ready, wanted), self._look())

    def _ready(self, wanted: dict[str, int]) -> bool:
        """What wakes an idle committer: stopped, or a namespace to take (under the lock)."""
        return self._stopped or self._next(wanted) is not None

    def _wanted_counts(self) -> dict[str, int]:
        """The wanted count of each ledger in which this process holds grants, as the feed has it (read before
        the lock is taken: a raised count arrives by the feed's Lease watch, which does not wake a committer)."""
        with self._work:
            holding = [namespace for namespace, state in self._namespaces.items() if state.grants]
        return {namespace: _wanted(self._cached(namespace)) for namespace in holding}

    def _cached(self, namespace: str) -> Ledger | None:
        """The feed's copy of the namespace's ledger, without waiting (None: it has none)."""
        return self.feed.wait_ledger(namespace, -1, 0.0)

    def _next(self, wanted: dict[str, int]) -> str | None:
        """A namespace no committer works on that has tickets queued, or else grants due (under the lock)."""
        free = [(namespace, state) for namespace, state in self._namespaces.items() if namespace not in self._taken]
        queued = next((namespace for namespace, state in free if state.waiting), None)
        if queued is not None:
            return queued
        now = self._clock.monotonic()
        for namespace, state in free:
            if state.retry_at <= now and any(due(g, wanted.get(namespace, 0), now) for g in state.grants.values()):
                return namespace
        return None

    def _look(self) -> float | None:
        """How long an idle committer may wait before a grant may fall due; None: until woken (under the lock)."""
        now = self._clock.monotonic()
        soonest = [
            max(state.retry_at, grant.closes_at) - now
            for namespace, state in self._namespaces.items()
            if namespace not in self._taken  # its committer looks when it is done
            for grant in state.grants.values()
        ]
        return max(min([GRANT_LOOK, *soonest]), 0.0) if soonest else None

    def _commit(self, namespace: str) -> None:
        """Decide the namespace's tickets (and whatever queues meanwhile) against the ledger, closing this process's
        due grants in the same compare-and-swap. Every ticket taken in is settled on return."""
        found = self._cached(namespace)
        tries = _Tries(self.leases.where(namespace), self._clock)
        closing_by = self._clock.monotonic() + ADMIT_BUDGET  # the bound of a commit that only closes grants
        batch: list[Ticket] = []
        try:
            while (gathered := self._gather(namespace, batch)) is not None:
                batch = gathered
                remaining = min((t.deadline for t in batch), default=closing_by) - self._clock.monotonic()
                if remaining <= 0:
                    raise tries.why(namespace)
                found, batch = self._round(namespace, found, batch, remaining, tries)
                if not batch:
                    return
        except QuotaUnavailable as exc:  # the batch was decided together: none of its verdicts stands alone
            self._failed(namespace, batch, exc)
        except Exception as exc:  # a bug: its tickets still get an answer, and the committer thread lives on
            log.exception("quota commit failed", extra={"fields": {"namespace": namespace}})
            self._failed(namespace, batch, QuotaUnavailable(f"namespace {namespace}: {COMMIT_FAILED}: {exc!r}"))

    def _failed(self, namespace: str, batch: list[Ticket], error: QuotaUnavailable) -> None:
        """The batch's tickets refused with ``error``; a closing of grants that failed is not tried again at once."""
        with self._work:
            for ticket in batch:
                if not ticket.settled:
                    ticket.error = error
            state = self._state(namespace)
            if state.grants:
                state.retry_at = self._clock.monotonic() + CLOSE_RETRY
            self._settled.notify_all()

    def _gather(self, namespace: str, batch: list[Ticket]) -> list[Ticket] | None:
        """The batch to decide now: what queued meanwhile joins; what this process's new grant can take, it takes.
        Freezes the grants this write closes; None when there is nothing to decide and no room to give back."""
        wanted = _wanted(self._cached(namespace))
        with self._work:
            state = self._state(namespace)
            batch = batch + state.waiting
            state.waiting = []
            now = self._clock.monotonic()
            for ticket in batch:
                ticket.verdict = state.alone(ticket.ask, now)
            self._settled.notify_all()
            batch = [t for t in batch if not t.settled]
            # Closed with this write: every grant when admissions need the ledger (they did not fit
            # into them), else those found due (window ended, or asked for).
            mine = [g for g in state.grants.values() if batch or g.closing or due(g, wanted, now)]
            for grant in mine:
                grant.closing = True
            if not batch and not any(g.unused() for g in mine):
                for grant in mine:  # nothing to decide, no room to give back: used-up grants just go
                    state.grants.pop(grant.id, None)
                return None
            return batch

    def _round(
        self, namespace: str, found: Ledger | None, batch: list[Ticket], remaining: float, tries: _Tries
    ) -> tuple[Ledger | None, list[Ticket]]:  # fmt: skip
        """One decision and its write; the ledger to decide on next and the tickets still undecided."""
        timeout = min(remaining, REQUEST_TIMEOUT)
        tries.until = self._clock.monotonic() + remaining
        try:
            if found is None:
                found = self._read(namespace, timeout, tries)
            if not self.feed.wait_pods(namespace, found.mark, min(remaining, MARK_WAIT)):
                raise QuotaUnavailable(
                    f"namespace {namespace}: this worker's Pod watch has not reached resourceVersion "
                    f"{found.mark}, which the quota ledger {tries.where} requires"
                )
            undecided = self._decide(namespace, found, batch, timeout, tries)
        except _Lost as lost:  # decided on a ledger that is gone: all of them again
            tries.lost += 1
            if lost.fresh is not None:  # a write whose answer was lost, and did not land: decide on the re-read
                return lost.fresh, batch
            # losers of one round spread out (their batches grow meanwhile), then take the winner's copy
            self._clock.sleep(min(LOST_ROUND.delay(tries.lost - 1), timeout))
            return self.feed.wait_ledger(namespace, found.rv if found else -1, min(NEWER_WAIT, timeout)), batch
        if undecided:  # a grant of another worker may hold the room; wait for it to close, then again
            tries.asked = True
            newer = self.feed.wait_ledger(namespace, found.rv, min(UNDECIDED_STEP, remaining))
            return newer or self._cached(namespace), undecided
        return found, []

    def _read(self, namespace: str, timeout: float, tries: _Tries) -> Ledger:
        """The ledger from the API server (offered to the feed's cache)."""
        found = tries.call(lambda: self.leases.read(namespace, timeout))
        self.feed.offer(found)
        return found

    def _store(self, found: Ledger, write: Write, timeout: float, tries: _Tries) -> Ledger:
        """``write`` stored with compare-and-swap; the ledger as stored. Raises _Lost when another writer won,
        or when the answer was lost and a re-read shows the write did not land: a write is never sent twice
        blindly (the re-read says whether it landed: a write that added an entry or joined a hold can tell)."""
        try:
            return tries.call(lambda: self.leases.write(found, write.text(), write.mark, write.wanted, timeout))
        except QuotaUnavailable as exc:
            left = tries.until - self._clock.monotonic()
            if exc is not tries.unanswered or left < MIN_READ:
                raise  # refused, or no time left to learn whether it landed (if it did, its entry expires)
            unanswered_write = exc
        try:
            fresh = self._read(found.namespace, min(left, REQUEST_TIMEOUT), tries)
        except QuotaUnavailable:
            raise unanswered_write from None
        if write.landed(found.entries, fresh.entries):
            return fresh  # it landed; only its answer was lost
        raise _Lost(fresh)

    def _decide(
        self, namespace: str, found: Ledger, batch: list[Ticket], timeout: float, tries: _Tries
    ) -> list[Ticket]:  # fmt: skip
        """Verdicts for the batch on ``found`` (app/quota/core/decision.py) and its write when one is needed, the
        tickets settled once it is stored; returns the tickets that cannot be decided yet."""
        scene = self.scene(self.feed.view(namespace, found.entries), found)
        with self._work:
            burst = self._state(namespace).burst(scene.now, tries.lost > 0)
        ruling = decide(
            scene, [t.ask for t in batch], wanted=found.wanted, ask=not tries.asked, burst=burst, new_id=self._new_id()
        )
        write = ruling.write
        if write is None:  # nothing to write: the grants being closed are closed (or gone) already
            with self._work:
                self._state(namespace).forget_closed()
                self._settle(batch, ruling, None)
            return [batch[i] for i in ruling.undecided]
        sent = self._clock.monotonic()
        written = self._store(found, write, timeout, tries)
        metrics.quota_ledger_write("written")
        fields = {"namespace": namespace, "reserved": len(ruling.reserved), "ahead": write.ahead}
        log.debug("quota ledger written", extra={"fields": fields | {"entries": len(write.entries)}})
        self.feed.offer(written)
        full = ledger_full(tries.where, len(write.entries), MAX_LEDGER_BYTES, self._ttl) if ruling.full else None
        with self._work:
            reserved = [(batch[i].ask, _reservation(ruling.verdicts[i])) for i in ruling.reserved]
            self._state(namespace).written(write, reserved, sent, scene.now)
            self._settle(batch, ruling, full)
        for _ in ruling.full:
            metrics.quota_ledger_full(namespace)
        return [batch[i] for i in ruling.undecided]

    def _settle(self, batch: list[Ticket], ruling: Ruling, full: QuotaUnavailable | None) -> None:
        """The ruling's verdicts on their tickets (its write stored, if it has one), ``full`` on those the ledger
        has no room for (under the lock)."""
        for ticket, verdict in zip(batch, ruling.verdicts, strict=True):
            if verdict is not None:
                ticket.verdict = verdict
        for index in ruling.full:
            batch[index].error = full
        self._settled.notify_all()

    def _state(self, namespace: str) -> NamespaceState:
        """The namespace's state, made on first use (under the lock)."""
        return self._namespaces.setdefault(namespace, NamespaceState())


def _reservation(verdict: Verdict | None) -> str:
    return verdict.reservation if verdict is not None else ""


def _wanted(found: Ledger | None) -> int:
    return found.wanted if found is not None else 0
