"""The tiers (tests/tiers.py): a module declares the highest tier its tests reach, checked against what they
use, and the guard fails a unit test that opens a socket or starts a process whatever its code catches."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed import ROOT
from tests.tiers import REACHES

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

HEAD = """
import os
import socket
import pytest
from testbed.servers import gunicorn
"""
UNIT_EXAMPLES = """
def test_pure():
    assert sorted([2, 1]) == [1, 2]


def test_reads_the_environment():
    assert isinstance(os.environ, os._Environ)


def test_hides_its_socket():
    try:
        getattr(__import__("so" + "cket"), "socket")().close()
    except BaseException:
        pass
"""
SERVER_EXAMPLES = """
pytestmark = pytest.mark.server


def test_names_a_socket():
    socket.socket().close()


def test_forks():
    assert callable(os.fork)


def test_uses_a_server_helper():
    assert callable(gunicorn)
"""
CLUSTER_EXAMPLES = """
pytestmark = pytest.mark.cluster


def test_on_a_cluster(bare_kube):
    pass


def test_builds_with_go(go_toolchain):
    pass
"""


def exists(name: str) -> bool:
    """A module REACHES names is found without importing it (an import may open a socket: urllib3's probes
    IPv6); a thing in one of ours (``module.Class``) is looked up in its imported module."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            continue
        if spec is None:
            continue
        if cut == len(parts):
            return True
        found: object = importlib.import_module(module)
        for attr in parts[cut:]:
            found = getattr(found, attr, None)
        return found is not None
    return False


@pytest.mark.parametrize("name", [name for names in REACHES.values() for name in names])
def test_every_name_that_sets_a_tier_exists(name: str) -> None:
    """A renamed helper would silently turn its tests into unit ones: the name must still resolve."""
    assert exists(name)


def run_marked(tmp_path: Path, marker: str, *args: str, **modules: str) -> subprocess.CompletedProcess[str]:
    """pytest on sample modules (name -> body, after HEAD's imports), selecting ``marker``."""
    chosen = modules or {"unit": UNIT_EXAMPLES, "server": SERVER_EXAMPLES, "cluster": CLUSTER_EXAMPLES}
    for name, body in chosen.items():
        (tmp_path / f"test_{name}_examples.py").write_text(textwrap.dedent(HEAD + body))
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-m", marker, *args, str(tmp_path)]
    command += ["--rootdir", str(ROOT), "-c", str(ROOT / "setup.cfg"), "--confcutdir", str(tmp_path)]
    command += ["-p", "tests.tiers", "-p", "tests.realkube.fixtures"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("marker", "selected"),
    [
        ("unit", ["test_pure", "test_reads_the_environment", "test_hides_its_socket"]),
        ("server", ["test_names_a_socket", "test_forks", "test_uses_a_server_helper"]),
        ("cluster", ["test_on_a_cluster", "test_builds_with_go"]),
    ],
)
def test_each_test_gets_the_tier_of_what_it_uses(tmp_path: Path, marker: str, selected: list[str]) -> None:
    done = run_marked(tmp_path, marker, "--collect-only", "-q")
    chosen = sorted(line.split("::")[1] for line in done.stdout.splitlines() if "::test_" in line)
    assert chosen == sorted(selected), done.stdout


def test_a_unit_test_that_opens_a_socket_fails_even_if_it_catches_everything(tmp_path: Path) -> None:
    done = run_marked(tmp_path, "unit")
    assert done.returncode == 1, done.stdout
    assert "PASSED test_unit_examples.py::test_pure" in done.stdout
    assert "ERROR test_unit_examples.py::test_hides_its_socket" in done.stdout
    assert "opened a socket or started a process (socket.__new__)" in done.stdout


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (
            UNIT_EXAMPLES + CLUSTER_EXAMPLES.replace("pytestmark = pytest.mark.cluster", ""),
            "declares unit, its tests reach cluster (test_on_a_cluster): put `pytestmark = pytest.mark.cluster` at",
        ),
        (
            "pytestmark = pytest.mark.server\n" + UNIT_EXAMPLES,
            "declares server, its tests reach unit: drop its pytestmark",
        ),
    ],
    ids=["undeclared", "declared-too-high"],
)
def test_a_module_declares_the_highest_tier_its_tests_reach(tmp_path: Path, body: str, says: str) -> None:
    """The declaration a reader sees is checked against what the tests use: a wrong one stops the run."""
    done = run_marked(tmp_path, "unit", "--collect-only", "-q", mixed=body)
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"test_mixed_examples.py: {says}" in done.stderr, done.stderr
