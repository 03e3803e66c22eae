"""Smoke run of bench/inventory.py: every part at a few nodes, no timing assertions, so the benchmark never rots."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from testbed import ROOT

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it): it starts a process


def test_smoke_run_prints_every_part() -> None:
    command = [sys.executable, "bench/inventory.py", "--nodes", "30", "--rounds", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(" at ")[0] for line in lines] == [
        "start-up",
        "event",
        "event",
        "review of a device Pod",
        "review of a Pod without a device",
    ], lines
