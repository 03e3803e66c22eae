"""``scripts/run-local.sh`` as a newcomer runs it: a taken port is said before any banner, and the patch the
printed curl gets back can be read with the decoder the script and the README print."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.ports import free_port, taken_port
from testbed.servers import Server, stop, wait_ready
from testbed.tls import client_context

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

SCRIPT = ROOT / "scripts" / "run-local.sh"
DECODER = re.compile(r"^\s*(\| python3 -c .*)$", re.M)


@pytest.fixture(autouse=True)
def installed() -> None:
    """The script installs into the repository's .venv first; without one it would download, so only CI waits."""
    if not (ROOT / ".venv" / "bin" / "hami-webhook").exists() and os.environ.get("CI") != "true":
        pytest.skip("no .venv in the repository (./scripts/test.sh makes it)")


@pytest.fixture
def taken() -> Iterator[int]:
    """A port something already listens on, as a first run-local.sh would."""
    with taken_port() as port:
        yield port


@pytest.mark.parametrize("how", ["flag", "env"])
def test_taken_port_is_said_before_any_banner(taken: int, tmp_path: Path, how: str) -> None:
    bind = f"127.0.0.1:{taken}"
    args, env = (["--bind", bind], {}) if how == "flag" else ([], {"HAMI_WEBHOOK_BIND": bind})
    proc = subprocess.run(
        ["bash", str(SCRIPT), *args, "--dir", str(tmp_path / "tls")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert f"run-local.sh: {bind} is already in use" in proc.stderr
    assert f"--bind 127.0.0.1:{taken + 1}" in proc.stderr and f"HAMI_WEBHOOK_BIND=127.0.0.1:{taken + 1}" in proc.stderr
    assert "try:" not in proc.stderr and "serving" not in proc.stderr
    assert not (tmp_path / "tls").exists(), "nothing is written for a run that cannot serve"


def test_printed_curl_and_decoder_show_the_patch(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("curl is needed to run the command run-local.sh prints")
        pytest.skip("no curl")
    port = free_port()
    ca = tmp_path / "tls" / "ca.crt"
    command = ["bash", str(SCRIPT), "--bind", f"127.0.0.1:{port}", "--dir", str(ca.parent)]
    proc = Server(command, {"HAMI_METRICS_BIND": "127.0.0.1:0"})
    try:
        deadline = time.monotonic() + 120
        while not ca.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        wait_ready(port, client_context(ca), proc, timeout=60)
        banner = proc.log()
        curl = next(line.strip() for line in banner.splitlines() if line.strip().startswith("curl "))
        (decoder,) = DECODER.findall(banner)
        assert decoder in (ROOT / "README.md").read_text(), "the README shows the same decoder"
        shown = subprocess.run(
            ["bash", "-o", "pipefail", "-c", f"{curl} --silent --show-error {decoder}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        log = stop(proc)
    assert shown.returncode == 0, shown.stderr + log
    assert '{"op":"replace","path":"/spec/schedulerName","value":"hami-scheduler"}' in shown.stdout
