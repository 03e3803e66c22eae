"""Namespace device quota through the real API server, with three webhook processes behind the Service's
ClusterIP (a round-robin forwarder plays kube-proxy), as a Deployment scaled to three replicas runs them:
exactly the Pods that fit are created, whoever creates them (clients at once, a Job's controller), and
nothing is refused except by the quota; gangs, each way of declaring them, admitted whole or not at all. Faults
mid-burst: test_quota_crashes.py, test_quota_partition.py and
test_quota_clock.py."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from testbed.api import create_at_once, pod
from testbed.cluster import RealKube
from testbed.install import Installed, WebhookServer, apply, get
from testbed.replicas import Replicas
from tests.realkube.quota_replicas import (
    MEM,
    ONE_GPU,
    SHORT_TTL,
    WAYS,
    full,
    member,
    podgroup,
    podgroup_crds,
    quota_namespace,
    refusals,
    replicas_of,
    stored,
)

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


@pytest.fixture
def three_webhooks(installed: Installed, webhook: WebhookServer) -> Iterator[Replicas]:
    """The installed webhook replaced by three processes behind its ClusterIP (it is restarted afterwards)."""
    yield from replicas_of(installed)


@pytest.fixture(scope="class")
def bursts_webhooks(installed: Installed) -> Iterator[Replicas]:
    """Three processes as `three_webhooks`, shared by the tests of one class (each in namespaces of its own):
    starting and stopping three replicas and the installed one again costs more than a burst."""
    yield from replicas_of(installed)
    if not installed.webhook.running:
        installed.webhook.start()


def test_exactly_k_of_n_concurrent_creates(installed: Installed, three_webhooks: Replicas) -> None:
    """Several rounds of N >> K creates at once, each in a namespace with room for K."""
    kube = installed.kube
    for room in (1, 4, 9):
        ns = quota_namespace(kube, room)
        try:
            _, calls = create_at_once(kube, ns, pod("gpu-", ONE_GPU), 40, 16)
            assert refusals(calls) == []
            assert sum(c.status == 201 for c in calls) == room
            denials = {c.refusal["message"] for c in calls if c.quota_denial}
            assert denials == {f'admission webhook "pods.hami.io" denied the request: {full(ns, room)}'}
            pods = stored(kube, ns)
            assert len(pods) == room
            assert all("hami.io/quota-reservation" in p["metadata"]["annotations"] for p in pods)
            if room == 9:  # kubectl prints the denial's reason, GPUQuotaExceeded, where other denials say Forbidden
                one_more = json.dumps(pod("one-more", ONE_GPU))
                done = kube.kubectl("create", "-n", ns, "-f", "-", stdin=one_more, check=False)
                assert done.stderr.strip() == (
                    'Error from server (GPUQuotaExceeded): error when creating "STDIN": admission webhook '
                    f'"pods.hami.io" denied the request: {full(ns, room)}'
                )
        finally:
            kube.kubectl("delete", "namespace", "--wait=false", ns)
    three_webhooks.stop()
    assert len(three_webhooks.connections) == 3 and all(three_webhooks.connections.values())


class TestBursts:
    """Bursts through the same three replicas (`bursts_webhooks`, stopped after the class)."""

    @pytest.mark.parametrize("room", [300, 50])
    def test_300_creates_at_once(self, installed: Installed, bursts_webhooks: Replicas, room: int) -> None:
        """What a Job with high parallelism or a Deployment scale-up does: 300 device Pods at once, 32 clients."""
        kube = installed.kube
        ns = quota_namespace(kube, room)
        try:
            _, calls = create_at_once(kube, ns, pod("burst-", ONE_GPU), 300, 32)
            assert refusals(calls) == []
            assert sum(c.status == 201 for c in calls) == room
            assert sum(c.quota_denial for c in calls) == 300 - room
            assert len(stored(kube, ns)) == room
        finally:
            kube.kubectl("delete", "namespace", "--wait=false", ns)

    def test_a_job_with_parallelism_300(self, installed: Installed, bursts_webhooks: Replicas) -> None:
        """The Job controller creates the Pods: exactly those that fit exist, its events carry the quota's message
        for the others, and none of its creates failed for any other reason (the webhook never failed)."""
        kube, room = installed.kube, 40
        ns = quota_namespace(kube, room)
        template = pod("worker", ONE_GPU, restartPolicy="Never")
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "wide", "namespace": ns},
            "spec": {"parallelism": 300, "completions": 300, "template": {"spec": template["spec"]}},
        }
        try:
            apply(kube, job)

            def settled() -> list[dict[str, Any]] | None:
                events = get(kube, "events", "--field-selector", "involvedObject.kind=Job", namespace=ns)["items"]
                failed = [e for e in events if e["reason"] == "FailedCreate"]
                return failed if len(stored(kube, ns)) == room and failed else None

            failed = kube.wait_for(settled, 120, interval=1)
            messages = {e["message"] for e in failed}
            assert any(full(ns, room) in m for m in messages), messages
            assert all("exceeding resource quota" in m for m in messages), messages
            assert len(stored(kube, ns)) == room  # and the controller's retries did not squeeze one more in
        finally:
            kube.kubectl("delete", "namespace", "--wait=false", ns)


# --- gangs: each way of declaring a group, its group object and its Pods' marks -------------------------------

HOLD = 20  # HAMI_QUOTA_GANG_HOLD for the gang tests: long enough for a burst, short enough to wait out


@pytest.fixture(scope="class")
def gang_webhooks(installed: Installed) -> Iterator[Replicas]:
    """Three processes as `bursts_webhooks`, gang holds lasting HOLD, started once the PodGroup CRDs are served."""
    podgroup_crds(installed.kube)
    env = {"HAMI_QUOTA_GANG_HOLD": str(HOLD), "HAMI_QUOTA_RESERVATION_TTL": str(SHORT_TTL)}  # a hold lives HOLD
    yield from replicas_of(installed, env)
    if not installed.webhook.running:
        installed.webhook.start()


def _room_for_six(installed: Installed) -> Iterator[str]:
    """A fresh namespace with room for 6 one-GPU Pods, deleted after the test (without waiting)."""
    name = quota_namespace(installed.kube, 6)
    yield name
    installed.kube.kubectl("delete", "namespace", "--wait=false", name)


ns = pytest.fixture(_room_for_six, name="ns")
other_ns = pytest.fixture(_room_for_six, name="other_ns")  # a second one, for a test that runs two scenes at once


def _kueue_count_with_members_refused_later(kube: RealKube, ns: str) -> tuple[float | None, int]:
    """One 1 MiB Pod declaring a Kueue group of 6000 holds the whole room for six in ``ns``; members the webhook
    lets join, and a later admission stage (a ValidatingAdmissionPolicy) refuses, come every 2 s: when an ordinary
    Pod got in, after the first member, and how many members joined unstored meanwhile. A member whose count is not
    the hold's is refused in one line on the way (finding D1 of the quota review)."""
    name = f"e2e-refuse-{ns}"
    tiny = {"nvidia.com/gpu": "1", MEM: "1"}
    first, later = pod("first-", tiny), pod("later-", tiny)
    marks = member("kueue.x-k8s.io", "huge", 6000)["metadata"]
    first["metadata"] |= marks
    later["metadata"] |= {"labels": {**marks["labels"], "e2e-refuse": "yes"}, "annotations": marks["annotations"]}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            },
            "validations": [
                {
                    "expression": "!has(object.metadata.labels) || !('e2e-refuse' in object.metadata.labels)",
                    "message": "refused later",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    try:
        apply(kube, policy, binding)
        probe = pod("probe-", {"cpu": "10m"})
        probe["metadata"]["labels"] = {"e2e-refuse": "yes"}
        kube.wait_for(lambda: create_at_once(kube, ns, probe, 1, 1)[1][0].status == 422, 20, interval=0.5)
        _, (held,) = create_at_once(kube, ns, first, 1, 1)
        held_at = time.monotonic()
        assert held.status == 201, held.refusal
        disagrees = json.loads(json.dumps(first))
        disagrees["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = "5"
        _, (refused,) = create_at_once(kube, ns, disagrees, 1, 1)
        assert refused.quota_denial and "holds room for 6000 Pods, this Pod says 5" in refused.refusal["message"]
        back = None
        joins = []  # members the webhook let join, refused after it: never stored
        while time.monotonic() - held_at < HOLD + 10:  # a member every 2 s, until an ordinary Pod gets in
            _, (ordinary,) = create_at_once(kube, ns, pod("plain-", ONE_GPU), 1, 1)
            if ordinary.status == 201:
                back = time.monotonic() - held_at
                break
            assert ordinary.quota_denial, ordinary.refusal
            _, (joined,) = create_at_once(kube, ns, later, 1, 1)
            if joined.status == 422:
                assert "refused later" in joined.refusal["message"], joined.refusal
                joins.append(time.monotonic() - held_at)
            else:  # the hold's places are over: a new first member, held for all 5999 not seen
                assert joined.quota_denial and "needs 5999 for 5999 Pods" in joined.refusal["message"]
            time.sleep(2)
        return back, len(joins)
    finally:
        kube.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, "--wait=false")


class TestGangs:
    """Gangs of 4 in room for 6 one-GPU Pods, through three replicas (`gang_webhooks`)."""

    @pytest.mark.parametrize("way", WAYS)
    def test_racing_gangs_one_stored_whole_the_other_not_at_all(
        self, installed: Installed, gang_webhooks: Replicas, way: str, ns: str
    ) -> None:
        kube = installed.kube
        if way != "kueue.x-k8s.io":
            apply(kube, podgroup(kube, way, ns, "red", 4), podgroup(kube, way, ns, "blue", 4))
        _, calls = create_at_once(kube, ns, [member(way, "red", 4), member(way, "blue", 4)], 8, 8)
        assert refusals(calls) == []
        stored_per_gang = sorted(
            sum(p["metadata"]["generateName"] == f"{g}-" for p in stored(kube, ns)) for g in ("red", "blue")
        )
        print(f"{way}: stored per gang {stored_per_gang}")
        assert stored_per_gang == [0, 4]
        denials = {c.refusal["message"] for c in calls if c.quota_denial}
        # free: the limit less what is certainly taken; part of the winner's room may be in a grant of its
        # places that another replica made a moment ago, which counts as certain only after a second
        frees = [re.search(r"needs 4000 for 4 Pods together, (\d+) free of limit 6000", d) for d in denials]
        assert frees and all(f is not None and 2000 <= int(f[1]) < 4000 for f in frees), denials

    def test_held_room_is_not_taken_by_ordinary_pods(
        self, installed: Installed, gang_webhooks: Replicas, ns: str
    ) -> None:
        kube = installed.kube
        apply(kube, podgroup(kube, "scheduling.k8s.io", ns, "train", 4))
        _, first = create_at_once(kube, ns, member("scheduling.k8s.io", "train", 4), 1, 1)
        _, ordinary = create_at_once(kube, ns, pod("plain-", ONE_GPU), 4, 4)
        _, rest = create_at_once(kube, ns, member("scheduling.k8s.io", "train", 4), 3, 3)
        assert [c.status for c in first] == [201]
        assert sorted(c.status for c in ordinary) == [201, 201, 403, 403]
        assert [c.status for c in rest] == [201, 201, 201]
        assert len(stored(kube, ns)) == 6

    def test_a_hold_never_filled_is_given_back_on_time_and_when_its_group_goes(
        self, installed: Installed, gang_webhooks: Replicas, ns: str, other_ns: str
    ) -> None:
        """A gang's first member holds its places for HAMI_QUOTA_GANG_HOLD from the last of its Pods seen: a hold
        never filled is given back then, and one whose members the webhook let join but a later admission stage
        refused (never stored) is given back then too (they renew nothing); a hold whose group object is deleted
        is given back at once (docs/rules.md#a-gang-is-admitted-whole-or-not-at-all)."""
        kube = installed.kube
        late, gone = (podgroup(kube, "scheduling.k8s.io", ns, name, 4) for name in ("late", "gone"))
        apply(kube, late, gone)
        _, first = create_at_once(kube, ns, member("scheduling.k8s.io", "late", 4), 1, 1)
        held_at = time.monotonic()
        assert [c.status for c in first] == [201]
        _, refused = create_at_once(kube, ns, pod("plain-", ONE_GPU), 3, 1)
        assert [c.status for c in refused] == [201, 201, 403]  # 1 Pod + 3 held + 2 ordinary fill 6

        def free_again() -> float | None:
            _, one = create_at_once(kube, ns, pod("plain-", ONE_GPU), 1, 1)
            return time.monotonic() - held_at if one[0].status == 201 else None

        with ThreadPoolExecutor(1) as pool:  # meanwhile, in a namespace of its own: a hold members renew in vain
            kueue = pool.submit(_kueue_count_with_members_refused_later, kube, other_ns)
            back = kube.wait_for(free_again, HOLD + 15, interval=0.5)
            kueue_back, joins = kueue.result()
        print(f"a hold never filled given back {back:.1f} s after its only member (HAMI_QUOTA_GANG_HOLD={HOLD}); "
              f"one by a Kueue count, {joins} members joining in vain, {kueue_back} s")  # fmt: skip
        assert HOLD - 1 <= back <= HOLD + 5
        assert kueue_back is not None and HOLD - 1 <= kueue_back <= HOLD + 5 and joins >= HOLD // 2 - 2
        kube.kubectl("delete", "pods", "--all", "-n", ns, "--wait=true")
        _, gone = create_at_once(kube, ns, member("scheduling.k8s.io", "gone", 4), 1, 1)
        _, full = create_at_once(kube, ns, pod("plain-", ONE_GPU), 3, 1)
        assert [c.status for c in gone + full] == [201, 201, 201, 403]
        # its Pod keeps it (the podgroup-protection finalizer) being deleted: deleted, for the hold
        kube.kubectl("delete", "podgroups.scheduling.k8s.io", "gone", "-n", ns, "--wait=false")
        deleted_at = time.monotonic()
        kube.wait_for(free_again, 5, interval=0.2)
        print(f"given back {time.monotonic() - deleted_at:.1f} s after its PodGroup was deleted")

    def test_a_gang_that_does_not_fit_is_refused_with_its_figures(
        self, installed: Installed, gang_webhooks: Replicas, ns: str
    ) -> None:
        kube = installed.kube
        apply(kube, podgroup(kube, "scheduling.k8s.io", ns, "big", 8))
        done = kube.kubectl(
            "create", "-n", ns, "-f", "-", stdin=json.dumps(member("scheduling.k8s.io", "big", 8)), check=False
        )
        assert done.stderr.strip() == (
            'Error from server (GPUQuotaExceeded): error when creating "STDIN": admission webhook "pods.hami.io" '
            f"denied the request: exceeding resource quota: namespace {ns} nvidia.com/gpumem: gang "
            "scheduling.k8s.io/big of 8 Pods needs 8000 for 8 Pods together, 6000 free of limit 6000 (each Pod not "
            "seen yet counted as large as this one)"
        )

    def test_a_pod_whose_group_does_not_exist_is_charged_alone_with_a_warning(
        self, installed: Installed, gang_webhooks: Replicas, ns: str
    ) -> None:
        kube = installed.kube
        done = kube.kubectl(
            "create", "-n", ns, "-f", "-", stdin=json.dumps(member("scheduling.x-k8s.io", "nowhere", 4))
        )
        assert (
            "Warning: pod group nowhere (scheduling.x-k8s.io) does not exist yet; the Pod is charged alone"
            in done.stderr
        )
        _, more = create_at_once(kube, ns, pod("plain-", ONE_GPU), 6, 1)
        assert sorted(c.status for c in more) == [201] * 5 + [403]

    def test_a_workload_whose_gang_cannot_fit_now_is_told_at_apply(
        self, installed: Installed, gang_webhooks: Replicas, ns: str
    ) -> None:
        kube = installed.kube
        apply(kube, podgroup(kube, "scheduling.x-k8s.io", ns, "train", 4))
        _, ordinary = create_at_once(kube, ns, pod("plain-", ONE_GPU), 3, 1)
        assert [c.status for c in ordinary] == [201] * 3
        worker = member("scheduling.x-k8s.io", "train", 4)
        template = {"metadata": worker["metadata"], "spec": worker["spec"] | {"restartPolicy": "Never"}}
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", "namespace": ns},
            "spec": {"parallelism": 4, "completions": 4, "template": template},
        }
        warning = (
            "Warning: spec.parallelism: a gang of 4 × 1000 nvidia.com/gpumem needs 4000, 3000 free: all 4 refused now"
        )

        def told() -> bool:
            done = kube.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", stdin=json.dumps(job))
            return warning in done.stderr

        kube.wait_for(told, 20, interval=0.5)
