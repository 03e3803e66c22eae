"""app.serving.worker's bond to gunicorn (only base.Worker, its documented extension point) and its loop in process.

The gunicorn surface the worker relies on is listed here, and checked against the installed gunicorn: a release
that changes one of these fails here, by name. tests/test_dependency_bounds.py serves a review with the oldest
gunicorn setup.cfg allows; the rest of the suite runs the newest (constraints.txt).
The loop tests drive the worker's own event loop over a socketpair, with the app from create_app, no gunicorn
process and no TLS: what tests/app/serving/test_transport.py proves over TLS, here without a server.
"""

from __future__ import annotations

import inspect
import json
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger
from gunicorn.workers import base
from werkzeug.wsgi import ClosingIterator

from app import create_app
from app.admission.edit import PodEdit
from app.admission.ports import Verdict
from app.serving import honoured
from app.serving.connections import FIRST_REQUEST_WAIT, Connection
from app.serving.protocol import MAX_BODY, Plain
from app.serving.tls import ServingCertificate
from app.serving.worker import WebhookWorker
from app.settings import Settings
from certgen.local import write_local
from testbed.pods import container, pod
from testbed.reviews import admission_review
from testbed.tls import client_context

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

REVIEW = json.dumps(admission_review(pod(container(limits={"nvidia.com/gpu": "1"})), uid="u1")).encode()
HEAD = b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"

# base.Worker's methods the worker calls or overrides, with their parameters.
METHODS = {
    "__init__": ["age", "ppid", "sockets", "app", "timeout", "cfg", "log"],
    "init_process": [],
    "load_wsgi": [],
    "run": [],
    "notify": [],
    "handle_exit": ["sig", "frame"],
}
# base.Worker's state the worker reads: set by __init__ ...
STATE = ("alive", "sockets", "cfg", "log", "timeout", "ppid", "nr", "max_requests")
# ... and by init_process: PIPE (its non-blocking wake-up pipe, signals written to it), wsgi (by load_wsgi).


@pytest.mark.parametrize("name", METHODS)
def test_base_worker_still_has_the_methods_the_worker_relies_on(name: str) -> None:
    method = getattr(base.Worker, name, None)
    assert callable(method), f"gunicorn.workers.base.Worker.{name} is gone"
    assert list(inspect.signature(method).parameters)[1:] == METHODS[name]
    assert name in vars(base.Worker), f"{name} is no longer base.Worker's own"


def test_the_worker_serves_with_the_settings_the_app_was_made_with(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read once in the worker's process, by create_app, and handed down: not read again from the environment."""
    made = make_settings(HAMI_WEBHOOK_REQUEST_TIMEOUT="7")
    monkeypatch.setenv("HAMI_WEBHOOK_REQUEST_TIMEOUT", "9")

    class Loaded:  # gunicorn's application object, as base.Worker.load_wsgi asks it
        def wsgi(self) -> Any:
            return create_app(made)

    cfg = Config()
    worker = WebhookWorker(0, os.getpid(), [], Loaded(), 30, cfg, Logger(cfg))
    worker.load_wsgi()
    try:
        assert worker.settings is made and worker.connections.deadlines.request_timeout == 7
    finally:
        worker.connections.close()
        worker.poller.close()
        worker.tmp.close()


def test_the_worker_inherits_nothing_but_base_worker() -> None:
    assert WebhookWorker.__mro__ == (WebhookWorker, base.Worker, object)


def test_base_worker_still_has_the_state_the_worker_relies_on() -> None:
    stock = base.Worker(0, os.getpid(), [], None, 30, Config(), Logger(Config()))
    try:
        missing = [name for name in STATE if not hasattr(stock, name)]
        assert not missing, f"base.Worker no longer sets {missing}"
        assert stock.alive is True and stock.nr == 0
    finally:
        stock.tmp.close()


def test_base_worker_init_process_makes_the_pipe_routes_sigterm_loads_the_app_then_runs() -> None:
    """In a forked child (init_process installs signal handlers): the order and state run() relies on."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        report: dict[str, Any] = {}
        try:

            class Probe(base.Worker):  # type: ignore[misc]
                def load_wsgi(self) -> None:
                    report["loaded_before_run"] = True
                    super().load_wsgi()

                def run(self) -> None:
                    report["wsgi"] = self.wsgi()
                    report["pipe"] = [os.get_blocking(fd) for fd in self.PIPE]
                    report["sigterm"] = signal.getsignal(signal.SIGTERM) == self.handle_exit
                    os.kill(os.getpid(), signal.SIGTERM)
                    report["alive_after_sigterm"] = self.alive
                    report["woken"] = len(os.read(self.PIPE[0], 16)) > 0  # set_wakeup_fd wrote the signal

            class App:
                def wsgi(self) -> Callable[[], str]:
                    return lambda: "the app"

            Probe(0, os.getppid(), [], App(), 30, Config(), Logger(Config())).init_process()
        except BaseException as exc:
            report["error"] = repr(exc)
        os.write(write_end, json.dumps(report).encode())
        os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    assert json.loads(data) == {
        "loaded_before_run": True,
        "wsgi": "the app",
        "pipe": [False, False],
        "sigterm": True,
        "alive_after_sigterm": False,
        "woken": True,
    }


# -- the worker's loop in process ---------------------------------------------------------------------


class Governs:
    """A quota port with a device quota in one namespace (its admit never waits: the ledger is not the point)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def governs(self, namespace: str) -> bool:
        return namespace == self.namespace

    def admit(self, namespace: str, pod: PodEdit, *, uid: str, dry_run: bool, who: str = "") -> Verdict:
        return Verdict()

    def status(self) -> dict[str, Any]:
        return {"ready": True}

    def stop(self) -> None:
        pass


@pytest.fixture
def worker(settings: Settings) -> Iterator[WebhookWorker]:
    """A WebhookWorker as init_process leaves it, less the certificate and the listener: no TLS, no gunicorn."""
    cfg = Config()
    worker = WebhookWorker(0, os.getpid(), [], None, 30, cfg, Logger(cfg))
    worker.prepare(settings)
    worker.serve_with(create_app(settings))
    yield worker
    worker.connections.close()  # those kept alive, or draining after Connection: close
    worker.poller.close()
    worker.tmp.close()


def connect(worker: WebhookWorker) -> tuple[Connection, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    conn = Connection(ours, ("127.0.0.1", 40000), ("127.0.0.1", 8443), time.monotonic() + 10, worker.protocol)
    worker.connections.open += 1
    worker.connections._watch(conn, worker.connections._read)
    return conn, theirs


def answers(worker: WebhookWorker, data: bytes, count: int = 1) -> list[tuple[int, dict[str, str], dict]]:
    """Send ``data`` on a new connection to the worker's loop; the first ``count`` answers, parsed."""
    conn, theirs = connect(worker)
    with theirs:
        theirs.sendall(data)
        theirs.setblocking(False)
        received, found = b"", list[tuple[int, dict[str, str], dict]]()
        deadline = time.monotonic() + 20
        while len(found) < count:
            assert time.monotonic() < deadline, f"no complete answer; received {received[:300]!r}"
            worker.connections.wait(0.05)
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
        while conn not in worker.connections.watched:  # back on the loop: kept alive, or draining
            assert time.monotonic() < deadline, "the connection never came back to the loop"
            worker.connections.wait(0.05)
        return found


def sized(body: bytes, path: bytes = b"/webhook") -> bytes:
    return HEAD.replace(b"/webhook", path) + b"Content-Length: %d\r\n\r\n" % len(body) + body


def test_a_review_is_answered(worker: WebhookWorker) -> None:
    [(status, headers, body)] = answers(worker, sized(REVIEW))
    assert (status, body["response"]["uid"]) == (200, "u1")
    assert headers.get("connection", "keep-alive").lower() != "close"
    assert headers["content-type"] == "application/json" and "date" in headers


def test_pipelined_reviews_chunked_or_not_are_all_answered(worker: WebhookWorker) -> None:
    chunked = HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(REVIEW), REVIEW)
    replies = answers(worker, sized(REVIEW) + chunked + sized(REVIEW), count=3)
    assert [(status, body["response"]["uid"]) for status, _, body in replies] == [(200, "u1")] * 3


def test_a_body_over_the_limit_gets_a_413_status_before_it_is_sent(worker: WebhookWorker) -> None:
    """Answered by the worker from the announced length alone: the app never sees the request."""
    [(status, headers, body)] = answers(worker, HEAD + b"Content-Length: %d\r\n\r\n{" % (MAX_BODY + 1))
    assert (status, headers["connection"].lower()) == (413, "close")
    assert (body["kind"], body["code"]) == ("Status", 413)
    assert body["message"] == f"request entity is too large; limit is {MAX_BODY} bytes"


def test_a_refused_request_gets_a_json_status(worker: WebhookWorker) -> None:
    bad = HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
    [(status, headers, body)] = answers(worker, bad)
    assert (status, headers["content-type"], headers["connection"].lower()) == (400, "application/json", "close")
    assert (body["kind"], body["code"]) == ("Status", 400) and "Invalid chunk size" in body["message"]


def test_a_fault_in_the_app_is_a_500_status_and_closes(worker: WebhookWorker) -> None:
    def app(environ: dict, start_response: Callable) -> list[bytes]:
        raise RuntimeError("a bug")

    worker.serve_with(app)
    [(status, headers, body)] = answers(worker, sized(b"{}"))
    assert (status, headers["connection"].lower(), body["kind"]) == (500, "close", "Status")


def test_gunicorns_request_hooks_get_the_worker_and_run_around_the_answer(worker: WebhookWorker) -> None:
    """gunicorn's pre_request and post_request, set in its Config, called with this worker as gunicorn calls them;
    post_request once the answer has left (what the app defers to close() has run by then)."""
    seen: list[tuple[Any, ...]] = []

    def pre_request(hooked: Any, req: Any) -> None:
        seen.append(("pre", hooked is worker, req.method, req.path))

    def post_request(hooked: Any, req: Any, environ: dict, resp: Any) -> None:
        seen.append(("post", hooked is worker, environ["PATH_INFO"], resp.status_code))

    worker.cfg.set("pre_request", pre_request)
    worker.cfg.set("post_request", post_request)
    worker.serve_with(create_app(worker.settings))
    [(status, _, _)] = answers(worker, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200
    assert seen == [("pre", True, "GET", "/healthz"), ("post", True, "/healthz", 200)]


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        pytest.param("forwarded_allow_ips", "*", id="forwarded_allow_ips"),
        pytest.param("secure_scheme_headers", {"X-SCHEME": "https"}, id="secure_scheme_headers"),
        pytest.param("header_map", "refuse", id="header_map"),
        pytest.param("proxy_protocol", "v1" if "off" == Config().proxy_protocol else True, id="proxy_protocol"),
        pytest.param("cert_reqs", 2, id="cert_reqs"),
        pytest.param("ciphers", "ECDHE+AESGCM", id="ciphers"),
        pytest.param("ssl_context", lambda config, default: default(), id="ssl_context"),
        pytest.param("accesslog", "-", id="accesslog"),
    ],
)
def test_a_setting_the_worker_cannot_honour_is_refused_at_start(setting: str, value: Any) -> None:
    """gunicorn's arbiter asks the worker class before it forks; gunicorn prints the RuntimeError as one line."""
    cfg = Config()
    cfg.set(setting, value)
    with pytest.raises(RuntimeError) as refused:
        WebhookWorker.check_config(cfg, Logger(cfg))
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"app.serving.worker does not honour gunicorn's {setting} ")


def test_the_settings_the_worker_honours_start() -> None:
    cfg = Config()
    for setting, value in {
        "pre_request": lambda worker, req: None,
        "post_request": lambda worker, req, environ, resp: None,
        "keepalive": 75,
        "threads": 8,
        "limit_request_fields": 50,
        "max_requests": 1000,
    }.items():
        cfg.set(setting, value)
    WebhookWorker.check_config(cfg, Logger(cfg))


# Each of gunicorn's settings, by who honours it (the rest are honoured.UNHONOURED, refused at start). A gunicorn
# release that adds one fails test_every_gunicorn_setting_is_honoured_or_refused by name, to be placed here or there.
ARBITER = {
    "config", "wsgi_app", "bind", "backlog", "workers", "worker_class", "timeout", "graceful_timeout", "reload",
    "reload_engine", "reload_extra_files", "spew", "check_config", "print_config", "preload_app", "reuse_port",
    "chdir", "daemon", "raw_env", "pidfile", "worker_tmp_dir", "user", "group", "umask", "initgroups", "errorlog",
    "loglevel", "capture_output", "logger_class", "logconfig", "logconfig_dict", "logconfig_json", "syslog_addr",
    "syslog", "syslog_prefix", "syslog_facility", "enable_stdio_inheritance", "disable_redirect_access_to_syslog",
    "dogstatsd_tags", "statsd_prefix", "enable_backlog_metric", "proc_name", "default_proc_name", "pythonpath",
    "paste", "raw_paste_global_conf", "on_starting", "on_reload", "when_ready", "pre_fork", "post_fork",
    "post_worker_init", "worker_int", "worker_abort", "pre_exec", "child_exit", "worker_exit", "nworkers_changed",
    "on_exit", "max_requests", "max_requests_jitter", "control_socket", "control_socket_mode",
    "control_socket_disable", "dirty_apps", "dirty_workers", "dirty_timeout", "dirty_threads",
    "dirty_graceful_timeout", "on_dirty_starting", "dirty_post_fork", "dirty_worker_init", "dirty_worker_exit",
}  # fmt: skip
WORKER = {
    "threads", "worker_connections", "keepalive", "limit_request_line", "limit_request_fields",
    "limit_request_field_size", "certfile", "keyfile", "pre_request", "post_request",
}  # fmt: skip
MOOT = {
    "sendfile", "tmp_upload_dir", "proxy_allow_ips", "uwsgi_allow_ips", "http2_max_concurrent_streams",
    "http2_initial_window_size", "http2_max_frame_size", "http2_max_header_list_size", "asgi_loop",
    "asgi_lifespan", "asgi_disconnect_grace_period", "websocket_max_message_size",
}  # fmt: skip
"""What nothing here would read even under gunicorn's own HTTP/1.1 WSGI workers: no wsgi.file_wrapper is offered
(sendfile), no upload spools to disk, and the rest configure a protocol or worker refused or not in use."""


def test_every_gunicorn_setting_is_honoured_or_refused() -> None:
    settings = set(Config().settings)
    refused = set(honoured.UNHONOURED)
    assert not (ARBITER | WORKER | MOOT) & refused
    assert sorted(settings - ARBITER - WORKER - MOOT - refused) == []


def test_a_request_has_the_request_timeout_from_its_first_byte_then_gets_408(worker: WebhookWorker) -> None:
    """On the loop's clock, read before and after the first bytes arrive: no waiting for the timeout here."""
    conn, theirs = connect(worker)
    timeout = worker.settings.request_timeout
    with theirs:
        before = time.monotonic()
        theirs.sendall(HEAD + b"Content-Length: 100\r\n\r\n{")
        wait_for(worker, lambda: conn.reader.started, "the request's first bytes")
        after = time.monotonic()
        assert before + timeout <= conn.deadline <= after + timeout
        worker.connections.expire(conn.deadline - 0.001)
        assert worker.connections.watched[conn] == worker.connections._read, "not refused before its deadline"
        worker.connections.expire(conn.deadline)
        assert worker.connections.watched[conn] == worker.connections._discard
        theirs.settimeout(5)
        assert theirs.recv(65536).startswith(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n")


def test_the_answer_leaves_before_the_apps_close_runs(worker: WebhookWorker) -> None:
    """What an app defers to close() (app/serving/http.py's record of a review: its log line and metrics) runs once
    the client can read the whole answer, not before it is sent."""
    readable_at_close: list[bytes] = []
    conn, theirs = connect(worker)

    def peek() -> None:
        ready, _, _ = select.select([theirs], [], [], 0)
        readable_at_close.append(theirs.recv(1 << 16, socket.MSG_PEEK) if ready else b"")

    def app(environ: dict, start_response: Callable) -> ClosingIterator:
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "2")])
        return ClosingIterator([b"{}"], peek)

    worker.serve_with(app)
    with theirs:
        theirs.sendall(HEAD + b"Content-Length: 2\r\n\r\n{}")
        deadline = time.monotonic() + 20
        while not readable_at_close or conn not in worker.connections.watched:  # served, and back on the loop
            assert time.monotonic() < deadline, "the request was never served"
            worker.connections.wait(0.05)
        [at_close] = readable_at_close
        assert at_close.startswith(b"HTTP/1.1 200 OK\r\n") and at_close.endswith(b"\r\n\r\n{}")


def test_only_a_request_prepared_as_blocking_is_served_in_a_thread(worker: WebhookWorker) -> None:
    served_in: dict[str, int] = {}

    class App:
        def prepare(self, environ: dict) -> Plain:
            return Plain(self, environ["PATH_INFO"] == "/slow")

        def __call__(self, environ: dict, start_response: Callable) -> list[bytes]:
            served_in[environ["PATH_INFO"]] = threading.get_ident()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [b"{}"]

    worker.serve_with(App())
    answers(worker, sized(b"{}", b"/slow") + sized(b"{}", b"/fast"), count=2)
    assert served_in["/fast"] == threading.get_ident() != served_in["/slow"]


def test_the_webhook_app_says_a_review_may_block_only_where_a_quota_governs(settings: Settings) -> None:
    """Parsed once: the prepared call carries the review it parsed."""
    app = create_app(settings, Governs("ai"))
    for namespace, blocks in (("ai", True), ("web", False)):
        review = json.dumps(admission_review(pod(container(limits={"nvidia.com/gpu": "1"}), namespace=namespace)))
        with app.test_request_context("/webhook", method="POST", data=review, content_type="application/json") as ctx:
            prepared = app.prepare(ctx.request.environ)
            assert prepared.blocks is blocks
            assert prepared.review is not None and prepared.review.document["request"]["namespace"] == namespace
    with app.test_request_context("/webhook", method="POST", data=b"{not json") as ctx:
        assert app.prepare(ctx.request.environ).blocks is False
    with app.test_request_context("/readyz") as ctx:
        assert app.prepare(ctx.request.environ).blocks is False


class Counted(Governs):
    """Governs, counting the times it is asked whether a quota governs."""

    asked = 0

    def governs(self, namespace: str) -> bool:
        self.asked += 1
        return super().governs(namespace)


@pytest.mark.parametrize("governed", ["default", "elsewhere"], ids=["governed", "not governed"])
def test_a_review_asks_whether_a_quota_governs_once(settings: Settings, worker: WebhookWorker, governed: str) -> None:
    """prepare asks it to choose where the review is served; the prepared review carries that answer on."""
    port = Counted(governed)
    worker.serve_with(create_app(settings, port))
    [(status, _, body)] = answers(worker, sized(REVIEW))
    assert (status, body["response"]["allowed"], port.asked) == (200, True, 1)


class Threads(Governs):
    """Governs, recording the thread each admission is decided in."""

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self.threads: list[int] = []

    def admit(self, namespace: str, pod: PodEdit, *, uid: str, dry_run: bool, who: str = "") -> Verdict:
        self.threads.append(threading.get_ident())
        return super().admit(namespace, pod, uid=uid, dry_run=dry_run)


def test_a_review_in_a_governed_namespace_is_answered_from_a_thread(settings: Settings, worker: WebhookWorker) -> None:
    port = Threads("default")
    worker.serve_with(create_app(settings, port))
    [(status, _, body)] = answers(worker, sized(REVIEW))
    assert (status, body["response"]["uid"]) == (200, "u1")
    assert port.threads and port.threads[0] != threading.get_ident()


def wait_for(worker: WebhookWorker, done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not done():
        assert time.monotonic() < deadline, what
        worker.connections.wait(0.05)


def test_an_unready_worker_lets_go_of_idle_connections_as_it_turns_unready_and_as_they_go_idle(
    worker: WebhookWorker,
) -> None:
    """As shedding starts (the readiness's: the quota lost the API server), the kept-alive connection idle after an
    answer is half-closed (the client reconnects through the Service, to a ready replica), the one not used yet
    gets FIRST_REQUEST_WAIT and the one a request is arriving on is left alone. From then on a connection is let
    go as it goes idle: here one whose answer, made keep-alive before shedding began, leaves afterwards."""

    class App:
        def prepare(self, environ: dict) -> Plain:
            return Plain(self, environ["PATH_INFO"] == "/slow")

        def __call__(self, environ: dict, start_response: Callable) -> list[bytes]:
            start_response("200 OK", [("Content-Type", "application/json")])
            return [b"{}"]

    worker.serve_with(App())
    served, served_peer = connect(worker)
    fresh, fresh_peer = connect(worker)
    busy, busy_peer = connect(worker)
    late, late_peer = connect(worker)
    with served_peer, fresh_peer, busy_peer, late_peer:
        served_peer.sendall(sized(b"{}", b"/fast"))
        wait_for(
            worker,
            lambda: served.served and worker.connections.watched.get(served) == worker.connections._read,
            "the answer",
        )
        busy_peer.sendall(HEAD)  # a request begun, not whole
        wait_for(worker, lambda: busy.reader.started, "the request's first bytes")
        late_peer.sendall(sized(b"{}", b"/slow"))
        wait_for(worker, lambda: late not in worker.connections.watched, "the request handed to a thread")
        deadline = time.monotonic() + 20
        while not worker.connections.finished:  # the thread's answer, made keep-alive, waits for the loop
            assert time.monotonic() < deadline, "the thread never answered"
            time.sleep(0.01)
        busy_deadline, fresh_deadline = busy.deadline, fresh.deadline
        worker.readiness.shedding.set()
        try:
            worker._follow_shedding()
            assert worker.connections.watched[served] == worker.connections._discard  # half-closed
            assert fresh.deadline <= time.monotonic() + FIRST_REQUEST_WAIT < fresh_deadline
            assert (worker.connections.watched[busy], busy.deadline) == (worker.connections._read, busy_deadline)
            worker.connections.wait(0.05)  # the thread's answer leaves; its connection goes idle and is let go at once
            assert worker.connections.watched[late] == worker.connections._discard
        finally:
            worker.readiness.shedding.clear()
        for peer in (served_peer, late_peer):
            peer.settimeout(5)
            received = b""
            while chunk := peer.recv(65536):  # the answer, then the server's half-close
                received += chunk
            assert received.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close" not in received


def test_connections_queued_when_the_listener_closes_are_served_not_reset(
    worker: WebhookWorker, tmp_path: Path
) -> None:
    """Past STOP_LINGER the worker closes its listener; the connections the kernel had already queued on it are
    accepted first and answered (closing a listener resets what is still in its queue)."""
    pki = write_local(tmp_path, ["localhost", "127.0.0.1"])
    worker.certificate = ServingCertificate(str(pki.cert), str(pki.key), lambda _: None, lambda _: None)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)  # as run() leaves it
    worker.sockets = [listener]
    queued = [socket.create_connection(listener.getsockname(), timeout=10) for _ in range(3)]
    worker._close_listeners()
    assert listener.fileno() == -1 and worker.connections.open == 3
    context = client_context(pki.ca_cert)
    replies: list[bytes] = []

    def client(raw: socket.socket) -> None:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            received = b""
            while chunk := tls.recv(65536):  # the answer, then the worker lets go of the idle connection
                received += chunk
            replies.append(received)

    threads = [threading.Thread(target=client, args=(raw,)) for raw in queued]
    for thread in threads:
        thread.start()
    wait_for(worker, lambda: len(replies) == 3, "the queued connections' answers")
    for thread in threads:
        thread.join(10)
    assert all(reply.startswith(b"HTTP/1.1 200 OK\r\n") for reply in replies), replies


def test_a_review_finishing_after_the_connections_closed_wakes_nobody(caplog) -> None:
    """A review still in a pool thread (waiting on the quota, say) when the worker closes its connections (its
    parent gone) finishes quietly: the wake pipe is closed by then, and its number may already be another file's."""
    import logging
    import selectors
    from types import SimpleNamespace

    from app.serving.connections import Connections

    owner = SimpleNamespace(keep=lambda: True, idle=lambda conn: None, answered=lambda: None)
    deadlines = SimpleNamespace(request_timeout=5, handshake_timeout=5)
    conns = Connections(selectors.DefaultSelector(), deadlines, 5, 1, owner, logging.getLogger("test"))
    release = threading.Event()
    future = conns.pool.submit(release.wait, 5)
    future.add_done_callback(lambda done: conns._hand_back(None, done))  # as a review handed to the pool does
    conns.close()
    with caplog.at_level(logging.ERROR, logger="concurrent.futures"):
        release.set()
        assert future.result(timeout=5) is True
        conns.pool.shutdown(wait=True)
    assert caplog.records == []
