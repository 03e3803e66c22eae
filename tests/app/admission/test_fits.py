"""Fits nowhere, in process: HAMi's NVIDIA filter on the inventory's shapes (docs/rules.md#fits-nowhere), the
warning's words, the denial, the workload's warning, and the Store under Node churn."""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.fits import fitting
from app.admission.workloads import decide_workload
from app.inventory.store import Store
from app.settings import Settings
from testbed.nodes import Held, gpu, node_metadata
from testbed.pods import container, pod
from testbed.reviews import admission_review, run

SETTINGS = Settings.from_env({})
A100 = "NVIDIA-NVIDIA A100-SXM4-80GB"
MIG_PROFILES = [
    {"name": "1g.10gb", "memoryMB": 9856, "core": 14, "sliceCount": 1,
     "placements": [{"start": i, "size": 1} for i in range(7)]},
    {"name": "3g.40gb", "memoryMB": 40192, "core": 42, "sliceCount": 3,
     "placements": [{"start": 0, "size": 4}, {"start": 4, "size": 4}]},
]  # fmt: skip


def cluster() -> Store:
    """Two nodes of 4 A100s (two per NUMA node), one of 2 A10s, one whose GPUs are all unhealthy, one MIG A100."""
    store = Store(fitting(SETTINGS.devices))
    a100 = [
        node_metadata(name, [gpu(i, name, 81920, card=A100, numa=i // 2) for i in range(4)])
        for name in ("a100-0", "a100-1")
    ]
    a10 = node_metadata("small-0", [gpu(i, "small-0") for i in range(2)])
    sick = node_metadata("sick-0", [gpu(i, "sick-0", 196608, health=False) for i in range(8)])
    mig = node_metadata("mig-0", [gpu(0, "mig-0", 81920, 7, card=A100, mode="mig", mig=MIG_PROFILES)])
    store.listed(None, [*a100, a10, sick, mig], "1")
    return store


def gpu_id(node: str, index: int) -> str:
    return str(gpu(index, node)["id"])


def warned(limits: dict[str, str], annotations: dict[str, str] | None = None, store: Store | None = None) -> list[str]:
    outcome = run(
        pod(container("train", limits=limits), annotations=annotations), SETTINGS, inventory=Held(store or cluster())
    )
    assert outcome.response["allowed"], outcome.response
    return [w for w in outcome.response.get("warnings", []) if w.startswith("container train asks")]


CASES = [
    pytest.param({"nvidia.com/gpu": "1"}, {}, [], id="one-whole-gpu"),
    pytest.param({"nvidia.com/gpu": "4", "nvidia.com/gpumem": "81920"}, {}, [], id="a-whole-a100-node"),
    pytest.param(
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100000"}, {},
        ["container train asks 100000 MiB per GPU; the largest registered NVIDIA GPU has 81920 MiB (node a100-0)"],
        id="memory",
    ),
    pytest.param({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}, {}, [], id="percentage"),
    pytest.param(
        {"nvidia.com/gpu": "9"}, {},
        ["container train asks 9 NVIDIA GPUs; the most a registered node has that fit it is 4 (node a100-0)"],
        id="count-mig-aside",  # HAMi's count check lets MIG requests through: the MIG node answers later
    ),
    pytest.param(
        {"nvidia.com/gpu": "8"}, {},
        ["container train asks 8 NVIDIA GPUs; the most a registered node has that fit it is 4 (node a100-0)"],
        id="count-healthy",
    ),
    pytest.param(
        {"nvidia.com/gpu": "1"}, {"nvidia.com/use-gputype": "H100"},
        ["container train asks nvidia.com/use-gputype 'H100'; registered: NVIDIA-NVIDIA A10, "
         "NVIDIA-NVIDIA A100-SXM4-80GB"],
        id="type",
    ),
    pytest.param({"nvidia.com/gpu": "1"}, {"nvidia.com/use-gputype": "a10,h100"}, [], id="type-case-insensitive"),
    pytest.param(
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"}, {"nvidia.com/use-gputype": "A10 "},
        [], id="type-within-the-model",  # "A10" is within "A100": HAMi matches a substring
    ),
    pytest.param(
        {"nvidia.com/gpu": "3"}, {"nvidia.com/nouse-gputype": "A100"},
        ["container train asks 3 NVIDIA GPUs; the most a registered node has that fit it is 2 (node small-0)"],
        id="nouse-type",
    ),
    pytest.param(
        {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}, {"nvidia.com/vgpu-mode": "mps"},
        ["container train asks nvidia.com/vgpu-mode 'mps'; registered GPUs are in mode hami-core, mig"],
        id="mode",
    ),
    pytest.param(
        {"nvidia.com/gpu": "3", "nvidia.com/gpumem": "9000"}, {"nvidia.com/vgpu-mode": "mig"}, [], id="mig-instances"
    ),
    pytest.param(
        {"nvidia.com/gpu": "8", "nvidia.com/gpumem": "9000"}, {"nvidia.com/vgpu-mode": "mig"},
        ["container train asks 8 NVIDIA GPUs; the most a registered node has that fit it is 7 (node mig-0)"],
        id="mig-placements",
    ),
    pytest.param(
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "50000"}, {"nvidia.com/vgpu-mode": "mig"},
        ["container train asks 50000 MiB per GPU; no registered MIG profile has room for it"],
        id="mig-profile",
    ),
    pytest.param({"nvidia.com/gpu": "2"}, {"nvidia.com/numa-bind": "true"}, [], id="numa-two"),
    pytest.param(
        {"nvidia.com/gpu": "3", "nvidia.com/gpumem": "20000"}, {"nvidia.com/numa-bind": "T"},
        ["container train asks 3 NVIDIA GPUs; the most a registered node has that fit it on one NUMA node is 2 "
         "(node a100-0)"],
        id="numa-three",
    ),
    pytest.param(
        {"nvidia.com/gpu": "3", "nvidia.com/gpumem": "20000"}, {"nvidia.com/numa-bind": "yes"}, [],
        id="numa-not-go-bool",
    ),
    pytest.param(
        {"nvidia.com/gpu": "2"}, {"nvidia.com/use-gpuuuid": f"{gpu_id('a100-1', 0)}, {gpu_id('a100-1', 3)}"}, [],
        id="uuid",
    ),
    pytest.param(
        {"nvidia.com/gpu": "2"}, {"nvidia.com/use-gpuuuid": f"{gpu_id('a100-1', 0)},{gpu_id('a100-0', 3)}"},
        ["container train asks 2 NVIDIA GPUs by nvidia.com/use-gpuuuid; no node has that many of the GPUs it allows"],
        id="uuid-on-two-nodes",
    ),
    pytest.param({"nvidia.com/gpu": "1"}, {"nvidia.com/use-gpuuuid": " "}, [], id="uuid-blank"),
    pytest.param(
        {"nvidia.com/gpu": "4", "nvidia.com/gpumem": "40000"},
        {"nvidia.com/nouse-gpuuuid": ",".join(gpu_id("a100-0", i) for i in range(4))},
        [], id="nouse-uuid-another-node",
    ),
    pytest.param(
        {"nvidia.com/gpu": "4", "nvidia.com/gpumem": "40000"},
        {"nvidia.com/nouse-gpuuuid": f"{gpu_id('a100-0', 0)},{gpu_id('a100-1', 0)}"},
        ["container train asks 4 NVIDIA GPUs by nvidia.com/nouse-gpuuuid; no node has that many of the GPUs it allows"],
        id="nouse-uuid-every-node",
    ),
    pytest.param({"nvidia.com/gpucores": "150", "nvidia.com/gpumem": "1000"}, {}, [], id="cores-above-100-read-as-100"),
]  # fmt: skip


@pytest.mark.parametrize(("limits", "annotations", "expected"), CASES)
def test_hamis_filter_on_the_registered_nodes(
    limits: dict[str, str], annotations: dict[str, str], expected: list[str]
) -> None:
    assert warned(limits, annotations) == expected


def test_an_id_no_node_registers() -> None:
    assert warned({"nvidia.com/gpu": "1"}, {"nvidia.com/use-gpuuuid": "GPU-0000"}) == [
        "container train asks nvidia.com/use-gpuuuid 'GPU-0000'; no registered GPU has such an id"
    ]


def test_the_count_is_checked_first() -> None:
    store = Store(fitting(SETTINGS.devices))
    store.listed(
        None, [node_metadata(f"small-{n}", [gpu(i, f"small-{n}", health=i > 0) for i in range(2)]) for n in (0, 1)], "1"
    )
    assert warned({"nvidia.com/gpu": "3", "nvidia.com/gpumem": "99999"}, store=store) == [
        "container train asks 3 NVIDIA GPUs; the most a registered node has is 2 (node small-0)"
    ]


def test_unhealthy_gpus_hold_nothing() -> None:
    store = Store(fitting(SETTINGS.devices))
    store.listed(None, [node_metadata("sick-0", [gpu(i, "sick-0", health=False) for i in range(2)])], "1")
    assert warned({"nvidia.com/gpu": "1"}, store=store) == [
        "container train asks nvidia.com/gpu; every registered NVIDIA GPU is unhealthy"
    ]


def test_nothing_is_said_without_an_inventory() -> None:
    empty = Store(fitting(SETTINGS.devices))
    assert warned({"nvidia.com/gpu": "99"}, store=empty) == []
    empty.listed(None, [{"metadata": {"name": "cpu-0"}}], "1")
    assert empty.current() is None
    assert warned({"nvidia.com/gpu": "99"}, store=empty) == []


def test_deny_refuses_with_the_same_words() -> None:
    deny = Settings.from_env({"HAMI_FITS_NOWHERE": "deny"})
    outcome = run(pod(container("train", limits={"nvidia.com/gpu": "8"})), deny, inventory=Held(cluster()))
    message = "container train asks 8 NVIDIA GPUs; the most a registered node has that fit it is 4 (node a100-0)"
    assert outcome.denial() == (False, 403, "FitsNowhere", message)


def test_the_served_review_counts_each_container_that_fits_nowhere() -> None:
    from prometheus_client import REGISTRY

    from app import create_app

    def counted() -> float:
        labels = {"namespace": "ml", "resource": "nvidia.com/gpu"}
        return REGISTRY.get_sample_value("hami_webhook_fits_nowhere_total", labels) or 0.0

    before = counted()
    asking = [container(f"c{i}", limits={"nvidia.com/gpu": "8"}) for i in range(2)]
    app = create_app(SETTINGS, inventory=Held(cluster()))
    with app.test_client() as client:
        reply = client.post("/webhook", json=admission_review(pod(*asking, namespace="ml")))
        answer = reply.get_json()
        reply.close()  # the decision is counted once the answer has left
    assert len([w for w in answer["response"]["warnings"] if "asks 8 NVIDIA GPUs" in w]) == 2
    assert counted() == before + 2


def test_off_says_nothing() -> None:
    off = Settings.from_env({"HAMI_FITS_NOWHERE": "off"})
    outcome = run(pod(container("train", limits={"nvidia.com/gpu": "8"})), off, inventory=Held(cluster()))
    assert outcome.response.get("warnings", []) == [
        "container train: limit nvidia.com/gpucores set to 100 (a whole GPU comes with all its cores)"
    ]


def test_a_workload_is_warned_for_its_template() -> None:
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {
            "metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [container("train", limits={"nvidia.com/gpu": "8"}, defaulted=False)]},
        }},
    }  # fmt: skip
    request = admission_review(deployment)["request"] | {
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"}
    }
    decision = decide_workload(request, SETTINGS, run_quota(), "uid", Held(cluster()))
    assert [n.text for n in decision.warnings] == [
        "template: container train asks 8 NVIDIA GPUs; the most a registered node has that fit it is 4 (node a100-0)"
    ]


def run_quota() -> Any:
    from app.admission.ports import QuotaOff

    return QuotaOff()


def test_node_churn_is_reflected() -> None:
    store = Store(fitting(SETTINGS.devices))
    big = node_metadata("big-0", [gpu(i, "big-0") for i in range(8)])
    store.listed(None, [node_metadata("small-0", [gpu(0, "small-0")])], "1")
    asks_eight = {"nvidia.com/gpu": "8"}
    assert warned(asks_eight, store=store)
    store.event(None, "ADDED", big, "2")
    assert warned(asks_eight, store=store) == []
    unhealthy = node_metadata("big-0", [gpu(i, "big-0", health=i > 0) for i in range(8)])
    store.event(None, "MODIFIED", unhealthy, "3")  # re-registered with one GPU unhealthy
    assert warned(asks_eight, store=store)
    store.event(None, "MODIFIED", big, "4")
    assert warned(asks_eight, store=store) == []
    store.event(None, "DELETED", big, "5")
    assert warned(asks_eight, store=store)
    store.listed(None, [], "6")  # a fresh list without any node: no inventory, nothing said
    assert store.current() is None and warned(asks_eight, store=store) == []
    assert store.figures().nodes == {"NVIDIA": 0}  # its gauge drops to 0


def test_an_unchanged_annotation_keeps_the_inventory() -> None:
    store = cluster()
    before = store.current()
    heartbeat = node_metadata("small-0", [gpu(i, "small-0") for i in range(2)])
    heartbeat["metadata"]["annotations"]["hami.io/node-handshake"] = "Reported 2026-12-07 04:00:00"
    store.event(None, "MODIFIED", heartbeat, "2")
    assert store.current() is before


def test_shapes_group_alike_nodes() -> None:
    store = cluster()
    inventory = store.current()
    assert inventory is not None
    kinds = {kind.example: kind.nodes for kind in inventory.shapes["NVIDIA"].values()}
    assert kinds == {"a100-0": 2, "small-0": 1, "sick-0": 1, "mig-0": 1}
    assert store.figures().devices == {"NVIDIA": 19}
