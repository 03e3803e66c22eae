"""The admission policies the manifests install (app/admission/policies.py), enforced by the API server itself on each
pinned
version: the allocation guard and the webhook's denial of forged allocations, the routed and reviewed policies,
the floor (1.36+), and the emergency switch with and without it.

The shared installation is used as installed (webhook up, policies on); a test that stops the webhook, switches
the failure policy or adds the floor puts everything back before it ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.admission.policies import FLOOR, GUARD, REVIEWED, ROUTED
from tests.realkube.cluster import RealKube, kubectl_binary
from tests.realkube.install import IGNORE_LABEL, Installed, WebhookServer, apply, namespace, token
from tests.realkube.pods import GPU, create, pod
from tests.realkube.sidecar import LABEL, sidecar_injector
from tests.support import ROOT

FORGED = {
    "hami.io/bind-time": "1757923200",
    "hami.io/bind-phase": "allocating",
    "hami.io/vgpu-node": "gpu-node-1",
    "hami.io/vgpu-devices-to-allocate": "GPU-0f6a2a7c,NVIDIA,20000,100:;",
}
# The API server sends annotations in key order, so the first forged one the webhook meets is bind-phase.
WEBHOOK_DENIAL = (
    'admission webhook "pods.hami.io" denied the request: annotation hami.io/bind-phase is written by HAMi\'s '
    "scheduler and device plugins, not by a Pod's author"
)
GUARD_DENIAL = (
    f"ValidatingAdmissionPolicy '{GUARD}' with binding '{GUARD}' denied request: annotation hami.io/bind-phase is "
    "written by HAMi's scheduler and device plugins only: admin may not create a Pod with it"
)
UNROUTED = (
    f"ValidatingAdmissionPolicy '{ROUTED}' with binding '{ROUTED}' denied request: a device Pod would be stored on "
    "default-scheduler, not routed to hami-scheduler by hami-webhook"
)
NODE_NAME = "a device Pod for hami-scheduler has spec.nodeName set: it would skip HAMi's scheduler"
SCHEDULER_ACCOUNT = ("kube-system", "hami-scheduler")
Obj = dict[str, Any]


@pytest.fixture
def ns(any_installed: Installed) -> Iterator[str]:
    kube = any_installed.kube
    name = kube.namespace(f"pol-{uuid.uuid4().hex[:8]}")
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
def opted_out(any_installed: Installed) -> Iterator[str]:
    name = f"pol-out-{uuid.uuid4().hex[:8]}"
    apply(any_installed.kube, namespace(name, IGNORE_LABEL))
    yield name
    any_installed.kube.kubectl("delete", "namespace", name, "--wait=false")


def forged(name: str, scheduler: str | None = None, labels: dict[str, str] | None = None) -> Obj:
    metadata = {"annotations": dict(FORGED), "labels": labels or {}}
    return pod(name, GPU, metadata=metadata, **({"schedulerName": scheduler} if scheduler else {}))


def test_a_forged_allocation_is_refused_wherever_it_is_created(
    any_installed: Installed, ns: str, opted_out: str
) -> None:
    """In the webhook's scope the webhook refuses it (whatever the scheduler); where it never looks, the guard."""
    cases = {
        "hami-scheduler": (ns, forged("to-hami", "hami-scheduler"), WEBHOOK_DENIAL),
        "another-scheduler": (ns, forged("to-volcano", "volcano"), WEBHOOK_DENIAL),
        "object-opted-out": (ns, forged("labelled", labels=IGNORE_LABEL), GUARD_DENIAL),
        "namespace-opted-out": (opted_out, forged("elsewhere"), GUARD_DENIAL),
    }
    for case, (where, obj, denial) in cases.items():
        code, _, err = create(any_installed, where, obj)
        assert code == 1 and denial in err, (case, err)
        obj["metadata"].pop("annotations")
        code, created, err = create(any_installed, where, obj)
        assert code == 0, (case, err)
        assert created["metadata"]["name"] == obj["metadata"]["name"]


@pytest.fixture
def scheduler_token(any_installed: Installed) -> Iterator[str]:
    """A TokenRequest token of HAMi's scheduler's ServiceAccount (the chart's), allowed to patch Pods."""
    kube = any_installed.kube
    ns, name = SCHEDULER_ACCOUNT
    role = f"test-{name}-pods"
    kube.kubectl("create", "serviceaccount", name, "-n", ns)
    kube.kubectl("create", "clusterrole", role, "--verb=get,patch,update", "--resource=pods,pods/binding")
    kube.kubectl("create", "clusterrolebinding", role, f"--clusterrole={role}", f"--serviceaccount={ns}:{name}")
    try:
        yield token(kube, name, ns)
    finally:
        kube.kubectl("delete", f"clusterrolebinding/{role}", f"clusterrole/{role}", "--ignore-not-found")
        kube.kubectl("delete", "serviceaccount", name, "-n", ns, "--ignore-not-found")


def annotate(kube: RealKube, ns: str, name: str, *pairs: str, as_token: str = "") -> subprocess.CompletedProcess[str]:
    who = ["--token", as_token] if as_token else []
    return kube.kubectl("annotate", "--overwrite", "-n", ns, f"pod/{name}", *pairs, *who, check=False)


def test_only_hamis_scheduler_writes_an_allocation(any_installed: Installed, ns: str, scheduler_token: str) -> None:
    kube = any_installed.kube
    code, created, err = create(any_installed, ns, pod("running", GPU))
    assert code == 0, err
    name = created["metadata"]["name"]

    by_user = annotate(kube, ns, name, "hami.io/vgpu-devices-to-allocate=GPU-0,NVIDIA,20000,100:;")
    assert by_user.returncode == 1
    assert (
        f"ValidatingAdmissionPolicy '{GUARD}' with binding '{GUARD}' denied request: annotation "
        "hami.io/vgpu-devices-to-allocate is written by HAMi's scheduler and device plugins only: admin may not "
        "add, change or remove it"
    ) in by_user.stderr
    by_scheduler = annotate(
        kube, ns, name, "hami.io/vgpu-node=gpu-node-1", "hami.io/bind-phase=allocating", as_token=scheduler_token
    )
    assert by_scheduler.returncode == 0, by_scheduler.stderr
    changed = annotate(kube, ns, name, "hami.io/vgpu-node=gpu-node-2")
    assert changed.returncode == 1 and "annotation hami.io/vgpu-node is written by" in changed.stderr
    removed = kube.kubectl("annotate", "-n", ns, f"pod/{name}", "hami.io/bind-phase-", check=False)
    assert removed.returncode == 1 and "annotation hami.io/bind-phase is written by" in removed.stderr
    assert annotate(kube, ns, name, "team=ml").returncode == 0, "an unrelated annotation is the user's"
    # The status subresource can write metadata too, and a Binding's annotations are copied onto its Pod.
    status = kube.kubectl(
        "patch", "-n", ns, f"pod/{name}", "--subresource=status", "--type=merge",
        "-p", json.dumps({"metadata": {"annotations": {"hami.io/bind-phase": "success"}}}), check=False,
    )  # fmt: skip
    assert status.returncode == 1 and "annotation hami.io/bind-phase is written by" in status.stderr
    phase = kube.kubectl(
        "patch", "-n", ns, f"pod/{name}", "--subresource=status", "--type=merge", "-p", '{"status":{"phase":"Pending"}}'
    )
    assert phase.returncode == 0, "status updates that leave the annotations alone are not the guard's"
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "annotations": {"hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,20000,100:;"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-1"},
    }
    bound = kube.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(binding), check=False)
    assert bound.returncode == 1 and "admin may not bind a Pod with it" in bound.stderr
    annotations = kube.get("pod", name, namespace=ns)["metadata"]["annotations"]
    assert annotations["hami.io/vgpu-node"] == "gpu-node-1" and annotations["hami.io/bind-phase"] == "allocating"
    assert annotations["team"] == "ml"


def test_a_device_added_after_the_webhook_never_reaches_default_scheduler(
    any_installed: Installed, ns: str, tmp_path: Path
) -> None:
    """kube-apiserver never calls a webhook for the first time in the reinvocation round: a CPU-only Pod, skipped
    by our matchConditions, that a later webhook gives a GPU is stored without us, unless routed refuses it."""
    kube = any_installed.kube
    with sidecar_injector(kube, tmp_path):
        code, _, err = create(any_installed, ns, pod("injected", {"cpu": "1"}, metadata={"labels": LABEL}))
        assert code == 1 and UNROUTED in err, err
        code, created, err = create(any_installed, ns, pod("gpu-injected", GPU, metadata={"labels": LABEL}))
        assert code == 0, err
        assert created["spec"]["schedulerName"] == "hami-scheduler", "ours was called first, and again after it"
        assert [c["name"] for c in created["spec"]["containers"]] == ["cuda", "gpu-sidecar"]


def test_outside_the_scope_routing_is_a_warning_and_mirror_pods_are_exempt(
    any_installed: Installed, ns: str, opted_out: str
) -> None:
    code, created, err = create(any_installed, opted_out, pod("gpu", GPU))
    assert code == 0 and created["spec"]["schedulerName"] == "default-scheduler", err
    assert (
        f"Warning: Validation failed for ValidatingAdmissionPolicy '{ROUTED}' with binding '{ROUTED}-outside-1'" in err
    )
    code, created, err = create(any_installed, opted_out, pod("gpu-hami", GPU, schedulerName="hami-scheduler"))
    assert code == 0, err
    assert (
        f"Warning: Validation failed for ValidatingAdmissionPolicy '{REVIEWED}' with binding '{REVIEWED}': a device "
        "Pod for hami-scheduler without hami-webhook's mark (hami.io/gpu-type)"
    ) in err
    # A mirror Pod (the kubelet's copy of a static Pod) is bound to its node from the start.
    mirror = pod(
        "static-gpu", GPU, nodeName="gpu-node-1", metadata={"annotations": {"kubernetes.io/config.mirror": "x"}}
    )
    code, created, err = create(any_installed, ns, mirror)
    assert code == 0 and created["spec"]["nodeName"] == "gpu-node-1", err
    assert "Warning" not in err
    for where in (ns, opted_out, "kube-system"):
        code, created, err = create(
            any_installed, where, pod("cpu-", {"cpu": "1"}, nodeName="node-1"), "--dry-run=server"
        )
        assert code == 0 and "Warning" not in err, (where, err)


# --- the webhook down: the emergency switch, with and without the floor ----------------------------------------


def switch(kube: RealKube, to: str) -> str:
    env = os.environ | {
        "KUBECONFIG": kube.kubeconfig_path,
        "PATH": f"{Path(kubectl_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "emergency-failure-policy.sh"), to],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def settled(installed: Installed, ns: str, *, allowed: bool) -> None:
    """Wait until the API server has loaded the switched configuration and binding (its informers take a moment):
    a device Pod is admitted (dry run) or refused."""
    installed.kube.wait_for(
        lambda: (create(installed, ns, pod("gpu-", GPU), "--dry-run=server")[0] == 0) == allowed, 30
    )


def actions(kube: RealKube) -> list[str]:
    return list(kube.get("validatingadmissionpolicybinding", ROUTED)["spec"]["validationActions"])


@pytest.fixture
def stopped(any_installed: Installed) -> Iterator[WebhookServer]:
    """The webhook stopped for the test; restarted, and the failure policy Fail again, after it."""
    server = any_installed.webhook
    server.stop()
    try:
        yield server
    finally:
        switch(any_installed.kube, "Fail")
        if not server.running:
            server.start()


def test_outage_under_ignore_keeps_the_switchs_promise(
    any_installed: Installed, ns: str, stopped: WebhookServer
) -> None:
    kube = any_installed.kube
    code, _, err = create(any_installed, ns, pod("gpu", GPU))
    assert code == 1 and 'failed calling webhook "pods.hami.io"' in err

    out = switch(kube, "Ignore")
    assert f"validatingadmissionpolicybinding/{ROUTED}:\n  validationActions Deny -> Warn,Audit (no floor:" in out
    assert actions(kube) == ["Warn", "Audit"]
    settled(any_installed, ns, allowed=True)
    code, created, err = create(any_installed, ns, pod("gpu", GPU))
    assert code == 0 and created["spec"]["schedulerName"] == "default-scheduler", err
    assert f"Warning: Validation failed for ValidatingAdmissionPolicy '{ROUTED}' with binding '{ROUTED}'" in err
    bound = pod("bound", GPU, schedulerName="hami-scheduler", nodeName="gpu-node-1")
    code, created, err = create(any_installed, ns, bound)
    assert code == 0 and NODE_NAME in err, err
    code, created, err = create(any_installed, ns, pod("cpu", {"cpu": "1"}))
    assert code == 0 and "Warning" not in err, err

    out = switch(kube, "Fail")
    assert "validationActions Warn,Audit -> Deny (device Pods past the webhook are refused)" in out
    assert actions(kube) == ["Deny"]
    settled(any_installed, ns, allowed=False)
    code, _, err = create(any_installed, ns, pod("gpu-2", GPU))
    assert code == 1 and 'failed calling webhook "pods.hami.io"' in err
    stopped.start()
    code, created, err = create(any_installed, ns, pod("gpu-3", GPU))
    assert code == 0 and created["spec"]["schedulerName"] == "hami-scheduler", err
    assert created["metadata"]["annotations"]["hami.io/gpu-type"] == "NVIDIA" and "Warning" not in err


@pytest.fixture
def floor_served(any_installed: Installed) -> None:
    """Skips before the webhook is stopped where there is no MutatingAdmissionPolicy."""
    if any_installed.kube.minor < 36:
        pytest.skip("MutatingAdmissionPolicy is GA and on by default from Kubernetes 1.36")


def test_the_floor_routes_device_pods_while_the_webhook_is_down(
    any_installed: Installed, floor_served: None, ns: str, stopped: WebhookServer, tmp_path: Path
) -> None:
    kube = any_installed.kube
    floor = ROOT / "manifests" / "components" / "floor"
    kube.kubectl("apply", "-k", str(floor))
    try:
        out = switch(kube, "Ignore")
        assert "validationActions Deny -> Deny (the floor routes device Pods)" in out

        def routed_by_floor() -> Obj | None:
            code, created, _ = create(any_installed, ns, pod("gpu-", GPU), "--dry-run=server")
            return created if code == 0 else None

        kube.wait_for(routed_by_floor, 30)  # the API server loads a new policy within about a second
        code, created, err = create(any_installed, ns, pod("gpu", GPU))
        assert code == 0 and created["spec"]["schedulerName"] == "hami-scheduler", err
        assert "hami.io/gpu-type" not in created["metadata"].get("annotations", {}), "unmutated: no webhook"
        assert f"'{REVIEWED}'" in err, "reviewed warns: routed, but never reviewed"
        code, created, err = create(any_installed, ns, pod("cpu", {"cpu": "1"}))
        assert code == 0 and created["spec"]["schedulerName"] == "default-scheduler", err
        code, _, err = create(any_installed, ns, pod("bound", GPU, nodeName="gpu-node-1"))
        assert code == 1 and f"binding '{ROUTED}' denied request: {NODE_NAME}" in err, (
            "routed by the floor, then refused"
        )
        with sidecar_injector(kube, tmp_path):
            code, _, err = create(any_installed, ns, pod("injected", {"cpu": "1"}, metadata={"labels": LABEL}))
        assert code == 1 and UNROUTED in err, "policies are not called first in the reinvocation round either"
    finally:
        kube.kubectl("delete", "-k", str(floor), "--ignore-not-found")
    out = switch(kube, "Ignore")
    assert "Deny -> Warn,Audit (no floor:" in out

    def floor_gone() -> bool:
        code, created, _ = create(any_installed, ns, pod("gpu-", GPU), "--dry-run=server")
        return code == 0 and created["spec"]["schedulerName"] == "default-scheduler"

    kube.wait_for(floor_gone, 30)
    assert not kube.exists("mutatingadmissionpolicy", FLOOR)
