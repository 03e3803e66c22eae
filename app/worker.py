"""gunicorn gthread worker that reads whole requests in its event loop, so slow clients never hold a thread.

This module is the event loop only; app.framing decides when a buffered request is complete, what
body the app is handed, and which status a refused request gets.

Bound to gunicorn 27 (``GUNICORN_TESTED``, verified with 27.0.0 and 27.0.1; tests/app/test_worker.py
fails on any other version and when a private name below is gone or changes shape). Under 26.x a bad
chunk is an OSError to gthread, closed unanswered. What it compensates for in gunicorn 27's gthread:

- A connection takes a thread from accept (waiting up to 5 s for a first byte), and the thread then
  blocks, with no time limit, on the TLS handshake, the headers and the body: a few stalled clients
  take every thread. Here the event loop does the handshake and buffers the request (non-blocking),
  and a thread gets the connection only when the whole request is in memory; threads only ever run
  the app. Bounds: a handshake must finish within HAMI_WEBHOOK_HANDSHAKE_TIMEOUT of accept, a
  request within HAMI_WEBHOOK_REQUEST_TIMEOUT of its first byte (else 408).
- Every TLS connection builds a new SSLContext from the files; here one context per worker, reloaded
  when the mounted pair changes (app.tls).
- A chunked body streams into the app without a length, so Flask cannot refuse it as too large before
  reading it: here it is de-chunked first (the contract with app/http.py is in app.framing).
- A refused body is left unread and the socket closed, and the kernel's reset can destroy the 413
  before the client reads it: here the worker half-closes and reads and drops the rest.
- Parse errors are answered with an HTML page: here with the app's JSON error (a Kubernetes Status)
  carrying gunicorn's status for the exception and its message.
- The worker that wakes first accepts a whole burst of connections: here accepts are paced (``accept``).
- An answer leaves in two writes, after the app's ``close()``, and the loop beats its heartbeat (a syscall)
  at every turn: here the answer leaves in one write as soon as it is whole, what the app does on
  ``close()`` follows it, and the heartbeat is at most once a second.
- On SIGTERM, gthread stops accepting at once: here /readyz turns unready at once, and for STOP_LINGER
  seconds the worker still accepts and answers requests, each with "Connection: close", then closes
  idle kept-alive connections (half-close, read until the client closes) and the listener, and
  finishes what is in flight.

gunicorn internals it relies on (all checked by tests/app/test_worker.py): ThreadWorker's ``run`` is
replaced, using ``poller``, ``method_queue`` (``fileno``, ``run_callbacks``, ``close``), ``tpool``,
``nr_conns``, ``worker_connections``, ``set_accept_enabled``, ``wait_for_and_dispatch_events``,
``is_parent_alive`` and ``enqueue_req`` (which runs ``handle`` in a thread and brings ``finish_request``
back to the loop through ``method_queue``); ``accept``, ``finish_request``, ``handle_request`` and
``handle_error`` are overridden with gthread's signatures; ``load_wsgi`` is extended (the app wrapped in
``AnswerFirst``, which finds the connection's socket in ``environ["gunicorn.socket"]``); ``handle`` calls
``TConn.init`` and then parses with ``conn.parser``; the parser's unreader has ``unread`` and ``take_buffered``.
"""

from __future__ import annotations

import gc
import http
import logging
import selectors
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gunicorn import glogging
from gunicorn import http as gunicorn_http
from gunicorn.workers import gthread

from app import lifecycle, metrics
from app.framing import MAX_BODY, RequestBuffer, error_body, head_limit, refusal
from app.settings import Settings
from app.tls import ServingCertificate

GUNICORN_TESTED = ((27, 0), (28, 0))
"""The gunicorn versions this worker is tested with: from the first (inclusive) to the second (exclusive)."""
ACCEPT_PAUSE = 0.005  # seconds a worker waits before its next accept, per connection it already holds
ACCEPT_PAUSE_MAX = 0.05
FIRST_REQUEST_WAIT = 1.0  # seconds a connection accepted just before the listener closed has to send its request
STOP_LINGER = 5.0  # seconds a stopping worker still answers (with Connection: close) before closing idle connections
HEARTBEAT = 1.0  # seconds at most between the worker's heartbeats to the arbiter (a file's utime)
DRAIN_BYTES = 2 * MAX_BODY  # what a refused or closed connection may still send us before we stop reading it
tls_log = logging.getLogger("hami_webhook.tls")


def certificate_loaded(not_after: float) -> None:
    """The reloader's ``on_loaded``: log it and set the expiry gauge (alerts fire on it)."""
    metrics.certificate_loaded(not_after)
    tls_log.info("serving certificate loaded notAfter=%s", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(not_after)))


def certificate_rejected(reason: str) -> None:
    """The reloader's ``on_rejected``: the previous pair still serves; log why and count it."""
    metrics.certificate_rejected()
    tls_log.error("serving certificate change refused, still serving the previous one: %s", reason)


def error_response(status: int, message: str) -> bytes:
    """A complete HTTP/1.1 answer carrying the app's error body, closing the connection."""
    body = error_body(status, message)
    reason = http.HTTPStatus(status).phrase
    head = f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body


class Gathered:
    """A connection's socket as gunicorn's answer writer sees it: what it sends is kept until ``flush``.

    (Not TCP_CORK: uncorking transmits inside ``setsockopt``, which holds the GIL; ``sendall`` releases it.)"""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.parts: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.parts.append(bytes(data))

    def flush(self) -> None:
        if self.parts:
            data, self.parts = b"".join(self.parts), []
            self.sock.sendall(data)

    def __getattr__(self, name: str) -> Any:  # anything else (close, shutdown, fileno) is the socket's
        return getattr(self.sock, name)


class AnswerFirst:
    """The app as the worker calls it: its answer leaves as soon as it is whole, before the app's ``close()``.

    What an app defers to ``close()`` (app/http.py: the record of a review, its log line and metrics) then runs
    after the client has its answer, off the latency of every Pod create. An answer cut short is never sent
    from here (``Answer.whole`` stays false): gthread answers the error itself."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Answer:
        return Answer(self.app(environ, start_response), environ["gunicorn.socket"])


class Answer:
    """An app's answer as gunicorn iterates it; ``close()`` sends what was gathered, then closes the app's."""

    def __init__(self, body: Iterable[bytes], sock: Any) -> None:
        self.body = body
        self.sock = sock
        self.whole = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.body
        self.whole = True

    def close(self) -> None:
        try:
            if self.whole and isinstance(self.sock, Gathered):
                self.sock.flush()
        finally:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()


class Logger(glogging.Logger):
    """gunicorn's logger, minus the access line nobody prints: with a ``logconfig_dict`` gunicorn assumes an
    access log and formats each request's atoms (~10 µs), which app.logs' config then drops (no handler)."""

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        if self.access_log.isEnabledFor(logging.INFO):
            super().access(resp, req, environ, request_time)


class Connection(gthread.TConn):
    """A client connection with the bytes read so far and the time by which the current step must finish."""

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any, deadline: float) -> None:
        super().__init__(cfg, sock, client, server)
        self.deadline = deadline
        self.request = RequestBuffer(head_limit(cfg), MAX_BODY)
        self.drained = 0
        self.served = False  # a request has been answered on it

    def init(self) -> None:
        """Called by gthread's handle() in the thread: the socket is already wrapped and the bytes buffered."""
        if self.parser is None:  # type: ignore[has-type]
            self.parser = gunicorn_http.get_parser(self.cfg, self.sock, self.client)
        self.initialized = True
        # The request is in memory; this only bounds a read the scan did not foresee.
        self.sock.settimeout(max(0.05, self.deadline - time.monotonic()))


class WebhookWorker(gthread.ThreadWorker):
    """gthread with the connection handling above; the thread pool and the app call are gthread's own."""

    wsgi: Callable[..., Any]  # set by gunicorn's load_wsgi (untyped)

    def init_process(self) -> None:
        """The worker's state, built after the fork: importing this module reads no setting and no file."""
        self.settings = Settings.from_env()
        self.certificate = ServingCertificate(
            self.cfg.certfile, self.cfg.keyfile, on_loaded=certificate_loaded, on_rejected=certificate_rejected
        )
        self.watched: dict[Connection, Callable[[Connection], None]] = {}
        self.accept_after = 0.0
        self.next_beat = 0.0
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.wsgi = AnswerFirst(self.wsgi)

    def handle_exit(self, sig: int, frame: Any) -> None:
        lifecycle.stopping.set()
        super().handle_exit(sig, frame)

    # -- the event loop ---------------------------------------------------------------------------

    def run(self) -> None:
        # Everything loaded so far (the app, its modules, the device config) lives as long as the worker: out of
        # the collector's way, a full collection scans only what requests made (~0.5 ms instead of ~30 ms).
        gc.freeze()
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
        self._shed_idle()
        deadline = time.monotonic() + self.cfg.graceful_timeout - STOP_LINGER
        while self.nr_conns > 0 and time.monotonic() < deadline and self.is_parent_alive():
            self._tick(accepting=False)
        for conn in list(self.watched):
            self._close(conn)
        self.tpool.shutdown(wait=False)
        self.poller.close()
        self.method_queue.close()

    def _tick(self, accepting: bool) -> None:
        # gthread beats at every turn of its loop, so a few times per request: each a syscall that gives the
        # interpreter lock away to a thread serving a request and then waits to get it back. The arbiter only
        # needs a beat within its timeout (this worker's ``timeout`` is half of it).
        now = time.monotonic()
        if now >= self.next_beat:
            self.notify()
            self.next_beat = now + min(HEARTBEAT, self.timeout / 2)
        pause = self.accept_after - now
        self.set_accept_enabled(accepting and self.nr_conns < self.worker_connections and pause <= 0)
        self.wait_for_and_dispatch_events(timeout=min(1.0, pause) if accepting and pause > 0 else 1.0)
        self.certificate.poll()
        if lifecycle.shedding.is_set():  # unready: the API server's kept-alive connections move to other replicas
            self._shed_idle()
        now = time.monotonic()
        for conn in [c for c in self.watched if c.deadline <= now]:
            if self.watched[conn] == self._read and conn.request.buf:
                self._send_quietly(conn, error_response(408, "request not received in time"))
                self._drain(conn)
            else:
                self._close(conn)

    def _shed_idle(self) -> None:
        """Let go of the connections between requests (on SIGTERM, and while unready): one idle after an answer is
        half-closed, which the client reads as "reconnect" (through the Service, to a ready replica); one just
        connected has FIRST_REQUEST_WAIT to send its first request (answered with Connection: close), then it is
        closed (a client's pool may hold a connection it has not used yet)."""
        for conn, step in list(self.watched.items()):
            if step == self._read and not conn.request.buf:
                if conn.served:
                    self._drain(conn)
                else:
                    conn.deadline = min(conn.deadline, time.monotonic() + FIRST_REQUEST_WAIT)

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
            # Nagle's algorithm would hold a small write back until the client acknowledged the one before (a
            # delayed ACK: up to 40 ms on Linux); answers already leave in one write (handle_request)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = self.certificate.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            deadline = time.monotonic() + self.settings.handshake_timeout
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
        had = len(conn.request.buf)
        try:
            while not conn.request.full():
                data = conn.sock.recv(262144)
                if not data:
                    return self._close(conn)
                conn.request.add(data)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            pass
        except OSError:
            return self._close(conn)
        if not had and conn.request.buf:
            conn.deadline = time.monotonic() + self.settings.request_timeout
        if conn.request.complete():
            self._dispatch(conn)

    def _dispatch(self, conn: Connection) -> None:
        """The request is in memory (or cannot be framed): give it to a thread."""
        self._unwatch(conn)
        conn.init()
        conn.request.hand_over(conn.parser.unreader)
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
        conn.request.take_back(conn.parser.unreader)  # a pipelined next request
        conn.deadline = time.monotonic() + (self.settings.request_timeout if conn.request.buf else self.cfg.keepalive)
        self._watch(conn, self._read)
        # Bytes TLS already decrypted do not make the socket readable: read them now. Otherwise wait for the
        # poller rather than try a read that would find nothing (a syscall and an exception per request).
        if conn.request.buf or (isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending()):
            self._read(conn)

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
        conn.deadline = time.monotonic() + self.settings.request_timeout
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
        """The app gets the body as app.framing hands it over: whole, of known length, or refused unread.

        gunicorn writes the answer's head and body apart: here they are gathered and sent in one write, so
        one TLS record in one TCP segment reaches the API server (two: a wake-up more on each side, and for
        any proxy between). The write happens once the answer is whole (``AnswerFirst``), else here; an answer
        cut short by an error is not sent: gthread answers the error itself."""
        conn.request.for_app(req)
        if lifecycle.shedding.is_set():  # answered with "Connection: close", as while stopping
            req.must_close = True
        gathered = Gathered(conn.sock)
        conn.sock = gathered
        try:
            keep = super().handle_request(req, conn)
        finally:
            conn.sock = gathered.sock
        gathered.flush()
        return bool(keep)

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """gunicorn's status and message for a refused request, as the app's JSON error instead of an HTML page.

        Called by gthread's ``handle`` from its ``except`` clause, so a fault on our side is logged with
        its traceback here."""
        refused = refusal(exc)
        if refused is None:
            self.log.exception("Error handling request %s", getattr(req, "uri", "(no URI read)"))
            refused = 500, "internal error; see the webhook's log"
        else:
            self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
        try:
            client.sendall(error_response(*refused))
        except OSError:
            self.log.debug("could not send the error answer to %s", addr)
