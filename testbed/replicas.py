"""Several replicas of the installed webhook behind the Service's ClusterIP, as a Deployment scaled up runs.

The installed webhook process is stopped; `count` copies of its container listen on 127.0.0.1, and a
round-robin forwarder (kube-proxy's part) on ClusterIP:443 spreads the API server's connections over them.
The forwarder runs as a process of its own, so whoever measures through it does not share its interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from testbed import ROOT
from testbed.install import Installed, WebhookServer
from testbed.ports import free_port


@dataclass
class Replicas:
    servers: list[WebhookServer]
    forwarder: subprocess.Popen[str] | None = None
    connections: dict[str, int] = field(default_factory=dict)  # per backend "host:port", once stopped

    def stop(self) -> list[str]:
        """Stop the forwarder, then every replica with gunicorn's quick shutdown (a graceful one lingers STOP_LINGER
        seconds answering, which tests/app/serving/test_shutdown.py proves; here it only cost each test 8 s);
        their logs."""
        if self.forwarder is not None:
            out, _ = self.forwarder.communicate("", timeout=30)
            self.connections = json.loads(out.splitlines()[-1]) if out.strip() else {}
            self.forwarder = None
        for server in self.servers:
            server.stop()
        return [s.log.read_text(errors="replace") if s.log.exists() else "" for s in self.servers]


def start_replicas(
    installed: Installed,
    count: int,
    work: Path,
    env: dict[str, str] | None = None,
    kubeconfigs: Sequence[str] = (),
    forwarder: bool = True,
    own_env: Sequence[dict[str, str]] = (),
) -> Replicas:
    """`count` webhook processes behind the ClusterIP (the installed one stopped); each ready before return.
    ``kubeconfigs``: each replica's own (its own way to the API server); ``forwarder``: False when the caller
    puts its own Service in front of them; ``own_env``: each replica's environment on top of ``env``."""
    installed.webhook.stop()
    work.mkdir(parents=True, exist_ok=True)
    replicas = Replicas([])
    try:
        for i in range(count):
            server = installed.webhook.with_address("127.0.0.1", free_port(), work / f"replica-{i}.log")
            server.env = {**server.env, **(env or {}), **(own_env[i] if i < len(own_env) else {})}
            if kubeconfigs:
                server = replace(server, kubeconfig=kubeconfigs[i])
            replicas.servers.append(server.launch())
        for server in replicas.servers:  # started together, then each waited for
            server.ready()
        backends = [f"{s.host}:{s.port}" for s in replicas.servers]
        if forwarder:
            replicas.forwarder = forward(f"{installed.cluster_ip}:443", backends)
    except BaseException:
        replicas.stop()
        raise
    return replicas


def forward(listen: str, backends: list[str]) -> subprocess.Popen[str]:
    """The round-robin forwarder (testbed/forwarder.py) on ``listen`` (host:port), listening on return.
    Closing its stdin stops it; it then prints the connections it gave each backend, as JSON."""
    command = [sys.executable, "-m", "testbed.forwarder", listen, *backends]
    forwarder = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert forwarder.stdout is not None
    if forwarder.stdout.readline().strip() != "listening":
        forwarder.kill()
        raise RuntimeError(f"the forwarder on {listen} did not start")
    return forwarder
