"""scripts/emergency-failure-policy.sh with the real kubectl against the fake API server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.server import kubectl_binary
from tests.manifests.conftest import REPO, Obj, one

SCRIPT = REPO / "scripts" / "emergency-failure-policy.sh"
MWC = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")


def configuration(name: str, policies: list[str]) -> Obj:
    hooks = [
        {
            "name": f"hook{i}.hami.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": policy,
            "clientConfig": {"service": {"name": "hami-webhook", "namespace": "hami-system", "path": "/webhook"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        }
        for i, policy in enumerate(policies)
    ]
    return {"apiVersion": MWC[0], "kind": MWC[1], "metadata": {"name": name}, "webhooks": hooks}


@pytest.fixture
def run(kube_api: FakeKubeAPI, kubeconfig: str, tmp_path: Path) -> Any:
    """Run the script with only kubectl (the venv's) added to PATH, against ``kube_api``."""
    env = {
        **os.environ,
        "PATH": f"{Path(kubectl_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": kubeconfig,
        "KUBECACHEDIR": str(tmp_path / "kubectl-cache"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )

    return run


def policies(kube_api: FakeKubeAPI, name: str = "hami-webhook-pods") -> list[str]:
    stored = kube_api.get(*MWC, name)
    assert stored is not None
    return [hook["failurePolicy"] for hook in stored["webhooks"]]


def test_ignore_then_fail_switches_every_webhook(kube_api: FakeKubeAPI, run: Any) -> None:
    kube_api.put(configuration("hami-webhook-pods", ["Fail", "Fail", "Ignore"]))

    ignored = run("Ignore")
    assert ignored.returncode == 0, ignored.stderr
    assert policies(kube_api) == ["Ignore", "Ignore", "Ignore"]
    assert ignored.stdout.splitlines() == [
        "mutatingwebhookconfiguration/hami-webhook-pods:",
        "  hook0.hami.io: failurePolicy Fail -> Ignore",
        "  hook1.hami.io: failurePolicy Fail -> Ignore",
        "  hook2.hami.io: failurePolicy Ignore -> Ignore",
    ]

    failed = run("Fail")
    assert failed.returncode == 0, failed.stderr
    assert policies(kube_api) == ["Fail", "Fail", "Fail"]
    assert "  hook2.hami.io: failurePolicy Ignore -> Fail" in failed.stdout.splitlines()


def test_name_and_context_select_the_target(kube_api: FakeKubeAPI, run: Any) -> None:
    kube_api.put(configuration("hami-webhook-pods", ["Fail"]))
    kube_api.put(configuration("other", ["Fail", "Fail"]))
    done = run("Ignore", "--name", "other", "--context", "fake")
    assert done.returncode == 0, done.stderr
    assert policies(kube_api, "other") == ["Ignore", "Ignore"]
    assert policies(kube_api) == ["Fail"]
    assert run("Fail", "--name=other", "--context=fake").returncode == 0
    assert policies(kube_api, "other") == ["Fail", "Fail"]


def test_dry_run_changes_nothing(kube_api: FakeKubeAPI, run: Any) -> None:
    stored = kube_api.put(configuration("hami-webhook-pods", ["Fail", "Fail"]))
    dry = run("Ignore", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    after = kube_api.get(*MWC, "hami-webhook-pods")
    assert after is not None
    assert after["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert policies(kube_api) == ["Fail", "Fail"]
    assert dry.stdout.splitlines() == [
        "mutatingwebhookconfiguration/hami-webhook-pods (dry run: nothing changed):",
        "  hook0.hami.io: failurePolicy Fail -> Ignore",
        "  hook1.hami.io: failurePolicy Fail -> Ignore",
    ]
    patches = [r for r in kube_api.requests if r.method == "PATCH"]
    assert patches and all(r.query.get("dryRun") == ["All"] for r in patches)


def test_missing_configuration_fails_with_kubectls_message(kube_api: FakeKubeAPI, run: Any) -> None:
    missing = run("Ignore", "--name", "nope")
    assert missing.returncode != 0
    assert 'mutatingwebhookconfigurations.admissionregistration.k8s.io "nope" not found' in missing.stderr
    assert missing.stdout == ""


def test_forbidden_patch_fails_with_kubectls_message(kube_api: FakeKubeAPI, run: Any) -> None:
    kube_api.put(configuration("hami-webhook-pods", ["Fail"]))
    kube_api.fail_next(
        "PATCH", r"/mutatingwebhookconfigurations/hami-webhook-pods$", 403, message="not allowed to patch"
    )
    refused = run("Ignore")
    assert refused.returncode != 0
    assert "not allowed to patch" in refused.stderr
    assert policies(kube_api) == ["Fail"]


def test_a_configuration_changed_in_between_is_not_half_switched(kube_api: FakeKubeAPI, run: Any) -> None:
    """The patch tests every webhook's name: a reordered configuration fails instead of being partly flipped."""
    kube_api.put(configuration("hami-webhook-pods", ["Fail", "Fail"]))
    reordered = configuration("hami-webhook-pods", ["Fail", "Fail"])
    reordered["webhooks"].reverse()
    kube_api.before("PATCH", r"/mutatingwebhookconfigurations/hami-webhook-pods$", lambda api: api.put(reordered))
    raced = run("Ignore")
    assert raced.returncode != 0, raced.stdout
    assert policies(kube_api) == ["Fail", "Fail"]


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="no-policy"),
        pytest.param(["ignore"], id="lower-case"),
        pytest.param(["Warn"], id="unknown-policy"),
        pytest.param(["Ignore", "Fail"], id="two-policies"),
        pytest.param(["Ignore", "--bogus"], id="unknown-flag"),
        pytest.param(["Ignore", "--name"], id="name-without-value"),
        pytest.param(["Ignore", "--context"], id="context-without-value"),
    ],
)
def test_bad_arguments_exit_2_before_touching_the_cluster(kube_api: FakeKubeAPI, run: Any, args: list[str]) -> None:
    kube_api.put(configuration("hami-webhook-pods", ["Fail"]))
    refused = run(*args)
    assert refused.returncode == 2
    assert refused.stderr.startswith("usage: emergency-failure-policy.sh Ignore|Fail")
    assert kube_api.requests == []


def test_reapplying_the_manifests_restores_fail(
    kube_api: FakeKubeAPI, run: Any, base: list[Obj], tmp_path: Path
) -> None:
    """README: after the emergency, `kubectl apply -k` puts the configured failurePolicy back."""
    manifest = tmp_path / "mwc.json"
    manifest.write_text(json.dumps(one(base, "MutatingWebhookConfiguration", "hami-webhook-pods")))
    kube_api.kubectl("apply", "-f", str(manifest))
    assert run("Ignore").returncode == 0
    assert policies(kube_api) == ["Ignore"]
    kube_api.kubectl("apply", "-f", str(manifest))
    assert policies(kube_api) == ["Fail"]
