"""What QuotaEvaluator and its Committer need of the world, as ports: the feed's view and its streams, the ledger
Lease, and the clock (time, sleeping and waiting); and the errors they answer with when quota cannot be decided.

The server plugs in Feed (app/quota/feed/feed.py) and the FeedStreams filling it (app/quota/feed/life.py), KubeLeases
(app/quota/lease.py) and the system clock; the protocol simulation (tests/app/quota/simulation.py) plugs in a model
of the API server and a simulated clock, and so runs the real batching, compare-and-swap and grant code on schedules
a real cluster rarely produces.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from app.admission.ports import QuotaUnavailable
from app.quota.core.encoding import Ledger
from app.quota.core.gang import Gang
from app.quota.core.scene import View


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
    """A process's view of limits, Pods and ledgers, kept current by watches (app/quota/feed/feed.py's Feed): what
    the Committer reads and waits on. What a call returns is read under the feed's lock at one moment, so its parts
    agree; no call takes another lock while holding it."""

    def view(self, namespace: str, entries: Iterable[str] | None = None) -> View:
        """What the process knows of ``namespace`` now; what the Pods carrying each of ``entries`` took (None: each
        entry of the ledger in the view)."""
        ...

    def offer(self, found: Ledger) -> None:
        """A ledger this process read or wrote, for the cache (kept unless the watch brought a newer one)."""
        ...

    def wait_ledger(self, namespace: str, rv: int, timeout: float) -> Ledger | None:
        """The cached ledger once it is newer than ``rv``; None if it does not get newer within ``timeout``."""
        ...

    def wait_pods(self, namespace: str, rv: int, timeout: float) -> bool:
        """Whether the namespace's Pods are listed and watched up to resourceVersion ``rv``, within ``timeout``."""
        ...


class FeedPort(Protocol):
    """What QuotaEvaluator reads of the feed itself (its Committer, built by app/quota/startup.py, is given FeedView):
    the view its decisions read and the waits for the first lists."""

    def view(self, namespace: str, entries: Iterable[str] | None = None) -> View:
        """As FeedView's."""
        ...

    def wait_pods(self, namespace: str, rv: int, timeout: float) -> bool:
        """As FeedView's."""
        ...

    def wait_synced(self, timeout: float) -> bool:
        """Whether the first lists are in, within ``timeout`` (0: now)."""
        ...

    def key(self, namespace: str) -> str:
        """The namespace's sealing key, as its newest ledger brought it ("": none yet; the next write stores one)."""
        ...

    def consumed(self, namespace: str, entry: str, nonce: str) -> bool:
        """Whether a Pod carrying the seal of ``entry`` with ``nonce`` has been counted against it: a review
        presenting that seal is then of another Pod (app/quota/core/seal.py)."""
        ...


class StreamsPort(Protocol):
    """The feed's streams as QuotaEvaluator runs them (app/quota/feed/life.py's FeedStreams): started and stopped with
    it, and the life its readiness follows."""

    def status(self) -> dict[str, Any]:
        """What /readyz shows of the feed: ``synced`` per resource, ``broken_seconds``, and counts."""
        ...

    def answered_since(self, moment: float) -> bool:
        """Every stream's list or watch has been answered since ``moment`` (monotonic)."""
        ...

    def start(self) -> None: ...

    def stop(self, timeout: float) -> None:
        """End every stream's thread, waiting up to ``timeout`` for each."""
        ...


class Groups(Protocol):
    """The gang a Pod belongs to, from the group objects a watch keeps (app/quota/feed/feed.py's Feed): one look in a
    table, never an API call on an admission's way."""

    def gang(self, namespace: str, pod: Mapping[str, Any]) -> tuple[Gang | None, str]:
        """The Pod's gang (None: it is charged alone), and why a group it names is not one ("": nothing to say)."""
        ...


class Leases(Protocol):
    """Reads and compare-and-swap writes of the ledger Leases (app/quota/lease.py's KubeLeases)."""

    def where(self, namespace: str) -> str: ...

    def probe(self, timeout: float) -> None: ...

    def read(self, namespace: str, timeout: float) -> Ledger: ...

    def write(self, found: Ledger, text: str, mark: int, wanted: int, timeout: float) -> Ledger: ...

    def close(self) -> None: ...


# Why the ledger could not reserve (``lease``: its Lease, ``<home>/<name>``; ``seconds``: an admission's budget).
# An operator reads these in the API server's answer: each names the namespace or the Lease, and the limit at play.


def still_undecided(namespace: str, lease: str, seconds: float) -> QuotaUnavailable:
    """Room another worker's grant may hold decides neither way, and that grant did not close in time."""
    return QuotaUnavailable(
        f"namespace {namespace}: room held by another worker's grant did not come free within "
        f"{seconds:g} s (quota ledger {lease})"
    )


def still_contended(lease: str, seconds: float) -> QuotaUnavailable:
    """Every compare-and-swap this worker tried lost to another writer's."""
    return QuotaUnavailable(f"quota ledger {lease} stayed contended for {seconds:g} s")


def unanswered(lease: str, seconds: float, failure: str) -> QuotaUnavailable:
    """A request about the ledger got no answer in the time the admission could still wait."""
    return QuotaUnavailable(f"quota ledger {lease}: the API server did not answer within {seconds:.1f} s ({failure})")


def queued_out(namespace: str, seconds: float) -> QuotaUnavailable:
    """The admission's budget ran out while another admission's commit in this worker held the namespace."""
    return QuotaUnavailable(
        f"namespace {namespace}: not decided within {seconds:g} s: waited for this worker's commit in flight"
    )


def ledger_full(lease: str, entries: int, limit: int, ttl: float) -> QuotaUnavailable:
    """The reservations would outgrow the bytes one Lease holds (``limit``); entries leave as their Pods are seen."""
    return QuotaUnavailable(
        f"quota ledger {lease} is full: {entries} entries for admitted Pods not "
        f"seen yet fill the {limit} bytes one Lease can hold; they leave it as their Pods "
        f"appear, or after HAMI_QUOTA_RESERVATION_TTL ({ttl:g} s) if they never do"
    )
