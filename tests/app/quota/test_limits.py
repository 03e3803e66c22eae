"""HAMi's fit check (used plus requested must not exceed the limit), and limits from every ResourceQuota: every key
form and several quota objects (docs/rules.md#d-namespace-quota)."""

from __future__ import annotations

from typing import Any

import pytest

from app.quota.core.limits import hard_limits, overflow, quota_factors, tightest

MEM, CORES, GPU = "nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpu"
FACTORS = {MEM: 1, CORES: 1, GPU: 1}


def decide(
    quotas: list[dict[str, Any]], used: dict[str, int], requested: dict[str, int], factors=FACTORS
) -> str | None:
    return overflow("ai", tightest(hard_limits(hard, factors) for hard in quotas), used, requested)


def over(name: str, used: int, requested: int, limit: int) -> str:
    return f"exceeding resource quota: namespace ai {name} used {used} + requested {requested} > limit {limit}"


HAMI = [{f"limits.{MEM}": "2000", f"limits.{CORES}": "400"}]
USED = {MEM: 1000, CORES: 200}

CASES = [
    # -- HAMi's Go-tested cases: used 1000/200, limit 2000/400 --
    pytest.param(HAMI, USED, {MEM: 500, CORES: 100}, FACTORS, "", id="fits"),
    pytest.param(HAMI, USED, {MEM: 1500}, FACTORS, over(MEM, 1000, 1500, 2000), id="memory-over"),
    pytest.param(HAMI, USED, {CORES: 300}, FACTORS, over(CORES, 200, 300, 400), id="cores-over"),
    pytest.param(HAMI, USED, {MEM: 1000}, {**FACTORS, MEM: 2}, "", id="factor-2-fits-limit-4000"),
    pytest.param(HAMI, USED, {MEM: 5000}, {**FACTORS, MEM: 2}, over(MEM, 1000, 5000, 4000), id="factor-2-over"),
    pytest.param(HAMI, USED, {CORES: 300}, {**FACTORS, MEM: 2}, over(CORES, 200, 300, 400), id="no-factor-on-cores"),
    pytest.param([{f"limits.{MEM}": "30000"}], {MEM: 10000}, {MEM: 20000}, FACTORS, "", id="equal-is-allowed"),
    pytest.param([{f"limits.{MEM}": "0"}], {}, {MEM: 1}, FACTORS, over(MEM, 0, 1, 0), id="limit-0-blocks"),
    pytest.param([{f"limits.{MEM}": "0"}], {}, {CORES: 50}, FACTORS, "", id="limit-0-only-blocks-its-resource"),
    pytest.param([{}], USED, {MEM: 10**9}, FACTORS, "", id="no-limit-never-blocks"),
    pytest.param([{"limits.cpu": "1", "pods": "2"}], {}, {MEM: 10**9}, FACTORS, "", id="other-keys-ignored"),
    # -- limits from every ResourceQuota: every key form, the count resource, several objects (the smallest wins) --
    pytest.param([{f"requests.{MEM}": "100"}], {}, {MEM: 101}, FACTORS, over(MEM, 0, 101, 100), id="requests-key"),
    pytest.param([{MEM: "100"}], {}, {MEM: 101}, FACTORS, over(MEM, 0, 101, 100), id="bare-key"),
    pytest.param([{GPU: "2"}], {GPU: 1}, {GPU: 2}, FACTORS, over(GPU, 1, 2, 2), id="device-count"),
    pytest.param([{GPU: "2"}], {GPU: 1}, {GPU: 1}, FACTORS, "", id="device-count-equal"),
    pytest.param(
        [{f"limits.{MEM}": "300", MEM: "200"}], {}, {MEM: 250}, FACTORS, over(MEM, 0, 250, 200), id="two-keys-smallest"
    ),
    pytest.param(
        [{f"limits.{MEM}": "200"}, {f"requests.{MEM}": "500", f"limits.{CORES}": "10"}],
        {},
        {MEM: 150, CORES: 20},
        FACTORS,
        over(CORES, 0, 20, 10),
        id="two-objects-both-enforced",
    ),
    pytest.param(
        [{f"limits.{MEM}": "500"}, {f"limits.{MEM}": "200"}],
        {MEM: 100},
        {MEM: 150},
        FACTORS,
        over(MEM, 100, 150, 200),
        id="two-objects-smallest-wins",
    ),
    pytest.param([{MEM: "1.5"}], {}, {MEM: 2}, FACTORS, over(MEM, 0, 2, 1), id="fractional-limit-rounds-down"),
    pytest.param([{MEM: "lots"}], {}, {MEM: 2}, FACTORS, "", id="unparsable-limit-skipped"),
    pytest.param(
        [{MEM: "100", CORES: "10"}], {}, {MEM: 200, CORES: 20}, FACTORS, over(MEM, 0, 200, 100), id="first-misfit-named"
    ),
]


@pytest.mark.parametrize(("quotas", "used", "requested", "factors", "denial"), CASES)
def test_fit(quotas, used, requested, factors, denial) -> None:
    assert decide(quotas, used, requested, factors) == denial


def test_factors_come_from_the_vendors(configured) -> None:
    factors = quota_factors(configured({"nvidia": {"memoryFactor": 4}}).devices)
    assert (factors[MEM], factors[CORES], factors[GPU]) == (4, 1, 1)
    assert factors["cambricon.com/mlu.smlu.vmemory"] == 256
    assert hard_limits({f"limits.{MEM}": "10", "cambricon.com/mlu.smlu.vmemory": "60"}, factors) == {
        MEM: 40,
        "cambricon.com/mlu.smlu.vmemory": 60 * 256,
    }
