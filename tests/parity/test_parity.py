"""HAMi's own webhook and this one, asked the same reviews: every difference is a documented deviation.

Thousands of generated Pods per run over every chart set-up (a fixed seed, and a fresh one printed on failure,
`PARITY_SEED` to replay it), plus every Pod and template of HAMi's examples. The deviations accepted are the
table in docs/rules.md#parity-with-hamis-code; a difference none of them explains fails with a minimal Pod
(hypothesis shrinks it) and both answers.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.parity import deviations
from tests.parity.documented import documented
from tests.parity.run import Checker, example_reviews, failure, sweep_reviews

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

PODS = int(os.environ.get("PARITY_PODS", "400"))
"""Generated Pods per set-up and run: five set-ups make 2,000, half of them from a fresh seed, so successive runs
cover new Pods (PARITY_PODS=5000 for a long run)."""
FIXED_SEED = 20261126
FRESH_SEED = int(os.environ.get("PARITY_SEED") or random.SystemRandom().getrandbits(32))


@pytest.mark.parametrize(
    ("which", "pods", "value"),
    [("fixed", PODS // 2, FIXED_SEED), ("fresh", PODS - PODS // 2, FRESH_SEED)],
    ids=["fixed-seed", "fresh-seed"],
)
def test_generated_pods(checker: Checker, which: str, pods: int, value: int) -> None:
    label = f"{which} seed {value}; replay with PARITY_SEED={value}"
    counting = [True]

    @seed(value)
    @settings(
        max_examples=pods,
        database=None,
        deadline=None,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def one(data: st.DataObject) -> None:
        review = data.draw(checker.generate)
        hami, ours, outcome = checker.check(review, count=counting[0])
        if not outcome.explained:
            counting[0] = False  # what hypothesis tries while shrinking is not counted
            pytest.fail(failure(checker.pair.setup.name, review, hami, ours, outcome, label), pytrace=False)

    one()


def test_every_resource_against_edge_amounts(checker: Checker) -> None:
    _all_explained(checker, sweep_reviews(checker.names))


def test_hami_examples(checker: Checker, hami_examples) -> None:
    _all_explained(checker, example_reviews(hami_examples))


def _all_explained(checker: Checker, reviews: Iterable[tuple[str, dict]]) -> None:
    failures = []
    for name, review in reviews:
        hami, ours, outcome = checker.check(review)
        if not outcome.explained:
            failures.append(f"{name}: " + failure(checker.pair.setup.name, review, hami, ours, outcome, "example"))
    assert not failures, "\n".join(failures)


def test_every_deviation_is_documented_and_every_documented_one_exists() -> None:
    assert set(deviations.DEVIATIONS) == set(documented())
