"""What the admission core calls and does not implement: the settings it reads and the namespace quota it asks.

The core declares these; the composition at the top (app/settings.py, ``create_app``) and app/quota/ supply
them, so nothing here imports a part above it. The quota's answers (Verdict, QuotaUnavailable, QUOTA_REASON) are
the core's words too: the HTTP layer turns a QuotaUnavailable into a 500 so failurePolicy decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from app.admission.annotations import AnnotationRules
from app.admission.devices.base import Device
from app.admission.edit import PodEdit
from app.admission.fits import FitsCheck


class ReviewSettings(Protocol):
    """The knobs and device backends a review reads (app/settings.py's Settings is one)."""

    @property
    def scheduler_name(self) -> str: ...
    @property
    def force_overwrite_default_scheduler(self) -> bool: ...
    @property
    def node_scheduler_policy(self) -> str: ...
    @property
    def gpu_scheduler_policy(self) -> str: ...
    @property
    def strict_annotations(self) -> bool: ...
    @property
    def fits_nowhere(self) -> FitsCheck: ...
    @property
    def devices(self) -> tuple[Device, ...]: ...
    @property
    def switched_off(self) -> Mapping[str, str]: ...
    @property
    def device_resources(self) -> dict[str, bool]: ...
    @property
    def annotation_rules(self) -> AnnotationRules: ...
    @property
    def owned_annotations(self) -> AnnotationRules: ...


@dataclass(frozen=True)
class Verdict:
    """A quota answer: ``denial`` is the quota denial's message when the Pod does not fit; ``reservation``
    names the ledger entry that holds its room (the patch puts it on the Pod), "" when nothing was reserved;
    ``warning``: what the author should know of how it was charged (a gang's group not found, say); ``gang``: the
    denial refused a gang's room for all its members together (its metric's cause), not one Pod's."""

    denial: str = ""
    reservation: str = ""
    warning: str = ""
    gang: bool = False


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

    def admit(self, namespace: str, pod: PodEdit, *, uid: str, dry_run: bool, who: str = "") -> Verdict:
        """Check (and, unless ``dry_run``, reserve) what ``pod`` (as it will be stored) asks of the namespace's
        device quota; raises QuotaUnavailable when it cannot decide. ``who``: what every review of this admission
        has in common (its requester and Pod name), so a Pod reviewed again is charged once
        (docs/rules.md#charged-once-per-pod)."""
        ...

    def asks(self, pod: PodEdit) -> dict[str, int]:
        """What the mutated ``pod`` asks of a device quota, per quota resource name (HAMi's arithmetic); {} for
        nothing. A figure for a workload's warning: the quota's arithmetic stays the quota's."""
        ...

    def room(self, namespace: str) -> dict[str, int] | None:
        """The device quota free in ``namespace`` now, per quota resource, from what this process has cached (never
        waits on the API server); None when unknown (no quota, or the cache cannot be trusted yet)."""
        ...

    def gang(self, namespace: str, pod: PodEdit) -> int:
        """The size of the gang ``pod`` is a member of, from what this process has cached (0: none, or not known);
        a figure for a workload's warning."""
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

    def admit(self, namespace: str, pod: PodEdit, *, uid: str, dry_run: bool, who: str = "") -> Verdict:
        return FITS

    def asks(self, pod: PodEdit) -> dict[str, int]:
        return {}

    def room(self, namespace: str) -> dict[str, int] | None:
        return None

    def gang(self, namespace: str, pod: PodEdit) -> int:
        return 0

    def status(self) -> dict[str, Any]:
        return {"ready": True, "quota": "off", "reason": self.reason}

    def stop(self) -> None:
        pass
