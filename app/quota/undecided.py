"""Why quota could not be decided: the QuotaUnavailable messages (app/admission/ports.py declares the port), each
naming the namespace or the ledger Lease and the limit at play."""

from __future__ import annotations

from app.admission.ports import QuotaUnavailable

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
