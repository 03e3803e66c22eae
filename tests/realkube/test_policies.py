"""The admission policies the manifests install (app/preview/policies.py), enforced by the API server itself on each
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
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from app.admission.annotations import NODE_LABEL, QUOTA_RESERVATION_ANNOTATION
from app.preview.policies import FLOOR, GUARD, REVIEWED, ROUTED
from testbed import ROOT, hami
from testbed.api import GPU, create, pod
from testbed.cluster import RealKube, kubectl_binary
from testbed.install import IGNORE_LABEL, Installed, WebhookServer, apply, namespace, token
from testbed.ports import free_port
from tests.realkube.hami_scheduler import (
    ASCEND_ACCOUNT,
    ASCEND_NAMESPACE,
    BIND_PHASE,
    DEVICE_PLUGIN,
    HAMI_NAMESPACE,
    SCHEDULER_ACCOUNT,
    TO_ALLOCATE,
    ascend_device_plugin,
    chart_accounts,
)
from tests.realkube.sidecar import LABEL, sidecar_injector

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

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
    "written by HAMi's scheduler and device plugins only (ServiceAccounts allowed to patch nodes): admin may not "
    "create a Pod with it"
)
UNROUTED = (
    f"ValidatingAdmissionPolicy '{ROUTED}' with binding '{ROUTED}' denied request: a device Pod would be stored on "
    "default-scheduler, not routed to hami-scheduler by hami-webhook"
)
NODE_NAME = "a device Pod for hami-scheduler has spec.nodeName set: it would skip HAMi's scheduler"
Obj = dict[str, Any]
Done = subprocess.CompletedProcess[str]


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
    """In the webhook's scope the webhook refuses it (whatever the scheduler, a Pod opted out by its own label too:
    it is sent, only charged); where it never looks, the guard."""
    cases = {
        "hami-scheduler": (ns, forged("to-hami", "hami-scheduler"), WEBHOOK_DENIAL),
        "another-scheduler": (ns, forged("to-volcano", "volcano"), WEBHOOK_DENIAL),
        "object-opted-out": (ns, forged("labelled", labels=IGNORE_LABEL), WEBHOOK_DENIAL),  # sent, only charged
        "namespace-opted-out": (opted_out, forged("elsewhere"), GUARD_DENIAL),
    }
    for case, (where, obj, denial) in cases.items():
        code, _, err = create(any_installed, where, obj)
        assert code == 1 and denial in err, (case, err)
        obj["metadata"].pop("annotations")
        code, created, err = create(any_installed, where, obj)
        assert code == 0, (case, err)
        assert created["metadata"]["name"] == obj["metadata"]["name"]


@dataclass(frozen=True)
class Writers:
    """Who writes allocation annotations in the test: HAMi's components by the RBAC their charts grant, and a
    Pod author with `edit` in the Pod's namespace, as a user and as a ServiceAccount (bearer tokens from the
    TokenRequest API; the user by impersonation, as an authenticating proxy would name them)."""

    scheduler: str
    nvidia: str
    ascend: str
    author_account: str


AUTHOR = "alice"  # a user bound to `edit` in the Pod's namespace
AUTHOR_ACCOUNT = "author"  # a ServiceAccount of that namespace, bound to `edit` too


@pytest.fixture
def author(any_installed: Installed, ns: str) -> str:
    """AUTHOR, bound to `edit` in ``ns`` (once the authorizer has seen the binding)."""
    kube = any_installed.kube
    kube.kubectl("create", "rolebinding", f"{AUTHOR}-edit", "-n", ns, "--clusterrole=edit", f"--user={AUTHOR}")
    kube.wait_for(
        lambda: kube.kubectl("auth", "can-i", "patch", "pods", "-n", ns, f"--as={AUTHOR}", check=False).returncode == 0,
        30,
    )
    return AUTHOR


@pytest.fixture
def writers(any_installed: Installed, ns: str, author: str, hami_reference: hami.Reference) -> Iterator[Writers]:
    kube = any_installed.kube
    kube.wait_for(lambda: not kube.exists("namespace", ASCEND_NAMESPACE), 60)  # an earlier test's, deleted
    installed = [*chart_accounts(kube, hami_reference), *ascend_device_plugin(kube)]
    kube.kubectl("create", "serviceaccount", AUTHOR_ACCOUNT, "-n", ns)
    subject = f"--serviceaccount={ns}:{AUTHOR_ACCOUNT}"
    kube.kubectl("create", "rolebinding", f"{AUTHOR_ACCOUNT}-edit", "-n", ns, "--clusterrole=edit", subject)
    accounts = {
        "scheduler": f"{HAMI_NAMESPACE}:{SCHEDULER_ACCOUNT}",
        "nvidia": f"{HAMI_NAMESPACE}:{DEVICE_PLUGIN}",
        "ascend": f"{ASCEND_NAMESPACE}:{ASCEND_ACCOUNT}",
        "author_account": f"{ns}:{AUTHOR_ACCOUNT}",
    }
    # The authorizer learns of new bindings from a watch.
    for account in accounts.values():
        can = ("auth", "can-i", "patch", "pods", "-n", ns, f"--as=system:serviceaccount:{account}")
        kube.wait_for(lambda c=can: kube.kubectl(*c, check=False).returncode == 0, 30)
    try:
        yield Writers(**{key: token(kube, *reversed(account.split(":"))) for key, account in accounts.items()})
    finally:
        listed = {"apiVersion": "v1", "kind": "List", "items": installed}
        kube.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=false", stdin=json.dumps(listed))


def annotate(kube: RealKube, ns: str, name: str, *pairs: str, as_token: str = "", as_user: str = "") -> Done:
    who = ["--token", as_token] if as_token else ["--as", as_user] if as_user else []
    return kube.kubectl("annotate", "--overwrite", "-n", ns, f"pod/{name}", *who, *pairs, check=False)


def refusal(annotation: str, user: str, how: str = "add, change or remove it", kind: str = "annotation") -> str:
    return (
        f"ValidatingAdmissionPolicy '{GUARD}' with binding '{GUARD}' denied request: {kind} {annotation} is "
        f"written by HAMi's scheduler and device plugins only (ServiceAccounts allowed to patch nodes): {user} may "
        f"not {how}"
    )


def test_allocations_are_written_by_who_may_patch_nodes(any_installed: Installed, ns: str, writers: Writers) -> None:
    """HAMi's scheduler and device plugins, installed anywhere under any release, pass the guard by the RBAC
    their charts grant (patch on Nodes); a Pod author with `edit`, as a user or a ServiceAccount, does not."""
    kube = any_installed.kube
    code, created, err = create(any_installed, ns, pod("running", GPU))
    assert code == 0, err
    name = created["metadata"]["name"]
    answers: dict[str, str] = {}

    def allowed(who: str, *pairs: str, on: str = name, **as_who: str) -> None:
        done = annotate(kube, ns, on, *pairs, **as_who)
        answers[f"{who} {' '.join(pairs)}"] = "allowed" if done.returncode == 0 else done.stderr.strip()
        assert done.returncode == 0, done.stderr

    def refused(who: str, denial: str, *pairs: str, on: str = name, **as_who: str) -> None:
        done = annotate(kube, ns, on, *pairs, **as_who)
        answers[f"{who} {' '.join(pairs)}"] = done.stderr.strip() or "allowed"
        assert done.returncode == 1 and denial in done.stderr, done.stderr

    scheduler = f"{HAMI_NAMESPACE}:{SCHEDULER_ACCOUNT}"
    writes = ("hami.io/vgpu-node=gpu-node-1", "hami.io/bind-phase=allocating", f"{TO_ALLOCATE}=GPU-0,NVIDIA,4000,30:;")
    allowed(scheduler, *writes, as_token=writers.scheduler)
    for who, user in ((AUTHOR, AUTHOR), (f"{ns}:{AUTHOR_ACCOUNT}", f"system:serviceaccount:{ns}:{AUTHOR_ACCOUNT}")):
        as_who = {"as_user": AUTHOR} if user == AUTHOR else {"as_token": writers.author_account}
        refused(who, refusal(TO_ALLOCATE, user), f"{TO_ALLOCATE}=GPU-1,NVIDIA,24000,100:;", **as_who)
        refused(who, refusal("hami.io/vgpu-node", user), "hami.io/vgpu-node=gpu-node-2", **as_who)
        allowed(who, "team=ml", **as_who)  # an annotation of its own: the guard's matchConditions pass it by
    nvidia = f"{HAMI_NAMESPACE}:{DEVICE_PLUGIN}"
    allowed(nvidia, f"{TO_ALLOCATE}=;", "hami.io/bind-phase=success", as_token=writers.nvidia)
    # HAMi's Ascend device plugin on an NPU Pod for HAMi's scheduler: its own annotations and the bind phase.
    npu = pod("npu", {"huawei.com/Ascend910B3": "1"}, schedulerName="hami-scheduler")
    code, _, err = create(any_installed, ns, npu)
    assert code == 0, err
    ascend = f"{ASCEND_NAMESPACE}:{ASCEND_ACCOUNT}"
    writes = ("hami.io/Ascend910B3-devices-to-allocate=;", "hami.io/bind-phase=success")
    allowed(ascend, *writes, on="npu", as_token=writers.ascend)
    allowed(ascend, "huawei.com/Ascend910B3=[]", on="npu", as_token=writers.ascend)
    # Trust decides, not the scheduler name: on a Pod of another scheduler too (where HAMi's own check refuses).
    code, _, err = create(any_installed, ns, pod("elsewhere", schedulerName="volcano"))
    assert code == 0, err
    allowed(nvidia, "hami.io/bind-phase=success", on="elsewhere", as_token=writers.nvidia)
    refused(AUTHOR, refusal(BIND_PHASE, AUTHOR), "hami.io/bind-phase=failed", on="elsewhere", as_user=AUTHOR)
    print("\n".join(f"{who}: {answer}" for who, answer in answers.items()))

    # Every write the guard refused before it trusted by permission is still refused (the admin: a user).
    changed = annotate(kube, ns, name, "hami.io/vgpu-node=gpu-node-2")
    assert changed.returncode == 1 and refusal("hami.io/vgpu-node", "admin") in changed.stderr
    removed = kube.kubectl("annotate", "-n", ns, f"pod/{name}", "hami.io/bind-phase-", check=False)
    assert removed.returncode == 1 and refusal("hami.io/bind-phase", "admin") in removed.stderr
    # The status subresource can write metadata too, and a Binding's annotations are copied onto its Pod.
    status = kube.kubectl(
        "patch", "-n", ns, f"pod/{name}", "--subresource=status", "--type=merge",
        "-p", json.dumps({"metadata": {"annotations": {"hami.io/bind-phase": "failed"}}}), check=False,
    )  # fmt: skip
    assert status.returncode == 1 and refusal("hami.io/bind-phase", "admin") in status.stderr
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
    assert (
        bound.returncode == 1
        and refusal("hami.io/vgpu-devices-allocated", "admin", "bind a Pod with it") in bound.stderr
    )
    annotations = kube.get("pod", name, namespace=ns)["metadata"]["annotations"]
    assert annotations["hami.io/vgpu-node"] == "gpu-node-1" and annotations["hami.io/bind-phase"] == "success"
    assert annotations[TO_ALLOCATE] == ";" and annotations["team"] == "ml"


# The nine prefix-less keys HAMi's scheduler hands vendors' own device plugins, with values as HAMi writes them.
VENDOR_KEYS = {
    "AWS_NEURON_IDS": "0,1",
    "NEURON_ALLOCATED": "false",
    "NEURON_ALLOC_TIME": "1757923200000000000",
    "NEURON_RESOURCE_TYPE": "aws.amazon.com/neuroncore",
    "BAIDU_COM_DEVICE_IDX": "0",
    "CAMBRICON_DSMLU_PROFILE": "0_10_16",
    "CAMBRICON_DSMLU_ASSIGNED": "false",
    "assigned-containers": '{"cuda":[0]}',
    "predicate-time": "1757923200",
}


def forbidden(name: str, denial: str) -> str:
    """The Status message of a policy's denial of a write to Pod ``name``."""
    return f'pods "{name}" is forbidden: {denial}'


def _meta(kind: str, key: str, value: str | None) -> Obj:
    return {"metadata": {"annotations" if kind == "annotation" else "labels": {key: value}}}


def test_every_key_hami_writes_is_refused_to_a_pod_author(
    any_installed: Installed, ns: str, opted_out: str, writers: Writers
) -> None:
    """The nine keys and the node label: HAMi's scheduler writes them; a user with `edit` in the namespace adds,
    changes or removes none of them, and creates no Pod with one, in the webhook's scope (the webhook refuses) or
    out of it (the guard); each refusal names the key."""
    kube = any_installed.kube
    pods = f"/api/v1/namespaces/{ns}/pods"
    for name in ("stored", "fresh"):
        code, _, err = create(any_installed, ns, pod(name, GPU))
        assert code == 0, err
    keys = [("annotation", key, value) for key, value in VENDOR_KEYS.items()]
    keys.append(("label", NODE_LABEL, "gpu-node-1"))
    answers = []
    for kind, key, value in keys:
        status, _ = kube.call("PATCH", f"{pods}/stored", _meta(kind, key, value), token=writers.scheduler)
        answers.append(f"{kind} {key}: HAMi's scheduler writes it: {status}")
        assert status == 200, (key, status)
    for kind, key, value in keys:
        for on, how, written in (
            ("fresh", "add", value),
            ("stored", "change", value + "0"),
            ("stored", "remove", None),
        ):
            status, answer = kube.call("PATCH", f"{pods}/{on}", _meta(kind, key, written), as_user=AUTHOR)
            answers.append(f"{kind} {key}: {AUTHOR} may {how} it: {status} {answer.get('message', '')}")
            assert status == 403 and answer["message"] == forbidden(on, refusal(key, AUTHOR, kind=kind)), answer
        body = pod("carrying", GPU, metadata=_meta(kind, key, value)["metadata"])
        status, answer = kube.call("POST", pods, body, as_user=AUTHOR)
        webhook = f"{kind} {key} is written by HAMi's scheduler, not by a Pod's author"
        answers.append(f"{kind} {key}: {AUTHOR} creates a Pod with it: {status} {answer.get('message', '')}")
        assert status == 403 and answer["message"].endswith(f"denied the request: {webhook}"), (key, answer)
        status, answer = kube.call("POST", f"/api/v1/namespaces/{opted_out}/pods", body)
        denial = refusal(key, "admin", "create a Pod with it", kind)
        assert status == 403 and answer["message"] == forbidden("carrying", denial), answer
    stored = kube.read(f"{pods}/stored")["metadata"]
    assert {k: stored["annotations"][k] for k in VENDOR_KEYS} == VENDOR_KEYS
    assert stored["labels"][NODE_LABEL] == "gpu-node-1"
    print("\n".join(answers))


VENDOR_SCHEDULER = "gcushare-scheduler"
VENDOR_NAMESPACE, VENDOR_ACCOUNT = "enflame-gcushare", "gcushare-scheduler"


@pytest.fixture
def vendor(any_installed: Installed) -> Iterator[str]:
    """A vendor-native stand-in beside HAMi: Enflame's gcushare scheduler's ServiceAccount, with the Node
    permission its chart grants (it records each node's GCUs on the Node). Its bearer token."""
    kube = any_installed.kube
    kube.wait_for(lambda: not kube.exists("namespace", VENDOR_NAMESPACE), 60)  # an earlier test's, deleted
    kube.namespace(VENDOR_NAMESPACE)
    kube.kubectl("create", "serviceaccount", VENDOR_ACCOUNT, "-n", VENDOR_NAMESPACE)
    role = ("create", "clusterrole", VENDOR_ACCOUNT, "--verb=get,list,watch,patch,update")
    kube.kubectl(*role, "--resource=nodes,pods")
    subject = f"--serviceaccount={VENDOR_NAMESPACE}:{VENDOR_ACCOUNT}"
    kube.kubectl("create", "clusterrolebinding", VENDOR_ACCOUNT, f"--clusterrole={VENDOR_ACCOUNT}", subject)
    user = f"--as=system:serviceaccount:{VENDOR_NAMESPACE}:{VENDOR_ACCOUNT}"
    kube.wait_for(lambda: kube.kubectl("auth", "can-i", "patch", "nodes", user, check=False).returncode == 0, 30)
    try:
        yield token(kube, VENDOR_ACCOUNT, VENDOR_NAMESPACE)
    finally:
        kube.kubectl("delete", "clusterrolebinding,clusterrole", VENDOR_ACCOUNT, "--ignore-not-found")
        kube.kubectl("delete", "namespace", VENDOR_NAMESPACE, "--wait=false")


def test_a_vendor_stack_writes_its_allocations_on_its_own_pods(
    any_installed: Installed, ns: str, author: str, vendor: str
) -> None:
    """Trust decides, not the scheduler name: the vendor's scheduler writes Enflame's keys on a Pod of its own
    scheduler; a user with `edit` on the same Pod may not."""
    kube = any_installed.kube
    gcu = pod("gcu", {"enflame.com/gcu": "1"}, schedulerName=VENDOR_SCHEDULER)
    code, created, err = create(any_installed, ns, gcu)
    assert code == 0 and created["spec"]["schedulerName"] == VENDOR_SCHEDULER, err
    path = f"/api/v1/namespaces/{ns}/pods/gcu"
    answers = []
    for key, value in (("enflame.com/gcu-assigned", "false"), ("assigned-containers", '{"cuda":[0]}')):
        status, answer = kube.call("PATCH", path, _meta("annotation", key, value), token=vendor)
        answers.append(f"{key}: {VENDOR_NAMESPACE}:{VENDOR_ACCOUNT} writes it: {status}")
        assert status == 200, answer
        status, answer = kube.call("PATCH", path, _meta("annotation", key, "true"), as_user=AUTHOR)
        answers.append(f"{key}: {AUTHOR} changes it: {status} {answer.get('message', '')}")
        assert status == 403 and answer["message"] == forbidden("gcu", refusal(key, AUTHOR)), answer
    print("\n".join(answers))


RESERVATION = QUOTA_RESERVATION_ANNOTATION
VENDOR = f"system:serviceaccount:{VENDOR_NAMESPACE}:{VENDOR_ACCOUNT}"
ELSEWHERE = "asking for no device or out of its scope"


def reserved_only(user: str, how: str = "add, change or remove it") -> str:
    return (
        f"ValidatingAdmissionPolicy '{GUARD}' with binding '{GUARD}' denied request: annotation {RESERVATION} is "
        f"written by hami-webhook only, when it charges a device Pod it reviews: {user} may not {how}"
    )


def test_the_quota_reservation_is_the_webhooks_alone(
    any_installed: Installed, ns: str, opted_out: str, author: str, vendor: str
) -> None:
    """A running Pod relabelled to a gang hold's id (`kubectl annotate`) would count against the hold: nobody adds,
    changes or removes the reservation on a stored Pod, not its author with `edit`, not the admin, not an account
    the guard trusts with allocations (allowed to patch Nodes), nor writes it through the status or a Binding; the
    guard's other keys stay refused and the author's own annotations pass. A Pod the webhook reserved for is
    created with it; one created with it where the webhook writes none (another scheduler, no device, a Pod or
    namespace opted out, even on HAMi's scheduler with a device) is refused."""
    kube = any_installed.kube
    hard = {"limits.nvidia.com/gpumem": "400000"}
    apply(kube, {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": ns},
                 "spec": {"hard": hard}})  # fmt: skip

    def reserved() -> Obj | None:  # once the webhook's quota feed has seen the ResourceQuota
        code, created, err = create(any_installed, ns, pod("reserved-", GPU))
        assert code == 0, err
        return created if RESERVATION in created["metadata"].get("annotations", {}) else None

    held = kube.wait_for(reserved, 30)
    name, hold = held["metadata"]["name"], held["metadata"]["annotations"][RESERVATION]
    code, _, err = create(any_installed, ns, pod("plain", {"cpu": "1"}))
    assert code == 0, err
    answers: list[str] = []

    def refused(on: str, pair: str, denial: str, who: str, **as_who: str) -> None:
        done = annotate(kube, ns, on, pair, **as_who)
        answers.append(f"{who}: kubectl annotate pod/{on} {pair}: {done.stderr.strip() or 'allowed'}")
        assert done.returncode == 1 and denial in done.stderr, done.stderr

    for who, as_who in ((AUTHOR, {"as_user": AUTHOR}), ("admin", {}), (VENDOR, {"as_token": vendor})):
        refused("plain", f"{RESERVATION}={hold}", reserved_only(who), who, **as_who)  # the attack: add a hold's id
        refused(name, f"{RESERVATION}={hold}x", reserved_only(who), who, **as_who)
        refused(name, f"{RESERVATION}-", reserved_only(who), who, **as_who)
    refused(name, "hami.io/vgpu-node=gpu-node-2", refusal("hami.io/vgpu-node", AUTHOR), AUTHOR, as_user=AUTHOR)
    mine = annotate(kube, ns, name, "team=ml", as_user=AUTHOR)
    assert mine.returncode == 0, mine.stderr
    pods = f"/api/v1/namespaces/{ns}/pods"
    status, answer = kube.call("PATCH", f"{pods}/{name}/status", _meta("annotation", RESERVATION, "u-1"))
    assert status == 403 and reserved_only("admin") in answer["message"], answer
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "plain", "annotations": {RESERVATION: hold}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-1"},
    }
    status, answer = kube.call("POST", f"{pods}/plain/binding", binding)
    assert status == 403 and reserved_only("admin", "bind a Pod with it") in answer["message"], answer
    # Created where the webhook never sees it: asking for no device, or in a namespace opted out.
    carrying: Obj = {"annotations": {RESERVATION: hold}}
    ours = {"schedulerName": "hami-scheduler"}
    for who, where, obj in (
        (AUTHOR, ns, pod("cpu", {"cpu": "1"}, **ours, metadata=carrying)),
        ("admin", opted_out, pod("opted-out", GPU, **ours, metadata=carrying)),
    ):
        as_user = AUTHOR if who == AUTHOR else ""
        status, answer = kube.call("POST", f"/api/v1/namespaces/{where}/pods", obj, as_user=as_user)
        answers.append(f"{who} creates {obj['metadata']['name']} with it: {status} {answer.get('message', '')}")
        denial = reserved_only(who, f"create a Pod with it {ELSEWHERE}")
        assert status == 403 and answer["message"] == forbidden(obj["metadata"]["name"], denial), answer
    # Another scheduler's Pod, and one opted out by its own label, are reviewed: charged, each with its own seal.
    for obj in (
        pod("volcano", GPU, schedulerName="volcano", metadata=carrying),
        pod("labelled", GPU, **ours, metadata={**carrying, "labels": IGNORE_LABEL}),
    ):
        status, answer = kube.call("POST", f"/api/v1/namespaces/{ns}/pods", obj, as_user=AUTHOR)
        answers.append(f"{AUTHOR} creates {obj['metadata']['name']} with it: {status}, sealed anew")
        assert status == 201 and answer["metadata"]["annotations"][RESERVATION] not in ("", hold), answer
    annotations = kube.get("pod", name, namespace=ns)["metadata"]["annotations"]
    assert annotations[RESERVATION] == hold and annotations["team"] == "ml"
    assert RESERVATION not in kube.get("pod", "plain", namespace=ns)["metadata"].get("annotations", {})
    print("\n".join(answers))


def test_a_setting_the_installed_policies_do_not_hold_is_logged_and_counted(
    any_installed: Installed, tmp_path: Path
) -> None:
    """A replica started with another HAMI_SCHEDULER_NAME than the installed policies name says so once, in one
    line naming both, and in its gauge, and is ready all the same; the installed one, whose setting they hold, is
    silent."""
    server = any_installed.webhook
    port = free_port()
    env = {**server.env, "HAMI_SCHEDULER_NAME": "gpu-scheduler", "HAMI_METRICS_BIND": f"127.0.0.1:{port}"}
    other = replace(server.with_address("127.0.0.1", free_port(), tmp_path / "other.log"), env=env).start()
    try:
        assert other.status("/readyz") == 200
        lines = [line for line in other.log.read_text().splitlines() if "HAMI_SCHEDULER_NAME is" in line]
        expected = f"the admission policies {ROUTED}, {REVIEWED} name scheduler hami-scheduler, "
        assert len(lines) == 1 and expected in lines[0] and "HAMI_SCHEDULER_NAME is gpu-scheduler" in lines[0], lines
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as scraped:
            text = scraped.read().decode()
        for policy in (ROUTED, REVIEWED):
            assert f'hami_webhook_policy_scheduler_mismatch{{policy="{policy}"}} 1.0' in text, text
        print(lines[0])
    finally:
        other.stop()
    assert "HAMI_SCHEDULER_NAME is" not in server.log.read_text()


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
