"""Print the transport figures for the webhook served on 127.0.0.1 by its own worker under gunicorn.

    .venv/bin/python -m scripts.transport_figures [framing,large,slow,sigterm] [gunicorn args, e.g. -k sync]

The server is gunicorn.conf.py's: app.serving.worker.WebhookWorker (an event loop on gunicorn's base worker).
Extra gunicorn arguments change it for a comparison, e.g. ``-k sync`` for gunicorn's own sync worker.
Starts its own server (1 worker) with a throw-away PKI and measures, each bounded in time:
slow clients holding connections vs a well-behaved client's answers and p99; the answers to framing
errors and oversized bodies as a Python client sees them; requests lost on SIGTERM under keep-alive load.
The rules they measure: docs/rules.md#slow-clients-cannot-starve-the-server,
#bad-input-gets-a-clear-answer, #shutdown-loses-no-request.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from certgen.local import write_local
from testbed.ports import free_port
from testbed.servers import gunicorn, stop, wait_ready
from testbed.tls import client_context

REVIEW = json.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u1",
            "operation": "CREATE",
            "object": {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }
).encode()


class Server:
    """The webhook under gunicorn with ``args``, one worker, its log in ``pki_dir``; ready when constructed."""

    def __init__(self, pki_dir: Path, args: list[str]) -> None:
        self.pki = write_local(pki_dir, ["localhost", "127.0.0.1"])
        self.port = free_port()
        self.context = client_context(self.pki.ca_cert)
        log = pki_dir / f"gunicorn-{self.port}.log"
        self.proc = gunicorn(self.port, self.pki.cert, self.pki.key, *args, log=log, HAMI_WEBHOOK_WORKERS="1")
        try:
            wait_ready(self.port, self.context, self.proc)
        except AssertionError as exc:
            raise SystemExit(f"server did not start: {exc}") from None

    def connect(self, timeout: float = 5) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return self.context.wrap_socket(raw, server_hostname="localhost")

    def get(self, path: str, timeout: float = 5) -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=timeout)
        try:
            conn.request("GET", path)
            reply = conn.getresponse()
            return reply.status, reply.read()
        finally:
            conn.close()

    def stop(self) -> None:
        stop(self.proc)


def raw_exchange(server: Server, payload: bytes, timeout: float = 10) -> str:
    """Send ``payload`` on a fresh TLS connection; the status line and content type of the answer, or the error."""
    try:
        with server.connect(timeout) as tls:
            tls.sendall(payload)
            data = b""
            while b"\r\n\r\n" not in data:
                piece = tls.recv(65536)
                if not piece:
                    break
                data += piece
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    head = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    ctype = next((h for h in head if h.lower().startswith("content-type")), "no content-type")
    conn = next((h for h in head if h.lower().startswith("connection")), "no connection header")
    return f"{head[0]} | {ctype} | {conn}"


def stalls(server: Server, kind: str, count: int) -> list[socket.socket]:
    held: list[socket.socket] = []
    for _ in range(count):
        try:
            if kind == "clienthello-10-bytes":
                raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
                raw.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03")
                held.append(raw)
                continue
            tls = server.connect()
            tls.sendall(
                {
                    "partial-headers": b"POST /webhook HTTP/1.1\r\nHost: x\r\n",
                    "short-body": b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{",
                    "chunked-unterminated": b"POST /webhook HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"1\r\n{\r\n",
                }[kind]
            )
            held.append(tls)
        except OSError:
            pass
    return held


def good_client(server: Server, requests: int, budget: float) -> tuple[int, list[float]]:
    """Answered count and latencies of ``requests`` reviews, one fresh connection each (what stalls block)."""
    latencies: list[float] = []
    deadline = time.monotonic() + budget
    for _ in range(requests):
        if time.monotonic() > deadline:
            break
        started = time.perf_counter()
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.context, timeout=3)
            conn.request("POST", "/webhook", REVIEW, {"Content-Type": "application/json"})
            if conn.getresponse().status == 200:
                latencies.append((time.perf_counter() - started) * 1000)
            conn.close()
        except OSError:
            pass
    return len(latencies), latencies


def p99(latencies: list[float]) -> str:
    if len(latencies) < 2:
        return "n/a"
    return f"{statistics.quantiles(latencies, n=100)[98]:.1f} ms"


def figure_slow_clients(server: Server) -> None:
    for kind in ("partial-headers", "short-body", "chunked-unterminated", "clienthello-10-bytes"):
        held = stalls(server, kind, 50)
        time.sleep(0.5)
        ok, latencies = good_client(server, 40, 15)
        print(f"slow clients: 50 x {kind}: good client answered {ok}/40 in 15 s, p99 {p99(latencies)}")
        for sock in held:
            sock.close()
        time.sleep(0.5)


def figure_framing(server: Server) -> None:
    head = b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    cases = {
        "invalid chunk size": head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        "duplicate Content-Length": head + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        "invalid Content-Length": head + b"Content-Length: 1x\r\n\r\n{}",
        "bad request line": b"POST /webhook HTTP/9.9\r\nHost: x\r\n\r\n",
        "invalid header name": head + b"Bad Header: 1\r\nContent-Length: 2\r\n\r\n{}",
    }
    for name, payload in cases.items():
        print(f"framing: {name}: {raw_exchange(server, payload)}")


def figure_too_large(server: Server) -> None:
    body = b"x" * (8 * 1024 * 1024)
    for name, headers in (("Content-Length", {}), ("chunked", {"Transfer-Encoding": "chunked"})):
        conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.context, timeout=20)
        try:
            if headers:
                conn.request(
                    "POST",
                    "/webhook",
                    iter([body]),
                    {"Content-Type": "application/json", **headers},
                    encode_chunked=True,
                )
            else:
                conn.request("POST", "/webhook", body, {"Content-Type": "application/json"})
            reply = conn.getresponse()
            reply.read()
            print(f"8 MiB body ({name}): {reply.status} Connection: {reply.getheader('Connection')}")
        except (OSError, http.client.HTTPException) as exc:
            print(f"8 MiB body ({name}): client error {type(exc).__name__}: {exc}")
        finally:
            conn.close()


def figure_sigterm(args: list[str], pki_dir: Path, trials: int = 3, clients: int = 4) -> None:
    for trial in range(trials):
        server = Server(pki_dir, args)
        counts = {"ok": 0, "failed": 0, "refused": 0, "reset unaccepted": 0}
        stop_at = time.monotonic() + 9

        def load(server: Server = server, counts: dict[str, int] = counts, stop_at: float = stop_at) -> None:
            conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.context, timeout=10)
            while time.monotonic() < stop_at:
                if conn.sock is None:  # connect first: TCP, then the TLS handshake the server must do
                    try:
                        conn.connect()
                    except (ConnectionRefusedError, ConnectionResetError) as exc:
                        # not accepted: refused, or reset in the closing listener's queue before the handshake
                        # (docs/operations.md); no request was sent, in a cluster it goes to another Pod
                        counts["refused" if isinstance(exc, ConnectionRefusedError) else "reset unaccepted"] += 1
                        conn.close()
                        time.sleep(0.05)
                        continue
                try:
                    conn.request("POST", "/webhook", REVIEW, {"Content-Type": "application/json"})
                except (OSError, http.client.HTTPException):
                    counts["failed"] += 1  # accepted, then reset under the request
                    conn.close()
                    continue
                try:
                    reply = conn.getresponse()
                    reply.read()
                    counts["ok" if reply.status == 200 else "failed"] += 1
                    if reply.will_close:
                        conn.close()
                except (OSError, http.client.HTTPException):
                    counts["failed"] += 1  # the request was sent: it is lost
                    conn.close()
                time.sleep(0.01)

        threads = [threading.Thread(target=load) for _ in range(clients)]
        for thread in threads:
            thread.start()
        time.sleep(1.5)
        server.proc.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(20)
        server.proc.wait(30)
        print(f"SIGTERM trial {trial + 1}, {clients} keep-alive clients: {counts}")


def main() -> None:
    wanted = sys.argv[1].split(",") if len(sys.argv) > 1 else ["framing", "large", "slow", "sigterm"]
    args = sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), args)
        try:
            for name, figure in (
                ("framing", figure_framing),
                ("large", figure_too_large),
                ("slow", figure_slow_clients),
            ):
                if name in wanted:
                    figure(server)
        finally:
            server.stop()
        if "sigterm" in wanted:
            figure_sigterm(args, Path(tmp))


if __name__ == "__main__":
    main()
