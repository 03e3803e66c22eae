"""One worker's connections on app.serving.worker's loop: the TLS handshake, reading requests, handing them to
app.serving.protocol (on the loop, or in the pool when the app's prepared call may block), writing each answer,
and, after the last one, the drain. Each step runs when the poller says its socket is ready and never blocks;
each has a deadline the worker's clock enforces (HAMI_WEBHOOK_HANDSHAKE_TIMEOUT, HAMI_WEBHOOK_REQUEST_TIMEOUT,
gunicorn's ``keepalive``).

An object the worker owns, apart from app.serving.worker, which holds gunicorn's side (the process, its signals,
accepting, shutting down and shedding), so that each reads top to bottom. What it asks of the worker is named
(``Owner``: whether an answer may keep its connection, a connection gone idle, an answer counted) and what it
needs is handed to it: the protocol, the poller, the deadlines; the pool of threads and the pipe that wakes the
loop when one finishes are its own.
"""

from __future__ import annotations

import os
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any
from typing import Protocol as Interface

from app.serving.protocol import Answer, Prepared, Protocol, Refusal, refusal

FIRST_REQUEST_WAIT = 1.0  # seconds a connection let go of before its first request has to send it
DRAIN_BYTES = 16 * 1024 * 1024  # what a refused or closed connection may still send us before we stop reading it
READ_SIZE = 262144


class Connection:
    """A client connection: its socket, the requests parsed from it, and the time by which its current step
    (handshake, request, write, drain) must finish."""

    __slots__ = (
        "answer",
        "client",
        "deadline",
        "drained",
        "events",
        "out",
        "reader",
        "served",
        "server",
        "sock",
    )

    def __init__(self, sock: Any, client: Any, server: Any, deadline: float, protocol: Protocol) -> None:
        self.sock = sock
        self.client = client
        self.server = server
        self.deadline = deadline
        self.reader = protocol.reader()
        self.served = False  # a request has been answered on it
        self.drained = 0
        self.out: memoryview | None = None  # an answer still being written
        self.answer: Answer | None = None  # the answer being written: finished once it has left
        self.events = 0  # what the poller watches it for


class Deadlines(Interface):
    """The settings a connection's deadlines come from (app/settings.py's Settings is one)."""

    @property
    def request_timeout(self) -> int: ...
    @property
    def handshake_timeout(self) -> int: ...


class Owner(Interface):
    """What the connections ask of the worker that owns them (app.serving.worker's WebhookWorker is one)."""

    def keep(self) -> bool:
        """Whether an answer may leave its connection open: the worker is alive, ready and keeps connections."""
        ...

    def idle(self, conn: Connection) -> None:
        """``conn`` starts waiting for a request: the worker may let it go (``Connections.let_go``)."""
        ...

    def answered(self) -> None:
        """An answer is about to leave: the worker counts it (gunicorn's ``max_requests``)."""
        ...


def drain(fd: int) -> None:
    """Read a non-blocking wake-up pipe empty: its bytes only say "look", however many were written."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


class Connections:
    """A worker's connections and the steps each takes on the worker's poller; the worker adds when to accept
    and when to let go. ``protocol`` is the app's, set by the worker once the app is loaded."""

    protocol: Protocol

    def __init__(
        self,
        poller: selectors.BaseSelector,
        deadlines: Deadlines,
        keepalive: float,
        threads: int,
        owner: Owner,
        log: Any,
    ) -> None:
        self.poller, self.deadlines, self.keepalive, self.owner, self.log = poller, deadlines, keepalive, owner, log
        self.pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="request")
        self.finished: deque[tuple[Connection, Future[Answer]]] = deque()  # from the pool, for the loop
        self.watched: dict[Connection, Callable[[Connection], None]] = {}
        self.open = 0  # watched or not
        self.wake = os.pipe()  # a pool thread writes a byte once an answer is made: the loop wakes and sends it
        self.wake_lock = threading.Lock()  # a thread finishing after close() must not write to a closed (reused) fd
        self.closed = False
        for fd in self.wake:
            os.set_blocking(fd, False)
        self.poller.register(self.wake[0], selectors.EVENT_READ, self._woken)

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the sockets and the pipes, and take each step that became possible."""
        for key, _ in self.poller.select(timeout):
            key.data(key.fileobj)

    def add(self, sock: Any, client: Any, server: Any, deadline: float) -> None:
        """A connection just accepted (``sock``: TLS, its handshake not done), to finish its handshake by
        ``deadline``."""
        self.open += 1
        self._watch(Connection(sock, client, server, deadline, self.protocol), self._handshake)

    def expire(self, now: float) -> None:
        """Each connection whose step is past its deadline at ``now``: a request begun gets a 408, the rest close."""
        for conn in [c for c in self.watched if c.deadline <= now]:
            if self.watched[conn] == self._read and conn.reader.started:
                self._refuse(conn, Refusal(408, "request not received in time"))
            else:
                self._close(conn)

    def let_go(self, conn: Connection) -> None:
        """Let go of ``conn`` if it is between requests: one idle after an answer is half-closed, which the client
        reads as "reconnect"; one just connected has FIRST_REQUEST_WAIT to send its first request (answered with
        Connection: close), then it is closed (a client's pool may hold a connection it has not used yet)."""
        if self.watched.get(conn) != self._read or conn.reader.started:
            return
        if conn.served:
            self._drain(conn)
        else:
            conn.deadline = min(conn.deadline, time.monotonic() + FIRST_REQUEST_WAIT)

    def close(self) -> None:
        """Close every connection, cancel what the pool has not started, and close the pipe."""
        for conn in list(self.watched):
            self._close(conn)
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self.wake_lock:  # threads still running (blocked on the quota, say) finish without waking anyone
            self.closed = True
            self.poller.unregister(self.wake[0])
            for fd in self.wake:
                os.close(fd)

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
        self.open -= 1
        conn.sock.close()

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
        conn.deadline = time.monotonic() + self.keepalive  # idle until the first request byte
        self._watch(conn, self._read)
        self._read(conn)  # a TLS 1.3 client may have sent its request with the handshake
        self.owner.idle(conn)

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
            conn.deadline = time.monotonic() + self.deadlines.request_timeout

    def _refuse(self, conn: Connection, refused: Refusal) -> None:
        if refused.status != 408:
            self.log.warning("Invalid request from ip=%s: %s", (conn.client or ("",))[0], refused.message)
        try:
            conn.sock.send(refusal(refused.status, refused.message))  # small: fits the socket buffer
        except OSError:
            pass  # gone, or not reading: the drain below closes it
        self._drain(conn)

    def _serve(self, conn: Connection) -> None:
        """Answer the requests parsed from ``conn`` in order, on the loop or (one that may block) in the pool."""
        protocol = self.protocol
        while conn.reader.ready:
            request = conn.reader.ready.popleft()
            environ = protocol.environ(request, conn.server, conn.client)
            call = protocol.prepare(environ)
            if call.blocks:
                self._unwatch(conn)
                future = self.pool.submit(self._call, call, environ, request)
                future.add_done_callback(lambda done: self._hand_back(conn, done))
                return
            if not self._send(conn, self._call(call, environ, request)):
                return
        self._await_request(conn)

    def _call(self, call: Prepared, environ: dict[str, Any], request: Any) -> Answer:
        """The protocol's answer (on the loop, or in the pool); the connection is kept only while the worker says
        so (``Owner.keep``)."""
        return self.protocol.serve(environ, request, self.owner.keep(), time.time(), call)

    def _hand_back(self, conn: Connection, done: Future[Answer]) -> None:
        """In the pool's thread: queue the answer for the loop and wake it."""
        self.finished.append((conn, done))
        with self.wake_lock:
            if self.closed:  # the worker has gone: nobody to answer
                return
            try:
                os.write(self.wake[1], b".")
            except BlockingIOError:  # full: the loop is already due to wake
                pass

    def _woken(self, fd: Any) -> None:
        drain(self.wake[0])
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
        goes on to its next request."""
        conn.out, conn.answer = memoryview(answer.data), answer
        self.owner.answered()
        return self._write(conn)

    def _write(self, conn: Connection) -> bool:
        out = conn.out
        try:
            while out:
                out = out[conn.sock.send(out) :]
                conn.out = out
        except (ssl.SSLWantWriteError, BlockingIOError):
            conn.deadline = time.monotonic() + self.deadlines.request_timeout
            self._watch(conn, self._written, selectors.EVENT_WRITE)
            return False
        except ssl.SSLWantReadError:
            self._watch(conn, self._written)
            return False
        except OSError:
            self._close(conn)
            return False
        conn.out = None
        keep = conn.answer is not None and conn.answer.keep
        self._then(conn)
        conn.served = True
        if not keep:
            self._drain(conn)
            return False
        return True

    def _written(self, conn: Connection) -> None:
        if self._write(conn):
            self._serve(conn)

    def _then(self, conn: Connection) -> None:
        """The protocol's finish (the app's close(), post_request) once the answer has left, or its connection is
        gone."""
        answer, conn.answer = conn.answer, None
        if answer is not None:
            self.protocol.finish(answer)

    def _await_request(self, conn: Connection) -> None:
        started = conn.reader.started
        conn.deadline = time.monotonic() + (self.deadlines.request_timeout if started else self.keepalive)
        self._watch(conn, self._read)
        # Bytes TLS already decrypted do not make the socket readable: read them now. Otherwise wait for the
        # poller rather than try a read that would find nothing (a syscall and an exception per request).
        if isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending():
            self._read(conn)
        elif not started:
            self.owner.idle(conn)

    def _drain(self, conn: Connection) -> None:
        """Half-close after the last answer, then read what the client still sends until it closes.

        Closing with unread bytes would make the kernel send a reset, which can destroy the answer
        before the client reads it (a refused 8 MiB body, a pipelined request).
        """
        try:
            conn.sock.shutdown(socket.SHUT_WR)  # SSLSocket drops TLS here: what follows is read raw
        except OSError:
            return self._close(conn)
        conn.deadline = time.monotonic() + self.deadlines.request_timeout
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
