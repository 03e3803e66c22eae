"""The webhook under gunicorn over real TLS on loopback, as kube-apiserver calls it: start, wait, stop."""

from __future__ import annotations

import http.client
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

from testbed import ROOT

LOG_TAIL = 64 * 1024


class Server(subprocess.Popen[str]):
    """A server process whose output is read as it comes, so a full pipe never blocks its logging.

    With `log`, stdout and stderr go to that file instead of memory: for a benchmark's millions of log lines.
    `stop_signal` is what `stop` sends it; `cwd` is the tree it runs from (another checkout, for a benchmark's
    before and after).
    """

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        log: Path | None = None,
        stop_signal: int = signal.SIGTERM,
        cwd: Path = ROOT,
    ) -> None:
        self.lines: list[str] = []
        self.log_path = log
        self.stop_signal = stop_signal
        if log is None:
            super().__init__(command, cwd=cwd, env={**os.environ, **env}, stderr=subprocess.PIPE, text=True)
            self.reader = threading.Thread(target=lambda: self.lines.extend(self.stderr or []), daemon=True)
            self.reader.start()
            return
        with log.open("w") as out:
            super().__init__(command, cwd=cwd, env={**os.environ, **env}, stdout=out, stderr=out, text=True)

    def log(self) -> str:
        """Everything written so far; all of it once the process has exited. From a file, only its last 64 KiB."""
        if self.log_path is not None:
            with self.log_path.open("rb") as written:
                written.seek(max(0, self.log_path.stat().st_size - LOG_TAIL))
                return written.read().decode(errors="replace")
        if self.poll() is not None and self.stderr and not self.stderr.closed:
            self.reader.join(10)
            self.stderr.close()
        return "".join(self.lines)


def serving_env(port: int, cert: Path, key: Path, **env: str) -> dict[str, str]:
    """The settings that serve on 127.0.0.1:``port`` with ``cert``/``key``, metrics on a free loopback port."""
    return {
        "HAMI_WEBHOOK_BIND": f"127.0.0.1:{port}",
        "HAMI_WEBHOOK_TLS_CERT": str(cert),
        "HAMI_WEBHOOK_TLS_KEY": str(key),
        "HAMI_METRICS_BIND": "127.0.0.1:0",
        **env,
    }


def gunicorn(
    port: int,
    cert: Path,
    key: Path,
    *args: str,
    config: str = str(ROOT / "gunicorn.conf.py"),
    app: str = "wsgi:app",
    log: Path | None = None,
    cwd: Path = ROOT,
    **env: str,
) -> Server:
    """``app`` (the webhook by default) under gunicorn with ``config`` and ``args``, on 127.0.0.1:``port``.

    `stop` ends it with gunicorn's quick shutdown (SIGQUIT: the workers exit at once), not the graceful one
    (SIGTERM: STOP_LINGER seconds and more of answering), which the tests of it send themselves
    (tests/app/serving/test_shutdown.py)."""
    command = [sys.executable, "-m", "gunicorn", "-c", config, *args, app]
    return Server(command, serving_env(port, cert, key, **env), log, stop_signal=signal.SIGQUIT, cwd=cwd)


def wait_ready(
    port: int,
    context: ssl.SSLContext,
    proc: subprocess.Popen[str],
    timeout: float = 20,
    *,
    path: str = "/readyz",
    name: str = "server",
) -> None:
    """Poll ``path`` until it answers 200; fail with the server's log if it exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{name} exited {proc.returncode}: {stop(proc)}")
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=2)
        try:
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
        finally:
            conn.close()
    raise AssertionError(f"{name} did not become ready: {proc.log() if isinstance(proc, Server) else ''}")


def stop(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    """SIGTERM (a Server: its `stop_signal`), wait (SIGKILL after ``timeout`` s); the server's output."""
    if isinstance(proc, Server):
        proc.send_signal(proc.stop_signal)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return proc.log()
    proc.terminate()
    try:  # a plain Popen with pipes: read them while waiting, so a full pipe cannot block its exit
        return proc.communicate(timeout=timeout)[1] or ""
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1] or ""
