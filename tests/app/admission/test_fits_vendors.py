"""Fits nowhere for the vendors other than NVIDIA whose device plugins register on Nodes (docs/rules.md#fits-nowhere):
each vendor's filter as HAMi's Fit makes it, on nodes registered in that vendor's format, and the author's line."""

from __future__ import annotations

import pytest

from app.admission.fits import fitting
from app.inventory.store import Store
from app.settings import Settings
from testbed.nodes import Held, node_metadata
from testbed.pods import container, pod
from testbed.reviews import run
from testbed.vendors import VENDORS, device, register_text

SETTINGS = Settings.from_env({})
ILUVATAR = Settings.from_env({"HAMI_ENABLE_ILUVATAR": "true"})


def cluster(settings: Settings = SETTINGS) -> Store:
    """Per vendor: a node of four cards (two per NUMA node, the last unhealthy), and for the first four a node of
    one small card (AMD's with a split count of 0). Enflame's DRS devices are all healthy (its format has no
    health), with three profiles."""
    store = Store(fitting(settings.devices))
    items = []
    for key in ("DCU", "AMD", "Biren", "Vastai"):
        vendor = VENDORS[key]
        (small, small_mib), (big, big_mib) = (vendor.cards * 2)[:2]
        four = f"{key.lower()}-4"
        cards = [device(key, i, four, big, big_mib, numa=i // 2, health=i < 3) for i in range(4)]
        items.append(node_metadata(four, cards, vendor.annotation, vendor.encode))
        one = f"{key.lower()}-1"
        items.append(node_metadata(one, [device(key, 0, one, small, small_mib, split=0 if key == "AMD" else 4)],
                                   vendor.annotation, vendor.encode))  # fmt: skip
    for key in ("XPU", "Metax-SGPU", "Enflame"):
        vendor, four = VENDORS[key], f"{key.lower()}-4"
        card, mib = vendor.cards[0]
        drs = {"drs": ["1g.8gb", "2g.16gb", "6g.48gb"], "count": 6} if key == "Enflame" else {}
        cards = [device(key, i, four, card, mib, numa=i // 2, health=i < 3) | drs for i in range(4)]
        items.append(node_metadata(four, cards, vendor.annotation, vendor.encode))
    store.listed(None, items, "1")
    return store


def warned(limits: dict[str, str], annotations: dict[str, str] | None = None, store: Store | None = None) -> list[str]:
    outcome = run(
        pod(container("train", limits=limits), annotations=annotations), SETTINGS, inventory=Held(store or cluster())
    )
    assert outcome.response["allowed"], outcome.response
    return [w for w in outcome.response.get("warnings", []) if w.startswith("container train asks")]


CASES = [
    pytest.param({"hygon.com/dcunum": "3"}, {}, [], id="dcu-three-healthy"),
    pytest.param(
        {"hygon.com/dcunum": "4"}, {},
        ["container train asks 4 Hygon DCUs; the most a registered node has that fit it is 3 (node dcu-4)"],
        id="dcu-count-healthy",
    ),
    pytest.param(
        {"hygon.com/dcunum": "5"}, {},
        ["container train asks 5 Hygon DCUs; the most a registered node has is 4 (node dcu-4)"],
        id="dcu-count",
    ),
    pytest.param({"hygon.com/dcunum": "1", "hygon.com/dcumem": "65520"}, {}, [], id="dcu-whole-memory"),
    pytest.param(
        {"hygon.com/dcunum": "1", "hygon.com/dcumem": "65521"}, {},
        ["container train asks 65521 MiB per DCU; the largest registered Hygon DCU has 65520 MiB (node dcu-4)"],
        id="dcu-memory",
    ),
    pytest.param({"hygon.com/dcunum": "1", "hygon.com/dcucores": "250"}, {}, [], id="dcu-cores-read-as-100"),
    pytest.param(
        {"hygon.com/dcunum": "1"}, {"hygon.com/use-dcutype": "K200"},
        ["container train asks hygon.com/use-dcutype 'K200'; registered: DCU-K100_AI, DCU-Z100"],
        id="dcu-type",
    ),
    pytest.param({"hygon.com/dcunum": "1"}, {"hygon.com/use-dcutype": "z100"}, [], id="dcu-type-any-case"),
    pytest.param(
        {"hygon.com/dcunum": "1"}, {"hygon.com/use-gpuuuid": "DCU-none"},
        ["container train asks hygon.com/use-gpuuuid 'DCU-none'; no registered DCU has such an id"],
        id="dcu-uuid",
    ),
    pytest.param({"amd.com/gpu": "3", "amd.com/gpumem": "196592"}, {}, [], id="amd-whole-memory"),
    pytest.param(
        {"amd.com/gpu": "1", "amd.com/gpumem": "200000"}, {},
        ["container train asks 200000 MiB per GPU; the largest registered AMD GPU has 196592 MiB (node amd-4)"],
        id="amd-memory",
    ),
    pytest.param(
        {"amd.com/gpu": "1"}, {"amd.com/nouse-gputype": "MI300X"},
        ["container train asks amd.com/gpu; every registered AMD GPU has a split count of 0"],
        id="amd-split-count",  # the MI250X left has a split count of 0
    ),
    pytest.param({"amd.com/gpu": "1"}, {"amd.com/use-gputype": "mi300x"}, [], id="amd-type-any-case"),
    pytest.param({"amd.com/gpu": "2", "amd.com/gpucores": "30"}, {}, [], id="amd-core-percentage"),
    pytest.param(
        {"birentech.com/gpu": "4"}, {},
        ["container train asks 4 Biren GPUs; the most a registered node has that fit it is 3 (node biren-4)"],
        id="biren-count-healthy",
    ),
    pytest.param({"birentech.com/gpu": "1"}, {}, [], id="biren-one"),
    pytest.param(
        {"kunlunxin.com/vxpu": "3"}, {},
        ["container train asks 3 Kunlunxin XPUs; HAMi hands them out only by 1, 2, 4, 8"], id="xpu-count-by-topology",
    ),
    pytest.param(
        {"kunlunxin.com/vxpu": "4"}, {},
        ["container train asks 4 Kunlunxin XPUs; the most a registered node has that fit it is 3 (node xpu-4)"],
        id="xpu-count-healthy",
    ),
    pytest.param({"kunlunxin.com/vxpu": "2", "kunlunxin.com/vxpu-memory": "100000"}, {}, [], id="xpu-whole-card"),
    pytest.param(
        {"kunlunxin.com/vxpu": "1"}, {"hami.io/use-xpu-uuid": "a", "baidu.com/use-gpuuuid": "b"},
        ["container train asks hami.io/use-xpu-uuid 'a,b'; no registered XPU has such an id"], id="xpu-two-id-pairs",
    ),
    pytest.param({"metax-tech.com/sgpu": "3", "metax-tech.com/vmemory": "64"}, {}, [], id="metax-whole-memory"),
    pytest.param(
        {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "70"}, {},
        ["container train asks 71680 MiB per GPU; the largest registered MetaX sGPU device has 65536 MiB "
         "(node metax-sgpu-4)"],
        id="metax-memory-in-gib",
    ),
    pytest.param(
        {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "150"}, {},
        ["container train asks 150 cores per GPU; the most a registered MetaX sGPU device has is 100 "
         "(node metax-sgpu-4)"],
        id="metax-cores-unclamped",
    ),
    pytest.param(
        {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "150"}, {"metax-tech.com/sgpu-app-class": "online"}, [],
        id="metax-online-cores-unchecked",
    ),
    pytest.param({"enflame.com/drs-gcu": "2"}, {}, [], id="drs-slices"),
    pytest.param(
        {"enflame.com/drs-gcu": "3"}, {},
        ["container train asks enflame.com/drs-gcu 3; registered profiles: 6g.48gb, 2g.16gb, 1g.8gb"],
        id="drs-no-such-profile",
    ),
    pytest.param({"enflame.com/gcu-memory": "20"}, {}, [], id="drs-memory-gb"),
    pytest.param({"enflame.com/gcu-memory": "16384", "enflame.com/gcu-core": "50"}, {}, [], id="drs-memory-mib"),
    pytest.param(
        {"enflame.com/gcu-memory": "60"}, {},
        ["container train asks enflame.com/gcu-memory 60, enflame.com/gcu-core 0; registered profiles: 6g.48gb, "
         "2g.16gb, 1g.8gb"],
        id="drs-memory",
    ),
    pytest.param(
        {"vastaitech.com/va": "9"}, {},
        ["container train asks 9 Vastai devices; the most a registered node has is 4 (node vastai-4)"],
        id="vastai-count",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("limits", "annotations", "expected"), CASES)
def test_each_vendors_filter_on_its_registered_nodes(
    limits: dict[str, str], annotations: dict[str, str], expected: list[str]
) -> None:
    assert warned(limits, annotations) == expected


def test_a_refused_id_narrows_to_the_nodes_holding_it() -> None:
    store = cluster()
    four = [device("Biren", i, "biren-4", "Biren-BR104", 32768)["id"] for i in range(3)]
    assert warned({"birentech.com/gpu": "2"}, {"birentech.com/nouse-gpuuuid": four[0]}, store) == []
    line = (
        "container train asks 2 Biren GPUs by birentech.com/nouse-gpuuuid; no node has that many of the GPUs it allows"
    )
    assert warned({"birentech.com/gpu": "2"}, {"birentech.com/nouse-gpuuuid": ",".join(four[:2])}, store) == [line]


def test_iluvatar_reads_its_text_per_chip() -> None:
    store = Store(fitting(ILUVATAR.devices))
    name, key = "ilu-0", "hami.io/node-BI-V150-register"
    cards = [device("ILU", i, name, "BI-V150", 32768) for i in range(2)]
    store.listed(None, [node_metadata(name, cards, key, register_text)], "1")

    def asks(limits: dict[str, str]) -> list[str]:
        outcome = run(pod(container("train", limits=limits)), ILUVATAR, inventory=Held(store))
        return [w for w in outcome.response.get("warnings", []) if w.startswith("container train asks")]

    assert asks({"iluvatar.ai/BI-V150-vgpu": "2", "iluvatar.ai/BI-V150.vMem": "128"}) == []  # 128 x 256 MiB
    assert asks({"iluvatar.ai/BI-V150-vgpu": "1", "iluvatar.ai/BI-V150.vMem": "129"}) == [
        "container train asks 33024 MiB per GPU; the largest registered Iluvatar BI-V150 has 32768 MiB (node ilu-0)"
    ]


def test_a_text_hami_refuses_leaves_that_vendors_devices_of_the_node_out() -> None:
    store = cluster()
    items = [
        node_metadata(
            "dcu-4", [device("DCU", 0, "dcu-4", "DCU-Z100", 32752)], VENDORS["DCU"].annotation, register_text
        ),
        {"metadata": {"name": "dcu-bad", "annotations": {VENDORS["DCU"].annotation: "DCU-x,4,1024,100,DCU,0,yes:"}}},
    ]
    store.listed(None, items, "2")
    inventory = store.current()
    assert inventory is not None
    assert [kind.example for kind in inventory.shapes["DCU"].values()] == ["dcu-4"]


ASCEND = Settings.from_env({"HAMI_ENABLE_ASCEND": "true"})
NPU, NPU_MEMORY, NPU_CORE = "huawei.com/Ascend910B3", "huawei.com/Ascend910B3-memory", "huawei.com/Ascend910B3-core"
HAMI_CORE = {"huawei.com/vnpu-mode": "hami-core"}


@pytest.mark.parametrize(
    ("limits", "annotations", "expected"),
    [
        pytest.param({NPU: "2"}, {}, [], id="two-whole-npus"),
        pytest.param(
            {NPU: "3"}, {},
            ["container train asks 3 Ascend910B3 NPUs; the most a registered node has is 2 (node npu-0)"],
            id="count",
        ),
        pytest.param({NPU: "1", NPU_MEMORY: "16000"}, {}, [], id="template"),
        pytest.param({NPU: "1", NPU_MEMORY: "60000", NPU_CORE: "100"}, HAMI_CORE, [], id="hami-core-cores-are-100"),
        pytest.param(
            {NPU: "1", NPU_MEMORY: "70000"}, HAMI_CORE,
            ["container train asks 70000 MiB per NPU; the largest registered Ascend910B3 NPU has 65536 MiB "
             "(node npu-0)"],
            id="hami-core-memory",
        ),
    ],
)  # fmt: skip
def test_ascend_reads_its_json_per_chip(
    limits: dict[str, str], annotations: dict[str, str], expected: list[str]
) -> None:
    store = Store(fitting(ASCEND.devices))
    cards = [device("NPU", i, "npu-0", "Ascend910B3", 65536, cores=20) for i in range(2)]
    store.listed(None, [node_metadata("npu-0", cards, "hami.io/node-register-Ascend910B3")], "1")
    outcome = run(pod(container("train", limits=limits), annotations=annotations), ASCEND, inventory=Held(store))
    assert outcome.response["allowed"], outcome.response
    assert [w for w in outcome.response.get("warnings", []) if w.startswith("container train asks")] == expected


def test_an_amd_card_without_cores_takes_nothing() -> None:
    """AMD's Fit asks a share (at least one) of a card's cores: a card registering none holds no container."""
    store, amd = Store(fitting(SETTINGS.devices)), VENDORS["AMD"]
    cards = [device("AMD", i, "amd-0", "AMD-MI300X", 196592, cores=cores) for i, cores in enumerate((0, 0))]
    store.listed(None, [node_metadata("amd-0", cards, amd.annotation, amd.encode)], "1")
    assert warned({"amd.com/gpu": "1"}, store=store) == [
        "container train asks amd.com/gpu; no registered AMD GPU it allows has any cores"
    ]
    cards[1]["devcore"] = 100
    store.listed(None, [node_metadata("amd-0", cards, amd.annotation, amd.encode)], "2")
    assert warned({"amd.com/gpu": "1"}, store=store) == []
    assert warned({"amd.com/gpu": "2"}, store=store) == [
        "container train asks 2 AMD GPUs; the most a registered node has that fit it is 1 (node amd-0)"
    ]
