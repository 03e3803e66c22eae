"""LedgerQuota, the real QuotaPort: a worker's admissions into a namespace, decided together (app/quota/decision.py)
and written to the ledger Lease with compare-and-swap; grants of room taken ahead, and their closing.

Rules: docs/rules.md#no-over-admission-under-concurrency, #undecided-quota-is-an-error-never-an-admission.
How it stays exact: docs/quota.md. This module holds only what the pure decision cannot: batching (the first
waiter with no commit in flight commits everything queued), the locks, the compare-and-swap and its retries,
and the grants this worker holds (closed when due by its GrantCloser, app/quota/closer.py). Its I/O goes
through two ports (``FeedView``, ``LedgerStore``) and a ``Clock`` (app/quota/seams.py), so the protocol
simulation (tests/app/quota/simulation.py) runs this very code.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from app import metrics
from app.kube.backoff import Backoff
from app.kube.errors import CONFLICT, ApiError, describe
from app.quota.closer import GrantCloser
from app.quota.contact import Contact
from app.quota.decision import Ask, Scene, Write, decide, denial
from app.quota.demand import Demand, amounts
from app.quota.ledger import MAX_LEDGER_BYTES, Snapshot
from app.quota.limits import limited
from app.quota.port import (
    FITS,
    QuotaUnavailable,
    Verdict,
    ledger_full,
    queued_out,
    still_contended,
    still_undecided,
    unanswered,
)
from app.quota.seams import SYSTEM_CLOCK, Clock, FeedView, LedgerStore
from app.quota.state import NamespaceState, Ticket

ADMIT_BUDGET = 5.0  # seconds for one admission, sync wait included: half the API server's 10 s webhook timeout
REQUEST_TIMEOUT = 2.0  # seconds for one ledger read or write
SYNC_WAIT = 3.0  # seconds an admission waits for a just-started worker's (or a new quota's) first lists
MARK_WAIT = 2.0  # seconds a decision waits for this worker's Pod watch to reach the ledger's mark
NEWER_WAIT = 0.02  # seconds a lost compare-and-swap waits for the watch to bring the winner's ledger, then reads
# A lost compare-and-swap is retried after a short random pause only: one writer wins every round anyway, so a
# longer back-off only makes the last workers of a burst wait (measured: p99 2.6-3.1x -> 1.5-2x the no-quota p99)
LOST_ROUND = Backoff(first=0.002, cap=0.005, jitter=1.0)
MIN_READ = 0.1  # seconds at least for the read that tells whether a write without an answer landed
UNDECIDED_STEP = 0.05  # seconds between decisions while a grant of another worker may hold the room
log = logging.getLogger("hami_webhook.quota")


class _Lost(Exception):
    """The compare-and-swap did not store this write: another writer's won (``fresh`` None: the feed brings its
    ledger), or the write's answer was lost and ``fresh``, read since, does not hold it."""

    def __init__(self, fresh: Snapshot | None) -> None:
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

    def call(self, request: Callable[[], Snapshot]) -> Snapshot:
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


class LedgerQuota:
    """Namespace device quota enforced across workers and replicas.

    ``closer``: run a thread that closes grants when due (the server); without it, whoever drives the port calls
    ``closer.close_due()`` (the simulation)."""

    def __init__(
        self,
        feed: FeedView,
        ledger: LedgerStore,
        *,
        ttl: float,
        stale_after: float,
        clock: Clock = SYSTEM_CLOCK,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        closer: bool = True,
    ) -> None:
        self.feed = feed
        self.ledger = ledger
        self._ttl = ttl
        self._stale_after = stale_after
        self._clock = clock
        self._new_id = new_id
        self._namespaces: dict[str, NamespaceState] = {}
        self._namespaces_lock = threading.Lock()
        self.closer = GrantCloser(feed, clock, self._known, self._close, thread=closer)
        self.contact = Contact(ledger.probe, feed.quota_in_play, feed.nudge, clock)

    def governs(self, namespace: str) -> bool:
        """Also true while the feed cannot tell (not synced, broken too long): admit() must then refuse,
        or a fresh worker would admit everything before its first ResourceQuota list arrives."""
        return bool(self._unfit()) or bool(self.feed.limits(namespace))

    def admit(self, namespace: str, demands: Sequence[Demand], *, uid: str, dry_run: bool) -> Verdict:
        requested = amounts(demands)
        if not requested:
            return FITS  # no device resource: nothing to count
        deadline = self._clock.monotonic() + ADMIT_BUDGET
        unfit = self._unfit(wait=SYNC_WAIT)  # before reading limits: an unsynced feed knows of no quota at all
        if unfit:
            raise QuotaUnavailable(unfit)
        if not limited(self.feed.limits(namespace), requested):
            return FITS  # no device quota here: the ledger is never touched
        lost = self.contact.lost()
        if lost:  # this replica is cut off (and unready): say so now, not after a request's timeout
            raise QuotaUnavailable(f"namespace {namespace}: {lost}")
        if not self.feed.namespace_synced(namespace, wait=max(min(SYNC_WAIT, deadline - self._clock.monotonic()), 0)):
            raise QuotaUnavailable(f"the Pods of namespace {namespace} have not been listed yet")
        ticket = Ticket(Ask(uid, requested, dry_run), deadline)
        state = self._namespace(namespace)
        with state.cond:
            ticket.verdict = state.from_grant(ticket.ask, self._clock.monotonic())
        if ticket.verdict is None:
            ticket.verdict = self._denied_at_once(namespace, state, ticket.ask)
        if ticket.verdict is None:
            with state.cond:
                state.waiting.append(ticket)
            self._settle(namespace, state, ticket)
        if ticket.error is not None:
            raise ticket.error
        assert ticket.verdict is not None
        return ticket.verdict

    def _denied_at_once(self, namespace: str, state: NamespaceState, ask: Ask) -> Verdict | None:
        """A denial from the cached ledger, without waiting for a commit in flight: what does not fit even
        counting only what is certainly taken does not fit the newest ledger either. None: the ledger decides."""
        found = self.feed.ledger(namespace)
        if found is None or ask.uid in found.entries or not self.feed.caught_up(namespace, found.mark, 0):
            return None  # (a request sent again whose entry is there: the commit says it is reserved)
        refused = denial(self._scene(namespace, state, found), ask.requested)
        return Verdict(refused) if refused else None

    def _scene(self, namespace: str, state: NamespaceState, found: Snapshot) -> Scene:
        """What this worker knows of the namespace now, for one decision; records first sights of others' grants."""
        used, held = self.feed.seen(namespace, found.entries)
        limits, wall, now = self.feed.limits(namespace), self._clock.time(), self._clock.monotonic()
        with state.cond:
            first_seen = state.sighted(found.entries, wall, now)
            return Scene(namespace, limits, found.entries, found.mark, used, held, wall, now, state.mine(), first_seen)

    def _settle(self, namespace: str, state: NamespaceState, ticket: Ticket) -> None:
        """Wait until the ticket is settled; the first waiter with no commit in flight commits everything queued
        (group commit)."""
        while (batch := self._turn(namespace, state, ticket)) is not None:
            self._commit_claimed(namespace, state, batch, ticket.deadline)

    def _turn(self, namespace: str, state: NamespaceState, ticket: Ticket) -> list[Ticket] | None:
        """Wait for the ticket to be settled (None) or for this thread's turn to commit: the batch it claimed."""
        with state.cond:
            while not ticket.settled:
                if not state.busy:
                    state.busy = True
                    batch, state.waiting = state.waiting, []
                    return batch
                remaining = ticket.deadline - self._clock.monotonic()
                if remaining <= 0 and ticket in state.waiting:  # never picked up: give up on our own
                    state.waiting.remove(ticket)
                    ticket.error = queued_out(namespace, ADMIT_BUDGET)
                    return None
                # in a commit already: that commit ends by the earliest deadline of its batch, plus one request
                state.cond.wait(max(remaining, 0) + REQUEST_TIMEOUT)
        return None

    def _commit_claimed(self, namespace: str, state: NamespaceState, batch: list[Ticket], deadline: float) -> None:
        """Commit as the namespace's committer (``busy`` claimed under its lock), then hand the role back."""
        try:
            self._commit(namespace, state, batch, deadline)
        finally:
            with state.cond:
                state.busy = False
                state.cond.notify_all()

    def _commit(self, namespace: str, state: NamespaceState, batch: list[Ticket], deadline: float) -> None:
        """Decide ``batch`` (and whatever queues meanwhile) against the ledger, closing this worker's grants
        in the same compare-and-swap. Every ticket taken in is settled on return."""
        found = self.feed.ledger(namespace)
        tries = _Tries(self.ledger.where(namespace), self._clock)
        try:
            while (gathered := self._gather(namespace, state, batch)) is not None:
                batch = gathered
                remaining = min([deadline] + [t.deadline for t in batch]) - self._clock.monotonic()
                if remaining <= 0:
                    raise tries.why(namespace)
                found, batch = self._round(namespace, state, found, batch, remaining, tries)
                if not batch:
                    return
        except QuotaUnavailable as exc:  # the batch was decided together: none of its verdicts stands alone
            for ticket in batch:
                ticket.verdict, ticket.error = None, exc

    def _gather(self, namespace: str, state: NamespaceState, batch: list[Ticket]) -> list[Ticket] | None:
        """The batch to decide now: what queued meanwhile joins; what this worker's new grant can take, it takes.
        Freezes the grants this write closes; None when there is nothing to decide and no room to give back."""
        with state.cond:
            batch = batch + state.waiting
            state.waiting = []
            now = self._clock.monotonic()
            for ticket in batch:
                if not ticket.settled:
                    ticket.verdict = state.from_grant(ticket.ask, now)
            batch = [t for t in batch if not t.settled]
            state.cond.notify_all()
            # Closed with this write: every grant when admissions need the ledger (they did not fit
            # into them), else those the closer found due (window ended, or asked for).
            mine = [g for g in state.grants.values() if batch or g.frozen or self.closer.due(namespace, g)]
            for grant in mine:
                grant.frozen = True
            if not batch and not any(g.unused() for g in mine):
                for grant in mine:  # nothing to decide, no room to give back: used-up grants just go
                    state.grants.pop(grant.id, None)
                return None
            return batch

    def _round(
        self, namespace: str, state: NamespaceState, found: Snapshot | None, batch: list[Ticket], remaining: float,
        tries: _Tries,
    ) -> tuple[Snapshot | None, list[Ticket]]:  # fmt: skip
        """One decision and its write; the ledger to decide on next and the tickets still undecided."""
        timeout = min(remaining, REQUEST_TIMEOUT)
        tries.until = self._clock.monotonic() + remaining
        try:
            if found is None:
                found = self._read(namespace, timeout, tries)
            if not self.feed.caught_up(namespace, found.mark, min(remaining, MARK_WAIT)):
                raise QuotaUnavailable(
                    f"namespace {namespace}: this worker's Pod watch has not reached resourceVersion "
                    f"{found.mark}, which the quota ledger {tries.where} requires"
                )
            undecided = self._decide(namespace, state, found, batch, timeout, tries)
        except _Lost as lost:
            tries.lost += 1
            for ticket in batch:  # decided on a ledger that is gone: all of them again
                ticket.verdict = ticket.error = None
            if lost.fresh is not None:  # a write whose answer was lost, and did not land: decide on the re-read
                return lost.fresh, batch
            # losers of one round spread out (their batches grow meanwhile), then take the winner's copy
            self._clock.sleep(min(LOST_ROUND.delay(tries.lost - 1), timeout))
            return self.feed.wait_ledger_newer(namespace, found.rv if found else -1, min(NEWER_WAIT, timeout)), batch
        if undecided:  # a grant of another worker may hold the room; wait for it to close, then again
            tries.asked = True
            self.feed.wait_ledgers(min(UNDECIDED_STEP, remaining))
            return self.feed.ledger(namespace), undecided
        return found, []

    def _read(self, namespace: str, timeout: float, tries: _Tries) -> Snapshot:
        """The ledger from the API server (offered to the feed's cache)."""
        found = tries.call(lambda: self.ledger.read(namespace, timeout))
        self.feed.offer_ledger(found)
        return found

    def _store(self, found: Snapshot, write: Write, timeout: float, tries: _Tries) -> Snapshot:
        """``write`` stored with compare-and-swap; the ledger as stored. Raises _Lost when another writer won,
        or when the answer was lost and a re-read shows the write did not land: a write is never sent twice
        blindly (the re-read says whether it landed; only a write that added an entry can tell)."""
        try:
            return tries.call(lambda: self.ledger.write(found, write.text(), write.mark, write.wanted, timeout))
        except QuotaUnavailable as exc:
            left = tries.until - self._clock.monotonic()
            if exc is not tries.unanswered or left < MIN_READ:
                raise  # refused, or no time left to learn whether it landed (if it did, its entry expires)
            unanswered_write = exc
        try:
            fresh = self._read(found.namespace, min(left, REQUEST_TIMEOUT), tries)
        except QuotaUnavailable:
            raise unanswered_write from None
        if write.entry and write.entry not in found.entries and write.entry in fresh.entries:
            return fresh  # it landed; only its answer was lost
        raise _Lost(fresh)

    def _decide(
        self, namespace: str, state: NamespaceState, found: Snapshot, batch: list[Ticket], timeout: float,
        tries: _Tries,
    ) -> list[Ticket]:  # fmt: skip
        """Verdicts for the batch on ``found`` (app/quota/decision.py), and its write when one is needed;
        returns the tickets that cannot be decided yet."""
        scene = self._scene(namespace, state, found)
        with state.cond:
            burst = state.burst(scene.now, tries.lost > 0)
        decision = decide(
            scene, [t.ask for t in batch], wanted=found.wanted, ask=not tries.asked, burst=burst, ttl=self._ttl,
            new_id=self._new_id(),
        )  # fmt: skip
        for ticket, verdict in zip(batch, decision.verdicts, strict=True):
            ticket.verdict = verdict
        undecided = [batch[i] for i in decision.undecided]
        if decision.write is None:  # nothing to write: the grants being closed are closed (or gone) already
            with state.cond:
                state.forget_closed()
                state.cond.notify_all()
            return undecided
        write = decision.write
        for index in decision.full:
            metrics.quota_ledger_full(namespace)
            batch[index].error = ledger_full(
                self.ledger.where(namespace), len(write.entries), MAX_LEDGER_BYTES, self._ttl
            )
        sent = self._clock.monotonic()
        written = self._store(found, write, timeout, tries)
        metrics.quota_ledger_write("written")
        fields = {"namespace": namespace, "reserved": len(decision.reserved), "ahead": write.ahead}
        log.debug("quota ledger written", extra={"fields": fields | {"entries": len(write.entries)}})
        self.feed.offer_ledger(written)
        with state.cond:
            reserved = [batch[i] for i in decision.reserved]
            if state.written(write, [t.ask for t in reserved], sent, scene.now):
                self.closer.start()
            for ticket in reserved:
                ticket.verdict = Verdict(reservation=write.entry)
            state.cond.notify_all()
        return undecided

    def _close(self, namespace: str, state: NamespaceState) -> None:
        """Close the namespace's due grants for the closer: a commit with no admissions, unless one is in flight
        (it closes them anyway)."""
        with state.cond:
            if state.busy:
                return
            state.busy = True
        self._commit_claimed(namespace, state, [], self._clock.monotonic() + ADMIT_BUDGET)

    # --- helpers ---------------------------------------------------------------------------------

    def _unfit(self, wait: float = 0) -> str:
        """Why the feed cannot be trusted now ("" when it can); waits up to ``wait`` s for a first sync."""
        if not self.feed.synced(wait=wait):
            return "the Pod and ResourceQuota lists have not synced yet"
        broken = self.feed.broken_for()
        if broken > self._stale_after:
            return f"the Pod/ResourceQuota watch has been broken for {broken:.0f} s"
        return ""

    def _namespace(self, namespace: str) -> NamespaceState:
        with self._namespaces_lock:
            return self._namespaces.setdefault(namespace, NamespaceState())

    def _known(self) -> list[tuple[str, NamespaceState]]:
        with self._namespaces_lock:
            return list(self._namespaces.items())

    def status(self) -> dict[str, Any]:
        """Ready: the feed synced and not broken too long, the API server answering, and every stream answered
        since it last came back (a watch from before a partition may be a silent socket)."""
        feed = self.feed.status()
        synced = all(feed["synced"].values())
        lost = self.contact.lost()
        caught_up = self.feed.answered_since(self.contact.regained_at)
        ready = synced and feed["broken_seconds"] <= self._stale_after and not lost and caught_up
        return {"ready": ready, "quota": "on", **feed, "api_server": lost or "answers", "caught_up": caught_up}

    def start(self) -> None:
        self.feed.start()
        self.contact.start()

    def stop(self) -> None:
        self.contact.stop()
        self.closer.stop()
        self.feed.stop()
        self.ledger.close()
