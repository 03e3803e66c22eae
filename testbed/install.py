"""Install hami-webhook into a RealKube the way a user does: `kubectl apply -k`, then what the kubelet would run.

The controller-manager turns the rendered Deployment and Job into Pods; with no kubelet they stay Pending, so the
test runs their containers here (testbed/kubelet.py): the certgen Job's Pod to completion, and the
webhook Deployment's container bound on the Service's ClusterIP and port. The API server resolves a webhook
Service to ClusterIP:port itself (no Endpoints, no kube-proxy), so that address is all the networking needed.
"""

from __future__ import annotations

import ipaddress
import json
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from testbed import ROOT
from testbed.cluster import LOOPBACK, RealKube, kubectl_binary, python_tool
from testbed.kubelet import Container, container, process_env, run
from testbed.tls import client_context

MANIFESTS = ROOT / "manifests"

NAMESPACE = "hami-system"
SERVICE = "hami-webhook"
SECRET = "hami-webhook-tls"
CA_SECRET = "hami-webhook-tls-ca"
CONFIGURATION = "hami-webhook-pods"
WEBHOOK = "pods.hami.io"
CERTGEN = "hami-webhook-certgen"
SERVICE_HOST = f"{SERVICE}.{NAMESPACE}.svc"
IGNORE_LABEL = {"hami.io/webhook": "ignore"}

Obj = dict[str, Any]


def rendered(directory: Path = MANIFESTS) -> list[Obj]:
    """The install `kubectl kustomize directory` renders (default: the shipped certgen mode)."""
    return kustomize(directory)


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


def apply(kube: RealKube, *objects: Obj) -> str:
    """`kubectl apply -f -` of `objects`; kubectl's stderr (the server's warnings)."""
    return kube.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in objects)).stderr


def get(kube: RealKube, *what: str, namespace: str | None = None) -> Obj:
    return kube.get(*what, namespace=namespace)


def token(kube: RealKube, service_account: str, ns: str = NAMESPACE) -> str:
    """A bound token for `service_account` from the TokenRequest API (what the kubelet would project)."""
    return kube.kubectl("create", "token", service_account, "-n", ns).stdout.strip()


def pod_of(kube: RealKube, selector: str, timeout: float = 60) -> Obj:
    """The first Pod in hami-system matching the label `selector`, once a controller has created it."""

    def found() -> Obj | None:
        items = kube.get("pods", "-l", selector, namespace=NAMESPACE)["items"]
        return items[0] if items else None

    return kube.wait_for(found, timeout)  # type: ignore[no-any-return]


def run_pod(kube: RealKube, pod: Obj, work: Path) -> list[subprocess.CompletedProcess[str]]:
    """Run a stored Pod's containers in order (init first) with its ServiceAccount's token, as the kubelet
    would; then record the outcome in its status, so its Job controller sees it finish."""
    account = pod["spec"].get("serviceAccountName", "default")
    work.mkdir(parents=True, exist_ok=True)
    kubeconfig = kube.kubeconfig_for(token(kube, account), work / f"{account}.kubeconfig")
    spec = pod["spec"]
    done = []
    for ctr in (spec.get("initContainers") or []) + spec["containers"]:
        done.append(run(container(kube, pod, ctr["name"], NAMESPACE, work / pod["metadata"]["name"]), kubeconfig))
        if done[-1].returncode != 0:
            break
    phase = "Succeeded" if all(d.returncode == 0 for d in done) else "Failed"
    kube.kubectl(
        "patch", "pod", pod["metadata"]["name"], "-n", NAMESPACE, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"phase": phase}}),
    )  # fmt: skip
    return done


def run_job(kube: RealKube, work: Path, name: str = CERTGEN) -> list[subprocess.CompletedProcess[str]]:
    """Run the Pod the Job controller made for Job `name` (as the rendered manifests spell its commands)."""
    pod = pod_of(kube, f"batch.kubernetes.io/job-name={name}")
    done = run_pod(kube, pod, work)
    for step in done:
        if step.returncode != 0:
            raise AssertionError(f"{step.args} exited {step.returncode}:\n{step.stdout}\n{step.stderr}")
        assert "PRIVATE KEY" not in step.stdout + step.stderr
    return done


@dataclass
class WebhookServer:
    """The Deployment's webhook container as a local process, listening on `host`:`port`."""

    ctr: Container
    kubeconfig: str
    host: str
    port: int
    ca: Path
    log: Path
    env: dict[str, str] = field(default_factory=dict)  # on top of the container's own
    _proc: subprocess.Popen[bytes] | None = None
    _terminated: bool = False

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def with_address(self, host: str, port: int, log: Path) -> WebhookServer:
        """Another replica of the same container, listening elsewhere."""
        return replace(self, host=host, port=port, log=log, _proc=None, _terminated=False)

    def start(self, timeout: float = 120) -> WebhookServer:
        return self.launch().ready(timeout)

    def launch(self) -> WebhookServer:
        """Start the process, without waiting for it to be ready."""
        env = process_env(self.ctr, self.kubeconfig) | {"HAMI_WEBHOOK_BIND": f"{self.host}:{self.port}"} | self.env
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                self.ctr.argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        return self

    def ready(self, timeout: float = 120) -> WebhookServer:
        """Wait until /readyz answers 200; stopped, with its log in the error, if it never does."""
        deadline = time.monotonic() + timeout
        while self.status("/readyz") != 200:  # with quota on: after the first Pod/ResourceQuota list
            if not self.running or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"webhook on {self.host}:{self.port} did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)
        return self

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM: a graceful shutdown, STOP_LINGER seconds and more) without waiting."""
        if self._proc is not None and self._proc.poll() is None and not self._terminated:
            self._proc.terminate()
            self._terminated = True

    def stop(self) -> None:
        """Stop it now, with gunicorn's quick shutdown (SIGQUIT: the workers exit at once, without STOP_LINGER's
        seconds of answering): for a test that needs it gone, not its graceful shutdown, which a test proves on
        its own (tests/app/serving/test_shutdown.py). After `terminate`, wait for that graceful exit instead."""
        if self._proc is not None and self._proc.poll() is None:
            if not self._terminated:
                self._proc.send_signal(signal.SIGQUIT)
            try:
                self._proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
        self._proc, self._terminated = None, False

    def status(self, path: str, timeout: float = 2) -> int:
        """HTTP status of GET `path`, TLS verified as the API server does (CA bundle, name = the Service's)."""
        context = client_context(self.ca)
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout) as raw:
                with context.wrap_socket(raw, server_hostname=SERVICE_HOST) as tls:
                    tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {SERVICE_HOST}\r\nConnection: close\r\n\r\n".encode())
                    return int(tls.recv(64).split()[1])
        except (OSError, IndexError, ValueError):
            return 0


@dataclass
class Installed:
    kube: RealKube
    objects: list[Obj]  # what `kubectl apply -k` applied
    cluster_ip: str
    ca_bundle: str  # base64, as in the Secret and caBundle
    certgen_kubeconfig: str  # authenticates as ServiceAccount hami-webhook-certgen
    webhook_kubeconfig: str  # authenticates as ServiceAccount hami-webhook
    webhook: WebhookServer
    work: Path
    apply_warnings: str  # what `kubectl apply -k` printed on stderr


def cluster_ip(kube: RealKube) -> str:
    """The Service's ClusterIP; refuses anything outside 127.0.0.0/8 (we are about to bind it)."""
    ip = get(kube, "service", SERVICE, namespace=NAMESPACE)["spec"]["clusterIP"]
    if ipaddress.ip_address(ip) not in LOOPBACK:
        raise RuntimeError(f"Service {SERVICE} got ClusterIP {ip}, outside 127.0.0.0/8: refusing to bind it")
    return str(ip)


def webhook_server(kube: RealKube, work: Path) -> WebhookServer:
    """The webhook container of a Pod the Deployment made, bound where the Service sends the API server."""
    pod = pod_of(kube, "app.kubernetes.io/component=webhook")
    (port,) = get(kube, "service", SERVICE, namespace=NAMESPACE)["spec"]["ports"]
    ip = cluster_ip(kube)
    ctr = container(
        kube, pod, "webhook", NAMESPACE, work / "webhook", binaries={"webhook": "hami-webhook"},
        listen={port["targetPort"]: (ip, port["port"])},
    )  # fmt: skip
    kubeconfig = kube.kubeconfig_for(token(kube, pod["spec"]["serviceAccountName"]), work / "webhook.kubeconfig")
    secret_dir = Path(ctr.env["HAMI_WEBHOOK_TLS_CERT"]).parent
    return WebhookServer(ctr, kubeconfig, ip, port["port"], secret_dir / "ca.crt", work / "webhook.log")


def install(kube: RealKube, work: Path, directory: Path = MANIFESTS) -> Installed:
    """`kubectl apply -k directory`, the certgen Job's Pod run to completion, and the webhook started."""
    work.mkdir(parents=True, exist_ok=True)
    warnings = kube.kubectl("apply", "-k", str(directory)).stderr
    run_job(kube, work / "certgen-job")
    server = webhook_server(kube, work)
    certgen = kube.kubeconfig_for(token(kube, CERTGEN), work / "certgen.kubeconfig")
    bundle = get(kube, "secret", SECRET, namespace=NAMESPACE)["data"]["ca.crt"]
    objects = rendered(directory)
    return Installed(
        kube, objects, server.host, bundle, certgen, server.kubeconfig, server.start(), work, warnings
    )  # fmt: skip


def wait_gone(kube: RealKube, *what: str, timeout: float = 60) -> None:
    kube.wait_for(lambda: not kube.exists(*what), timeout)


def kustomize(directory: Path) -> list[Obj]:
    """The objects ``kubectl kustomize directory`` renders; fails the test with kubectl's message."""
    proc = subprocess.run(
        [kubectl_binary(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, f"kubectl kustomize {directory} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
