"""A stand-in Service whose endpoints follow each replica's readinessProbe, as kubelet and the endpoints controller
keep them: every ``periodSeconds`` GET /readyz with ``timeoutSeconds``; ``failureThreshold`` failures in a row take
the replica out of the endpoints, one success puts it back. New connections go round-robin over the ready
replicas; established ones keep their replica (kube-proxy's conntrack), until either side closes them.

The probe's numbers are read from the manifests' Deployment, so the test follows what is shipped. Loopback only.
"""

from __future__ import annotations

import itertools
import socketserver
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed import ROOT
from testbed.forwarder import splice
from testbed.install import WebhookServer


def manifest_probe() -> dict[str, Any]:
    """The webhook container's readinessProbe in manifests/base/deployment.yaml, read as kubelet reads it
    (periodSeconds, timeoutSeconds, failureThreshold)."""
    deployment: Any = yaml.safe_load(Path(ROOT, "manifests/base/deployment.yaml").read_text())
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if "readinessProbe" in c]
    return dict(container["readinessProbe"])


@dataclass
class ReadyService:
    listen: tuple[str, int]
    replicas: list[WebhookServer]
    probe: dict[str, Any] = field(default_factory=manifest_probe)
    ready: set[int] = field(default_factory=set)
    changes: list[tuple[float, int, bool]] = field(default_factory=list)  # (monotonic, replica, ready)
    connections: list[int] = field(default_factory=list)  # per replica: connections given to it
    _stop: threading.Event = field(default_factory=threading.Event)
    _server: socketserver.ThreadingTCPServer | None = None

    def start(self) -> ReadyService:
        self.ready = set(range(len(self.replicas)))
        self.connections = [0] * len(self.replicas)
        for index in range(len(self.replicas)):
            threading.Thread(target=self._kubelet, args=(index,), daemon=True).start()
        order = itertools.count()
        lock = threading.Lock()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with lock:
                    ready = sorted(outer.ready)
                    if not ready:
                        return  # no endpoints: the connection is refused (closed)
                    index = ready[next(order) % len(ready)]
                    outer.connections[index] += 1
                replica = outer.replicas[index]
                splice(self.request, (replica.host, replica.port))

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(self.listen, Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def _kubelet(self, index: int) -> None:
        """The readinessProbe of one replica, and the endpoints controller's reaction to it."""
        period, timeout = float(self.probe["periodSeconds"]), float(self.probe["timeoutSeconds"])
        failures = int(self.probe["failureThreshold"])
        failed = 0
        while not self._stop.wait(period):
            ok = self.replicas[index].status("/readyz", timeout=timeout) == 200
            failed = 0 if ok else failed + 1
            ready = ok or (index in self.ready and failed < failures)
            if ready != (index in self.ready):
                (self.ready.add if ready else self.ready.discard)(index)
                self.changes.append((time.monotonic(), index, ready))

    def left_at(self, index: int, after: float) -> float | None:
        """When the replica left the endpoints after ``after`` (None: it did not)."""
        return next((t for t, i, ready in self.changes if i == index and not ready and t >= after), None)

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
