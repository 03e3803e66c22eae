"""HTTP/1.1 over whole requests, for app.serving.worker's loop: what a request may be, what the app is handed, what
the client gets back. Sans-IO: the loop brings parsed requests, the connection's addresses and a clock reading, and
takes bytes away; no socket, no selector, no thread here, so tests/app/serving/test_protocol.py checks it request
by request, the environ and the app's calls against PEP 3333's own checker (``wsgiref.validate``).

- **The limits**: gunicorn's ``limit_request_*`` settings, read as gunicorn reads them, and the body limit,
  ``MAX_BODY``, which lives here alone: a body over it is refused (413) before it is read, so the app sets none.
- **The environ**: PEP 3333's, with the body whole, its exact length and no Transfer-Encoding; a header name
  with "_" is dropped (it would read as one with "-"), as gunicorn drops it by default.
- **The answer** is whole before a byte of it leaves: one buffer, head and body, for one write. The head's
  framing (Content-Length, Connection, Date) is ours whatever the app says; a fault in the app is a 500 with the
  app's JSON Status, and so is a ``Refusal`` of framing (``refusal``).
- **gunicorn's hooks** ``pre_request(worker, req)`` just before the app, ``post_request(worker, req, environ,
  resp)`` once the answer has left and the app's ``close()`` ran, guarded as gunicorn's gthread worker guards
  them: a fault in pre_request is the request's fault (500), one in post_request is logged.
"""

from __future__ import annotations

import http
import io
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any
from typing import Protocol as Interface
from urllib.parse import unquote_to_bytes

import httptools
import orjson

from app.serving.framing import MAX_FIELD, MAX_FIELDS, Limits, Refusal, Request, RequestReader

__all__ = ["MAX_BODY", "Answer", "Plain", "Prepared", "Protocol", "Refusal", "error_body", "limits", "refusal"]

MAX_BODY = 7 * 1024 * 1024
"""The largest request body served; larger ones get a 413 before they are read."""

# Headers the protocol writes itself (framing, connection), whatever the app says.
_OWN_HEADERS = frozenset(("content-length", "connection", "keep-alive", "transfer-encoding", "date", "upgrade"))
_NO_BODY = frozenset((204, 304))


class Prepared(Interface):
    """A request as the app prepared it (its ``prepare(environ)``): the WSGI call that serves it, and whether that
    may wait on something slow (then the worker runs it in its pool, never on its loop)."""

    @property
    def blocks(self) -> bool: ...
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]: ...


@dataclass(frozen=True)
class Plain:
    """An app's call as it is: for an app that prepares nothing (it never blocks), or whose ``prepare`` failed."""

    app: Callable[..., Any]
    blocks: bool = False

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        result: Iterable[bytes] = self.app(environ, start_response)
        return result


PreRequest = Callable[[Request], None]
PostRequest = Callable[[Request, dict[str, Any], "Answer"], None]


def limits(cfg: Any) -> Limits:
    """gunicorn's settings (``cfg``: its Config), read as gunicorn reads them (0: its ceiling), and MAX_BODY."""
    return Limits(
        body=MAX_BODY,
        line=min(cfg.limit_request_line or MAX_FIELD, MAX_FIELD),
        fields=min(cfg.limit_request_fields, MAX_FIELDS),
        field_size=min(cfg.limit_request_field_size or MAX_FIELD, MAX_FIELD),
    )


def error_body(status: int, message: str) -> bytes:
    """Every error answer's body, the app's and the protocol's: a Kubernetes Status (kube-apiserver shows a
    webhook's non-2xx message only in that shape), with the same text in ``error``."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
    return orjson.dumps({**body, "code": status, "error": message})


def refusal(status: int, message: str) -> bytes:
    """A complete HTTP/1.1 answer carrying the app's error body, closing the connection."""
    body = error_body(status, message)
    reason = http.HTTPStatus(status).phrase
    head = f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body


class Answer:
    """What serving a request produced: the bytes to send, whether the connection stays open for the next request,
    and what to run once they have left (``Protocol.finish``). ``status``, ``headers`` and ``sent`` are what
    gunicorn's ``post_request`` hooks read of its own response."""

    __slots__ = ("close", "data", "environ", "headers", "keep", "request", "sent", "status")

    def __init__(self, data: bytes, keep: bool, request: Request, environ: dict[str, Any], status: str) -> None:
        self.data, self.keep, self.request, self.environ, self.status = data, keep, request, environ, status
        self.headers: list[tuple[str, str]] = []
        self.sent = 0  # body bytes
        self.close: Callable[[], None] | None = None  # the app's close()

    @property
    def status_code(self) -> int:
        return int(self.status[:3])


class Protocol:
    """One worker's HTTP/1.1: a reader per connection, then for each whole request its environ and its answer."""

    def __init__(
        self,
        app: Callable[..., Any],
        limits: Limits,
        *,
        multiprocess: bool,
        pre_request: PreRequest,
        post_request: PostRequest,
        log: Any,
    ) -> None:
        self.app = app
        self.app_prepare: Callable[[dict[str, Any]], Prepared] | None = getattr(app, "prepare", None)
        self.plain = Plain(app)
        self.limits = limits
        self.pre_request, self.post_request, self.log = pre_request, post_request, log
        self.base = {
            "SCRIPT_NAME": "",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "https",
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": multiprocess,
            "wsgi.run_once": False,
            "wsgi.input_terminated": True,
        }
        self.date = (0, "")

    def reader(self) -> RequestReader:
        """A new connection's parser, under this protocol's limits."""
        return RequestReader(self.limits)

    def environ(self, request: Request, server: Any, client: Any) -> dict[str, Any]:
        """PEP 3333's environ for ``request`` on a connection from ``client`` to ``server`` (socket addresses)."""
        target = request.target
        if target[:1] == b"/":
            path, _, query = target.partition(b"?")
        else:  # absolute-form (a proxy's), or "*" (no path: PEP 3333's PATH_INFO is empty or starts with "/")
            url = httptools.parse_url(target) if target != b"*" else None
            path, query = (url.path or b"/", url.query or b"") if url else (b"", b"")
        environ = self.base.copy()
        environ["REQUEST_METHOD"] = request.method
        environ["PATH_INFO"] = (unquote_to_bytes(path) if b"%" in path else path).decode("latin-1")
        environ["QUERY_STRING"] = query.decode("latin-1")
        environ["RAW_URI"] = target.decode("latin-1")
        environ["SERVER_PROTOCOL"] = "HTTP/" + request.http_version
        environ["SERVER_NAME"], environ["SERVER_PORT"] = _host_port(server)
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = _host_port(client)
        environ["CONTENT_LENGTH"] = str(len(request.body))
        environ["wsgi.input"] = io.BytesIO(request.body)
        for raw, value in request.raw_headers:
            name = raw.decode("latin-1").upper()
            if "_" in name:  # would read as a header with "-": dropped, as gunicorn does by default
                continue
            key = name.replace("-", "_")
            if key == "CONTENT_TYPE":
                environ[key] = value.decode("latin-1")
            elif key not in ("CONTENT_LENGTH", "TRANSFER_ENCODING"):
                key = "HTTP_" + key
                text = value.decode("latin-1")
                environ[key] = f"{environ[key]},{text}" if key in environ else text
        return environ

    def prepare(self, environ: dict[str, Any]) -> Prepared:
        """The app's call for ``environ`` as the app prepared it (its ``prepare``, if it has one), which says
        whether it may wait on something slow; a fault in preparing means it may: a thread cannot stall the loop."""
        if self.app_prepare is None:
            return self.plain
        try:
            return self.app_prepare(environ)
        except Exception:
            self.log.exception("the app's prepare failed")
            return Plain(self.app, blocks=True)

    def serve(
        self, environ: dict[str, Any], request: Request, keep: bool, now: float, call: Prepared | None = None
    ) -> Answer:
        """gunicorn's pre_request, the app (``call``, as ``prepare`` made it; else the app as it is), and its whole
        answer; the connection stays open only if ``keep`` (the worker's say) and the request's agree. A fault in
        either is a 500 Status, and the connection closes."""
        started: list[Any] = []
        parts: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
            started[:] = [status, headers]  # nothing is sent before the answer is whole: a late error may replace it
            return parts.append

        result: Iterable[bytes] | None = None
        try:
            self.pre_request(request)
            result = (call or self.plain)(environ, start_response)
            parts.extend(result)
            status, headers = started
            answer = self._answer(status, headers, parts, request, environ, keep and request.keep_alive, now)
        except Exception:
            self.log.exception("Error handling request %s %s", request.method, environ["RAW_URI"])
            answer = Answer(
                refusal(500, "internal error; see the webhook's log"),
                False,
                request,
                environ,
                "500 Internal Server Error",
            )
        answer.close = getattr(result, "close", None)
        return answer

    def finish(self, answer: Answer) -> None:
        """Once the answer has left (or its connection is gone): the app's close(), then gunicorn's post_request."""
        close, answer.close = answer.close, None
        if close is not None:
            try:
                close()
            except Exception:
                self.log.exception("the app's close() failed")
        try:
            self.post_request(answer.request, answer.environ, answer)
        except Exception:
            self.log.exception("Exception in post_request hook")

    def _answer(
        self,
        status: str,
        headers: list[tuple[str, str]],
        parts: list[bytes],
        request: Request,
        environ: dict[str, Any],
        keep: bool,
        now: float,
    ) -> Answer:
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        code = int(status[:3])
        lines = [f"HTTP/1.1 {status}\r\n"]
        length = str(len(body))
        for name, value in headers:
            lowered = name.lower()
            if lowered in _OWN_HEADERS:
                if lowered == "content-length" and request.method == "HEAD":
                    length = value  # the length a GET would have
                continue
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
                raise ValueError(f"the app's header {name!r} is not a valid HTTP header")
            lines.append(f"{name}: {value}\r\n")
        if code >= 200 and code not in _NO_BODY:
            lines.append(f"Content-Length: {length}\r\n")
        if request.method == "HEAD" or code < 200 or code in _NO_BODY:
            body = b""
        lines.append(self._date(now))
        if not keep:
            lines.append("Connection: close\r\n")
        elif request.http_version == "1.0":
            lines.append("Connection: keep-alive\r\n")
        lines.append("\r\n")
        answer = Answer("".join(lines).encode("latin-1") + body, keep, request, environ, status)
        answer.headers, answer.sent = headers, len(body)
        return answer

    def _date(self, now: float) -> str:
        second = int(now)
        if self.date[0] != second:
            self.date = (second, f"Date: {formatdate(second, usegmt=True)}\r\n")
        return self.date[1]


def _host_port(address: Any) -> tuple[str, str]:
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), str(address[1])
    return str(address or ""), ""
