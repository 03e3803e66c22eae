"""Helpers to run gunicorn serving the webhook over real TLS on loopback, as kube-apiserver calls it."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def client_context(ca: Path) -> ssl.SSLContext:
    """Trust only our CA, check the hostname against SANs only (no CN fallback), TLS 1.2+: Go's rules."""
    context = ssl.create_default_context(cafile=str(ca))
    context.hostname_checks_common_name = False
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class Server(subprocess.Popen[str]):
    """A server process whose stderr is read as it comes, so a full pipe never blocks its logging."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        super().__init__(command, cwd=ROOT, env={**os.environ, **env}, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.stderr or []), daemon=True)
        self.reader.start()

    def log(self) -> str:
        """Everything written so far; all of it once the process has exited."""
        if self.poll() is not None and self.stderr and not self.stderr.closed:
            self.reader.join(10)
            self.stderr.close()
        return "".join(self.lines)


def gunicorn(port: int, cert: Path, key: Path, **env: str) -> Server:
    """The webhook under the project's gunicorn.conf.py on 127.0.0.1:``port``, metrics on a free loopback port."""
    settings = {
        "HAMI_WEBHOOK_BIND": f"127.0.0.1:{port}",
        "HAMI_WEBHOOK_TLS_CERT": str(cert),
        "HAMI_WEBHOOK_TLS_KEY": str(key),
        "HAMI_METRICS_BIND": "127.0.0.1:0",
        **env,
    }
    return Server([sys.executable, "-m", "gunicorn", "-c", str(ROOT / "gunicorn.conf.py"), "wsgi:app"], settings)


def wait_ready(port: int, context: ssl.SSLContext, proc: subprocess.Popen[str], timeout: float = 20) -> None:
    """Poll /readyz until it answers 200; fail with the server's log if it exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {stop(proc)}")
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=2)
        try:
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
        finally:
            conn.close()
    raise AssertionError("server did not become ready")


def stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM, wait (SIGKILL after 30 s); the server's stderr."""
    proc.terminate()
    if isinstance(proc, Server):
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return proc.log()
    try:  # a plain Popen with pipes: read them while waiting, so a full pipe cannot block its exit
        return proc.communicate(timeout=30)[1] or ""
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1] or ""
