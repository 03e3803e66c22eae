"""QuotaEvaluator, the real QuotaPort: a namespace's device quota enforced across every worker of every replica
through a ledger Lease (app/quota/committer.py writes it), a Pod/ResourceQuota feed (app/quota/feed/feed.py) filled
by its streams (app/quota/feed/life.py) and a probe of the API server (app/quota/contact.py).

Rules: docs/rules.md#no-over-admission-under-concurrency, #undecided-quota-is-an-error-never-an-admission.
How it stays exact: docs/quota.md. An admission here only answers what needs no ledger (no device quota, room in
this process's open grant, a denial on the cached ledger) and otherwise queues a ticket for the Committer and
waits on it within its budget.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from app.admission.annotations import QUOTA_RESERVATION_ANNOTATION
from app.admission.devices.base import Device
from app.admission.edit import PodEdit
from app.admission.ports import FITS, QuotaUnavailable, Verdict
from app.quota.committer import ADMIT_BUDGET, Committer
from app.quota.contact import Contact
from app.quota.core.amounts import Amounts, beyond, is_zero
from app.quota.core.decision import denial, free
from app.quota.core.demand import amounts, demands
from app.quota.core.encoding import Ledger
from app.quota.core.gang import Gang, GroupRefused
from app.quota.core.limits import limited
from app.quota.core.scene import Ask, View, account
from app.quota.core.seal import Seal, charged, parse, seal
from app.quota.ports import SYSTEM_CLOCK, Clock, FeedPort, Groups, StreamsPort
from app.quota.state import Ticket

SYNC_WAIT = 3.0  # seconds an admission waits for a just-started worker's (or a new quota's) first lists
# Committer threads per process: each works on one namespace at a time, so a namespace whose request hangs holds
# up only itself (Kubernetes' quota admission runs 5 evaluators; one namespace's burst needs one).
COMMITTERS = 4
STOP_WAIT = 5.0  # seconds stop() waits for each thread it ends


class QuotaEvaluator:
    """Namespace device quota enforced across workers and replicas: what an admission calls, and the threads it runs
    (the feed's streams, the gauges' publisher, the contact probe, the committers)."""

    def __init__(
        self,
        feed: FeedPort,
        streams: StreamsPort,
        committer: Committer,
        contact: Contact,
        devices: Sequence[Device],
        *,
        stale_after: float,
        clock: Clock = SYSTEM_CLOCK,
        groups: Groups | None = None,
        gang_hold: float = 0.0,
        gauges: threading.Thread | None = None,
        nonce: Callable[[], str] = lambda: secrets.token_hex(8),
    ) -> None:
        self.feed = feed
        self.streams = streams
        self.gauges = gauges  # the quota gauges' publisher (app/quota/feed/gauges.py), ended with the streams
        self.committer = committer
        self.contact = contact
        self._devices = tuple(devices)
        self._stale_after = stale_after
        self._clock = clock
        self._groups = groups if gang_hold > 0 else None  # None: gang holds off, every Pod charged alone
        self._nonce = nonce  # one per sealed admission (app/quota/core/seal.py)

    def governs(self, namespace: str) -> bool:
        """Also true while the feed cannot tell (not synced, broken too long): admit() must then refuse,
        or a fresh worker would admit everything before its first ResourceQuota list arrives."""
        view = self.feed.view(namespace, ())
        return bool(self._unfit(view)) or bool(view.limits)

    def asks(self, pod: PodEdit) -> Amounts:
        return amounts(demands(pod, self._devices))

    def admit(self, namespace: str, pod: PodEdit, *, uid: str, dry_run: bool, who: str = "") -> Verdict:
        requested = self.asks(pod)
        if not requested:
            return FITS  # no device resource: nothing to count
        deadline = self._clock.monotonic() + ADMIT_BUDGET
        self.feed.wait_synced(SYNC_WAIT)  # before reading limits: an unsynced feed knows of no quota at all
        view = self.feed.view(namespace, ())
        unfit = self._unfit(view)
        if unfit:
            raise QuotaUnavailable(unfit)
        if not limited(view.limits, requested):
            return FITS  # no device quota here: the ledger is never touched
        lost = self.contact.lost()
        if lost:  # this replica is cut off (and unready): say so now, not after a request's timeout
            raise QuotaUnavailable(f"namespace {namespace}: {lost}")
        listing = max(min(SYNC_WAIT, deadline - self._clock.monotonic()), 0)
        if view.pods_at < 0 and not self.feed.wait_pods(namespace, 0, listing):
            raise QuotaUnavailable(f"the Pods of namespace {namespace} have not been listed yet")
        ask = Ask(uid, requested, dry_run)
        again = self._reviewed_again(namespace, pod, who)
        if again is not None:  # the same Pod, reviewed again after another webhook changed it: charged already
            found, before = again
            if before == requested:
                return Verdict(reservation=found.text())
            if is_zero(beyond(requested, before)):  # it asks less: its entry holds the rest until it expires
                return Verdict(reservation=self._sealed(namespace, found.entry, who, requested))
            ask = replace(ask, grows=found.entry, charged=before)  # its entry grows by the difference
        return self._charge(namespace, pod, ask, who, deadline)

    def _charge(self, namespace: str, pod: PodEdit, ask: Ask, who: str, deadline: float) -> Verdict:
        """The ledger's verdict on ``ask`` (without the API server where it can), its reservation sealed."""
        try:
            gang, why = self._gang(namespace, pod)
        except GroupRefused as refused:
            return Verdict(str(refused), gang=True)
        ask = replace(ask, gang=gang)
        # a gang member's room may be in its hold, which a denial from the cache counts as taken: the ledger decides
        # a Pod reviewed again has room in its entry already, which a denial from the cache would count as taken
        verdict = self.committer.alone(namespace, ask) or (
            None if gang or ask.grows else self._denied_at_once(namespace, ask)
        )
        if verdict is None:
            ticket = Ticket(ask, deadline)
            self.committer.settle(namespace, ticket)
            if ticket.error is not None:
                raise ticket.error
            assert ticket.verdict is not None
            verdict = ticket.verdict
        if verdict.reservation:
            verdict = replace(verdict, reservation=self._sealed(namespace, verdict.reservation, who, ask.requested))
        return replace(verdict, warning=why) if why and not verdict.denial else verdict

    def _sealed(self, namespace: str, entry: str, who: str, requested: Amounts) -> str:
        """The reservation the Pod carries: ``entry`` sealed with the namespace's key, which the write that made or
        holds the entry stored (a ledger written only by the previous version has none: the bare id, which the
        feed does not count against the entry, so its room holds until it expires)."""
        key = self.feed.key(namespace)
        return seal(key, namespace, entry, self._nonce(), who, requested).text() if key else entry

    def _reviewed_again(self, namespace: str, pod: PodEdit, who: str) -> tuple[Seal, Amounts] | None:
        """The seal the Pod carries and what it charged, when this is a review of the same admission again (the API
        server reinvokes the webhook after a later webhook changed the Pod, with a new request uid): sealed by this
        webhook for this requester and Pod name, its entry still live, and no Pod carrying it counted yet (None when
        not: the Pod is charged, and the seal it carried replaced). docs/rules.md#charged-once-per-pod."""
        written = pod.written_annotations.get(QUOTA_RESERVATION_ANNOTATION)
        found = parse(written) if isinstance(written, str) and who else None
        if found is None:
            return None
        view = self.feed.view(namespace, (found.entry,))
        ledger = view.ledger
        if ledger is None or not ledger.key or found.entry not in ledger.entries or view.broken_for > 0:
            return None
        before = charged(ledger.key, namespace, found, who)
        if before is None or found.entry not in account(self.committer.scene(view, ledger)).live:
            return None
        return None if self.feed.consumed(namespace, found.entry, found.nonce) else (found, before)

    def _denied_at_once(self, namespace: str, ask: Ask) -> Verdict | None:
        """A denial from the cached ledger, without waiting for a commit in flight: what does not fit even
        counting only what is certainly taken does not fit the newest ledger either. None: the ledger decides."""
        view = self.feed.view(namespace)
        found = view.ledger
        listed = found is not None and any(ask.tag in e.tags for e in found.entries.values())
        if found is None or ask.uid in found.entries or listed or view.pods_at < found.mark:
            return None  # (a request sent again whose entry is there: the commit says it is reserved)
        refused = denial(self.committer.scene(view, found), ask.requested)
        return Verdict(refused) if refused else None

    def room(self, namespace: str) -> Amounts | None:
        """What is free for certain (``free``: the command's and the gauges' FREE), read from the feed and the
        cached ledger without waiting: a warning's figure, never a decision."""
        view = self.feed.view(namespace)
        if not view.limits or self._unfit(view) or view.pods_at < 0:
            return None
        found = view.ledger or Ledger(namespace, {}, None)
        return free(self.committer.scene(view, found))

    def gang(self, namespace: str, pod: PodEdit) -> int:
        """The size of the Pod's gang from the group objects watched (0: none, gang holds off, or a size its admission
        refuses, which says why)."""
        try:
            gang = self._gang(namespace, pod)[0]
        except GroupRefused:
            return 0
        return gang.size if gang is not None else 0

    # --- helpers ---------------------------------------------------------------------------------

    def _gang(self, namespace: str, pod: PodEdit) -> tuple[Gang | None, str]:
        """The Pod's gang and what to tell its author (Groups.gang); (None, "") with gang holds off."""
        return self._groups.gang(namespace, pod.pod) if self._groups is not None else (None, "")

    def _unfit(self, view: View) -> str:
        """Why the feed cannot be trusted now ("" when it can)."""
        if not view.synced:
            return "the Pod and ResourceQuota lists have not synced yet"
        if view.broken_for > self._stale_after:
            return f"the Pod/ResourceQuota watch has been broken for {view.broken_for:.0f} s"
        return ""

    def status(self) -> dict[str, Any]:
        """Ready: the feed synced and not broken too long, the API server answering, and every stream answered
        since it last came back (a watch from before a partition may be a silent socket)."""
        feed = self.streams.status()
        synced = all(feed["synced"].values())
        lost = self.contact.lost()
        caught_up = self.streams.answered_since(self.contact.regained_at)
        ready = synced and feed["broken_seconds"] <= self._stale_after and not lost and caught_up
        return {"ready": ready, "quota": "on", **feed, "api_server": lost or "answers", "caught_up": caught_up}

    def start(self) -> None:
        self.streams.start()
        if self.gauges is not None:
            self.gauges.start()
        self.contact.start()
        self.committer.start(COMMITTERS)

    def stop(self) -> None:
        self.contact.stop()
        self.committer.stop()
        self.streams.stop(STOP_WAIT)
        if self.gauges is not None:
            self.gauges.join(STOP_WAIT)
        self.committer.leases.close()
