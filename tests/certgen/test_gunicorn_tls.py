"""End to end over a real socket: gunicorn serves what `certgen local` wrote (the certificate profile)."""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.certgen.helpers import client_context

REPO = Path(__file__).resolve().parents[2]
SERVICE_NAME = "hami-webhook.hami-system.svc"


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tls")
    done = subprocess.run(
        [sys.executable, "-m", "certgen", "local", "--out-dir", str(out), "--host", f"{SERVICE_NAME},127.0.0.1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "PRIVATE KEY" not in done.stderr + done.stdout
    return out


@pytest.fixture(scope="module")
def server(tls_dir: Path) -> Iterator[tuple[str, int]]:
    process = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("gunicorn")),
            "--chdir",
            str(REPO),
            "--bind",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--no-control-socket",
            "--certfile",
            str(tls_dir / "tls.crt"),
            "--keyfile",
            str(tls_dir / "tls.key"),
            "tests.certgen.wsgi_app:app",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = _listening_port(process)
        yield "127.0.0.1", port
    finally:
        process.terminate()
        process.wait(timeout=10)
        assert process.stderr is not None
        process.stderr.close()


def _listening_port(process: subprocess.Popen[str]) -> int:
    assert process.stderr is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if match := re.search(r"Listening at: https://127\.0\.0\.1:(\d+)", line):
            return int(match.group(1))
        if not line and process.poll() is not None:
            break
    raise AssertionError("gunicorn did not start")


def _get(address: tuple[str, int], ca_pem: bytes, server_hostname: str) -> tuple[str, bytes]:
    with socket.create_connection(address, timeout=10) as raw:
        with client_context(ca_pem).wrap_socket(raw, server_hostname=server_hostname) as tls:
            version = str(tls.version())
            tls.sendall(f"GET / HTTP/1.1\r\nHost: {server_hostname}\r\nConnection: close\r\n\r\n".encode())
            response = b""
            while chunk := tls.recv(4096):
                response += chunk
            return version, response


def test_client_trusting_only_ca_crt_accepts_the_service_name(server: tuple[str, int], tls_dir: Path) -> None:
    version, response = _get(server, (tls_dir / "ca.crt").read_bytes(), SERVICE_NAME)
    assert version in ("TLSv1.2", "TLSv1.3")
    assert response.startswith(b"HTTP/1.1 200") and response.endswith(b"ok")


def test_client_rejects_a_name_outside_the_sans(server: tuple[str, int], tls_dir: Path) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        _get(server, (tls_dir / "ca.crt").read_bytes(), "hami-webhook.other-namespace.svc")
