"""Admission warnings for what the webhook changed on the author's behalf: one per default, rounding, overwrite,
request replaced by its limit and policy taken from an annotation; never for plain routing. Bounded in length
and number, in v1 and v1beta1, and only on allowed answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from app.admission.ports import Verdict
from app.settings import Settings
from certgen.local import LocalFiles
from testbed.pods import container, pod
from testbed.reviews import admission_review, run
from tests.app.served import Served, sample, serve

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

NVIDIA_ENV = {"nvidia": {"overwriteEnv": True}}
ASCEND = {"HAMI_ENABLE_ASCEND": "true"}
ILUVATAR = {"HAMI_ENABLE_ILUVATAR": "true"}
B3, B3_MEM = "huawei.com/Ascend910B3", "huawei.com/Ascend910B3-memory"
MTH, MTH_CORE, MTH_MEM = "mthreads.com/vgpu", "mthreads.com/sgpu-core", "mthreads.com/sgpu-memory"
ILU, ILU_CORE = "iluvatar.ai/MR-V100-vgpu", "iluvatar.ai/MR-V100.vCore"
METAX_QOS = (
    "annotation metax-tech.com/sgpu-qos-policy set to 'best-effort' (the default for sGPU Pods that are not online)"
)

# (settings: env and optional device config, the Pod, the warnings in order)
CHANGES = [
    # -- NVIDIA --
    pytest.param(
        {},
        pod(container(limits={"nvidia.com/gpu": "1"})),
        ["container main: limit nvidia.com/gpucores set to 100 (a whole GPU comes with all its cores)"],
        id="nvidia-exclusive-cores",
    ),
    pytest.param(
        {},
        pod(container(limits={"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "100"})),
        ["container main: limit nvidia.com/gpucores set to 100 (a whole GPU comes with all its cores)"],
        id="nvidia-exclusive-by-percentage",
    ),
    pytest.param(
        {},
        pod(container(limits={"nvidia.com/gpumem": "3000"})),
        ["container main: limit nvidia.com/gpu set to 1 (nvidia.defaultGPUNum)"],
        id="nvidia-default-count",
    ),
    pytest.param(
        {"config": {"nvidia": {"defaultGPUNum": 2}}},
        pod(container("trainer", limits={"nvidia.com/gpucores": "30"})),
        ["container trainer: limit nvidia.com/gpu set to 2 (nvidia.defaultGPUNum)"],
        id="nvidia-configured-default-count",
    ),
    pytest.param(
        {},
        pod(container(limits={"nvidia.com/gpumem": "3000"}, requests={"nvidia.com/gpu": "2"})),
        [
            "container main: limit nvidia.com/gpu set to 1 (nvidia.defaultGPUNum)",
            "container main: request nvidia.com/gpu 2 replaced by 1 (device requests must equal limits)",
        ],
        id="nvidia-default-count-replaces-a-different-request",
    ),
    pytest.param(
        {},
        pod(
            container(
                limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}, requests={"nvidia.com/gpumem": "1000"}
            )
        ),
        ["container main: request nvidia.com/gpumem 1000 replaced by 3000 (device requests must equal limits)"],
        id="request-different-from-limit",
    ),
    pytest.param(
        {},
        pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}, defaulted=False)),
        [],
        id="request-absent-is-api-server-defaulting",
    ),
    pytest.param(
        {},
        pod(
            container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3k"}, requests={"nvidia.com/gpumem": "3000"})
        ),
        [],
        id="request-equal-amount-other-spelling",
    ),
    pytest.param(
        {},
        pod(
            container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"}),
            annotations={"hami.io/core-policy": "force"},
        ),
        ["container main: env GPU_CORE_UTILIZATION_POLICY set to 'force' (annotation hami.io/core-policy)"],
        id="core-policy-from-annotation",
    ),
    pytest.param(
        {},
        pod(
            container(
                limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"},
                env=[{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}],
            ),
            annotations={"hami.io/core-policy": "disable"},
        ),
        [
            "container main: env GPU_CORE_UTILIZATION_POLICY 'force' replaced by 'disable' "
            "(annotation hami.io/core-policy)"
        ],
        id="core-policy-from-annotation-replaces-env",
    ),
    pytest.param(
        {},
        pod(
            container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"}),
            annotations={"hami.io/core-policy": "default"},
        ),
        [],
        id="core-policy-default-changes-nothing",
    ),
    pytest.param(
        {"config": {"nvidia": {"gpuCorePolicy": "force"}}},
        pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"})),
        [],
        id="core-policy-from-config-is-the-cluster-default",
    ),
    pytest.param(
        {"config": NVIDIA_ENV},
        pod(container("web", limits={"cpu": "1"}, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])),
        ["container web: env NVIDIA_VISIBLE_DEVICES 'all' replaced by 'none' (no NVIDIA GPU asked, overwriteEnv)"],
        id="overwrite-env-replaces-a-value",
    ),
    pytest.param(
        {"config": NVIDIA_ENV}, pod(container("web", limits={"cpu": "1"})), [], id="overwrite-env-adds-silently"
    ),
    pytest.param(
        {},
        pod(
            container(
                limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50", "nvidia.com/priority": "1"},
                env=[{"name": "CUDA_TASK_PRIORITY", "valueFrom": {"configMapKeyRef": {"name": "p", "key": "k"}}}],
            )
        ),
        ["container main: env CUDA_TASK_PRIORITY (valueFrom) replaced by '1' (limit nvidia.com/priority)"],
        id="priority-env-replaced",
    ),
    # -- Ascend --
    pytest.param(
        ASCEND,
        pod(container(limits={B3: "1"})),
        [f"container main: limit {B3_MEM} set to 65536 (no memory asked: the whole NPU)"],
        id="ascend-default-memory",
    ),
    pytest.param(
        ASCEND,
        pod(container(limits={B3: "1", B3_MEM: "1000"})),
        [f"container main: limit {B3_MEM} 1000 rounded to 16384 (the smallest vNPU template that fits)"],
        id="ascend-template-rounding",
    ),
    pytest.param(
        ASCEND,
        pod(container(limits={B3: "1", B3_MEM: "40000"})),
        [f"container main: limit {B3_MEM} 40000 rounded to 65536 (no vNPU template fits: the whole NPU)"],
        id="ascend-whole-npu-rounding",
    ),
    pytest.param(
        ASCEND,
        pod(container(limits={B3: "1", B3_MEM: "1000"}), annotations={"huawei.com/vnpu-mode": "hami-core"}),
        [],
        id="ascend-hami-core-as-asked",
    ),
    pytest.param(
        ASCEND,
        pod(container(limits={"huawei.com/Ascend910C": "1", "huawei.com/Ascend910C-memory": "16384"})),
        ["container main: limit huawei.com/Ascend910C 1 rounded to 2 (Ascend910C super pod: whole modules of 2 NPUs)"],
        id="ascend-super-pod-modules",
    ),
    # -- Moore Threads --
    pytest.param(
        {},
        pod(container(limits={MTH: "2", MTH_CORE: "4"}, requests={MTH_CORE: "2"})),
        [
            f"container main: limit {MTH_CORE} 4 replaced by 32 (several sGPUs are whole cards)",
            f"container main: limit {MTH_MEM} set to 192 (several sGPUs are whole cards)",
            f"container main: request {MTH_CORE} 2 replaced by 32 (device requests must equal limits)",
        ],
        id="mthreads-several-cards",
    ),
    pytest.param(
        {},
        pod(container(limits={MTH: "1"})),
        [
            f"container main: limit {MTH_CORE} set to 16 (no memory asked: a whole card)",
            f"container main: limit {MTH_MEM} set to 96 (no memory asked: a whole card)",
        ],
        id="mthreads-one-card-without-memory",
    ),
    pytest.param(
        {},
        pod(
            container(limits={MTH: "2", MTH_CORE: "32", MTH_MEM: "192"}),
            annotations={"mthreads.com/request-gpu-num": "5"},
        ),
        ["annotation mthreads.com/request-gpu-num '5' replaced by '2' (the device count)"],
        id="mthreads-request-gpu-num-replaced",
    ),
    pytest.param({}, pod(container(limits={MTH: "1", MTH_MEM: "8"})), [], id="mthreads-slice-as-asked"),
    # -- Iluvatar, Kunlun, MetaX --
    pytest.param(
        ILUVATAR,
        pod(container(limits={ILU: "2"})),
        [f"container main: limit {ILU_CORE} set to 200 (several GPUs are whole cards)"],
        id="iluvatar-several-cards",
    ),
    pytest.param(
        ILUVATAR,
        pod(container(limits={ILU: "2", ILU_CORE: "50"})),
        [f"container main: limit {ILU_CORE} 50 replaced by 200 (several GPUs are whole cards)"],
        id="iluvatar-several-cards-overwrite",
    ),
    pytest.param(
        {},
        pod(container(limits={"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "30000"})),
        ["container main: limit kunlunxin.com/vxpu-memory 30000 rounded to 49152 (vXPU partition size)"],
        id="kunlun-partition-rounding",
    ),
    pytest.param(
        {},
        pod(container(limits={"metax-tech.com/sgpu": "1"})),
        [METAX_QOS],
        id="metax-default-qos",
    ),
    # -- plain routing: no warning --
    pytest.param({}, pod(container(limits={"cambricon.com/vmlu": "1"})), [], id="routing-only"),
    pytest.param(
        {"HAMI_NODE_SCHEDULER_POLICY": "binpack", "HAMI_GPU_SCHEDULER_POLICY": "spread"},
        pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"})),
        [],
        id="cluster-policies-and-gpu-type",
    ),
    pytest.param(
        {"config": {"nvidia": {"runtimeClassName": "nvidia"}}},
        pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"})),
        [],
        id="runtime-class",
    ),
    pytest.param({}, pod(container(limits={"cpu": "1"})), [], id="plain-pod"),
]


@pytest.fixture
def settings_for(configured: Callable[..., Settings]) -> Callable[[dict[str, Any]], Settings]:
    def build(spec: dict[str, Any]) -> Settings:
        env = {k: v for k, v in spec.items() if k != "config"}
        return configured(spec["config"], **env) if "config" in spec else Settings.from_env(env)

    return build


@pytest.mark.parametrize(("spec", "obj", "expected"), CHANGES)
def test_change_warnings(spec: dict[str, Any], obj: dict[str, Any], expected: list[str], settings_for) -> None:
    outcome = run(obj, settings_for(spec))
    assert outcome.response["allowed"] is True
    assert outcome.response.get("warnings", []) == expected
    assert "warnings" in outcome.response or not expected  # omitted, not empty


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_warnings_in_both_versions(version: str, settings) -> None:
    outcome = run(pod(container(limits={"nvidia.com/gpu": "1"})), settings, version=version)
    assert outcome.response["warnings"] == [
        "container main: limit nvidia.com/gpucores set to 100 (a whole GPU comes with all its cores)"
    ]


@pytest.mark.parametrize(
    ("obj", "env"),
    [
        pytest.param(pod(container(limits={"nvidia.com/gpu": "1"}), nodeName="n1"), {}, id="node-assigned"),
        pytest.param(pod(container(limits={"nvidia.com/gpu": "1"}, privileged=True)), {}, id="privileged"),
        pytest.param(
            pod(container(limits={"nvidia.com/gpu": "1"}), annotations={"hami.io/gpu-schedular-policy": "spread"}),
            {"HAMI_STRICT_ANNOTATIONS": "true"},
            id="strict",
        ),
    ],
)
def test_denials_carry_no_warnings(obj: dict[str, Any], env: dict[str, str], make_settings) -> None:
    outcome = run(obj, make_settings(**env))
    assert outcome.response["allowed"] is False and "warnings" not in outcome.response


def test_other_scheduler_pod_is_left_without_warnings(settings) -> None:
    obj = pod(container(limits={"nvidia.com/gpu": "1"}), annotations={"hami.io/x": "y"}, scheduler="volcano")
    assert "warnings" not in run(obj, settings).response


def test_each_warning_within_120_characters_and_printable(configured) -> None:
    """Long names the author wrote, and configured ones, are cut; control characters are escaped."""
    long = "x" * 200
    settings = configured({"nvidia": {"resourceCoreName": "example.com/" + "c" * 60}})
    obj = pod(
        container("c" * 63, limits={"nvidia.com/gpu": "1"}),
        annotations={
            f"hami.io/{long}": "v",
            "hami.io/gpu-scheduler-policy": "binpack\n" + long,
            "hami.io/bad\u202ename\x1b[31m": "v",
        },
    )
    warnings = run(obj, settings).response["warnings"]
    assert warnings == [
        "unknown annotation hami.io/" + "x" * 37 + "...; did you mean hami.io/use-xpu-uuid?",
        "annotation hami.io/gpu-scheduler-policy accepts a comma-separated list of binpack, spread, topology-aware, "
        "mutex, numa",
        "unknown annotation hami.io/bad\\u202ename\\x1b[31m; did you mean hami.io/bind-time?",
        "container " + "c" * 45 + "...: limit example.com/" + "c" * 33 + "... se...",
    ]
    assert all(len(w) <= 120 and w.isprintable() for w in warnings)


def test_user_values_are_not_echoed_beyond_a_short_prefix(settings) -> None:
    secret = "s3cr3t-" + "z" * 5000
    obj = pod(
        container(limits={"nvidia.com/gpu": "1"}), annotations={"nvidia.com/numa-bind": secret, "hami.io/zz": secret}
    )
    text = "\n".join(run(obj, settings).response["warnings"])
    assert "s3cr3t-zzzzzzzzz" in text and "z" * 20 not in text


def test_count_is_bounded_with_a_last_line_saying_how_many_more(settings) -> None:
    obj = pod(*[container(f"c{i}", limits={"nvidia.com/gpu": "1"}) for i in range(30)])
    warnings = run(obj, settings).response["warnings"]
    assert len(warnings) == 20
    assert warnings[:2] == [
        "container c0: limit nvidia.com/gpucores set to 100 (a whole GPU comes with all its cores)",
        "container c1: limit nvidia.com/gpucores set to 100 (a whole GPU comes with all its cores)",
    ]
    assert warnings[-1] == "... and 11 more warnings"


def test_many_unknown_annotations_stay_bounded(settings) -> None:
    """Only the first 20 unknown keys are compared with the known ones; the answer still says how many."""
    annotations = {f"hami.io/unknown-{i}": "v" for i in range(3000)}
    warnings = run(pod(container(limits={"cambricon.com/vmlu": "1"}), annotations=annotations), settings).response[
        "warnings"
    ]
    assert len(warnings) == 20 and warnings[-1] == "... and 2981 more warnings"
    assert warnings[0].startswith("unknown annotation hami.io/unknown-0; did you mean ")


def test_init_containers_first_then_annotations(settings) -> None:
    obj = pod(
        container(limits={"metax-tech.com/sgpu": "1"}),
        init=[container("setup", limits={"nvidia.com/gpu": "1"})],
        annotations={"hami.io/node-scheduler-policy": "packed"},
    )
    assert run(obj, settings).response["warnings"] == [
        "annotation hami.io/node-scheduler-policy: 'packed' is not one of binpack, spread",
        "container setup: limit nvidia.com/gpucores set to 100 (a whole GPU comes with all its cores)",
        METAX_QOS,
    ]


# -- end to end: gunicorn over TLS, its log line and its metrics ------------------------------------------------
TYPO = pod(
    container(limits={"nvidia.com/gpu": "1"}),
    annotations={"hami.io/gpu-schedular-policy": "spread", "nvidia.com/numa-bind": "yes"},
)
TYPO_WARNINGS = [
    "unknown annotation hami.io/gpu-schedular-policy; did you mean hami.io/gpu-scheduler-policy?",
    "annotation nvidia.com/numa-bind: 'yes' is not true or false",
    "container main: limit nvidia.com/gpucores set to 100 (a whole GPU comes with all its cores)",
]


@pytest.fixture(scope="module")
def served(pki: LocalFiles):
    with serve(pki, HAMI_WEBHOOK_WORKERS="1", HAMI_LOG_FORMAT="json") as server:
        yield server


def test_over_tls_with_log_field_and_metric(served: Served) -> None:
    for version, uid in (("v1", "warn-1"), ("v1beta1", "warn-2")):
        status, answer = served.post(admission_review(TYPO, version=version, uid=uid))
        assert (status, answer["apiVersion"], answer["response"]["allowed"]) == (
            200,
            f"admission.k8s.io/{version}",
            True,
        )
        assert answer["response"]["warnings"] == TYPO_WARNINGS
    served.post(admission_review(pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "9"})), uid="quiet"))
    served.wait_for('"uid":"quiet"')
    lines = {line["uid"]: line for line in map(json.loads, served.lines) if line.get("msg") == "review"}
    assert [lines[uid]["warnings"] for uid in ("warn-1", "warn-2", "quiet")] == [3, 3, 0]
    text = served.scrape()
    counts = {
        kind: sample(text, "hami_webhook_warnings_total", kind=kind)
        for kind in ("unknown_annotation", "invalid_annotation_value", "default", "rounded")
    }
    assert counts == {"unknown_annotation": 2, "invalid_annotation_value": 2, "default": 2, "rounded": 0}


def test_over_tls_strict_denies(pki: LocalFiles) -> None:
    with serve(pki, HAMI_WEBHOOK_WORKERS="1", HAMI_STRICT_ANNOTATIONS="true") as server:
        status, answer = server.post(admission_review(TYPO, uid="strict-1"))
    response = answer["response"]
    assert status == 200 and "warnings" not in response
    assert (response["allowed"], response["status"]["code"], response["status"]["reason"]) == (False, 400, "BadRequest")
    assert response["status"]["message"] == "; ".join(TYPO_WARNINGS[:2])


class Reserving:
    """A quota port that always reserves, so the Pod gets the webhook's reservation annotation."""

    def governs(self, namespace: str) -> bool:
        return True

    def admit(self, namespace: str, pod: Any, *, uid: str, dry_run: bool, who: str = "") -> Verdict:
        return Verdict("", reservation=uid)

    def status(self) -> dict[str, Any]:
        return {"ready": True}

    def stop(self) -> None:
        pass


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(pod(container(limits={"nvidia.com/gpu": "1"})), id="nvidia"),
        pytest.param(pod(container(limits={"metax-tech.com/sgpu": "1"})), id="metax-qos"),
        pytest.param(pod(container(limits={MTH: "2"})), id="mthreads"),
    ],
)
def test_reinvoked_on_its_own_output_the_webhook_is_silent_even_when_strict(obj: dict[str, Any], make_settings) -> None:
    """reinvocationPolicy IfNeeded shows the webhook its own annotations and defaults: nothing to say about them."""
    settings = make_settings(
        HAMI_STRICT_ANNOTATIONS="true", HAMI_NODE_SCHEDULER_POLICY="spread", HAMI_GPU_SCHEDULER_POLICY="binpack"
    )
    first = run(obj, settings, Reserving())
    assert first.response["allowed"] and "hami.io/quota-reservation" in first.patched["metadata"]["annotations"]
    again = run(first.patched, settings, Reserving())
    assert again.response["allowed"] is True and "warnings" not in again.response
