"""gunicorn gthread worker that reads whole requests in its event loop, so slow clients never hold a thread.

Stock gthread hands a connection to a thread once its first byte arrives, and the thread then
blocks, with no time limit, on the TLS handshake, the headers and the body. A few stalled clients
therefore take every thread. Here the event loop does the handshake and buffers the request
(non-blocking), and a thread gets the connection only when the whole request is in memory; threads
only ever run the app. Bounds: a handshake must finish within HAMI_WEBHOOK_HANDSHAKE_TIMEOUT of
accept, a request within HAMI_WEBHOOK_REQUEST_TIMEOUT of its first byte (else 408), a body at most
MAX_BODY (else 413 after which the client's body is read and dropped, so it can read the answer).

The app always sees a body of known length: a chunked body is de-chunked here, which is what lets a
chunked body over the limit get the same 413 as a Content-Length one. Framing errors gunicorn raises
are answered as the JSON error the app uses, with gunicorn's status and message.

On SIGTERM: /readyz turns unready at once; for STOP_LINGER seconds the worker still accepts and
answers requests, each with "Connection: close", then closes idle kept-alive connections (half-close,
read until the client closes) and the listener, and finishes what is in flight.
"""

from __future__ import annotations

import html
import io
import logging
import re
import selectors
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from gunicorn import http as gunicorn_http
from gunicorn.http.body import Body
from gunicorn.workers import gthread

from app import lifecycle, metrics
from app.http import MAX_BODY, error_body
from app.serving import settings
from app.tls import ServingCertificate

ACCEPT_PAUSE = 0.005  # seconds a worker waits before its next accept, per connection it already holds
ACCEPT_PAUSE_MAX = 0.05
FIRST_REQUEST_WAIT = 1.0  # seconds a connection accepted just before the listener closed has to send its request
STOP_LINGER = 5.0  # seconds a stopping worker still answers (with Connection: close) before closing idle connections
DRAIN_BYTES = 2 * MAX_BODY  # what a refused or closed connection may still send us before we stop reading it
MAX_CHUNK_LINE = 8192
tls_log = logging.getLogger("hami_webhook.tls")


def certificate_loaded(not_after: float) -> None:
    """The reloader's ``on_loaded``: log it and set the expiry gauge (alerts fire on it)."""
    metrics.certificate_loaded(not_after)
    tls_log.info("serving certificate loaded notAfter=%s", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(not_after)))


def certificate_rejected(reason: str) -> None:
    """The reloader's ``on_rejected``: the previous pair still serves; log why and count it."""
    metrics.certificate_rejected()
    tls_log.error("serving certificate change refused, still serving the previous one: %s", reason)


def error_response(status: int, reason: str, message: str) -> bytes:
    """A complete HTTP/1.1 answer carrying the app's error body, closing the connection."""
    body = error_body(status, message)
    head = f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body


class RequestScan:
    """Where the request at the start of a buffer ends, worked out incrementally as bytes arrive.

    It only decides when to hand the request over; gunicorn's parser still parses it. Anything it
    does not understand is handed over at once so the parser can name the error.
    """

    def __init__(self, max_head: int) -> None:
        self.max_head = max_head
        self.body_at = -1  # offset of the body, once the headers are complete
        self.length = 0  # Content-Length, or -1 for chunked
        self.next_chunk = 0  # offset of the next chunk-size line
        self.decoded = 0  # chunked body bytes seen so far
        self.too_large: int | None = None  # body size known to be over MAX_BODY

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
                self.too_large = self.length if self.length > MAX_BODY else None
            else:
                self.body_at = 0  # the parser refuses it from the headers alone
        return True

    def _chunks(self, buf: bytearray) -> bool:
        while True:
            eol = buf.find(b"\r\n", self.next_chunk, self.next_chunk + MAX_CHUNK_LINE)
            if eol < 0:
                return len(buf) - self.next_chunk > MAX_CHUNK_LINE
            size = bytes(buf[self.next_chunk : eol]).split(b";", 1)[0].strip()
            if not re.fullmatch(rb"[0-9a-fA-F]{1,15}", size):
                return True
            if int(size, 16) == 0:  # last chunk, then trailers up to an empty line
                return buf.startswith(b"\r\n", eol + 2) or buf.find(b"\r\n\r\n", eol) >= 0
            self.decoded += int(size, 16)
            if self.decoded > MAX_BODY:
                self.too_large = self.decoded
                return True
            end = eol + 2 + int(size, 16) + 2
            if len(buf) < end:
                return False
            self.next_chunk = end


class Connection(gthread.TConn):
    """A client connection with the bytes read so far and the time by which the current step must finish."""

    def __init__(self, cfg: Any, sock: ssl.SSLSocket, client: Any, server: Any, deadline: float) -> None:
        super().__init__(cfg, sock, client, server)
        self.deadline = deadline
        self.buf = bytearray()
        self.scan = RequestScan(
            max_head=cfg.limit_request_line + cfg.limit_request_fields * cfg.limit_request_field_size
        )
        self.too_large: int | None = None
        self.drained = 0
        self.served = False  # a request has been answered on it

    def init(self) -> None:
        """Called by gthread's handle() in the thread: the socket is already wrapped and the bytes buffered."""
        if self.parser is None:  # type: ignore[has-type]
            self.parser = gunicorn_http.get_parser(self.cfg, self.sock, self.client)
        self.initialized = True
        # The request is in memory; this only bounds a read the scan did not foresee.
        self.sock.settimeout(max(0.05, self.deadline - time.monotonic()))


class _Captured:
    """Stands in for the client socket while gunicorn writes its HTML error page, to learn status and message."""

    def __init__(self) -> None:
        self.data = b""

    def gettimeout(self) -> float:
        return 0.0

    def sendall(self, data: bytes) -> None:
        self.data += data

    def answer(self) -> tuple[int, str, str]:
        text = self.data.decode("latin-1")
        status, reason = text.split("\r\n", 1)[0].split(" ", 2)[1:]
        found = re.search(r"</h1>\s*(.*?)\s*</body>", text, re.DOTALL)
        message = html.unescape(found.group(1)) if found else ""
        return int(status), reason, message or "internal error; see the webhook's log"


class WebhookWorker(gthread.ThreadWorker):
    """gthread with the connection handling above; the thread pool and the app call are gthread's own."""

    def init_process(self) -> None:
        self.certificate = ServingCertificate(
            self.cfg.certfile, self.cfg.keyfile, on_loaded=certificate_loaded, on_rejected=certificate_rejected
        )
        self.watched: dict[Connection, Callable[[Connection], None]] = {}
        self.accept_after = 0.0
        super().init_process()

    def handle_exit(self, sig: int, frame: Any) -> None:
        lifecycle.stopping.set()
        super().handle_exit(sig, frame)

    # -- the event loop ---------------------------------------------------------------------------

    def run(self) -> None:
        self.poller.register(self.method_queue.fileno(), selectors.EVENT_READ, self.method_queue.run_callbacks)
        self.set_accept_enabled(True)
        self.log.info("worker ready: app loaded, accepting connections")
        while self.alive and self.is_parent_alive():
            self._tick(accepting=True)
        linger = time.monotonic() + STOP_LINGER
        while time.monotonic() < linger and self.is_parent_alive():
            self._tick(accepting=True)
        self.set_accept_enabled(False)
        for listener in self.sockets:
            self._accept_all(listener)  # already connected clients are served, not reset
            listener.close()
        for conn, step in list(self.watched.items()):
            if step == self._read and not conn.buf:
                if conn.served:  # idle between requests: the client reads our half-close as "reconnect"
                    self._drain(conn)
                else:  # just connected: its first request is on the way, answer it (Connection: close)
                    conn.deadline = min(conn.deadline, time.monotonic() + FIRST_REQUEST_WAIT)
        deadline = time.monotonic() + self.cfg.graceful_timeout - STOP_LINGER
        while self.nr_conns > 0 and time.monotonic() < deadline and self.is_parent_alive():
            self._tick(accepting=False)
        for conn in list(self.watched):
            self._close(conn)
        self.tpool.shutdown(wait=False)
        self.poller.close()
        self.method_queue.close()

    def _tick(self, accepting: bool) -> None:
        self.notify()
        pause = self.accept_after - time.monotonic()
        self.set_accept_enabled(accepting and self.nr_conns < self.worker_connections and pause <= 0)
        self.wait_for_and_dispatch_events(timeout=min(1.0, pause) if accepting and pause > 0 else 1.0)
        self.certificate.poll()
        now = time.monotonic()
        for conn in [c for c in self.watched if c.deadline <= now]:
            if self.watched[conn] == self._read and conn.buf:
                self._send_quietly(conn, error_response(408, "Request Timeout", "request not received in time"))
                self._drain(conn)
            else:
                self._close(conn)

    def _watch(self, conn: Connection, step: Callable[[Connection], None], events: int = selectors.EVENT_READ) -> None:
        if conn in self.watched:
            self.poller.modify(conn.sock, events, lambda _: step(conn))
        else:
            self.poller.register(conn.sock, events, lambda _: step(conn))
        self.watched[conn] = step

    def _unwatch(self, conn: Connection) -> None:
        if self.watched.pop(conn, None) is not None:
            self.poller.unregister(conn.sock)

    def _close(self, conn: Connection) -> None:
        self._unwatch(conn)
        self.nr_conns -= 1
        conn.sock.close()

    def _send_quietly(self, conn: Connection, data: bytes) -> None:
        try:
            conn.sock.send(data)  # small: fits the socket buffer; if not, the client is gone anyway
        except OSError:
            pass

    def accept(self, listener: Any) -> None:
        """One connection, then a pause that grows with the connections held: the listener is shared, and
        without it the worker that wakes first takes a whole burst (kube-apiserver opens its connections
        together and keeps them), leaving one worker hot and the other idle. The pause lets the less
        loaded workers take the next ones; a lone worker only delays a new connection by the pause."""
        self._accept_all(listener, limit=1)
        self.accept_after = time.monotonic() + min(ACCEPT_PAUSE * self.nr_conns, ACCEPT_PAUSE_MAX)

    def _accept_all(self, listener: Any, limit: int = 1 << 30) -> None:
        for _ in range(limit):
            try:
                sock, client = listener.accept()
            except OSError:  # EAGAIN: nothing waiting; ECONNABORTED: gone before we got to it
                return
            self.nr_conns += 1
            sock.setblocking(False)
            tls = self.certificate.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            deadline = time.monotonic() + settings.handshake_timeout
            conn = Connection(self.cfg, tls, client, listener.getsockname(), deadline)
            self._watch(conn, self._handshake)

    def _handshake(self, conn: Connection) -> None:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            return self._watch(conn, self._handshake)
        except ssl.SSLWantWriteError:
            return self._watch(conn, self._handshake, selectors.EVENT_WRITE)
        except OSError as exc:  # SSLError included: not TLS, no shared version or cipher, reset
            self.log.debug("TLS handshake with %s failed: %s", conn.client, exc)
            return self._close(conn)
        conn.deadline = time.monotonic() + self.cfg.keepalive  # idle until the first request byte
        self._watch(conn, self._read)
        self._read(conn)  # a TLS 1.3 client may have sent its request with the handshake

    def _read(self, conn: Connection) -> None:
        had = len(conn.buf)
        try:
            while len(conn.buf) <= conn.scan.max_head + MAX_BODY + 65536:
                data = conn.sock.recv(262144)
                if not data:
                    return self._close(conn)
                conn.buf += data
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            pass
        except OSError:
            return self._close(conn)
        if not had and conn.buf:
            conn.deadline = time.monotonic() + settings.request_timeout
        if conn.buf and conn.scan.ready(conn.buf):
            self._dispatch(conn)

    def _dispatch(self, conn: Connection) -> None:
        """The request is in memory (or cannot be framed): give it to a thread."""
        self._unwatch(conn)
        conn.init()
        conn.parser.unreader.unread(bytes(conn.buf))
        conn.too_large = conn.scan.too_large
        conn.buf = bytearray()
        conn.scan = RequestScan(conn.scan.max_head)
        self.enqueue_req(conn)

    def finish_request(self, conn: Connection, fs: Any) -> None:
        """Back on the loop after a thread served the request: wait for the next one, or close."""
        try:
            keep = bool(fs.result())
        except BaseException:  # cancelled at shutdown, or the thread failed: the connection is done
            keep = False
        if not keep:
            return self._drain(conn)
        conn.served = True
        conn.sock.setblocking(False)
        conn.buf = bytearray(conn.parser.unreader.take_buffered())  # a pipelined next request
        conn.deadline = time.monotonic() + (settings.request_timeout if conn.buf else self.cfg.keepalive)
        self._watch(conn, self._read)
        self._read(conn)  # bytes TLS already decrypted do not make the socket readable

    def _drain(self, conn: Connection) -> None:
        """Half-close after the last answer, then read what the client still sends until it closes.

        Closing with unread bytes would make the kernel send a reset, which can destroy the answer
        before the client reads it (a refused 8 MiB body, a pipelined request).
        """
        try:
            conn.sock.setblocking(False)
            conn.sock.shutdown(socket.SHUT_WR)  # SSLSocket drops TLS here: what follows is read raw
        except OSError:
            return self._close(conn)
        conn.deadline = time.monotonic() + settings.request_timeout
        conn.drained = 0
        self._watch(conn, self._discard)

    def _discard(self, conn: Connection) -> None:
        try:
            while conn.drained <= DRAIN_BYTES:
                data = conn.sock.recv(262144)
                if not data:
                    break
                conn.drained += len(data)
        except BlockingIOError:
            return
        except OSError:
            pass
        self._close(conn)

    # -- in a thread --------------------------------------------------------------------------------

    def handle_request(self, req: Any, conn: Connection) -> bool:
        """Give the app the body as bytes of known length (de-chunked); a body over the limit is not read."""
        if conn.too_large is not None:
            body, length = b"", conn.too_large
            req.must_close = True  # the rest of the body is still coming: answer, then drain and close
        else:
            body = req.body.read()
            length = len(body)
        req.body = Body(io.BytesIO(body))
        req.headers = [(n, v) for n, v in req.headers if n not in ("CONTENT-LENGTH", "TRANSFER-ENCODING")]
        req.headers.append(("CONTENT-LENGTH", str(length)))
        return bool(super().handle_request(req, conn))

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """gunicorn's status and message for the error, as the app's JSON error instead of an HTML page."""
        page = _Captured()
        super().handle_error(req, page, addr, exc)
        if page.data:
            try:
                client.sendall(error_response(*page.answer()))
            except OSError:
                self.log.debug("could not send the error answer to %s", addr)
