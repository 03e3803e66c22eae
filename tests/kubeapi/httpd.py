"""The HTTP layer: a threaded HTTP/1.1 server that turns requests into ``RecordedRequest``s, writes
JSON responses and streams watches as chunked newline-delimited JSON events."""

from __future__ import annotations

import json
import queue
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.kubeapi import errors
from tests.kubeapi.errors import ApiError
from tests.kubeapi.routes import RecordedRequest, Response, WatchStream
from tests.kubeapi.store import DROP, Store

Dispatch = Callable[[RecordedRequest], Response | WatchStream]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: KubeHTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.track(self)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.untrack(self)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging (bodies may hold secrets)."""

    def _serve(self) -> None:
        url = urlsplit(self.path)
        req = RecordedRequest(
            method=self.command,
            path=url.path,
            query=parse_qs(url.query, keep_blank_values=True),
            content_type=self.headers.get("Content-Type"),
            body=self._read_body(),
            headers=dict(self.headers.items()),
        )
        try:
            result = self.server.dispatch(req)
        except ApiError as exc:
            result = Response(exc.code, exc.status())
        except Exception as exc:  # a bug in the fake or a failing before() callback: fail the test later
            self.server.errors.append(exc)
            result = Response(500, errors.internal(repr(exc)).status())
        if isinstance(result, WatchStream):
            self._stream(result)
        else:
            self._respond(result)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers
                pass
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _respond(self, response: Response) -> None:
        body = response.body if isinstance(response.body, str) else json.dumps(response.body)
        data = body.encode()
        self.send_response(response.code)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(data)))
        for warning in response.warnings:
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, event: dict[str, Any]) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _bookmark(self, watch: WatchStream, rv: int, annotations: dict[str, str] | None = None) -> None:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if annotations:
            meta["annotations"] = annotations
        self._chunk(
            {
                "type": "BOOKMARK",
                "object": {"kind": watch.rt.kind, "apiVersion": watch.rt.api_version, "metadata": meta},
            }
        )

    def _stream(self, watch: WatchStream) -> None:
        store = self.server.store
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for kind, obj in watch.initial:
                self._chunk({"type": kind, "object": obj})
            if watch.watcher is not None:
                if watch.initial_events_end:
                    self._bookmark(watch, store.resource_version, {"k8s.io/initial-events-end": "true"})
                self._follow(watch)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client hung up
            self.close_connection = True
        finally:
            if watch.watcher is not None:
                store.unwatch(watch.watcher)

    def _follow(self, watch: WatchStream) -> None:
        """Relay queued events until timeoutSeconds, server stop or client disconnect; send bookmarks."""
        assert watch.watcher is not None
        interval = self.server.bookmark_interval
        start = time.monotonic()
        deadline = start + watch.timeout if watch.timeout else None
        next_bookmark = start + interval if watch.bookmarks else None
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return
            if next_bookmark is not None and now >= next_bookmark:
                rv = self.server.store.progress(watch.watcher)
                if rv is not None:
                    self._bookmark(watch, rv)
                next_bookmark = now + interval
            wait = min(t - now for t in (now + 0.2, deadline, next_bookmark) if t is not None)
            try:
                event = watch.watcher.queue.get(timeout=max(wait, 0.001))
            except queue.Empty:
                if self._client_gone():
                    self.close_connection = True
                    return
                continue
            if event is None:  # server stopping
                self.close_connection = True
                return
            if event is DROP:  # no terminating chunk: the client sees a broken connection
                self.connection.shutdown(socket.SHUT_RDWR)
                raise ConnectionAbortedError("watch dropped by the test")
            self._chunk({"type": event[0], "object": event[1]})

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


class KubeHTTPServer(ThreadingHTTPServer):
    """Serves ``dispatch`` on a random 127.0.0.1 port; unexpected exceptions are appended to ``errors``."""

    daemon_threads = True

    def __init__(self, dispatch: Dispatch, store: Store, bookmark_interval: float, errors: list[BaseException]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.dispatch, self.store, self.bookmark_interval, self.errors = dispatch, store, bookmark_interval, errors
        self._handlers: dict[_Handler, threading.Thread] = {}
        self._handlers_lock = threading.Lock()

    def track(self, handler: _Handler) -> None:
        with self._handlers_lock:
            self._handlers[handler] = threading.current_thread()

    def untrack(self, handler: _Handler) -> None:
        with self._handlers_lock:
            self._handlers.pop(handler, None)

    def close_connections(self, timeout: float = 5.0) -> None:
        """End keep-alive connections: shutting down the read side wakes idle handlers with EOF while
        a handler still answering a request can finish writing; then wait for their threads."""
        with self._handlers_lock:
            handlers = dict(self._handlers)
        for handler in handlers:
            try:
                handler.connection.shutdown(socket.SHUT_RD)
            except OSError:
                pass
        for handler, thread in handlers.items():
            thread.join(timeout)
            if thread.is_alive():
                self.errors.append(RuntimeError(f"request handler {handler.requestline!r} did not finish"))

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Connection resets are normal (clients hang up, stop() closes sockets); anything else is a bug."""
        exc = sys.exc_info()[1]
        if exc is not None and not isinstance(exc, OSError):
            self.errors.append(exc)
