"""Install, use, upgrade, switch and uninstall with ``kubectl apply -k manifests`` against the fake API server.

The fake server calls the webhook as kube-apiserver does (tests/kubeapi/admission.py). What a cluster would
run is run here as the manifests spell it: the certgen Job's and CronJob's containers, and the Deployment's
webhook container under gunicorn with the Secret and ConfigMap as files (tests/manifests/install_kubelet.py).
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.app.tlsserver import stop, wait_ready
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.server import kubectl_binary
from tests.manifests.conftest import MANIFESTS, NAMESPACE, REPO, kustomize
from tests.manifests.install_kubelet import container, process_env, run

WEBHOOK = "pods.hami.io"
MWC = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "hami-webhook-pods")
Obj = dict[str, Any]


def gpu_pod() -> Obj:
    ctr = {"name": "cuda", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "gpu-"}, "spec": {"containers": [ctr]}}


def cpu_pod() -> Obj:
    ctr = {"name": "app", "image": "busybox:1.36", "resources": {"limits": {"cpu": "1"}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "cpu-"}, "spec": {"containers": [ctr]}}


def create(api: FakeKubeAPI, obj: Obj, namespace: str = "default") -> Obj:
    """``kubectl create`` the object; the stored object."""
    name = api.kubectl("create", "-n", namespace, "-f", "-", "-o", "jsonpath={.metadata.name}", input=json.dumps(obj))
    stored = api.get(obj["apiVersion"], obj["kind"], name.stdout, namespace)
    assert stored is not None
    return stored


def calls(api: FakeKubeAPI) -> int:
    return len(api.admission.calls_to(WEBHOOK))


def run_template(api: FakeKubeAPI, template: Obj, root: Path) -> None:
    """Run every container of a Job's Pod template in order (init containers first), as the kubelet would."""
    spec = template["spec"]
    for ctr in (spec.get("initContainers") or []) + spec["containers"]:
        proc = run(container(api, template, ctr["name"], NAMESPACE, root), api.kubeconfig_path)
        assert proc.returncode == 0, f"{ctr['name']} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        assert "PRIVATE KEY" not in proc.stdout + proc.stderr


def run_job(api: FakeKubeAPI, root: Path) -> None:
    job = api.get("batch/v1", "Job", "hami-webhook-certgen", NAMESPACE)
    assert job is not None, "kubectl apply -k did not create the certgen Job"
    run_template(api, job["spec"]["template"], root)


def run_cronjob(api: FakeKubeAPI, root: Path) -> None:
    cronjob = api.get("batch/v1", "CronJob", "hami-webhook-certgen", NAMESPACE)
    assert cronjob is not None
    run_template(api, cronjob["spec"]["jobTemplate"]["spec"]["template"], root)


class Webhook:
    """The Deployment's webhook container running here, its Service mapped to it."""

    def __init__(self, api: FakeKubeAPI, root: Path):
        deployment = api.get("apps/v1", "Deployment", "hami-webhook", NAMESPACE)
        assert deployment is not None
        template = deployment["spec"]["template"]
        # The image's ENTRYPOINT is hami-webhook (Dockerfile); the Deployment gives only args.
        self.ctr = container(api, template, "webhook", NAMESPACE, root, binaries={"webhook": "hami-webhook"})
        env = process_env(self.ctr, api.kubeconfig_path)
        self.proc = subprocess.Popen(
            self.ctr.argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        secret_dir = Path(self.ctr.env["HAMI_WEBHOOK_TLS_CERT"]).parent
        context = ssl.create_default_context(cafile=str(secret_dir / "ca.crt"))
        context.check_hostname = False  # the probe dials 127.0.0.1; the API server checks the name
        try:
            # Generous: two workers import the app and start the quota feed, on a CI machine that may be busy.
            wait_ready(self.ctr.ports["https"], context, self.proc, timeout=90)
        except AssertionError as exc:  # stop it (no leaked process for the next test) and show why
            raise AssertionError(f"{exc}; webhook output:\n{stop(self.proc)}") from None
        service = api.get("v1", "Service", "hami-webhook", NAMESPACE)
        assert service is not None
        for port in service["spec"]["ports"]:
            api.services[(NAMESPACE, "hami-webhook", port["port"])] = ("127.0.0.1", self.ctr.ports[port["targetPort"]])

    def stop(self) -> str:
        return stop(self.proc)


@pytest.fixture
def script_env(kube_api: FakeKubeAPI, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{Path(kubectl_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": kube_api.kubeconfig_path,
        "KUBECACHEDIR": str(tmp_path / "script-kubectl-cache"),
    }


def flip(env: dict[str, str], policy: str) -> str:
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "emergency-failure-policy.sh"), policy],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def certificate_versions(api: FakeKubeAPI) -> list[str]:
    """resourceVersions of what certgen writes: both Secrets and the webhook configuration."""
    keys = [("v1", "Secret", name, NAMESPACE) for name in ("hami-webhook-tls", "hami-webhook-tls-ca")] + [MWC]
    found = [api.get(*key) for key in keys]
    return [obj["metadata"]["resourceVersion"] if obj else "" for obj in found]


def policy(api: FakeKubeAPI) -> str:
    stored = api.get(*MWC)
    assert stored is not None
    return str(stored["webhooks"][0]["failurePolicy"])


@pytest.fixture
def webhooks() -> Iterator[list[Webhook]]:
    """Started webhooks, stopped at the end whatever happens."""
    started: list[Webhook] = []
    yield started
    for webhook in started:
        if webhook.proc.poll() is None:
            webhook.stop()


def test_install_use_upgrade_switch_uninstall(
    kube_api: FakeKubeAPI, tmp_path: Path, script_env: dict[str, str], webhooks: list[Webhook]
) -> None:
    api = kube_api
    # Install. The webhook configuration exists before any certificate: the certgen Job's Pod must still be
    # admitted (its namespace and its label keep the webhook away), or the install deadlocks.
    api.kubectl("apply", "-k", str(MANIFESTS))
    job = api.get("batch/v1", "Job", "hami-webhook-certgen", NAMESPACE)
    assert job is not None
    template = job["spec"]["template"]
    job_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "generateName": "certgen-"}}
    create(api, {**job_pod, "spec": template["spec"]}, NAMESPACE)
    assert calls(api) == 0
    run_job(api, tmp_path / "job-1")
    secret = api.get("v1", "Secret", "hami-webhook-tls", NAMESPACE)
    configuration = api.get(*MWC)
    assert secret is not None and configuration is not None
    assert configuration["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]

    webhooks.append(Webhook(api, tmp_path / "webhook-1"))
    gpu = create(api, gpu_pod())
    assert gpu["spec"]["schedulerName"] == "hami-scheduler" and calls(api) == 1
    assert create(api, cpu_pod())["spec"]["schedulerName"] == "default-scheduler"
    assert calls(api) == 1, "matchConditions keep non-device Pods away from the webhook"

    # Upgrade: the finished Job has been deleted by its TTL; apply again keeps the published caBundle, and the
    # new Job and the CronJob's run change nothing that is valid.
    api.delete("batch/v1", "Job", "hami-webhook-certgen", NAMESPACE)
    api.kubectl("apply", "-k", str(MANIFESTS))
    assert create(api, gpu_pod())["spec"]["schedulerName"] == "hami-scheduler" and calls(api) == 2
    before = certificate_versions(api)
    run_job(api, tmp_path / "job-2")
    run_cronjob(api, tmp_path / "cronjob")
    assert certificate_versions(api) == before, "certgen rewrote valid certificates or the caBundle"
    assert create(api, gpu_pod())["spec"]["schedulerName"] == "hami-scheduler" and calls(api) == 3
    assert create(api, cpu_pod())["spec"]["schedulerName"] == "default-scheduler" and calls(api) == 3

    # Outage: with the webhook down, Fail blocks device Pods; the emergency switch lets them through unmutated.
    log = webhooks[0].stop()
    assert "Traceback" not in log
    refused = api.kubectl("create", "-f", "-", input=json.dumps(gpu_pod()), check=False)
    assert refused.returncode == 1
    assert (
        f'Internal error occurred: failed calling webhook "{WEBHOOK}": failed to call webhook: Post ' in refused.stderr
    )
    assert "hami-webhook.hami-system.svc:443/webhook?timeout=10s" in refused.stderr
    assert "pods.hami.io: failurePolicy Fail -> Ignore" in flip(script_env, "Ignore")
    assert policy(api) == "Ignore"
    assert create(api, gpu_pod())["spec"]["schedulerName"] == "default-scheduler"
    assert api.admission.calls_to(WEBHOOK)[-1].failed_open
    assert create(api, cpu_pod())["spec"]["schedulerName"] == "default-scheduler"
    assert "pods.hami.io: failurePolicy Ignore -> Fail" in flip(script_env, "Fail")
    assert policy(api) == "Fail"
    flip(script_env, "Ignore")
    api.kubectl("apply", "-k", str(MANIFESTS))
    assert policy(api) == "Fail", "the README says a later apply sets Fail back"
    webhooks.append(Webhook(api, tmp_path / "webhook-2"))
    assert create(api, gpu_pod())["spec"]["schedulerName"] == "hami-scheduler"
    assert "Traceback" not in webhooks[1].stop()

    # Uninstall removes everything the manifests made (the Namespace takes its contents with it), and Pods
    # are created without the webhook afterwards.
    api.kubectl("delete", "-k", str(MANIFESTS), "--ignore-not-found")  # the README's command
    rendered = kustomize(MANIFESTS)
    deadline = time.monotonic() + 10
    while api.get("v1", "Namespace", NAMESPACE) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    for obj in rendered:
        meta = obj["metadata"]
        assert api.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")) is None, meta["name"]
    assert api.get(*MWC) is None
    assert api.list("v1", "Secret", NAMESPACE) == []
    called = len(api.admission.calls)
    assert create(api, gpu_pod())["spec"]["schedulerName"] == "default-scheduler"
    assert len(api.admission.calls) == called
