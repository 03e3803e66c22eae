"""The ledger's entries, one small class per kind of room held (docs/quota.md, "Deciding" and "Gangs"):

- ``Reserved``: closed, room for Pods admitted that some reader may not have seen yet (a lone reservation, a
  batch's, a grant once closed, a gang's hold once released);
- ``Ahead``: open, a grant: room a worker took ahead and may still admit into, on its own, for a short window
  after writing it; it closes it by writing what it admitted. Others count it as wholly taken, but not as
  certainly taken (app/quota/core/scene.py);
- ``Places``: open, a grant of some of a gang's hold's places, which only that gang's members go into;
- ``Held``: a gang's hold, room for every member still to come (``Hold``).

Each holds ``amounts`` for ``ttl`` seconds from each reader's first sight (None: written by the previous version,
which wrote no ``ttl``: the reader's own TTL applies); ``expires`` is for the previous version's readers only.
``tags``: the requests admitted into it, where its id is none of theirs (a batch's; a grant's once closed), each
by its ``tag``: a request the API server sends again, to any replica, finds its room here
(docs/rules.md#charged-once-per-pod).
The stored format is app/quota/core/encoding.py's. Pure values: no I/O, no clock.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from app.quota.core.amounts import Amounts, minus, times

JOINERS = 16  # requests a hold lists of its last joiners: a join decided again within seconds is one of them
TAG_BYTES = 9  # of a request uid's SHA-256: 72 bits
TAG_CHARS = 12  # their base64url


def tag(uid: str) -> str:
    """How an entry lists a request: 12 characters, not the uid's 36. A grant's closing write lists every request
    admitted into it, and the whole ledger is encoded on every write and parsed on every watch event: listed as
    JSON strings, uids made a burst's ledger 9-10 times its size without them (23 KB against 2.2 KB in
    bench/quota.py's review part). The API server makes the uid (random), so no author picks a tag; a new request
    matches one of n listed by chance with odds n / 2**72."""
    return base64.urlsafe_b64encode(hashlib.sha256(uid.encode()).digest()[:TAG_BYTES]).decode()


@dataclass(frozen=True)
class Hold:
    """A gang's room in its entry: ``size`` members of ``group`` (a key of app/quota/core/gang.py), ``members`` of
    them admitted so far or handed to a grant of its places, ``each`` the first member's charge. The entry's amounts
    are what its members were charged plus ``each`` for every member still to come (``unfilled``); a place handed to
    a grant takes its room along. ``joined``: the tags of its last JOINERS members to join it through the
    ledger, so a join decided again (its write's answer lost and read again, or the API server sending the request
    again, to any replica) finds itself there and is not joined twice. ``declared``: the size its first member
    declared on itself (Kueue's total count; 0: a group object's), which every later member must declare too."""

    group: str
    size: int
    members: int
    each: Amounts
    joined: tuple[str, ...] = ()
    declared: int = 0

    def unfilled(self) -> Amounts:
        return times(self.each, max(self.size - self.members, 0))


@dataclass(frozen=True)
class LedgerEntry:
    """What every kind of entry has (never one itself)."""

    expires: float
    amounts: Amounts
    ttl: float | None = None
    tags: tuple[str, ...] = ()

    def listed(self) -> tuple[str, ...]:
        """The tags of the requests it lists as admitted (a retry, or a write whose answer was lost, finds itself
        here)."""
        return self.tags

    def closed(self, spent: Amounts, tags: Sequence[str]) -> Reserved:
        """A worker's grant written down as what went into it (``spent``), listing the requests admitted (its
        batch's and ``tags``, those since)."""
        return Reserved(self.expires, dict(spent), self.ttl, (*self.tags, *tags))


@dataclass(frozen=True)
class Reserved(LedgerEntry):
    """Closed: room for Pods admitted."""


@dataclass(frozen=True)
class Ahead(LedgerEntry):
    """Open: a worker's grant, room taken ahead."""


@dataclass(frozen=True, kw_only=True)
class Places(Ahead):
    """Open: a grant of some of gang ``gang``'s hold's places, each with the room of one."""

    gang: str


@dataclass(frozen=True, kw_only=True)
class Held(LedgerEntry):
    """A gang's hold."""

    hold: Hold

    def listed(self) -> tuple[str, ...]:
        return (*self.tags, *self.hold.joined)

    def released(self, expires: float, ttl: float) -> Reserved:
        """Its members' room only: what it is once its group object is gone or its places' life is over."""
        return Reserved(expires, minus(self.amounts, self.hold.unfilled()), ttl, self.tags)
