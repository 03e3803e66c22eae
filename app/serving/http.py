"""HTTP transport: POST /webhook (Pods), POST /workloads (their templates), GET /healthz and /readyz. Thin: all
policy lives in app/admission.

Every request gets an answer a person can read: an AdmissionReview when a uid can
be read from the body, otherwise an HTTP error status with a Kubernetes Status (a body
over the limit too: its uid is never read). Rule: docs/rules.md#bad-input-gets-a-clear-answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import orjson
from flask import Blueprint, Flask, Response, current_app, request
from flask.sessions import NullSession, SessionInterface
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from app import metrics
from app.admission.fits import NO_INVENTORY, InventoryPort
from app.admission.notices import KINDS
from app.admission.ports import QuotaPort, QuotaUnavailable
from app.admission.review import (
    Decision,
    UnreadableReview,
    answer,
    decide_review,
    deny,
    quota_here,
    read_uid,
    request_namespace,
)
from app.admission.workloads import WorkloadSettings, decide_workload_review
from app.readiness import Readiness
from app.serving.protocol import error_body
from app.untrusted import UntrustedError, json_document

log = logging.getLogger("hami_webhook.review")
blueprint = Blueprint("webhook", __name__)
WEBHOOK, WORKLOADS = "/webhook", "/workloads"
_REVIEWED = (WEBHOOK, WORKLOADS)  # the views that read an AdmissionReview: the app prepares theirs


class Review:
    """An AdmissionReview request as the app prepared it, once, before the loop chose where to serve it: the body
    parsed (or the 400's message saying why there is none) and, for a Pod's, the quota port's answer to "is there
    a quota here" (or the fault asking it raised, which the view answers as any fault in a review). A slotted
    class, not a dataclass: made once per review, on the path every review takes."""

    __slots__ = ("document", "fault", "governed", "refused")

    def __init__(
        self, document: Any = None, refused: str | None = None, governed: bool = False, fault: Exception | None = None
    ) -> None:
        self.document, self.refused, self.governed, self.fault = document, refused, governed, fault


_PREPARED: ContextVar[Review | None] = ContextVar("hami_webhook.review", default=None)
"""The review of the WSGI call under way, set by ``PreparedReview`` around Flask's dispatch: Flask builds the request
context from the environ alone, and this hands the view the value the app prepared without writing it into the
environ. Per thread, so a review served in the pool and one on the loop never see each other's."""


class PreparedReview:
    """One request as the app prepared it for the loop (app.serving.protocol's ``Prepared``): a WSGI call that
    serves it with its review, and ``blocks``, whether serving it may wait on the quota ledger (a Lease on the
    API server): a review of a Pod in a namespace with a device quota, or while the quota feed cannot tell."""

    __slots__ = ("app", "blocks", "review")

    def __init__(self, app: WebhookApp, review: Review | None, blocks: bool) -> None:
        self.app, self.review, self.blocks = app, review, blocks

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        token = _PREPARED.set(self.review)
        try:
            return Flask.wsgi_app(self.app, environ, start_response)
        finally:
            _PREPARED.reset(token)


@dataclass(frozen=True)
class Webhook:
    """What the views need: the settings, the quota port, and the process's readiness (which the worker reads
    from the app too); the device inventory, for fits nowhere."""

    settings: WorkloadSettings
    quota: QuotaPort
    readiness: Readiness
    inventory: InventoryPort = NO_INVENTORY


class NoSessions(SessionInterface):
    """The webhook keeps no sessions. Flask's default interface, without a secret key, builds a new empty
    NullSession for every request; this hands out one, which refuses every write as each of those would."""

    session = NullSession()

    def open_session(self, app: Flask, request: Any) -> NullSession:
        return self.session


class WebhookApp(Flask):
    """The webhook's Flask app, which also prepares each request for app.serving.worker (where it may be served),
    and hands it the process's readiness (made with the app, by ``create_app``)."""

    @property
    def settings(self) -> WorkloadSettings:
        """The settings the app was made with (``create_app``): the worker's deadlines come from them too."""
        hook: Webhook = self.extensions["hami_webhook"]
        return hook.settings

    @property
    def readiness(self) -> Readiness:
        hook: Webhook = self.extensions["hami_webhook"]
        return hook.readiness

    def prepare(self, environ: dict[str, Any]) -> PreparedReview:
        """The request prepared once, for app.serving.worker to choose where it is served and for the view to read:
        an AdmissionReview's body parsed, and for a Pod's review, whether a quota governs its namespace."""
        review = None
        if environ.get("REQUEST_METHOD") == "POST" and environ.get("PATH_INFO") in _REVIEWED:
            hook: Webhook = self.extensions["hami_webhook"]
            body = environ["wsgi.input"].read()  # whole (our protocol's, a test client's): no length to parse
            review = _prepare(body, hook.quota, environ["PATH_INFO"] == WEBHOOK)
        return PreparedReview(self, review, review is not None and review.governed)

    def wsgi_app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        """A call the worker did not prepare (a test client, another server) is prepared here: one path for all."""
        return self.prepare(environ)(environ, start_response)


def _prepare(body: bytes, quota: QuotaPort, pod: bool) -> Review:
    if not body:
        return Review(refused="request body is empty")
    try:
        document = json_document(body)
    except UntrustedError as exc:
        return Review(refused=f"request body is {exc}")
    if not pod:
        return Review(document)
    try:
        return Review(document, governed=quota_here(quota, document))
    except Exception as exc:  # a thread cannot stall the loop; the view answers it as a fault of the review
        return Review(document, governed=True, fault=exc)


def install(app: Flask, webhook: Webhook) -> None:
    """Register the views and JSON error pages on ``app``. No body limit: app.serving.protocol holds it, and refuses
    a body over it before the app is called."""
    app.session_interface = NoSessions()
    app.extensions["hami_webhook"] = webhook
    app.register_blueprint(blueprint)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)
    metrics.expect_warnings(KINDS)


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype="application/json")


def _error(status: int, message: str) -> Response:
    return Response(error_body(status, message), status=status, mimetype="application/json")


def _http_error(exc: HTTPException) -> Response:
    """werkzeug's status and headers (``Allow`` on a 405) with our body; a 405 says which method to use."""
    message = exc.description or exc.name
    if isinstance(exc, MethodNotAllowed):
        allowed = [m for m in exc.valid_methods or () if m not in ("HEAD", "OPTIONS")]
        how = f"use {' or '.join(allowed)}"
        if allowed == ["POST"]:
            how += " with an AdmissionReview JSON body (Content-Type: application/json)"
        message = f"method {request.method} is not allowed on {request.path}: {how}"
    reply = _error(exc.code or 500, message)
    for name, value in exc.get_headers():
        if name.lower() != "content-type":
            reply.headers[name] = value
    return reply


def _unexpected_error(exc: Exception) -> Response:
    log.exception("unhandled error", extra={"fields": {"method": request.method, "path": request.path}})
    return _error(500, "internal error; see the webhook's log")


@blueprint.post(WEBHOOK)
def webhook() -> Response:
    """The review of a Pod."""
    return _counted(_webhook)


@blueprint.post(WORKLOADS)
def workloads() -> Response:
    """The check of a workload's Pod template (app/admission/workloads.py): never waits, never refuses by default."""
    return _counted(_workloads)


def _counted(view: Callable[[float], Response]) -> Response:
    """A view's request counted and timed under controller-runtime's metric names."""
    started = time.perf_counter()
    metrics.request_started()
    code = 500  # what the error handler answers when the view raises
    try:
        reply = view(started)
        code = reply.status_code
        return reply
    finally:
        metrics.request_finished(code, time.perf_counter() - started)


def _read() -> tuple[Review, str] | Response:
    """The prepared review of the request and its uid, or the HTTP error that says why there is none."""
    review = _PREPARED.get()
    if review is None:  # WebhookApp.prepare prepares every request these views serve
        raise RuntimeError(f"{request.path} was served without its prepared review")
    if review.refused is not None:
        return _error(400, review.refused)
    try:
        return review, read_uid(review.document)
    except UnreadableReview as exc:
        return _error(400, str(exc))


def _workloads(started: float) -> Response:
    def check(review: Review, uid: str, hook: Webhook) -> Decision | Response:
        try:
            return decide_workload_review(review.document, hook.settings, hook.quota, uid, hook.inventory)
        except Exception:  # a warning is not worth a failed apply: failurePolicy Ignore would admit it anyway
            log.exception("workload check failed", extra={"fields": {"uid": uid}})
            return Decision(allowed=True)

    return _answered(check, _record_workload, started)


def _answered(
    decide: Callable[[Review, str, Webhook], Decision | Response],
    record: Callable[[dict[str, Any], str, Decision, float], None],
    started: float,
) -> Response:
    """The AdmissionReview read, ``decide``'s answer to it (or the HTTP error it returns), and ``record`` run once
    the answer has left: what the Pods' and the workloads' views share."""
    read = _read()
    if isinstance(read, Response):
        return read
    review, uid = read
    document = review.document
    if request.mimetype != "application/json":
        decision: Decision | Response = deny(
            400, "BadRequest", f"contentType={request.content_type}, expected application/json"
        )
    else:
        decision = decide(review, uid, current_app.extensions["hami_webhook"])
    if isinstance(decision, Response):
        return decision
    reply = _json(answer(document, uid, decision))
    reply.call_on_close(lambda: record(document, uid, decision, started))
    return reply


def _record_workload(document: dict[str, Any], uid: str, decision: Decision, started: float) -> None:
    """One log line per workload checked: which, what was said, how long it took (never the object)."""
    req: dict[str, Any] = document["request"] if isinstance(document.get("request"), dict) else {}
    kind: dict[str, Any] = req["kind"] if isinstance(req.get("kind"), dict) else {}
    fields = {
        "uid": uid,
        "namespace": request_namespace(req),
        "kind": kind.get("kind") or "",
        "name": req.get("name") or "",
        "operation": req.get("operation") or "",
        "allowed": decision.allowed,
        "code": decision.code,
        "message": decision.message,
        "warnings": len(decision.warnings),
        "ms": round((time.perf_counter() - started) * 1000, 3),
    }
    log.info("workload", extra={"fields": fields})


def _webhook(started: float) -> Response:
    def decide(review: Review, uid: str, hook: Webhook) -> Decision | Response:
        try:
            if review.fault is not None:
                raise review.fault
            return decide_review(
                review.document, hook.settings, hook.quota, uid, governed=review.governed, inventory=hook.inventory
            )
        except QuotaUnavailable as exc:  # not the Pod's fault: a non-200 lets failurePolicy decide (quota undecided)
            log.error("quota undecided", extra={"fields": {"uid": uid, "error": str(exc)}})
            return _error(500, f"namespace quota could not be decided: {exc}")
        except Exception:
            log.exception("review failed", extra={"fields": {"uid": uid}})
            return deny(500, "InternalError", "internal error; see the webhook's log")

    return _answered(decide, _record, started)


def _record(document: dict[str, Any], uid: str, decision: Decision, started: float) -> None:
    """Count the decision and log one line for it: who, what was decided, how long it took. Run when the response
    is closed, which app.serving.worker does once the answer has left: the line costs the Pod create nothing.

    Never the Pod body; the patch only at debug. The formatter bounds and escapes every value. A record that
    fails is logged, never raised: the answer has already gone.
    """
    try:
        _log_and_count(document, uid, decision, started)
    except Exception:
        log.exception("review record failed", extra={"fields": {"uid": uid}})


def _log_and_count(document: dict[str, Any], uid: str, decision: Decision, started: float) -> None:
    req: dict[str, Any] = document["request"] if isinstance(document.get("request"), dict) else {}
    obj: dict[str, Any] = req["object"] if isinstance(req.get("object"), dict) else {}
    meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    namespace = request_namespace(req)
    patch = decision.patch if decision.allowed else []
    outcome = "denied" if not decision.allowed else "patched" if patch else "passed"
    kinds = tuple(w.kind for w in decision.warnings)
    quota_denied = (namespace, decision.cause) if decision.cause else None  # set on quota denials only
    metrics.decided(
        outcome,
        decision.reason,
        devices=decision.devices,
        warnings=kinds,
        quota_denied=quota_denied,
        unfit=decision.unfit,
        namespace=namespace,
    )
    fields: dict[str, Any] = {
        "uid": uid,
        "namespace": namespace,
        "pod": meta.get("name") or req.get("name") or "",
        "generateName": meta.get("generateName") or "",
        "operation": req.get("operation") or "",
        "allowed": decision.allowed,
        "code": decision.code,
        "reason": decision.reason,
        "message": decision.message,
        "patch_ops": len(patch),
        "warnings": len(kinds),
        "ms": round((time.perf_counter() - started) * 1000, 3),
    }
    if decision.hint:
        fields["hint"] = decision.hint
    log.info("review", extra={"fields": fields})
    if patch and log.isEnabledFor(logging.DEBUG):
        log.debug("review patch", extra={"fields": {"uid": uid, "patch": patch}})


@blueprint.get("/healthz")
def healthz() -> Response:
    """Liveness: the process answers."""
    return _json({"status": "ok"})


@blueprint.get("/readyz")
def readyz() -> Response:
    """Readiness: ready to admit; the quota port decides (it is not ready before its first sync).

    Answered over the TLS listener itself, so 200 also proves the listener; unready once stopping.
    """
    hook: Webhook = current_app.extensions["hami_webhook"]
    quota = hook.quota.status()
    stopping = hook.readiness.stopping.is_set()
    body = {
        "ready": bool(quota.get("ready")) and not stopping,
        "stopping": stopping,
        "quota": quota,
        "devices": [d.key for d in hook.settings.devices],
        "inventory": hook.inventory.status(),
    }
    return _json(body, 200 if body["ready"] else 503)
