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

from tests.manifests.conftest import MANIFESTS, kustomize
from tests.realkube.cluster import LOOPBACK, RealKube, python_tool

NAMESPACE = "hami-system"
SERVICE = "hami-webhook"
SECRET = "hami-webhook-tls"
CA_SECRET = "hami-webhook-tls-ca"
CONFIGURATION = "hami-webhook-pods"
WEBHOOK = "pods.hami.io"
SERVICE_HOST = f"{SERVICE}.{NAMESPACE}.svc"
IGNORE_LABEL = {"hami.io/webhook": "ignore"}
# What `kubectl kustomize manifests` renders that an API server alone can use. Deployment and Job need
# controllers that do not run here (the test runs their commands itself); policy/v1 PodDisruptionBudget
# and batch/v1 CronJob do not exist in 1.20 (1.21+); NetworkPolicy needs a network plugin.
APPLIED_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Service",
    "MutatingWebhookConfiguration",
)
NOT_IN_1_20 = (("policy/v1", "PodDisruptionBudget"), ("batch/v1", "CronJob"))

Obj = dict[str, Any]


def rendered() -> list[Obj]:
    """The shipped install: `kubectl kustomize manifests` (certgen TLS mode)."""
    return kustomize(MANIFESTS)


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    (found,) = (o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"]))
    return found


def namespace(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def job_commands(objects: list[Obj]) -> list[list[str]]:
    """The certgen Job's containers (init first) as argv, with $(POD_NAMESPACE) expanded as the kubelet does."""
    spec = one(objects, "Job")["spec"]["template"]["spec"]
    return [
        [*c["command"], *(a.replace("$(POD_NAMESPACE)", NAMESPACE) for a in c["args"])]
        for c in [*spec.get("initContainers", []), *spec["containers"]]
    ]


def run_certgen(kubeconfig: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """`certgen ARGS --kubeconfig ...` as a separate process, exactly as a user (or the Job) runs it."""
    return subprocess.run(
        [python_tool("certgen"), *args, "--kubeconfig", kubeconfig],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def apply(kube: RealKube, *objects: Obj, validate: bool = True) -> None:
    flags = [] if validate else ["--validate=false"]
    kube.kubectl("apply", *flags, "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in objects))


def get(kube: RealKube, *what: str, namespace: str | None = None) -> Obj:
    scope = ["-n", namespace] if namespace else []
    return json.loads(kube.kubectl("get", *what, *scope, "-o", "json").stdout)  # type: ignore[no-any-return]


def token(kube: RealKube, service_account: str) -> str:
    """A bound token for `service_account` in hami-system from the TokenRequest API (what a Pod would mount)."""
    return kube.kubectl("create", "token", service_account, "-n", NAMESPACE).stdout.strip()


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

    def start(self, timeout: float = 120) -> WebhookServer:
        env = os.environ | {
            "HAMI_WEBHOOK_BIND": f"{self.host}:{self.port}",
            "HAMI_WEBHOOK_TLS_CERT": str(self.cert),
            "HAMI_WEBHOOK_TLS_KEY": str(self.key),
            "HAMI_WEBHOOK_WORKERS": "1",
            # No metrics listener: its default, 0.0.0.0:9090, is off loopback and shared by every instance.
            "HAMI_METRICS_BIND": "",
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
        while self.status("/readyz") != 200:  # with quota on: after the first Pod/ResourceQuota list
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

    def status(self, path: str) -> int:
        """HTTP status of GET `path`, TLS verified as the API server does (CA bundle, name = the Service's)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        try:
            with socket.create_connection((self.host, self.port), timeout=2) as raw:
                with context.wrap_socket(raw, server_hostname=SERVICE_HOST) as tls:
                    tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {SERVICE_HOST}\r\nConnection: close\r\n\r\n".encode())
                    return int(tls.recv(64).split()[1])
        except (OSError, IndexError, ValueError):
            return 0


@dataclass
class Installed:
    kube: RealKube
    objects: list[Obj]  # what was applied from the rendered manifests
    cluster_ip: str
    ca_bundle: str  # base64, as in the Secret and caBundle
    certgen_kubeconfig: str  # authenticates as ServiceAccount hami-webhook-certgen
    webhook_kubeconfig: str  # authenticates as ServiceAccount hami-webhook
    webhook: WebhookServer
    work: Path


def cluster_ip(kube: RealKube) -> str:
    """The Service's ClusterIP; refuses anything outside 127.0.0.0/8 (we are about to bind it)."""
    ip = get(kube, "service", SERVICE, namespace=NAMESPACE)["spec"]["clusterIP"]
    if ipaddress.ip_address(ip) not in LOOPBACK:
        raise RuntimeError(f"Service {SERVICE} got ClusterIP {ip}, outside 127.0.0.0/8: refusing to bind it")
    return str(ip)


def mounted(kube: RealKube, kind: str, name: str, directory: Path) -> Path:
    """A Secret's or ConfigMap's keys as files, as a volume mount would hold them."""
    data = get(kube, kind, name, namespace=NAMESPACE)["data"]
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    for key, value in data.items():
        (directory / key).write_bytes(base64.b64decode(value) if kind == "secret" else value.encode())
    return directory


def install(kube: RealKube, work: Path) -> Installed:
    """Apply the rendered manifests, run the certgen Job's commands with its ServiceAccount's token, and
    start the webhook on the Service's ClusterIP with its own ServiceAccount's token."""
    objects = [o for o in rendered() if o["kind"] in APPLIED_KINDS]
    first = [o for o in objects if o["kind"] != "MutatingWebhookConfiguration"]
    apply(kube, *first)
    # kubectl checks objects against the server's schema, and 1.20's has no matchConditions (1.27+):
    # sent without that check, the server drops the field (see test_webhook).
    apply(kube, one(objects, "MutatingWebhookConfiguration"), validate=False)
    ip = cluster_ip(kube)
    certgen = kube.kubeconfig_for(token(kube, "hami-webhook-certgen"), work / "certgen.kubeconfig")
    for argv in job_commands(rendered()):
        assert argv[0] == "certgen", argv
        done = run_certgen(certgen, *argv[1:])
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
    tls = mounted(kube, "secret", SECRET, work / "tls")
    config = mounted(kube, "configmap", "hami-device-config", work / "config")
    webhook_kubeconfig = kube.kubeconfig_for(token(kube, "hami-webhook"), work / "webhook.kubeconfig")
    env = {
        "HAMI_NAMESPACE": NAMESPACE,
        "HAMI_DEVICE_CONFIG": str(config / "device-config.yaml"),
        "KUBECONFIG": webhook_kubeconfig,
    }
    server = WebhookServer(ip, 443, tls / "tls.crt", tls / "tls.key", tls / "ca.crt", work / "webhook.log", env)
    bundle = get(kube, "secret", SECRET, namespace=NAMESPACE)["data"]["ca.crt"]
    return Installed(kube, objects, ip, bundle, certgen, webhook_kubeconfig, server.start(), work)
