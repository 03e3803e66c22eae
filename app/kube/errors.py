"""One error type for an API server's refusal, carrying the Status it answered with (lightkube's habit).

The API server explains every non-2xx answer in a ``Status`` body (code, reason, message); this module is
the one place that reads it, whether the answer came through the generated client (``ApiException``) or
through a raw ``call_api`` (certgen's JSON-dict transport).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException

CONFLICT = 409  # the resourceVersion written is stale, or the object was created meanwhile: read again
NOT_FOUND = 404
GONE = 410  # a watch's or a list's resourceVersion is too old: list again


class ApiError(Exception):
    """The API server answered ``code``; ``status`` is its Status body (or one built from the HTTP line and body
    when the answer was not a Status, e.g. from a proxy in between)."""

    def __init__(self, code: int, phrase: str, status: dict[str, Any], action: str = "") -> None:
        self.code = code
        self.phrase = phrase  # the HTTP reason phrase, "Internal Server Error"
        self.status = status
        self.action = action  # what was being done, "read Secret ns/name": said first when set
        super().__init__(str(self))

    @property
    def reason(self) -> str:
        """The Status reason, Kubernetes' own name for the failure ("InternalError", "Conflict")."""
        return str(self.status.get("reason") or self.phrase)

    @property
    def message(self) -> str:
        return str(self.status.get("message") or "")

    def __str__(self) -> str:
        """``[action: ]HTTP 409 Conflict: <the server's message>``: the Status reason, as kubectl prints it."""
        line = f"HTTP {self.code} {self.reason}" + (f": {self.message}" if self.message else "")
        return f"{self.action}: {line}" if self.action else line

    def http_line(self) -> str:
        """``HTTP 503 Service Unavailable: <the server's message>``: with the HTTP reason phrase instead, as the
        quota's errors (and the tests that pin them) have always said it."""
        return f"HTTP {self.code} {self.phrase}" + (f": {self.message}" if self.message else "")

    @classmethod
    def from_response(cls, code: int, phrase: Any, body: bytes | str | None, action: str = "") -> ApiError:
        """From a raw answer: its status code, reason phrase and body."""
        return cls(code, str(phrase or ""), _status(body), action)

    @classmethod
    def from_client(cls, exc: ApiException) -> ApiError:
        """From the generated client's exception for a non-2xx answer."""
        return cls.from_response(int(exc.status or 0), exc.reason, exc.body)


def _status(body: bytes | str | None) -> dict[str, Any]:
    """The Status in ``body``; else the first 200 characters of the body as its message."""
    try:
        status = json.loads(body or b"")
        if isinstance(status, dict) and "message" in status:
            return status
    except (ValueError, TypeError):
        pass
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    return {"message": text.strip()[:200]}


def describe(exc: BaseException) -> str:
    """One line for any failure of an API call: the server's code and message, not the client's header dump."""
    if isinstance(exc, ApiException):
        exc = ApiError.from_client(exc)
    if isinstance(exc, ApiError):
        return exc.http_line()
    return f"{type(exc).__name__}: {exc}"
