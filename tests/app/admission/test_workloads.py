"""The workload check (app/admission/workloads.py): a workload's template reviewed as the Pod its controller
would create, answered with warnings for the author. Through the Flask app's /workloads view, as the API server
calls it. Rule: docs/rules.md#a-template-is-warned-not-refused.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from app import create_app
from app.admission.annotations import GPU_TYPE_ANNOTATION
from app.admission.edit import PodEdit
from app.admission.ports import Verdict
from app.quota.core.amounts import Amounts
from app.quota.core.demand import amounts, demands
from app.settings import Settings
from testbed.pods import container

Obj = dict[str, Any]
GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16000", "nvidia.com/gpucores": "50"}
KINDS = {
    "Deployment": ("apps", "deployments"),
    "StatefulSet": ("apps", "statefulsets"),
    "DaemonSet": ("apps", "daemonsets"),
    "Job": ("batch", "jobs"),
    "CronJob": ("batch", "cronjobs"),
    "PodTemplate": ("", "podtemplates"),
}


def workload(kind: str, *containers: Obj, annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
    """A workload of ``kind`` whose template holds ``containers``, as the API server hands it to a webhook."""
    meta: Obj = {"labels": {"app": "train"}}
    if annotations:
        meta["annotations"] = annotations
    template = {"metadata": meta, "spec": {"containers": list(containers), "schedulerName": "default-scheduler"}}
    group = KINDS[kind][0]
    obj: Obj = {"apiVersion": f"{group}/v1" if group else "v1", "kind": kind, "metadata": {"name": "train"}}
    if kind == "PodTemplate":
        obj["template"] = template
    elif kind == "CronJob":
        obj["spec"] = {"schedule": "@daily", "jobTemplate": {"spec": {**spec, "template": template}}}
    else:
        obj["spec"] = {**spec, "template": template}
    return obj


def review(obj: Obj, *, operation: str = "CREATE", old: Obj | None = None, uid: str = "w-1") -> Obj:
    group, resource = KINDS[obj["kind"]]
    kind = {"group": group, "version": "v1", "kind": obj["kind"]}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": kind,
            "resource": {"group": group, "version": "v1", "resource": resource},
            "namespace": "ai-team",
            "name": obj["metadata"]["name"],
            "operation": operation,
            "userInfo": {"username": "author"},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
        },
    }


class Room:
    """A quota port whose namespace ai-team has ``free`` room: the view only reads it (governs, asks, room)."""

    def __init__(self, free: Amounts, gang: int = 0) -> None:
        self.free = free
        self.size = gang

    def governs(self, namespace: str) -> bool:
        return namespace == "ai-team"

    def admit(self, namespace: str, pod: PodEdit, *, uid: str, dry_run: bool, who: str = "") -> Verdict:
        raise AssertionError("a template reserves nothing")

    def asks(self, pod: PodEdit) -> Amounts:
        return amounts(demands(pod, Settings.from_env({}).devices))  # the quota's own arithmetic

    def room(self, namespace: str) -> Amounts | None:
        return self.free if namespace == "ai-team" else None

    def gang(self, namespace: str, pod: PodEdit) -> int:
        return self.size

    def status(self) -> dict[str, Any]:
        return {"ready": True}

    def stop(self) -> None:
        pass


def answer(body: Obj, quota: Any = None, **env: str) -> Obj:
    app = create_app(Settings.from_env(env), quota)
    reply = app.test_client().post("/workloads", data=json.dumps(body), content_type="application/json")
    assert reply.status_code == 200
    response: Obj = reply.get_json()["response"]
    assert response["uid"] == body["request"]["uid"]
    assert "patch" not in response, "a validating webhook never patches"
    return response


PRIVILEGED = container("cuda", {"nvidia.com/gpu": "1"}, privileged=True, defaulted=False)
PERCENT = container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}, defaulted=False)
FORGED = {"hami.io/vgpu-devices-to-allocate": "GPU-0,NVIDIA,1000,10:;"}


@pytest.mark.parametrize(
    ("kind", "ctr", "annotations", "expected"),
    [
        pytest.param(
            "Deployment", PRIVILEGED, None, "Pods refused: container cuda is privileged",
            id="deployment-privileged",
        ),
        pytest.param(
            "Job", PERCENT, None,
            "Pods refused: invalid nvidia.com/gpumem-percentage value 150 in container cuda: must be an integer"
            " between 0 and 100",
            id="job-percentage",
        ),
        pytest.param(
            "CronJob", container("cuda", GPU, defaulted=False), FORGED,
            "Pods refused: annotation hami.io/vgpu-devices-to-allocate is written by",
            id="cronjob-forged",
        ),
        pytest.param(
            "StatefulSet", container("cuda", GPU, defaulted=False), {"hami.io/gpu-schedular-policy": "spread"},
            "template: unknown annotation hami.io/gpu-schedular-policy; did you mean hami.io/gpu-scheduler-policy?",
            id="statefulset-typo",
        ),
        pytest.param(
            "PodTemplate", PRIVILEGED, None, "Pods refused: container cuda is privileged",
            id="podtemplate-privileged",
        ),
    ],
)  # fmt: skip
def test_a_template_the_webhook_would_refuse_or_warn_about_is_allowed_with_a_warning(
    kind: str, ctr: Obj, annotations: dict[str, str] | None, expected: str
) -> None:
    response = answer(review(workload(kind, ctr, annotations=annotations, replicas=1)))
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert warning.startswith(expected)
    assert len(warning) <= 120


@pytest.mark.parametrize(
    "ctr",
    [
        pytest.param(container("cuda", GPU, defaulted=False), id="valid-device-template"),
        pytest.param(container("cuda", {"nvidia.com/gpu": "1"}, defaulted=False), id="defaults-filled-in"),
        pytest.param(container("web", {"cpu": "1"}, defaulted=False), id="cpu-only"),
    ],
)
def test_a_template_accepted_as_written_gets_no_warning(ctr: Obj) -> None:
    response = answer(review(workload("Deployment", ctr, replicas=3)))
    assert response["allowed"] is True and "warnings" not in response


@pytest.mark.parametrize(
    "template",
    [
        pytest.param({"spec": {"containers": "cuda"}}, id="containers-not-a-list"),
        pytest.param({"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": []}}}]}}, id="no-name"),
        pytest.param({"metadata": {"annotations": [1]}, "spec": {"containers": []}}, id="annotations-not-a-map"),
        pytest.param("a string", id="template-not-a-map"),
        pytest.param({"spec": None}, id="no-spec"),
    ],
)
def test_a_malformed_template_is_the_api_servers_to_refuse(template: Any) -> None:
    obj = workload("Deployment", PRIVILEGED, replicas=1)
    obj["spec"]["template"] = template
    response = answer(review(obj))
    assert response["allowed"] is True and "warnings" not in response


def test_deny_refuses_a_template_every_pod_of_which_would_be_refused_with_the_pods_message() -> None:
    response = answer(review(workload("Deployment", PRIVILEGED, replicas=1)), HAMI_WORKLOAD_CHECKS="deny")
    assert response["allowed"] is False
    assert response["status"] == {
        "metadata": {},
        "code": 403,
        "status": "Failure",
        "reason": "Forbidden",
        "message": "container cuda is privileged",
    }
    typo = workload("Deployment", container("cuda", GPU), annotations={"hami.io/gpu-schedular-policy": "x"})
    warned = answer(review(typo), HAMI_WORKLOAD_CHECKS="deny")
    assert warned["allowed"] is True and len(warned["warnings"]) == 1


def test_off_answers_allowed_without_a_word() -> None:
    response = answer(review(workload("Deployment", PRIVILEGED, replicas=1)), HAMI_WORKLOAD_CHECKS="off")
    assert response["allowed"] is True and "warnings" not in response


def test_a_jobs_parallelism_times_its_pods_demand_is_told_against_the_room_free_now() -> None:
    job = workload("Job", container("train", GPU, defaulted=False), parallelism=3, completions=6)
    response = answer(review(job), Room({"nvidia.com/gpumem": 20000}))
    assert response["warnings"] == [
        "spec.parallelism: 3 Pods × 16000 nvidia.com/gpumem need 48000; 20000 free in ai-team: 2 would be refused now"
    ]
    assert "warnings" not in answer(review(job), Room({"nvidia.com/gpumem": 48000})), "equal fits"
    assert "warnings" not in answer(review(job), None), "no quota, no figure"


def test_a_gang_that_cannot_fit_now_is_told_it_would_be_refused_whole() -> None:
    """A Job of 4 workers in a gang of 4 with room for 3: admitted one at a time 3 would run; as a gang, none."""
    job = workload("Job", container("train", GPU, defaulted=False), parallelism=4, completions=4)
    (warning,) = answer(review(job), Room({"nvidia.com/gpumem": 48000}, gang=4))["warnings"]
    assert (
        warning == "spec.parallelism: a gang of 4 × 16000 nvidia.com/gpumem needs 64000, 48000 free: all 4 refused now"
    )
    assert "warnings" not in answer(review(job), Room({"nvidia.com/gpumem": 64000}, gang=4)), "equal fits"


def test_completions_below_parallelism_count_and_a_cronjobs_job_template_too() -> None:
    cron = workload("CronJob", container("train", GPU, defaulted=False), parallelism=4, completions=2)
    (warning,) = answer(review(cron), Room({"nvidia.com/gpu": 1}))["warnings"]
    assert warning == (
        "spec.jobTemplate.spec.completions: 2 Pods × 1 nvidia.com/gpu need 2; 1 free in ai-team: 1 would be refused now"
    )


def test_an_update_counts_only_the_pods_it_adds() -> None:
    old = workload("Deployment", container("train", GPU, defaulted=False), replicas=2)
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 5
    quota = Room({"nvidia.com/gpumem": 32000})
    (warning,) = answer(review(new, operation="UPDATE", old=old), quota)["warnings"]
    assert warning == (
        "spec.replicas: 3 Pods × 16000 nvidia.com/gpumem need 48000; 32000 free in ai-team: 1 would be refused now"
    )
    fewer = copy.deepcopy(old)
    fewer["spec"]["replicas"] = 1
    assert "warnings" not in answer(review(fewer, operation="UPDATE", old=old), quota)


def test_a_few_warnings_at_most_the_rest_counted() -> None:
    typos = {f"hami.io/typo-{i}": "x" for i in range(30)}
    warnings = answer(review(workload("Deployment", container("cuda", GPU), annotations=typos)))["warnings"]
    assert len(warnings) == 4
    assert warnings[-1] == "... and 27 more warnings"


def test_the_template_is_reviewed_as_a_pod_never_patched_and_never_the_scale_subresource() -> None:
    body = review(workload("Deployment", PRIVILEGED, replicas=1))
    body["request"]["subResource"] = "scale"
    assert "warnings" not in answer(body)
    delete = review(workload("Deployment", PRIVILEGED, replicas=1), operation="DELETE")
    assert "warnings" not in answer(delete)
    assert GPU_TYPE_ANNOTATION not in json.dumps(answer(review(workload("Deployment", container("c", GPU)))))


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        pytest.param(b"", 400, "request body is empty", id="empty"),
        pytest.param(b"[", 400, "request body is", id="not-json"),
        pytest.param(b'{"request": {}}', 400, "request.uid: missing", id="no-uid"),
    ],
)
def test_bad_bodies_get_the_pod_paths_clear_answers(body: bytes, status: int, text: str) -> None:
    reply = (
        create_app(Settings.from_env({})).test_client().post("/workloads", data=body, content_type="application/json")
    )
    assert reply.status_code == status and text in reply.get_json()["message"]


def test_a_bad_envelope_is_a_denied_review_naming_the_field() -> None:
    body = review(workload("Deployment", PRIVILEGED, replicas=1))
    body["request"]["kind"] = "Deployment"
    response = answer(body)
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert "request.kind" in response["status"]["message"]


def test_the_request_is_left_as_it_came_and_a_big_template_costs_what_its_size_says() -> None:
    """The defaults are applied to a copy of what they touch (the containers' resources), not to the request's
    object; 2,000 containers are checked like 2,000 containers, with one warning."""
    from app.admission.workloads import decide_workload

    many = [container(f"c{i}", {"nvidia.com/gpu": "1"}, defaulted=False) for i in range(2000)]
    obj = workload("Deployment", *many, replicas=1)
    obj["spec"]["template"]["spec"]["containers"][1999]["securityContext"] = {"privileged": True}
    body = review(obj)
    before = copy.deepcopy(body)
    decision = decide_workload(body["request"], Settings.from_env({}), Room({}), "w-1")
    assert body == before
    assert [n.text for n in decision.warnings] == ["Pods refused: container c1999 is privileged"]
