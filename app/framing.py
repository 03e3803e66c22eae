"""HTTP/1.1 framing for app.worker: where a buffered request ends, and the body the app is handed.

The worker reads a connection without a thread into a ``RequestBuffer`` until ``RequestScan`` says
the request at its start is complete (or cannot be framed: then at once, so gunicorn's parser names
the error). Only then does gunicorn's parser, in a thread, parse it from memory; ``for_app`` gives
the app its body and ``refusal`` turns what gunicorn raised into a status and a message.

The contract with app/http.py, which reads the body through Flask with ``MAX_CONTENT_LENGTH`` set to
``MAX_BODY`` (the worker passes that same number here as ``max_body``):

- the app never sees ``Transfer-Encoding``: every body arrives whole, de-chunked, with a
  ``Content-Length`` that is its exact size;
- a body over ``max_body`` is not read. The app gets an empty body with a ``Content-Length`` over the
  limit (the one the client sent; for a chunked body, the bytes decoded when it crossed the limit),
  so Flask refuses it with 413 from that header alone, before reading, and app/http.py answers its
  AdmissionReview-shaped 413. The request is marked to close: the rest of the body is still on its
  way, and the worker reads and drops it after the answer so the client can read the 413.

Pure bytes in, decisions out: no sockets, no clock (tests/app/test_framing.py feeds it bytes).
"""

from __future__ import annotations

import io
import re
import ssl
from typing import Any

import orjson
from gunicorn.http import errors
from gunicorn.http.body import Body

MAX_BODY = 7 * 1024 * 1024
"""The body limit, in app.worker's framing (``max_body``) and app/http.py (Flask's MAX_CONTENT_LENGTH).

Under gunicorn the body arrives whole with an exact Content-Length, never chunked; one over this limit
arrives empty and unread with a Content-Length over it, so ``get_data`` raises RequestEntityTooLarge
from the header alone (``_too_large``). Reading the body without that check would see it as empty.
"""

MAX_CHUNK_LINE = 8192
"""Longest chunk-size line (with extensions) waited for; a longer one goes to the parser to be refused."""
READ_AHEAD = 65536
"""How far past the largest acceptable request the worker may read before it stops and hands over."""

_HEX_SIZE = re.compile(rb"[0-9a-fA-F]+")

# gunicorn 27's status for each request its parser refuses (gunicorn.workers.base.Worker.handle_error),
# most specific first; the message is the exception's own. tests/app/test_worker.py checks every class
# in gunicorn.http.errors against gunicorn's handle_error, so a gunicorn that changes one fails there.
_REFUSALS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], int], ...] = (
    (errors.LimitRequestLine, 414),
    (errors.LimitRequestHeaders, 431),
    (errors.UnsupportedTransferCoding, 501),
    (errors.ExpectationFailed, 417),
    (errors.ForbiddenProxyRequest, 403),
    (ssl.SSLError, 403),
    (errors.ConfigurationProblem, 500),
    (
        (
            errors.InvalidRequestLine,
            errors.InvalidRequestMethod,
            errors.InvalidHTTPVersion,
            errors.InvalidHeader,
            errors.InvalidHeaderName,
            errors.InvalidProxyLine,
            errors.InvalidSchemeHeaders,
            errors.ObsoleteFolding,
            errors.InvalidH2CPreface,
            errors.InvalidChunkSize,
            errors.ChunkMissingTerminator,
            errors.InvalidChunkExtension,
        ),
        400,
    ),
)


def head_limit(cfg: Any) -> int:
    """The most bytes gunicorn's limits let a request line and its header fields take."""
    return int(cfg.limit_request_line + cfg.limit_request_fields * cfg.limit_request_field_size)


def refusal(exc: BaseException) -> tuple[int, str] | None:
    """The status and message for a request gunicorn refused; None when ``exc`` is a fault on our side (a 500)."""
    if isinstance(exc, (errors.InvalidResponseHeader, errors.InvalidResponseHeaderName)):
        return None  # a header the app tried to send: not the request's fault
    for kinds, status in _REFUSALS:
        if isinstance(exc, kinds):
            return status, str(exc)
    return None


class RequestScan:
    """Where the request at the start of a buffer ends, worked out incrementally as bytes arrive.

    It only decides when to hand the request over; gunicorn's parser still parses it. Anything it
    does not understand is handed over at once so the parser can name the error.
    """

    def __init__(self, max_head: int, max_body: int) -> None:
        self.max_head = max_head
        self.max_body = max_body
        self.body_at = -1  # offset of the body, once the headers are complete
        self.length = 0  # Content-Length, or -1 for chunked
        self.next_chunk = 0  # offset of the next chunk-size line
        self.decoded = 0  # chunked body bytes seen so far
        self.too_large: int | None = None  # body size known to be over max_body

    def ready(self, buf: bytearray) -> bool:
        if self.body_at < 0 and not self._head(buf):
            return len(buf) > self.max_head
        if self.length >= 0:
            return self.too_large is not None or len(buf) >= self.body_at + self.length
        return self._chunks(buf)

    def _head(self, buf: bytearray) -> bool:
        end = buf.find(b"\r\n\r\n", 0, self.max_head + 4)
        if end < 0:
            return False
        self.body_at = self.next_chunk = end + 4
        fields = [line.split(b":", 1) for line in bytes(buf[:end]).split(b"\r\n")[1:]]
        values: dict[bytes, list[bytes]] = {name.strip().lower(): [] for name, *_ in fields}
        for name, *value in fields:
            values[name.strip().lower()].append(value[0].strip().lower() if value else b"")
        lengths, codings = values.get(b"content-length", []), values.get(b"transfer-encoding", [])
        if codings:
            # chunked alone is what we frame; anything else goes to the parser now, to be refused
            self.length = -1 if codings == [b"chunked"] and not lengths else 0
            self.body_at = 0 if self.length == 0 else self.body_at
        elif lengths:
            if len(lengths) == 1 and lengths[0].isdigit():
                self.length = int(lengths[0])
                self.too_large = self.length if self.length > self.max_body else None
            else:
                self.body_at = 0  # the parser refuses it from the headers alone
        return True

    def _chunks(self, buf: bytearray) -> bool:
        while True:
            eol = buf.find(b"\r\n", self.next_chunk, self.next_chunk + MAX_CHUNK_LINE)
            if eol < 0:
                return len(buf) - self.next_chunk > MAX_CHUNK_LINE
            size = bytes(buf[self.next_chunk : eol]).split(b";", 1)[0].strip()
            if not _HEX_SIZE.fullmatch(size):
                return True
            length = int(size, 16)
            if length == 0:  # last chunk, then trailers up to an empty line
                return buf.startswith(b"\r\n", eol + 2) or buf.find(b"\r\n\r\n", eol) >= 0
            if self.decoded + length > self.max_body:  # known from the size line: the data is not waited for
                self.too_large = self.decoded + length
                return True
            end = eol + 2 + length + 2
            if len(buf) < end:
                return False
            self.decoded += length  # counted once the chunk is whole: a chunk spanning reads is seen many times
            self.next_chunk = end


class RequestBuffer:
    """One connection's bytes from the socket to gunicorn's parser, a whole request at a time."""

    def __init__(self, max_head: int, max_body: int) -> None:
        self.max_head, self.max_body = max_head, max_body
        self.buf = bytearray()
        self.scan = RequestScan(max_head, max_body)
        self.too_large: int | None = None  # of the request handed over last

    def add(self, data: bytes) -> None:
        self.buf += data

    def full(self) -> bool:
        """Enough is buffered to decide: reading further would only hold more of a request to be refused."""
        return len(self.buf) > self.max_head + self.max_body + READ_AHEAD

    def complete(self) -> bool:
        """The request at the start is all in (or cannot be framed): time to hand it over."""
        return bool(self.buf) and self.scan.ready(self.buf)

    def hand_over(self, unreader: Any) -> None:
        """Give the buffered bytes to gunicorn's parser (its unreader) and start afresh for the next request."""
        unreader.unread(bytes(self.buf))
        self.too_large = self.scan.too_large
        self.buf = bytearray()
        self.scan = RequestScan(self.max_head, self.max_body)

    def take_back(self, unreader: Any) -> None:
        """After the answer: what the parser read past the request (a pipelined next one) is ours again."""
        self.buf = bytearray(unreader.take_buffered())

    def for_app(self, req: Any) -> None:
        """Give the app the body as bytes of known length (de-chunked); a body over the limit is not read."""
        if self.too_large is not None:
            body, length = b"", self.too_large
            req.must_close = True  # the rest of the body is still coming: answer, then drain and close
        else:
            body = req.body.read()
            length = len(body)
        req.body = Body(io.BytesIO(body))
        req.headers = [(n, v) for n, v in req.headers if n not in ("CONTENT-LENGTH", "TRANSFER-ENCODING")]
        req.headers.append(("CONTENT-LENGTH", str(length)))


def error_body(status: int, message: str) -> bytes:
    """Every error answer's body, the app's and the worker's: a Kubernetes Status (kube-apiserver shows a
    webhook's non-2xx message only in that shape), with the same text in ``error``."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
    return orjson.dumps({**body, "code": status, "error": message})
