"""certgen against the real kube-apiserver: idempotent create/patch, a late configuration, failure policy."""

from __future__ import annotations

import copy
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest

from testbed.cluster import python_tool
from testbed.install import (
    CA_SECRET,
    CONFIGURATION,
    NAMESPACE,
    SECRET,
    Installed,
    Obj,
    apply,
    get,
    job_commands,
    one,
    rendered,
    run_certgen,
)

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


def versions(installed: Installed) -> dict[str, str]:
    kube = installed.kube
    return {
        SECRET: get(kube, "secret", SECRET, namespace=NAMESPACE)["metadata"]["resourceVersion"],
        CA_SECRET: get(kube, "secret", CA_SECRET, namespace=NAMESPACE)["metadata"]["resourceVersion"],
        CONFIGURATION: get(kube, "mutatingwebhookconfiguration", CONFIGURATION)["metadata"]["resourceVersion"],
    }


def test_job_commands_again_write_nothing(installed: Installed) -> None:
    """The certgen Job re-run (an upgrade, a CronJob tick) with everything valid: no write at all."""
    before = versions(installed)
    for argv in job_commands(rendered()):
        done = run_certgen(installed.certgen_kubeconfig, *argv[1:])
        assert done.returncode == 0, done.stderr
    assert versions(installed) == before
    (hook,) = get(installed.kube, "mutatingwebhookconfiguration", CONFIGURATION)["webhooks"]
    assert hook["clientConfig"]["caBundle"] == installed.ca_bundle


@pytest.fixture
def later_name(installed: Installed) -> Iterator[str]:
    """Name of a configuration a test creates itself (selecting no namespace); deleted afterwards."""
    name = f"e2e-later-{uuid.uuid4().hex[:8]}"
    yield name
    installed.kube.kubectl("delete", "mutatingwebhookconfiguration", name, "--ignore-not-found")


def inert(installed: Installed, name: str) -> Obj:
    """The shipped configuration under another name, selecting no namespace, so it never gets a Pod."""
    config = copy.deepcopy(one(installed.objects, "MutatingWebhookConfiguration"))
    config["metadata"]["name"] = name
    (hook,) = config["webhooks"]
    hook["namespaceSelector"] = {"matchLabels": {"e2e": name}}
    del hook["matchConditions"]
    return config


def test_patch_waits_for_a_configuration_created_later(installed: Installed, later_name: str) -> None:
    kube = installed.kube
    started = time.monotonic()
    patch = subprocess.Popen(
        [
            *(python_tool("certgen"), "patch", "--namespace", NAMESPACE, "--secret-name", SECRET),
            *("--webhook-name", later_name, "--timeout", "60s", "--kubeconfig", kube.kubeconfig_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3)
        assert patch.poll() is None, patch.communicate()
        apply(kube, inert(installed, later_name))
        _, err = patch.communicate(timeout=30)
    finally:
        if patch.poll() is None:
            patch.kill()
            patch.wait()
    assert patch.returncode == 0, err
    assert time.monotonic() - started >= 3
    (hook,) = get(kube, "mutatingwebhookconfiguration", later_name)["webhooks"]
    assert hook["clientConfig"]["caBundle"] == installed.ca_bundle
    assert hook["failurePolicy"] == "Fail"


def test_patch_sets_failure_policy_and_failure_policy_switches_it(installed: Installed, later_name: str) -> None:
    kube = installed.kube
    apply(kube, inert(installed, later_name))

    def stored() -> tuple[str, str]:
        config = get(kube, "mutatingwebhookconfiguration", later_name)
        return config["webhooks"][0]["failurePolicy"], config["metadata"]["resourceVersion"]

    common = ("--namespace", NAMESPACE, "--secret-name", SECRET, "--webhook-name", later_name)
    done = run_certgen(kube.kubeconfig_path, "patch", *common, "--patch-failure-policy", "Ignore")
    assert done.returncode == 0, done.stderr
    policy, version = stored()
    assert policy == "Ignore"

    done = run_certgen(kube.kubeconfig_path, "failure-policy", "Fail", "--webhook-name", later_name)
    assert done.returncode == 0, done.stderr
    assert "Ignore -> Fail" in done.stderr
    policy, switched = stored()
    assert policy == "Fail" and switched != version

    done = run_certgen(kube.kubeconfig_path, "failure-policy", "Fail", "--webhook-name", later_name)
    assert done.returncode == 0, done.stderr
    assert stored() == ("Fail", switched)  # already Fail: not written again


def test_patch_of_a_missing_configuration_fails_after_its_timeout(installed: Installed, later_name: str) -> None:
    done = run_certgen(
        installed.kube.kubeconfig_path,
        *("patch", "--namespace", NAMESPACE, "--secret-name", SECRET, "--webhook-name", later_name),
        *("--timeout", "2s"),
    )
    assert done.returncode == 1
    assert later_name in done.stderr and "Traceback" not in done.stderr
