"""The seam between the pure review and namespace quota: what the review asks, and what it gets back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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


class QuotaPort(Protocol):
    def governs(self, namespace: str) -> bool:
        """Whether ``namespace`` has a device quota at all; when not, the review skips the demand arithmetic."""
        ...

    def admit(self, namespace: str, demands: Sequence[Demand], *, uid: str, dry_run: bool) -> Verdict:
        """Check (and, unless ``dry_run``, reserve) ``demands``; raises QuotaUnavailable when it cannot decide."""
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

    def status(self) -> dict[str, Any]:
        return {"ready": True, "quota": "off", "reason": self.reason}

    def stop(self) -> None:
        pass
