"""A real kube-apiserver v1.20.2 with its own etcd on 127.0.0.1, for tests that need the real thing.

Only the API server runs (no controller-manager, scheduler or kubelet): Pods stay Pending, no
ServiceAccount token is minted by a controller (use TokenRequest), no Endpoints are made. The service
CIDR is a random /24 inside 127.0.0.0/8, so a Service's ClusterIP is a loopback address this machine can
bind, and the API server's calls to a webhook Service never leave the host.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.kubeapi.server import kubectl_binary

ADMIN_TOKEN = "admin-token-for-tests"  # a test cluster's static token, loopback only
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "kube-apiserver.sh"


@dataclass(frozen=True)
class Binaries:
    apiserver: Path
    etcd: Path


def binaries_from_env() -> Binaries | None:
    """KUBE_APISERVER_BIN and ETCD_BIN, when set (both or neither)."""
    apiserver, etcd = os.environ.get("KUBE_APISERVER_BIN"), os.environ.get("ETCD_BIN")
    if not apiserver and not etcd:
        return None
    if not (apiserver and etcd):
        raise RuntimeError("set both KUBE_APISERVER_BIN and ETCD_BIN, or neither")
    return Binaries(Path(apiserver), Path(etcd))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def random_service_cidr() -> ipaddress.IPv4Network:
    """A /24 inside 127.0.0.0/8 that concurrent test runs are unlikely to share (127.1.x - 127.254.x)."""
    return ipaddress.IPv4Network(f"127.{random.randint(1, 254)}.{random.randint(0, 255)}.0/24")


@dataclass
class RealKube:
    """etcd + kube-apiserver under `run_dir`; `start()` waits until /readyz, `stop()` ends both by PID."""

    binaries: Binaries
    run_dir: Path
    service_cidr: ipaddress.IPv4Network = field(default_factory=random_service_cidr)
    port: int = 0
    etcd_url: str = ""  # its v3 JSON gateway lets a test compact the history, as etcd's own schedule would
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig_path(self) -> str:
        return str(self.run_dir / "kubeconfig")

    @property
    def ca_path(self) -> Path:
        return self.run_dir / "apiserver-ca.crt"

    def start(self, timeout: float = 90.0) -> RealKube:
        if not self.service_cidr.subnet_of(LOOPBACK):  # type: ignore[arg-type]
            raise ValueError(f"service CIDR {self.service_cidr} is outside 127.0.0.0/8: test traffic must stay local")
        certs = self.run_dir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        self._write_service_account_keys(certs)
        (certs / "tokens.csv").write_text(f"{ADMIN_TOKEN},admin,admin,system:masters\n")
        client_port, peer_port = free_port(), free_port()
        etcd_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        self.etcd_url = etcd_url
        self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=test",
                f"--data-dir={self.run_dir / 'etcd-data'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=test={peer_url}",
                "--listen-metrics-urls=",
            ],
        )
        self._wait(f"{etcd_url}/health", timeout, ok=lambda body: json.loads(body).get("health") == "true")
        self.port = free_port()
        self._spawn(
            "apiserver",
            [
                str(self.binaries.apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={certs / 'serving'}",
                f"--token-auth-file={certs / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={self.service_cidr}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={certs / 'sa.pub'}",
                f"--service-account-signing-key-file={certs / 'sa.key'}",
                "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
                # No controller mints ServiceAccount tokens here, so Pods must not need one.
                "--disable-admission-plugins=ServiceAccount",
                "--profiling=false",
            ],
        )
        self._wait(f"{self.url}/readyz", timeout, ok=lambda body: body == "ok", token=ADMIN_TOKEN)
        self._write_kubeconfig()
        return self

    def stop(self) -> None:
        for proc in reversed(self._procs):  # the API server first, then etcd
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        self._procs.clear()

    def log(self, name: str) -> str:
        path = self.run_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kubectl(
        self,
        *args: str,
        kubeconfig: str | None = None,
        stdin: str | None = None,
        check: bool = True,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this server (as admin, or as the user of another `kubeconfig`)."""
        done = subprocess.run(
            [kubectl_binary(), "--kubeconfig", kubeconfig or self.kubeconfig_path, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def kubeconfig_for(self, token: str, path: Path) -> str:
        """A kubeconfig like the admin's that authenticates with `token` (e.g. a ServiceAccount's)."""
        path.write_text(_kubeconfig(self.url, self.ca_path, token))
        return str(path)

    def _spawn(self, name: str, argv: Sequence[str]) -> None:
        with open(self.run_dir / f"{name}.log", "wb") as log:
            self._procs.append(
                subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
            )

    def _wait(self, url: str, timeout: float, *, ok: Any, token: str | None = None) -> None:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the serving CA is not written yet
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited {proc.returncode}:\n{self._tails()}")
            try:
                with urllib.request.urlopen(
                    urllib.request.Request(url, headers=headers), timeout=5, context=context
                ) as r:
                    if ok(r.read().decode()):
                        return
            except (OSError, urllib.error.URLError, ValueError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{url} not ready after {timeout:.0f} s:\n{self._tails()}")

    def _tails(self) -> str:
        return "\n".join(f"--- {name}.log\n{self.log(name)[-3000:]}" for name in ("etcd", "apiserver"))

    def _write_service_account_keys(self, certs: Path) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (certs / "sa.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        (certs / "sa.pub").write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )

    def _write_kubeconfig(self) -> None:
        # The self-signed serving certificate file holds the leaf, then the CA that signed it.
        pem = (self.run_dir / "certs" / "serving" / "apiserver.crt").read_text()
        blocks = [b + "-----END CERTIFICATE-----\n" for b in pem.split("-----END CERTIFICATE-----") if b.strip()]
        self.ca_path.write_text(blocks[-1].lstrip())
        Path(self.kubeconfig_path).write_text(_kubeconfig(self.url, self.ca_path, ADMIN_TOKEN))


def _kubeconfig(url: str, ca: Path, token: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "real", "cluster": {"server": url, "certificate-authority": str(ca)}}],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [{"name": "real", "context": {"cluster": "real", "user": "user"}}],
            "current-context": "real",
        }
    )


def build_binaries() -> Binaries:
    """Run scripts/kube-apiserver.sh (builds once into the user's cache, then reuses it)."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} exited {done.returncode} (its progress is on stderr above)")
    bin_dir = Path(done.stdout.strip().splitlines()[-1])
    return Binaries(bin_dir / "kube-apiserver", bin_dir / "etcd")


def python_tool(name: str) -> str:
    """A console script installed next to the running interpreter (certgen, hami-webhook)."""
    return str(Path(sys.executable).with_name(name))
