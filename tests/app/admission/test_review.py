"""HAMi's decision flow: every outcome, its precedence, and the API server's contract for versions, bad input, dry
runs and other operations (docs/rules.md#hamis-decision-flow, #c-the-api-servers-webhook-contract)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.admission.edit import PodEdit
from app.admission.ports import Verdict
from app.admission.review import review
from app.quota import Demand, demands
from app.settings import Settings
from testbed.pods import container, pod
from testbed.reviews import admission_review, redirected, run

DEFAULT_DEVICES = Settings.from_env({}).devices
GPU = {"nvidia.com/gpu": "1"}
GPU_MEM = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}


class RecordingQuota:
    """A quota port that denies when told to and remembers what it was asked."""

    def __init__(self, denial: str | None = None) -> None:
        self.denial = denial
        self.calls: list[tuple[str, list[Demand], bool]] = []

    def governs(self, namespace: str) -> bool:
        return True

    def admit(self, namespace: str, pod: PodEdit, *, uid: str, dry_run: bool, who: str = "") -> Verdict:
        self.calls.append((namespace, demands(pod, DEFAULT_DEVICES), dry_run))
        return Verdict(self.denial or "")

    def status(self) -> dict[str, Any]:
        return {"ready": True}

    def stop(self) -> None:
        pass


# -- every outcome of HAMi's decision flow, as (pod, expected (allowed, code, reason, message)) ------------------
OUTCOMES = [
    pytest.param(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "default"}, "spec": {"containers": []}},
        (False, 403, "Forbidden", "pod has no containers"),
        id="no-containers",
    ),
    pytest.param(
        pod(container(limits=GPU), scheduler="volcano"),
        (True, 200, "", "pod already has different scheduler assigned"),
        id="scheduler-gate-other-scheduler",
    ),
    pytest.param(
        pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "101"})),
        (
            False,
            400,
            "BadRequest",
            "invalid nvidia.com/gpumem-percentage value 101 in container main: must be an integer between 0 and 100",
        ),
        id="vendor-error",
    ),
    pytest.param(
        pod(container(limits=GPU), container("sidecar", privileged=True)),
        (False, 403, "Forbidden", "container sidecar is privileged"),
        id="privileged-with-device",
    ),
    pytest.param(
        pod(container(limits=GPU), nodeName="node-1"),
        (False, 403, "Forbidden", "pod has node assigned"),
        id="node-assigned-with-device",
    ),
    pytest.param(pod(container(limits=GPU_MEM)), (True, 200, "", ""), id="normal-device-pod"),
    pytest.param(pod(container()), (True, 200, "", ""), id="normal-plain-pod"),
]


@pytest.mark.parametrize(("obj", "expected"), OUTCOMES)
def test_outcomes(obj: dict[str, Any], expected: tuple[bool, int, str, str], settings) -> None:
    outcome = run(obj, settings)
    assert outcome.denial() == expected
    if not expected[0]:
        assert outcome.ops == []


def test_quota_denial(settings) -> None:
    quota = RecordingQuota(
        "exceeding resource quota: namespace ai nvidia.com/gpumem used 38000 + requested 4000 > limit 40000"
    )
    outcome = run(pod(container(limits=GPU_MEM), namespace="ai"), settings, quota)
    assert outcome.denial() == (
        False,
        403,
        "GPUQuotaExceeded",
        "exceeding resource quota: namespace ai nvidia.com/gpumem used 38000 + requested 4000 > limit 40000",
    )
    assert outcome.ops == []
    assert quota.calls == [("ai", [Demand("NVIDIA", {"nvidia.com/gpumem": 4000, "nvidia.com/gpu": 1})], False)]


def test_undecodable_pod_is_bad_request(settings) -> None:
    request = admission_review(pod(container(limits={"nvidia.com/gpu": "lots"}, defaulted=False)))
    response = review(request, settings, RecordingQuota())["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    assert response["status"]["message"] == (
        'invalid Pod: request.object.spec.containers[0].resources.limits["nvidia.com/gpu"]: '
        "not a valid quantity: 'lots'"
    )


def test_empty_object_has_no_content(settings) -> None:
    response = review(admission_review({}), settings, RecordingQuota())["response"]
    assert (response["allowed"], response["status"]["code"], response["status"]["message"]) == (
        False,
        400,
        "there is no content to decode",
    )


# -- precedence: the earlier check wins --------------------------------------------------------------------------
PRECEDENCE = [
    pytest.param(
        pod(
            container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}, privileged=True),
            nodeName="n1",
        ),
        "BadRequest",
        id="vendor-error-beats-privileged-and-node",
    ),
    pytest.param(
        pod(container(limits=GPU, privileged=True), nodeName="n1"), "Forbidden:privileged", id="privileged-beats-node"
    ),
    pytest.param(pod(container(limits=GPU), nodeName="n1"), "Forbidden:node", id="node-beats-quota"),
    pytest.param(
        # HAMi's gate beats the vendor error; in a namespace with a device quota the Pod is charged all the same
        pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}), scheduler="volcano"),
        "quota",
        id="gate-beats-vendor-error-then-quota",
    ),
]


@pytest.mark.parametrize(("obj", "winner"), PRECEDENCE)
def test_precedence(obj: dict[str, Any], winner: str, settings) -> None:
    outcome = run(obj, settings, RecordingQuota("exceeding resource quota: full"))
    allowed, _, reason, message = outcome.denial()
    seen = {
        "allowed": allowed,
        "BadRequest": reason == "BadRequest",
        "Forbidden:privileged": message.endswith("is privileged"),
        "Forbidden:node": message == "pod has node assigned",
        "quota": reason == "GPUQuotaExceeded",
    }
    assert seen[winner], outcome.denial()


# -- the scheduler-name gate -------------------------------------------------------------------------------------
GATE = [
    pytest.param(None, {}, True, id="empty-name-processed"),
    pytest.param("default-scheduler", {}, True, id="default-scheduler-force-on-processed"),
    pytest.param(
        "default-scheduler", {"HAMI_FORCE_OVERWRITE_DEFAULT_SCHEDULER": "false"}, False, id="default-force-off-skipped"
    ),
    pytest.param("hami-scheduler", {}, True, id="own-scheduler-processed"),
    pytest.param("volcano", {}, False, id="other-scheduler-skipped"),
    pytest.param("volcano", {"HAMI_SCHEDULER_NAME": ""}, False, id="no-configured-name-other-skipped"),
]


@pytest.mark.parametrize(("scheduler", "env", "processed"), GATE)
def test_scheduler_gate(scheduler: str | None, env: dict[str, str], processed: bool, make_settings) -> None:
    outcome = run(pod(container(limits=GPU_MEM), scheduler=scheduler), make_settings(**env))
    assert (outcome.ops != []) is processed
    assert (outcome.status.get("message") == "pod already has different scheduler assigned") is not processed


def test_no_scheduler_name_means_no_redirect_and_no_node_check(make_settings) -> None:
    obj = pod(container(limits=GPU_MEM), nodeName="node-1", scheduler=None)
    outcome = run(obj, make_settings(HAMI_SCHEDULER_NAME=""))
    expected = copy.deepcopy(obj)
    expected["metadata"]["annotations"] = {"hami.io/gpu-type": "NVIDIA"}
    assert outcome.response["allowed"] is True
    assert outcome.patched == expected


def test_privileged_container_without_device_is_allowed(settings) -> None:
    obj = pod(container(privileged=True))
    outcome = run(obj, settings)
    assert outcome.response["allowed"] is True and outcome.ops == []


def test_node_name_without_device_is_allowed(settings) -> None:
    assert run(pod(container(), nodeName="node-1"), settings).response["allowed"] is True


def test_privileged_init_container_names_itself(settings) -> None:
    obj = pod(container(limits=GPU), init=[container("setup", privileged=True)])
    assert run(obj, settings).denial() == (False, 403, "Forbidden", "container setup is privileged")


def test_init_container_device_is_mutated(settings) -> None:
    obj = pod(container(), init=[container("warmup", limits=GPU)])
    expected = redirected(obj)
    for side in ("limits", "requests"):
        expected["spec"]["initContainers"][0]["resources"][side]["nvidia.com/gpucores"] = "100"
    assert run(obj, settings).patched == expected


# -- requests mirror limits; device Pods are annotated; invalid requests are the author's error ------------------
def test_requests_mirror_limits_when_missing(settings) -> None:
    obj = pod(container(limits=GPU_MEM, defaulted=False))
    expected = redirected(obj)
    expected["spec"]["containers"][0]["resources"]["requests"] = dict(GPU_MEM)
    assert run(obj, settings).patched == expected


def test_annotations_keep_user_values_and_add_policies(make_settings) -> None:
    obj = pod(container(limits=GPU_MEM), annotations={"hami.io/gpu-type": "NVIDIA-A100"})
    settings = make_settings(HAMI_NODE_SCHEDULER_POLICY="binpack", HAMI_GPU_SCHEDULER_POLICY="spread")
    expected = redirected(obj)
    expected["metadata"]["annotations"] = {
        "hami.io/gpu-type": "NVIDIA-A100",
        "hami.io/node-scheduler-policy": "binpack",
        "hami.io/gpu-scheduler-policy": "spread",
    }
    assert run(obj, settings).patched == expected


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        pytest.param(
            {"nvidia.com/gpu": "-1"}, "container main: nvidia.com/gpu must not be negative, got -1", id="negative-count"
        ),
        pytest.param(
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "-100"},
            "container main: nvidia.com/gpumem must not be negative, got -100",
            id="negative-memory",
        ),
        pytest.param(
            {"nvidia.com/gpu": "1.5"},
            "container main: nvidia.com/gpu must be a whole number of devices, got 1.5",
            id="fractional-count",
        ),
        pytest.param(
            {"nvidia.com/gpu": "500m"},
            "container main: nvidia.com/gpu must be a whole number of devices, got 500m",
            id="milli-count",
        ),
    ],
)
def test_invalid_amounts_are_bad_requests(limits: dict[str, str], message: str, settings) -> None:
    assert run(pod(container(limits=limits)), settings).denial() == (False, 400, "BadRequest", message)


# -- protocol --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_answer_in_request_version_with_uid(version: str, settings) -> None:
    request = admission_review(pod(container(limits=GPU_MEM)), version=version, uid="abc-123")
    answer = review(request, settings, RecordingQuota())
    assert answer["apiVersion"] == f"admission.k8s.io/{version}"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "abc-123"
    assert answer["response"]["patchType"] == "JSONPatch"


def test_dry_run_reaches_quota_as_dry_run(settings) -> None:
    quota = RecordingQuota()
    dry = run(pod(container(limits=GPU_MEM)), settings, quota, dry_run=True)
    wet = run(pod(container(limits=GPU_MEM)), settings, quota)
    assert dry.response == {**wet.response, "uid": dry.response["uid"]}
    assert [call[2] for call in quota.calls] == [True, False]


@pytest.mark.parametrize(
    ("operation", "kind"),
    [
        pytest.param("UPDATE", {"group": "", "version": "v1", "kind": "Pod"}, id="pod-update"),
        pytest.param("DELETE", {"group": "", "version": "v1", "kind": "Pod"}, id="pod-delete"),
        pytest.param("CREATE", {"group": "", "version": "v1", "kind": "ConfigMap"}, id="configmap-create"),
        pytest.param("CREATE", {"group": "apps", "version": "v1", "kind": "Pod"}, id="other-group"),
    ],
)
def test_other_operations_and_kinds_pass_unchanged(operation: str, kind: dict[str, str], settings) -> None:
    request = admission_review(pod(container(limits=GPU_MEM)), operation=operation)
    request["request"]["kind"] = kind
    response = review(request, settings, RecordingQuota())["response"]
    assert response["allowed"] is True
    assert "patch" not in response and "patchType" not in response


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        pytest.param(
            lambda r: r.update(apiVersion="admission.k8s.io/v2"),
            "invalid AdmissionReview: apiVersion: must be one of: admission.k8s.io/v1, admission.k8s.io/v1beta1",
            id="unknown-version",
        ),
        pytest.param(
            lambda r: r["request"].update(operation="MERGE"),
            "invalid AdmissionReview: request.operation: must be one of: CREATE, UPDATE, DELETE, CONNECT",
            id="unknown-operation",
        ),
        pytest.param(
            lambda r: r["request"]["object"]["spec"]["containers"][0].update(env="PATH=/bin"),
            "invalid Pod: request.object.spec.containers[0].env: not a valid list",
            id="env-not-a-list",
        ),
        pytest.param(
            lambda r: r["request"]["object"]["metadata"].update(annotations={"a": 1}),
            'invalid Pod: request.object.metadata.annotations["a"]: not a valid string',
            id="annotation-not-a-string",
        ),
    ],
)
def test_invalid_reviews_are_answered_400_with_path(mangle, message: str, settings) -> None:
    request = admission_review(pod(container(limits=GPU_MEM)), uid="u-1")
    mangle(request)
    answer = review(request, settings, RecordingQuota())
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["response"] == {
        "uid": "u-1",
        "allowed": False,
        "status": {"metadata": {}, "code": 400, "status": "Failure", "reason": "BadRequest", "message": message},
    }


# -- the patch: minimal, escaped, idempotent ---------------------------------------------------------------------
def test_patch_is_minimal_and_escaped(settings) -> None:
    outcome = run(pod(container(limits=GPU, defaulted=False)), settings)
    assert outcome.ops == [
        {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores", "value": "100"},
        {
            "op": "add",
            "path": "/spec/containers/0/resources/requests",
            "value": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"},
        },
        {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"},
        {"op": "add", "path": "/metadata/annotations", "value": {"hami.io/gpu-type": "NVIDIA"}},
    ]


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(pod(container(limits=GPU)), id="whole-card"),
        pytest.param(pod(container(limits={"nvidia.com/gpumem": "3000"}, defaulted=False)), id="default-count"),
        pytest.param(
            pod(container(limits={"nvidia.com/gpu": "2", "nvidia.com/priority": "1"}), container("log")), id="priority"
        ),
    ],
)
def test_review_of_own_output_changes_nothing(obj: dict[str, Any], settings) -> None:
    first = run(obj, settings)
    assert first.ops
    again = run(first.patched, settings)
    assert again.response["allowed"] is True and again.ops == []


# -- every device Pod is charged, and only the webhook writes a reservation ------------------------------------
# docs/rules.md#every-device-pod-is-charged, #only-the-webhook-writes-a-reservation

RESERVED = "hami.io/quota-reservation"


class ReservingQuota(RecordingQuota):
    """Reserves every device Pod into entry ``e1``, in a namespace with a device quota (``governs``)."""

    def __init__(self, governs: bool = True) -> None:
        super().__init__()
        self._governs = governs

    def governs(self, namespace: str) -> bool:
        return self._governs

    def admit(self, namespace: str, pod: PodEdit, *, uid: str, dry_run: bool, who: str = "") -> Verdict:
        super().admit(namespace, pod, uid=uid, dry_run=dry_run, who=who)
        return Verdict(reservation="e1.sealed") if demands(pod, DEFAULT_DEVICES) else Verdict()


@pytest.mark.parametrize(
    "routed",
    [
        pytest.param({"metadata": {"labels": {"hami.io/webhook": "ignore"}}}, id="opted-out"),
        pytest.param({"scheduler": "volcano"}, id="another-scheduler"),
        pytest.param(
            {"metadata": {"labels": {"hami.io/webhook": "ignore"}}, "scheduler": "hami-scheduler"}, id="opted-out-hami"
        ),
    ],
)
def test_a_device_pod_the_webhook_does_not_mutate_is_charged_unmutated(routed: dict[str, Any], settings) -> None:
    quota = ReservingQuota()
    obj = pod(container(limits=GPU), namespace="ai", annotations={RESERVED: "a-gang-s-hold"}, **routed)
    outcome = run(obj, settings, quota)
    assert outcome.response["allowed"]
    path = "/metadata/annotations/hami.io~1quota-reservation"
    assert outcome.ops == [{"op": "replace", "path": path, "value": "e1.sealed"}]  # nothing else changed
    assert quota.calls == [("ai", demands(PodEdit(obj), DEFAULT_DEVICES), False)]
    denied = run(obj, settings, RecordingQuota("exceeding resource quota: full"))
    assert denied.denial() == (False, 403, "GPUQuotaExceeded", "exceeding resource quota: full")


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(pod(container(limits=GPU), scheduler="volcano"), id="another-scheduler"),
        pytest.param(pod(container(limits=GPU), metadata={"labels": {"hami.io/webhook": "ignore"}}), id="opted-out"),
        pytest.param(pod(container()), id="no-device"),
        pytest.param(pod(container(limits=GPU)), id="device-pod"),
    ],
)
@pytest.mark.parametrize("governs", [True, False], ids=["quota", "no-quota"])
def test_a_reservation_the_quota_did_not_make_is_removed(obj: dict[str, Any], governs: bool, settings) -> None:
    obj["metadata"]["annotations"] = {RESERVED: "a-gang-s-hold", "team": "ml"}
    quota = ReservingQuota(governs)
    outcome = run(obj, settings, quota)
    assert outcome.response["allowed"]
    kept = outcome.patched["metadata"]["annotations"].get(RESERVED)
    assert kept == ("e1.sealed" if governs and quota.calls and quota.calls[0][1] else None)
    assert outcome.patched["metadata"]["annotations"]["team"] == "ml"
