"""HTTP/1.1 requests for app.serving.protocol: the bytes a connection delivers in, whole requests (or a refusal) out.

Each byte is scanned once, as it arrives, by llhttp (Node's parser, through httptools, the binding uvicorn uses):
it frames the request (Content-Length or chunked, de-chunking as it goes) and parses its line and headers in the
same pass, so the worker learns that a request is complete and what it says at once. What llhttp leaves to its
caller is here: the bounds it is given (``Limits``: app.serving.protocol reads them from gunicorn's settings and
holds the body limit) and the transfer codings served (chunked alone).

A request that cannot be served raises ``Refusal`` with the status and the message the client gets: 400 for what
llhttp rejects (its own message), 413 for a body over ``Limits.body`` (as soon as that is known: from the
Content-Length at the end of the headers, or once a chunked body crosses the limit; the body is not read),
414 and 431 for the head's bounds, 501 for a transfer coding not served. The app never sees a refused request,
a Transfer-Encoding or a body of unknown length: every body it gets is whole.

Pure bytes in, decisions out: no sockets, no clock (tests/app/serving/test_framing.py feeds it bytes).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

MAX_FIELD = 8190
"""gunicorn's ceiling for ``limit_request_line`` and ``limit_request_field_size`` (their 0 means this)."""
MAX_FIELDS = 32768
"""gunicorn's ceiling for ``limit_request_fields``."""

# llhttp's reasons the client reads better in gunicorn's words (the rest are clear as they are).
_REASONS = {"Invalid character in chunk size": "Invalid chunk size"}


class Refusal(Exception):
    """A request the worker answers itself with ``status`` and ``message``, then closes the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def too_large(limit: int) -> Refusal:
    return Refusal(413, f"request entity is too large; limit is {limit} bytes")


@dataclass(frozen=True)
class Limits:
    """How large a request may be: the head's bounds (gunicorn's ceilings unless told), ``body`` for the body."""

    body: int
    line: int = MAX_FIELD
    fields: int = 100
    field_size: int = MAX_FIELD

    @property
    def head(self) -> int:
        """The most bytes a request line and its header fields may take."""
        return self.line + self.fields * (self.field_size + 2)


@dataclass(slots=True)
class Request:
    """One whole request: what the WSGI environ is built from. It reads as gunicorn's own request where gunicorn's
    ``pre_request`` and ``post_request`` hooks read theirs: ``method``, ``uri``, ``path``, ``query``,
    ``fragment``, ``version`` (a tuple) and ``headers`` (upper-case names)."""

    method: str
    target: bytes
    http_version: str  # "1.1" or "1.0"
    raw_headers: list[tuple[bytes, bytes]]
    body: bytes
    keep_alive: bool

    @property
    def uri(self) -> str:
        return self.target.decode("latin-1")

    @property
    def path(self) -> str:
        if self.target[:1] == b"/":  # origin-form, the API server's: what gunicorn's default pre_request logs
            return self.target.partition(b"?")[0].partition(b"#")[0].decode("latin-1")
        return urlsplit(self.uri).path

    @property
    def query(self) -> str:
        return urlsplit(self.uri).query

    @property
    def fragment(self) -> str:
        return urlsplit(self.uri).fragment

    @property
    def version(self) -> tuple[int, int]:
        major, minor = self.http_version.split(".")
        return int(major), int(minor)

    @property
    def headers(self) -> list[tuple[str, str]]:
        return [(name.decode("latin-1").upper(), value.decode("latin-1")) for name, value in self.raw_headers]


class RequestReader:
    """One connection's requests, parsed as its bytes arrive; whole ones wait in ``ready``, in order.

    ``started`` is true while part of a request is in (the worker's request timeout runs from then). After a
    ``Refusal`` or an upgrade request (``upgraded``) the connection carries nothing more the reader can parse.
    """

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.parser = httptools.HttpRequestParser(self)
        self.ready: deque[Request] = deque()
        self.started = False
        self.upgraded = False
        self._head = 0  # bytes fed while a request's head is incomplete
        self._begun = 0  # requests begun so far
        self._begin()

    def _begin(self) -> None:
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._size = 0
        self._in_body = False
        self._length = -1
        self._codings = b""

    def feed(self, data: bytes) -> None:
        """Parse ``data``; raises Refusal when the request cannot be served."""
        begun = self._begun
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, Refusal):
                raise exc.__context__ from None
            raise
        except httptools.HttpParserUpgrade:  # the request is in `ready`; what follows it is another protocol
            self.upgraded = True
            if self.ready:
                self.ready[-1].keep_alive = False
        except httptools.HttpParserError as exc:
            reason = str(exc)
            if reason == "Chunk size overflow":  # a size past 2**64: too large however it is counted
                raise too_large(self.limits.body) from None
            raise Refusal(400, _REASONS.get(reason, reason)) from None
        if self.started and not self._in_body and begun == self._begun:  # a head still coming since the last read
            self._head += len(data)  # (a head that began in this read is bounded by the read's size)
            if self._head > self.limits.head:
                raise Refusal(431, f"request line and headers longer than {self.limits.head} bytes")

    # -- llhttp's callbacks -------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.started = True
        self._begun += 1
        self._head = 0
        self._begin()

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self.limits.line:
            raise Refusal(414, f"request target longer than {self.limits.line} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._in_body:
            return  # a chunked body's trailer: nothing the app reads
        if len(self._headers) >= self.limits.fields:
            raise Refusal(431, f"more than {self.limits.fields} header fields")
        if len(name) + len(value) + 2 > self.limits.field_size:
            raise Refusal(431, f"header field {name[:64]!r} longer than {self.limits.field_size} bytes")
        self._headers.append((name, value))
        lowered = name.lower()
        if lowered == b"content-length":
            self._length = int(value)  # llhttp has checked it: digits, and only one
        elif lowered == b"transfer-encoding":
            self._codings += b"," + value if self._codings else value

    def on_headers_complete(self) -> None:
        self._in_body = True
        if self._codings:
            codings = [c.strip().lower() for c in self._codings.split(b",")]
            if codings[-1] != b"chunked":  # the body's length could only be read from the connection's end
                raise Refusal(400, "invalid Transfer-Encoding: a request's must end with chunked")
            if len(codings) > 1:
                served = ", ".join(c.decode("latin-1") for c in codings[:-1])
                raise Refusal(501, f"unsupported transfer coding: {served} (only chunked is served)")
        if self._length > self.limits.body:
            raise too_large(self.limits.body)

    def on_body(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self.limits.body:
            raise too_large(self.limits.body)
        self._body.append(data)

    def on_message_complete(self) -> None:
        parser = self.parser
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self.ready.append(
            Request(
                parser.get_method().decode("latin-1"),
                self._url,
                parser.get_http_version(),
                self._headers,
                body,
                parser.should_keep_alive(),
            )
        )
        self.started = False
        self._begin()
