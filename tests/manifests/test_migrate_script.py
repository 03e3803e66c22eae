"""scripts/migrate-from-hami.sh with the real kubectl against the fake API server: HAMi's configuration is
switched to our webhook in one patch, or left exactly as it was."""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from certgen.kube import desired_webhooks
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.server import kubectl_binary
from tests.manifests.conftest import MANIFESTS, REPO, Obj, kustomize, one, write_overlay

SCRIPT = REPO / "scripts" / "migrate-from-hami.sh"
MWC = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


def hamis() -> Obj:
    """What HAMi's chart renders with its defaults for `helm install hami` (the parts that matter here)."""
    return {
        "apiVersion": MWC[0],
        "kind": MWC[1],
        "metadata": {"name": "hami-webhook", "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "webhooks": [
            {
                "name": "vgpu.hami.io",
                "admissionReviewVersions": ["v1beta1"],
                "clientConfig": {
                    "service": {"name": "hami-scheduler", "namespace": "kube-system", "path": "/webhook", "port": 443},
                    "caBundle": base64.b64encode(b"HAMi's CA").decode(),
                },
                "failurePolicy": "Ignore",
                "matchPolicy": "Equivalent",
                "reinvocationPolicy": "Never",
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                "sideEffects": "None",
                "timeoutSeconds": 10,
            }
        ],
    }


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Obj]:
    """Our configuration as rendered on standby (the doc's overlay) and as rendered for good."""
    standby = kustomize(write_overlay(tmp_path_factory.mktemp("o") / "hami-standby", "hami-standby"))
    return {
        "standby": one(standby, MWC[1], "hami-webhook-pods"),
        "active": one(kustomize(MANIFESTS), MWC[1], "hami-webhook-pods"),
    }


def with_ca(configuration: Obj) -> Obj:
    """As certgen leaves it in the cluster."""
    return {**configuration, "webhooks": desired_webhooks(configuration["webhooks"], CA, None)[0]}


@pytest.fixture
def run(kube_api: FakeKubeAPI, kubeconfig: str, tmp_path: Path) -> Any:
    env = {
        **os.environ,
        "PATH": f"{Path(kubectl_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": kubeconfig,
        "KUBECACHEDIR": str(tmp_path / "kubectl-cache"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
        )

    return run


def webhooks(kube_api: FakeKubeAPI, name: str) -> list[Obj]:
    stored = kube_api.get(*MWC, name)
    assert stored is not None
    return stored["webhooks"]


def test_switches_hamis_configuration_to_ours_in_one_patch(
    kube_api: FakeKubeAPI, run: Any, ours: dict[str, Obj], tmp_path: Path
) -> None:
    kube_api.put(with_ca(ours["standby"]))
    original = webhooks(kube_api, "hami-webhook") if kube_api.put(hamis()) else []
    switched = run("hami-webhook")
    assert switched.returncode == 0, switched.stderr
    assert "webhooks vgpu.hami.io -> pods.hami.io" in switched.stdout
    assert webhooks(kube_api, "hami-webhook") == with_ca(ours["active"])["webhooks"], "ours, without standby"
    assert webhooks(kube_api, "hami-webhook-pods") == with_ca(ours["standby"])["webhooks"], "ours stays on standby"
    patches = [r for r in kube_api.requests if r.method == "PATCH"]
    assert len(patches) == 1, "one write"

    backup = tmp_path / "hami-webhook.webhooks.json"
    assert json.loads(backup.read_text()) == {"webhooks": original}
    undo = f"kubectl patch mutatingwebhookconfiguration hami-webhook --type=merge --patch-file {backup.name}"
    assert undo in switched.stdout
    restored = subprocess.run(
        undo.split(),
        cwd=tmp_path,
        env={**os.environ, "KUBECONFIG": kube_api.kubeconfig_path, "PATH": str(Path(kubectl_binary()).parent)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert restored.returncode == 0, restored.stderr
    assert webhooks(kube_api, "hami-webhook") == original

    assert run("hami-webhook").returncode == 0, "switched again after the undo"
    assert run("hami-webhook").stdout.endswith("holds pods.hami.io only: nothing to do\n")


def test_standby_is_one_condition_that_is_never_true(ours: dict[str, Obj]) -> None:
    (standby,) = ours["standby"]["webhooks"]
    (active,) = ours["active"]["webhooks"]
    assert standby["matchConditions"] == [*active["matchConditions"], {"name": "standby", "expression": "false"}]
    assert {k: v for k, v in standby.items() if k != "matchConditions"} == {
        k: v for k, v in active.items() if k != "matchConditions"
    }


def test_dry_run_changes_nothing(kube_api: FakeKubeAPI, run: Any, ours: dict[str, Obj], tmp_path: Path) -> None:
    kube_api.put(with_ca(ours["standby"]))
    before = webhooks(kube_api, "hami-webhook") if kube_api.put(hamis()) else []
    checked = run("hami-webhook", "--dry-run")
    assert checked.returncode == 0, checked.stderr
    assert "(dry run: nothing changed): webhooks vgpu.hami.io -> pods.hami.io" in checked.stdout
    assert webhooks(kube_api, "hami-webhook") == before and not list(tmp_path.glob("*.webhooks.json"))


@pytest.mark.parametrize(
    ("ours_as", "message"),
    [
        ("active", "hami-webhook-pods is not on standby (it is already called)"),
        ("no-ca", "hami-webhook-pods has no caBundle yet"),
    ],
)
def test_refuses_and_changes_nothing_when_ours_is_not_ready(
    kube_api: FakeKubeAPI, run: Any, ours: dict[str, Obj], ours_as: str, message: str
) -> None:
    kube_api.put(ours["standby"] if ours_as == "no-ca" else with_ca(ours["active"]))
    before = webhooks(kube_api, "hami-webhook") if kube_api.put(hamis()) else []
    refused = run("hami-webhook")
    assert refused.returncode == 1 and message in refused.stderr
    assert webhooks(kube_api, "hami-webhook") == before
    assert not [r for r in kube_api.requests if r.method == "PATCH"]


def test_a_configuration_changed_meanwhile_is_not_half_switched(
    kube_api: FakeKubeAPI, run: Any, ours: dict[str, Obj]
) -> None:
    kube_api.put(with_ca(ours["standby"]))
    kube_api.put(hamis())
    edited = copy.deepcopy(hamis())
    edited["webhooks"][0]["name"] = "vgpu2.hami.io"
    kube_api.before("PATCH", r"/mutatingwebhookconfigurations/hami-webhook$", lambda api: api.put(edited))
    refused = run("hami-webhook")
    assert refused.returncode != 0
    assert [w["name"] for w in webhooks(kube_api, "hami-webhook")] == ["vgpu2.hami.io"]


def test_usage_errors(run: Any) -> None:
    for args, message in [
        ((), "name HAMi's MutatingWebhookConfiguration"),
        (("hami-webhook-pods",), "is hami-webhook's own configuration"),
        (("a", "b"), "one configuration only"),
    ]:
        proc = run(*args)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
