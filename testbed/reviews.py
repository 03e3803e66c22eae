"""AdmissionReviews as the API server sends them, and a runner that reviews one and applies the answer.

The Pods in them come from testbed.pods, in the defaulted shape a webhook really receives.
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from dataclasses import dataclass
from typing import Any

import jsonpatch

from app.admission.annotations import GPU_TYPE_ANNOTATION
from app.admission.fits import NO_INVENTORY, InventoryPort
from app.admission.ports import QuotaOff, QuotaPort
from app.admission.review import review
from app.settings import Settings


def admission_review(
    obj: Any,
    *,
    version: str = "v1",
    uid: str | None = None,
    operation: str = "CREATE",
    dry_run: bool = False,
    user: str = "kubernetes-admin",
) -> dict[str, Any]:
    """An AdmissionReview request for a Pod, as kube-apiserver builds it (``user`` asking)."""
    namespace = (obj.get("metadata") or {}).get("namespace", "default") if isinstance(obj, dict) else "default"
    return {
        "apiVersion": f"admission.k8s.io/{version}",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid1()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": user, "groups": ["system:masters"]},
            "object": obj,
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


@dataclass(frozen=True)
class Outcome:
    """The answer, its decoded patch, and the Pod with the patch applied."""

    response: dict[str, Any]
    ops: list[dict[str, Any]]
    patched: dict[str, Any]

    @property
    def status(self) -> dict[str, Any]:
        return self.response["status"]

    def denial(self) -> tuple[bool, int, str, str]:
        """(allowed, code, reason, message): what `kubectl` would show."""
        return (
            self.response["allowed"],
            self.status["code"],
            self.status.get("reason", ""),
            self.status.get("message", ""),
        )


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch of an AdmissionResponse, checking the patch/patchType pairing."""
    if "patch" not in response:
        assert "patchType" not in response
        return []
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"], validate=True))
    assert ops, "an empty patch must be omitted"
    return ops


def run(
    obj: dict[str, Any],
    settings: Settings,
    quota: QuotaPort | None = None,
    inventory: InventoryPort = NO_INVENTORY,
    **review_args: Any,
) -> Outcome:
    """Review ``obj`` (a Pod) and apply the returned patch to it."""
    request = admission_review(copy.deepcopy(obj), **review_args)
    answer = review(request, settings, quota or QuotaOff(), inventory)
    assert answer["apiVersion"] == request["apiVersion"] and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == request["request"]["uid"]
    ops = decode_patch(response)
    patched = jsonpatch.apply_patch(obj, ops) if ops else copy.deepcopy(obj)
    return Outcome(response, ops, patched)


def admitted(obj: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """``obj`` as the webhook lets it in: allowed with no denial, its patch applied."""
    outcome = run(obj, settings)
    assert outcome.denial() == (True, 200, "", "")
    return outcome.patched


def redirected(obj: dict[str, Any], *, devices: str = "NVIDIA") -> dict[str, Any]:
    """``obj`` as the webhook returns a device Pod it changed nothing else in: HAMi's scheduler, gpu-type annotation."""
    out = copy.deepcopy(obj)
    out["spec"]["schedulerName"] = "hami-scheduler"
    out["metadata"].setdefault("annotations", {})[GPU_TYPE_ANNOTATION] = devices
    return out
