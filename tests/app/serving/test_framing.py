"""app.serving.framing byte by byte: when a request is whole, what the app is handed, which status a refusal gets.

No sockets: bytes go into a RequestReader as the worker's reads would deliver them.
"""

from __future__ import annotations

import pytest

from app.serving.framing import Limits, Refusal, Request, RequestReader

LIMITS = Limits(body=1000)  # a small body limit, so over-limit bodies are small too
HEAD = b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
BODY = b'{"kind": "AdmissionReview", "request": {"uid": "u1"}}'


def sized(body: bytes = BODY, head: bytes = HEAD) -> bytes:
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def chunked(body: bytes = BODY, size: int = 7) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
    return HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"


def whole_only_at_the_end(data: bytes, limits: Limits = LIMITS) -> Request:
    """Feed ``data`` one byte at a time: a whole request exactly at its last byte, never before."""
    reader = RequestReader(limits)
    for i in range(len(data) - 1):
        reader.feed(data[i : i + 1])
        assert not reader.ready, f"whole after {i + 1} of {len(data)} bytes: {data[: i + 1]!r}"
        assert reader.started
    reader.feed(data[-1:])
    [request] = reader.ready
    assert not reader.started
    return request


def refused(*reads: bytes, limits: Limits = LIMITS) -> tuple[int, str]:
    reader = RequestReader(limits)
    with pytest.raises(Refusal) as raised:
        for data in reads:
            reader.feed(data)
    assert not reader.ready
    return raised.value.status, raised.value.message


def test_a_sized_request_is_whole_at_its_last_byte() -> None:
    request = whole_only_at_the_end(sized())
    assert (request.method, request.target, request.http_version, request.body) == ("POST", b"/webhook", "1.1", BODY)
    assert (b"Content-Length", b"%d" % len(BODY)) in request.raw_headers and request.keep_alive


def test_a_request_without_body_is_whole_at_the_end_of_its_headers() -> None:
    request = whole_only_at_the_end(b"GET /readyz?x=1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert (request.method, request.target, request.body) == ("GET", b"/readyz?x=1", b"")


@pytest.mark.parametrize("size", [1, 7, 100], ids=["1-byte-chunks", "7-byte-chunks", "one-chunk"])
def test_a_chunked_body_is_de_chunked(size: int) -> None:
    assert whole_only_at_the_end(chunked(size=size)).body == BODY


def test_chunk_extensions_and_trailers_are_framed() -> None:
    data = HEAD + b'Transfer-Encoding: chunked\r\n\r\n5;name=value\r\n{"a":\r\n3\r\n 1}\r\n0\r\nX-Trailer: t\r\n\r\n'
    request = whole_only_at_the_end(data)
    assert request.body == b'{"a": 1}' and (b"X-Trailer", b"t") not in request.raw_headers


def test_a_body_of_exactly_the_limit_is_read() -> None:
    body = b"x" * LIMITS.body
    assert whole_only_at_the_end(sized(body)).body == body
    assert whole_only_at_the_end(chunked(body, size=100)).body == body


def test_a_content_length_over_the_limit_is_refused_at_the_end_of_the_headers() -> None:
    data = sized(b"x" * (LIMITS.body + 1))
    head_end = data.index(b"\r\n\r\n") + 4
    reader = RequestReader(LIMITS)
    reader.feed(data[: head_end - 1])
    assert refused(data[:head_end]) == (413, "request entity is too large; limit is 1000 bytes")


def test_a_chunked_body_is_refused_when_it_crosses_the_limit() -> None:
    head = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
    under = b"%x\r\n%s\r\n" % (LIMITS.body - 10, b"x" * (LIMITS.body - 10))
    reader = RequestReader(LIMITS)
    reader.feed(head + under)  # under the limit: still reading
    assert refused(head + under, b"14\r\n" + b"x" * 11)[0] == 413


def test_a_chunk_size_past_any_integer_is_too_large() -> None:
    assert refused(HEAD + b"Transfer-Encoding: chunked\r\n\r\n1234567890abcdef01\r\n")[0] == 413


def test_pipelined_requests_are_parsed_in_order() -> None:
    second = sized(b'{"n": 2}', head=b"POST /webhook?second HTTP/1.1\r\nHost: localhost\r\n")
    reader = RequestReader(LIMITS)
    reader.feed(sized() + chunked(b'{"n": 1}') + second[:20])
    assert [r.body for r in reader.ready] == [BODY, b'{"n": 1}'] and reader.started
    reader.feed(second[20:])
    assert [r.target for r in reader.ready][-1] == b"/webhook?second" and not reader.started


def test_connection_close_and_http_1_0_do_not_keep_the_connection() -> None:
    close = whole_only_at_the_end(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    old = whole_only_at_the_end(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
    old_kept = whole_only_at_the_end(b"GET / HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
    assert (close.keep_alive, old.keep_alive, old.http_version, old_kept.keep_alive) == (False, False, "1.0", True)


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        pytest.param(
            HEAD + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, "Content-Length", id="dup-length"
        ),
        pytest.param(HEAD + b"Content-Length: 1x\r\n\r\n{}", 400, "Content-Length", id="invalid-length"),
        pytest.param(HEAD + b"Content-Length: -1\r\n\r\n{}", 400, "Content-Length", id="negative-length"),
        pytest.param(
            HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            400,
            "Content-Length",
            id="chunked-and-length",
        ),
        pytest.param(HEAD + b"Transfer-Encoding: gzip\r\n\r\n{}", 400, "Transfer-Encoding", id="gzip-alone"),
        pytest.param(
            HEAD + b"Transfer-Encoding: br, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 501, "br", id="unsupported-coding"
        ),
        pytest.param(b"POST /webhook HTTP/9.9\r\nHost: x\r\n\r\n", 400, "Invalid HTTP Version", id="http-version"),
        pytest.param(HEAD + b"Bad Name: 1\r\nContent-Length: 2\r\n\r\n{}", 400, "header", id="header-name"),
        pytest.param(HEAD + b"X-A: 1\r\n  folded\r\n\r\n", 400, "whitespace", id="obsolete-folding"),
        pytest.param(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, "PRI", id="h2-preface"),
        pytest.param(
            HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
            400,
            "Invalid chunk size",
            id="chunk-size",
        ),
        pytest.param(
            HEAD + b"Transfer-Encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n", 400, "chunk size", id="negative-chunk"
        ),
        pytest.param(
            HEAD + b"Transfer-Encoding: chunked\r\n\r\n2;a=\x01\r\n{}\r\n0\r\n\r\n", 400, "chunk ext", id="chunk-ext"
        ),
        pytest.param(
            HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n", 400, "chunk", id="chunk-terminator"
        ),
    ],
)
def test_requests_that_cannot_be_framed_are_refused_at_once(data: bytes, status: int, message: str) -> None:
    found = refused(data)
    assert found[0] == status and message.lower() in found[1].lower(), found


def test_too_many_header_fields_get_431() -> None:
    fields = b"".join(b"X-%d: v\r\n" % i for i in range(LIMITS.fields + 1))
    assert refused(HEAD + fields + b"\r\n") == (431, f"more than {LIMITS.fields} header fields")


def test_a_header_field_over_its_limit_gets_431() -> None:
    assert refused(HEAD + b"X-Long: " + b"v" * LIMITS.field_size + b"\r\n\r\n")[0] == 431


def test_headers_never_ending_are_refused_past_the_head_limit() -> None:
    """One header value that never ends, read after read: refused once the head passes its bound."""
    reader = RequestReader(LIMITS)
    reader.feed(HEAD + b"X-Filler: ")
    fed = 0
    with pytest.raises(Refusal) as raised:
        while fed <= 2 * LIMITS.head:
            reader.feed(b"v" * 4096)
            fed += 4096
    assert raised.value.status == 431 and fed <= LIMITS.head + 4096


def test_a_long_request_line_gets_414() -> None:
    assert refused(b"GET /" + b"a" * LIMITS.line + b" HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 414


def test_an_upgrade_request_is_served_then_the_connection_ends() -> None:
    reader = RequestReader(LIMITS)
    reader.feed(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\nnot http")
    [request] = reader.ready
    assert reader.upgraded and not request.keep_alive
