"""Admission warnings as a user sees them: docs/annotations.md's "What kubectl shows you" example, run with the real
kubectl against the real API server, word for word; strict mode's refusal; and where the warnings of a Pod
made by a controller end up.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.install import Installed, WebhookServer

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


def documented_example() -> tuple[str, list[str], list[str]]:
    """The example's train.yaml, what kubectl prints for it, and what it prints with strict annotations."""
    section = (ROOT / "docs" / "annotations.md").read_text().split("## What kubectl shows you", 1)[1]
    (manifest,) = re.findall(r"```yaml\n# train\.yaml\n(.*?)```", section, re.S)
    consoles = re.findall(r"```console\n\$ kubectl create -f train\.yaml\n(.*?)```", section, re.S)
    assert len(consoles) == 2, "the page shows the create and the strict refusal"
    return manifest, consoles[0].splitlines(), consoles[1].splitlines()


@pytest.fixture
def strict(installed: Installed, webhook: WebhookServer) -> Iterator[WebhookServer]:
    """The installed webhook restarted with HAMI_STRICT_ANNOTATIONS=true (the `webhook` fixture restores it)."""
    webhook.stop()
    server = dataclasses.replace(webhook, env={**webhook.env, "HAMI_STRICT_ANNOTATIONS": "true"}, _proc=None)
    try:
        yield server.start()
    finally:
        server.stop()


def create_train(installed: Installed, tmp_path: Path) -> tuple[int, list[str]]:
    """`kubectl create -f train.yaml` in a new namespace, from a directory holding the example's train.yaml."""
    manifest, _, _ = documented_example()
    (tmp_path / "train.yaml").write_text(manifest)
    ns = installed.kube.namespace(f"warn-{uuid.uuid4().hex[:8]}")
    done = installed.kube.kubectl("create", "-n", ns, "-f", str(tmp_path / "train.yaml"), check=False)
    printed = (done.stderr + done.stdout).replace(str(tmp_path / "train.yaml"), "train.yaml")
    return done.returncode, printed.splitlines()


def test_kubectl_prints_the_documented_warnings(installed: Installed, tmp_path: Path) -> None:
    code, printed = create_train(installed, tmp_path)
    _, expected, _ = documented_example()
    assert code == 0
    assert printed == expected


def test_strict_annotations_refuse_with_the_documented_message(
    installed: Installed, strict: WebhookServer, tmp_path: Path
) -> None:
    code, printed = create_train(installed, tmp_path)
    _, _, expected = documented_example()
    assert code == 1
    assert printed == expected


def test_a_deployments_warnings_are_dropped_by_the_controller(
    installed: Installed, namespaces: Callable[[str], str]
) -> None:
    """The API server returns warnings to the client that created the Pod: for a Deployment that is the
    ReplicaSet controller, and kube-controller-manager silences every warning (it installs client-go's
    NoWarnings handler). So no event and no controller log line carries them; the Pod is mutated as with
    kubectl, and only the webhook's own review log line (`warnings`) and metric count them. The author of the
    workload hears the annotation finding at create (tests/realkube/test_workload_warnings.py)."""
    kube = installed.kube
    ns = namespaces("warn")
    marker = f"hami.io/gpu-schedular-policy-{uuid.uuid4().hex[:6]}"
    ctr = {"name": "cuda", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    template = {
        "metadata": {"labels": {"app": "gpu"}, "annotations": {marker: "spread"}},
        "spec": {"containers": [ctr]},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gpu"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "gpu"}}, "template": template},
    }
    created = kube.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(deployment))
    (finding,) = created.stderr.splitlines()  # the workload check's: the author hears the annotation finding there
    assert finding.startswith(f"Warning: template: unknown annotation {marker}")
    pods = kube.wait_for(lambda: kube.get("pods", namespace=ns)["items"], 60)
    assert pods[0]["spec"]["schedulerName"] == "hami-scheduler"
    kube.wait_for(
        lambda: kube.get("events", "--field-selector", "involvedObject.kind=ReplicaSet", namespace=ns)["items"], 30
    )
    assert marker not in json.dumps(kube.get("events", namespace=ns))
    assert marker not in kube.log("controller-manager")
    reviews = [
        json.loads(line) for line in installed.webhook.log.read_text().splitlines() if f'"namespace":"{ns}"' in line
    ]
    assert [r["warnings"] for r in reviews if r.get("msg") == "review"] == [2]  # the unknown key, the cores default
