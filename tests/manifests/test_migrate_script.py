"""scripts/migrate-from-hami.sh with the real kubectl against the real API server: HAMi's configuration is
switched to our webhook in one patch, or left exactly as it was.

The script reaches the server through the FaultyProxy `api`, so a test sees what it sent; the tests set up and
check the configurations straight on the server. Both names are fixed (HAMi's chart's `hami-webhook`, ours
`hami-webhook-pods`, which the script knows): the `api` fixture deletes every configuration a test made.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from certgen.resources import desired_webhooks
from testbed import ROOT
from testbed.cluster import RealKube, kubectl_binary
from tests.manifests.conftest import MANIFESTS, Obj, create, kubectl_env, kustomize, one, write_overlay
from tests.realkube.faults import FaultyProxy

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

SCRIPT = ROOT / "scripts" / "migrate-from-hami.sh"
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
def run(api: FaultyProxy, tmp_path: Path) -> Any:
    """Run the script in `tmp_path` (where it writes its backup) through `api`."""
    env = kubectl_env(api.kubeconfig(tmp_path / "kubeconfig"), tmp_path / "kubectl-cache")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
        )

    return run


def webhooks(kube: RealKube, name: str) -> list[Obj]:
    return kube.get("mutatingwebhookconfiguration", name)["webhooks"]


def patches(api: FaultyProxy) -> list[Any]:
    return [r for r in api.requests if r.method == "PATCH"]


def test_switches_hamis_configuration_to_ours_in_one_patch(
    bare_kube: RealKube, api: FaultyProxy, run: Any, ours: dict[str, Obj], tmp_path: Path
) -> None:
    create(bare_kube, with_ca(ours["standby"]))
    original = create(bare_kube, hamis())["webhooks"]
    switched = run("hami-webhook")
    assert switched.returncode == 0, switched.stderr
    assert "webhooks vgpu.hami.io -> pods.hami.io" in switched.stdout
    assert webhooks(bare_kube, "hami-webhook") == with_ca(ours["active"])["webhooks"], "ours, without standby"
    assert webhooks(bare_kube, "hami-webhook-pods") == with_ca(ours["standby"])["webhooks"], "ours stays on standby"
    assert len(patches(api)) == 1, "one write"

    backup = tmp_path / "hami-webhook.webhooks.json"
    assert json.loads(backup.read_text()) == {"webhooks": original}
    undo = f"kubectl patch mutatingwebhookconfiguration hami-webhook --type=merge --patch-file {backup.name}"
    assert undo in switched.stdout
    restored = subprocess.run(
        undo.split(),
        cwd=tmp_path,
        env={**os.environ, "KUBECONFIG": bare_kube.kubeconfig_path, "PATH": str(Path(kubectl_binary()).parent)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert restored.returncode == 0, restored.stderr
    assert webhooks(bare_kube, "hami-webhook") == original

    assert run("hami-webhook").returncode == 0, "switched again after the undo"
    assert run("hami-webhook").stdout.endswith("holds pods.hami.io only: nothing to do\n")


def test_standby_is_one_condition_that_is_never_true(ours: dict[str, Obj]) -> None:
    (standby,) = ours["standby"]["webhooks"]
    (active,) = ours["active"]["webhooks"]
    assert standby["matchConditions"] == [*active["matchConditions"], {"name": "standby", "expression": "false"}]
    assert {k: v for k, v in standby.items() if k != "matchConditions"} == {
        k: v for k, v in active.items() if k != "matchConditions"
    }


def test_dry_run_changes_nothing(
    bare_kube: RealKube, api: FaultyProxy, run: Any, ours: dict[str, Obj], tmp_path: Path
) -> None:
    create(bare_kube, with_ca(ours["standby"]))
    before = create(bare_kube, hamis())
    checked = run("hami-webhook", "--dry-run")
    assert checked.returncode == 0, checked.stderr
    assert "(dry run: nothing changed): webhooks vgpu.hami.io -> pods.hami.io" in checked.stdout
    after = bare_kube.get("mutatingwebhookconfiguration", "hami-webhook")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["webhooks"] == before["webhooks"] and not list(tmp_path.glob("*.webhooks.json"))
    assert patches(api) and all(parse_qs(r.query).get("dryRun") == ["All"] for r in patches(api))


@pytest.mark.parametrize(
    ("ours_as", "message"),
    [
        ("active", "hami-webhook-pods is not on standby (it is already called)"),
        ("no-ca", "hami-webhook-pods has no caBundle yet"),
    ],
)
def test_refuses_and_changes_nothing_when_ours_is_not_ready(
    bare_kube: RealKube, api: FaultyProxy, run: Any, ours: dict[str, Obj], ours_as: str, message: str
) -> None:
    create(bare_kube, ours["standby"] if ours_as == "no-ca" else with_ca(ours["active"]))
    before = create(bare_kube, hamis())["webhooks"]
    refused = run("hami-webhook")
    assert refused.returncode == 1 and message in refused.stderr
    assert webhooks(bare_kube, "hami-webhook") == before
    assert not patches(api)


def test_a_configuration_changed_meanwhile_is_not_half_switched(
    bare_kube: RealKube, api: FaultyProxy, run: Any, ours: dict[str, Obj]
) -> None:
    create(bare_kube, with_ca(ours["standby"]))
    create(bare_kube, hamis())

    def renamed(kube: RealKube) -> None:
        edited = kube.get("mutatingwebhookconfiguration", "hami-webhook")
        edited["webhooks"][0]["name"] = "vgpu2.hami.io"
        kube.kubectl("replace", "-f", "-", stdin=json.dumps(edited))

    api.before("PATCH", r"/mutatingwebhookconfigurations/hami-webhook$", renamed)
    refused = run("hami-webhook")
    assert refused.returncode != 0
    assert "The request is invalid: the server rejected our request due to an error in our request" in refused.stderr
    assert [w["name"] for w in webhooks(bare_kube, "hami-webhook")] == ["vgpu2.hami.io"]


def test_usage_errors(run: Any) -> None:
    for args, message in [
        ((), "name HAMi's MutatingWebhookConfiguration"),
        (("hami-webhook-pods",), "is hami-webhook's own configuration"),
        (("a", "b"), "one configuration only"),
    ]:
        proc = run(*args)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
