"""Kubernetes ``Status`` errors with the API server's real reasons and messages.

Clients branch on ``code``/``reason`` and tests assert on messages, so these
mirror ``k8s.io/apimachinery/pkg/api/errors`` and ``.../util/validation/field``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error the server answers as a ``Status`` object (also raised by seeding helpers)."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details
        self.metadata = metadata or {}

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.metadata),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            status["details"] = self.details
        status["code"] = self.code
        return status


def qualified(resource: str, group: str) -> str:
    """``secrets`` or ``mutatingwebhookconfigurations.admissionregistration.k8s.io``."""
    return f"{resource}.{group}" if group else resource


def _details(name: str, group: str, kind: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    return details


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(404, f'{qualified(plural, group)} "{name}" not found', details=_details(name, group, plural))


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409, f'{qualified(plural, group)} "{name}" already exists', "AlreadyExists", _details(name, group, plural)
    )


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
        details=_details(name, group, plural),
    )


def forbidden(plural: str, group: str, name: str, why: str, causes: list[dict[str, str]] | None = None) -> ApiError:
    message = f'{qualified(plural, group)} "{name}" is forbidden: {why}'
    details = _details(name, group, plural)
    if causes:
        details["causes"] = causes
    return ApiError(403, message, details=details)


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def internal(message: str) -> ApiError:
    """``errors.NewInternalError``: the cause is repeated in ``details.causes``."""
    return ApiError(500, f"Internal error occurred: {message}", details={"causes": [{"message": message}]})


def expired(message: str) -> ApiError:
    return ApiError(410, message)


def continue_expired(token: str) -> ApiError:
    """etcd3 store's answer to a continue token whose snapshot was compacted: 410 with a token to go on."""
    message = (
        "The provided continue parameter is too old to display a consistent list result. You can start a new "
        "list without the continue parameter, or use the continue token in this response to retrieve the "
        "remainder of the results. Continuing with the provided token results in an inconsistent list - "
        "objects that were created, modified, or deleted between the time the first chunk was returned and "
        "now may show up in the list."
    )
    return ApiError(410, message, metadata={"continue": token})


def resource_not_found() -> ApiError:
    return ApiError(404, "the server could not find the requested resource", details={})


def method_not_allowed() -> ApiError:
    return ApiError(405, "the server does not allow this method on the requested resource", details={})


def unsupported_media_type(accepted: list[str]) -> ApiError:
    return ApiError(
        415, f"the body of the request was in an unknown format - accepted media types include: {', '.join(accepted)}"
    )


class GoValue(str):
    """A bad value already spelled as Go prints it (``0x0`` for a uint64 zero)."""


def go_repr(value: Any) -> str:
    """Format a bad value the way Go's field errors print it (``"x"``, ``31``, ``[]string{"a"}``)."""
    if isinstance(value, GoValue):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[]string{" + ", ".join(json.dumps(v) for v in value) + "}"
    return json.dumps(value, sort_keys=True)


_TYPES = {
    "Required": ("Required value", "FieldValueRequired"),
    "Invalid": ("Invalid value", "FieldValueInvalid"),
    "NotSupported": ("Unsupported value", "FieldValueNotSupported"),
    "Duplicate": ("Duplicate value", "FieldValueDuplicate"),
    "Forbidden": ("Forbidden", "FieldValueForbidden"),
    "TooLong": ("Too long", "FieldValueTooLong"),
}
_WITHOUT_VALUE = {"Required", "Forbidden", "TooLong"}


@dataclass(frozen=True)
class FieldError:
    """One ``field.Error``; ``kind`` is a key of ``_TYPES``."""

    kind: str
    field: str
    value: Any = None
    detail: str = ""

    def body(self) -> str:
        label = _TYPES[self.kind][0]
        text = label if self.kind in _WITHOUT_VALUE else f"{label}: {go_repr(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def cause(self) -> dict[str, str]:
        return {"reason": _TYPES[self.kind][1], "message": self.body(), "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("Required", field, detail=detail)


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("Invalid", field, value, detail)


def not_supported(field: str, value: Any, supported: list[str]) -> FieldError:
    return FieldError("NotSupported", field, value, "supported values: " + ", ".join(json.dumps(s) for s in supported))


def invalid_object(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """422 ``Invalid`` whose message aggregates all field errors like ``errors.NewInvalid``."""
    joined = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(str(e) for e in errors) + "]"
    details = _details(name, group, kind)
    details["causes"] = [e.cause() for e in errors]
    return ApiError(422, f'{qualified(kind, group)} "{name}" is invalid: {joined}', details=details)
