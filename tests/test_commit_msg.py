"""The commit-msg hook (scripts/commit_msg.py) and its installer (scripts/install-hooks.sh): the history's
rules, a subject of at most 72 characters naming its area and a blank line before the body."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from scripts.commit_msg import problems
from testbed import ROOT

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

LONG = "quota: " + "x" * 66

CASES = {
    "area-and-change": ("quota: refuse a full ledger at once", []),
    "a-path-as-area": ("tests/realkube/test_quota.py: wait for the lease", []),
    "several-areas": ("docs, scripts: name the tiers", []),
    "72-characters": ("quota: " + "x" * 65, []),
    "body-after-a-blank-line": ("worker: close first\n\nThe reason.\nFigures: 3 ms.", []),
    "comments-and-scissors-ignored": (
        "# Please enter the commit message\nlogs: one line\n# a comment\n"
        "# ------------------------ >8 ------------------------\nnot: part\nof it",
        [],
    ),
    "merge": ("Merge branch 'q32' into main, with far more than seventy-two characters in it, as git writes", []),
    "fixup": ("fixup! quota: refuse a full ledger at once", []),
    "73-characters": (LONG, ["the subject has 73 characters, at most 72"]),
    "no-area": ("Refuse a full ledger at once", ["the subject names no area"]),
    "area-without-change": ("quota:", ["the subject names no area"]),
    "body-without-blank-line": ("quota: refuse\nbecause", ["a blank line must separate the subject from the body"]),
}


@pytest.mark.parametrize(("message", "expected"), CASES.values(), ids=CASES.keys())
def test_messages(message: str, expected: list[str]) -> None:
    found = problems(message)
    assert len(found) == len(expected)
    for problem, start in zip(found, expected, strict=True):
        assert problem.startswith(start)


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "HOME": str(repo.parent), "PATH": PATH}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=False)


PATH = "/usr/local/bin:/usr/bin:/bin"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git checkout holding the two scripts, as a contributor's clone does."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "clone"
    (repo / "scripts").mkdir(parents=True)
    for name in ("commit_msg.py", "install-hooks.sh"):
        shutil.copy2(ROOT / "scripts" / name, repo / "scripts" / name)
    assert git(repo, "init", "-q").returncode == 0
    return repo


def install(repo: Path, **env: str) -> subprocess.CompletedProcess[str]:
    command = ["bash", str(repo / "scripts" / "install-hooks.sh")]
    return subprocess.run(command, env={"PATH": PATH, **env}, capture_output=True, text=True, check=False)


def test_the_installed_hook_refuses_a_long_subject_and_takes_a_good_one(checkout: Path) -> None:
    assert install(checkout).returncode == 0
    refused = git(checkout, "commit", "-q", "--allow-empty", "-m", LONG)
    assert refused.returncode != 0 and "the subject has 73 characters" in refused.stderr
    assert git(checkout, "commit", "-q", "--allow-empty", "-m", "scripts: install the hook").returncode == 0
    assert git(checkout, "log", "--format=%s").stdout == "scripts: install the hook\n"
    assert install(checkout).returncode == 0, "installing again replaces its own hook"


def test_nothing_is_installed_on_ci_nor_over_a_hook_of_ones_own(checkout: Path) -> None:
    hook = checkout / ".git" / "hooks" / "commit-msg"
    assert install(checkout, CI="true").returncode == 0 and not hook.exists()
    hook.write_text("#!/bin/sh\nexit 0\n")
    done = install(checkout)
    assert done.returncode == 0 and "is your own, left as it is" in done.stderr
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"


def test_outside_a_git_checkout_nothing_happens(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "install-hooks.sh", tmp_path / "scripts")
    env = {"GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}
    done = install(tmp_path, **env)
    assert done.returncode == 0 and not (tmp_path / ".git").exists()
