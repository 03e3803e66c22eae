"""The install as a user runs it, on a cluster of its own per pinned version: `kubectl apply -k manifests`,
the controllers turning the Job, CronJob and Deployment into Pods, re-apply, the emergency switch, a switch
of TLS mode with `--prune`, and uninstall.

What the kubelet would run is run here from the Pods the controllers made (testbed/install.py). The
webhook's calls are counted by the API server itself (`apiserver_admission_webhook_request_total`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import ROOT
from testbed.api import pod
from testbed.cluster import RealKube, kubectl_binary
from testbed.install import (
    CERTGEN,
    CONFIGURATION,
    SECRET,
    WEBHOOK,
    WebhookServer,
    run_job,
    webhook_server,
)
from tests.manifests.conftest import MANIFESTS, NAMESPACE, README, kustomize, manual_overlay
from tests.realkube.fixtures import NEWEST, OLDEST, Clusters
from tests.realkube.test_match_conditions import calls

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

Obj = dict[str, Any]


@pytest.fixture(scope="module", params=sorted({NEWEST, OLDEST}, reverse=True))
def kube(request: pytest.FixtureRequest, clusters: Clusters) -> Iterator[RealKube]:
    """A cluster of its own (install and uninstall must not disturb the shared `installed` one), stopped after
    its version's tests."""
    made = clusters.own(request.param, "install")
    yield made
    clusters.discard(made)


def create(kube: RealKube, obj: Obj, check: bool = True) -> subprocess.CompletedProcess[str]:
    return kube.kubectl("create", "-n", "default", "-f", "-", "-o", "json", stdin=json.dumps(obj), check=check)


def scheduler(kube: RealKube, obj: Obj) -> str:
    return str(json.loads(create(kube, obj).stdout)["spec"]["schedulerName"])


def certificate_versions(kube: RealKube) -> list[str]:
    """resourceVersions of what certgen writes: both Secrets and the webhook configuration."""
    found = [kube.get("secret", name, namespace=NAMESPACE) for name in (SECRET, f"{SECRET}-ca")]
    found.append(kube.get("mutatingwebhookconfiguration", CONFIGURATION))
    return [obj["metadata"]["resourceVersion"] for obj in found]


def policy(kube: RealKube) -> str:
    return str(kube.get("mutatingwebhookconfiguration", CONFIGURATION)["webhooks"][0]["failurePolicy"])


def flip(kube: RealKube, to: str, tmp: Path) -> str:
    """scripts/emergency-failure-policy.sh with only the venv's kubectl added to PATH."""
    env = os.environ | {
        "PATH": f"{Path(kubectl_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": kube.kubeconfig_path,
        "KUBECACHEDIR": str(tmp / "kubectl-cache"),
    }
    script = ROOT / "scripts" / "emergency-failure-policy.sh"
    done = subprocess.run(["bash", str(script), to], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def readme_switch_command() -> list[str]:
    """The README's `# switch-tls-mode` command as argv after `kubectl`."""
    (block,) = re.findall(r"```sh\n# switch-tls-mode\n(.*?)```", README.read_text(), re.S)
    words = block.replace("\\\n", " ").split()
    assert words[:2] == ["kubectl", "apply"], words
    return words[1:]


@pytest.fixture
def servers() -> Iterator[list[WebhookServer]]:
    """Started webhooks, stopped at the end whatever happens."""
    started: list[WebhookServer] = []
    yield started
    for server in started:
        server.stop()


def workload_bundles(kube: RealKube) -> set[str]:
    """The caBundles of the workloads' configuration's webhooks (one value when all agree)."""
    hooks = kube.get("validatingwebhookconfiguration", "hami-webhook-workloads")["webhooks"]
    return {hook["clientConfig"].get("caBundle", "") for hook in hooks}


def test_install_use_upgrade_switch_uninstall(kube: RealKube, tmp_path: Path, servers: list[WebhookServer]) -> None:
    # Install with kubectl's default (strict, server-side) field validation: every object accepted, and no
    # warning about an unknown field. The configuration exists before any certificate: the certgen Job's Pod
    # is still admitted (its namespace and label keep the webhook away), or the install would deadlock.
    applied = kube.kubectl("apply", "-k", str(MANIFESTS))
    assert "Warning" not in applied.stderr, applied.stderr
    assert len(applied.stdout.splitlines()) == len(kustomize(MANIFESTS))
    run_job(kube, tmp_path / "job-1")
    kube.kubectl("wait", "--for=condition=Complete", f"job/{CERTGEN}", "-n", NAMESPACE, "--timeout=60s")
    secret = kube.get("secret", SECRET, namespace=NAMESPACE)
    hook = kube.get("mutatingwebhookconfiguration", CONFIGURATION)["webhooks"][0]
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert workload_bundles(kube) == {secret["data"]["ca.crt"]}, "certgen's second container patched it too"
    assert calls(kube) == 0
    # The Deployment made a ReplicaSet, which made the Pods: those of hami-system never reach the webhook.
    replica_sets = kube.get("replicasets", "-l", "app.kubernetes.io/component=webhook", namespace=NAMESPACE)
    assert [rs["spec"]["replicas"] for rs in replica_sets["items"]] == [2]

    servers.append(webhook_server(kube, tmp_path / "webhook-1").start())
    assert scheduler(kube, pod("gpu-", {"nvidia.com/gpu": "1"})) == "hami-scheduler" and calls(kube) == 1
    assert scheduler(kube, pod("cpu-", {"cpu": "1"})) == "default-scheduler"
    assert calls(kube) == 1, "matchConditions keep non-device Pods away from the webhook"

    # Upgrade: the finished Job goes (as its TTL would); apply again keeps the published caBundle, and the
    # new Job and a run of the CronJob change nothing that is valid.
    kube.kubectl("delete", "job", CERTGEN, "-n", NAMESPACE)
    assert "Warning" not in kube.kubectl("apply", "-k", str(MANIFESTS)).stderr
    before = certificate_versions(kube)
    run_job(kube, tmp_path / "job-2")
    kube.kubectl("create", "job", "--from=cronjob/hami-webhook-certgen", "certgen-now", "-n", NAMESPACE)
    run_job(kube, tmp_path / "cronjob", name="certgen-now")
    assert certificate_versions(kube) == before, "certgen rewrote valid certificates or the caBundle"
    assert scheduler(kube, pod("gpu-", {"nvidia.com/gpu": "1"})) == "hami-scheduler" and calls(kube) == 2

    # Outage: with the webhook down, Fail refuses device Pods; the emergency switch lets them through
    # unmutated, and switches back; a later apply sets Fail again, as the README says.
    servers[0].stop()
    assert "Traceback" not in servers[0].log.read_text()
    refused = create(kube, pod("gpu-", {"nvidia.com/gpu": "1"}), check=False)
    assert refused.returncode == 1
    assert (
        f'Internal error occurred: failed calling webhook "{WEBHOOK}": failed to call webhook: Post ' in refused.stderr
    )
    assert "hami-webhook.hami-system.svc:443/webhook?timeout=10s" in refused.stderr
    assert "pods.hami.io: failurePolicy Fail -> Ignore" in flip(kube, "Ignore", tmp_path)
    assert policy(kube) == "Ignore"
    # The script also turned the routed policy to Warn (no floor), which the API server loads a moment later.
    kube.wait_for(lambda: create(kube, pod("gpu-", {"nvidia.com/gpu": "1"}), check=False).returncode == 0, 30)
    assert scheduler(kube, pod("gpu-", {"nvidia.com/gpu": "1"})) == "default-scheduler"
    assert "pods.hami.io: failurePolicy Ignore -> Fail" in flip(kube, "Fail", tmp_path)
    assert policy(kube) == "Fail"
    flip(kube, "Ignore", tmp_path)
    kube.kubectl("apply", "-k", str(MANIFESTS))
    assert policy(kube) == "Fail", "the README says a later apply sets Fail back"
    servers.append(webhook_server(kube, tmp_path / "webhook-2").start())
    assert scheduler(kube, pod("gpu-", {"nvidia.com/gpu": "1"})) == "hami-scheduler"

    # Switch to manual TLS with the README's command: no certgen object is left, the webhook serves the
    # overlay's certificate and the API server trusts it through the bundle the component copied.
    servers[1].stop()
    overlay = manual_overlay(tmp_path / "hami-manual")
    switched = kube.kubectl(*readme_switch_command()[:1], "-k", str(overlay), *readme_switch_command()[3:])
    # kubectl takes over the Secret certgen made (and says so); nothing else is worth a warning.
    warnings = [line for line in switched.stderr.splitlines() if line.startswith("Warning")]
    assert [w.split(" is missing")[0] for w in warnings] == ["Warning: resource secrets/hami-webhook-tls"], warnings
    for kind in ("job", "cronjob", "serviceaccount", "role", "rolebinding"):
        assert not kube.exists(kind, CERTGEN, namespace=NAMESPACE), kind
    for kind in ("clusterrole", "clusterrolebinding"):
        assert not kube.exists(kind, CERTGEN), kind
    manual_ca = kube.get("secret", SECRET, namespace=NAMESPACE)["data"]["ca.crt"]
    assert manual_ca != secret["data"]["ca.crt"]
    assert (
        kube.get("mutatingwebhookconfiguration", CONFIGURATION)["webhooks"][0]["clientConfig"]["caBundle"] == manual_ca
    )
    assert workload_bundles(kube) == {manual_ca}
    servers.append(webhook_server(kube, tmp_path / "webhook-3").start())
    assert scheduler(kube, pod("gpu-", {"nvidia.com/gpu": "1"})) == "hami-scheduler"
    servers[2].stop()

    # Uninstall (the README's command) removes everything the manifests made; the namespace controller
    # finalizes hami-system with its contents, and Pods are created without the webhook afterwards.
    kube.kubectl("delete", "-k", str(overlay), "--ignore-not-found")
    kube.kubectl("wait", "--for=delete", f"namespace/{NAMESPACE}", "--timeout=120s")
    for obj in kustomize(overlay):
        meta = obj["metadata"]
        scope = ["-n", meta["namespace"]] if "namespace" in meta else []
        gone = kube.kubectl("get", obj["kind"], meta["name"], *scope, "--ignore-not-found", "-o", "name")
        assert gone.stdout == "", meta["name"]
    called = calls(kube)
    assert scheduler(kube, pod("gpu-", {"nvidia.com/gpu": "1"})) == "default-scheduler" and calls(kube) == called
