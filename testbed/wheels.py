"""Dependency wheels for the tests that install the package into a clean virtualenv (tests/manifests/test_image.py at
constraints.txt, tests/test_dependency_bounds.py at the declared lower bounds), built once per set of pins and kept
in the test-dependency cache beside the Kubernetes binaries (scripts/kube-binaries.sh's ``HAMI_KUBE_CACHE``):
resolving, downloading and building them was most of those tests' time, and they change only with the pins."""

from __future__ import annotations

import configparser
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from testbed import ROOT


def cache_root() -> Path:
    """Where scripts/kube-binaries.sh and scripts/hami-reference.sh keep what they build."""
    explicit = os.environ.get("HAMI_KUBE_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hami-webhook"


def wheelhouse(pip: list[str], source: Path, constraints: str, extras: str = "") -> Path:
    """The wheels of every dependency of the project in ``source`` (with ``extras``, e.g. ``"[review]"``) under
    ``constraints`` (a constraints file's text), but not the project's own: built with ``pip wheel`` on first use,
    renamed into place whole, and found again by the pins, the project's declared requirements and the Python
    version (a wheel may be built for one)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    declared = [config["options"]["install_requires"], *config["options.extras_require"].values()]
    key = hashlib.sha256("\n".join([str(sys.version_info[:2]), extras, *declared, constraints]).encode())
    wheels = cache_root() / "wheels" / key.hexdigest()[:16]
    if wheels.is_dir():
        return wheels
    wheels.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=wheels.parent, prefix=".partial-") as partial:
        pins = Path(partial) / "constraints.txt"
        pins.write_text(constraints)
        built = Path(partial) / "wheels"
        command = [*pip, "wheel", "--quiet", "--constraint", str(pins), "--wheel-dir", str(built), f".{extras}"]
        done = subprocess.run(command, cwd=source, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        for own in built.glob("hami_webhook-*.whl"):
            own.unlink()
        try:
            built.rename(wheels)
        except OSError:  # another run renamed the same wheels into place first
            if not wheels.is_dir():
                raise
    return wheels
