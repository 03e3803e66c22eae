"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver and kube-controller-manager.

Built from Go modules by scripts/kube-binaries.sh (the newest pinned version, and the oldest the manifests
support). The controller-manager runs the real controllers, so a Deployment makes a ReplicaSet that makes Pods
through admission, a Job and a CronJob make Pods, deleted namespaces are finalized and every namespace gets its
`default` ServiceAccount. There is no kubelet and no scheduler: Pods stay Pending. The service CIDR is a random
/24 inside 127.0.0.0/8, so a Service's ClusterIP is a loopback address this machine can bind, and the API
server's calls to a webhook Service never leave the host.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from testbed import ROOT
from testbed.polling import eventually
from testbed.ports import free_port

ADMIN_TOKEN = "admin-token-for-tests"  # a test cluster's static token, loopback only
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
BUILD_SCRIPT = ROOT / "scripts" / "kube-binaries.sh"
# Controllers that need nodes or signing files this fixture does not have (names as of 1.30 and later).
NOT_HERE = (
    "node-ipam-controller",
    "node-lifecycle-controller",
    "persistentvolume-attach-detach-controller",
    "certificatesigningrequest-signing-controller",
)


@dataclass(frozen=True)
class Binaries:
    apiserver: Path
    controller_manager: Path
    etcd: Path


def pinned_versions() -> list[str]:
    """The Kubernetes versions scripts/kube-binaries.sh can build, oldest first (e.g. ['1.30.14', '1.37.2'])."""
    return sorted(
        (p.name[1:] for p in (ROOT / "tests" / "realkube" / "kube").glob("v*") if (p / "go.mod").exists()),
        key=lambda v: tuple(int(n) for n in v.split(".")),
    )


def workload_api(minor: int) -> str:
    """The scheduling.k8s.io version that serves PodGroups in Kubernetes 1.``minor`` ("" none)."""
    return "scheduling.k8s.io/v1beta1" if minor >= 37 else "scheduling.k8s.io/v1alpha2" if minor == 36 else ""


def binaries_from_env() -> Binaries | None:
    """KUBE_APISERVER_BIN, KUBE_CONTROLLER_MANAGER_BIN and ETCD_BIN, when set (all or none)."""
    names = ("KUBE_APISERVER_BIN", "KUBE_CONTROLLER_MANAGER_BIN", "ETCD_BIN")
    paths = [os.environ.get(name) for name in names]
    if not any(paths):
        return None
    if not all(paths):
        raise RuntimeError(f"set all of {', '.join(names)}, or none")
    return Binaries(*(Path(p) for p in paths if p))


def build_binaries(version: str) -> Binaries:
    """scripts/kube-binaries.sh VERSION: builds once into the user's cache, then reuses it.

    Raises FileNotFoundError when it cannot build here (exit 3: no Go toolchain; 4: no module proxy),
    RuntimeError on any other failure."""
    bin_dir = _built(f"Kubernetes v{version}", version)
    return Binaries(bin_dir / "kube-apiserver", bin_dir / "kube-controller-manager", bin_dir / "etcd")


def build_scheduler(version: str) -> Path:
    """kube-scheduler of `version` (scripts/kube-binaries.sh --scheduler, cached apart), or KUBE_SCHEDULER_BIN
    when set; raises as `build_binaries` does."""
    from_env = os.environ.get("KUBE_SCHEDULER_BIN")
    return (
        Path(from_env) if from_env else _built(f"kube-scheduler v{version}", "--scheduler", version) / "kube-scheduler"
    )


def build_promtool() -> Path:
    """promtool of the pinned Prometheus (scripts/kube-binaries.sh --promtool, cached like the rest), or
    PROMTOOL_BIN when set; raises as `build_binaries` does."""
    from_env = os.environ.get("PROMTOOL_BIN")
    return Path(from_env) if from_env else _built("promtool", "--promtool") / "promtool"


def _built(what: str, *args: str) -> Path:
    """The bin directory scripts/kube-binaries.sh ARGS prints (building `what` the first time)."""
    done = subprocess.run(["bash", str(BUILD_SCRIPT), *args], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode in (3, 4):
        why = "a Go toolchain (go)" if done.returncode == 3 else "the Go module proxy"
        raise FileNotFoundError(f"{BUILD_SCRIPT} needs {why} to build {what}")
    if done.returncode != 0:
        raise RuntimeError(
            f"{BUILD_SCRIPT} {' '.join(args)} exited {done.returncode} (its progress is on stderr above)"
        )
    return Path(done.stdout.strip().splitlines()[-1])


def kubectl_binary() -> str:
    """kubectl from the venv (the test extra installs it next to the interpreter), else from PATH."""
    beside = Path(sys.executable).with_name("kubectl")
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        raise FileNotFoundError("kubectl not found next to the Python interpreter or on PATH")
    return found


def python_tool(name: str) -> str:
    """A console script installed next to the running interpreter (certgen, hami-webhook)."""
    return str(Path(sys.executable).with_name(name))


def random_service_cidr() -> ipaddress.IPv4Network:
    """A /24 inside 127.0.0.0/8 that concurrent test runs are unlikely to share (127.1.x - 127.254.x)."""
    return ipaddress.IPv4Network(f"127.{random.randint(1, 254)}.{random.randint(0, 255)}.0/24")


@dataclass
class RealKube:
    """etcd + kube-apiserver + kube-controller-manager under `run_dir`; `start()` waits until they serve,
    `stop()` ends them by PID."""

    binaries: Binaries
    run_dir: Path
    service_cidr: ipaddress.IPv4Network = field(default_factory=random_service_cidr)
    controllers: bool = True
    port: int = 0
    etcd_url: str = ""  # its v3 JSON gateway lets a test compact the history, as etcd's own schedule would
    version: str = ""  # gitVersion from /version
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig_path(self) -> str:
        return str(self.run_dir / "kubeconfig")

    @property
    def ca_path(self) -> Path:
        return self.run_dir / "apiserver-ca.crt"

    @property
    def serving_pair(self) -> tuple[Path, Path]:
        """The API server's serving certificate (the leaf, then the self-signed CA `ca_path` holds) and key."""
        serving = self.run_dir / "certs" / "serving"
        return serving / "apiserver.crt", serving / "apiserver.key"

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])

    def _workload_api(self) -> list[str]:
        """From 1.36: the Workload API (PodGroups of scheduling.k8s.io, Pods' spec.schedulingGroup), which gangs are
        declared with: alpha (v1alpha2) in 1.36, beta (v1beta1) from 1.37; off by default, and nothing else here
        uses it."""
        done = subprocess.run([str(self.binaries.apiserver), "--version"], capture_output=True, text=True, check=True)
        version = workload_api(int(done.stdout.split()[-1].lstrip("v").split(".")[1]))
        return [] if not version else ["--feature-gates=GenericWorkload=true", f"--runtime-config={version}=true"]

    def start(self, timeout: float = 120.0) -> RealKube:
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
                "--unsafe-no-fsync",  # a throwaway store: the same data, without waiting on the disk
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
                # A loopback address cannot be published as the `kubernetes` Service's endpoint (1.31+ refuse it).
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.port}",
                f"--cert-dir={certs / 'serving'}",
                f"--token-auth-file={certs / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={self.service_cidr}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={certs / 'sa.pub'}",
                f"--service-account-signing-key-file={certs / 'sa.key'}",
                "--profiling=false",
                *self._workload_api(),
            ],
        )
        self._wait(f"{self.url}/readyz", timeout, ok=lambda body: body == "ok", token=ADMIN_TOKEN)
        self._write_kubeconfig()
        self.version = json.loads(self._get(f"{self.url}/version", ADMIN_TOKEN))["gitVersion"]
        if self.controllers:
            self._spawn(
                "controller-manager",
                [
                    str(self.binaries.controller_manager),
                    f"--kubeconfig={self.kubeconfig_path}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={free_port()}",
                    f"--service-account-private-key-file={certs / 'sa.key'}",
                    f"--root-ca-file={self.ca_path}",
                    "--use-service-account-credentials=false",
                    f"--controllers=*,{','.join('-' + c for c in NOT_HERE)}",
                    "--kube-api-qps=200",
                    "--kube-api-burst=400",
                    "--concurrent-job-syncs=10",
                ],
            )
            # Ready when the ServiceAccount controller has made the `default` ServiceAccount of `default`.
            self.wait_for(lambda: self._exists("/api/v1/namespaces/default/serviceaccounts/default"), timeout)
        return self

    def stop(self) -> None:
        for name in reversed(list(self._procs)):  # controllers, then the API server, then etcd
            proc = self._procs.pop(name)
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)

    def signal(self, name: str, signum: int) -> None:
        """Send ``signum`` to one of the control plane's processes ("etcd", "apiserver"): SIGSTOP pauses it."""
        self._procs[name].send_signal(signum)

    def restart_apiserver(self, timeout: float = 120.0) -> None:
        """SIGKILL kube-apiserver and start it again with the same arguments, on the same port; until ready."""
        proc = self._procs["apiserver"]
        proc.kill()
        proc.wait(timeout=10)
        self._spawn("apiserver", proc.args)
        self._wait(f"{self.url}/readyz", timeout, ok=lambda body: body == "ok", token=ADMIN_TOKEN)

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

    def get(self, *what: str, namespace: str | None = None) -> dict[str, Any]:
        """`kubectl get WHAT -o json`; AssertionError when it does not exist."""
        scope = ["-n", namespace] if namespace else []
        return json.loads(self.kubectl("get", *what, *scope, "-o", "json").stdout)  # type: ignore[no-any-return]

    def read(self, path: str) -> dict[str, Any]:
        """GET `path` (e.g. "/api/v1/namespaces") as admin, straight over HTTPS: for per-test bookkeeping,
        where a kubectl process each time would cost more than the test."""
        return json.loads(self._get(f"{self.url}{path}", ADMIN_TOKEN))  # type: ignore[no-any-return]

    def call(
        self, method: str, path: str, body: dict[str, Any], *, token: str = ADMIN_TOKEN, as_user: str = ""
    ) -> tuple[int, dict[str, Any]]:
        """One write straight over HTTPS (POST a JSON object, PATCH a JSON merge patch) with ``token``, as
        ``as_user`` when given (impersonated, as an authenticating proxy names a user): the HTTP status and the
        object or Status answered. For tests that ask the API server many questions, where a kubectl process each
        would cost more than the test."""
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
        if as_user:
            headers["Impersonate-User"] = as_user
        request = urllib.request.Request(f"{self.url}{path}", json.dumps(body).encode(), headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30, context=self._context()) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def exists(self, *what: str, namespace: str | None = None) -> bool:
        scope = ["-n", namespace] if namespace else []
        return self.kubectl("get", *what, *scope, "-o", "name", "--ignore-not-found", check=False).stdout.strip() != ""

    def namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        """Create namespace `name` and wait for its `default` ServiceAccount, which every Pod needs to be
        admitted (the ServiceAccount admission plugin) and which the controller-manager makes a moment later."""
        obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
        self.kubectl("apply", "-f", "-", stdin=json.dumps(obj))
        if self.controllers:
            self.wait_for(lambda: self._exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), 60)
        return name

    def compact(self) -> None:
        """Compact etcd's history up to now, as the API server's own schedule would (every 5 minutes)."""
        head = json.loads(self._post(f"{self.etcd_url}/v3/kv/range", {"key": "AA=="}))["header"]["revision"]
        self._post(f"{self.etcd_url}/v3/kv/compaction", {"revision": head, "physical": True})

    def kubeconfig_for(self, token: str, path: Path) -> str:
        """A kubeconfig like the admin's that authenticates with `token` (e.g. a ServiceAccount's)."""
        path.write_text(kubeconfig(self.url, self.ca_path, token))
        return str(path)

    def account(self, namespace: str, name: str, path: Path, *grants: str, cluster_wide: bool = False) -> str:
        """A kubeconfig for a new ServiceAccount `namespace/name` that may do only `grants` (`kubectl create role`
        arguments: "--verb=get", "--resource=secrets"; none: nothing), so a 403 comes from the real RBAC
        authorizer. The grant is a Role in `namespace`, or with `cluster_wide` a ClusterRole named
        `namespace-name`, which the caller deletes. Returns once the authorizer allows what was granted."""
        self.kubectl("create", "serviceaccount", name, "-n", namespace)
        if grants:
            role, scope = ("clusterrole", []) if cluster_wide else ("role", ["-n", namespace])
            role_name = f"{namespace}-{name}" if cluster_wide else name
            self.kubectl("create", role, role_name, *scope, *grants)
            account = f"--serviceaccount={namespace}:{name}"
            self.kubectl("create", f"{role}binding", role_name, *scope, f"--{role}={role_name}", account)
            # The authorizer learns of new bindings from a watch.
            options = dict(grant.removeprefix("--").split("=", 1) for grant in grants)
            user = f"system:serviceaccount:{namespace}:{name}"
            can = ("auth", "can-i", options["verb"], options["resource"], *scope, f"--as={user}")
            self.wait_for(lambda: self.kubectl(*can, check=False).returncode == 0, 30)
        token = self.kubectl("create", "token", name, "-n", namespace).stdout.strip()
        return self.kubeconfig_for(token, path)

    @staticmethod
    def wait_for(condition: Callable[[], object], timeout: float, interval: float = 0.2) -> Any:
        """Poll `condition` until it returns something true; its value, or TimeoutError. Every 0.2 s by default:
        most conditions run kubectl or a request to the API server."""
        return eventually(condition, timeout, interval=interval)

    def _spawn(self, name: str, argv: Sequence[str]) -> None:
        with open(self.run_dir / f"{name}.log", "ab") as log:  # a restarted process adds to its log
            self._procs[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )

    def _context(self) -> ssl.SSLContext:
        if self.ca_path.exists():
            return ssl.create_default_context(cafile=str(self.ca_path))
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the serving CA is not written yet
        return context

    def _get(self, url: str, token: str | None = None) -> str:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=5, context=self._context()
        ) as r:
            return r.read().decode()  # type: ignore[no-any-return]

    def _post(self, url: str, body: dict[str, Any]) -> str:
        request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.read().decode()  # type: ignore[no-any-return]

    def _exists(self, path: str) -> bool:
        try:
            self._get(f"{self.url}{path}", ADMIN_TOKEN)
            return True
        except urllib.error.HTTPError as exc:
            exc.close()  # it holds the response, and with it the connection
            return False

    def _wait(self, url: str, timeout: float, *, ok: Callable[[str], bool], token: str | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self._procs.values():
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited {proc.returncode}:\n{self.tails()}")
            try:
                if ok(self._get(url, token)):
                    return
            except (OSError, urllib.error.URLError, ValueError):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{url} not ready after {timeout:.0f} s:\n{self.tails()}")

    def tails(self) -> str:
        return "\n".join(f"--- {name}.log\n{self.log(name)[-3000:]}" for name in self._procs)

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
        pem = self.serving_pair[0].read_text()
        blocks = [b + "-----END CERTIFICATE-----\n" for b in pem.split("-----END CERTIFICATE-----") if b.strip()]
        self.ca_path.write_text(blocks[-1].lstrip())
        Path(self.kubeconfig_path).write_text(kubeconfig(self.url, self.ca_path, ADMIN_TOKEN))


def kubeconfig(url: str, ca: Path, token: str) -> str:
    """A kubeconfig for `url`, trusting the CA in file `ca`, with a bearer `token`."""
    cluster = {"server": url, "certificate-authority": str(ca)}
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "real", "cluster": cluster}],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [{"name": "real", "context": {"cluster": "real", "user": "user"}}],
            "current-context": "real",
        }
    )
