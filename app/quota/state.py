"""What one worker process keeps per quota'd namespace between admissions: the admissions queued for the next
group commit, the grants it holds (room taken ahead, admitted into without the API server), its recent pace,
and the request uids it reserved (when it first saw each ledger entry, the feed keeps: app/quota/feed/tables.py).
The Committer (app/quota/committer.py) holds its lock around every method here; none of them does I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.admission.ports import FITS, QuotaUnavailable, Verdict
from app.quota.core.amounts import Amounts, accumulate
from app.quota.core.decision import WINDOW, Ask, Burst, Mine, Write

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
class Grant:
    """Room this worker took ahead in a namespace: admissions go into it, without the API, until it closes."""

    id: str
    amounts: Amounts  # as written in the ledger
    spent: Amounts  # admitted into it so far
    closes_at: float  # monotonic: WINDOW after the write that made it was sent
    wanted: int  # the ledger's wanted count when it was made: a higher one asks for it to be closed at once
    closing: bool = False  # a write closing it is being made: nothing more goes into it (the decision's Mine.closing)

    def room(self) -> Amounts:
        return {name: amount - self.spent.get(name, 0) for name, amount in self.amounts.items()}

    def unused(self) -> bool:
        return any(v > 0 for v in self.room().values())

    def fits(self, requested: Amounts) -> bool:
        room = self.room()
        return all(room.get(name, 0) >= amount for name, amount in requested.items())


@dataclass(eq=False)
class NamespaceState:
    """One namespace's admissions and grants in this process."""

    waiting: list[Ticket] = field(default_factory=list)  # queued for the next commit
    grants: dict[str, Grant] = field(default_factory=dict)
    admitted: deque[float] = field(default_factory=deque)  # when recent admissions were made (their rate)
    reserved: dict[str, str] = field(default_factory=dict)  # request uid -> the entry that holds its room
    retry_at: float = 0.0  # monotonic: a closing of grants that failed is not tried again before

    def from_grant(self, ask: Ask, now: float) -> Verdict | None:
        """The verdict this worker can give on its own: the same request again, or room left in one of its
        open grants; None when the ledger must decide."""
        if ask.uid in self.reserved:  # the API server sent this very request again: it is already reserved
            return Verdict(reservation=self.reserved[ask.uid])
        for grant in self.grants.values():
            if not grant.closing and now < grant.closes_at and grant.fits(ask.requested):
                if ask.dry_run:
                    return FITS
                accumulate(grant.spent, ask.requested)
                self.remember(ask.uid, grant.id, now)
                return Verdict(reservation=grant.id)
        return None

    def mine(self) -> dict[str, Mine]:
        """This worker's grants as the decision sees them."""
        return {i: Mine(dict(g.spent), g.closing) for i, g in self.grants.items()}

    def burst(self, now: float, contended: bool) -> Burst:
        while self.admitted and self.admitted[0] < now - 1:
            self.admitted.popleft()
        return Burst(len(self.admitted), contended)

    def written(self, write: Write, reserved: Sequence[Ask], sent: float, now: float) -> None:
        """After ``write`` was stored: the grants it closed go, the grant it made (if any) opens, its asks are
        remembered."""
        for grant in [g for g in self.grants.values() if g.closing]:
            del self.grants[grant.id]
        for one in reserved:
            self.remember(one.uid, write.entry, now)
        if not write.ahead:
            return
        taking: Amounts = {}
        for one in reserved:
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
