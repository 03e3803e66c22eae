"""``hami-webhook review`` as an admin runs it, on HAMi's own examples and on what kubectl prints (workloads, Lists,
live Pods, the device ConfigMap), with the webhook configuration's scope: its ``main`` with a clean environment,
and the installed entry point reading standard input."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import jsonpatch
import pytest
import yaml

from app import cli
from testbed import ROOT
from testbed.pods import container

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

HAMI_WEBHOOK = Path(sys.executable).with_name("hami-webhook")
WEBHOOK_CONFIGURATION = ROOT / "manifests/base/mutatingwebhookconfiguration.yaml"
NOT_IN_KUBE_SYSTEM = (
    "not sent to the webhook (namespace kube-system is excluded by the namespaceSelector: "
    "kubernetes.io/metadata.name NotIn (kube-system, kube-node-lease, hami-system))"
)


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        """What stderr says, but the admission warnings (tests/app/admission/test_warnings.py checks those)."""
        return [line for line in self.err.splitlines() if not line.startswith("warning: ")]

    def documents(self) -> list[Any]:
        return [d for d in yaml.safe_load_all(self.out) if d is not None]


def review(*args: str | Path, stdin: str | None = None, installed: bool = False, **env: str) -> Run:
    """``hami-webhook review`` with ``args``; HAMI_* variables of the test run do not leak in. Its ``main`` in this
    process (a process of its own costs a second of imports), or with ``installed`` the installed entry point."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HAMI_")}
    if installed:
        proc = subprocess.run(
            [str(HAMI_WEBHOOK), "review", *map(str, args)],
            input=stdin,
            capture_output=True,
            text=True,
            env={**clean, **env},
            timeout=60,
            check=False,
        )
        return Run(proc.returncode, proc.stdout, proc.stderr)
    out, err = io.StringIO(), io.StringIO()
    given = io.TextIOWrapper(io.BytesIO((stdin or "").encode()), encoding="utf-8")
    with (
        mock.patch.dict(os.environ, {**clean, **env}, clear=True),
        mock.patch.object(sys, "stdin", given),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = cli.main(["review", *map(str, args)])
    return Run(code, out.getvalue(), err.getvalue())


def write(tmp_path: Path, name: str, documents: Any) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(documents if isinstance(documents, list) else [documents], sort_keys=False))
    return path


def gpu_container(name: str = "cuda", **limits: Any) -> dict[str, Any]:
    return container(name, limits or {"nvidia.com/gpu": 1}, defaulted=False)


def pod_spec(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"containers": list(containers) or [gpu_container()]}


def template(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"labels": labels or {"app": "train"}}, "spec": pod_spec()}


WORKLOADS = {
    "Deployment": ("apps/v1", {"replicas": 2, "selector": {"matchLabels": {"app": "train"}}, "template": template()}),
    "StatefulSet": ("apps/v1", {"serviceName": "t", "template": template()}),
    "DaemonSet": ("apps/v1", {"template": template()}),
    "ReplicaSet": ("apps/v1", {"template": template()}),
    "ReplicationController": ("v1", {"template": template()}),
    "Job": ("batch/v1", {"template": {"spec": {**pod_spec(), "restartPolicy": "Never"}}}),
    "CronJob": ("batch/v1", {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template()}}}),
}
TEMPLATE_AT = {"CronJob": "/spec/jobTemplate/spec/template", "PodTemplate": "/template"}


def workload(kind: str, name: str = "train", namespace: str | None = "ml") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    if kind == "PodTemplate":
        return {"apiVersion": "v1", "kind": kind, "metadata": metadata, "template": template()}
    api_version, spec = WORKLOADS[kind]
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


# --- workloads ----------------------------------------------------------------------------------------------


def test_hami_deployment_example_is_reviewed_as_the_pods_it_creates(hami_examples: Path) -> None:
    run = review(hami_examples / "examples/mlu/default_use.yaml")
    assert run.code == 0, run.err
    assert run.lines == ["Deployment/default/binpack-1, Pods from spec.template: allowed, 2 patch operation(s)"]
    (deployment,) = run.documents()
    assert deployment["kind"] == "Deployment" and deployment["metadata"]["name"] == "binpack-1"
    pods = deployment["spec"]["template"]
    assert pods["spec"]["schedulerName"] == "hami-scheduler"
    assert pods["metadata"]["annotations"] == {"hami.io/gpu-type": "MLU"}
    assert pods["metadata"]["labels"] == {"app": "binpack-1"}

    patch = json.loads(review(hami_examples / "examples/mlu/default_use.yaml", "--patch").out)
    assert {op["path"] for op in patch} == {"/spec/template/spec/schedulerName", "/spec/template/metadata/annotations"}


@pytest.mark.parametrize("kind", [*WORKLOADS, "PodTemplate"])
def test_every_workload_kind_is_reviewed_at_its_template(tmp_path: Path, kind: str) -> None:
    path = write(tmp_path, "workload.yaml", workload(kind))
    at = TEMPLATE_AT.get(kind, "/spec/template")
    run = review(path)
    assert run.code == 0, run.err
    assert run.lines == [f"{kind}/ml/train, Pods from {at[1:].replace('/', '.')}: allowed, 4 patch operation(s)"]
    (patched,) = run.documents()
    pods = jsonpatch.JsonPointer(at).resolve(patched)
    assert pods["spec"]["schedulerName"] == "hami-scheduler"
    assert pods["metadata"]["annotations"] == {"hami.io/gpu-type": "NVIDIA"}
    assert pods["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "100"

    patch = json.loads(review(path, "--patch").out)
    assert patch and all(op["path"].startswith(f"{at}/") for op in patch), patch


def test_a_template_without_metadata_gets_it_in_the_patch(tmp_path: Path) -> None:
    path = write(tmp_path, "job.yaml", workload("Job"))
    patch = json.loads(review(path, "--patch").out)
    assert patch[0] == {"op": "add", "path": "/spec/template/metadata", "value": {}}
    assert patch[-1] == {
        "op": "add",
        "path": "/spec/template/metadata/annotations",
        "value": {"hami.io/gpu-type": "NVIDIA"},
    }


def test_a_kubectl_list_is_reviewed_item_by_item_with_paths_into_the_list(tmp_path: Path) -> None:
    """What `kubectl get deploy,cm,pods -o yaml` prints, with an API DeploymentList whose items omit their kind."""
    api_list = {
        "apiVersion": "apps/v1",
        "kind": "DeploymentList",
        "items": [{k: v for k, v in workload("Deployment", "inner").items() if k not in ("apiVersion", "kind")}],
    }
    document = {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "ml"}},
            workload("StatefulSet", "db"),
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo"}, "spec": pod_spec()},
            api_list,
        ],
    }
    run = review(write(tmp_path, "list.yaml", document))
    assert run.code == 0, run.err
    assert run.lines == [
        "items[0] ConfigMap/ml/settings: creates no Pod, skipped",
        "items[1] StatefulSet/ml/db, Pods from spec.template: allowed, 4 patch operation(s)",
        "items[2] default/solo: allowed, 4 patch operation(s)",
        "items[3].items[0] Deployment/ml/inner, Pods from spec.template: allowed, 4 patch operation(s)",
    ]
    (patched,) = run.documents()
    assert patched["items"][0] == document["items"][0]
    assert patched["items"][1]["spec"]["template"]["spec"]["schedulerName"] == "hami-scheduler"
    assert patched["items"][2]["spec"]["schedulerName"] == "hami-scheduler"
    assert patched["items"][3]["items"][0]["spec"]["template"]["spec"]["schedulerName"] == "hami-scheduler"

    patch = json.loads(review(write(tmp_path, "list.yaml", document), "--patch").out)
    prefixes = {"/".join(op["path"].split("/")[:4]) for op in patch}
    assert prefixes == {"/items/1/spec", "/items/2/spec", "/items/2/metadata", "/items/3/items"}


def test_a_file_mixing_kinds_accounts_for_every_document(hami_examples: Path) -> None:
    run = review(hami_examples / "examples/nvidia/vllm_cross_vgpu.yaml")
    assert run.code == 0, run.err
    assert run.lines == [
        "PersistentVolumeClaim/vllm-cross-vgpu-cache: creates no Pod, skipped",
        "Deployment/default/vllm-cross-vgpu, Pods from spec.template: allowed, 2 patch operation(s)",
    ]
    assert [d["kind"] for d in run.documents()] == ["Deployment"]


def test_every_hami_example_is_accounted_for(hami_examples: Path) -> None:
    """All of HAMi's examples in one stream, Ascend and Iluvatar on: one line per object, none refused."""
    files = sorted(hami_examples.rglob("*.yaml"))
    documents = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d is not None]
    stream = "\n---\n".join(f.read_text() for f in files)
    run = review("-", stdin=stream, HAMI_ENABLE_ASCEND="true", HAMI_ENABLE_ILUVATAR="true")
    assert run.code == 0, run.err
    assert len(documents) > 60 and len(run.lines) == len(documents), run.err
    kinds = [d["kind"] for d in documents]
    assert {"Pod", "Deployment", "PersistentVolumeClaim"} == set(kinds)
    assert sum("Pods from spec.template: allowed" in line for line in run.lines) == kinds.count("Deployment")
    assert sum(line.endswith("creates no Pod, skipped") for line in run.lines) == kinds.count("PersistentVolumeClaim")
    assert not [line for line in run.lines if "denied" in line or "hint" in line]
    assert len(run.documents()) == kinds.count("Pod") + kinds.count("Deployment")


def test_nothing_that_creates_pods_exits_2() -> None:
    run = review("-", stdin="kind: ConfigMap\nmetadata: {name: x}\n---\n- a list\n")
    assert (run.code, run.lines) == (
        2,
        [
            "ConfigMap/x: creates no Pod, skipped",
            "document 2: not a Kubernetes object (a list), skipped",
            "hami-webhook: standard input holds no Pod and no workload that creates Pods",
        ],
    )


# --- standard input -----------------------------------------------------------------------------------------


def test_dash_reads_standard_input(hami_examples: Path) -> None:
    path = hami_examples / "examples/nvidia/default_use.yaml"
    from_file, from_stdin = review(path), review("-", stdin=path.read_text(), installed=True)
    assert from_stdin.code == 0, from_stdin.err
    assert (from_stdin.out, from_stdin.err) == (from_file.out, from_file.err)
    broken = review("-", stdin="a: [", installed=True)
    assert broken.code == 2 and broken.lines[0].startswith("hami-webhook: cannot read standard input: ")


# --- live Pods ----------------------------------------------------------------------------------------------


def live_pod() -> dict[str, Any]:
    """A Pod as `kubectl get pod -o yaml` prints it: bound, with status and the server's metadata."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-7d9f-x2k4q",
            "generateName": "train-7d9f-",
            "namespace": "ml",
            "uid": "3b9c8a8e-5f7a-4c1e-9a3f-6f0a2b7d9c41",
            "resourceVersion": "81234",
            "creationTimestamp": "2026-11-20T10:00:00Z",
            "labels": {"app": "train"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-7d9f", "uid": "a1"}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}],
        },
        "spec": {
            "nodeName": "gpu-node-3",
            "schedulerName": "default-scheduler",
            "containers": [gpu_container(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"})],
        },
        "status": {"phase": "Running", "hostIP": "10.0.0.3"},
    }


def test_a_live_pod_is_denied_for_its_node_and_the_hint_says_why(tmp_path: Path) -> None:
    run = review(write(tmp_path, "live.yaml", live_pod()))
    assert run.code == 1
    assert run.lines == [
        "ml/train-7d9f-x2k4q: denied (403 Forbidden): pod has node assigned",
        "hint: spec.nodeName (gpu-node-3) is set because this is a live Pod, already bound to a node (it has "
        "uid, resourceVersion, creationTimestamp, status); review it as the new Pod it was created as with --as-new",
    ]


def test_as_new_reviews_a_live_pod_as_the_pod_it_was_created_as(tmp_path: Path) -> None:
    run = review(write(tmp_path, "live.yaml", live_pod()), "--as-new")
    assert (run.code, run.lines) == (0, ["ml/train-7d9f-x2k4q: allowed, 2 patch operation(s)"])
    (pod,) = run.documents()
    assert "status" not in pod and "nodeName" not in pod["spec"]
    assert not {"uid", "resourceVersion", "creationTimestamp", "ownerReferences", "managedFields"} & set(
        pod["metadata"]
    )
    assert pod["metadata"]["labels"] == {"app": "train"} and pod["spec"]["schedulerName"] == "hami-scheduler"


FORGED = {"hami.io/vgpu-node": "gpu-node-1", "hami.io/vgpu-devices-to-allocate": "GPU-0,NVIDIA,20000,100:;"}
VGPU_NODE_DENIAL = "annotation hami.io/vgpu-node is written by HAMi's scheduler, not by a Pod's author"


def test_as_new_drops_what_hamis_scheduler_wrote_into_a_live_pod(tmp_path: Path) -> None:
    live = live_pod()
    live["metadata"]["annotations"] = {**FORGED, "team": "ml"}
    run = review(write(tmp_path, "live.yaml", live), "--as-new")
    assert (run.code, run.lines) == (0, ["ml/train-7d9f-x2k4q: allowed, 2 patch operation(s)"])
    (pod,) = run.documents()
    assert pod["metadata"]["annotations"] == {"team": "ml", "hami.io/gpu-type": "NVIDIA"}


@pytest.mark.parametrize("scheduler", ["hami-scheduler", "volcano"])
def test_a_forged_allocation_is_denied_whatever_the_scheduler(tmp_path: Path, scheduler: str) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": FORGED}, "spec": pod_spec()}
    pod["spec"]["schedulerName"] = scheduler
    run = review(write(tmp_path, "pod.yaml", pod))
    assert (run.code, run.lines) == (1, [f"default/p: denied (403 Forbidden): {VGPU_NODE_DENIAL}"])


def test_a_forged_allocation_on_an_opted_out_pod_is_refused_by_the_webhook(tmp_path: Path) -> None:
    """The opt-out label no longer keeps a Pod from the webhook (it is only not mutated): its forgery is refused
    there, before the API server's allocation guard would."""
    labels = {"hami.io/webhook": "ignore"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels, "annotations": FORGED}}
    run = review(write(tmp_path, "pod.yaml", {**pod, "spec": pod_spec()}))
    assert run.code == 1
    assert run.lines == [f"default/p: denied (403 Forbidden): {VGPU_NODE_DENIAL}"]


# --- the device config as admins have it --------------------------------------------------------------------

CONFIG_MAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {
        "name": "hami-scheduler-device",
        "namespace": "kube-system",
        "uid": "0c4c1f0e-6d1b-4f7e-8c55-3d1f1e2a9b10",
        "resourceVersion": "4567",
        "creationTimestamp": "2026-11-01T08:00:00Z",
        "labels": {"app.kubernetes.io/component": "hami-scheduler"},
        "annotations": {"meta.helm.sh/release-name": "hami"},
    },
}


def config_map(config: dict[str, Any]) -> dict[str, Any]:
    return {**CONFIG_MAP, "data": {"device-config.yaml": yaml.safe_dump(config)}}


def test_the_device_config_map_exported_by_kubectl_is_used(tmp_path: Path) -> None:
    """HAMi chart's ConfigMap as kubectl prints it; keys HAMi's scheduler and device plugin read and the webhook
    does not are known to be HAMi's, so they draw no warning."""
    nvidia = {
        "resourceCountName": "nvidia.com/gpu",
        "gpuCorePolicy": "force",
        "deviceSplitCount": 10,
        "deviceMemoryScaling": 1,
        "deviceCoreScaling": 1,
        "preConfiguredDeviceMemory": 0,
        "enableNumaTopology": False,
        "libCudaLogLevel": 1,
        "migProfileAllowlist": [{"models": ["A30"], "profiles": ["1g.6gb"]}],
    }
    config = write(tmp_path, "cm.yaml", config_map({"nvidia": nvidia, "mthreads": {"memoryPerCard": [96]}}))
    pod = write(
        tmp_path, "pod.yaml", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod_spec()}
    )
    run = review(pod, "--config", config, "--patch")
    assert run.code == 0 and run.lines == ["default/p: allowed, 5 patch operation(s)"]
    env = {
        "op": "add",
        "path": "/spec/containers/0/env",
        "value": [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}],
    }
    assert env in json.loads(run.out)


def test_misspelled_device_config_keys_are_named_with_the_closest_known_one(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        "device-config.yaml",
        {"nvidai": {"gpuCorePolicy": "force"}, "nvidia": {"resourceCountNmae": "nvidia.com/vgpu"}},
    )
    pod = write(
        tmp_path, "pod.yaml", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod_spec()}
    )
    run = review(pod, "--config", config)
    assert run.code == 0
    assert run.lines[:2] == [
        f"hami-webhook: warning: device config {config}: nvidai: unknown section, ignored (did you mean nvidia?)",
        f"hami-webhook: warning: device config {config}: nvidia.resourceCountNmae: unknown key, ignored "
        "(did you mean resourceCountName?)",
    ]


def test_a_config_file_holding_another_kind_is_refused(tmp_path: Path) -> None:
    config = write(tmp_path, "pod.yaml", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
    run = review(config, "--config", config)
    assert run.code == 2
    assert run.lines == [
        f"hami-webhook: invalid setting: HAMI_DEVICE_CONFIG: {config} holds a Pod: expected HAMi's device config, "
        "or the ConfigMap that holds it"
    ]


# --- what the webhook would never see -----------------------------------------------------------------------


def test_pods_in_excluded_namespaces_are_created_unchanged(hami_examples: Path) -> None:
    run = review(hami_examples / "examples/enflame/gcu_use.yaml")
    assert run.code == 0
    unchanged = "created unchanged; if it were sent: allowed, 2 patch operation(s)"
    assert run.lines == [
        f"kube-system/gcu-pod-1: {NOT_IN_KUBE_SYSTEM}: {unchanged}",
        f"kube-system/gcu-pod-2: {NOT_IN_KUBE_SYSTEM}: {unchanged}",
    ]
    assert all(pod["spec"]["schedulerName"] == "default-scheduler" for pod in run.documents())
    assert json.loads(review(hami_examples / "examples/enflame/gcu_use.yaml", "--patch").out) == {
        "kube-system/gcu-pod-1": [],
        "kube-system/gcu-pod-2": [],
    }


def test_the_ignore_label_keeps_a_namespace_away_and_leaves_a_pod_unmutated(tmp_path: Path) -> None:
    """An administrator's label on a namespace keeps its Pods from the webhook; an author's on a Pod only keeps it
    unmutated (it is still charged to a namespace device quota: docs/rules.md#the-opt-out-label)."""
    ignore = {"hami.io/webhook": "ignore"}
    labelled = workload("Deployment")
    labelled["spec"]["template"] = template(labels=ignore)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "quiet", "labels": ignore}}
    in_quiet = workload("Job", namespace="quiet")
    run = review(write(tmp_path, "all.yaml", [labelled, namespace, in_quiet]))
    assert run.code == 0
    assert run.lines == [
        "Deployment/ml/train, Pods from spec.template: allowed, no change",
        "hint: labelled hami.io/webhook: ignore: not mutated, only charged to its namespace's device quota",
        "Namespace/quiet: creates no Pod (its labels are used for the namespaceSelector)",
        "Job/quiet/train, Pods from spec.template: not sent to the webhook (namespace quiet is excluded by the "
        "namespaceSelector: hami.io/webhook NotIn (ignore)): created unchanged; if it were sent: allowed, 4 patch "
        "operation(s)",
    ]


def test_pods_without_accelerators_are_not_sent(tmp_path: Path) -> None:
    cpu = {"name": "web", "image": "nginx", "resources": {"limits": {"cpu": "1"}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": {"containers": [cpu]}}
    run = review(write(tmp_path, "pod.yaml", pod))
    assert run.lines == [
        "default/web: not sent to the webhook (matchConditions false: requests-accelerator): created unchanged; "
        "if it were sent: allowed, no change"
    ]


def admin_configuration(tmp_path: Path, edit: Any) -> Path:
    """The shipped configuration as an admin rendered it for their cluster, changed by ``edit``."""
    configuration = yaml.safe_load(WEBHOOK_CONFIGURATION.read_text())
    edit(configuration["webhooks"][0])
    return write(tmp_path, "webhook.yaml", configuration)


def test_the_rules_come_from_the_admins_webhook_configuration(tmp_path: Path, hami_examples: Path) -> None:
    def admit_kube_system(hook: dict[str, Any]) -> None:
        hook["namespaceSelector"]["matchExpressions"][1]["values"] = ["kube-node-lease"]

    configuration = admin_configuration(tmp_path, admit_kube_system)
    run = review(hami_examples / "examples/enflame/gcu_use.yaml", "--webhook-config", configuration)
    assert run.lines == [
        "kube-system/gcu-pod-1: allowed, 2 patch operation(s)",
        "kube-system/gcu-pod-2: allowed, 2 patch operation(s)",
    ]


def test_a_match_condition_that_cannot_be_evaluated_rejects_under_fail(tmp_path: Path) -> None:
    def broken(hook: dict[str, Any]) -> None:
        hook["matchConditions"].append({"name": "team", "expression": "object.metadata.labels.team == 'a'"})

    path = write(
        tmp_path, "pod.yaml", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod_spec()}
    )
    run = review(path, "--webhook-config", admin_configuration(tmp_path, broken))
    assert run.code == 1
    assert run.lines[0].startswith(
        "default/p: rejected by the API server: matchConditions could not be evaluated (team: "
    )
    assert run.lines[0].endswith("); failurePolicy Fail")


def test_an_unreadable_webhook_configuration_exits_2(tmp_path: Path) -> None:
    path = write(
        tmp_path, "pod.yaml", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod_spec()}
    )
    run = review(path, "--webhook-config", path)
    assert (run.code, run.lines) == (
        2,
        [f"hami-webhook: invalid webhook configuration: {path} holds no MutatingWebhookConfiguration with webhooks"],
    )


# --- vendors that are off -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("example", "variable"),
    [
        pytest.param("ascend/job-910A.yaml", "HAMI_ENABLE_ASCEND", id="ascend"),
        pytest.param("iluvatar/default_use_BI-V100.yaml", "HAMI_ENABLE_ILUVATAR", id="iluvatar"),
    ],
)
def test_a_vendor_that_is_off_is_named_with_the_setting_that_turns_it_on(
    hami_examples: Path, example: str, variable: str
) -> None:
    run = review(hami_examples / "examples" / example)
    assert run.code == 0
    decision, hint = run.lines
    assert decision.endswith(": allowed, no change")
    assert hint.startswith("hint: ") and hint.endswith(
        f"belong to a device backend that is off: set {variable}=true to handle them"
    )
    switched_on = review(hami_examples / "examples" / example, **{variable: "true"})
    assert len(switched_on.lines) == 1 and "patch operation(s)" in switched_on.lines[0]


# --- several Pods with --patch ------------------------------------------------------------------------------


def test_each_patch_is_labelled_with_its_document(hami_examples: Path) -> None:
    run = review(hami_examples / "examples/nvidia/use_sharing_card.yaml", "--patch")
    patches = json.loads(run.out)
    assert list(patches) == ["default/gpu-pod1", "default/gpu-pod2"]
    assert all(
        {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"} in p for p in patches.values()
    )


def test_nodes_shared_in_the_input_are_printed_plainly_as_kubectl_would(tmp_path: Path) -> None:
    """Anchors in the input (or any node two places share) come out written in full: kubectl never prints
    ``&id001``/``*id001``, and tools that read its output need not resolve them."""
    path = tmp_path / "anchors.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: two, labels: &labels {app: train}, annotations: *labels}\n"
        "spec:\n  containers:\n"
        "  - {name: a, image: cuda:12, resources: &gpu {limits: {nvidia.com/gpu: 1}}}\n"
        "  - {name: b, image: cuda:12, resources: *gpu}\n"
    )
    run = review(path)
    assert run.code == 0, run.err
    assert "&" not in run.out and "*" not in run.out, run.out
    (pod,) = run.documents()
    assert pod["metadata"]["labels"] == {"app": "train"}, (
        "the annotation added is not the labels' (one node in the input)"
    )
    assert pod["metadata"]["annotations"] == {"app": "train", "hami.io/gpu-type": "NVIDIA"}
    assert [c["resources"]["limits"]["nvidia.com/gpu"] for c in pod["spec"]["containers"]] == [1, 1]
