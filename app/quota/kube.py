"""The real QuotaPort: limits and usage from the feed, atomic check-and-reserve through the ledger.

Rules: docs/rules.md#no-over-admission-under-concurrency, #undecided-quota-is-an-error-never-an-admission.

A Pod is admitted only if used + reserved + requested <= limit for every limited resource, decided against
the namespace's ledger Lease and written back with compare-and-swap, so workers and replicas never admit
past the limit together. The rules, and why they hold, are in docs/quota.md ("How it stays exact"):

- Group commit: the admissions waiting on one namespace in a worker are decided together and written in one
  compare-and-swap, from the worker's cached copy of the ledger (kept fresh by the feed's watch); a 409
  brings the newer copy and the batch is decided again.
- Grants: a worker admitting into a namespace in a burst writes, with its batch, room for the Pods it
  expects in the next moment (at most a quarter of the room left). For WINDOW seconds after sending that
  write it admits into the grant without asking the API server, then closes it by writing what it admitted.
  Others count an open grant as wholly taken when they admit, and as possibly free when they deny: what does
  not fit even so is denied, what lies in between waits for the grant to close (or for its window, as they
  see it, to pass).
- Dropping: whoever writes drops the entries whose Pods it has seen take all their room, and moves the
  ledger's mark to those Pods' resourceVersion; nobody decides on a ledger before its Pod watch has reached
  the mark. So the ledger holds only the room of Pods somebody may not have seen yet.
- A denial needs no write: an older copy of the ledger never counts more than the newest.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from app import metrics
from app.kube.backoff import Backoff
from app.kube.config import LOAD_ERRORS, load_configuration
from app.kube.errors import CONFLICT, ApiError, describe
from app.quota.demand import Amounts, Demand, amounts
from app.quota.feed import Feed, accumulate, unseen
from app.quota.ledger import MAX_LEDGER_BYTES, Entry, Ledger, Snapshot, encode
from app.quota.limits import check, limited
from app.quota.port import FITS, QuotaOff, QuotaPort, QuotaUnavailable, Verdict
from app.settings import Settings

ADMIT_BUDGET = 5.0  # seconds for one admission, sync wait included: half the API server's 10 s webhook timeout
REQUEST_TIMEOUT = 2.0  # seconds for one ledger read or write
SYNC_WAIT = 3.0  # seconds an admission waits for a just-started worker's (or a new quota's) first lists
MARK_WAIT = 2.0  # seconds a decision waits for this worker's Pod watch to reach the ledger's mark
NEWER_WAIT = 0.02  # seconds a lost compare-and-swap waits for the watch to bring the winner's ledger, then reads
# A lost compare-and-swap is retried after a short random pause only: one writer wins every round anyway, so a
# longer back-off only makes the last workers of a burst wait (measured: p99 2.6-3.1x -> 1.5-2x the no-quota p99)
LOST_ROUND = Backoff(first=0.002, cap=0.005, jitter=1.0)
WINDOW = 1.0  # seconds a worker admits into a grant it wrote, counted from before the write
SLACK = 0.25  # others count a grant as possibly free this much longer, on their own clocks, from first sight
BURST = 4  # admissions per second into one namespace, in one worker, from which it takes room ahead
# A grant takes at most 1/SHARE of the room left, and at least BATCHES_AHEAD batches like the one it is written
# with. Measured with one process per replica (3 replicas, 300-Pod bursts): 8 and 4 -> 4 and 8 cut ledger
# writes from 0.16 to 0.11 per Pod (lost compare-and-swaps 0.08 -> 0.04) and room-for-50's p99 from 1.49x to
# 1.10x the no-quota p99.
SHARE = 4
BATCHES_AHEAD = 8
AHEAD_MAX = 64  # Pods' worth of room taken ahead at most
UNDECIDED_STEP = 0.05  # seconds between decisions while a grant of another worker may hold the room
CLOSER_RETRY = 0.02  # seconds before the closer looks again at a grant it could not close yet
REMEMBERED = 4096  # request uids remembered per namespace, so a request sent again is not reserved twice
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
class _Grant:
    """Room this worker took ahead in a namespace: admissions go into it, without the API, until it closes."""

    id: str
    amounts: Amounts  # as written in the ledger
    spent: Amounts  # admitted into it so far
    closes_at: float  # monotonic: WINDOW after the write that made it was sent
    wanted: int  # the ledger's wanted count when it was made: a higher one asks for it to be closed at once
    frozen: bool = False  # a write closing it is being made: nothing more goes into it

    def room(self) -> Amounts:
        return {name: amount - self.spent.get(name, 0) for name, amount in self.amounts.items()}


@dataclass(eq=False)
class _Namespace:
    """One namespace's admissions in this process: one thread commits, the others wait for it."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    waiting: list[_Ticket] = field(default_factory=list)
    busy: bool = False
    grants: dict[str, _Grant] = field(default_factory=dict)
    admitted: deque[float] = field(default_factory=deque)  # when recent admissions were made (their rate)
    reserved: dict[str, str] = field(default_factory=dict)  # request uid -> the entry that holds its room
    first_seen: dict[str, float] = field(default_factory=dict)  # others' open grants: when first seen here


class KubeQuota:
    """Namespace device quota enforced across workers and replicas."""

    def __init__(self, feed: Feed, ledger: Ledger, *, ttl: float, stale_after: float) -> None:
        self.feed = feed
        self.ledger = ledger
        self._ttl = ttl
        self._stale_after = stale_after
        self._namespaces: dict[str, _Namespace] = {}
        self._namespaces_lock = threading.Lock()
        self._stopped = threading.Event()
        self._closer = threading.Thread(target=self._close_grants, name="quota-grant-closer", daemon=True)

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
        ticket = _Ticket(requested, uid, dry_run, deadline)
        state = self._namespace(namespace)
        with state.cond:
            ticket.verdict = self._from_grant(state, ticket)
        if ticket.verdict is None:
            ticket.verdict = self._denied_at_once(namespace, state, ticket)
        if ticket.verdict is None:
            with state.cond:
                state.waiting.append(ticket)
                self._settle(namespace, state, ticket)
        if ticket.error is not None:
            raise ticket.error
        assert ticket.verdict is not None
        return ticket.verdict

    def _from_grant(self, state: _Namespace, ticket: _Ticket) -> Verdict | None:
        """The verdict this worker can give on its own (lock held): the same request again, or room left in
        one of its open grants; None when the ledger must decide."""
        if ticket.uid in state.reserved:  # the API server sent this very request again: it is already reserved
            return Verdict(reservation=state.reserved[ticket.uid])
        now = time.monotonic()
        for grant in state.grants.values():
            if grant.frozen or now >= grant.closes_at:
                continue
            room = grant.room()
            if all(room.get(name, 0) >= amount for name, amount in ticket.requested.items()):
                if ticket.dry_run:
                    return FITS
                accumulate(grant.spent, ticket.requested)
                self._remember(state, ticket.uid, grant.id, now)
                return Verdict(reservation=grant.id)
        return None

    def _denied_at_once(self, namespace: str, state: _Namespace, ticket: _Ticket) -> Verdict | None:
        """A denial from the cached ledger, without waiting for a commit in flight: what does not fit even
        counting only what is certainly taken does not fit the newest ledger either. None: the ledger decides."""
        found = self.feed.ledger(namespace)
        if found is None or ticket.uid in found.entries or not self.feed.caught_up(namespace, found.mark, 0):
            return None  # (a request sent again whose entry is there: the commit says it is reserved)
        _, lower, _, _, _ = self._account(namespace, state, found, time.time(), time.monotonic())
        denial = check(namespace, self.feed.limits(namespace), lower, ticket.requested)
        return Verdict(denial) if denial else None

    def _settle(self, namespace: str, state: _Namespace, ticket: _Ticket) -> None:
        """Wait (lock held) until the ticket is settled; the first waiter with no commit in flight commits
        everything queued (group commit)."""
        while not ticket.settled:
            if not state.busy:
                self._commit_locked(namespace, state, state.waiting.copy(), ticket.deadline)
                continue
            remaining = ticket.deadline - time.monotonic()
            if remaining <= 0 and ticket in state.waiting:  # never picked up: give up on our own
                state.waiting.remove(ticket)
                ticket.error = QuotaUnavailable(
                    f"namespace {namespace}: timed out waiting for other admissions in this worker"
                )
                return
            # in a commit already: that commit ends by the earliest deadline of its batch, plus one request
            state.cond.wait(max(remaining, 0) + REQUEST_TIMEOUT)

    def _commit_locked(self, namespace: str, state: _Namespace, batch: list[_Ticket], deadline: float) -> None:
        """Become the namespace's committer (lock held on entry and exit, released while committing)."""
        state.busy = True
        state.waiting = [t for t in state.waiting if t not in batch]
        state.cond.release()
        try:
            self._commit(namespace, state, batch, deadline)
        finally:
            state.cond.acquire()
            state.busy = False
            state.cond.notify_all()

    def _commit(self, namespace: str, state: _Namespace, batch: list[_Ticket], deadline: float) -> None:
        """Decide ``batch`` (and whatever queues meanwhile) against the ledger, closing this worker's grants
        in the same compare-and-swap. Every ticket taken in is settled on return."""
        found = self.feed.ledger(namespace)
        lost, asked = 0, False
        contended = QuotaUnavailable(f"quota ledger {self._where(namespace)} stayed contended for {ADMIT_BUDGET:g} s")
        try:
            while True:
                with state.cond:  # what queued meanwhile joins; what this worker's new grant can take, it takes
                    batch += state.waiting
                    state.waiting = []
                    for ticket in batch:
                        if not ticket.settled:
                            ticket.verdict = self._from_grant(state, ticket)
                    batch = [t for t in batch if not t.settled]
                    state.cond.notify_all()
                    # Closed with this write: every grant when admissions need the ledger (they did not fit
                    # into them), else those the closer found due (window ended, or asked for).
                    mine = [g for g in state.grants.values() if batch or g.frozen or self._due(namespace, g)]
                    for grant in mine:
                        grant.frozen = True
                    if not batch and not any(any(v > 0 for v in g.room().values()) for g in mine):
                        for grant in mine:  # nothing to decide, no room to give back: used-up grants just go
                            state.grants.pop(grant.id, None)
                        return
                remaining = min([deadline] + [t.deadline for t in batch]) - time.monotonic()
                if remaining <= 0:
                    raise contended if lost else self._undecided(namespace, batch)
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
                    batch = self._decide(namespace, state, found, batch, mine, timeout, not asked, lost > 0)
                    if not batch:
                        return
                    asked = True
                    # undecided: a grant of another worker may hold the room; wait for it to close, then again
                    self.feed.wait_ledgers(min(UNDECIDED_STEP, remaining))
                    found = self.feed.ledger(namespace)
                except ApiError as exc:
                    if exc.code != CONFLICT:
                        raise QuotaUnavailable(f"quota ledger {self._where(namespace)}: {describe(exc)}") from exc
                    lost += 1
                    metrics.quota_ledger_write("conflict")
                    log.debug("quota ledger conflict", extra={"fields": {"namespace": namespace, "batch": len(batch)}})
                    rv = found.rv if found is not None else -1
                    for ticket in batch:  # decided on a ledger that is gone: all of them again
                        ticket.verdict = ticket.error = None
                    # losers of one round spread out (their batches grow meanwhile), then take the winner's copy
                    time.sleep(min(LOST_ROUND.delay(lost - 1), timeout))
                    found = self.feed.wait_ledger_newer(namespace, rv, min(NEWER_WAIT, timeout))
                except QuotaUnavailable:
                    raise
                except Exception as exc:
                    if lost and deadline <= time.monotonic():
                        raise contended from exc  # the budget ran out mid-request, after lost rounds
                    raise QuotaUnavailable(f"quota ledger {self._where(namespace)}: {describe(exc)}") from exc
        except QuotaUnavailable as exc:  # the batch was decided together: none of its verdicts stands alone
            for ticket in batch:
                ticket.verdict, ticket.error = None, exc

    def _undecided(self, namespace: str, batch: list[_Ticket]) -> QuotaUnavailable:
        return QuotaUnavailable(
            f"namespace {namespace}: room held by another worker's grant did not come free within "
            f"{ADMIT_BUDGET:g} s (quota ledger {self._where(namespace)})"
        )

    def _decide(
        self,
        namespace: str,
        state: _Namespace,
        found: Snapshot,
        batch: list[_Ticket],
        mine: list[_Grant],
        timeout: float,
        ask: bool,
        contended: bool,
    ) -> list[_Ticket]:
        """Verdicts for the batch on ``found``; one compare-and-swap when any Pod is reserved, a grant of this
        worker is closed, or (``ask``) undecided tickets ask the holders of open grants to close them.
        Returns the tickets that cannot be decided yet."""
        wall, now = time.time(), time.monotonic()
        limits = self.feed.limits(namespace)
        live, lower, upper, keep, mark = self._account(namespace, state, found, wall, now)
        closing = {g.id: g for g in mine if g.id in live}
        reserve: list[_Ticket] = []
        taking: Amounts = {}
        undecided: list[_Ticket] = []
        for ticket in batch:
            if ticket.uid in live and ticket.uid not in closing:  # sent again: its entry is there already
                ticket.verdict = Verdict(reservation=ticket.uid)
            elif not limited(limits, ticket.requested):
                ticket.verdict = FITS  # the quota went meanwhile
            elif denial := check(namespace, limits, _plus(lower, taking), ticket.requested):
                ticket.verdict = Verdict(denial)
            elif check(namespace, limits, _plus(upper, taking), ticket.requested):
                undecided.append(ticket)
            elif ticket.dry_run:  # dry runs check but never reserve (docs/rules.md#dry-runs-change-nothing)
                ticket.verdict = FITS
            else:
                accumulate(taking, ticket.requested)
                reserve.append(ticket)
        closes = any(keep.get(g.id) != live[g.id] for g in closing.values())
        wanted = found.wanted + 1 if undecided and ask else found.wanted
        if not reserve and not closes and wanted == found.wanted:
            with state.cond:
                state.cond.notify_all()
            return undecided  # denials and dry runs only: no write (an older copy never counts more)
        grant_id = ""
        ahead: Amounts = {}
        if reserve:
            ahead = self._ahead(state, now, limits, _plus(upper, taking), taking, len(reserve), contended)
            grant_id = reserve[0].uid if len(reserve) == 1 and not ahead else uuid.uuid4().hex
            # a Pod admitted into a grant as its window ends may appear a TTL later
            expires = round(wall + self._ttl + (WINDOW if ahead else 0), 1)
            keep[grant_id] = Entry(expires, _plus(taking, ahead), open=bool(ahead))
        text = encode(keep)
        if len(text) > MAX_LEDGER_BYTES:
            reserve = self._overflow(namespace, keep, grant_id, reserve, ahead, taking)
            text = encode(keep)
        sent = time.monotonic()
        written = self.ledger.write(found, text, mark, wanted, timeout)
        metrics.quota_ledger_write("written")
        fields = {"namespace": namespace, "reserved": len(reserve), "ahead": ahead, "closed": len(closing)}
        log.debug(
            "quota ledger written", extra={"fields": fields | {"entries": len(keep), "undecided": len(undecided)}}
        )
        self.feed.offer_ledger(written)
        with state.cond:
            for grant in mine:
                state.grants.pop(grant.id, None)
            if reserve and grant_id in keep:
                if ahead:
                    grant = _Grant(grant_id, keep[grant_id].amounts, dict(taking), sent + WINDOW, wanted)
                    state.grants[grant_id] = grant
                    self._start_closer()
                for ticket in reserve:
                    ticket.verdict = Verdict(reservation=grant_id)
                    self._remember(state, ticket.uid, grant_id, now)
            state.cond.notify_all()
        return undecided

    def _account(
        self, namespace: str, state: _Namespace, found: Snapshot, wall: float, now: float
    ) -> tuple[dict[str, Entry], Amounts, Amounts, dict[str, Entry], int]:
        """The ledger's live entries; what is taken in the namespace at least and at most (Pods as seen, plus
        what entries hold beyond what their Pods were seen to take); the entries a write keeps (this worker's
        frozen grants closed at what it admitted into them, entries whose Pods took all their room dropped),
        and the mark that dropping them needs."""
        live = {i: e for i, e in found.entries.items() if e.expires > wall}  # expired entries are pruned here
        with state.cond:
            mine = dict(state.grants)
            spent = {i: dict(g.spent) for i, g in mine.items()}
            state.first_seen = {i: state.first_seen.get(i, now) for i, e in live.items() if e.open and i not in mine}
            first_seen = dict(state.first_seen)
        certain_until = now - WINDOW - SLACK  # others' grants first seen before this can take nothing more
        lower, seen = self.feed.seen(namespace, live)
        upper = dict(lower)
        keep: dict[str, Entry] = {}
        mark = found.mark
        for entry_id, entry in live.items():
            grant = mine.get(entry_id)
            held = seen.get(entry_id)
            closing = grant is not None and grant.frozen
            # this worker knows what went into its own grants; an open one may still take up to its amounts
            at_least = unseen(spent[entry_id] if grant is not None else entry.amounts, held)
            at_most = at_least if closing or grant is None else unseen(entry.amounts, held)
            accumulate(upper, at_most)
            certain = grant is not None or not entry.open or first_seen.get(entry_id, now) <= certain_until
            if certain:
                accumulate(lower, at_least)
            if certain and (closing or grant is None) and not any(at_least.values()):
                mark = max(mark, held.rv if held is not None else mark)  # its Pods took all its room: drop it
            else:
                keep[entry_id] = Entry(entry.expires, spent[entry_id]) if closing else entry
        return live, lower, upper, keep, mark

    def _ahead(
        self,
        state: _Namespace,
        now: float,
        limits: Mapping[str, int],
        taken: Amounts,
        taking: Amounts,
        count: int,
        contended: bool,
    ) -> Amounts:
        """Room to take ahead with this write, in a burst (several admissions at once, a recent rate of BURST
        or more, or a lost compare-and-swap): what the next WINDOW's admissions need at this worker's recent
        rate, and at least BATCHES_AHEAD batches like this one (Pods shaped like its), at most 1/SHARE of the room
        left."""
        while state.admitted and state.admitted[0] < now - 1:
            state.admitted.popleft()
        rate = len(state.admitted) + count
        if rate < BURST and count < 2 and not contended:
            return {}
        pods = min(max(math.ceil(rate * WINDOW), BATCHES_AHEAD * count), AHEAD_MAX)
        each = {name: math.ceil(amount / count) for name, amount in taking.items()}
        for name, amount in each.items():
            if name in limits and amount:
                pods = min(pods, max(limits[name] - taken.get(name, 0), 0) // SHARE // amount)
        return {name: amount * pods for name, amount in each.items() if amount * pods} if pods else {}

    def _overflow(
        self,
        namespace: str,
        keep: dict[str, Entry],
        grant_id: str,
        reserve: list[_Ticket],
        ahead: Amounts,
        taking: Amounts,
    ) -> list[_Ticket]:
        """The ledger would outgrow its Lease: take nothing ahead, then refuse this batch (HTTP 500, counted)."""
        if ahead:
            keep[grant_id] = Entry(keep[grant_id].expires, dict(taking))
            if len(encode(keep)) <= MAX_LEDGER_BYTES:
                return reserve
        del keep[grant_id]
        for ticket in reserve:
            metrics.quota_ledger_full(namespace)
            ticket.error = QuotaUnavailable(
                f"quota ledger {self._where(namespace)} is full: {len(keep)} entries for admitted Pods not seen "
                f"yet fill the {MAX_LEDGER_BYTES} bytes one Lease can hold; they leave it as their Pods appear, "
                f"or after HAMI_QUOTA_RESERVATION_TTL ({self._ttl:g} s) if they never do"
            )
        return []

    def _remember(self, state: _Namespace, uid: str, reservation: str, now: float) -> None:
        state.reserved[uid] = reservation
        if len(state.reserved) > REMEMBERED:
            del state.reserved[next(iter(state.reserved))]
        state.admitted.append(now)

    # --- closing grants --------------------------------------------------------------------------

    def _start_closer(self) -> None:
        if not self._closer.is_alive() and not self._stopped.is_set():
            try:
                self._closer.start()
            except RuntimeError:  # started by another thread just now
                pass

    def _due(self, namespace: str, grant: _Grant) -> bool:
        """The grant must close now: its window has ended, or a worker that could not decide asked for its room."""
        if grant.closes_at <= time.monotonic():
            return True
        found = self.feed.ledger(namespace)
        return found is not None and found.wanted > grant.wanted and any(v > 0 for v in grant.room().values())

    def _close_grants(self) -> None:
        """Close this worker's grants when their window ends or their room is asked for, so the room they did
        not use comes free for others. Wakes when a ledger changes, and at the next window's end."""
        while not self._stopped.is_set():
            with self._namespaces_lock:
                states = list(self._namespaces.items())
            soonest = 1.0
            for namespace, state in states:
                with state.cond:
                    if not state.grants:
                        continue
                    if state.busy:  # a commit in flight closes them anyway; look again soon
                        soonest = min(soonest, CLOSER_RETRY)
                        continue
                    if any(self._due(namespace, g) for g in state.grants.values()):
                        self._commit_locked(namespace, state, [], time.monotonic() + ADMIT_BUDGET)
                    now = time.monotonic()
                    for grant in state.grants.values():  # left open (or a failed close: try again soon)
                        soonest = min(soonest, max(grant.closes_at - now, CLOSER_RETRY))
            self.feed.wait_ledgers(soonest)

    # --- helpers ---------------------------------------------------------------------------------

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

    def _namespace(self, namespace: str) -> _Namespace:
        with self._namespaces_lock:
            return self._namespaces.setdefault(namespace, _Namespace())

    def status(self) -> dict[str, Any]:
        feed = self.feed.status()
        synced = all(feed["synced"].values())
        ready = synced and feed["broken_seconds"] <= self._stale_after
        return {"ready": ready, "quota": "on", **feed}

    def start(self) -> None:
        self.feed.start()

    def stop(self) -> None:
        self._stopped.set()
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
    ledger = Ledger(client.ApiClient(configuration), settings.namespace)
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


def _plus(a: Mapping[str, int], b: Mapping[str, int]) -> Amounts:
    out = dict(a)
    accumulate(out, b)
    return out
