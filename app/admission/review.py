"""The admission policy: an AdmissionReview in, an AdmissionReview out. Pure.

The decision flow and its precedence are HAMi's (docs/rules.md#hamis-decision-flow): no containers, the
scheduler-name gate, vendor errors, privileged, nodeName, quota. Flask, sockets,
the clock and the Kubernetes API stay outside; quota is reached through a port
(whose QuotaUnavailable passes through to the HTTP layer).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from app.admission import notices, schemas
from app.admission.annotations import (
    GPU_POLICY_ANNOTATION,
    GPU_TYPE_ANNOTATION,
    NODE_POLICY_ANNOTATION,
    OPT_OUT,
    OPT_OUT_LABEL,
    QUOTA_RESERVATION_ANNOTATION,
)
from app.admission.devices.base import Device, DeviceRequestError
from app.admission.edit import ContainerEdit, Op, PodEdit
from app.admission.fits import FITS_NOWHERE_REASON, NO_INVENTORY, FitsCheck, InventoryPort, nowhere
from app.admission.notices import Notice
from app.admission.ports import FITS, QUOTA_REASON, QuotaPort, ReviewSettings, Verdict
from app.admission.quantity import INT32_MAX
from app.untrusted import shown

DEFAULT_SCHEDULER = "default-scheduler"
OPTED_OUT = f"labelled {OPT_OUT_LABEL}: {OPT_OUT}: not mutated, only charged to its namespace's device quota"


class UnreadableReview(ValueError):
    """The body carries no readable ``request.uid``: it cannot be answered as an AdmissionReview."""


@dataclass(frozen=True)
class Decision:
    """What the policy decided for one Pod."""

    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    patch: list[Op] = field(default_factory=list)
    devices: tuple[str, ...] = ()  # the backends whose resources the Pod asks for (metrics)
    hint: str = ""  # advice for the operator: logged and shown by the preview, never sent to the API server
    warnings: tuple[Notice, ...] = ()  # for the author; only allowed answers carry them
    cause: str = ""  # a quota denial's cause for its metric: "limit" (the Pod) or "gang" (its gang's whole room)
    unfit: tuple[str, ...] = ()  # the device resource of each container that fits nowhere (metrics)


def deny(code: int, reason: str, message: str, cause: str = "") -> Decision:
    return Decision(allowed=False, code=code, reason=reason, message=message, cause=cause)


def review(
    document: Any, settings: ReviewSettings, quota: QuotaPort, inventory: InventoryPort = NO_INVENTORY
) -> dict[str, Any]:
    """Answer an AdmissionReview (v1 or v1beta1) in the request's own version.

    Raises UnreadableReview when no uid can be read; every other problem is an answer.
    """
    uid = read_uid(document)
    governed = quota_here(quota, document)
    return answer(document, uid, decide_review(document, settings, quota, uid, governed=governed, inventory=inventory))


def quota_here(quota: QuotaPort, document: Any) -> bool:
    """ "Is there a quota here", for a review's namespace: asked once per review, before it is read any further
    (the server asks it to choose where to serve the review), and the answer carried to ``decide``."""
    request = document.get("request") if isinstance(document, Mapping) else None
    return quota.governs(request_namespace(request))


def answer(document: Any, uid: str, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview reply, in the request's version (v1 when it named none we know)."""
    version = document.get("apiVersion") if isinstance(document, Mapping) else None
    return {
        "apiVersion": version if version in schemas.API_VERSIONS else schemas.API_VERSIONS[0],
        "kind": "AdmissionReview",
        "response": response(uid, decision),
    }


def read_uid(document: Any) -> str:
    """``request.uid`` when it is a non-empty string."""
    request = document.get("request") if isinstance(document, Mapping) else None
    uid = request.get("uid") if isinstance(request, Mapping) else None
    if not isinstance(uid, str) or not uid:
        raise UnreadableReview("request.uid: missing; the body is not an AdmissionReview request")
    return uid


def request_namespace(request: Any) -> str:
    """The namespace the Pod is created in: the AdmissionRequest's ``namespace``, which the API server sets from
    the request's path (having refused an object whose metadata.namespace differs), else the object's
    metadata.namespace (a review written by hand). Tolerates any shape: the log line reads it from bad input too."""
    if not isinstance(request, Mapping):
        return ""
    obj = request.get("object")
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    for namespace in (request.get("namespace"), meta.get("namespace") if isinstance(meta, Mapping) else None):
        if isinstance(namespace, str) and namespace:
            return namespace
    return ""


def decide_review(
    document: Mapping[str, Any],
    settings: ReviewSettings,
    quota: QuotaPort,
    uid: str,
    *,
    governed: bool,
    inventory: InventoryPort = NO_INVENTORY,
) -> Decision:
    """Validate the envelope, then decide for a Pod CREATE; else unchanged (only Pod creates are reviewed).
    ``governed``: the quota port's answer for the review's namespace (``quota_here``)."""
    problem = schemas.problems(schemas.REVIEW, document, "")
    if problem:
        return deny(400, "BadRequest", f"invalid AdmissionReview: {problem}")
    request = document["request"]
    kind = request["kind"]
    if request["operation"] != "CREATE" or kind.get("kind") != "Pod" or kind.get("group") or request.get("subResource"):
        return Decision(allowed=True)
    pod = request.get("object")
    if not pod:
        return deny(400, "BadRequest", "there is no content to decode")
    problem = schemas.problems(schemas.POD, pod, "request.object")
    if problem:
        return deny(400, "BadRequest", f"invalid Pod: {problem}")
    namespace = request_namespace(request)
    dry_run = request.get("dryRun") is True
    who = admission_of(request, pod)
    return decide(
        pod, settings, quota, namespace=namespace, uid=uid, dry_run=dry_run, governed=governed, who=who,
        inventory=inventory,
    )  # fmt: skip


def admission_of(request: Mapping[str, Any], pod: Mapping[str, Any]) -> str:
    """What the same admission has in common on each review of it, for the quota's seal (app/quota/core/seal.py):
    the requester and the Pod's name (its generateName while the API server has yet to choose one: a reviewed Pod
    keeps both). "" when the request names no requester: nothing is known as reviewed again then."""
    user = request.get("userInfo")
    username = user.get("username") if isinstance(user, Mapping) else None
    if not isinstance(username, str) or not username:
        return ""
    metadata = pod.get("metadata") or {}
    name, generated = metadata.get("name"), metadata.get("generateName")
    named = name if isinstance(name, str) and name else f"generate:{generated if isinstance(generated, str) else ''}"
    return f"{username}\x00{named}"


def decide(
    pod: Mapping[str, Any],
    settings: ReviewSettings,
    quota: QuotaPort,
    *,
    namespace: str,
    uid: str,
    dry_run: bool,
    governed: bool,
    who: str = "",
    inventory: InventoryPort = NO_INVENTORY,
) -> Decision:
    """HAMi's Handle on a validated Pod; ``governed``: whether the namespace has a device quota, as the caller asked
    ``quota`` once for the whole review; ``who``: the admission as ``admission_of`` reads it; ``inventory``: the
    cluster's registered devices, for fits nowhere."""
    spec = pod.get("spec") or {}
    if not spec.get("containers"):
        return deny(403, "Forbidden", "pod has no containers")
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    forged = settings.owned_annotations.forged(metadata.get("annotations") or {}, labels)
    if forged:  # whatever the scheduler: HAMi's device plugins trust these (docs/rules.md#allocations-are-hamis)
        return deny(403, "Forbidden", forged)
    charge = Charge(quota, namespace, uid, dry_run, who) if governed else None
    if labels.get(OPT_OUT_LABEL) == OPT_OUT:  # not mutated, still charged (docs/rules.md#the-opt-out-label)
        return replace(_charged_only(PodEdit(pod), settings, charge, ""), hint=OPTED_OUT)
    if _other_scheduler(spec.get("schedulerName") or "", settings):
        return _charged_only(PodEdit(pod), settings, charge, "pod already has different scheduler assigned")
    edit = PodEdit(pod)
    try:
        found = _mutate(edit, settings)
    except DeviceRequestError as exc:
        return deny(400, "BadRequest", str(exc))
    warnings: list[Notice] = []
    unfit: list[tuple[str, Notice]] = []
    if found:
        warnings = settings.annotation_rules.check(edit.written_annotations)
        if warnings and settings.strict_annotations:
            return deny(400, "BadRequest", "; ".join(notices.texts(warnings)))
        privileged = next((c.name for c in edit.containers if c.privileged), None)
        if privileged is not None:
            return deny(403, "Forbidden", f"container {privileged} is privileged")
        if settings.scheduler_name:
            edit.set_spec("schedulerName", settings.scheduler_name)
            if spec.get("nodeName"):
                return deny(403, "Forbidden", "pod has node assigned")
        _annotate(edit, found, settings)
        if settings.fits_nowhere is not FitsCheck.OFF:
            unfit = nowhere(edit, [d for d in settings.devices if d.key in found], inventory.current())
        if unfit and settings.fits_nowhere is FitsCheck.DENY:  # docs/rules.md#fits-nowhere
            return deny(403, FITS_NOWHERE_REASON, "; ".join(n.text for _, n in unfit))
        warnings += [notice for _, notice in unfit]
    hint = "" if found or not settings.switched_off else _switched_off(edit, settings.switched_off)
    verdict = charge.admit(edit) if charge is not None else _reserve(edit, "")
    if verdict.denial:
        return deny(403, QUOTA_REASON, verdict.denial, cause="gang" if verdict.gang else "limit")
    if verdict.warning:
        warnings.append(Notice(notices.GANG, verdict.warning))
    warnings += edit.changes()
    return Decision(
        allowed=True,
        patch=edit.ops(),
        devices=tuple(found),
        warnings=tuple(warnings),
        hint=hint,
        unfit=tuple(resource for resource, _ in unfit),
    )


@dataclass(frozen=True)
class Charge:
    """The namespace's device quota, asked for one admission: reserves, and writes the reservation on the Pod."""

    quota: QuotaPort
    namespace: str
    uid: str
    dry_run: bool
    who: str

    def admit(self, edit: PodEdit) -> Verdict:
        verdict = self.quota.admit(self.namespace, edit, uid=self.uid, dry_run=self.dry_run, who=self.who)
        if not verdict.denial:
            _reserve(edit, verdict.reservation)
        return verdict


def _reserve(edit: PodEdit, reservation: str) -> Verdict:
    """The Pod carries the reservation the quota made for it (the feed reads it back to count the Pod once: usage,
    not reservation), and no other: one its author wrote, or one a Pod charged nothing carries, is removed
    (docs/rules.md#only-the-webhook-writes-a-reservation)."""
    if reservation:
        edit.annotations[QUOTA_RESERVATION_ANNOTATION] = reservation
    else:
        edit.annotations.pop(QUOTA_RESERVATION_ANNOTATION, None)
    return FITS


def _charged_only(edit: PodEdit, settings: ReviewSettings, charge: Charge | None, message: str) -> Decision:
    """A Pod the webhook does not mutate (opted out, or bound for another scheduler): charged all the same where the
    namespace has a device quota, as its stored self will count (docs/rules.md#every-device-pod-is-charged)."""
    if charge is not None:
        try:
            for ctr in edit.containers:
                _check_amounts(ctr, settings.device_resources)
        except DeviceRequestError as exc:
            return deny(400, "BadRequest", str(exc))
        verdict = charge.admit(edit)
        if verdict.denial:
            return deny(403, QUOTA_REASON, verdict.denial, cause="gang" if verdict.gang else "limit")
    else:
        _reserve(edit, "")
    return Decision(allowed=True, message=message, patch=edit.ops())


def _switched_off(edit: PodEdit, off: Mapping[str, str]) -> str:
    """Why a Pod asking for a vendor's resources passes unchanged: that vendor is off (HAMi's default for Ascend
    and Iluvatar). Only Pods no enabled vendor claimed get here, so device Pods never pay for it."""
    asked = {name: off[name] for ctr in edit.containers for name in (*ctr.limits, *ctr.requests) if name in off}
    if not asked:
        return ""
    names = ", ".join(sorted(asked))
    switches = " and ".join(f"{env}=true" for env in sorted(set(asked.values())))
    return f"{names} belong to a device backend that is off: set {switches} to handle them"


def _other_scheduler(name: str, settings: ReviewSettings) -> bool:
    """HAMi's gate: a Pod already bound for another scheduler is left alone."""
    if not name:
        return False
    if name == DEFAULT_SCHEDULER and settings.force_overwrite_default_scheduler:
        return False
    return not settings.scheduler_name or name != settings.scheduler_name


def _mutate(edit: PodEdit, settings: ReviewSettings) -> list[str]:
    """Show every container to every vendor in order; the keys of the vendors that found something."""
    found: dict[str, None] = {}
    for ctr in edit.containers:
        _check_amounts(ctr, settings.device_resources)
        for device in settings.devices:
            if device.mutate(ctr, edit):
                found[device.key] = None
                _mirror_requests(ctr, device)
    return [d.key for d in settings.devices if d.key in found]


def _check_amounts(ctr: ContainerEdit, device_resources: dict[str, bool]) -> None:
    """Invalid device requests are the author's error: no device amount may be negative; a device count is a
    whole number that fits int32.

    HAMi and the device plugins hold counts in int32: a larger one is denied here, not
    silently read as "no request" (which would also ask nothing of the quota).
    """
    for side, read in ((ctr.limits, ctr.limit), (ctr.requests, ctr.request)):
        for name, raw in side.items():
            is_count = device_resources.get(name)
            amount = None if is_count is None else read(name)
            if amount is None:
                continue
            if amount.nanos < 0:
                raise DeviceRequestError(
                    f"container {ctr.name}: {name} must not be negative, got {shown(raw, quoted=False)}"
                )
            if not is_count:
                continue
            if amount.whole is None:
                raise DeviceRequestError(
                    f"container {ctr.name}: {name} must be a whole number of devices, got {shown(raw, quoted=False)}"
                )
            if amount.whole > INT32_MAX:
                raise DeviceRequestError(
                    f"container {ctr.name}: {name} must be at most {INT32_MAX} devices, got {shown(raw, quoted=False)}"
                )


def _mirror_requests(ctr: ContainerEdit, device: Device) -> None:
    """Requests mirror limits: a device resource in limits is requested as much (Kubernetes requires equality).

    Limits are walked in the Pod's order, not the set's (whose order changes with each process's string
    hashing), so the same Pod gets the same patch in every worker.
    """
    for name in list(ctr.limits):
        if name in device.resource_names and ctr.request(name) != ctr.limit(name):
            ctr.mirror_request(name)


def _annotate(edit: PodEdit, found: list[str], settings: ReviewSettings) -> None:
    """Scheduling annotations on device Pods (docs/rules.md#device-pods-are-annotated-never-overwriting-the-author)."""
    wanted = {
        GPU_TYPE_ANNOTATION: ",".join(found),
        NODE_POLICY_ANNOTATION: settings.node_scheduler_policy,
        GPU_POLICY_ANNOTATION: settings.gpu_scheduler_policy,
    }
    for key, value in wanted.items():
        if value and key not in edit.annotations:
            edit.annotations[key] = value


def response(uid: str, decision: Decision) -> dict[str, Any]:
    """The AdmissionResponse; ``patch``/``patchType`` only when something changed."""
    status: dict[str, Any] = {"metadata": {}, "code": decision.code}
    if not decision.allowed:
        status["status"] = "Failure"
    if decision.reason:
        status["reason"] = decision.reason
    if decision.message:
        status["message"] = decision.message
    answer: dict[str, Any] = {"uid": uid, "allowed": decision.allowed, "status": status}
    if decision.allowed and decision.patch:
        answer["patchType"] = "JSONPatch"
        # The ops are built well-formed by app/admission/edit.py; jsonpatch.JsonPatch would only re-check them per
        # review.
        answer["patch"] = base64.b64encode(orjson.dumps(decision.patch)).decode()
    if decision.allowed and decision.warnings:
        answer["warnings"] = notices.texts(decision.warnings)
    return answer
