"""Part 1: the pure core, in process. Median and p99 microseconds per ``review()`` call, and per workload check
(``deploy/...``: a Deployment whose template is that Pod).

Each call is timed on its own (perf_counter_ns), so the p99 shows the garbage
collector and the machine's noise, not only the mean. The review is the whole
core: envelope and Pod validation, the policy, the patch, the answer.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from app.admission.ports import QuotaOff
from app.admission.review import answer, review
from app.admission.workloads import decide_workload_review
from app.settings import Settings
from bench import pods


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile of ``values`` (any order)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))]


def time_calls(call: Any, count: int) -> dict[str, float]:
    """Median and p99 µs of ``count`` timed calls, after a warm-up of a tenth as many."""
    for _ in range(max(1, count // 10)):
        call()
    samples = []
    for _ in range(count):
        started = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - started) / 1000)
    return {"median_us": statistics.median(samples), "p99_us": percentile(samples, 99), "calls": count}


def run(count: int) -> dict[str, dict[str, Any]]:
    """Every representative review, timed, quota off (part 4 measures what a namespace quota adds)."""
    settings = Settings.from_env({})
    quota = QuotaOff()
    out: dict[str, dict[str, Any]] = {}
    for name, document in pods.reviews().items():
        calls = max(3, count // 50) if name == "200-containers" else count
        out[name] = time_calls(lambda d=document: review(d, settings, quota), calls)
    for name, document in pods.workload_reviews().items():  # the workload check: /workloads' core, per call
        calls = max(3, count // 50) if name.endswith("200-containers") else count
        out[name] = time_calls(
            lambda d=document: answer(d, "b", decide_workload_review(d, settings, quota, "b")), calls
        )
    return out
