"""The gunicorn worker: one event loop per process that moves bytes, keeps deadlines and holds connections.

Built on gunicorn's documented extension point for workers, ``gunicorn.workers.base.Worker`` (its
``worker_class`` setting): gunicorn forks the process, loads the app (``load_wsgi``), installs the signal
handlers and calls ``run``; this module and app.serving.connections (one connection's steps) are the rest. What
it uses of ``base.Worker`` is listed, and checked against the installed gunicorn, in
tests/app/serving/test_worker.py; nothing of gthread's.

What a request may be, what the app is handed and the bytes of its answer are app.serving.protocol's (sans-IO,
tested on its own); the loop only moves bytes between it and the sockets, on time.

- **Slow clients never hold a thread.** The loop accepts, does the TLS handshake and reads each request
  without blocking (the protocol's reader parses it as its bytes arrive); the app runs only once the whole request
  is in memory. Bounds: a handshake must finish within HAMI_WEBHOOK_HANDSHAKE_TIMEOUT of accept, a request
  within HAMI_WEBHOOK_REQUEST_TIMEOUT of its first byte (else 408), an idle kept-alive connection is closed
  after gunicorn's ``keepalive``.
- **The app runs on the loop, unless it may block.** An app may prepare each request once
  (``prepare(environ)``: a call that says whether it ``blocks``, i.e. could wait on something slow; for the
  webhook, a review in a namespace with a device quota, whose ledger is a Lease on the API server); those run in
  a pool of gunicorn's ``threads`` threads, the loop going on
  meanwhile. Every other request is answered on the loop itself: a thread would only add its wake-up and
  the hand-over of the interpreter lock between two threads on two cores (docs/performance.md measures it).
- **One TLS context per worker**, reloaded when the mounted pair changes (app.serving.tls).
- **Refusals are the app's JSON Status**: a request the protocol refuses (400, 413, 414, 431, 501), a
  stalled one (408) and a fault in the app (500) get a Kubernetes Status and ``Connection: close``; the
  worker then half-closes and reads and drops what the client still sends, so the kernel's reset cannot
  destroy the answer before the client reads it (an 8 MiB body refused unread).
- **The answer leaves first**: in one write, as soon as it is whole; what the app defers to ``close()``
  (app/serving/http.py: the review's log line and metrics) and gunicorn's ``post_request`` run after it.
- **gunicorn's settings it cannot honour are refused at start** (app.serving.honoured), not ignored.
- **Accepts are paced** (``accept``), and the heartbeat to the arbiter is at most once a second.
- **On SIGTERM**, /readyz turns unready at once (the app's readiness, app/readiness.py), and for STOP_LINGER
  seconds the worker still accepts and answers requests, each with "Connection: close"; then it closes idle kept-alive
  connections (half-close, read until the client closes) and the listener, and finishes what is in flight.
- **While unready** because the quota cannot reach the API server (the readiness's ``shedding``), it answers with
  "Connection: close" and lets go of idle kept-alive connections the same way, so the API server's pool moves
  to ready replicas; it keeps accepting.
"""

from __future__ import annotations

import gc
import logging
import os
import selectors
import socket
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from gunicorn.config import Config
from gunicorn.workers import base

from app import metrics
from app.readiness import Readiness
from app.serving import honoured
from app.serving.connections import Connection, Connections, drain
from app.serving.protocol import Protocol, limits
from app.serving.tls import ServingCertificate
from app.settings import Settings

ACCEPT_PAUSE = 0.005  # seconds a worker waits before its next accept, per connection it already holds
ACCEPT_PAUSE_MAX = 0.05
STOP_LINGER = 5.0  # seconds a stopping worker still answers (with Connection: close) before closing idle connections
HEARTBEAT = 1.0  # seconds at most between the worker's heartbeats to the arbiter (a file's utime)
tls_log = logging.getLogger("hami_webhook.tls")
log = logging.getLogger("hami_webhook.worker")


def certificate_loaded(not_after: float) -> None:
    """The reloader's ``on_loaded``: log it and set the expiry gauge (alerts fire on it)."""
    metrics.certificate_loaded(not_after)
    tls_log.info("serving certificate loaded notAfter=%s", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(not_after)))


def certificate_rejected(reason: str) -> None:
    """The reloader's ``on_rejected``: the previous pair still serves; log why and count it."""
    metrics.certificate_rejected()
    tls_log.error("serving certificate change refused, still serving the previous one: %s", reason)


class WebhookWorker(base.Worker):
    """gunicorn's base worker with the loop above; see the module's docstring. Its connections are an object it
    owns (app.serving.connections), to which it is the ``Owner``."""

    wsgi: Callable[..., Any]  # set by base.Worker.load_wsgi
    alive: bool  # base.Worker's (gunicorn ships no type hints)
    protocol: Protocol  # made by load_wsgi, around the app

    @classmethod
    def check_config(cls, cfg: Any, log: Any) -> None:
        """Asked by gunicorn's arbiter before it forks: refuse a setting this worker would only ignore."""
        refused = honoured.unhonoured(cfg, Config())
        if refused:
            raise RuntimeError(honoured.refusal(refused))

    def init_process(self) -> None:
        """The worker's state, built after the fork: importing this module reads no setting and no file."""
        self.certificate = ServingCertificate(
            self.cfg.certfile, self.cfg.keyfile, on_loaded=certificate_loaded, on_rejected=certificate_rejected
        )
        self.readiness = Readiness()  # a signal may come while the app loads (handle_exit sets it)
        super().init_process()  # base.Worker: its pipe, the signals, load_wsgi, then run()

    def prepare(self, settings: Settings) -> None:
        """The loop's own state (the certificate apart): what ``run`` needs besides base.Worker's, with the
        settings of this process (its deadlines)."""
        self.settings = settings
        self.poller = selectors.DefaultSelector()
        self.connections = Connections(self.poller, settings, self.cfg.keepalive, self.cfg.threads, self, self.log)
        self.listening = False
        self.readiness = Readiness()  # the app's, once loaded (load_wsgi); a foreign app's stays this one
        self.unready = False  # the readiness's shedding, as the loop last saw it
        self.closing = False  # past STOP_LINGER: idle connections are let go too
        self.accept_after = 0.0
        self.next_beat = 0.0

    def load_wsgi(self) -> None:
        """The app, then the loop's state with the settings the app was made with: read once in this process, by
        ``create_app``, and handed down. Only a foreign app (the benchmark's floor) makes the worker read them."""
        super().load_wsgi()
        settings = getattr(self.wsgi, "settings", None)
        self.prepare(settings if isinstance(settings, Settings) else Settings.from_env())
        self.serve_with(self.wsgi)

    def serve_with(self, app: Callable[..., Any]) -> None:
        """The protocol around ``app``, with gunicorn's request hooks called with this worker, as gunicorn does;
        the app's readiness (the webhook's carries one) is the one this worker sets and follows."""
        self.readiness = getattr(app, "readiness", None) or self.readiness
        self.protocol = self.connections.protocol = Protocol(
            app,
            limits(self.cfg),
            multiprocess=self.cfg.workers > 1,
            pre_request=partial(self.cfg.pre_request, self),
            post_request=partial(self.cfg.post_request, self),
            log=self.log,
        )

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.readiness.stopping.set()
        super().handle_exit(sig, frame)

    def run(self) -> None:
        # Everything loaded so far (the app, its modules, the device config) lives as long as the worker: out of
        # the collector's way, a full collection scans only what requests made (~0.5 ms instead of ~30 ms).
        gc.freeze()
        # base.Worker's pipe: signals write to it (set_wakeup_fd), which wakes the loop to act on them at once.
        self.poller.register(self.PIPE[0], selectors.EVENT_READ, self._signalled)
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
        while self.connections.open > 0 and time.monotonic() < deadline and self._parent_alive():
            self._tick(accepting=False)
        self.connections.close()
        self.poller.close()

    def _signalled(self, fd: Any) -> None:
        drain(self.PIPE[0])

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
        self._listen(accepting and self.connections.open < self.cfg.worker_connections and pause <= 0)
        self.connections.wait(min(1.0, pause) if accepting and pause > 0 else 1.0)
        self.certificate.poll()
        self._follow_shedding()
        self.connections.expire(time.monotonic())

    def _follow_shedding(self) -> None:
        """Unready (the readiness's shedding): the API server's kept-alive connections move to other replicas. The
        idle ones are let go once, as it starts; from then on each connection as it goes idle (`idle`)."""
        unready = self.readiness.shedding.is_set()
        if unready != self.unready:
            self.unready = unready
            if unready:
                self._shed_idle()

    def _shed_idle(self) -> None:
        for conn in list(self.connections.watched):
            self.idle(conn)

    def idle(self, conn: Connection) -> None:
        """The ``Owner``'s: let go of a connection between requests while unready or past STOP_LINGER (the client
        reconnects through the Service, to a ready replica). Called as a connection starts waiting for a request,
        and on every one when letting go starts (`_shed_idle`)."""
        if self.unready or self.closing:
            self.connections.let_go(conn)

    def keep(self) -> bool:
        """The ``Owner``'s: an answer keeps its connection only while this worker is alive, ready (the readiness's
        ``shedding``) and keeps connections at all (gunicorn's ``keepalive``)."""
        return self.alive and not self.readiness.shedding.is_set() and self.cfg.keepalive > 0

    def _listen(self, enabled: bool) -> None:
        if enabled != self.listening:
            for listener in self.sockets:
                if enabled:
                    self.poller.register(listener, selectors.EVENT_READ, self.accept)
                else:
                    self.poller.unregister(listener)
            self.listening = enabled

    def accept(self, listener: Any) -> None:
        """One connection, then a pause that grows with the connections held: the listener is shared, and
        without it the worker that wakes first takes a whole burst (kube-apiserver opens its connections
        together and keeps them), leaving one worker hot and the other idle. The pause lets the less
        loaded workers take the next ones; a lone worker only delays a new connection by the pause."""
        self._accept_all(listener, limit=1)
        self.accept_after = time.monotonic() + min(ACCEPT_PAUSE * self.connections.open, ACCEPT_PAUSE_MAX)

    def _accept_all(self, listener: Any, limit: int = 1 << 30) -> None:
        for _ in range(limit):
            try:
                sock, client = listener.accept()
            except OSError:  # EAGAIN: nothing waiting; ECONNABORTED: gone before we got to it
                return
            sock.setblocking(False)
            # Nagle's algorithm would hold a small write back until the client acknowledged the one before (a
            # delayed ACK: up to 40 ms on Linux); answers already leave in one write.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = self.certificate.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            deadline = time.monotonic() + self.settings.handshake_timeout
            self.connections.add(tls, client, listener.getsockname(), deadline)

    def answered(self) -> None:
        """The ``Owner``'s: base.Worker's request count; past ``max_requests`` (and its jitter) the worker ends, as
        gunicorn's do."""
        self.nr += 1
        if self.nr >= self.max_requests and self.alive:
            self.log.info("Autorestarting worker after current request.")
            self.alive = False
