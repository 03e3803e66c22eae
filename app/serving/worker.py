"""The gunicorn worker: one event loop per process that does TLS, reads whole requests and answers them.

Built on gunicorn's documented extension point for workers, ``gunicorn.workers.base.Worker`` (its
``worker_class`` setting): gunicorn forks the process, loads the app (``load_wsgi``), installs the signal
handlers and calls ``run``; this module is the rest. What it uses of ``base.Worker`` is listed, and checked
against the installed gunicorn, in tests/app/serving/test_worker.py; nothing of gthread's.

- **Slow clients never hold a thread.** The loop accepts, does the TLS handshake and reads each request
  without blocking (app.serving.framing parses it as its bytes arrive); the app runs only once the whole request is
  in memory. Bounds: a handshake must finish within HAMI_WEBHOOK_HANDSHAKE_TIMEOUT of accept, a request
  within HAMI_WEBHOOK_REQUEST_TIMEOUT of its first byte (else 408), an idle kept-alive connection is closed
  after gunicorn's ``keepalive``.
- **The app runs on the loop, unless it may block.** An app may say which requests could wait on something
  slow (``may_block(environ)``: for the webhook, a review in a namespace with a device quota, whose ledger
  is a Lease on the API server); those run in a pool of gunicorn's ``threads`` threads, the loop going on
  meanwhile. Every other request is answered on the loop itself: a thread would only add its wake-up and
  the hand-over of the interpreter lock between two threads on two cores (docs/performance.md measures it).
- **One TLS context per worker**, reloaded when the mounted pair changes (app.serving.tls).
- **Refusals are the app's JSON Status**: a request app.serving.framing refuses (400, 413, 414, 431, 501), a
  stalled one (408) and a fault in the app (500) get a Kubernetes Status and ``Connection: close``; the
  worker then half-closes and reads and drops what the client still sends, so the kernel's reset cannot
  destroy the answer before the client reads it (an 8 MiB body refused unread).
- **The answer leaves first**: in one write, as soon as it is whole; what the app defers to ``close()``
  (app/serving/http.py: the review's log line and metrics) runs after it.
- **Accepts are paced** (``accept``), and the heartbeat to the arbiter is at most once a second.
- **On SIGTERM**, /readyz turns unready at once (app.lifecycle), and for STOP_LINGER seconds the worker
  still accepts and answers requests, each with "Connection: close"; then it closes idle kept-alive
  connections (half-close, read until the client closes) and the listener, and finishes what is in flight.
- **While unready** because the quota cannot reach the API server (``app.lifecycle.shedding``), it answers with
  "Connection: close" and lets go of idle kept-alive connections the same way, so the API server's pool moves
  to ready replicas; it keeps accepting.
"""

from __future__ import annotations

import gc
import http
import io
import logging
import os
import selectors
import socket
import ssl
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote_to_bytes

import httptools
from gunicorn.workers import base

from app import lifecycle, metrics
from app.serving.framing import Limits, Refusal, Request, RequestReader, error_body
from app.serving.tls import ServingCertificate
from app.settings import Settings

ACCEPT_PAUSE = 0.005  # seconds a worker waits before its next accept, per connection it already holds
ACCEPT_PAUSE_MAX = 0.05
FIRST_REQUEST_WAIT = 1.0  # seconds a connection accepted just before the listener closed has to send its request
STOP_LINGER = 5.0  # seconds a stopping worker still answers (with Connection: close) before closing idle connections
HEARTBEAT = 1.0  # seconds at most between the worker's heartbeats to the arbiter (a file's utime)
DRAIN_BYTES = 16 * 1024 * 1024  # what a refused or closed connection may still send us before we stop reading it
READ_SIZE = 262144
# Headers the worker writes itself (framing, connection), whatever the app says.
_OWN_HEADERS = frozenset(("content-length", "connection", "keep-alive", "transfer-encoding", "date", "upgrade"))
_NO_BODY = frozenset((204, 304))
tls_log = logging.getLogger("hami_webhook.tls")
log = logging.getLogger("hami_webhook.worker")

MayBlock = Callable[[dict[str, Any]], bool]
Closer = Callable[[], None]


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


class Answer:
    """What a request's app call produced: the bytes to send, what to run once they have left, and whether
    the connection stays open for the next request."""

    __slots__ = ("data", "environ", "keep", "request", "then")

    def __init__(self, data: bytes, keep: bool, request: Request, environ: dict[str, Any]) -> None:
        self.data, self.keep, self.request, self.environ = data, keep, request, environ
        self.then: Closer | None = None


class Connection:
    """A client connection: its socket, the requests parsed from it, and the time by which its current step
    (handshake, request, write, drain) must finish."""

    __slots__ = (
        "client",
        "deadline",
        "drained",
        "events",
        "keep",
        "out",
        "reader",
        "served",
        "server",
        "sock",
        "then",
    )

    def __init__(self, sock: Any, client: Any, server: Any, deadline: float, limits: Limits) -> None:
        self.sock = sock
        self.client = client
        self.server = server
        self.deadline = deadline
        self.reader = RequestReader(limits)
        self.served = False  # a request has been answered on it
        self.drained = 0
        self.out: memoryview | None = None  # an answer still being written
        self.then: Closer | None = None  # the app's close(), once the answer has left
        self.keep = False
        self.events = 0  # what the poller watches it for


class WebhookWorker(base.Worker):
    """gunicorn's base worker with the loop above; see the module's docstring."""

    wsgi: Callable[..., Any]  # set by base.Worker.load_wsgi
    alive: bool  # base.Worker's (gunicorn ships no type hints)

    def init_process(self) -> None:
        """The worker's state, built after the fork: importing this module reads no setting and no file."""
        self.certificate = ServingCertificate(
            self.cfg.certfile, self.cfg.keyfile, on_loaded=certificate_loaded, on_rejected=certificate_rejected
        )
        self.prepare(Settings.from_env())
        super().init_process()  # base.Worker: its pipe, the signals, load_wsgi, then run()

    def prepare(self, settings: Settings) -> None:
        """The loop's own state (the certificate apart): what ``run`` needs besides base.Worker's."""
        self.settings = settings
        self.limits = Limits.of(self.cfg)
        self.poller = selectors.DefaultSelector()
        self.pool = ThreadPoolExecutor(max_workers=max(1, self.cfg.threads), thread_name_prefix="request")
        self.finished: deque[tuple[Connection, Future[Answer]]] = deque()  # from the pool, for the loop
        self.watched: dict[Connection, Callable[[Connection], None]] = {}
        self.connections = 0  # open, watched or not
        self.listening = False
        self.unready = False  # app.lifecycle.shedding, as the loop last saw it
        self.closing = False  # past STOP_LINGER: idle connections are let go too
        self.accept_after = 0.0
        self.next_beat = 0.0
        self.date = (0, "")
        self.environ = self._base_environ()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.may_block: MayBlock | None = getattr(self.wsgi, "may_block", None)

    def handle_exit(self, sig: int, frame: Any) -> None:
        lifecycle.stopping.set()
        super().handle_exit(sig, frame)

    def _base_environ(self) -> dict[str, Any]:
        return {
            "SCRIPT_NAME": "",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "https",
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": self.cfg.workers > 1,
            "wsgi.run_once": False,
            "wsgi.input_terminated": True,
        }

    # -- the event loop ---------------------------------------------------------------------------

    def run(self) -> None:
        # Everything loaded so far (the app, its modules, the device config) lives as long as the worker: out of
        # the collector's way, a full collection scans only what requests made (~0.5 ms instead of ~30 ms).
        gc.freeze()
        # base.Worker's pipe: signals write to it (set_wakeup_fd), and so does the pool when a request is served.
        self.poller.register(self.PIPE[0], selectors.EVENT_READ, self._woken)
        for listener in self.sockets:
            listener.setblocking(False)
        self.log.info("worker ready: app loaded, accepting connections")
        while self.alive and self._parent_alive():
            self._tick(accepting=True)
        linger = time.monotonic() + STOP_LINGER
        while time.monotonic() < linger and self._parent_alive():
            self._tick(accepting=True)
        self._close_listeners()
        deadline = time.monotonic() + self.cfg.graceful_timeout - STOP_LINGER
        while self.connections > 0 and time.monotonic() < deadline and self._parent_alive():
            self._tick(accepting=False)
        for conn in list(self.watched):
            self._close(conn)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.poller.close()

    def _close_listeners(self) -> None:
        """Stop accepting: what the kernel has already queued is accepted and served (closing a listener resets the
        connections still in its queue), then the listeners close; from now on idle connections are let go."""
        self._listen(False)
        for listener in self.sockets:
            self._accept_all(listener)
            listener.close()
        self.closing = True
        self._shed_idle()

    def _parent_alive(self) -> bool:
        if self.ppid == os.getppid():
            return True
        self.log.info("Parent changed, shutting down: %s", self)
        return False

    def _tick(self, accepting: bool) -> None:
        # A beat is a syscall: the arbiter only needs one within its timeout (this worker's ``timeout`` is half of it).
        now = time.monotonic()
        if now >= self.next_beat:
            self.notify()
            self.next_beat = now + min(HEARTBEAT, self.timeout / 2)
        pause = self.accept_after - now
        self._listen(accepting and self.connections < self.cfg.worker_connections and pause <= 0)
        self.wait(min(1.0, pause) if accepting and pause > 0 else 1.0)
        self.certificate.poll()
        self._follow_shedding()
        now = time.monotonic()
        for conn in [c for c in self.watched if c.deadline <= now]:
            if self.watched[conn] == self._read and conn.reader.started:
                self._refuse(conn, Refusal(408, "request not received in time"))
            else:
                self._close(conn)

    def _follow_shedding(self) -> None:
        """Unready (app.lifecycle.shedding): the API server's kept-alive connections move to other replicas. The
        idle ones are let go once, as it starts; from then on each connection as it goes idle (`_idle`)."""
        unready = lifecycle.shedding.is_set()
        if unready != self.unready:
            self.unready = unready
            if unready:
                self._shed_idle()

    def _shed_idle(self) -> None:
        for conn in list(self.watched):
            self._idle(conn)

    def _idle(self, conn: Connection) -> None:
        """Let go of a connection between requests while unready or past STOP_LINGER: one idle after an answer is
        half-closed, which the client reads as "reconnect" (through the Service, to a ready replica); one just
        connected has FIRST_REQUEST_WAIT to send its first request (answered with Connection: close), then it is
        closed (a client's pool may hold a connection it has not used yet). Called as a connection starts waiting
        for a request, and on every one when letting go starts (`_shed_idle`)."""
        if not (self.unready or self.closing) or self.watched.get(conn) != self._read or conn.reader.started:
            return
        if conn.served:
            self._drain(conn)
        else:
            conn.deadline = min(conn.deadline, time.monotonic() + FIRST_REQUEST_WAIT)

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the sockets and the pipe, and take each step that became possible."""
        for key, _ in self.poller.select(timeout):
            key.data(key.fileobj)

    def _listen(self, enabled: bool) -> None:
        if enabled != self.listening:
            for listener in self.sockets:
                if enabled:
                    self.poller.register(listener, selectors.EVENT_READ, self.accept)
                else:
                    self.poller.unregister(listener)
            self.listening = enabled

    def _watch(self, conn: Connection, step: Callable[[Connection], None], events: int = selectors.EVENT_READ) -> None:
        if conn not in self.watched:
            self.poller.register(conn.sock, events, lambda _: step(conn))
        elif self.watched[conn] != step or conn.events != events:  # else as it is: no syscall
            self.poller.modify(conn.sock, events, lambda _: step(conn))
        self.watched[conn] = step
        conn.events = events

    def _unwatch(self, conn: Connection) -> None:
        if self.watched.pop(conn, None) is not None:
            self.poller.unregister(conn.sock)

    def _close(self, conn: Connection) -> None:
        self._unwatch(conn)
        self._then(conn)
        self.connections -= 1
        conn.sock.close()

    def accept(self, listener: Any) -> None:
        """One connection, then a pause that grows with the connections held: the listener is shared, and
        without it the worker that wakes first takes a whole burst (kube-apiserver opens its connections
        together and keeps them), leaving one worker hot and the other idle. The pause lets the less
        loaded workers take the next ones; a lone worker only delays a new connection by the pause."""
        self._accept_all(listener, limit=1)
        self.accept_after = time.monotonic() + min(ACCEPT_PAUSE * self.connections, ACCEPT_PAUSE_MAX)

    def _accept_all(self, listener: Any, limit: int = 1 << 30) -> None:
        for _ in range(limit):
            try:
                sock, client = listener.accept()
            except OSError:  # EAGAIN: nothing waiting; ECONNABORTED: gone before we got to it
                return
            self.connections += 1
            sock.setblocking(False)
            # Nagle's algorithm would hold a small write back until the client acknowledged the one before (a
            # delayed ACK: up to 40 ms on Linux); answers already leave in one write.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = self.certificate.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            deadline = time.monotonic() + self.settings.handshake_timeout
            conn = Connection(tls, client, listener.getsockname(), deadline, self.limits)
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
        self._idle(conn)

    def _read(self, conn: Connection) -> None:
        reader = conn.reader
        had = reader.started
        try:
            while not reader.ready and not reader.upgraded:
                data = conn.sock.recv(READ_SIZE)
                if not data:
                    return self._close(conn)
                reader.feed(data)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            pass
        except Refusal as refused:
            return self._refuse(conn, refused)
        except OSError:
            return self._close(conn)
        if reader.ready:
            self._serve(conn)
        elif reader.started and not had:
            conn.deadline = time.monotonic() + self.settings.request_timeout

    def _refuse(self, conn: Connection, refused: Refusal) -> None:
        if refused.status != 408:
            self.log.warning("Invalid request from ip=%s: %s", (conn.client or ("",))[0], refused.message)
        try:
            conn.sock.send(error_response(refused.status, refused.message))  # small: fits the socket buffer
        except OSError:
            pass  # gone, or not reading: the drain below closes it
        self._drain(conn)

    # -- serving ------------------------------------------------------------------------------------

    def _serve(self, conn: Connection) -> None:
        """Answer the requests parsed from ``conn`` in order, on the loop or (one that may block) in the pool."""
        while conn.reader.ready:
            request = conn.reader.ready.popleft()
            environ = self._environ(conn, request)
            if self._may_block(environ):
                self._unwatch(conn)
                future = self.pool.submit(self._call, environ, request)
                future.add_done_callback(lambda done: self._hand_back(conn, done))
                return
            if not self._send(conn, self._call(environ, request)):
                return
        self._await_request(conn)

    def _may_block(self, environ: dict[str, Any]) -> bool:
        if self.may_block is None:
            return False
        try:
            return self.may_block(environ)
        except Exception:  # a fault in the app's answer: the thread it then gets cannot stall the loop
            self.log.exception("the app's may_block failed")
            return True

    def _hand_back(self, conn: Connection, done: Future[Answer]) -> None:
        """In the pool's thread: queue the answer for the loop and wake it."""
        self.finished.append((conn, done))
        try:
            os.write(self.PIPE[1], b".")
        except BlockingIOError:  # full: the loop is already due to wake
            pass

    def _woken(self, fd: Any) -> None:
        try:
            while os.read(self.PIPE[0], 4096):
                pass
        except BlockingIOError:
            pass
        while self.finished:
            conn, done = self.finished.popleft()
            try:
                answer = done.result()
            except BaseException:  # cancelled at shutdown
                self._close(conn)
                continue
            if self._send(conn, answer):
                self._serve(conn)

    def _send(self, conn: Connection, answer: Answer) -> bool:
        """Write the answer (what does not fit waits for the socket); True when it left and the connection
        goes on to its next request. gunicorn's ``post_request`` hook sees the request and its answer."""
        conn.out, conn.then, conn.keep = memoryview(answer.data), answer.then, answer.keep
        self.cfg.post_request(self, answer.request, answer.environ, answer)
        self.nr += 1
        if self.nr >= self.max_requests and self.alive:
            self.log.info("Autorestarting worker after current request.")
            self.alive = False
        return self._write(conn)

    def _write(self, conn: Connection) -> bool:
        out = conn.out
        try:
            while out:
                out = out[conn.sock.send(out) :]
                conn.out = out
        except (ssl.SSLWantWriteError, BlockingIOError):
            conn.deadline = time.monotonic() + self.settings.request_timeout
            self._watch(conn, self._written, selectors.EVENT_WRITE)
            return False
        except ssl.SSLWantReadError:
            self._watch(conn, self._written)
            return False
        except OSError:
            self._close(conn)
            return False
        conn.out = None
        self._then(conn)
        conn.served = True
        if not conn.keep:
            self._drain(conn)
            return False
        return True

    def _written(self, conn: Connection) -> None:
        if self._write(conn):
            self._serve(conn)

    def _then(self, conn: Connection) -> None:
        """The app's close(), after its answer has left (or the connection is gone)."""
        then, conn.then = conn.then, None
        if then is not None:
            try:
                then()
            except Exception:
                self.log.exception("the app's close() failed")

    def _await_request(self, conn: Connection) -> None:
        started = conn.reader.started
        conn.deadline = time.monotonic() + (self.settings.request_timeout if started else self.cfg.keepalive)
        self._watch(conn, self._read)
        # Bytes TLS already decrypted do not make the socket readable: read them now. Otherwise wait for the
        # poller rather than try a read that would find nothing (a syscall and an exception per request).
        if isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending():
            self._read(conn)
        elif not started:
            self._idle(conn)

    def _drain(self, conn: Connection) -> None:
        """Half-close after the last answer, then read what the client still sends until it closes.

        Closing with unread bytes would make the kernel send a reset, which can destroy the answer
        before the client reads it (a refused 8 MiB body, a pipelined request).
        """
        try:
            conn.sock.shutdown(socket.SHUT_WR)  # SSLSocket drops TLS here: what follows is read raw
        except OSError:
            return self._close(conn)
        conn.deadline = time.monotonic() + self.settings.request_timeout
        conn.drained = 0
        self._watch(conn, self._discard)

    def _discard(self, conn: Connection) -> None:
        try:
            while conn.drained <= DRAIN_BYTES:
                data = conn.sock.recv(READ_SIZE)
                if not data:
                    break
                conn.drained += len(data)
        except BlockingIOError:
            return
        except OSError:
            pass
        self._close(conn)

    # -- the app call (on the loop, or in the pool) ---------------------------------------------------

    def _environ(self, conn: Connection, request: Request) -> dict[str, Any]:
        """PEP 3333's environ for ``request``: the body whole, its exact length, no Transfer-Encoding."""
        target = request.target
        if target[:1] == b"/":
            path, _, query = target.partition(b"?")
        else:  # absolute-form (a proxy's), or "*"
            url = httptools.parse_url(target) if target != b"*" else None
            path, query = (url.path or b"/", url.query or b"") if url else (b"*", b"")
        environ = self.environ.copy()
        environ["REQUEST_METHOD"] = request.method
        environ["PATH_INFO"] = (unquote_to_bytes(path) if b"%" in path else path).decode("latin-1")
        environ["QUERY_STRING"] = query.decode("latin-1")
        environ["RAW_URI"] = target.decode("latin-1")
        environ["SERVER_PROTOCOL"] = "HTTP/" + request.version
        environ["SERVER_NAME"], environ["SERVER_PORT"] = _host_port(conn.server)
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = _host_port(conn.client)
        environ["CONTENT_LENGTH"] = str(len(request.body))
        environ["wsgi.input"] = io.BytesIO(request.body)
        for raw, value in request.headers:
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

    def _call(self, environ: dict[str, Any], request: Request) -> Answer:
        """Run the app and build its whole answer; a fault in it is a 500 Status (and the connection closes)."""
        started: list[Any] = []
        parts: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
            started[:] = [status, headers]  # nothing is sent before the answer is whole: a late error may replace it
            return parts.append

        result: Iterable[bytes] | None = None
        try:
            result = self.wsgi(environ, start_response)
            parts.extend(result)
            status, headers = started
            answer = self._answer(status, headers, parts, request, environ)
            answer.then = getattr(result, "close", None)
            return answer
        except Exception:
            self.log.exception("Error handling request %s %s", request.method, environ["RAW_URI"])
            then = getattr(result, "close", None)
            if then is not None:
                try:
                    then()
                except Exception:
                    self.log.exception("the app's close() failed")
            return Answer(error_response(500, "internal error; see the webhook's log"), False, request, environ)

    def _answer(
        self, status: str, headers: list[tuple[str, str]], parts: list[bytes], request: Request, environ: dict[str, Any]
    ) -> Answer:
        keep = request.keep_alive and self.alive and not lifecycle.shedding.is_set() and self.cfg.keepalive > 0
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
        lines.append(self._date())
        if not keep:
            lines.append("Connection: close\r\n")
        elif request.version == "1.0":
            lines.append("Connection: keep-alive\r\n")
        lines.append("\r\n")
        return Answer("".join(lines).encode("latin-1") + body, keep, request, environ)

    def _date(self) -> str:
        now = int(time.time())
        if self.date[0] != now:
            self.date = (now, f"Date: {formatdate(now, usegmt=True)}\r\n")
        return self.date[1]


def _host_port(address: Any) -> tuple[str, str]:
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), str(address[1])
    return str(address or ""), ""
