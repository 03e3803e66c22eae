"""What one worker process keeps per quota'd namespace between admissions: the admissions queued for the next
group commit, the grants it holds (app/quota/core/scene.py's Grant: room taken ahead, admitted into without the
API server), its recent pace, and the request uids it reserved (when it first saw each ledger entry, the feed
keeps: app/quota/feed/tables.py). The Committer (app/quota/committer.py) holds its lock around every method here;
none of them does I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.admission.ports import FITS, QuotaUnavailable, Verdict
from app.quota.core.amounts import Amounts, accumulate
from app.quota.core.decision import Burst, Write
from app.quota.core.scene import WINDOW, Ask, Grant

REMEMBERED = 4096  # request uids remembered per namespace, so a request sent again is not reserved twice


@dataclass(eq=False)
class Ticket:
    """One admission waiting on its namespace's ledger; settled with a verdict or an error."""

    ask: Ask
    deadline: float
    verdict: Verdict | None = None
    error: QuotaUnavailable | None = None

    @property
    def settled(self) -> bool:
        return self.verdict is not None or self.error is not None


@dataclass(eq=False)
class NamespaceState:
    """One namespace's admissions and grants in this process."""

    waiting: list[Ticket] = field(default_factory=list)  # queued for the next commit
    grants: dict[str, Grant] = field(default_factory=dict)
    admitted: deque[float] = field(default_factory=deque)  # when recent admissions were made (their rate)
    reserved: dict[str, str] = field(default_factory=dict)  # request uid -> the entry that holds its room
    retry_at: float = 0.0  # monotonic: a closing of grants that failed is not tried again before

    def alone(self, ask: Ask, now: float) -> Verdict | None:
        """The verdict this worker gives without the ledger: the same request again, or room in one of its open
        grants (not for a Pod reviewed again, whose entry grows: docs/rules.md#charged-once-per-pod); None when the
        ledger must decide."""
        return self.again(ask.uid) or (None if ask.grows else self.from_grant(ask, now))

    def again(self, uid: str) -> Verdict | None:
        """The API server sent this very request again: its room is reserved already."""
        reservation = self.reserved.get(uid)
        return None if reservation is None else Verdict(reservation=reservation)

    def from_grant(self, ask: Ask, now: float) -> Verdict | None:
        """Room left in one of this worker's open grants (taken, unless a dry run); None when none has it."""
        grant = next((g for g in self.grants.values() if g.admits(ask, now)), None)
        if grant is None:
            return None
        if ask.dry_run:
            return FITS
        self.remember(ask.uid, grant.id, now)
        return Verdict(reservation=grant.id)

    def mine(self) -> dict[str, Grant]:
        """This worker's grants as the decision reads them (copies: it reads them apart from the lock)."""
        return {i: g.seen_by_decision() for i, g in self.grants.items()}

    def burst(self, now: float, contended: bool) -> Burst:
        while self.admitted and self.admitted[0] < now - 1:
            self.admitted.popleft()
        return Burst(len(self.admitted), contended)

    def written(self, write: Write, reserved: Sequence[tuple[Ask, str]], sent: float, now: float) -> None:
        """After ``write`` was stored: the grants it closed go, the grants it made (if any) open, its asks are
        remembered with the entry that holds each (``write.entry``, or a gang's hold)."""
        for grant in [g for g in self.grants.values() if g.closing]:
            del self.grants[grant.id]
        for one, reservation in reserved:
            self.remember(one.uid, reservation, now)
        if write.gang_grant:
            made = write.entries[write.gang_grant]
            self.grants[write.gang_grant] = Grant(
                write.gang_grant, made.amounts, {}, sent + WINDOW, write.wanted, gang=made.gang, hold=write.hold,
                slots=write.places,
            )  # fmt: skip
        if not write.ahead:
            return
        taking: Amounts = {}
        for one, reservation in reserved:
            if reservation == write.entry:
                accumulate(taking, one.requested)
        amounts = write.entries[write.entry].amounts
        self.grants[write.entry] = Grant(write.entry, amounts, taking, sent + WINDOW, write.wanted)

    def forget_closed(self) -> None:
        """A decision found no write needed to close the closing grants: the ledger holds them closed already (a
        write whose answer was lost), or they expired. Kept, they would be found due every few ms."""
        for grant in [g for g in self.grants.values() if g.closing]:
            del self.grants[grant.id]

    def remember(self, uid: str, reservation: str, now: float) -> None:
        self.reserved[uid] = reservation
        if len(self.reserved) > REMEMBERED:
            del self.reserved[next(iter(self.reserved))]
        self.admitted.append(now)


def due(grant: Grant, wanted: int, now: float) -> bool:
    """The grant must close now: its window has ended, or a worker that could not decide asked for its room (the
    ledger's ``wanted`` count went past the one it was made at)."""
    return grant.closes_at <= now or (wanted > grant.wanted and grant.unused())
