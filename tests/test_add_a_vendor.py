"""docs/development.md's "add a vendor" is the whole task: a fake vendor added to a copy of the tree exactly as that
list says, then `hami-webhook generate` run there, makes the webhook take its Pods, and changes the files listed
and no others. The list is read from the page, so the page and this test cannot drift apart."""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import ROOT

pytestmark = pytest.mark.server

COPIED = ("app", "manifests", "docs", "tests/app/admission/devices")
"""What the task reads and writes; the copy is compared with the tree file by file."""
RESOURCE = "example.com/fake-gpu"
NAMING_THE_RESOURCE = (
    "manifests/base/mutatingwebhookconfiguration.yaml",
    "manifests/base/validatingwebhookconfiguration.yaml",
    "manifests/base/policies/routed.yaml",
    "manifests/components/floor/floor.yaml",
)
"""The generated files that list every resource name, so must name the new one."""
VENDOR_MODULE = '''"""Fake accelerators (backend ``Fake``, device-config section ``fake``): a whole-card count."""

from __future__ import annotations

from app.admission.devices.base import ConfigSection, CountDevice


def build(root: ConfigSection) -> tuple[CountDevice, ...]:
    """The Fake backend: found by its count in limits, never mutated."""
    return (CountDevice("Fake", root.section("fake").str("resourceCountName")),)
'''
POD = f"""apiVersion: v1
kind: Pod
metadata: {{name: fake, namespace: default}}
spec:
  containers:
  - name: main
    image: busybox
    resources: {{limits: {{{RESOURCE}: "1"}}}}
"""


def listed() -> tuple[set[str], set[str]]:
    """The files the page says a vendor touches: always, and when a condition holds (its bullets' "if", and the
    files the command rewrites), with ``<vendor>`` as ``fake``."""
    page = (ROOT / "docs" / "development.md").read_text()
    section = page.split("**A vendor.**", 1)[1].split("\n\n**", 1)[0]
    bullets, command = section.split("\nThen run ", 1)
    always, maybe = set(), set()
    for bullet in re.findall(r"^- `([^`]+)`(, if )?", bullets, re.MULTILINE):
        (maybe if bullet[1] else always).add(bullet[0].replace("<vendor>", "fake"))
    maybe |= set(re.findall(r"`((?:manifests|docs)/[^`]+)`", command))
    return always, maybe


def add_fake_vendor(tree: Path) -> None:
    """Each step of the list, by hand, as a newcomer would."""
    devices = tree / "app/admission/devices"
    (devices / "fake.py").write_text(VENDOR_MODULE)
    registry = devices / "registry.py"
    text = registry.read_text().replace("    enflame,\n", "    enflame,\n    fake,\n")
    last = "    (biren.build, None),\n"
    registry.write_text(text.replace(last, last + "    (fake.build, None),\n"))
    with open(tree / "manifests/base/device-config.yaml", "a") as config:
        config.write(f"fake:\n  resourceCountName: {RESOURCE}\n")
    (tree / "tests/app/admission/devices/test_fake.py").write_text(
        '"""The Fake vendor\'s rules, through the public review path."""\n'
    )
    rules = tree / "docs/rules.md"
    rules.write_text(
        rules.read_text().replace(
            "### Vendor rules\n\n", f"### Vendor rules\n\nFake: a Pod asking for `{RESOURCE}` goes to HAMi.\n\n"
        )
    )
    development = tree / "docs/development.md"
    development.write_text(development.read_text().replace("vastai.py, biren.py", "vastai.py, biren.py, fake.py"))


def changed(tree: Path) -> set[str]:
    """The files of the copy that differ from the tree's, or that the tree does not have; a link by its target."""
    found = set()
    for part in COPIED:
        for path in (tree / part).rglob("*"):
            name = path.relative_to(tree).as_posix()
            if "__pycache__" in name or not path.is_file():
                continue
            if path.is_symlink():
                if not (ROOT / name).is_symlink() or os.readlink(path) != os.readlink(ROOT / name):
                    found.add(name)
            elif not (ROOT / name).is_file() or not filecmp.cmp(path, ROOT / name, shallow=False):
                found.add(name)
    return found


def hami_webhook(tree: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The copy's own command: its package first on the path, no HAMI_* setting from this environment."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("HAMI_")}
    env["PYTHONPATH"] = str(tree)
    command = [sys.executable, "-m", "app", *args]
    return subprocess.run(command, cwd=tree, env=env, input=stdin, capture_output=True, text=True, timeout=60)


def test_adding_a_vendor_touches_the_listed_files_and_the_webhook_takes_its_pods(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    ignored = shutil.ignore_patterns("__pycache__")
    for part in COPIED:
        shutil.copytree(ROOT / part, tree / part, symlinks=True, ignore=ignored)
    add_fake_vendor(tree)

    stale = hami_webhook(tree, "generate", "--check")
    assert stale.returncode == 1, stale.stderr
    assert f"stale {NAMING_THE_RESOURCE[0]}" in stale.stderr
    wrote = hami_webhook(tree, "generate")
    assert wrote.returncode == 0, wrote.stderr
    assert hami_webhook(tree, "generate", "--check").returncode == 0

    for name in NAMING_THE_RESOURCE:
        assert RESOURCE in (tree / name).read_text(), f"{name} does not name {RESOURCE}"
    always, maybe = listed()
    touched = changed(tree)
    assert always <= touched, f"listed yet untouched: {sorted(always - touched)}"
    assert touched <= always | maybe, f"touched yet not in docs/development.md: {sorted(touched - always - maybe)}"

    review = hami_webhook(tree, "review", "-f", "-", stdin=POD)
    assert review.returncode == 0, review.stderr
    assert "schedulerName: hami-scheduler" in review.stdout, review.stderr
