"""app.serving.protocol on its own: parsed requests in, environ and answer bytes out, no socket and no loop.

The environ and the protocol's calls of the app go through ``wsgiref.validate``, PEP 3333's checker, which fails
on what a server owes an app (the environ's keys and types, start_response's use, close() called).
"""

from __future__ import annotations

import logging
import wsgiref.validate
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from gunicorn.config import Config

from app.serving.framing import Request, RequestReader
from app.serving.protocol import MAX_BODY, Answer, Plain, Protocol, Refusal, limits, refusal

SERVER, CLIENT = ("127.0.0.1", 8443), ("127.0.0.1", 40000)
NOW = 1_700_000_000.0
log = logging.getLogger("test_protocol")


class Calls:
    """What the protocol called, in order: gunicorn's hooks (with their arguments) and the app's close()."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def pre_request(self, req: Request) -> None:
        self.seen.append(("pre_request", req.method, req.path, req.query, req.version, req.headers[:1]))

    def post_request(self, req: Request, environ: dict[str, Any], resp: Answer) -> None:
        self.seen.append(("post_request", req.uri, environ["PATH_INFO"], resp.status_code, resp.sent))


def protocol(app: Callable[..., Any], calls: Calls | None = None) -> Protocol:
    calls = calls or Calls()
    return Protocol(
        app,
        limits(Config()),
        multiprocess=False,
        pre_request=calls.pre_request,
        post_request=calls.post_request,
        log=log,
    )


def parsed(data: bytes) -> Request:
    reader = RequestReader(limits(Config()))
    reader.feed(data)
    [request] = reader.ready
    return request


def json_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterator[bytes]:
    body = environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"]))  # PEP 3333: read at most the length
    start_response("200 OK", [("Content-Type", "application/json")])
    return iter([b'{"got": ', str(len(body)).encode(), b"}"])


def served(data: bytes, app: Callable[..., Any] = json_app, keep: bool = True) -> tuple[Answer, Calls]:
    """``data`` through the protocol with ``app`` under PEP 3333's checker, finished as the loop finishes it."""
    calls = Calls()
    proto = protocol(wsgiref.validate.validator(app), calls)
    request = parsed(data)
    answer = proto.serve(proto.environ(request, SERVER, CLIENT), request, keep, NOW)
    proto.finish(answer)
    return answer, calls


def head_and_body(data: bytes) -> tuple[list[str], bytes]:
    head, body = data.split(b"\r\n\r\n", 1)
    return head.decode("latin-1").split("\r\n"), body


POST = b"POST /webhook?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(POST + b"Content-Length: 2\r\n\r\n{}", id="post"),
        pytest.param(POST + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", id="chunked"),
        pytest.param(b"GET /readyz HTTP/1.0\r\nHost: x\r\n\r\n", id="http-1.0"),
        pytest.param(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n", id="head"),
        pytest.param(b"GET /a%20b?x=1&y HTTP/1.1\r\nHost: x\r\nX-One: 1\r\nX-One: 2\r\n\r\n", id="quoted-repeated"),
        pytest.param(b"GET http://h:1/abs?q HTTP/1.1\r\nHost: h\r\n\r\n", id="absolute-form"),
        pytest.param(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", id="asterisk"),
    ],
)
def test_every_request_passes_pep_3333s_checker(data: bytes) -> None:
    answer, calls = served(data)
    lines, _ = head_and_body(answer.data)
    assert lines[0] == "HTTP/1.1 200 OK"
    assert [call[0] for call in calls.seen] == ["pre_request", "post_request"]


def test_the_environ_is_pep_3333s_with_the_body_whole() -> None:
    data = b"POST /a%20b?x=1 HTTP/1.1\r\nHost: h\r\nX-One: 1\r\nX-One: 2\r\nX_Spoof: 1\r\n"
    data += b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    request = parsed(data)
    environ = protocol(json_app).environ(request, SERVER, CLIENT)
    assert {k: v for k, v in environ.items() if k.isupper() and not k.startswith("HTTP_")} == {
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": "",
        "PATH_INFO": "/a b",
        "QUERY_STRING": "x=1",
        "RAW_URI": "/a%20b?x=1",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8443",
        "REMOTE_ADDR": "127.0.0.1",
        "REMOTE_PORT": "40000",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": "2",
    }
    assert (environ["HTTP_HOST"], environ["HTTP_X_ONE"]) == ("h", "1,2")
    assert "HTTP_TRANSFER_ENCODING" not in environ and "HTTP_X_SPOOF" not in environ  # "_" would forge "-"
    assert environ["wsgi.input"].read() == b"{}" and environ["wsgi.url_scheme"] == "https"


def test_the_answer_is_one_buffer_framed_by_the_protocol() -> None:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        start_response("201 Created", [("Content-Type", "application/json"), ("Content-Length", "99")])
        return [b"{", b"}"]

    answer, _ = served(POST + b"Content-Length: 2\r\n\r\n{}", app)
    lines, body = head_and_body(answer.data)
    assert lines == [
        "HTTP/1.1 201 Created",
        "Content-Type: application/json",
        "Content-Length: 2",
        "Date: Tue, 14 Nov 2023 22:13:20 GMT",
    ]
    assert (body, answer.keep, answer.status_code, answer.sent) == (b"{}", True, 201, 2)


@pytest.mark.parametrize(
    ("data", "keep", "connection"),
    [
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", True, None, id="kept"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", False, "close", id="worker-says-close"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", True, "close", id="client-says-close"),
        pytest.param(b"GET / HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", True, "keep-alive", id="1.0-kept"),
        pytest.param(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n", True, "close", id="1.0"),
    ],
)
def test_the_connection_stays_only_if_the_worker_and_the_client_agree(
    data: bytes, keep: bool, connection: str | None
) -> None:
    answer, _ = served(data, keep=keep)
    lines, _ = head_and_body(answer.data)
    said = [line.split(": ", 1)[1] for line in lines if line.startswith("Connection:")]
    assert said == ([connection] if connection else []) and answer.keep is (connection != "close")


@pytest.mark.parametrize(
    ("status", "method"), [("204 No Content", "GET"), ("304 Not Modified", "GET"), ("200 OK", "HEAD")]
)
def test_no_body_where_http_allows_none(status: str, method: str) -> None:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        start_response(
            status, [("Content-Type", "application/json"), ("Content-Length", "7")] if method == "HEAD" else []
        )
        return [b"ignored"] if method == "HEAD" else []

    answer, _ = served(b"%s / HTTP/1.1\r\nHost: x\r\n\r\n" % method.encode(), app)
    lines, body = head_and_body(answer.data)
    length = [line for line in lines if line.startswith("Content-Length")]
    assert body == b"" and length == (["Content-Length: 7"] if method == "HEAD" else [])


def test_a_fault_in_the_app_is_a_500_status_and_its_close_still_runs() -> None:
    closed: list[str] = []

    class Failing:
        def __iter__(self) -> Iterator[bytes]:
            raise RuntimeError("a bug")

        def close(self) -> None:
            closed.append("closed")

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Failing:
        start_response("200 OK", [("Content-Type", "application/json")])
        return Failing()

    calls = Calls()
    proto = protocol(app, calls)
    request = parsed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = proto.serve(proto.environ(request, SERVER, CLIENT), request, True, NOW)
    assert closed == [] and not answer.keep  # close() waits until the answer has left
    proto.finish(answer)
    lines, body = head_and_body(answer.data)
    assert lines[0] == "HTTP/1.1 500 Internal Server Error" and "Connection: close" in lines
    assert orjson.loads(body)["kind"] == "Status" and closed == ["closed"]
    assert calls.seen[-1][0] == "post_request" and calls.seen[-1][3] == 500


def test_a_header_that_would_split_the_answer_is_a_500() -> None:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        start_response("200 OK", [("X-Evil", "a\r\nSet-Cookie: b")])
        return [b"{}"]

    answer, _ = served(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", app)
    assert answer.data.startswith(b"HTTP/1.1 500 ") and b"Set-Cookie" not in answer.data


def test_gunicorns_hooks_get_gunicorns_arguments_around_the_app() -> None:
    """pre_request before the app with the request as gunicorn's hooks read theirs; post_request after close()."""
    order: list[str] = []

    class Closing:
        def __iter__(self) -> Iterator[bytes]:
            order.append("app")
            return iter([b"{}"])

        def close(self) -> None:
            order.append("close")

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Closing:
        start_response("200 OK", [("Content-Type", "application/json")])
        return Closing()

    class Ordered(Calls):
        def pre_request(self, req: Request) -> None:
            order.append("pre_request")
            super().pre_request(req)

        def post_request(self, req: Request, environ: dict[str, Any], resp: Answer) -> None:
            order.append("post_request")
            super().post_request(req, environ, resp)

    calls = Ordered()
    proto = protocol(app, calls)
    request = parsed(POST + b"Content-Length: 2\r\n\r\n{}")
    proto.finish(proto.serve(proto.environ(request, SERVER, CLIENT), request, True, NOW))
    assert order == ["pre_request", "app", "close", "post_request"]
    assert calls.seen == [
        ("pre_request", "POST", "/webhook", "timeout=10s", (1, 1), [("HOST", "localhost")]),
        ("post_request", "/webhook?timeout=10s", "/webhook", 200, 2),
    ]


def test_hook_faults_are_guarded_as_gunicorns_gthread_guards_them(caplog: pytest.LogCaptureFixture) -> None:
    """A fault in pre_request is the request's (a 500, the app not called); one in post_request is logged."""
    called: list[str] = []

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        called.append("app")
        start_response("200 OK", [])
        return [b"{}"]

    def broken(*args: Any) -> None:
        raise RuntimeError("hook bug")

    request = parsed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    before = Protocol(
        app, limits(Config()), multiprocess=False, pre_request=broken, post_request=Calls().post_request, log=log
    )
    answer = before.serve(before.environ(request, SERVER, CLIENT), request, True, NOW)
    assert answer.data.startswith(b"HTTP/1.1 500 ") and called == []
    after = Protocol(
        app, limits(Config()), multiprocess=False, pre_request=Calls().pre_request, post_request=broken, log=log
    )
    answer = after.serve(after.environ(request, SERVER, CLIENT), request, True, NOW)
    with caplog.at_level(logging.ERROR, logger=log.name):
        after.finish(answer)
    assert answer.data.startswith(b"HTTP/1.1 200 ") and called == ["app"]
    assert "Exception in post_request hook" in caplog.text


def test_gunicorns_default_hooks_run_on_the_protocols_request() -> None:
    """gunicorn's own pre_request reads req.method and req.path; its post_request takes all four arguments."""
    cfg = Config()
    worker = type("Worker", (), {"log": log})()
    proto = Protocol(
        json_app,
        limits(cfg),
        multiprocess=False,
        pre_request=lambda req: cfg.pre_request(worker, req),
        post_request=lambda req, environ, resp: cfg.post_request(worker, req, environ, resp),
        log=log,
    )
    request = parsed(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = proto.serve(proto.environ(request, SERVER, CLIENT), request, True, NOW)
    proto.finish(answer)
    assert answer.data.startswith(b"HTTP/1.1 200 ")


def test_the_apps_prepare_says_where_and_a_fault_in_it_means_it_may_block() -> None:
    class App:
        def __init__(self, blocks: Callable[[dict[str, Any]], bool]) -> None:
            self.blocks = blocks

        def prepare(self, environ: dict[str, Any]) -> Plain:
            return Plain(self, self.blocks(environ))

        def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            return []

    def broken(environ: dict[str, Any]) -> bool:
        raise RuntimeError("a bug")

    environ = {"PATH_INFO": "/slow"}
    assert protocol(App(lambda e: e["PATH_INFO"] == "/slow")).prepare(environ).blocks is True
    assert protocol(App(lambda e: False)).prepare(environ).blocks is False
    assert protocol(App(broken)).prepare(environ).blocks is True
    assert protocol(json_app).prepare(environ).blocks is False


def test_the_limits_are_gunicorns_settings_and_the_one_body_limit() -> None:
    cfg = Config()
    cfg.set("limit_request_line", 0)  # gunicorn's "no limit": its ceiling
    cfg.set("limit_request_fields", 50)
    found = limits(cfg)
    assert (found.line, found.fields, found.field_size, found.body) == (8190, 50, 8190, MAX_BODY)


def test_a_body_over_the_limit_is_refused_with_a_status_before_it_is_read() -> None:
    """Like every other body the app cannot read a uid from: a Status, not an AdmissionReview with no uid."""
    reader = protocol(json_app).reader()
    with pytest.raises(Refusal) as raised:
        reader.feed(POST + b"Content-Length: %d\r\n\r\n{" % (MAX_BODY + 1))
    lines, body = head_and_body(refusal(raised.value.status, raised.value.message))
    message = "request entity is too large; limit is 7340032 bytes"
    assert lines[0] == "HTTP/1.1 413 Request Entity Too Large" and "Connection: close" in lines
    assert orjson.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "code": 413,
        "error": message,
    }


def test_the_date_is_the_clock_reading_the_loop_gives() -> None:
    proto = protocol(json_app)
    request = parsed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    dates = [
        proto.serve(proto.environ(request, SERVER, CLIENT), request, True, now).data.split(b"Date: ")[1][:29]
        for now in (NOW, NOW + 0.5, NOW + 1)
    ]
    assert dates == [b"Tue, 14 Nov 2023 22:13:20 GMT"] * 2 + [b"Tue, 14 Nov 2023 22:13:21 GMT"]
