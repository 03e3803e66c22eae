"""HAMi's scheduler as its Helm chart runs it, in a RealKube with no kubelet, and GPU Nodes as HAMi's NVIDIA
device plugin registers them.

`install_chart` applies the chart's own objects for the scheduler and the device plugin's ServiceAccount, as Helm's
engine renders them for the cluster's version (testbed/hami.py `manifests`) and for a release named `gpu` in
`hami-system`, so every name is the release's (`gpu-hami-scheduler`), not the install guide's `hami` in `kube-
system` that the allocation guard once pinned: ServiceAccounts, RBAC, the scheduler's ConfigMaps and its Deployment,
plus the TLS Secret the chart's certificate Job would make. The Deployment's Pod stays Pending (nothing runs
default-scheduler here); `run_scheduler` runs its two containers as the kubelet would (testbed/kubelet.py),
each with a TokenRequest token of the Pod's ServiceAccount: kube-scheduler with the chart's `hami-scheduler` profile
and HAMi's cmd/scheduler as its extender (/filter, /bind). What the Pod's network namespace and projected token
would give them is spelled out instead:
- the extender's port 443 is a free loopback port, and the extender URL in the chart's ConfigMap
  (https://127.0.0.1:443, the Pod's own loopback) names that port;
- kube-scheduler gets the token in its configuration's clientConnection.kubeconfig (in a Pod: the in-cluster
  config), and its secure port, which the chart leaves at 0.0.0.0:10259, on 127.0.0.1 and a free port.

There is no kubelet and no device plugin either: `register_node` does their part for a GPU node, and
`updates_after_allocate` spells out the device plugin's writes after the kubelet's Allocate. `chart_accounts`
and `ascend_device_plugin` install only the ServiceAccounts and RBAC of HAMi's components, for clusters that run
none of them.
"""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed import hami
from testbed.cluster import RealKube
from testbed.install import apply, token
from testbed.kubelet import container, process_env
from testbed.nodes import gpu, register
from testbed.ports import free_port

Obj = dict[str, Any]
RELEASE, HAMI_NAMESPACE = "gpu", "hami-system"  # helm install gpu hami-charts/hami -n hami-system
SCHEDULER = "hami-scheduler"  # the chart's default schedulerName (and its leader-election Lease)
COMPONENT = "hami-scheduler"  # the scheduler Pod's app.kubernetes.io/component, whatever the release and name
SCHEDULER_ACCOUNT = f"{RELEASE}-hami-scheduler"  # the scheduler's ServiceAccount, Deployment and ConfigMap
DEVICE_PLUGIN = f"{RELEASE}-hami-device-plugin"  # the device plugin DaemonSet's ServiceAccount
TLS_SECRET = f"{SCHEDULER_ACCOUNT}-tls"
EXTENDER, KUBE_SCHEDULER = "vgpu-scheduler-extender", "kube-scheduler"  # the Deployment's containers
LOGS = ("hami-scheduler", "kube-scheduler")  # their logs, in that order, under the work directory
RBAC = ("serviceaccount", "clusterrole", "clusterrolebinding", "role", "rolebinding")
ACCOUNTS = [  # the ServiceAccounts of the scheduler and of the NVIDIA device plugin, with their RBAC
    *(f"templates/scheduler/{name}.yaml" for name in RBAC),
    *(f"templates/device-plugin/monitor{name}.yaml" for name in ("serviceaccount", "role", "rolebinding")),
]
TEMPLATES = [
    *ACCOUNTS,
    *(f"templates/scheduler/{name}.yaml" for name in ("configmap", "device-configmap", "deployment")),
]
# HAMi's Ascend device plugin (Project-HAMi/ascend-device-plugin, its chart's templates/rbac.yaml and
# values.yaml: ServiceAccount and ClusterRole `hami-ascend`), installed in a namespace of its own.
ASCEND_NAMESPACE, ASCEND_ACCOUNT = "hami-ascend", "hami-ascend"
ASCEND_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "update", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "update", "patch"]},
]
# HAMi's names (pkg/util, pkg/device, pkg/util/nodelock, pkg/device/nvidia).
REGISTER = "hami.io/node-nvidia-register"
HANDSHAKE = "hami.io/node-handshake"
NODE_LOCK = "hami.io/mutex.lock"
BIND_PHASE = "hami.io/bind-phase"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
NOT_READY = "node.kubernetes.io/not-ready"


def install_chart(
    kube: RealKube, reference: hami.Reference, work: Path, scheduler: str = SCHEDULER, **values: str
) -> int:
    """Apply the chart's objects (above) as `helm install --set schedulerName=SCHEDULER` (and any other ``values``)
    would; the port the extender will listen on."""
    from certgen.local import write_local

    port = free_port()
    # hami-webhook's manifests make hami-system enforce the restricted Pod Security Standard; HAMi's scheduler
    # Pod sets no securityContext, so an admin installing HAMi there relaxes it first, as here.
    enforce = "pod-security.kubernetes.io/enforce=privileged"
    kube.kubectl("label", "namespace", HAMI_NAMESPACE, enforce, "--overwrite")
    values = {"schedulerName": scheduler, **values}
    objects = reference.manifests(kube.version, *TEMPLATES, release=RELEASE, namespace=HAMI_NAMESPACE, values=values)
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == SCHEDULER_ACCOUNT:
            config = obj["data"]["config.yaml"]
            assert "https://127.0.0.1:443" in config, config
            obj["data"]["config.yaml"] = config.replace("https://127.0.0.1:443", f"https://127.0.0.1:{port}")
    # The chart's certificate Job: a Secret with tls.crt and tls.key for these names.
    pki = write_local(work / "scheduler-tls", [f"{SCHEDULER_ACCOUNT}.{HAMI_NAMESPACE}.svc", "127.0.0.1"])
    kube.kubectl(
        "create", "secret", "tls", TLS_SECRET, "-n", HAMI_NAMESPACE, f"--cert={pki.cert}", f"--key={pki.key}"
    )  # fmt: skip
    apply(kube, *objects)
    return port


def chart_accounts(kube: RealKube, reference: hami.Reference) -> list[Obj]:
    """The chart's scheduler and NVIDIA device plugin ServiceAccounts and their RBAC, as `helm install` makes them
    (release `gpu` in `hami-system`); applied, and returned for the caller to delete."""
    objects = reference.manifests(kube.version, *ACCOUNTS, release=RELEASE, namespace=HAMI_NAMESPACE)
    apply(kube, *objects)
    return objects


def ascend_device_plugin(kube: RealKube) -> list[Obj]:
    """HAMi's Ascend device plugin's namespace, ServiceAccount and RBAC as its chart makes them; applied, and
    returned for the caller to delete."""
    meta = {"name": ASCEND_ACCOUNT}
    subject = {"kind": "ServiceAccount", "name": ASCEND_ACCOUNT, "namespace": ASCEND_NAMESPACE}
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ASCEND_ACCOUNT}
    rbac = "rbac.authorization.k8s.io/v1"
    objects: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ASCEND_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**meta, "namespace": ASCEND_NAMESPACE}},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": meta, "rules": ASCEND_RULES},
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "subjects": [subject],
            "roleRef": role_ref,
        },
    ]
    apply(kube, *objects)
    return objects


@dataclass
class Running:
    """The scheduler Pod's two containers, running here, by log name (LOGS); their logs under `work`."""

    processes: dict[str, subprocess.Popen[bytes]]
    pod: Obj
    work: Path

    def logs(self) -> str:
        """The tail of each container's log."""
        tails = [(name, (self.work / f"{name}.log").read_text(errors="replace")[-6000:]) for name in LOGS]
        return "\n".join(f"--- {name}.log\n{tail}" for name, tail in tails)

    def check(self) -> None:
        """AssertionError with the logs when a container has exited."""
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited {proc.returncode}:\n{self.logs()}")


@dataclass
class Scheduling:
    """HAMi's scheduler running for a module's tests: its containers, its extender's port, and a kubeconfig of the
    device plugin's ServiceAccount (who registers GPU Nodes)."""

    running: Running
    port: int
    device_plugin: str

    def filter(self, pod: Obj, nodes: list[Obj]) -> tuple[list[str], dict[str, str]]:
        """Where HAMi's filter places ``pod`` among ``nodes`` as they are, with nothing running (the node it picks;
        none: Pending), and why each other node failed, in HAMi's words: its extender's
        /filter given the Nodes themselves (ExtenderArgs.Nodes), the simulation path HAMi serves for autoscalers,
        which builds each node's devices from its annotations (pkg/scheduler/scheduler.go filterSimulation) and
        runs the same calcScore as a real filter, writing nothing."""
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the chart's self-made certificate
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=30)
        try:
            # The names too: a Pod asking nothing of HAMi is answered with the names it was given (all of them).
            names = [node["metadata"]["name"] for node in nodes]
            body = json.dumps({"pod": pod, "nodes": {"items": nodes}, "nodenames": names})
            connection.request("POST", "/filter", body, {"Content-Type": "application/json"})
            answer = json.loads(connection.getresponse().read())
        finally:
            connection.close()
        answer = {key.lower(): value for key, value in answer.items()}  # ExtenderFilterResult has no json tags
        assert not answer.get("error"), answer
        placed = [node["metadata"]["name"] for node in (answer.get("nodes") or {}).get("items") or []]
        placed = placed or list(answer.get("nodenames") or [])
        return placed, answer.get("failednodes") or {}


@contextmanager
def run_scheduler(
    kube: RealKube,
    reference: hami.Reference,
    kube_scheduler: Path,
    port: int,
    work: Path,
    scheduler_name: str = SCHEDULER,
) -> Iterator[Running]:
    """The Deployment's Pod's containers as local processes until the block ends; ready once kube-scheduler
    holds the chart's leader-election Lease, named after `scheduler_name` (HAMi's extender acts as the leader,
    registering nodes and answering /readyz, only beside the Lease's holder: the same host)."""
    pod = kube.wait_for(lambda: _scheduler_pod(kube), 60)
    account = token(kube, pod["spec"]["serviceAccountName"], HAMI_NAMESPACE)
    kubeconfig = kube.kubeconfig_for(account, work / "scheduler.kubeconfig")
    programs = {"scheduler": reference.scheduler, "kube-scheduler": kube_scheduler}
    root = work / "scheduler-pod"
    extender = container(
        kube, pod, EXTENDER, HAMI_NAMESPACE, root, listen={"https": ("127.0.0.1", port)}, programs=programs
    )
    scheduler = container(kube, pod, KUBE_SCHEDULER, HAMI_NAMESPACE, root, programs=programs)
    # With --config, kube-scheduler takes its client from the file's clientConnection (in a Pod: in-cluster).
    (config,) = (arg for arg in scheduler.argv if arg.startswith("--config="))
    settings = yaml.safe_load(Path(config.removeprefix("--config=")).read_text())
    settings["clientConnection"] = {"kubeconfig": kubeconfig}
    local = work / "kube-scheduler-config.yaml"
    local.write_text(yaml.safe_dump(settings))
    scheduler.argv[scheduler.argv.index(config)] = f"--config={local}"
    scheduler.argv += ["--bind-address=127.0.0.1", f"--secure-port={free_port()}"]
    running = Running({}, pod, work)
    try:
        for name, ctr in zip(LOGS, (extender, scheduler), strict=True):
            with open(work / f"{name}.log", "ab") as log:
                env = process_env(ctr, kubeconfig)
                running.processes[name] = subprocess.Popen(
                    ctr.argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
                )
        kube.wait_for(lambda: _ready(kube, running, scheduler_name), 60)
        yield running
    finally:
        for proc in running.processes.values():
            proc.terminate()
        for proc in running.processes.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def _scheduler_pod(kube: RealKube) -> Obj | None:
    items = kube.read(f"/api/v1/namespaces/{HAMI_NAMESPACE}/pods?labelSelector=app.kubernetes.io/component={COMPONENT}")
    return items["items"][0] if items["items"] else None


def _ready(kube: RealKube, running: Running, scheduler: str) -> bool:
    running.check()
    lease = kube.kubectl("get", "lease", scheduler, "-n", HAMI_NAMESPACE, "-o", "json", check=False)
    return lease.returncode == 0 and bool(json.loads(lease.stdout)["spec"].get("holderIdentity"))


def register_node(
    kube: RealKube, name: str, device_plugin: str, gpus: int = 1, devices: list[Obj] | None = None
) -> list[Obj]:
    """A GPU node as its kubelet, the node lifecycle controller and HAMi's NVIDIA device plugin make it; the
    devices registered (``gpus`` of testbed/nodes.py's defaults, or ``devices``). `device_plugin` is a kubeconfig
    of the device plugin's ServiceAccount."""
    devices = devices if devices is not None else [gpu(i, name) for i in range(gpus)]
    labels = {"kubernetes.io/hostname": name, "gpu": "on"}  # gpu=on: the device plugin DaemonSet's nodeSelector
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    kube.kubectl("create", "-f", "-", stdin=json.dumps(node))
    # The kubelet: capacity with the device plugin's devices (each GPU split into `count`), Ready.
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": str(sum(d["count"] for d in devices))}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
    status = {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}}
    kube.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    # The node lifecycle controller (not run here): a Ready node loses the taint the API server gave it at create.
    taints = kube.read(f"/api/v1/nodes/{name}")["spec"].get("taints") or []
    assert [t["key"] for t in taints] == [NOT_READY], taints
    kube.kubectl("taint", "node", name, f"{NOT_READY}:NoSchedule-")
    # The device plugin (RegisterInAnnotation): its devices in the register annotation, a merge patch.
    patch = {"metadata": {"annotations": {REGISTER: register(devices)}}}
    kube.kubectl("patch", "node", name, "--type=merge", "-p", json.dumps(patch), kubeconfig=device_plugin)
    return devices


def updates_after_allocate(pod: Obj, node: Obj) -> tuple[Obj, Obj, Obj]:
    """The writes of HAMi's NVIDIA device plugin once the kubelet's Allocate has served every container of
    `pod` on `node` (plugin/server.go Allocate, util.go): the pod's devices-to-allocate with each container's
    entry erased, then bind-phase `success`, then the node lock removed, guarded by the Node's resourceVersion.
    The pod's two merge patches, and the Node's."""
    pending = pod["metadata"]["annotations"][TO_ALLOCATE]
    erased = {"metadata": {"annotations": {TO_ALLOCATE: ";" * pending.count(";")}}}
    success = {"metadata": {"annotations": {BIND_PHASE: "success"}}}
    unlock = {"metadata": {"annotations": {NODE_LOCK: None}, "resourceVersion": node["metadata"]["resourceVersion"]}}
    return erased, success, unlock


def patch(
    kube: RealKube, kubeconfig: str, what: str, name: str, body: Obj, namespace: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`kubectl patch --type=merge` as the user of `kubeconfig`; not checked."""
    scope = ["-n", namespace] if namespace else []
    return kube.kubectl(
        "patch", what, name, *scope, "--type=merge", "-p", json.dumps(body), kubeconfig=kubeconfig, check=False
    )
