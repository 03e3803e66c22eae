"""The quota as a namespace user with `edit` tries to get around it, through the shipped install on each pinned
version (docs/rules.md#every-device-pod-is-charged, #only-the-webhook-writes-a-reservation, #charged-once-per-pod):
the opt-out label, another scheduler, a copied or forged reservation, and a later webhook that makes the API server
review every Pod again. Each time, what is stored never goes over the limit, and nothing that fits is refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from app.admission.quantity import parse
from app.quota.core.gang import KUEUE_LABEL, KUEUE_TOTAL
from testbed.api import pod
from testbed.install import Installed
from testbed.replicas import Replicas
from tests.realkube.quota_replicas import MEM, ONE_GPU, full, quota_namespace, replicas_of, stored
from tests.realkube.sidecar import LABEL, sidecar_injector

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

AUTHOR = "alice"  # bound to `edit` in each test's namespace
RESERVATION = "hami.io/quota-reservation"
CPU_PROXY = {"name": "proxy", "image": "proxy:1", "resources": {"limits": {"cpu": "100m"}}}


@pytest.fixture(scope="module")
def two_replicas(any_installed: Installed) -> Iterator[Replicas]:
    """Two webhook replicas behind the ClusterIP, as the shipped Deployment runs them; the installed one after."""
    yield from replicas_of(any_installed, count=2)
    if not any_installed.webhook.running:
        any_installed.webhook.start()


def author_namespace(installed: Installed, room: int) -> str:
    """A namespace with room for ``room`` one-GPU Pods of 1000 MiB, AUTHOR bound to `edit` in it. The limit's key
    is `limits.<name>`, which kube-apiserver's own quota admission does not enforce for an extended resource (it does
    `requests.<name>`): only the webhook stands between the author and the limit."""
    kube = installed.kube
    made = quota_namespace(kube, room, key=f"limits.{MEM}")
    kube.kubectl("create", "rolebinding", f"{AUTHOR}-edit", "-n", made, "--clusterrole=edit", f"--user={AUTHOR}")
    kube.wait_for(
        lambda: (
            kube.kubectl("auth", "can-i", "create", "pods", "-n", made, f"--as={AUTHOR}", check=False).returncode == 0
        ),
        30,
    )
    return made


@pytest.fixture
def ns(any_installed: Installed, two_replicas: Replicas) -> Iterator[str]:
    """Room for four, AUTHOR's (``author_namespace``)."""
    made = author_namespace(any_installed, 4)
    try:
        yield made
    finally:
        any_installed.kube.kubectl("delete", "namespace", "--wait=false", made)


def create(installed: Installed, ns: str, obj: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``obj`` created in ``ns`` by AUTHOR: the status and the stored Pod or the Status."""
    return installed.kube.call("POST", f"/api/v1/namespaces/{ns}/pods", obj, as_user=AUTHOR)


def device_pod(name: str, **metadata: Any) -> dict[str, Any]:
    made = pod(name, ONE_GPU)
    made["metadata"] |= metadata
    return made


def memory(installed: Installed, ns: str) -> int:
    """What the namespace's stored Pods ask of its GPU memory."""
    return sum(
        parse(c["resources"]["limits"].get(MEM, "0")).value  # the API server writes 1000 as "1k"
        for p in stored(installed.kube, ns)
        for c in p["spec"]["containers"]
    )


@pytest.mark.parametrize(
    "routed",
    [
        pytest.param({"labels": {"hami.io/webhook": "ignore"}}, id="opt-out-label"),
        pytest.param({}, id="another-scheduler"),
    ],
)
def test_a_pod_the_webhook_does_not_mutate_is_charged(any_installed: Installed, ns: str, routed: dict) -> None:
    """Opted out by its label (and naming HAMi's scheduler itself), or bound for another scheduler: created
    unmutated while it fits, refused by the quota when it does not."""
    scheduler = "hami-scheduler" if routed else "volcano"
    answers = []
    for i in range(6):
        made = device_pod(f"p{i}", **routed)
        made["spec"]["schedulerName"] = scheduler
        answers.append(create(any_installed, ns, made))
    assert [status for status, _ in answers] == [201] * 4 + [403] * 2
    assert {answer["message"] for _, answer in answers[4:]} == {
        f'admission webhook "pods.hami.io" denied the request: {full(ns, 4)}'
    }
    for _, created in answers[:4]:
        assert "hami.io/gpu-type" not in created["metadata"]["annotations"]  # not mutated
        assert created["spec"]["schedulerName"] == scheduler
        assert created["metadata"]["annotations"][RESERVATION]  # charged, its seal on it
    assert memory(any_installed, ns) == 4000


def test_a_copied_or_forged_reservation_frees_no_room(any_installed: Installed, ns: str) -> None:
    """A Pod for another scheduler carrying the seal of an admitted Pod, or a made-up one, has it replaced by its
    own: it is charged, and the Pod whose seal it copied keeps its room (room for four, four stored)."""
    status, first = create(any_installed, ns, device_pod("first"))
    assert status == 201
    sealed = first["metadata"]["annotations"][RESERVATION]
    forgeries = [sealed, sealed.split(".")[0], "made.up.seal.AAAAAAAAAAAAAAAAAAAAAA"]
    answers = []
    for i, forged in enumerate(forgeries):
        made = device_pod(f"forged-{i}", annotations={RESERVATION: forged})
        made["spec"]["schedulerName"] = "volcano"
        answers.append(create(any_installed, ns, made))
    assert [status for status, _ in answers] == [201, 201, 201]
    kept = [created["metadata"]["annotations"][RESERVATION] for _, created in answers]
    assert all(k not in forgeries for k in kept) and len(set(kept)) == 3
    assert create(any_installed, ns, device_pod("one-more"))[0] == 403
    assert memory(any_installed, ns) == 4000


def test_behind_a_webhook_that_changes_every_pod_room_for_n_admits_n(
    any_installed: Installed, ns: str, tmp_path: Path
) -> None:
    """An injector after ours adds a CPU proxy to every Pod, so kube-apiserver reviews each again with a new request
    uid: each is charged once, and room for four admits exactly four."""
    with sidecar_injector(any_installed.kube, tmp_path, CPU_PROXY):
        answers = [create(any_installed, ns, device_pod(f"meshed-{i}", labels=dict(LABEL))) for i in range(6)]
    assert [status for status, _ in answers] == [201] * 4 + [403] * 2, [a.get("message") for _, a in answers]
    assert all([c["name"] for c in created["spec"]["containers"]][-1] == "proxy" for _, created in answers[:4])
    assert memory(any_installed, ns) == 4000


def test_behind_a_webhook_that_adds_a_device_each_pod_is_charged_its_whole_demand_once(
    any_installed: Installed, ns: str, tmp_path: Path
) -> None:
    """An injector after ours adds a 1000 MiB GPU container to every Pod: the review again (a new request uid) sees
    2000 where the first charged 1000, and charges the difference only, into the same entry. Room for four
    1000 MiB Pods admits two such Pods, their whole demand stored, and nothing more (charged both times in full, a
    Pod would take 3000 and the second be refused; charged once for its first review, the namespace would hold
    8000)."""
    sidecar = {"name": "gpu-sidecar", "image": "sidecar:1", "resources": {"limits": dict(ONE_GPU)}}
    with sidecar_injector(any_installed.kube, tmp_path, sidecar):
        answers = [create(any_installed, ns, device_pod(f"grown-{i}", labels=dict(LABEL))) for i in range(3)]
    assert [status for status, _ in answers] == [201, 201, 403], [a.get("message") for _, a in answers]
    assert "used 4000 + requested 1000 > limit 4000" in answers[2][1]["message"]  # its first review's 1000
    assert all(len(created["spec"]["containers"]) == 2 for _, created in answers[:2])
    assert memory(any_installed, ns) == 4000


def kueue(group: str, count: str) -> dict[str, Any]:
    """The marks of a Kueue plain-Pod group's member declaring ``count`` Pods."""
    return {"labels": {KUEUE_LABEL: group}, "annotations": {KUEUE_TOTAL: count}}


def _gang_with_a_launcher(installed: Installed, ns: str, group: str) -> None:
    """The launcher created, then the three workers: the first worker is tried until the replicas' feeds have seen
    the launcher (until then it is held for it too, at a worker's size), as the Job's controller retries it."""
    launcher = pod("launcher", {"cpu": "100m"}, metadata=kueue(group, "4"))
    assert create(installed, ns, launcher)[0] == 201
    answers = []
    deadline = time.monotonic() + 20
    while True:
        answers.append(create(installed, ns, pod("worker-0", ONE_GPU, metadata=kueue(group, "4"))))
        if answers[-1][0] == 201 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert answers[-1][0] == 201, answers[-1]
    for i in (1, 2):
        status, answer = create(installed, ns, pod(f"worker-{i}", ONE_GPU, metadata=kueue(group, "4")))
        assert status == 201, answer
    assert memory(installed, ns) == 3000


def test_a_gang_s_launcher_that_asks_for_no_device_fills_its_place(any_installed: Installed, ns: str) -> None:
    """An MPI job: a launcher on CPU (never sent to the webhook) and three one-GPU workers, a gang of four, in room
    for three workers, runs whole in either order. The launcher seen first fills its place, of no room. A worker
    first is refused: no group object says which roles carry devices
    (docs/rules.md#a-gang-is-admitted-whole-or-not-at-all), so it is held for four and the denial says it counts
    each Pod not seen yet as large as this one; once its controller has created the launcher, the worker tried
    again is admitted, and the gang whole."""
    kube = any_installed.kube
    namespaces = [author_namespace(any_installed, 3), author_namespace(any_installed, 3)]
    try:
        _gang_with_a_launcher(any_installed, namespaces[0], "mpi")
        early = namespaces[1]
        status, answer = create(any_installed, early, pod("worker-0", ONE_GPU, metadata=kueue("mpi", "4")))
        assert status == 403 and "each Pod not seen yet counted as large as this one" in answer["message"], answer
        assert memory(any_installed, early) == 0
        _gang_with_a_launcher(any_installed, early, "mpi")
    finally:
        for namespace in namespaces:
            kube.kubectl("delete", "namespace", "--wait=false", namespace)


@pytest.mark.parametrize(
    "count", ["\u00b2", "9" * 4299, "1000000", "-3"], ids=["superscript", "4299-digits", "7-digits", "sign"]
)
def test_a_kueue_count_that_is_no_count_refuses_only_its_own_pod(any_installed: Installed, ns: str, count: str) -> None:
    """What an author writes as the group's total count is refused in one short line, and refuses nobody else's Pod
    created at the same moment (a commit of several admissions at once decides each alone)."""
    with ThreadPoolExecutor(2) as pool:
        bad = pool.submit(create, any_installed, ns, pod("bad", ONE_GPU, metadata=kueue("g", count)))
        good = pool.submit(create, any_installed, ns, device_pod("good"))
        (status, answer), (fine, _) = bad.result(), good.result()
    assert status == 403 and fine == 201
    assert answer["message"].endswith("is not a count of at most 6 ASCII digits") and len(answer["message"]) < 400
