"""A Pod's demand: HAMi's per-container arithmetic, summed as Kubernetes sums a Pod's effective request (native
sidecars included), computed on the Pod as admitted and as the feed sees it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pytest

from app.admission.devices.base import CountDevice, QuotaNames, QuotaRequest
from app.admission.edit import ContainerEdit
from app.quota.core.demand import pod_amounts
from app.quota.core.limits import hard_limits, overflow, quota_factors
from testbed.pods import container, pod
from testbed.reviews import run

MEM, CORES, GPU = "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpu"
MLU, MLU_MEM, MLU_CORES = "cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"


def gpu(name: str, memory: int, count: int = 1) -> dict[str, Any]:
    return container(name, limits={GPU: str(count), MEM: str(memory)})


def sidecar(name: str, memory: int, count: int = 1) -> dict[str, Any]:
    """A native sidecar: an init container that keeps running (``restartPolicy: Always``)."""
    return gpu(name, memory, count) | {"restartPolicy": "Always"}


CASES = [
    # Go-tested init peaks: init containers run one after another
    pytest.param(pod(gpu("app", 500), init=[gpu("i1", 800), gpu("i2", 800)]), {MEM: 800, GPU: 1}, id="init-800+800"),
    pytest.param(pod(gpu("app", 100), init=[gpu("i1", 1500)]), {MEM: 1500, GPU: 1}, id="init-1500-app-100"),
    pytest.param(pod(gpu("app", 10000), init=[gpu("i", 20000)]), {MEM: 20000, GPU: 1}, id="init-20000-app-10000"),
    pytest.param(pod(gpu("a", 500), gpu("b", 700)), {MEM: 1200, GPU: 2}, id="app-containers-sum"),
    pytest.param(pod(gpu("a", 1000, count=3)), {MEM: 3000, GPU: 3}, id="times-device-count"),
    pytest.param(pod(container(limits={GPU: "2"})), {CORES: 200, GPU: 2}, id="whole-card-100-cores-each"),
    pytest.param(pod(container(limits={MLU: "2", MLU_CORES: "40"})), {MLU_CORES: 80, MLU: 2}, id="2-mlus-x-40-cores"),
    pytest.param(
        pod(container(limits={MLU: "1", MLU_MEM: "4"})), {MLU_MEM: 4 * 256, MLU_CORES: 100, MLU: 1}, id="mlu-factor"
    ),
    pytest.param(pod(container(limits={"cpu": "1"})), {}, id="no-device"),
    # Native sidecars run beside the app containers: they add to them. Each ordinary init container runs
    # beside the sidecars started before it. The larger of that init-phase peak and the running sum wins.
    pytest.param(pod(gpu("app", 500), init=[sidecar("s", 1000)]), {MEM: 1500, GPU: 2}, id="sidecar-adds-to-app"),
    pytest.param(
        pod(gpu("app", 500), init=[sidecar("s1", 1000), sidecar("s2", 2000)]), {MEM: 3500, GPU: 3}, id="two-sidecars"
    ),
    pytest.param(
        pod(gpu("app", 500), init=[sidecar("s", 1000), gpu("i", 3000)]),
        {MEM: 4000, GPU: 2},
        id="init-after-sidecar-runs-beside-it",
    ),
    pytest.param(
        pod(gpu("app", 500), init=[gpu("i", 3000), sidecar("s", 1000)]),
        {MEM: 3000, GPU: 2},
        id="init-before-sidecar-runs-alone",
    ),
    pytest.param(
        pod(gpu("app", 500, count=2), init=[gpu("i", 100, count=4), sidecar("s", 200)]),
        {MEM: 1200, GPU: 4},
        id="peak-per-resource",  # the count peaks in the init phase, the memory while running
    ),
    pytest.param(
        pod(container(limits={"cpu": "1"}), init=[sidecar("s", 1000)]), {MEM: 1000, GPU: 1}, id="sidecar-only-gpu"
    ),
    pytest.param(
        pod(gpu("app", 500), init=[gpu("i", 1000) | {"restartPolicy": "OnFailure"}]),
        {MEM: 1000, GPU: 1},
        id="other-restart-policy-is-not-a-sidecar",
    ),
]


@pytest.mark.parametrize(("obj", "expected"), CASES)
def test_demand_of_the_admitted_pod(obj: dict[str, Any], expected: dict[str, int], settings) -> None:
    """The feed's arithmetic on the Pod as persisted (after our patch) is the admission arithmetic."""
    patched = run(obj, settings).patched
    assert pod_amounts(patched, settings.devices) == expected


def test_memory_factor(configured) -> None:
    settings = configured({"nvidia": {"memoryFactor": 2}})
    assert pod_amounts(run(pod(gpu("a", 1000)), settings).patched, settings.devices)[MEM] == 2000


@dataclass(frozen=True)
class LinkNames(QuotaNames):
    """A vendor's quota with a fourth resource, its links, beside memory, cores and count."""

    links: str = ""

    @property
    def resource_names(self) -> frozenset[str]:
        return super().resource_names | {self.links}

    @cached_property
    def factors(self) -> dict[str, int]:
        return super().factors | {self.links: 1}


@dataclass(frozen=True)
class LinkRequest(QuotaRequest):
    links: int = 0

    def amounts(self, names: QuotaNames) -> dict[str, int]:
        assert isinstance(names, LinkNames)
        return super().amounts(names) | {names.links: self.links * self.nums}


@dataclass(frozen=True)
class Linked(CountDevice):
    """A vendor whose quota counts its devices and the links each takes: the whole change is in its module."""

    links_name: str = "example.com/links"

    @cached_property
    def quota_names(self) -> QuotaNames:
        return LinkNames(count=self.count_name, links=self.links_name)

    def quota_request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        count, links = ctr.limit(self.count_name), ctr.limit(self.links_name)
        return None if count is None else LinkRequest(nums=count.value, links=links.value if links else 0)


def test_a_fourth_resource_is_counted_from_the_vendors_map_alone() -> None:
    """Demand, limits and the fit check read a vendor's named amounts, not three fixed fields: a vendor that counts
    one more resource is quota'd on it with no change outside its module."""
    device, links = Linked("LINK", "example.com/dev"), "example.com/links"
    asked = pod_amounts(pod(container(limits={"example.com/dev": "2", links: "3"})), [device])
    assert asked == {"example.com/dev": 2, links: 6}
    limits = hard_limits({f"limits.{links}": "5"}, quota_factors([device]))
    assert limits == {links: 5}
    assert overflow("ai", limits, {}, asked) == (
        "exceeding resource quota: namespace ai example.com/links used 0 + requested 6 > limit 5"
    )
