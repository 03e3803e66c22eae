"""The seam between the pure review and namespace quota: what the review asks, and what it gets back (a Verdict,
or QuotaUnavailable saying why quota could not be decided)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.quota.amounts import Amounts
from app.quota.demand import Demand


@dataclass(frozen=True)
class Verdict:
    """A quota answer: ``denial`` is the quota denial's message when the Pod does not fit; ``reservation``
    names the ledger entry that holds its room (the patch puts it on the Pod), "" when nothing was reserved."""

    denial: str = ""
    reservation: str = ""


FITS = Verdict()
QUOTA_REASON = "GPUQuotaExceeded"
"""The reason a quota denial carries (and its metric label)."""


class QuotaUnavailable(Exception):
    """Quota could not be decided (API unreachable, ledger contention, cache not synced).

    The webhook answers HTTP 500 so the configured failurePolicy applies: never admit over quota silently.
    """


# Why the ledger could not reserve (``ledger``: its Lease, ``<home>/<name>``; ``seconds``: an admission's budget).
# An operator reads these in the API server's answer: each names the namespace or the Lease, and the limit at play.


def still_undecided(namespace: str, ledger: str, seconds: float) -> QuotaUnavailable:
    """Room another worker's grant may hold decides neither way, and that grant did not close in time."""
    return QuotaUnavailable(
        f"namespace {namespace}: room held by another worker's grant did not come free within "
        f"{seconds:g} s (quota ledger {ledger})"
    )


def still_contended(ledger: str, seconds: float) -> QuotaUnavailable:
    """Every compare-and-swap this worker tried lost to another writer's."""
    return QuotaUnavailable(f"quota ledger {ledger} stayed contended for {seconds:g} s")


def unanswered(ledger: str, seconds: float, failure: str) -> QuotaUnavailable:
    """A request about the ledger got no answer in the time the admission could still wait."""
    return QuotaUnavailable(f"quota ledger {ledger}: the API server did not answer within {seconds:.1f} s ({failure})")


def queued_out(namespace: str, seconds: float) -> QuotaUnavailable:
    """The admission's budget ran out while another admission's commit in this worker held the namespace."""
    return QuotaUnavailable(
        f"namespace {namespace}: not decided within {seconds:g} s: waited for this worker's commit in flight"
    )


def ledger_full(ledger: str, entries: int, limit: int, ttl: float) -> QuotaUnavailable:
    """The reservations would outgrow the bytes one Lease holds (``limit``); entries leave as their Pods are seen."""
    return QuotaUnavailable(
        f"quota ledger {ledger} is full: {entries} entries for admitted Pods not "
        f"seen yet fill the {limit} bytes one Lease can hold; they leave it as their Pods "
        f"appear, or after HAMI_QUOTA_RESERVATION_TTL ({ttl:g} s) if they never do"
    )


class QuotaPort(Protocol):
    def governs(self, namespace: str) -> bool:
        """Whether ``namespace`` has a device quota at all; when not, the review skips the demand arithmetic."""
        ...

    def admit(self, namespace: str, demands: Sequence[Demand], *, uid: str, dry_run: bool) -> Verdict:
        """Check (and, unless ``dry_run``, reserve) ``demands``; raises QuotaUnavailable when it cannot decide."""
        ...

    def room(self, namespace: str) -> Amounts | None:
        """The device quota free in ``namespace`` now, per quota resource, from what this process has cached (never
        waits on the API server); None when unknown (no quota, or the cache cannot be trusted yet)."""
        ...

    def status(self) -> dict[str, Any]:
        """Readiness detail: ``{"ready": bool, ...}`` for /readyz."""
        ...

    def stop(self) -> None:
        """Release threads and connections (process shutdown)."""
        ...


class QuotaOff:
    """No Kubernetes API, no quota: every Pod fits, and /readyz says why."""

    def __init__(self, reason: str = "no Kubernetes API configured") -> None:
        self.reason = reason

    def governs(self, namespace: str) -> bool:
        return False

    def admit(self, namespace: str, demands: Sequence[Demand], *, uid: str, dry_run: bool) -> Verdict:
        return FITS

    def room(self, namespace: str) -> Amounts | None:
        return None

    def status(self) -> dict[str, Any]:
        return {"ready": True, "quota": "off", "reason": self.reason}

    def stop(self) -> None:
        pass
