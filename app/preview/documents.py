"""The offline preview behind ``hami-webhook review``: manifests in, what the API server and the webhook would
do to each Pod out. Pure: the CLI reads the files and prints the result.

Each Pod, and each Pod a workload would create from its template, is first defaulted as kube-apiserver does
before webhooks run, then checked against the webhook configuration (would it be sent at all?), then reviewed
by the same policy code the server runs. The patch is expressed in paths into the document it came from.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from app.admission.edit import Op, pointer
from app.admission.fits import NO_INVENTORY, InventoryPort
from app.admission.ports import QuotaOff, ReviewSettings
from app.admission.review import answer, decide_review, request_namespace
from app.admission.templates import default_spec
from app.preview.scope import Scope
from app.preview.workloads import Found, dig, objects, template_pod
from app.untrusted import json_document, shown

OK, DENIED, INVALID = 0, 1, 2
"""Exit codes, the worst one wins: every Pod admitted (patched, unchanged, or never sent to the webhook);
one refused (by the policy, or by the API server when a matchCondition cannot be evaluated under
failurePolicy Fail); bad input (an invalid Pod, which the webhook answers with a 400 denial)."""

SERVER_SET = (
    *("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp"),
    *("deletionGracePeriodSeconds", "managedFields", "ownerReferences", "selfLink"),
)
"""Metadata a live Pod has and a Pod being created has not (``--as-new`` drops it, with status and nodeName)."""


@dataclass(frozen=True)
class Options:
    """What the command line adds to the documents."""

    namespace: str = "default"
    """For objects that name none."""
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Known labels per namespace (from Namespace documents and the command line), for the namespaceSelector."""
    as_new: bool = False
    """Review live Pods as the new Pods they were created as."""
    inventory: InventoryPort = NO_INVENTORY
    """The devices Nodes register, for fits nowhere: the live cluster's (--cluster), a file's, or none."""


@dataclass(frozen=True)
class Entry:
    """One object of a document accounted for: the decision for a Pod (or for the Pods of a template), or why
    an object creates no Pod."""

    line: str
    outcome: int = OK
    notes: tuple[str, ...] = ()
    reviewed: bool = True


@dataclass(frozen=True)
class DocumentReview:
    """One document of the file: every object in it accounted for, in order, and the document patched."""

    label: str
    entries: tuple[Entry, ...]
    patched: Any
    patch: list[Op]

    @property
    def reviewed(self) -> bool:
        return any(entry.reviewed for entry in self.entries)

    @property
    def outcome(self) -> int:
        return max((entry.outcome for entry in self.entries), default=OK)


def admission_review(pod: dict[str, Any], *, uid: str, dry_run: bool = False) -> dict[str, Any]:
    """Wrap a Pod in a v1 AdmissionReview CREATE request."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": (pod.get("metadata") or {}).get("namespace", "default"),
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": pod,
            "oldObject": None,
            "dryRun": dry_run,
        },
    }


def namespace_labels(documents: Sequence[Any]) -> dict[str, dict[str, str]]:
    """The labels of the Namespace objects in ``documents``, by name."""
    found: dict[str, dict[str, str]] = {}
    for document in documents:
        for item in objects(document):
            name = dig(item.obj, ("metadata", "name"))
            labels = dig(item.obj, ("metadata", "labels"))
            if item.kind == "Namespace" and isinstance(name, str):
                found[name] = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
    return found


def preview(documents: Sequence[Any], settings: ReviewSettings, scope: Scope, options: Options) -> list[DocumentReview]:
    """Review every document of a file in order."""
    return [_document(document, index, settings, scope, options) for index, document in enumerate(documents, 1)]


def _document(document: Any, index: int, settings: ReviewSettings, scope: Scope, options: Options) -> DocumentReview:
    """Every object of one document in order; its Pods' patches rebased onto the document and applied to it."""
    work = copy.deepcopy(document)
    found = list(objects(work))
    entries: list[Entry] = []
    patch: list[Op] = []
    for item in found:
        namespace = _namespace(item, options.namespace)
        label = item.label(namespace) or f"document {index}"
        if item.template is None:
            entries.append(Entry(_not_a_carrier(item, label), reviewed=False))
            continue
        pod, prefix = _pod(item, namespace, settings.owned_annotations.owned if options.as_new else None)
        if item.template:
            label = f"{label}, Pods from {'.'.join(map(str, item.template))}"
        entry, ops = _review(pod, label, settings, scope, options)
        entries.append(entry)
        if item.template and any(op["path"].startswith("/metadata") for op in ops):
            template = dig(item.obj, item.template)
            if isinstance(template, Mapping) and not isinstance(template.get("metadata"), Mapping):
                patch.append({"op": "add", "path": f"{prefix}/metadata", "value": {}})
        patch += [{**op, "path": prefix + op["path"]} for op in ops]
    if not found:
        entries.append(Entry(f"document {index}: an empty {shown(document.get('kind'), quoted=False)}", reviewed=False))
    label = found[0].label(options.namespace) if len(found) == 1 and not found[0].at else _label(document, index)
    patched = jsonpatch.apply_patch(work, patch) if patch else work
    return DocumentReview(label, tuple(entries), patched, patch)


def _label(document: Any, index: int) -> str:
    kind = document.get("kind") if isinstance(document, Mapping) else None
    return f"{shown(kind, quoted=False) if isinstance(kind, str) and kind else 'document'} {index}"


def _namespace(item: Found, default: str) -> str:
    namespace = dig(item.obj, ("metadata", "namespace"))
    return namespace if isinstance(namespace, str) and namespace else default


def _not_a_carrier(item: Found, label: str) -> str:
    if not isinstance(item.obj, Mapping):
        return f"{label}: not a Kubernetes object ({shown(item.obj)}), skipped"
    if item.kind == "Namespace":
        return f"{label}: creates no Pod (its labels are used for the namespaceSelector)"
    return f"{label}: creates no Pod, skipped"


def _pod(item: Found, namespace: str, as_new: Sequence[str] | None) -> tuple[dict[str, Any], str]:
    """The Pod to review (defaulted as kube-apiserver does) and the pointer its patch paths are relative to;
    ``as_new``: review a live Pod as new, without what the server and HAMi (these annotations) wrote into it.

    A Pod is defaulted in place in the working copy of the document, a template's spec too: the printed
    document then shows the Pods as the webhook receives them, and the patch applies to it.
    """
    if item.template == ():
        if as_new is not None:
            _strip_live(item.obj, as_new)
        _api_server_defaults(item.obj, namespace)
        return copy.deepcopy(item.obj), pointer(*item.at)
    template = dig(item.obj, item.template or ())
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        default_spec(template["spec"])
    return copy.deepcopy(template_pod(item, namespace)), pointer(*item.at, *(item.template or ()))


def _strip_live(pod: dict[str, Any], owned: Sequence[str]) -> None:
    pod.pop("status", None)
    if isinstance(pod.get("spec"), dict):
        pod["spec"].pop("nodeName", None)
    meta = pod.get("metadata")
    if isinstance(meta, dict):
        for key in SERVER_SET:
            meta.pop(key, None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            for key in owned:
                annotations.pop(key, None)


def _api_server_defaults(pod: dict[str, Any], namespace: str) -> None:
    """What kube-apiserver fills in before webhooks see a Pod: namespace, then its spec's defaults. In place."""
    if not isinstance(pod.get("metadata"), dict):
        pod["metadata"] = {}
    if not pod["metadata"].get("namespace"):
        pod["metadata"]["namespace"] = namespace
    if isinstance(pod.get("spec"), dict):
        default_spec(pod["spec"])


def _review(
    pod: dict[str, Any], label: str, settings: ReviewSettings, scope: Scope, options: Options
) -> tuple[Entry, list[Op]]:
    """One Pod's decision line, notes and exit code, and the patch the API server would apply to it."""
    document = admission_review(pod, uid="preview", dry_run=True)
    reach = scope.reach(pod, options.namespace_labels.get(request_namespace(document["request"]), {}))
    decision = decide_review(document, settings, QuotaOff(), "preview", governed=False, inventory=options.inventory)
    response = answer(document, "preview", decision)["response"]
    status = response["status"]
    notes = [f"warning: {warning}" for warning in response.get("warnings", [])]
    if decision.hint:
        notes.append(f"hint: {decision.hint}")
    if not response["allowed"]:
        verdict = f"denied ({status['code']} {status.get('reason', '')}): {status.get('message', '')}"
        outcome = INVALID if status["code"] == 400 else DENIED
        ops: list[Op] = []
        node = dig(pod, ("spec", "nodeName"))
        if node:
            notes.append(f"hint: {_bound_hint(pod, node)}")
    else:
        ops = json_document(base64.b64decode(response["patch"])) if "patch" in response else []
        summary = f"{len(ops)} patch operation(s)" if ops else "no change"
        note = f" ({status['message']})" if status.get("message") else ""
        verdict, outcome = f"allowed, {summary}{note}", OK
    if not reach.sent:
        if reach.rejected:
            return Entry(f"{label}: rejected by the API server: {reach.why}", DENIED, tuple(notes)), []
        annotations, labels = dig(pod, ("metadata", "annotations")), dig(pod, ("metadata", "labels"))
        forged = settings.owned_annotations.forged(
            annotations if isinstance(annotations, Mapping) else {}, labels if isinstance(labels, Mapping) else {}
        )
        if forged:  # the allocation guard (app/preview/policies.py) looks where the webhook does not
            why = f"refused by the API server's allocation guard: {forged}"
            return Entry(f"{label}: not sent to the webhook ({reach.why}): {why}", DENIED, tuple(notes)), []
        line = f"{label}: not sent to the webhook ({reach.why}): created unchanged; if it were sent: {verdict}"
        return Entry(line, OK, tuple(notes)), []
    return Entry(f"{label}: {verdict}", outcome, tuple(notes)), ops


def _bound_hint(pod: Mapping[str, Any], node: Any) -> str:
    """Why a Pod with spec.nodeName is refused, and how to preview the Pod it was created as."""
    meta = pod.get("metadata") or {}
    live = [key for key in ("uid", "resourceVersion", "creationTimestamp") if key in meta]
    live += ["status"] if "status" in pod else []
    node_text = shown(node, quoted=False)
    if live:
        return (
            f"spec.nodeName ({node_text}) is set because this is a live Pod, already bound to a node (it has "
            f"{', '.join(live)}); review it as the new Pod it was created as with --as-new"
        )
    return f"spec.nodeName ({node_text}) binds the Pod to a node, past hami-scheduler: remove it"
