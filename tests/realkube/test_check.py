"""`kubectl hami check` against the shipped install on each pinned kube-apiserver: a healthy install checks clean;
each fault, made one at a time and undone, is named with its fix and the exit code says so; the webhook hanging
costs the check its timeout, no more; as the hami-webhook-checker roles the same answers, and nothing is written.

The install's cluster runs no kubelet and no scheduler, so the test does their part for what the check reads: a
Node registered as HAMi's NVIDIA device plugin registers it (hami_scheduler.register_node), the webhook's Pods bound
to it and reported Ready with an address (so the EndpointSlice controller lists them and the Deployment counts them),
and the leader-election Lease HAMi's scheduler holds under its name, renewed before each run. All undone after.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from certgen.certificates import KeyType, cert_pem, issue_ca
from testbed import ROOT
from testbed.cluster import RealKube, kubectl_binary, python_tool
from testbed.install import CONFIGURATION, NAMESPACE, Installed, apply, get, one
from testbed.polling import eventually
from testbed.ports import free_port
from testbed.rules import promtool_test, selector
from tests.realkube.hami_scheduler import REGISTER, SCHEDULER, register_node

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

NODE = "gpu-check"
WEBHOOK_PODS = "app.kubernetes.io/component=webhook"


@dataclass
class Cluster:
    """The shipped install made healthy for the check, and a namespace for its dry runs."""

    installed: Installed
    ns: str
    devices: list[dict[str, Any]]

    @property
    def kube(self) -> RealKube:
        return self.installed.kube

    def check(self, *args: str, kubeconfig: str | None = None) -> Checked:
        """`kubectl hami check -n NS ARGS` as a user runs it (the plugin's console script), HAMi's scheduler's
        Lease renewed first, as the scheduler keeps it."""
        renew_lease(self.kube)
        env = os.environ | {"KUBECONFIG": kubeconfig or self.kube.kubeconfig_path}
        started = time.monotonic()
        done = subprocess.run(
            [python_tool("kubectl-hami"), "check", "-n", self.ns, *args],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        return Checked(done.returncode, done.stdout, done.stderr, time.monotonic() - started)

    def webhook_pods_ready(self, ready: bool) -> None:
        """What the kubelet reports of the webhook's Pods: Running with an address, Ready while its probe passes."""
        pods = self.kube.get("pods", "-l", WEBHOOK_PODS, namespace=NAMESPACE)["items"]
        for index, found in enumerate(pods):
            name = found["metadata"]["name"]
            if not found["spec"].get("nodeName"):
                binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"name": NODE}}
                self.kube.kubectl("create", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(binding))
            ip = f"10.244.0.{10 + index}"  # the API server reaches the webhook through the ClusterIP, never this
            condition = {"type": "Ready", "status": "True" if ready else "False"}
            status = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "conditions": [condition]}
            self.kube.kubectl(
                "patch", "pod", name, "-n", NAMESPACE, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": status}),
            )  # fmt: skip
        wanted = len(pods) if ready else 0
        self.kube.wait_for(lambda: ready_endpoints(self.kube) == wanted, 30)


@dataclass(frozen=True)
class Checked:
    code: int
    out: str
    err: str
    seconds: float

    def line(self, check: str) -> tuple[str, str]:
        """The check's line and the fix line below it ("" when it has none), as printed."""
        lines = self.out.splitlines()
        (at,) = [i for i, text in enumerate(lines) if text.split()[1:2] == [check]]
        after = lines[at + 1] if at + 1 < len(lines) else ""
        return lines[at], after if after.split()[:1] == ["fix:"] else ""

    def level(self, check: str) -> str:
        return self.line(check)[0].split()[0]


def slices(kube: RealKube) -> list[dict[str, Any]]:
    """The webhook Service's EndpointSlices."""
    found = kube.get("endpointslices", "-l", "kubernetes.io/service-name=hami-webhook", namespace=NAMESPACE)
    return found["items"]  # type: ignore[no-any-return]


def ready_endpoints(kube: RealKube) -> int:
    return sum(
        len(e.get("addresses") or ())
        for s in slices(kube)
        for e in s.get("endpoints") or ()
        if (e.get("conditions") or {}).get("ready")
    )


def renew_lease(kube: RealKube) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": SCHEDULER, "namespace": NAMESPACE},
        "spec": {"holderIdentity": "hami-scheduler-0_check", "leaseDurationSeconds": 15, "renewTime": now},
    }
    apply(kube, lease)


@pytest.fixture(scope="module")
def cluster(any_installed: Installed) -> Iterator[Cluster]:
    kube = any_installed.kube
    ns = kube.namespace(f"e2e-check-{uuid.uuid4().hex[:8]}")
    devices = register_node(kube, NODE, kube.kubeconfig_path)
    made = Cluster(any_installed, ns, devices)
    try:
        made.webhook_pods_ready(True)
        yield made
    finally:
        # The webhook's Pods bound here go now (the Pod garbage collector would take them tens of seconds after
        # their Node, while the next module on this cluster reads the Service's endpoints); their ReplicaSet makes
        # Pending ones again, which no EndpointSlice lists.
        kube.kubectl("delete", "pods", "-l", WEBHOOK_PODS, "-n", NAMESPACE, "--grace-period=0", "--force")
        kube.wait_for(lambda: not any(s.get("endpoints") for s in slices(kube)), 60)
        kube.kubectl("delete", "node", NODE, "--wait=false")
        kube.kubectl("delete", "lease", SCHEDULER, "-n", NAMESPACE, "--ignore-not-found")
        kube.kubectl("delete", "namespace", ns, "--wait=false")
        if not any_installed.webhook.running:
            any_installed.webhook.start()


def test_a_healthy_install_checks_clean_within_seconds(cluster: Cluster) -> None:
    done = cluster.check()
    assert done.code == 0, done.out + done.err
    assert done.err == ""
    print(f"healthy ({done.seconds:.1f} s):\n{done.out}")
    assert [line.split()[0] for line in done.out.splitlines()[:-1]] == ["ok"] * 11, done.out
    assert done.out.splitlines()[-1] == f"device Pods in {cluster.ns} go through hami-webhook (11 ok)"
    said = f"a one-GPU Pod (server-side dry run in {cluster.ns}) comes back for hami-scheduler, marked by pods.hami.io"
    assert said in done.line("path")[0]
    assert "a CPU Pod comes back untouched" in done.line("cpu-pods")[0]
    assert f"registered by HAMi's device plugins: nvidia: {NODE}" in done.line("nodes")[0]
    # No wait on any timeout: 1.3 to 1.9 s on the quiet 2-core machine, 8 to 20 s with it loaded (load 13 to 16);
    # what a hang adds is the next test's.
    assert done.seconds < 30, done.seconds

    as_json = json.loads(cluster.check("-o", "json").out)
    assert as_json["passed"] is True and as_json["namespace"] == cluster.ns
    assert [c["name"] for c in as_json["checks"]][:3] == ["path", "cpu-pods", "configuration"]
    assert {c["status"] for c in as_json["checks"]} == {"ok"}


def switch(cluster: Cluster, to: str) -> None:
    """The emergency switch as an admin runs it (scripts/emergency-failure-policy.sh)."""
    env = os.environ | {
        "KUBECONFIG": cluster.kube.kubeconfig_path,
        "PATH": f"{Path(kubectl_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    script = str(ROOT / "scripts" / "emergency-failure-policy.sh")
    done = subprocess.run(["bash", script, to], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def switch_left_on(cluster: Cluster) -> Callable[[], None]:
    switch(cluster, "Ignore")
    return lambda: switch(cluster, "Fail")


def webhook_stopped(cluster: Cluster) -> Callable[[], None]:
    cluster.installed.webhook.stop()
    cluster.webhook_pods_ready(False)  # what its readiness probe makes of it

    def undo() -> None:
        cluster.installed.webhook.start()
        cluster.webhook_pods_ready(True)

    return undo


def wrong_ca_bundle(cluster: Cluster) -> Callable[[], None]:
    other = issue_ca(KeyType.ECDSA_P256, timedelta(days=30), datetime.now(UTC))
    bundle = base64.b64encode(cert_pem(other.cert)).decode()
    patch_ca_bundle(cluster.kube, bundle)
    return lambda: patch_ca_bundle(cluster.kube, cluster.installed.ca_bundle)


def patch_ca_bundle(kube: RealKube, bundle: str) -> None:
    ops = [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}]
    kube.kubectl("patch", "mutatingwebhookconfiguration", CONFIGURATION, "--type=json", "-p", json.dumps(ops))


HAMI_WEBHOOK = {  # HAMi's chart's MutatingWebhookConfiguration, as `helm install hami` names it (<fullname>-webhook)
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": "hami-webhook"},
    "webhooks": [
        {
            "name": "vgpu.hami.io",
            "admissionReviewVersions": ["v1beta1"],
            "clientConfig": {"service": {"name": "hami-scheduler", "namespace": "kube-system", "path": "/webhook"}},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "rules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["pods"],
                    "scope": "*",
                }
            ],
            "namespaceSelector": {
                "matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]
            },
            "objectSelector": {
                "matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]
            },
        }
    ],
}


def hami_webhook_beside(cluster: Cluster) -> Callable[[], None]:
    apply(cluster.kube, HAMI_WEBHOOK)

    def undo() -> None:
        cluster.kube.kubectl("delete", "mutatingwebhookconfiguration", "hami-webhook")

    return undo


def scheduler_renamed_in_routed(cluster: Cluster) -> Callable[[], None]:
    kube = cluster.kube
    routed = kube.get("validatingadmissionpolicy", "hami-webhook-routed")
    (index,) = [i for i, v in enumerate(routed["spec"]["variables"]) if v["name"] == "scheduler"]
    ops = [{"op": "replace", "path": f"/spec/variables/{index}/expression", "value": "'gpu-scheduler'"}]
    kube.kubectl("patch", "validatingadmissionpolicy", "hami-webhook-routed", "--type=json", "-p", json.dumps(ops))
    shipped = one(cluster.installed.objects, "ValidatingAdmissionPolicy", "hami-webhook-routed")

    def undo() -> None:
        apply(kube, shipped)

    return undo


def nodes_unregistered(cluster: Cluster) -> Callable[[], None]:
    cluster.kube.kubectl("annotate", "node", NODE, f"{REGISTER}-")
    register = {"metadata": {"annotations": {REGISTER: json.dumps(cluster.devices, separators=(",", ":"))}}}

    def undo() -> None:
        cluster.kube.kubectl("patch", "node", NODE, "--type=merge", "-p", json.dumps(register))

    return undo


def namespace_excluded(cluster: Cluster) -> Callable[[], None]:
    cluster.kube.kubectl("label", "namespace", cluster.ns, "hami.io/webhook=ignore")

    def undo() -> None:
        cluster.kube.kubectl("label", "namespace", cluster.ns, "hami.io/webhook-")

    return undo


@dataclass(frozen=True)
class Fault:
    make: Callable[[Cluster], Callable[[], None]]  # makes the fault, returns its undoing
    code: int  # the check's exit code
    named: dict[str, tuple[str, str, str]]  # check -> its level, what its line says, what its fix starts with


FAULTS = {
    "switch-left-on": Fault(
        switch_left_on,
        1,
        {
            "configuration": (
                "FAILURE",
                "pods.hami.io has failurePolicy Ignore since ",
                "scripts/emergency-failure-policy.sh Fail",
            )
        },
    ),
    "webhook-stopped": Fault(
        webhook_stopped,
        1,
        {
            "path": ("FAILURE", 'failed calling webhook "pods.hami.io"', "kubectl -n hami-system get pods -l app"),
            "endpoints": (
                "FAILURE",
                "Service hami-system/hami-webhook has no ready endpoints",
                "kubectl -n hami-system get pods",
            ),
        },
    ),
    "wrong-ca-bundle": Fault(
        wrong_ca_bundle,
        1,
        {
            "path": ("FAILURE", "x509", "kubectl -n hami-system create job"),
            "certificate": (
                "FAILURE",
                "the caBundle does not verify the certificate",
                "kubectl -n hami-system create job",
            ),
        },
    ),
    "hami-webhook-beside": Fault(
        hami_webhook_beside,
        1,
        {"other-webhooks": ("FAILURE", "vgpu.hami.io (hami-webhook, called before pods.hami.io)", "remove it")},
    ),
    "scheduler-renamed-on-one-side": Fault(
        scheduler_renamed_in_routed,
        1,
        {
            "scheduler": (
                "FAILURE",
                "scheduler names differ: the webhook (HAMI_SCHEDULER_NAME) hami-scheduler, "
                "policy hami-webhook-routed gpu-scheduler",
                "one name for all: the scheduler-name component",
            )
        },
    ),
    "no-registered-nodes": Fault(
        nodes_unregistered,
        0,
        {"nodes": ("warning", "no node registered by HAMi's device plugins", "kubectl get pods -A")},
    ),
    "namespace-excluded": Fault(
        namespace_excluded,
        1,
        {
            "namespace": (
                "FAILURE",
                "the webhook's namespaceSelector (hami.io/webhook NotIn (ignore))",
                "kubectl label namespace e2e-check-",
            ),
            "path": ("FAILURE", "comes back unrouted, on default-scheduler and unmarked", "the first failure below"),
        },
    ),
}


@pytest.mark.parametrize("fault", FAULTS, ids=list(FAULTS))
def test_each_fault_is_named_with_its_fix(cluster: Cluster, fault: str) -> None:
    made = FAULTS[fault]
    undo = made.make(cluster)
    try:
        done = cluster.check()
        print(f"{fault} ({done.seconds:.1f} s):\n{done.out}")
        assert done.code == made.code, done.out + done.err
        assert done.err == ""
        for check, (level, says, fix) in made.named.items():
            line, fix_line = done.line(check)
            assert line.split()[0] == level and says in line, done.out
            assert fix_line.strip().startswith(f"fix: {fix}"), done.out
        failing = {line.split()[1] for line in done.out.splitlines()[:-1] if line.startswith("FAILURE")}
        assert failing == {check for check, (level, _, _) in made.named.items() if level == "FAILURE"}, done.out
    finally:
        undo()
    assert cluster.check().code == 0  # undone: clean again, for the next fault


def test_the_webhook_publishes_since_when_the_switch_is_on(cluster: Cluster, tmp_path: Path) -> None:
    """A replica's master reads its own configuration with its ServiceAccount's token (the shipped ClusterRole) and
    publishes when the switch went to Ignore, the second the API server recorded it, for the alert."""
    server = cluster.installed.webhook
    before = int(time.time())
    switch(cluster, "Ignore")
    after = time.time()
    port = free_port()
    env = {**server.env, "HAMI_METRICS_BIND": f"127.0.0.1:{port}"}
    replica = replace(server.with_address("127.0.0.1", free_port(), tmp_path / "replica.log"), env=env)
    try:
        replica.start()
        found = eventually(lambda: ignored_since(port), 30, "the gauge")
        print(f"hami_webhook_failure_policy_ignored_since_timestamp_seconds {found} (switched at {after:.0f})")
        assert before <= found <= after, (before, found, after)
    finally:
        replica.stop()
        switch(cluster, "Fail")


def ignored_since(port: int) -> float:
    """The gauge's value on a replica's /metrics (0 until the master's first reading, and while Fail)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as scraped:
        text = scraped.read().decode()
    found = re.search(r"^hami_webhook_failure_policy_ignored_since_timestamp_seconds (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_the_alert_fires_after_an_hour_of_ignore(promtool: Path, tmp_path: Path) -> None:
    """Prometheus's rule engine on the gauge: switched at 60 s (promtool's clock starts at 0), the shipped
    HamiWebhookFailurePolicyIgnored fires past 3,660 s, and never for a replica reading Fail (0)."""
    gauge = "hami_webhook_failure_policy_ignored_since_timestamp_seconds"
    left_on = {"job": "hami-webhook-metrics", "namespace": "hami-system"}
    healthy = {"job": "hami-webhook-metrics", "namespace": "other-install"}
    alert = {"alertname": "HamiWebhookFailurePolicyIgnored", "alertstate": "firing", "severity": "critical"}
    query = 'ALERTS{alertname="HamiWebhookFailurePolicyIgnored"}'
    firing = [{"labels": selector("ALERTS", alert | left_on), "value": 1}]
    promtool_test(
        promtool,
        tmp_path,
        [(gauge, left_on, 60.0), (gauge, healthy, 0.0)],
        minutes=90,
        expressions=[
            {"expr": query, "eval_time": "60m", "exp_samples": []},
            {"expr": query, "eval_time": "62m", "exp_samples": firing},
        ],
    )


def test_a_hanging_webhook_costs_its_timeout_and_no_more(cluster: Cluster) -> None:
    """SIGSTOP: connections are accepted (the kernel's backlog), nothing answers. The API server gives up after
    the configuration's timeoutSeconds (10), the check's TLS probe after its own 2 s, meanwhile: a hang adds the
    10 s once to what a healthy check takes just before (the machine's load moves both)."""
    healthy = cluster.check()
    pid = cluster.installed.webhook._proc.pid  # type: ignore[union-attr]
    os.killpg(pid, signal.SIGSTOP)
    try:
        done = cluster.check()
    finally:
        os.killpg(pid, signal.SIGCONT)
    print(f"hanging ({done.seconds:.1f} s; healthy just before: {healthy.seconds:.1f} s):\n{done.out}")
    assert done.code == 1, done.out + done.err
    assert done.level("path") == "FAILURE" and 'failed calling webhook "pods.hami.io"' in done.line("path")[0]
    assert 10 <= done.seconds < healthy.seconds + 10 + 5, (healthy.seconds, done.seconds)


def test_the_checker_roles_check_and_write_nothing(cluster: Cluster, tmp_path: Path) -> None:
    kube = cluster.kube
    name = f"checker-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "serviceaccount", name, "-n", cluster.ns)
    account = f"--serviceaccount={cluster.ns}:{name}"
    kube.kubectl("create", "clusterrolebinding", name, "--clusterrole=hami-webhook-checker", account)
    kube.kubectl("create", "rolebinding", name, "-n", NAMESPACE, "--role=hami-webhook-checker", account)
    try:
        user = f"system:serviceaccount:{cluster.ns}:{name}"
        can = ("auth", "can-i", "get", "deployments.apps/hami-webhook", "-n", NAMESPACE, f"--as={user}")
        kube.wait_for(lambda: kube.kubectl(*can, check=False).returncode == 0, 30)
        token = kube.kubectl("create", "token", name, "-n", cluster.ns).stdout.strip()
        kubeconfig = kube.kubeconfig_for(token, tmp_path / "checker.kubeconfig")
        before = written(kube, cluster.ns)
        as_checker = cluster.check(kubeconfig=kubeconfig)
        as_admin = cluster.check()
        assert written(kube, cluster.ns) == before  # no Pod, no change to anything the check read
        assert as_checker.code == 0, as_checker.out + as_checker.err
        assert as_checker.out == as_admin.out
    finally:
        kube.kubectl("delete", "clusterrolebinding", name)
        kube.kubectl("delete", "rolebinding", name, "-n", NAMESPACE)


def written(kube: RealKube, ns: str) -> dict[str, Any]:
    """What a check could have written: the namespace's Pods, and the versions of objects it reads."""
    versions = {
        "configuration": get(kube, "mutatingwebhookconfiguration", CONFIGURATION),
        "service": get(kube, "service", "hami-webhook", namespace=NAMESPACE),
        "namespace": get(kube, "namespace", ns),
    }
    return {"pods": kube.get("pods", namespace=ns)["items"]} | {
        what: found["metadata"]["resourceVersion"] for what, found in versions.items()
    }


def test_bad_input_is_one_line(cluster: Cluster, tmp_path: Path) -> None:
    """An unknown namespace is a usage error (2); a kubeconfig that does not load and an API server that does not
    answer stop the check (1); each one line on stderr, never a traceback."""
    kube = cluster.kube
    unknown = cluster.check("-n", "no-such-namespace")  # the last -n wins, as with kubectl
    assert (unknown.code, unknown.out, unknown.err) == (2, "", 'error: namespaces "no-such-namespace" not found\n')
    (tmp_path / "garbage").write_text("clusters: [oops")
    broken = cluster.check("--kubeconfig", str(tmp_path / "garbage"))
    assert broken.code == 1 and broken.err.startswith(f"error: cannot load the kubeconfig ({tmp_path / 'garbage'}): ")
    away = kube.kubeconfig_for("token", tmp_path / "away.kubeconfig")
    Path(away).write_text(Path(away).read_text().replace(f":{kube.port}", f":{free_port()}"))
    gone = cluster.check("--kubeconfig", away, "--request-timeout", "2s")
    assert gone.code == 1 and gone.out == "", gone.err
    assert gone.err.startswith("error: cannot ") and "did not answer" in gone.err, gone.err
    for said in (unknown, broken, gone):
        assert said.err.count("\n") == 1 and "Traceback" not in said.err, said.err
