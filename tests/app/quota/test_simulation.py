"""The quota protocol under thousands of seeded schedules (tests/app/quota/simulation.py): workers of several
replicas running the real LedgerQuota and decision against a model of the API server, with watch delays and
410s, lost compare-and-swaps, lost answers, SIGKILLs and Pods that never land. After every step: never more
admitted than the limit, no entry holding room past its TTL, every refusal with its reason; after the burst and
a TTL: all the room Pods do not hold can be admitted again, and no more.

Replay one schedule: SIM_SEED=<seed> pytest tests/app/quota/test_simulation.py. More: SIM_SCHEDULES=<n>."""

from __future__ import annotations

import os

import pytest

from tests.app.quota.simulation import Simulation

SCHEDULES = int(os.environ.get("SIM_SCHEDULES", "2000"))
REPLAY = os.environ.get("SIM_SEED")


def shape(seed: int) -> dict[str, int]:
    """Each seed's cluster: 2-4 workers, room for 1-12 Pods, 5-24 admissions, up to 2 kills."""
    return {"workers": 2 + seed % 3, "room": 1 + seed % 12, "admissions": 5 + seed % 20, "kills": seed % 3}


@pytest.mark.parametrize("first", [0] if REPLAY else range(0, SCHEDULES, SCHEDULES // 3 or 1))
def test_no_schedule_breaks_an_invariant(first: int) -> None:
    seeds = [int(REPLAY)] if REPLAY else range(first, min(first + (SCHEDULES // 3 or 1), SCHEDULES))
    admitted = denied = 0
    for seed in seeds:
        outcome = Simulation(seed, **shape(seed)).run()  # raises with the seed and the last events
        admitted, denied = admitted + outcome.admitted, denied + outcome.denied
    assert admitted and denied  # the schedules reached both sides of the limit
