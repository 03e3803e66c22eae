"""Ours reviewing a Pod HAMi's webhook already mutated: what happens while both configurations are present
(docs/migration-from-hami.md). With HAMi's default device config the Pod ends as ours alone would leave it.

HAMi's output is written out from its behaviour (HAMi v2.10, chart defaults): ``schedulerName: hami-scheduler``;
for NVIDIA, a missing count set to ``defaultGPUNum`` (1) when memory or cores are asked for, and cores 100 in
``limits`` for a whole card (count without memory, percentage or cores); nothing in ``requests``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.settings import Settings
from testbed.pods import container, pod
from testbed.reviews import run


def hamis(obj: dict[str, Any], limits: dict[str, str]) -> dict[str, Any]:
    """``obj`` after HAMi's webhook, which added ``limits`` to its one container."""
    mutated = copy.deepcopy(obj)
    mutated["spec"]["schedulerName"] = "hami-scheduler"
    mutated["spec"]["containers"][0]["resources"]["limits"].update(limits)
    return mutated


@pytest.mark.parametrize(
    ("limits", "hami_adds"),
    [
        ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpucores": "100"}),
        ({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4000"}, {}),
        ({"nvidia.com/gpumem": "4000"}, {"nvidia.com/gpu": "1"}),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}, {"nvidia.com/gpucores": "100"}),
    ],
    ids=["whole-card", "memory", "memory-only", "percentage-100"],
)
def test_ours_after_hamis_ends_as_ours_alone(settings: Settings, limits: dict[str, str], hami_adds: dict) -> None:
    original = pod(container(limits=limits))
    alone = run(original, settings)
    after = run(hamis(original, hami_adds), settings)
    assert after.patched == alone.patched
    assert not [op for op in after.ops if op["path"] == "/spec/schedulerName"], "hami-scheduler is ours: kept"
