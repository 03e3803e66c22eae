"""What LedgerQuota and its Committer need of the world, as ports: the feed's view, the ledger Lease, and the clock
(time, sleeping and waiting).

The server plugs in Feed (app/quota/feed.py), Ledger (app/quota/lease.py) and the system clock; the protocol
simulation (tests/app/quota/simulation.py) plugs in a model of the API server and a simulated clock, and so runs
the real batching, compare-and-swap and grant code on schedules a real cluster rarely produces.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from app.quota.amounts import Amounts
from app.quota.ledger import Snapshot
from app.quota.tables import Held


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float:
        """Unix seconds: only written into a ledger entry's ``expires`` for the previous version's readers; no
        decision reads it, so a replica's wall clock may be off by any amount (docs/rules.md#no-clock-but-its-own)."""
        ...

    def sleep(self, seconds: float) -> None: ...

    def wait_for(self, cond: threading.Condition, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """``cond.wait_for``: held, release ``cond`` until ``predicate()`` holds or ``timeout`` (None: no limit)
        has passed; the predicate's last value. Every wait of the Committer goes through here, so the
        simulation decides when a waiting thread runs again."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait_for(self, cond: threading.Condition, predicate: Callable[[], bool], timeout: float | None) -> bool:
        return cond.wait_for(predicate, timeout)


SYSTEM_CLOCK = SystemClock()


class FeedView(Protocol):
    """A process's view of limits, Pods and ledgers, kept current by watches (app/quota/feed.py's Feed)."""

    def limits(self, namespace: str) -> Amounts: ...

    def seen(self, namespace: str, reservations: Iterable[str]) -> tuple[Amounts, dict[str, Held]]: ...

    def ledger(self, namespace: str) -> Snapshot | None: ...

    def first_seen(self, namespace: str) -> dict[str, float]:
        """When this process first saw each entry of the namespace's ledger, on its monotonic clock."""
        ...

    def offer_ledger(self, found: Snapshot) -> None: ...

    def wait_ledger_newer(self, namespace: str, rv: int, timeout: float) -> Snapshot | None: ...

    def wait_ledgers(self, timeout: float) -> None: ...

    def caught_up(self, namespace: str, rv: int, timeout: float) -> bool: ...

    def synced(self, wait: float = 0) -> bool: ...

    def namespace_synced(self, namespace: str, wait: float = 0) -> bool: ...

    def broken_for(self) -> float: ...

    def quota_in_play(self) -> bool: ...

    def nudge(self) -> None: ...

    def answered_since(self, moment: float) -> bool: ...

    def status(self) -> dict[str, Any]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class LedgerStore(Protocol):
    """Reads and compare-and-swap writes of the ledger Leases (app/quota/ledger.py's Ledger)."""

    def where(self, namespace: str) -> str: ...

    def probe(self, timeout: float) -> None: ...

    def read(self, namespace: str, timeout: float) -> Snapshot: ...

    def write(self, found: Snapshot, text: str, mark: int, wanted: int, timeout: float) -> Snapshot: ...

    def close(self) -> None: ...
