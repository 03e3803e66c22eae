"""The release workflow: actionlint-clean, off until a maintainer enables it, multi-arch, and its tag check works.

actionlint is built from source with Go at a pinned version (no registry ships its binary as a wheel that
installs without downloading): the first run takes about a minute and is cached in
``$HAMI_TOOLS_CACHE`` (default ``~/.cache/hami-webhook``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import ROOT, version

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
ACTIONLINT = "github.com/rhysd/actionlint/cmd/actionlint@v1.7.12"


def actionlint() -> str:
    """The pinned actionlint: from the cache, else ``go install``-ed into it; skips without Go unless CI."""
    version = ACTIONLINT.rpartition("@")[2]
    cache = Path(os.environ.get("HAMI_TOOLS_CACHE") or Path.home() / ".cache" / "hami-webhook")
    binary = cache / f"actionlint-{version}" / "actionlint"
    if binary.exists():
        return str(binary)
    go = shutil.which("go")
    if go is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Go is needed to build actionlint (go install) and is not on PATH")
        pytest.skip("no Go toolchain to build actionlint")
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=binary.parent) as scratch:
        proc = subprocess.run(
            [go, "install", ACTIONLINT],
            env={**os.environ, "GOBIN": scratch, "GOFLAGS": "-mod=mod"},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, f"go install {ACTIONLINT} failed:\n{proc.stderr}"
        os.replace(Path(scratch) / "actionlint", binary)  # atomic: a concurrent run sees all of it or none
    return str(binary)


def workflow() -> dict[Any, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def test_actionlint_is_clean() -> None:
    proc = subprocess.run(
        [actionlint(), "-no-color", str(WORKFLOW)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")


def test_runs_only_on_version_tags_once_enabled_with_least_privilege() -> None:
    flow = workflow()
    assert flow[True] == {"push": {"tags": ["v*"]}}, "YAML 1.1 reads the key `on` as true"
    assert flow["permissions"] == {"contents": "read"}
    (job,) = flow["jobs"].values()
    assert job["if"] == "vars.RELEASE_IMAGE == 'true'", "off until a maintainer sets the repository variable"
    assert job["permissions"] == {"contents": "read", "packages": "write"}
    assert job["env"]["REGISTRY"] == "${{ vars.IMAGE_REGISTRY || 'ghcr.io' }}"
    build = next(step for step in job["steps"] if str(step.get("uses", "")).startswith("docker/build-push-action"))
    assert build["with"]["platforms"] == "linux/amd64,linux/arm64" and build["with"]["push"] is True


VERSION = version()


@pytest.mark.parametrize(
    ("tag", "ok"), [(f"v{VERSION}", True), (f"v{VERSION}-rc1", False), (VERSION, False)], ids=["v", "other", "bare"]
)
def test_the_tag_must_name_the_version_in_setup_cfg(tag: str, ok: bool) -> None:
    """The step's own script, run as the runner runs it (bash -e), on this repository."""
    (job,) = workflow()["jobs"].values()
    script = next(step["run"] for step in job["steps"] if "setup.cfg" in step.get("name", ""))
    proc = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=ROOT,
        env={**os.environ, "GITHUB_REF_NAME": tag},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (proc.returncode == 0) is ok, proc.stdout + proc.stderr
    if not ok:
        assert f"::error::tag {tag} does not match setup.cfg version {VERSION}" in proc.stdout
