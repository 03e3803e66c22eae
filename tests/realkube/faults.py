"""A reverse proxy in front of the real kube-apiserver that records requests and injects faults.

What a test cannot make a healthy API server do on cue — answer 500 or 409 to the next request, let another
writer slip in between a client's read and its write, drop every watch — this proxy does, and forwards every
other request to the real server untouched (same path, headers and body; the client's token authenticates
there). It listens on 127.0.0.1 with the API server's own serving certificate, so a client trusts it with the
same CA: over plain HTTP, client-go (kubectl) would send no credentials at all. Clients reach it through
`kubeconfig()`.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from testbed.cluster import ADMIN_TOKEN, RealKube, kubeconfig

READS = ("GET", "HEAD", "OPTIONS")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "proxy-connection"}
REASONS = {400: "BadRequest", 404: "NotFound", 409: "Conflict", 410: "Expired", 422: "Invalid", 429: "TooManyRequests"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query
    query: str
    body: bytes = b""

    def json(self) -> Any:
        """The body as JSON: what the client asked for (a write's resourceVersion, a delete's preconditions)."""
        return json.loads(self.body)


@dataclass
class _Rule:
    method: str
    path: re.Pattern[str]
    times: int
    status: int = 0  # answer this instead of forwarding
    message: str = ""
    callback: Callable[[RealKube], None] | None = None  # run, then forward
    hold: str = ""  # "request": never forwarded; "answer": forwarded, its answer never sent (both: until release)

    def matches(self, request: Request) -> bool:
        return self.times > 0 and request.method == self.method and self.path.search(request.path) is not None


@dataclass
class FaultyProxy:
    kube: RealKube
    port: int = 0
    requests: list[Request] = field(default_factory=list)
    watch_chunk: int = 65536  # most bytes a watch stream passes on in one chunk (small: events split over chunks)
    _rules: list[_Rule] = field(default_factory=list)
    _watches: set[socket.socket] = field(default_factory=set)
    _connections: set[socket.socket] = field(default_factory=set)  # every client connection open now
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _released: threading.Event = field(default_factory=threading.Event)
    _light: threading.Event = field(default_factory=threading.Event)  # cleared while black-holed
    _reset: bool = False  # how the black hole ends: connections reset (True) or resumed
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(self, path: Path, token: str = ADMIN_TOKEN) -> str:
        path.write_text(kubeconfig(self.url, self.kube.ca_path, token))
        return str(path)

    def fail_next(self, method: str, path_regex: str, status: int, times: int = 1, message: str = "") -> None:
        """Answer the next `times` matching requests with a Status of `status` instead of forwarding them."""
        with self._lock:
            self._rules.append(_Rule(method, re.compile(path_regex), times, status, message or f"injected {status}"))

    def before(self, method: str, path_regex: str, callback: Callable[[RealKube], None], times: int = 1) -> None:
        """Run `callback(kube)` just before each of the next `times` matching requests is forwarded."""
        with self._lock:
            self._rules.append(_Rule(method, re.compile(path_regex), times, callback=callback))

    def hold_next(self, method: str, path_regex: str, times: int = 1, answer: bool = False) -> None:
        """Hold the next `times` matching requests unanswered, as a network that black-holes them does, until
        ``release()`` resets their connections. ``answer``: forward the request first, so the API server does
        it and only its answer is lost (a write that lands while its client times out)."""
        with self._lock:
            self._rules.append(_Rule(method, re.compile(path_regex), times, hold="answer" if answer else "request"))

    def black_hole(self) -> None:
        """Copy nothing more either way, as a partitioned network does: requests and watch streams stall, their
        connections stay open (no reset, no close), until ``heal``."""
        self._reset = False
        self._light.clear()

    def heal(self, reset: bool = False) -> None:
        """End the black hole: what was held resumes, or (``reset``) every connection held is reset."""
        self._reset = reset
        self._light.set()

    def _through(self, connection: socket.socket) -> bool:
        """Wait out a black hole; False when the connection was reset at its end."""
        if self._light.is_set():
            return True
        self._light.wait(300)
        if self._reset:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return False
        return True

    def release(self) -> None:
        """Reset the connections of every held request."""
        self._released.set()

    def writes(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.method not in READS]

    def drop_watches(self) -> int:
        """Close every open watch stream, as an API server restart or a load balancer would."""
        with self._lock:
            dropped, self._watches = self._watches, set()
        for sock in dropped:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(dropped)

    def start(self) -> FaultyProxy:
        proxy = self
        self._light.set()
        context = ssl.create_default_context(cafile=str(self.kube.ca_path))

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: no delayed-ACK stall between
            upstream: http.client.HTTPSConnection | None = None

            def log_message(self, format: str, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._connections.add(self.connection)

            def finish(self) -> None:
                with proxy._lock:
                    proxy._connections.discard(self.connection)
                if self.upstream is not None:  # the client closed its kept-alive connection: so do we
                    self.upstream.close()
                    self.upstream = None
                try:
                    super().finish()
                except OSError:  # the client is gone already
                    pass

            def _any(self) -> None:
                parts = urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not proxy._through(self.connection):
                    self.close_connection = True
                    return
                request = Request(self.command, parts.path, parts.query, body)
                rule = proxy._take(request)
                if rule is not None and rule.status:
                    return self._status(rule.status, rule.message)
                if rule is not None and rule.callback is not None:
                    rule.callback(proxy.kube)
                if rule is not None and rule.hold == "request":
                    return self._held()
                if self.upstream is None:
                    self.upstream = http.client.HTTPSConnection("127.0.0.1", proxy.kube.port, context=context)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                self.upstream.request(self.command, self.path, body=body or None, headers=headers)
                answer = self.upstream.getresponse()
                query = parse_qs(parts.query)
                if query.get("watch", [""])[0] in ("true", "1") or "/watch/" in parts.path:
                    return self._stream(answer)
                data = answer.read()
                if rule is not None and rule.hold == "answer":
                    return self._held()
                if not proxy._through(self.connection):
                    self.close_connection = True
                    return
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, answer: http.client.HTTPResponse) -> None:
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                with proxy._lock:
                    proxy._watches.add(self.connection)
                try:
                    while (chunk := answer.read1(proxy.watch_chunk)) and proxy._through(self.connection):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (OSError, http.client.HTTPException):  # either side cut the stream
                    pass
                finally:
                    with proxy._lock:
                        proxy._watches.discard(self.connection)
                    self.close_connection = True
                    if self.upstream is not None:
                        self.upstream.close()
                        self.upstream = None

            def _held(self) -> None:
                """No answer until released (or the proxy stops), then a reset connection."""
                proxy._released.wait(120)
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            def _status(self, code: int, message: str) -> None:
                reason = REASONS.get(code, "InternalError" if code >= 500 else "")
                status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
                data = json.dumps(status | {"message": message, "reason": reason, "code": code}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        serving.load_cert_chain(*self.kube.serving_pair)
        # The handshake happens on the handler's first read, in its own thread, not in the accept loop.
        self._server.socket = serving.wrap_socket(self._server.socket, server_side=True, do_handshake_on_connect=False)
        self.port = self._server.server_address[1]
        # A short poll: stop() waits for the loop to see the shutdown, once per test.
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection, kept-alive ones too: the API server is gone."""
        if self._server is not None:
            self.release()
            self.heal(reset=True)
            self.drop_watches()
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            with self._lock:
                connections, self._connections = self._connections, set()
            for sock in connections:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _take(self, request: Request) -> _Rule | None:
        with self._lock:
            self.requests.append(request)
            for rule in self._rules:
                if rule.matches(request):
                    rule.times -= 1
                    return rule
        return None
