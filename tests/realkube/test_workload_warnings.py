"""Workloads' authors hear at `kubectl apply` what their Pods will meet: the ValidatingWebhookConfiguration
hami-webhook-workloads, with the real kubectl and kube-apiserver (each pinned version for what its CEL decides).

docs/annotations.md ("Workloads are warned at apply") shows this output; docs/rules.md#a-template-is-warned-not-refused
says why a warning and not a refusal.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import main
from testbed import ROOT
from testbed.cluster import RealKube
from testbed.install import Installed, WebhookServer
from tests.realkube.test_match_conditions import metric

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

Obj = dict[str, Any]
WORKLOADS = "workloads.hami.io"
MEM = "nvidia.com/gpumem"
EXAMPLES = ROOT.parent / "shared" / "hami-examples" / "examples"
OVER = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}
REFUSAL = "invalid nvidia.com/gpumem-percentage value 150 in container cuda: must be an integer between 0 and 100"
REFUSED_LINE = f"Warning: Pods refused: {REFUSAL}"


def documented() -> tuple[str, list[str], list[str], list[str]]:
    """docs/annotations.md's workloads.yaml, and what kubectl prints: its apply, the quota'd Job's, deny's."""
    section = (ROOT / "docs" / "annotations.md").read_text().split("## Workloads are warned at apply", 1)[1]
    (manifest,) = re.findall(r"```yaml\n# workloads\.yaml\n(.*?)```", section, re.S)
    consoles = [block.splitlines()[1:] for block in re.findall(r"```console\n(.*?)```", section, re.S)]
    assert len(consoles) == 3, "the page shows the apply, the quota'd Job and deny's refusal"
    return manifest, *consoles


def streams(lines: list[str]) -> list[str]:
    """A terminal's lines as the test reads them: stderr (warnings, errors) in order, then stdout in order."""
    errors = [line for line in lines if line.startswith(("Warning: ", "Error from server"))]
    return errors + [line for line in lines if line not in errors]


def apply_file(kube: RealKube, ns: str, manifest: str, work: Path, *args: str) -> tuple[int, list[str]]:
    """`kubectl apply -f workloads.yaml` run where the file is, as the page shows it."""
    (work / "workloads.yaml").write_text(manifest)
    done = kube.kubectl("apply", "-n", ns, *args, "-f", str(work / "workloads.yaml"), check=False)
    printed = (done.stderr + done.stdout).replace(str(work / "workloads.yaml"), "workloads.yaml")
    return done.returncode, printed.splitlines()


def ctr(limits: dict[str, str]) -> Obj:
    return {"name": "cuda", "image": "cuda:12", "resources": {"limits": limits}}


def workload(kind: str, name: str, container: Obj, annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
    """A Deployment, StatefulSet, Job or CronJob whose template holds ``container``, as an author writes it."""
    labels = {"app": name}
    template: Obj = {"metadata": {"labels": labels}, "spec": {"containers": [container]}}
    if annotations:
        template["metadata"]["annotations"] = annotations
    if kind in ("Job", "CronJob"):
        template["spec"]["restartPolicy"] = "Never"
        body: Obj = {"backoffLimit": 0, **spec, "template": template}
        if kind == "CronJob":
            body = {"schedule": "@yearly", "suspend": True, "jobTemplate": {"spec": body}}
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": {"name": name}, "spec": body}
    body = {"replicas": 1, **spec, "selector": {"matchLabels": labels}, "template": template}
    if kind == "StatefulSet":
        body["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": body}


def apply(kube: RealKube, ns: str, *objects: Obj, args: tuple[str, ...] = (), check: bool = True) -> list[str]:
    """`kubectl apply -f -` of ``objects``: what kubectl prints, stderr (the warnings) first."""
    stdin = "\n---\n".join(json.dumps(o) for o in objects)
    done = kube.kubectl("apply", "-n", ns, *args, "-f", "-", stdin=stdin, check=check)
    return (done.stderr + done.stdout).splitlines()


def calls(kube: RealKube) -> float:
    return metric(kube, "apiserver_admission_webhook_request_total", name=WORKLOADS)


@pytest.fixture
def kube_ns(any_installed: Installed) -> Iterator[tuple[RealKube, str]]:
    kube = any_installed.kube
    ns = kube.namespace(f"wl-{uuid.uuid4().hex[:8]}")
    yield kube, ns
    kube.kubectl("delete", "namespace", "--wait=false", ns)


REFUSED = [
    workload("Deployment", "train", ctr(OVER)),
    workload("StatefulSet", "shard", ctr(OVER)),
    workload("Job", "batch", ctr(OVER)),
    workload("CronJob", "nightly", ctr(OVER)),
]
VALID = workload("Deployment", "serve", ctr({"nvidia.com/gpu": "1", MEM: "4000", "nvidia.com/gpucores": "30"}))


def test_apply_prints_the_documented_warnings_and_creates_the_objects(
    kube_ns: tuple[RealKube, str], tmp_path: Path
) -> None:
    """docs/annotations.md's example word for word, on each pinned version: each warning before its object's line,
    none for the valid template; a server-side dry run prints the same and stores nothing."""
    kube, ns = kube_ns
    manifest, shown, _, _ = documented()
    expected = streams(shown)
    dry = [re.sub(r"^(\S+/\S+ created)$", r"\1 (server dry run)", line) for line in expected]
    assert apply_file(kube, ns, manifest, tmp_path, "--dry-run=server") == (0, dry)
    assert kube.get("deployments,cronjobs", namespace=ns)["items"] == []
    assert apply_file(kube, ns, manifest, tmp_path) == (0, expected)
    stored = kube.get("deployments,cronjobs", namespace=ns)["items"]
    assert sorted(o["metadata"]["name"] for o in stored) == ["nightly", "serve", "train"]


def test_a_job_and_a_statefulset_whose_pods_would_be_refused_are_warned_about_and_created(
    kube_ns: tuple[RealKube, str],
) -> None:
    kube, ns = kube_ns
    # one kubectl each: kubectl prints a warning it already printed in the same run only once
    assert apply(kube, ns, REFUSED[1]) == [REFUSED_LINE, "statefulset.apps/shard created"]
    assert apply(kube, ns, REFUSED[2]) == [REFUSED_LINE, "job.batch/batch created"]


def test_a_cpu_only_workload_and_an_unchanged_reapply_are_never_sent(kube_ns: tuple[RealKube, str]) -> None:
    """The API server's own count of calls to the workload webhook: not for a template without a device or a HAMi
    annotation, nor for the same manifest applied again, nor for the ReplicaSet the Deployment controller makes."""
    kube, ns = kube_ns
    before = calls(kube)
    cpu = workload("Deployment", "web", {"name": "web", "image": "nginx", "resources": {"limits": {"cpu": "1"}}})
    assert apply(kube, ns, cpu) == ["deployment.apps/web created"]
    assert calls(kube) == before
    assert apply(kube, ns, VALID) == ["deployment.apps/serve created"]
    assert calls(kube) == before + 1
    kube.wait_for(lambda: kube.get("replicasets", namespace=ns)["items"], 30)
    apply(kube, ns, VALID)
    labelled = copy.deepcopy(VALID)
    labelled["metadata"]["labels"] = {"team": "ml"}
    assert apply(kube, ns, labelled) == ["deployment.apps/serve configured"]
    assert calls(kube) == before + 1


def wait_for_room(kube: RealKube, ns: str, probe: Obj, timeout: float = 30) -> None:
    """Until the webhook's feed has listed the namespace's quota and Pods (the figure is never waited for)."""
    deadline = time.monotonic() + timeout
    while not any("free in" in line for line in apply(kube, ns, probe, args=("--dry-run=server",))):
        assert time.monotonic() < deadline, "the webhook's feed never saw the namespace's ResourceQuota"
        time.sleep(0.5)


@pytest.fixture
def ai_team(installed: Installed) -> Iterator[str]:
    """The page's namespace, ai-team (a fixed name: the warning names it), deleted after the test."""
    yield installed.kube.namespace("ai-team")
    installed.kube.kubectl("delete", "namespace", "ai-team", "--wait=false")


def test_a_quotad_namespace_hears_what_the_pods_at_once_need_against_the_room_free_now(
    installed: Installed, ai_team: str
) -> None:
    kube, ns = installed.kube, ai_team
    _, _, shown, _ = documented()
    expected = streams(shown)
    body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": ns}}
    body["spec"] = {"hard": {f"requests.{MEM}": "20000"}}
    kube.kubectl("apply", "-f", "-", stdin=json.dumps(body))
    job = workload("Job", "sweep", ctr({"nvidia.com/gpu": "1", MEM: "16000"}), parallelism=3, completions=3)
    wait_for_room(kube, ns, job)
    assert apply(kube, ns, job) == expected
    kube.kubectl("delete", "job", "sweep", "-n", ns, "--cascade=foreground")
    kube.wait_for(lambda: not kube.get("pods", namespace=ns)["items"], 60)
    one = workload("Deployment", "infer", ctr({"nvidia.com/gpu": "1", MEM: "8000"}), replicas=1)
    assert apply(kube, ns, one) == ["deployment.apps/infer created"]
    four = copy.deepcopy(one)
    four["spec"]["replicas"] = 4
    printed = apply(kube, ns, four)
    assert printed[-1] == "deployment.apps/infer configured"
    (warning,) = printed[:-1]
    assert re.fullmatch(
        rf"Warning: spec\.replicas: 3 Pods × 8000 {MEM} need 24000; (20000 free in {ns}: 1|12000 free in {ns}: 2)"
        r" would be refused now",
        warning,
    ), warning
    scaled = kube.kubectl("scale", "deployment", "infer", "-n", ns, "--replicas=6")
    assert "Warning" not in scaled.stderr, "the scale subresource (autoscalers) is never sent"


@pytest.fixture
def restarted(installed: Installed, webhook: WebhookServer) -> Iterator[Callable[..., WebhookServer]]:
    """The installed webhook restarted with other settings (the `webhook` fixture restores it)."""
    started: list[WebhookServer] = []

    def restart(**env: str) -> WebhookServer:
        webhook.stop()
        server = dataclasses.replace(webhook, env={**webhook.env, **env}, _proc=None)
        started.append(server.start())
        return server

    yield restart
    for server in started:
        server.stop()


def test_deny_refuses_the_refused_template_with_the_pods_message_and_creates_a_warned_one(
    installed: Installed, namespaces: Callable[[str], str], restarted: Callable[..., WebhookServer], tmp_path: Path
) -> None:
    restarted(HAMI_WORKLOAD_CHECKS="deny")
    kube = installed.kube
    ns = namespaces("wld")
    manifest, _, _, shown = documented()
    assert apply_file(kube, ns, manifest, tmp_path) == (1, streams(shown))
    assert not kube.exists("deployment", "train", namespace=ns)
    assert kube.exists("cronjob", "nightly", namespace=ns)


def test_with_the_webhook_stopped_apply_succeeds_at_once_without_a_warning(
    installed: Installed, namespaces: Callable[[str], str], webhook: WebhookServer
) -> None:
    webhook.stop()
    kube = installed.kube
    ns = namespaces("wls")
    started = time.monotonic()
    assert apply(kube, ns, REFUSED[0]) == ["deployment.apps/train created"]
    assert time.monotonic() - started < 10, "failurePolicy Ignore within timeoutSeconds"


def examples_as_workloads() -> list[Obj]:
    """Every Pod of HAMi's examples as a Deployment (its template: the Pod's labels, annotations and spec), and
    every workload in them as it is."""
    found: list[Obj] = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for index, document in enumerate(yaml.safe_load_all(path.read_text())):
            if not isinstance(document, dict):
                continue
            name = re.sub(r"[^a-z0-9]+", "-", f"{path.parent.name}-{path.stem}-{index}".lower()).strip("-")[:60]
            if document.get("kind") == "Pod":
                meta = document.get("metadata") or {}
                spec = copy.deepcopy(document.get("spec") or {})
                spec.pop("restartPolicy", None)
                labels = {"example": name}
                template = {"metadata": {"labels": labels, "annotations": meta.get("annotations") or {}}, "spec": spec}
                body = {"replicas": 1, "selector": {"matchLabels": labels}, "template": template}
                found.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": body})
            elif document.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"):
                document["metadata"] = {"name": name}
                found.append(document)
    return found


def test_every_warning_for_hamis_examples_is_one_the_offline_review_prints(
    installed: Installed, namespaces: Callable[[str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not EXAMPLES.is_dir():
        pytest.skip(f"HAMi's examples are not at {EXAMPLES}")
    kube = installed.kube
    ns = namespaces("wle")
    objects = examples_as_workloads()
    assert len(objects) > 40
    manifest = tmp_path / "examples.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    capsys.readouterr()
    main(["review", "--namespace", ns, str(manifest)])
    offline = capsys.readouterr().err
    before = calls(kube)
    printed = kube.kubectl("apply", "--dry-run=server", "-n", ns, "-f", str(manifest), check=False).stderr
    assert calls(kube) > before, "the device templates were sent"
    warnings = [line.removeprefix("Warning: ") for line in printed.splitlines() if line.startswith("Warning: ")]
    refused_offline = [line for line in offline.splitlines() if ": denied (" in line]
    assert len([w for w in warnings if w.startswith("Pods refused: ")]) == len(refused_offline)
    for warning in warnings:
        text = warning.removeprefix("template: ").removeprefix("Pods refused: ").removesuffix("...")
        assert text != warning, warning
        assert f"warning: {text}" in offline or f"): {text}" in offline, warning
