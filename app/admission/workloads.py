"""The workload check: a Deployment, Job, CronJob (any kind of TEMPLATES) in, an answer for its author out. Pure.

The Pod its controller would create from the template is reviewed by the same ``decide`` as a Pod create, and the
answer is allowed with warnings (docs/rules.md#a-template-is-warned-not-refused): why every Pod would be refused,
the annotation findings each Pod would get, and what the Pods it runs at once need of the namespace's device
quota against the room free now. A template is not a Pod: the namespace, its quota and its labels may change
before the controller creates one, so only HAMI_WORKLOAD_CHECKS=deny refuses (a template every Pod of which the
policy refuses, never for quota). A malformed template is the API server's to refuse, after us: no warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from app.admission import notices, schemas
from app.admission.edit import PodEdit
from app.admission.fits import NO_INVENTORY, InventoryPort
from app.admission.notices import Notice
from app.admission.ports import FITS, QuotaPort, ReviewSettings, Verdict
from app.admission.review import Decision, decide, deny, request_namespace
from app.admission.templates import TEMPLATES, Path, defaulted, dig, template_pod


class WorkloadChecks(StrEnum):
    """What the webhook answers for a workload whose Pods it would refuse or warn about (HAMI_WORKLOAD_CHECKS)."""

    WARN = "warn"
    """Allowed, with warnings for the author."""
    DENY = "deny"
    """Refused when every Pod of its template would be; warnings otherwise."""
    OFF = "off"
    """Allowed, without a word."""


class WorkloadSettings(ReviewSettings, Protocol):
    """What the workload check reads: a review's settings and HAMI_WORKLOAD_CHECKS (Settings is one)."""

    @property
    def workload_checks(self) -> WorkloadChecks: ...


TEMPLATE, PODS_REFUSED = "template: ", "Pods refused: "
"""What a warning about the template's Pods starts with: short, so a Pod's own line (at most notices.MAX_CHARS)
keeps its end within the same bound as often as it can."""
REFUSED, QUOTA_ROOM, MORE = "refused", "quota_room", "more"
"""The kinds of the workload's own warnings (the Pod's keep theirs)."""
MAX_WORKLOAD_WARNINGS = 4
"""Warnings one workload's answer carries at most, the last counting the rest: a few lines at apply time."""
FORWARDED = (notices.UNKNOWN_ANNOTATION, notices.INVALID_ANNOTATION_VALUE, notices.FITS_NOWHERE)
"""The Pod warnings a workload's author hears: findings about what the author wrote. The defaults filled in on
every device Pod (a whole GPU's cores) are for the Pod; ``hami-webhook review`` shows them before apply."""
WORKLOAD_KINDS: Mapping[str, tuple[str, str]] = {
    "Deployment": ("apps", "deployments"),
    "StatefulSet": ("apps", "statefulsets"),
    "DaemonSet": ("apps", "daemonsets"),
    "ReplicaSet": ("apps", "replicasets"),
    "ReplicationController": ("", "replicationcontrollers"),
    "Job": ("batch", "jobs"),
    "CronJob": ("batch", "cronjobs"),
    "PodTemplate": ("", "podtemplates"),
}
"""Per kind of TEMPLATES, its API group and resource: what the ValidatingWebhookConfiguration's rules name."""
REPLICAS: Mapping[str, tuple[Path, bool]] = {
    "Deployment": (("spec",), False),
    "StatefulSet": (("spec",), False),
    "ReplicaSet": (("spec",), False),
    "ReplicationController": (("spec",), False),
    "Job": (("spec",), True),
    "CronJob": (("spec", "jobTemplate", "spec"), True),
}
"""Where a kind's replicas (or, True: a Job's parallelism and completions) sit: how many of its Pods run at once. A
DaemonSet's count is its nodes', a PodTemplate's nobody's: neither gets a quota figure."""


@dataclass
class _Demanded:
    """A QuotaPort for a template's review: asks the real port whether the namespace has a device quota (a
    cached read), records the mutated Pod, and always fits: nothing is reserved and nothing waits."""

    quota: QuotaPort
    pod: PodEdit | None = field(default=None)

    def governs(self, namespace: str) -> bool:
        return self.quota.governs(namespace)

    def admit(self, namespace: str, pod: PodEdit, *, uid: str, dry_run: bool, who: str = "") -> Verdict:
        self.pod = pod
        return FITS

    def asks(self, pod: PodEdit) -> dict[str, int]:
        return self.quota.asks(pod)

    def room(self, namespace: str) -> dict[str, int] | None:
        return self.quota.room(namespace)

    def gang(self, namespace: str, pod: PodEdit) -> int:
        return self.quota.gang(namespace, pod)

    def status(self) -> dict[str, Any]:
        return self.quota.status()

    def stop(self) -> None:
        pass


def decide_workload_review(
    document: Mapping[str, Any],
    settings: WorkloadSettings,
    quota: QuotaPort,
    uid: str,
    inventory: InventoryPort = NO_INVENTORY,
) -> Decision:
    """Validate the envelope (a 400 names the field, as for a Pod), then decide for the workload in it."""
    problem = schemas.problems(schemas.REVIEW, document, "")
    if problem:
        return deny(400, "BadRequest", f"invalid AdmissionReview: {problem}")
    return decide_workload(document["request"], settings, quota, uid, inventory)


def decide_workload(
    request: Mapping[str, Any],
    settings: WorkloadSettings,
    quota: QuotaPort,
    uid: str,
    inventory: InventoryPort = NO_INVENTORY,
) -> Decision:
    """The answer for a workload CREATE or UPDATE (``request`` validated by schemas.REVIEW); anything else, and a
    template that is not a Pod's, passes without a word. ``inventory``: the cluster's devices, for fits nowhere."""
    kind = request["kind"].get("kind") or ""
    path = TEMPLATES.get(kind)
    obj = request.get("object")
    if (
        settings.workload_checks is WorkloadChecks.OFF
        or path is None
        or request["operation"] not in ("CREATE", "UPDATE")
        or request.get("subResource")
        or not isinstance(obj, Mapping)
    ):
        return Decision(allowed=True)
    namespace = request_namespace(request)
    pod = template_pod(obj, path, namespace)
    if schemas.problems(schemas.POD, pod, "template") or not isinstance(pod.get("spec"), dict):
        return Decision(allowed=True)  # malformed: the API server's validation, after us, says where
    pod["spec"] = defaulted(pod["spec"])  # the request's object is left as it came
    demanded = _Demanded(quota)
    governed = demanded.governs(namespace)
    decision = decide(
        pod, settings, demanded, namespace=namespace, uid=uid, dry_run=True, governed=governed, inventory=inventory
    )
    if not decision.allowed:
        if settings.workload_checks is WorkloadChecks.DENY:
            return deny(403, "Forbidden", decision.message)
        found = [Notice(REFUSED, PODS_REFUSED + decision.message)]
    else:
        found = [Notice(n.kind, TEMPLATE + n.text) for n in decision.warnings if n.kind in FORWARDED]
        found += _quota(kind, request, namespace, demanded.pod, quota)
    return Decision(allowed=True, devices=decision.devices, warnings=_capped(found))


def _capped(found: list[Notice]) -> tuple[Notice, ...]:
    if len(found) <= MAX_WORKLOAD_WARNINGS:
        return tuple(found)
    kept = found[: MAX_WORKLOAD_WARNINGS - 1]
    return (*kept, Notice(MORE, f"... and {len(found) - len(kept)} more warnings"))


def _quota(
    kind: str, request: Mapping[str, Any], namespace: str, pod: PodEdit | None, quota: QuotaPort
) -> list[Notice]:
    """What the Pods the workload adds at once need beyond the room free now, per quota resource. On an update,
    only the Pods it adds count (the running ones hold their room already)."""
    each = quota.asks(pod) if pod is not None else {}
    if kind not in REPLICAS or not each:
        return []
    at, job = REPLICAS[kind]
    count, counted = _at_once(dig(request.get("object"), at), job)
    if request["operation"] == "UPDATE":
        count -= _at_once(dig(request.get("oldObject"), at), job)[0]
    if count < 1:
        return []
    room = quota.room(namespace)
    size = quota.gang(namespace, pod) if room and pod is not None else 0
    found = []
    for name, amount in each.items():
        free = room.get(name) if room else None
        if free is None or not amount:
            continue
        where = ".".join(map(str, (*at, counted)))
        if size > 1 and size * amount > free:  # a gang is admitted whole or not at all (docs/quota.md#gangs)
            text = f"{where}: a gang of {size} × {amount} {name} needs {size * amount}, {free} free: "
            found.append(Notice(QUOTA_ROOM, text + f"all {size} refused now"))
        elif size <= 1 and count * amount > free:
            pods = "1 Pod" if count == 1 else f"{count} Pods"
            text = f"{where}: {pods} × {amount} {name} need {count * amount}; {free} free in {namespace}: "
            found.append(Notice(QUOTA_ROOM, text + f"{count - free // amount} would be refused now"))
    return found


def _at_once(spec: Any, job: bool) -> tuple[int, str]:
    """How many Pods a workload's spec runs at once, and the field that says so (defaults as the API server's)."""
    spec = spec if isinstance(spec, Mapping) else {}
    if not job:
        replicas = spec.get("replicas", 1)
        return (replicas if isinstance(replicas, int) else 0), "replicas"
    parallelism, completions = spec.get("parallelism"), spec.get("completions")
    count = parallelism if isinstance(parallelism, int) else 1
    if isinstance(completions, int) and completions < count:
        return completions, "completions"
    return count, "parallelism"
