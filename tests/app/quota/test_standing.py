"""Where a namespace stands, from the tables the feed keeps (pure): what is used, what the ledger holds beyond what
its Pods were seen to take, which ResourceQuota sets each limit, which hold is the oldest."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from app.admission.annotations import QUOTA_RESERVATION_ANNOTATION
from app.quota.core.decision import denial, free
from app.quota.core.demand import pod_amounts
from app.quota.core.encoding import Ledger
from app.quota.core.entries import Ahead, Reserved
from app.quota.core.limits import set_by
from app.quota.core.scene import Scene
from app.quota.core.seal import seal
from app.quota.core.standing import Expiry, Standing, standing
from app.quota.feed.tables import PodTable, QuotaTable, view
from app.settings import Settings
from testbed.pods import container, pod

MEM, GPU = "nvidia.com/gpumem", "nvidia.com/gpu"
NS, NOW, TTL = "ai", 5_000.0, 60.0  # NOW: the reader's monotonic clock
KEY = "the namespace's ledger key"
DEVICES = Settings.from_env({}).devices


def stored(uid: str, devices: int, memory: int, reservation: str = "") -> dict[str, Any]:
    obj = pod(container(limits={GPU: str(devices), MEM: str(memory)}), name=uid, namespace=NS)
    obj["metadata"] |= {"uid": uid, "resourceVersion": "10"}
    if reservation:  # sealed as the webhook seals it (app/quota/core/seal.py)
        sealed = seal(KEY, NS, reservation, uid, "", pod_amounts(obj, DEVICES)).text()
        obj["metadata"]["annotations"] = {QUOTA_RESERVATION_ANNOTATION: sealed}
    return obj


def rq(name: str, hard: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS}, "spec": {"hard": hard}}


def stand(
    quotas: QuotaTable, pods: PodTable, ledger: Ledger | None, first_seen: dict[str, float], ns: str = NS
) -> Standing:
    """Where ``ns`` stands in the View a decision reads of these tables, its entries first seen at ``first_seen``."""
    seen = replace(view(ns, quotas, pods, ledger), first_seen=first_seen)
    return standing(seen, quotas.objects(ns), pods.count(ns), now=NOW, ttl=TTL)


@pytest.fixture
def tables() -> tuple[QuotaTable, PodTable]:
    quotas, pods = QuotaTable(DEVICES), PodTable(DEVICES, forget_after=60)
    pods.key(NS, KEY)
    quotas.replace([rq("b-gpu", {f"limits.{MEM}": "10000", GPU: "4"}), rq("a-small", {MEM: "8000"})])
    return quotas, pods


def test_used_held_and_the_quota_that_sets_each_limit(tables: tuple[QuotaTable, PodTable]) -> None:
    quotas, pods = tables
    # r1 is half seen (one of its two Pods), r2 not at all and open (a grant), r3 expired (first seen more than
    # its ttl ago), r4 fully seen; r5 was written by the previous version (no ttl: the reader's TTL + a window).
    # The writers' ``expires`` are nonsense on purpose: no reader judges by another's wall clock.
    pods.replace(NS, [stored("p1", 2, 1000, "r1"), stored("p2", 1, 500), stored("p4", 1, 700, "r4")])
    entries = {
        "r1": Reserved(0, {MEM: 3000, GPU: 3}, 60),
        "r2": Ahead(0, {MEM: 1200, GPU: 1}, 15),
        "r3": Reserved(1e12, {MEM: 5000, GPU: 1}, 60),
        "r4": Reserved(0, {MEM: 700, GPU: 1}, 60),
    }
    first_seen = {"r1": NOW - 30, "r2": NOW - 5, "r3": NOW - 61, "r4": NOW - 55}
    found = stand(quotas, pods, Ledger(NS, entries, None, 5), first_seen)
    by = {f.resource: f for f in found.figures}
    assert (by[MEM].limit, by[MEM].quota, by[GPU].limit, by[GPU].quota) == (8000, "a-small", 4, "b-gpu")
    assert (by[MEM].used, by[GPU].used) == (2000 + 500 + 700, 2 + 1 + 1)
    assert (by[MEM].held, by[GPU].held) == ((3000 - 2000) + 1200, (3 - 2) + 1)
    assert by[MEM].free == 8000 - 3200 - 2200 and by[GPU].free == 0  # never below 0 (4 - 4 - 2)
    assert found.pods == 3
    assert found.oldest == Expiry("r2", 10)  # r4 is used up, r3 expired; r2 has 10 of its 15 s left, r1 30 of 60


def test_no_ledger_nothing_held_and_no_quota_no_figure(tables: tuple[QuotaTable, PodTable]) -> None:
    quotas, pods = tables
    found = stand(quotas, pods, None, {})
    assert [(f.resource, f.used, f.held) for f in found.figures] == [(GPU, 0, 0), (MEM, 0, 0)]
    assert found.oldest is None and found.pods == 0
    assert stand(quotas, pods, None, {}, "elsewhere").figures == ()


def test_equal_limits_name_the_first_quota_by_name() -> None:
    assert set_by({"b": {MEM: 5}, "a": {MEM: 5}, "c": {MEM: 9, GPU: 1}}) == {MEM: (5, "a"), GPU: (1, "c")}


def test_free_is_one_figure_the_limit_less_what_is_taken_at_most(tables: tuple[QuotaTable, PodTable]) -> None:
    """The workload warning's FREE (``free``, what the evaluator's ``room`` returns) is the command's and the
    gauges': another worker's grant seen a moment ago counts as taken, though a denial does not count it yet."""
    quotas, pods = tables
    entries = {"g": Ahead(0, {MEM: 3000, GPU: 1}, 15)}
    first_seen = {"g": NOW}
    shown = stand(quotas, pods, Ledger(NS, entries, None, 5), first_seen)
    limits = {name: limit for name, (limit, _) in set_by(quotas.objects(NS)).items()}
    scene = Scene(NS, limits, entries, 0, pods.used(NS), {}, 0.0, NOW, TTL, first_seen=first_seen)
    assert free(scene) == {f.resource: f.free for f in shown.figures} == {MEM: 8000 - 3000, GPU: 4 - 1}
    assert denial(scene, {MEM: 8000}) == ""  # the other bound: all 8000 may come free when the grant closes
