"""app.worker's bond to gunicorn: the version range it declares, the private names it relies on, its loop in process.

A gunicorn upgrade that moves one of those internals fails here, by name, rather than in production.
The loop tests drive the worker's own event loop over a socketpair, with the app from create_app, no
gunicorn process and no TLS: what tests/app/test_transport.py proves over TLS, here without a server.
"""

from __future__ import annotations

import inspect
import json
import os
import select
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import gunicorn
import pytest
from gunicorn import http as gunicorn_http
from gunicorn.config import Config
from gunicorn.glogging import Logger
from gunicorn.http.errors import ParseException
from gunicorn.workers import base, gthread
from werkzeug.wsgi import ClosingIterator

from app import create_app
from app.framing import MAX_BODY, refusal
from app.settings import Settings
from app.worker import GUNICORN_TESTED, AnswerFirst, Connection, WebhookWorker
from tests.app.reviews import admission_review
from tests.support.pods import container, pod

REVIEW = json.dumps(admission_review(pod(container(limits={"nvidia.com/gpu": "1"})), uid="u1")).encode()
HEAD = b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"

# gthread.ThreadWorker methods the worker calls or overrides, with the parameters it passes or receives.
METHODS = {
    "run": [],
    "init_process": [],
    "load_wsgi": [],
    "handle_exit": ["sig", "frame"],
    "set_accept_enabled": ["enabled"],
    "wait_for_and_dispatch_events": ["timeout"],
    "is_parent_alive": [],
    "notify": [],
    "accept": ["listener"],
    "enqueue_req": ["conn"],
    "handle": ["conn"],
    "finish_request": ["conn", "fs"],
    "handle_request": ["req", "conn"],
    "handle_error": ["req", "client", "addr", "exc"],
}


def test_installed_gunicorn_is_in_the_range_the_worker_declares() -> None:
    low, high = GUNICORN_TESTED
    assert low <= gunicorn.version_info[:2] < high, (
        f"gunicorn {gunicorn.__version__} is outside the range app.worker is tested with ({low} to {high}): "
        "run tests/app with it, then update GUNICORN_TESTED and the worker's docstring"
    )


@pytest.mark.parametrize("name", METHODS)
def test_gthread_still_has_the_methods_the_worker_relies_on(name: str) -> None:
    method = getattr(gthread.ThreadWorker, name, None)
    assert callable(method), f"gthread.ThreadWorker.{name} is gone"
    assert list(inspect.signature(method).parameters)[1:] == METHODS[name]


def test_gthread_still_has_the_state_and_helpers_the_worker_relies_on(worker: WebhookWorker) -> None:
    for name in ("poller", "tpool", "method_queue", "nr_conns", "worker_connections", "alive", "sockets"):
        assert hasattr(worker, name), f"gthread.ThreadWorker has no {name}"
    for name in ("fileno", "run_callbacks", "close", "defer"):
        assert callable(getattr(worker.method_queue, name, None)), f"gthread's method_queue has no {name}"
    assert list(inspect.signature(gthread.TConn).parameters) == ["cfg", "sock", "client", "server"]
    parser = gunicorn_http.get_parser(worker.cfg, [], None)
    assert callable(parser.unreader.unread) and callable(parser.unreader.take_buffered)


def test_enqueue_req_runs_handle_in_a_thread_and_finish_request_on_the_loop() -> None:
    """The hand-off the worker's loop is built on: gthread's enqueue_req and method_queue, not our code."""

    finished: list[tuple[object, int, int]] = []

    class Probe(gthread.ThreadWorker):
        def handle(self, conn: object) -> int:
            return threading.get_ident()

        def finish_request(self, conn: object, fs: Future[int]) -> None:
            finished.append((conn, fs.result(), threading.get_ident()))

    probe = Probe(0, os.getpid(), [], None, 30, Config(), None)
    probe.tpool, probe.poller = probe.get_thread_pool(), selectors.DefaultSelector()
    probe.method_queue.init()
    probe.poller.register(probe.method_queue.fileno(), selectors.EVENT_READ, probe.method_queue.run_callbacks)
    try:
        conn = object()
        probe.enqueue_req(conn)
        deadline = time.monotonic() + 10
        while not finished and time.monotonic() < deadline:
            probe.wait_for_and_dispatch_events(timeout=0.1)
        [(finished_conn, handled_in, finished_in)] = finished
        assert finished_conn is conn
        assert handled_in != threading.get_ident() and finished_in == threading.get_ident()
    finally:
        probe.tpool.shutdown()
        probe.poller.close()
        probe.method_queue.close()
        probe.tmp.close()


def gunicorn_status(exc: BaseException) -> int:
    """The status gunicorn's own handle_error would answer ``exc`` with: read off its HTML page's status line."""

    class Page:
        data = b""

        def gettimeout(self) -> float:
            return 0.0

        def sendall(self, data: bytes) -> None:
            self.data += data

    page = Page()
    stock = base.Worker(0, os.getpid(), [], None, 30, Config(), Logger(Config()))
    try:
        stock.handle_error(None, page, ("127.0.0.1", 1), exc)
    finally:
        stock.tmp.close()
    return int(page.data.split(b" ", 2)[1])


@pytest.mark.parametrize(
    "kind", [k for k in vars(gunicorn_http.errors).values() if isinstance(k, type) and issubclass(k, ParseException)]
)
def test_refused_requests_get_gunicorns_status(kind: type[ParseException]) -> None:
    """app.framing's statuses are gunicorn's, for every exception its HTTP parser defines."""
    exc = BaseException.__new__(kind)  # the message does not matter to the status, and constructors differ
    exc.__dict__.update(hdr="X", req=None, msg="m", size=1, max_size=0, info="i", reason="r", data=b"", line="l")
    exc.__dict__.update(method="M", version="V", expect="E", host="h", term=b"", buf=b"")
    expected = gunicorn_status(exc)
    found = refusal(exc)
    assert (found[0] if found else 500) == expected


# -- the worker's loop in process ---------------------------------------------------------------------


@pytest.fixture
def worker(settings: Settings) -> Iterator[WebhookWorker]:
    """A WebhookWorker as init_process leaves it, less the certificate and the listener: no TLS, no gunicorn."""
    cfg = Config()
    worker = WebhookWorker(0, os.getpid(), [], None, 30, cfg, Logger(cfg))
    worker.wsgi = AnswerFirst(create_app(settings))  # as load_wsgi leaves it
    worker.settings = settings
    worker.watched = {}
    worker.tpool, worker.poller = worker.get_thread_pool(), selectors.DefaultSelector()
    worker.method_queue.init()
    worker.poller.register(worker.method_queue.fileno(), selectors.EVENT_READ, worker.method_queue.run_callbacks)
    yield worker
    for conn in list(worker.watched):  # kept alive, or draining after Connection: close
        worker._close(conn)
    worker.tpool.shutdown()
    worker.poller.close()
    worker.method_queue.close()
    worker.tmp.close()


def answers(worker: WebhookWorker, data: bytes, count: int = 1) -> list[tuple[int, dict[str, str], dict]]:
    """Send ``data`` on a new connection to the worker's loop; the first ``count`` answers, parsed."""
    ours, theirs = socket.socketpair()
    with theirs:
        conn = Connection(worker.cfg, ours, ("127.0.0.1", 40000), ("127.0.0.1", 8443), time.monotonic() + 10)
        worker.nr_conns += 1
        worker._watch(conn, worker._read)
        theirs.sendall(data)
        theirs.setblocking(False)
        received, found = b"", list[tuple[int, dict[str, str], dict]]()
        deadline = time.monotonic() + 20
        while len(found) < count:
            assert time.monotonic() < deadline, f"no complete answer; received {received[:300]!r}"
            worker.wait_for_and_dispatch_events(timeout=0.05)
            try:
                received += theirs.recv(1 << 20)
            except BlockingIOError:
                pass
            while b"\r\n\r\n" in received:
                head, rest = received.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
                length = int(headers["content-length"])
                if len(rest) < length:
                    break
                found.append((int(lines[0].split()[1]), headers, json.loads(rest[:length])))
                received = rest[length:]
        while conn not in worker.watched:  # the thread's end reaches the loop: kept alive, or draining
            assert time.monotonic() < deadline, "the connection never came back to the loop"
            worker.wait_for_and_dispatch_events(timeout=0.05)
        return found


def test_a_review_is_answered(worker: WebhookWorker) -> None:
    [(status, headers, body)] = answers(worker, HEAD + b"Content-Length: %d\r\n\r\n" % len(REVIEW) + REVIEW)
    assert (status, body["response"]["uid"]) == (200, "u1")
    assert headers.get("connection", "keep-alive").lower() != "close"


def test_pipelined_reviews_chunked_or_not_are_all_answered(worker: WebhookWorker) -> None:
    sized = HEAD + b"Content-Length: %d\r\n\r\n" % len(REVIEW) + REVIEW
    chunked = HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(REVIEW), REVIEW)
    replies = answers(worker, sized + chunked + sized, count=3)
    assert [(status, body["response"]["uid"]) for status, _, body in replies] == [(200, "u1")] * 3


def test_a_body_over_the_limit_gets_the_apps_413_before_it_is_sent(worker: WebhookWorker) -> None:
    """The contract with app/http.py: the announced length alone makes Flask answer 413, unread."""
    [(status, headers, body)] = answers(worker, HEAD + b"Content-Length: %d\r\n\r\n{" % (MAX_BODY + 1))
    assert (status, headers["connection"].lower()) == (413, "close")
    assert (body["kind"], body["code"]) == ("Status", 413)  # the app's answer to a body it cannot read a uid from


def test_a_refused_request_gets_a_json_status(worker: WebhookWorker) -> None:
    bad = HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
    [(status, headers, body)] = answers(worker, bad)
    assert (status, headers["content-type"], headers["connection"].lower()) == (400, "application/json", "close")
    assert (body["kind"], body["code"]) == ("Status", 400) and "Invalid chunk size" in body["message"]


def test_the_answer_leaves_before_the_apps_close_runs(worker: WebhookWorker) -> None:
    """What an app defers to close() (app/http.py's record of a review: its log line and metrics) runs once
    the client can read the whole answer, not before it is sent."""
    ours, theirs = socket.socketpair()
    readable_at_close: list[bytes] = []

    def peek() -> None:
        ready, _, _ = select.select([theirs], [], [], 0)
        readable_at_close.append(theirs.recv(1 << 16, socket.MSG_PEEK) if ready else b"")

    def app(environ: dict, start_response: Callable) -> ClosingIterator:
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "2")])
        return ClosingIterator([b"{}"], peek)

    worker.wsgi = AnswerFirst(app)
    with theirs:
        conn = Connection(worker.cfg, ours, ("127.0.0.1", 40000), ("127.0.0.1", 8443), time.monotonic() + 10)
        worker.nr_conns += 1
        worker._watch(conn, worker._read)
        theirs.sendall(HEAD + b"Content-Length: 2\r\n\r\n{}")
        deadline = time.monotonic() + 20
        while not readable_at_close or conn not in worker.watched:  # served, and back on the loop
            assert time.monotonic() < deadline, "the request was never served"
            worker.wait_for_and_dispatch_events(timeout=0.05)
        [at_close] = readable_at_close
        assert at_close.startswith(b"HTTP/1.1 200 OK\r\n") and at_close.endswith(b"\r\n\r\n{}")
