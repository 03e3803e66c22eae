"""HTTP transport: POST /webhook, GET /healthz and /readyz. Thin: all policy lives in review.

Every request gets an answer a person can read: an AdmissionReview when a uid can
be read from the body (decision P2), otherwise HTTP 400/413 with a JSON error.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Flask, Response, current_app, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from app.quota import QuotaPort, QuotaUnavailable
from app.review import UnreadableReview, answer, deny, read_uid, review
from app.settings import Settings

MAX_BODY = 7 * 1024 * 1024
log = logging.getLogger("hami_webhook.review")
blueprint = Blueprint("webhook", __name__)


@dataclass(frozen=True)
class Webhook:
    """What the views need: the settings and the quota port."""

    settings: Settings
    quota: QuotaPort


def install(app: Flask, webhook: Webhook) -> None:
    """Register the views, the body limit and JSON error pages on ``app``."""
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.extensions["hami_webhook"] = webhook
    app.register_blueprint(blueprint)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype="application/json")


def _error(status: int, message: str) -> Response:
    return _json({"error": message, "code": status}, status)


def _http_error(exc: HTTPException) -> Response:
    return _error(exc.code or 500, exc.description or exc.name)


def _unexpected_error(exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.path)
    return _error(500, "internal error; see the webhook's log")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


@blueprint.post("/webhook")
def webhook() -> Response:
    started = time.perf_counter()
    hook: Webhook = current_app.extensions["hami_webhook"]
    try:
        body = request.get_data(cache=False)
    except RequestEntityTooLarge:
        return _too_large()
    if not body:
        return _error(400, "request body is empty")
    try:
        document = json.loads(body, parse_constant=_reject_constant)
    except ValueError as exc:  # JSONDecodeError and bad UTF-8 are both ValueErrors
        return _error(400, f"request body is not JSON: {exc}")
    try:
        uid = read_uid(document)
    except UnreadableReview as exc:
        return _error(400, str(exc))
    if request.mimetype != "application/json":
        reply = answer(
            document, uid, deny(400, "BadRequest", f"contentType={request.content_type}, expected application/json")
        )
    else:
        try:
            reply = review(document, hook.settings, hook.quota)
        except QuotaUnavailable as exc:  # not the Pod's fault: a non-200 lets the failurePolicy decide (Q5)
            log.error("quota undecided uid=%s: %s", uid, exc)
            return _error(500, f"namespace quota could not be decided: {exc}")
        except Exception:
            log.exception("review failed uid=%s", uid)
            reply = answer(document, uid, deny(500, "InternalError", "internal error; see the webhook's log"))
    _log_review(document, reply["response"], started)
    return _json(reply)


def _too_large() -> Response:
    """HTTP 413 carrying an AdmissionReview-shaped denial: the uid inside was never read (decision P1)."""
    message = f"request entity is too large; limit is {MAX_BODY} bytes"
    return _json(answer({}, "", deny(413, "RequestEntityTooLarge", message)), 413)


def _log_review(document: dict[str, Any], answer: dict[str, Any], started: float) -> None:
    """One line per review: who, what was decided, how long it took. Never the Pod body."""
    req: dict[str, Any] = document.get("request") or {}
    obj: dict[str, Any] = req["object"] if isinstance(req.get("object"), dict) else {}
    meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    status = answer.get("status", {})
    log.info(
        "review uid=%s namespace=%s pod=%s allowed=%s code=%s reason=%s patched=%s message=%s ms=%.2f",
        answer.get("uid"),
        req.get("namespace") or meta.get("namespace") or "-",
        meta.get("name") or req.get("name") or (meta.get("generateName") or "-") + "*",
        str(answer.get("allowed")).lower(),
        status.get("code"),
        status.get("reason") or "-",
        str("patch" in answer).lower(),
        json.dumps(status.get("message") or ""),
        (time.perf_counter() - started) * 1000,
    )


@blueprint.get("/healthz")
def healthz() -> Response:
    """Liveness: the process answers."""
    return _json({"status": "ok"})


@blueprint.get("/readyz")
def readyz() -> Response:
    """Readiness: ready to admit; the quota port decides (it is not ready before its first sync)."""
    hook: Webhook = current_app.extensions["hami_webhook"]
    quota = hook.quota.status()
    body = {"ready": bool(quota.get("ready")), "quota": quota, "devices": [d.key for d in hook.settings.devices]}
    return _json(body, 200 if body["ready"] else 503)
