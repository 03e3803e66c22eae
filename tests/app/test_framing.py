"""app.framing byte by byte: when a buffered request is complete, what the app is handed, which status a refusal gets.

No sockets: bytes go into a RequestBuffer as the worker's reads would deliver them, and once it says
complete they are handed to gunicorn's own parser, as the worker does, and parsed from memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from gunicorn.config import Config
from gunicorn.http import get_parser

from app.framing import MAX_CHUNK_LINE, RequestBuffer, head_limit, refusal

CFG = Config()
LIMIT = 1000  # max_body in these tests: small, so over-limit bodies are small too
HEAD = b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
BODY = b'{"kind": "AdmissionReview", "request": {"uid": "u1"}}'


def sized(body: bytes = BODY, head: bytes = HEAD) -> bytes:
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def chunked(body: bytes = BODY, size: int = 7) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
    return HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"


@dataclass
class Seen:
    """What the app would be handed: the request line, headers and the body it reads."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    must_close: bool


class Connection:
    """The worker's side of one connection, without the socket: a buffer and gunicorn's parser reading memory."""

    def __init__(self, max_body: int = LIMIT, more: list[bytes] | None = None) -> None:
        self.buffer = RequestBuffer(head_limit(CFG), max_body)
        # The parser's source stands for the socket: empty unless the client sends ``more`` after the hand-over.
        self.parser = get_parser(CFG, more or [], ("127.0.0.1", 40000))

    def feed(self, data: bytes) -> bool:
        """One read's worth of bytes; whether the request is now complete."""
        self.buffer.add(data)
        return self.buffer.complete()

    def serve(self) -> Seen:
        """Hand the complete request to the parser, as the worker's thread sees it; then take back the rest."""
        self.buffer.hand_over(self.parser.unreader)
        req = next(self.parser)
        self.buffer.for_app(req)
        headers = dict(req.headers)
        seen = Seen(req.method, req.path, headers, req.body.read(), req.must_close)
        self.buffer.take_back(self.parser.unreader)
        return seen

    def refused(self) -> tuple[int, str]:
        """Hand the request over and expect gunicorn to refuse it; the status and message the client gets."""
        with pytest.raises(Exception) as raised:
            self.serve()
        found = refusal(raised.value)
        assert found is not None, f"not a refusal: {raised.value!r}"
        return found


def complete_only_at_the_end(data: bytes, max_body: int = LIMIT) -> Connection:
    """Feed ``data`` one byte at a time: complete exactly at its last byte, never before."""
    conn = Connection(max_body)
    for i in range(len(data) - 1):
        assert not conn.feed(data[i : i + 1]), f"complete after {i + 1} of {len(data)} bytes: {data[: i + 1]!r}"
    assert conn.feed(data[-1:])
    return conn


def test_content_length_request_is_complete_at_its_last_byte() -> None:
    seen = complete_only_at_the_end(sized()).serve()
    assert (seen.method, seen.path, seen.body, seen.must_close) == ("POST", "/webhook", BODY, False)
    assert seen.headers["CONTENT-LENGTH"] == str(len(BODY))


def test_request_without_body_is_complete_at_the_end_of_its_headers() -> None:
    seen = complete_only_at_the_end(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\n\r\n").serve()
    assert (seen.method, seen.path, seen.body, seen.headers["CONTENT-LENGTH"]) == ("GET", "/readyz", b"", "0")


@pytest.mark.parametrize("size", [1, 7, 100], ids=["1-byte-chunks", "7-byte-chunks", "one-chunk"])
def test_chunked_body_reaches_the_app_de_chunked_with_its_length(size: int) -> None:
    seen = complete_only_at_the_end(chunked(size=size)).serve()
    assert seen.body == BODY and seen.headers["CONTENT-LENGTH"] == str(len(BODY))
    assert "TRANSFER-ENCODING" not in seen.headers


def test_chunk_extensions_and_trailers_are_framed() -> None:
    data = HEAD + b'Transfer-Encoding: chunked\r\n\r\n5;name=value\r\n{"a":\r\n3\r\n 1}\r\n0\r\nX-Trailer: t\r\n\r\n'
    seen = complete_only_at_the_end(data).serve()
    assert seen.body == b'{"a": 1}'


def test_a_body_of_exactly_the_limit_is_read() -> None:
    body = b"x" * LIMIT
    assert complete_only_at_the_end(sized(body)).serve().body == body
    assert complete_only_at_the_end(chunked(body, size=100)).serve().body == body


def test_content_length_over_the_limit_is_handed_over_at_the_headers_unread() -> None:
    """The contract with app/http.py: an empty body announcing the length sent, so Flask answers 413 unread."""
    data = sized(b"x" * (LIMIT + 1))
    conn = Connection()
    head_end = data.index(b"\r\n\r\n") + 4
    assert not conn.feed(data[: head_end - 1])
    assert conn.feed(data[head_end - 1 : head_end])  # the body is not waited for
    seen = conn.serve()
    assert (seen.body, seen.headers["CONTENT-LENGTH"], seen.must_close) == (b"", str(LIMIT + 1), True)


def test_chunked_body_over_the_limit_is_handed_over_when_it_crosses_it() -> None:
    conn = Connection()
    assert not conn.feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
    assert not conn.feed(b"%x\r\n%s\r\n" % (LIMIT - 10, b"x" * (LIMIT - 10)))
    assert conn.feed(b"14\r\n")  # 20 more: over the limit before the chunk's data is even here
    seen = conn.serve()
    assert (seen.body, seen.headers["CONTENT-LENGTH"], seen.must_close) == (b"", str(LIMIT + 10), True)
    assert "TRANSFER-ENCODING" not in seen.headers


def test_pipelined_requests_are_served_one_by_one() -> None:
    second = sized(b'{"n": 2}', head=b"POST /webhook?second HTTP/1.1\r\nHost: localhost\r\n")
    conn = Connection()
    assert conn.feed(sized() + chunked(b'{"n": 1}') + second[:20])
    assert conn.serve().body == BODY
    assert conn.buffer.complete()  # the chunked one, taken back from the parser whole
    assert conn.serve().body == b'{"n": 1}'
    assert conn.buffer.buf == second[:20] and not conn.buffer.complete()
    assert conn.feed(second[20:])
    seen = conn.serve()
    assert (seen.path, seen.body, bytes(conn.buffer.buf)) == ("/webhook", b'{"n": 2}', b"")


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        pytest.param(
            HEAD + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, "CONTENT-LENGTH", id="duplicate-length"
        ),
        pytest.param(HEAD + b"Content-Length: 1x\r\n\r\n{}", 400, "CONTENT-LENGTH", id="invalid-length"),
        pytest.param(HEAD + b"Content-Length: -1\r\n\r\n{}", 400, "CONTENT-LENGTH", id="negative-length"),
        pytest.param(
            HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            400,
            "",
            id="chunked-and-length",
        ),
        pytest.param(HEAD + b"Transfer-Encoding: gzip\r\n\r\n{}", 400, "TRANSFER-ENCODING", id="gzip-alone"),
        pytest.param(
            HEAD + b"Transfer-Encoding: br, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 501, "br", id="unsupported-coding"
        ),
        pytest.param(b"POST /webhook HTTP/9.9\r\nHost: x\r\n\r\n", 400, "Invalid HTTP Version", id="http-version"),
        pytest.param(HEAD + b"Bad Name: 1\r\nContent-Length: 2\r\n\r\n{}", 400, "header name", id="header-name"),
    ],
)
def test_requests_refused_from_their_headers_are_handed_over_at_once(data: bytes, status: int, message: str) -> None:
    """Framing that cannot be trusted is not waited on: the parser refuses it, with gunicorn's status."""
    conn = Connection()
    assert conn.feed(data)
    found = conn.refused()
    assert found[0] == status and message.lower() in found[1].lower()


@pytest.mark.parametrize(
    ("chunks", "status", "message"),
    [
        pytest.param(b"zz\r\n{}\r\n0\r\n\r\n", 400, "Invalid chunk size", id="chunk-size"),
        pytest.param(b"-2\r\n{}\r\n0\r\n\r\n", 400, "Invalid chunk size", id="negative-chunk-size"),
        pytest.param(b"2;a=\x01\r\n{}\r\n0\r\n\r\n", 400, "chunk extension", id="chunk-extension"),
        pytest.param(b"2\r\n{}XX0\r\n\r\n", 400, "chunk terminator", id="chunk-terminator"),
    ],
)
def test_bad_chunks_are_handed_over_and_refused(chunks: bytes, status: int, message: str) -> None:
    conn = Connection()
    assert conn.feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunks)
    found = conn.refused()
    assert found[0] == status and message.lower() in found[1].lower()


def test_a_bad_chunk_size_is_not_waited_on() -> None:
    conn = Connection()
    assert not conn.feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
    assert conn.feed(b"zz\r\n")  # the rest of the body would not help: hand it over now


def test_a_chunk_size_line_is_waited_on_up_to_its_bound_then_handed_over() -> None:
    conn = Connection()
    assert not conn.feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n2;" + b"e" * (MAX_CHUNK_LINE - 2))
    assert conn.feed(b"e")


def test_a_chunk_size_over_the_limit_is_refused_unread_however_many_digits() -> None:
    """A size line too long to be under the limit: the same unread 413 as any body over it."""
    conn = Connection()
    assert conn.feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n1234567890abcdef0\r\n")
    seen = conn.serve()
    assert (seen.body, seen.headers["CONTENT-LENGTH"], seen.must_close) == (b"", str(0x1234567890ABCDEF0), True)
    conn = Connection()
    assert not conn.feed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n00000000000000000002\r\n{")
    assert conn.feed(b"}\r\n0\r\n\r\n")
    assert conn.serve().body == b"{}"


def test_headers_over_gunicorns_limits_are_handed_over_and_refused() -> None:
    conn = Connection()
    fields = b"".join(b"X-%d: %s\r\n" % (i, b"v" * 100) for i in range(CFG.limit_request_fields + 1))
    assert conn.feed(HEAD + fields + b"\r\n")
    assert conn.refused()[0] == 431


def test_headers_never_ending_are_handed_over_past_the_head_limit() -> None:
    """Handed over past the bound; gunicorn's parser refuses the head once it reads past its own bound."""
    line = b"X-Filler: " + b"v" * 1000 + b"\r\n"
    conn = Connection(more=[line * 100])  # what the client sends after the hand-over
    assert not conn.feed(HEAD)
    fed = len(HEAD)
    while not conn.feed(line):
        fed += len(line)
        assert fed <= head_limit(CFG), "still waiting for headers past gunicorn's limits"
    assert conn.refused() == (431, "max buffer headers")


def test_a_long_request_line_gets_414() -> None:
    conn = Connection()
    assert conn.feed(b"GET /" + b"a" * CFG.limit_request_line + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert conn.refused()[0] == 414


def test_the_buffer_is_full_past_the_largest_request_it_could_accept() -> None:
    conn = Connection()
    conn.buffer.add(b"x" * (head_limit(CFG) + LIMIT))
    assert not conn.buffer.full()
    conn.buffer.add(b"x" * 100_000)
    assert conn.buffer.full()


def test_faults_on_our_side_are_not_refusals() -> None:
    from gunicorn.http.errors import InvalidResponseHeader, NoMoreData

    assert refusal(ValueError("a bug")) is None
    assert refusal(InvalidResponseHeader("X-Bad\r\n")) is None  # the app's header, not the request's
    assert refusal(NoMoreData(b"")) is None
