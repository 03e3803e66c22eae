"""Install hami-webhook into a RealKube the way a user does, and run its server on the Service's ClusterIP.

The API server resolves a webhook Service to ClusterIP:port itself (no Endpoints, no kube-proxy), so
binding `hami-webhook serve` on that loopback address is all the "cluster networking" needed.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.realkube.cluster import LOOPBACK, RealKube, python_tool

NAMESPACE = "hami-system"
SERVICE = "hami-webhook"
SECRET = "hami-webhook-tls"
CA_SECRET = "hami-webhook-tls-ca"
CONFIGURATION = "hami-webhook"
WEBHOOK = "pods.hami.io"
SERVICE_HOST = f"{SERVICE}.{NAMESPACE}.svc"
IGNORE_LABEL = {"hami.io/webhook": "ignore"}


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE},
        "spec": {
            "selector": {"app.kubernetes.io/name": "hami-webhook"},
            "ports": [{"name": "https", "port": 443, "targetPort": "https"}],
        },
    }


def configuration(
    name: str = CONFIGURATION,
    *,
    api_version: str = "admissionregistration.k8s.io/v1",
    review_versions: tuple[str, ...] = ("v1",),
    namespace_selector: dict[str, Any] | None = None,
    **webhook: Any,
) -> dict[str, Any]:
    """The webhook's MutatingWebhookConfiguration (caBundle left to `certgen patch`)."""
    skip_ignored = {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]}
    return {
        "apiVersion": api_version,
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": WEBHOOK,
                "admissionReviewVersions": list(review_versions),
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "clientConfig": {"service": {"name": SERVICE, "namespace": NAMESPACE, "path": "/webhook", "port": 443}},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                "namespaceSelector": namespace_selector or skip_ignored,
                "objectSelector": skip_ignored,
            }
            | webhook
        ],
    }


def run_certgen(kubeconfig: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """`certgen ARGS --kubeconfig ...` as a separate process, exactly as a user (or the Job) runs it."""
    return subprocess.run(
        [python_tool("certgen"), *args, "--kubeconfig", kubeconfig],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def apply(kube: RealKube, *objects: dict[str, Any], token: str | None = None) -> None:
    kube.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in objects), token=token)


def get(kube: RealKube, *what: str, namespace: str | None = None) -> dict[str, Any]:
    scope = ["-n", namespace] if namespace else []
    return json.loads(kube.kubectl("get", *what, *scope, "-o", "json").stdout)  # type: ignore[no-any-return]


@dataclass
class WebhookServer:
    """`hami-webhook serve` on `host`:`port`, with the serving certificate certgen stored."""

    host: str
    port: int
    cert: Path
    key: Path
    ca: Path
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 30) -> WebhookServer:
        env = os.environ | {
            "HAMI_WEBHOOK_BIND": f"{self.host}:{self.port}",
            "HAMI_WEBHOOK_TLS_CERT": str(self.cert),
            "HAMI_WEBHOOK_TLS_KEY": str(self.key),
            "HAMI_WEBHOOK_WORKERS": "1",
        }
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                [python_tool("hami-webhook"), "serve"],
                env=env | self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while self.health() != 200:
            if not self.running or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"webhook on {self.host}:{self.port} did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
        self._proc = None

    def health(self) -> int:
        """Status of GET /healthz, verified like the API server does (CA bundle, name = the Service's)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        try:
            with socket.create_connection((self.host, self.port), timeout=2) as raw:
                with context.wrap_socket(raw, server_hostname=SERVICE_HOST) as tls:
                    tls.sendall(f"GET /healthz HTTP/1.1\r\nHost: {SERVICE_HOST}\r\nConnection: close\r\n\r\n".encode())
                    return int(tls.recv(64).split()[1])
        except (OSError, IndexError, ValueError):
            return 0


@dataclass
class Installed:
    kube: RealKube
    cluster_ip: str
    ca_bundle: str  # base64, as in the Secret and caBundle
    webhook: WebhookServer
    work: Path


def cluster_ip(kube: RealKube) -> str:
    """The Service's ClusterIP; refuses anything outside 127.0.0.0/8 (we are about to bind it)."""
    ip = get(kube, "service", SERVICE, namespace=NAMESPACE)["spec"]["clusterIP"]
    if ipaddress.ip_address(ip) not in LOOPBACK:
        raise RuntimeError(f"Service {SERVICE} got ClusterIP {ip}, outside 127.0.0.0/8: refusing to bind it")
    return str(ip)


def serving_files(kube: RealKube, work: Path) -> tuple[Path, Path, Path]:
    """tls.crt, tls.key and ca.crt of the serving Secret, as the Deployment's Secret volume would hold them."""
    data = get(kube, "secret", SECRET, namespace=NAMESPACE)["data"]
    tls = work / "tls"
    tls.mkdir(mode=0o700, exist_ok=True)
    paths = []
    for key in ("tls.crt", "tls.key", "ca.crt"):
        path = tls / key
        path.write_bytes(base64.b64decode(data[key]))
        paths.append(path)
    return paths[0], paths[1], paths[2]


def install(kube: RealKube, work: Path) -> Installed:
    apply(kube, namespace(NAMESPACE, IGNORE_LABEL), service())
    ip = cluster_ip(kube)
    for args in (
        ("create", "--namespace", NAMESPACE, "--secret-name", SECRET, "--host", SERVICE_HOST),
        ("patch", "--namespace", NAMESPACE, "--secret-name", SECRET, "--webhook-name", CONFIGURATION),
    ):
        if args[0] == "patch":
            apply(kube, configuration())
        done = run_certgen(kube.kubeconfig_path, *args)
        if done.returncode != 0:
            raise RuntimeError(f"certgen {args[0]} exited {done.returncode}: {done.stderr}")
    cert, key, ca = serving_files(kube, work)
    server = WebhookServer(ip, 443, cert, key, ca, work / "webhook.log").start()
    bundle = get(kube, "secret", SECRET, namespace=NAMESPACE)["data"]["ca.crt"]
    return Installed(kube, ip, bundle, server, work)
