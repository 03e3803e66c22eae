"""A gunicorn serving the webhook over TLS on loopback, with its log read as it is written and /metrics scraped."""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from certgen.local import LocalFiles
from testbed.ports import free_port
from testbed.servers import Server, gunicorn, stop, wait_ready
from testbed.tls import client_context

METRICS_LINE = re.compile(r"metrics: serving http://([\d.]+):(\d+)/metrics")


@dataclass
class Served:
    port: int
    pki: LocalFiles
    proc: Server

    @property
    def lines(self) -> list[str]:
        """The server's stderr so far, one entry per line."""
        return [line.rstrip("\n") for line in list(self.proc.lines)]

    def log(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 20) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if found := re.search(pattern, line):
                    return found
            time.sleep(0.05)
        raise AssertionError(f"no log line matches {pattern!r}:\n{self.log()[-4000:]}")

    @property
    def metrics_url(self) -> str:
        found = self.wait_for(METRICS_LINE.pattern)
        return f"http://{found.group(1)}:{found.group(2)}/metrics"

    def scrape(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as reply:
            return reply.read().decode()

    def connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=client_context(self.pki.ca_cert), timeout=10)

    def post(self, body: Any, conn: http.client.HTTPSConnection | None = None) -> tuple[int, dict[str, Any]]:
        """POST one review on ``conn`` (or a fresh connection, closed after)."""
        own = conn is None
        conn = conn or self.connection()
        try:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            conn.request("POST", "/webhook", data, {"Content-Type": "application/json"})
            reply = conn.getresponse()
            return reply.status, json.loads(reply.read())
        finally:
            if own:
                conn.close()


@contextmanager
def serve(pki: LocalFiles, **env: str) -> Iterator[Served]:
    """gunicorn with ``env`` over the settings (HAMI_METRICS_BIND defaults to a free loopback port)."""
    port = free_port()
    proc = gunicorn(port, pki.cert, pki.key, **env)
    try:
        wait_ready(port, client_context(pki.ca_cert), proc)
        yield Served(port, pki, proc)
    finally:
        stop(proc)


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in a Prometheus text exposition, or None when absent."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, label_text = head.partition("{")
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', label_text))
        if metric == name and found == labels:
            return float(value)
    return None
