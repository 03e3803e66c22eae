"""The webhook down under failurePolicy: Fail, and the emergency switch to Ignore and back."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.api import GPU, create, pod
from testbed.cluster import kubectl_binary
from testbed.install import CONFIGURATION, Installed, WebhookServer, get, run_certgen

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


def policy(installed: Installed) -> str:
    (hook,) = get(installed.kube, "mutatingwebhookconfiguration", CONFIGURATION)["webhooks"]
    return str(hook["failurePolicy"])


def switch(installed: Installed, how: str, to: str) -> subprocess.CompletedProcess[str]:
    """The emergency switch: the kubectl-only script as an admin runs it, or `certgen failure-policy` as the
    certgen ServiceAccount (its ClusterRole allows exactly this)."""
    if how == "certgen":
        return run_certgen(installed.certgen_kubeconfig, "failure-policy", to, "--webhook-name", CONFIGURATION)
    env = os.environ | {
        "KUBECONFIG": installed.kube.kubeconfig_path,
        "PATH": f"{Path(kubectl_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "emergency-failure-policy.sh"), to],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("how", ["script", "certgen"])
def test_webhook_down_refuses_pods_until_switched_to_ignore(
    installed: Installed, webhook: WebhookServer, how: str
) -> None:
    kube = installed.kube
    ns = kube.namespace(f"e2e-down-{uuid.uuid4().hex[:8]}")
    webhook.stop()
    assert policy(installed) == "Fail"

    code, _, err = create(installed, ns, pod("gpu", GPU))
    assert code == 1
    assert 'Internal error occurred: failed calling webhook "pods.hami.io": failed to call webhook: Post ' in err
    assert f'https://hami-webhook.hami-system.svc:443/webhook?timeout=10s": dial tcp {installed.cluster_ip}:443' in err
    assert "connection refused" in err
    # matchConditions keep non-device Pods away from the webhook: they are admitted while it is down.
    code, created, err = create(installed, ns, pod("cpu", {"cpu": "1"}))
    assert code == 0 and created["spec"]["schedulerName"] == "default-scheduler", err

    done = switch(installed, how, "Ignore")
    assert done.returncode == 0, done.stderr
    try:
        assert policy(installed) == "Ignore"
        if how == "script":  # the API server loads the routed binding's new actions a moment later
            kube.wait_for(lambda: create(installed, ns, pod("gpu-", GPU), "--dry-run=server")[0] == 0, 30)
        code, created, err = create(installed, ns, pod("gpu", GPU))
        if how == "certgen":
            # certgen switches the webhook only: the routed policy still refuses device Pods past it (the script
            # also turns it to Warn; docs/operations.md, "Admission policies").
            assert code == 1 and "ValidatingAdmissionPolicy 'hami-webhook-routed'" in err, err
        else:
            assert code == 0, err
            # Admitted, but unmutated (and warned about): what Ignore costs while the webhook is down.
            assert created["spec"]["schedulerName"] == "default-scheduler"
            assert "annotations" not in created["metadata"]
    finally:
        done = switch(installed, how, "Fail")
    assert done.returncode == 0, done.stderr
    assert policy(installed) == "Fail"
    code, _, err = create(installed, ns, pod("gpu-2", GPU))
    assert code == 1 and "connection refused" in err

    webhook.start()
    code, created, err = create(installed, ns, pod("gpu-3", GPU))
    assert code == 0, err
    assert created["spec"]["schedulerName"] == "hami-scheduler"
    assert json.loads(kube.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
