"""A round-robin TCP forwarder: kube-proxy's part, for a Service with several webhook backends.

Each accepted connection goes to the next backend; bytes are copied both ways untouched (TLS ends at
the webhook). Loopback only.
"""

from __future__ import annotations

import itertools
import socket
import socketserver
import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class RoundRobin:
    listen: tuple[str, int]
    backends: list[tuple[str, int]]
    connections: Counter[tuple[str, int]] = field(default_factory=Counter)
    _server: socketserver.ThreadingTCPServer | None = None

    def start(self) -> RoundRobin:
        order = itertools.cycle(self.backends)
        lock = threading.Lock()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with lock:
                    backend = next(order)
                    outer.connections[backend] += 1
                splice(self.request, backend)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(self.listen, Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def splice(client: socket.socket, backend: tuple[str, int]) -> None:
    """Connect to ``backend`` and copy both ways until both sides are done."""
    with socket.create_connection(backend, timeout=10) as upstream:
        upstream.settimeout(None)
        # kube-proxy forwards packets as they come; a copy in user space must not hold a small write
        # back for the previous one's ACK (Nagle's algorithm: a delayed ACK costs 40 ms per request)
        for side in (upstream, client):
            side.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        back.start()
        _pump(client, upstream)
        back.join(timeout=15)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until `source` closes, then half-close `sink` so the other direction can finish."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def main() -> None:
    """``python -m testbed.forwarder LISTEN BACKEND...`` (host:port each): forward until stdin closes,
    then print the connections per backend as JSON. A process of its own, so its threads never compete for
    an interpreter lock with whoever measures through it."""
    import json
    import sys

    def address(text: str) -> tuple[str, int]:
        host, _, port = text.rpartition(":")
        return host, int(port)

    listen, *backends = (address(a) for a in sys.argv[1:])
    forwarder = RoundRobin(listen, backends).start()
    print("listening", flush=True)
    sys.stdin.read()
    forwarder.stop()
    print(json.dumps({f"{h}:{p}": n for (h, p), n in forwarder.connections.items()}), flush=True)


if __name__ == "__main__":
    main()
