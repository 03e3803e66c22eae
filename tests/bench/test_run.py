"""Smoke run of ``python -m bench``: every part, tiny counts, no timing assertions, so the benchmark never rots."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import ROOT

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


def test_smoke_run_prints_every_part_and_writes_results(tmp_path: Path, go_toolchain: str) -> None:
    """Parts 4 and 5 start control planes and HAMi's webhook, built with Go: without it the run skips."""
    if shutil.which("wrk") is None and os.geteuid() != 0 and os.environ.get("CI") != "true":
        pytest.skip("wrk is not installed (sudo scripts/install-wrk.sh)")
    command = [sys.executable, "-m", "bench", "--smoke", "--require-wire", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=420, check=False)
    assert done.returncode == 0, done.stderr
    for heading in ("1. in process", "2. over TLS", "3. RSS per worker", "4. quota path", "5. through kube", "targets"):
        assert heading in done.stdout

    results = json.loads((tmp_path / "results.json").read_text())
    timed = results["inprocess"]
    pods = {"cpu-only", "single-gpu", "multi-vendor", "200-containers", "denied"}
    assert set(timed) == pods | {"deploy/single-gpu", "deploy/denied", "deploy/200-containers"}
    assert all(row["median_us"] > 0 and row["p99_us"] >= row["median_us"] for row in timed.values())

    wire = results["wire"]
    pair = wire["saturation"]["pairs"][0]
    for side in ("product", "floor"):
        assert pair[side]["requests"] > 0 and pair[side]["errors"] == 0
        assert sum(pair[side]["per_worker_requests"]) > 0
        assert wire["memory"][side]["requests"] > 0
    assert [row["fraction"] for row in wire["rates"]] == [0.25, 0.5, 0.75]
    peer = "hami_cpu_ratio" in wire["saturation"]  # HAMi's webhook, when scripts/hami-reference.sh can build it
    api = results["apiserver"]
    assert api["exit_code"] == 0, api["output"]
    if os.environ.get("CI") == "true":
        assert peer and "figures" in api, "HAMi's webhook must build on CI (scripts/hami-reference.sh)"
    if peer:
        assert pair["hami"]["requests"] > 0 and pair["hami"]["errors"] == 0
    if "figures" in api:  # every create was checked (201, the scheduler name each case must give)
        assert api["figures"]["problems"] == []
        assert all(api["figures"]["sequential"][case]["p50"] > 0 for case in ("none", "hami", "product"))
    spread = int(results["machine"]["workers"]) > 1  # the busiest worker's share: only with more than one
    assert len(results["targets"]) == 5 + spread + peer + 2 * ("figures" in api)
    assert (tmp_path / "latency.png").stat().st_size > 0
    assert results["quota"]["exit_code"] == 0, results["quota"]["output"]
