"""scripts/emergency-failure-policy.sh with the real kubectl against the real API server.

The script reaches the server through the FaultyProxy `api`, so a test sees what it sent; the tests set up and
check the configurations straight on the server. `hami-webhook-pods`, the script's default name, is used where the
default is the point; the `api` fixture deletes every configuration a test made.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from app.preview.policies import ROUTED
from testbed import ROOT
from testbed.cluster import RealKube
from testbed.ports import free_port
from tests.manifests.conftest import Obj, create, kubectl_env, one
from tests.realkube.faults import FaultyProxy

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

SCRIPT = ROOT / "scripts" / "emergency-failure-policy.sh"
MWC = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")
DEFAULT = "hami-webhook-pods"  # the configuration the script switches when given no --name


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
def kubeconfig(api: FaultyProxy, tmp_path: Path) -> Path:
    """The script's kubeconfig: the real server through `api`, as admin."""
    path = tmp_path / "kubeconfig"
    api.kubeconfig(path)
    return path


@pytest.fixture
def run(kubeconfig: Path, tmp_path: Path) -> Any:
    """Run the script with only kubectl (the venv's) added to PATH, as the user of `kubeconfig` unless told."""
    env = kubectl_env(str(kubeconfig), tmp_path / "kubectl-cache")

    def run(*args: str, as_user: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args],
            env=env | ({"KUBECONFIG": as_user} if as_user else {}),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run


@pytest.fixture
def unique() -> str:
    """A name no other test uses, for the configurations and RBAC objects a test makes for itself."""
    return f"emergency-{uuid.uuid4().hex[:8]}"


def policies(kube: RealKube, name: str = DEFAULT) -> list[str]:
    return [hook["failurePolicy"] for hook in kube.get("mutatingwebhookconfiguration", name)["webhooks"]]


def test_ignore_then_fail_switches_every_webhook(bare_kube: RealKube, run: Any) -> None:
    create(bare_kube, configuration(DEFAULT, ["Fail", "Fail", "Ignore"]))

    ignored = run("Ignore")
    assert ignored.returncode == 0, ignored.stderr
    assert policies(bare_kube) == ["Ignore", "Ignore", "Ignore"]
    assert ignored.stdout.splitlines() == [
        f"mutatingwebhookconfiguration/{DEFAULT}:",
        "  hook0.hami.io: failurePolicy Fail -> Ignore",
        "  hook1.hami.io: failurePolicy Fail -> Ignore",
        "  hook2.hami.io: failurePolicy Ignore -> Ignore",
    ]

    failed = run("Fail")
    assert failed.returncode == 0, failed.stderr
    assert policies(bare_kube) == ["Fail", "Fail", "Fail"]
    assert "  hook2.hami.io: failurePolicy Ignore -> Fail" in failed.stdout.splitlines()


def test_name_and_context_select_the_target(bare_kube: RealKube, run: Any, kubeconfig: Path, unique: str) -> None:
    create(bare_kube, configuration(DEFAULT, ["Fail"]))
    create(bare_kube, configuration(unique, ["Fail", "Fail"]))
    # The current context leads nowhere: only the one --context names reaches the cluster.
    config = json.loads(kubeconfig.read_text())
    context = config["current-context"]
    config["clusters"].append({"name": "nowhere", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}})
    config["contexts"].append({"name": "nowhere", "context": {"cluster": "nowhere", "user": "user"}})
    kubeconfig.write_text(json.dumps(config | {"current-context": "nowhere"}))

    done = run("Ignore", "--name", unique, "--context", context)
    assert done.returncode == 0, done.stderr
    assert policies(bare_kube, unique) == ["Ignore", "Ignore"]
    assert policies(bare_kube) == ["Fail"]
    assert run("Fail", f"--name={unique}", f"--context={context}").returncode == 0
    assert policies(bare_kube, unique) == ["Fail", "Fail"]


def test_dry_run_changes_nothing(bare_kube: RealKube, api: FaultyProxy, run: Any) -> None:
    stored = create(bare_kube, configuration(DEFAULT, ["Fail", "Fail"]))
    dry = run("Ignore", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    after = bare_kube.get("mutatingwebhookconfiguration", DEFAULT)
    assert after["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert policies(bare_kube) == ["Fail", "Fail"]
    assert dry.stdout.splitlines() == [
        f"mutatingwebhookconfiguration/{DEFAULT} (dry run: nothing changed):",
        "  hook0.hami.io: failurePolicy Fail -> Ignore",
        "  hook1.hami.io: failurePolicy Fail -> Ignore",
    ]
    patches = [r for r in api.requests if r.method == "PATCH"]
    assert patches and all(parse_qs(r.query).get("dryRun") == ["All"] for r in patches)


def test_missing_configuration_fails_with_kubectls_message(run: Any, unique: str) -> None:
    missing = run("Ignore", "--name", unique)
    assert missing.returncode != 0
    assert f'mutatingwebhookconfigurations.admissionregistration.k8s.io "{unique}" not found' in missing.stderr
    assert missing.stdout == ""


@pytest.fixture
def read_only_user(bare_kube: RealKube, unique: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A ServiceAccount that may read MutatingWebhookConfigurations but not change them: (kubeconfig, user)."""
    bare_kube.kubectl("create", "namespace", unique)
    try:
        grants = ("--verb=get", "--resource=mutatingwebhookconfigurations")
        kubeconfig = bare_kube.account(unique, "reader", tmp_path / "reader.kubeconfig", *grants, cluster_wide=True)
        yield kubeconfig, f"system:serviceaccount:{unique}:reader"
    finally:
        role = f"{unique}-reader"
        bare_kube.kubectl("delete", "--ignore-not-found", f"clusterrolebinding/{role}", f"clusterrole/{role}")
        bare_kube.kubectl("delete", "namespace", unique, "--wait=false")


def test_forbidden_patch_fails_with_kubectls_message(
    bare_kube: RealKube, run: Any, read_only_user: tuple[str, str]
) -> None:
    kubeconfig, user = read_only_user
    create(bare_kube, configuration(DEFAULT, ["Fail"]))
    refused = run("Ignore", as_user=kubeconfig)
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1] == (
        f'Error from server (Forbidden): mutatingwebhookconfigurations.admissionregistration.k8s.io "{DEFAULT}" is'
        f' forbidden: User "{user}" cannot patch resource "mutatingwebhookconfigurations" in API group'
        ' "admissionregistration.k8s.io" at the cluster scope'
    )
    assert policies(bare_kube) == ["Fail"]


def test_a_configuration_changed_in_between_is_not_half_switched(
    bare_kube: RealKube, api: FaultyProxy, run: Any
) -> None:
    """The patch tests every webhook's name: a reordered configuration fails instead of being partly flipped."""
    create(bare_kube, configuration(DEFAULT, ["Fail", "Fail"]))

    def reorder(kube: RealKube) -> None:
        current = kube.get("mutatingwebhookconfiguration", DEFAULT)
        current["webhooks"].reverse()
        kube.kubectl("replace", "-f", "-", stdin=json.dumps(current))

    api.before("PATCH", rf"/mutatingwebhookconfigurations/{DEFAULT}$", reorder)
    raced = run("Ignore")
    assert raced.returncode != 0, raced.stdout
    # The failed `test` operation is a 422 whose message names no field (the API server's generic text).
    assert "The request is invalid: the server rejected our request due to an error in our request" in raced.stderr
    assert policies(bare_kube) == ["Fail", "Fail"]
    hooks = bare_kube.get("mutatingwebhookconfiguration", DEFAULT)["webhooks"]
    assert [hook["name"] for hook in hooks] == ["hook1.hami.io", "hook0.hami.io"], "the reordering happened"


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
def test_bad_arguments_exit_2_before_touching_the_cluster(
    bare_kube: RealKube, api: FaultyProxy, run: Any, args: list[str]
) -> None:
    create(bare_kube, configuration(DEFAULT, ["Fail"]))
    refused = run(*args)
    assert refused.returncode == 2
    assert refused.stderr.startswith("usage: emergency-failure-policy.sh Ignore|Fail")
    assert api.requests == []


def test_reapplying_the_manifests_restores_fail(bare_kube: RealKube, run: Any, base: list[Obj], tmp_path: Path) -> None:
    """README: after the emergency, `kubectl apply -k` puts the configured failurePolicy back."""
    manifest = tmp_path / "mwc.json"
    manifest.write_text(json.dumps(one(base, "MutatingWebhookConfiguration", DEFAULT)))
    bare_kube.kubectl("apply", "-f", str(manifest))
    assert run("Ignore").returncode == 0
    assert policies(bare_kube) == ["Ignore"]
    bare_kube.kubectl("apply", "-f", str(manifest))
    assert policies(bare_kube) == ["Fail"]


@pytest.fixture
def routed(bare_kube: RealKube) -> Iterator[None]:
    """The routed policy and its Deny binding as the manifests name them (the policy itself is a stand-in)."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": ROUTED},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                ]
            },
            "validations": [{"expression": "true"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": ROUTED},
        "spec": {"policyName": ROUTED, "validationActions": ["Deny"]},
    }
    create(bare_kube, policy)
    create(bare_kube, binding)
    try:
        yield
    finally:
        bare_kube.kubectl("delete", f"validatingadmissionpolicybinding/{ROUTED}", f"validatingadmissionpolicy/{ROUTED}")


def test_without_the_floor_ignore_turns_routed_to_warn_and_fail_back(
    bare_kube: RealKube, run: Any, routed: None
) -> None:
    create(bare_kube, configuration(DEFAULT, ["Fail"]))

    def actions() -> list[str]:
        return list(bare_kube.get("validatingadmissionpolicybinding", ROUTED)["spec"]["validationActions"])

    dry = run("Ignore", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[-2:] == [
        f"validatingadmissionpolicybinding/{ROUTED} (dry run: nothing changed):",
        "  validationActions Deny -> Warn,Audit (no floor: device Pods are admitted unrouted, with a warning)",
    ]
    assert actions() == ["Deny"]
    assert run("Ignore").returncode == 0
    assert actions() == ["Warn", "Audit"]
    failed = run("Fail")
    assert failed.returncode == 0, failed.stderr
    assert (
        failed.stdout.splitlines()[-1]
        == "  validationActions Warn,Audit -> Deny (device Pods past the webhook are refused)"
    )
    assert actions() == ["Deny"]
