"""Slow clients, framing errors and oversized bodies, at the level a client meets them: over TLS to gunicorn.

Rules: docs/rules.md#slow-clients-cannot-starve-the-server, #bad-input-gets-a-clear-answer.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from app.serving.protocol import MAX_BODY
from certgen.local import LocalFiles
from testbed.pods import container, pod
from testbed.ports import free_port
from testbed.reviews import admission_review
from testbed.servers import gunicorn, stop, wait_ready
from testbed.tls import client_context
from tests.app.served import serve

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

REVIEW = json.dumps(admission_review(pod(container(limits={"nvidia.com/gpu": "1"})), uid="u1")).encode()
HEAD = b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def server(pki: LocalFiles) -> Iterator[int]:
    port = free_port()
    proc = gunicorn(
        port,
        pki.cert,
        pki.key,
        HAMI_WEBHOOK_WORKERS="1",
        HAMI_WEBHOOK_REQUEST_TIMEOUT="2",
        HAMI_WEBHOOK_HANDSHAKE_TIMEOUT="2",
    )
    wait_ready(port, client_context(pki.ca_cert), proc)
    yield port
    log = stop(proc)
    assert "Traceback" not in log


def tls(port: int, pki: LocalFiles) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return client_context(pki.ca_cert).wrap_socket(raw, server_hostname="localhost")


def exchange(port: int, pki: LocalFiles, payload: bytes) -> tuple[int, dict[str, str], dict]:
    """Send raw bytes on a new TLS connection; status, headers (lower-case) and JSON body of the answer."""
    with tls(port, pki) as sock:
        sock.sendall(payload)
        reply = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
        reply.begin()
        headers = {k.lower(): v for k, v in reply.getheaders()}
        return reply.status, headers, json.loads(reply.read())


def review_over(conn: http.client.HTTPSConnection) -> None:
    conn.request("POST", "/webhook", REVIEW, {"Content-Type": "application/json"})
    reply = conn.getresponse()
    assert reply.status == 200 and json.loads(reply.read())["response"]["uid"] == "u1"


@pytest.fixture(scope="module")
def patient_server(pki: LocalFiles) -> Iterator[int]:
    """A server that waits a minute for a request or a handshake: one that a stalled client could starve would
    answer no one else before a stalled connection's minute is up."""
    port = free_port()
    env = {"HAMI_WEBHOOK_REQUEST_TIMEOUT": "60", "HAMI_WEBHOOK_HANDSHAKE_TIMEOUT": "60"}
    proc = gunicorn(port, pki.cert, pki.key, HAMI_WEBHOOK_WORKERS="1", **env)
    wait_ready(port, client_context(pki.ca_cert), proc)
    yield port
    log = stop(proc)
    assert "Traceback" not in log


def test_slow_clients_do_not_starve_others(patient_server: int, pki: LocalFiles) -> None:
    """50 connections stalled in the handshake, the headers or the body; a normal client's 40 reviews (half of them
    on new connections) are all answered, each within its 5 s timeout, while the stalled connections wait for
    their 60 s: none of them is answered meanwhile. How fast the reviews are then: scripts/transport_figures.py
    (``slow``)."""
    server = patient_server
    stalls = [
        b"POST /webhook HTTP/1.1\r\nHost: x\r\n",
        HEAD + b"Content-Length: 1000\r\n\r\n{",
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n",
    ]
    held: list[socket.socket] = []
    try:
        for i in range(50):
            if i % 4 == 3:  # 10 bytes of a ClientHello
                raw = socket.create_connection(("127.0.0.1", server), timeout=5)
                raw.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03")
                held.append(raw)
            else:
                sock = tls(server, pki)
                sock.sendall(stalls[i % 4])
                held.append(sock)
        context = client_context(pki.ca_cert)
        kept = http.client.HTTPSConnection("127.0.0.1", server, context=context, timeout=5)
        for _ in range(20):
            review_over(kept)
            fresh = http.client.HTTPSConnection("127.0.0.1", server, context=context, timeout=5)
            review_over(fresh)
            fresh.close()
        kept.close()
        for sock in held:
            sock.setblocking(False)
        assert [sock for sock in held if readable(sock)] == [], "a stalled connection was answered or closed"
    finally:
        for sock in held:
            sock.close()


def readable(sock: socket.socket) -> bool:
    """Whether the server sent anything or closed: a stalled connection it still waits on has neither."""
    try:
        sock.recv(1)
    except (BlockingIOError, ssl.SSLWantReadError):
        return False
    except OSError:
        return True
    return True


def test_a_stalled_request_gets_408(server: int, pki: LocalFiles) -> None:
    """When (HAMI_WEBHOOK_REQUEST_TIMEOUT after the first byte) is test_worker.py's, on the loop's clock."""
    status, headers, body = exchange(server, pki, HEAD + b"Content-Length: 100\r\n\r\n{")
    assert (status, headers["connection"], body["code"]) == (408, "close", 408)


def test_a_stalled_handshake_is_closed(server: int) -> None:
    with socket.create_connection(("127.0.0.1", server), timeout=10) as raw:
        raw.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03")
        try:
            assert raw.recv(100) == b""
        except ConnectionResetError:
            pass


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        pytest.param(
            HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", "Invalid chunk size", id="chunk-size"
        ),
        pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n", "chunk", id="chunk-terminator"),
        pytest.param(
            HEAD + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "Content-Length", id="duplicate-length"
        ),
        pytest.param(HEAD + b"Content-Length: 1x\r\n\r\n{}", "Content-Length", id="invalid-length"),
        pytest.param(HEAD + b"Transfer-Encoding: gzip\r\n\r\n{}", "", id="unsupported-coding"),
        pytest.param(b"POST /webhook HTTP/9.9\r\nHost: x\r\n\r\n", "Invalid HTTP Version", id="http-version"),
        pytest.param(HEAD + b"Bad Name: 1\r\nContent-Length: 2\r\n\r\n{}", "header", id="header-name"),
    ],
)
def test_framing_errors_get_json(server: int, pki: LocalFiles, payload: bytes, message: str) -> None:
    status, headers, body = exchange(server, pki, payload)
    assert status in (400, 501) and body["code"] == status
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"
    assert message.lower() in body["error"].lower()


def test_chunked_body_is_reviewed(server: int, pki: LocalFiles) -> None:
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(REVIEW[i : i + 100]), REVIEW[i : i + 100]) for i in range(0, len(REVIEW), 100)
    )
    status, _, body = exchange(server, pki, HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")
    assert status == 200 and body["response"]["uid"] == "u1"


def test_pipelined_requests_are_all_answered(server: int, pki: LocalFiles) -> None:
    request = HEAD + b"Content-Length: %d\r\n\r\n" % len(REVIEW) + REVIEW
    with tls(server, pki) as sock:
        sock.sendall(request * 3)
        for _ in range(3):
            reply = http.client.HTTPResponse(sock)  # type: ignore[arg-type]
            reply.begin()
            assert reply.status == 200 and json.loads(reply.read(reply.length or 0))["response"]["uid"] == "u1"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_too_large_body_gets_a_readable_413(server: int, pki: LocalFiles, chunked: bool) -> None:
    """The client sends all of its 8 MiB and then reads the 413, which closes the connection."""
    conn = http.client.HTTPSConnection("127.0.0.1", server, context=client_context(pki.ca_cert), timeout=20)
    body = b" " * (MAX_BODY + 1024 * 1024)
    headers = {"Content-Type": "application/json"}
    if chunked:
        conn.request("POST", "/webhook", iter([body[:1024], body[1024:]]), headers, encode_chunked=True)
    else:
        conn.request("POST", "/webhook", body, headers)
    reply = conn.getresponse()
    answer = json.loads(reply.read())
    conn.close()
    assert (reply.status, reply.getheader("Connection")) == (413, "close")
    assert (answer["kind"], answer["code"]) == ("Status", 413), "a Status, like every other framing error"
    assert answer["message"] == f"request entity is too large; limit is {MAX_BODY} bytes"


def test_get_webhook_says_to_post(server: int, pki: LocalFiles) -> None:
    status, headers, body = exchange(server, pki, b"GET /webhook HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert (status, body["kind"], body["code"]) == (405, "Status", 405)
    assert "POST" in headers["allow"].split(", ")
    assert "use POST with an AdmissionReview JSON body" in body["message"]


def connect(conn: http.client.HTTPSConnection, barrier: threading.Barrier) -> None:
    barrier.wait(10)
    conn.connect()


def test_a_burst_of_connections_is_spread_over_workers(pki: LocalFiles) -> None:
    """kube-apiserver opens its keep-alive connections together: no worker may take the whole burst."""
    with serve(pki, HAMI_WEBHOOK_WORKERS="2", HAMI_LOG_FORMAT="json", HAMI_METRICS_BIND="") as served:
        deadline = time.monotonic() + 60
        while served.log().count("worker ready") < 2:  # both workers have loaded the app
            assert time.monotonic() < deadline, served.log()
            time.sleep(0.05)
        for round_ in range(3):
            conns = [served.connection() for _ in range(8)]
            barrier = threading.Barrier(len(conns))
            threads = [threading.Thread(target=connect, args=(conn, barrier)) for conn in conns]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(20)
            uids = [f"r{round_}-{i}" for i in range(len(conns))]
            for conn, uid in zip(conns, uids, strict=True):
                body = admission_review(pod(container(limits={"nvidia.com/gpu": "1"})), uid=uid)
                assert served.post(body, conn)[0] == 200
                conn.close()
            pids = Counter(served.wait_for(rf'"pid":(\d+),"msg":"review","uid":"{uid}"').group(1) for uid in uids)
            assert len(pids) == 2 and max(pids.values()) <= 5, f"round {round_}: connections per worker {pids}"
