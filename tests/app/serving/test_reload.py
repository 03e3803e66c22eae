"""Certificates reload without a restart: the pair is replaced as kubelet updates a Secret volume, under load."""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest

from certgen.local import LocalFiles, write_local
from testbed.ports import free_port
from testbed.servers import gunicorn, stop, wait_ready
from testbed.tls import client_context
from tests.app.serving.test_transport import REVIEW

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

REFUSED = "serving certificate change refused, still serving the previous one"


def publish(volume: Path, source: LocalFiles, key: Path | None = None) -> None:
    """What kubelet does: write a timestamped dir, then atomically swap the ..data symlink to it."""
    stamp = volume / f"..{time.time_ns()}"
    stamp.mkdir()
    shutil.copy(source.cert, stamp / "tls.crt")
    shutil.copy(key or source.key, stamp / "tls.key")
    (volume / "..data_tmp").symlink_to(stamp.name)
    os.replace(volume / "..data_tmp", volume / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (volume / name).is_symlink():
            (volume / name).symlink_to(f"..data/{name}")


def served_certificate(port: int, context: ssl.SSLContext) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True) or b""


def certificates_held(port: int, context: ssl.SSLContext, count: int = 8) -> list[bytes]:
    """The certificates of ``count`` connections held open together, so they spread over the workers."""
    with contextlib.ExitStack() as stack:
        raws = [stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5)) for _ in range(count)]
        socks = [stack.enter_context(context.wrap_socket(raw, server_hostname="localhost")) for raw in raws]
        return [sock.getpeercert(binary_form=True) or b"" for sock in socks]


def pem_der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def test_certificate_rotation_under_load(tmp_path: Path) -> None:
    first = write_local(tmp_path / "first", ["localhost", "127.0.0.1"])
    second = write_local(tmp_path / "second", ["localhost", "127.0.0.1"])  # another CA too: clients trust both
    volume = tmp_path / "tls"
    volume.mkdir()
    publish(volume, first)
    context = client_context(first.ca_cert)
    context.load_verify_locations(str(second.ca_cert))
    port = free_port()
    proc = gunicorn(port, volume / "tls.crt", volume / "tls.key", HAMI_WEBHOOK_WORKERS="2")
    failures: list[str] = []
    answered = [0]
    stop_at = time.monotonic() + 40
    done = threading.Event()

    def load() -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        while not done.is_set() and time.monotonic() < stop_at:
            try:
                conn.request("POST", "/webhook", REVIEW, {"Content-Type": "application/json"})
                reply = conn.getresponse()
                reply.read()
                if reply.status != 200:
                    failures.append(f"status {reply.status}")
                answered[0] += 1
            except (OSError, http.client.HTTPException) as exc:
                failures.append(repr(exc))
                conn.close()
            time.sleep(0.005)
        conn.close()

    try:
        wait_ready(port, context, proc)
        assert served_certificate(port, context) == pem_der(first.cert)
        threads = [threading.Thread(target=load) for _ in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(1)
        publish(volume, second)
        swapped = time.monotonic()
        # Every worker polls on its own: 8 connections held together (both workers) must all get the new one.
        while certificates_held(port, context) != [pem_der(second.cert)] * 8:
            assert time.monotonic() - swapped < 15, "new connections still get the old certificate after 15 s"
            time.sleep(0.2)

        # A pair whose key belongs to another certificate does not replace the good one: once both workers have
        # looked at it and refused it (each says so once), both still serve the second.
        publish(volume, first, key=second.key)
        refused = time.monotonic()
        while proc.log().count(REFUSED) < 2:
            assert time.monotonic() - refused < 15, "the workers did not look at the bad pair within 15 s"
            time.sleep(0.2)
        assert certificates_held(port, context) == [pem_der(second.cert)] * 8
        done.set()
        for thread in threads:
            thread.join(15)
    finally:
        done.set()
        log = stop(proc)
    assert failures == [] and answered[0] > 100, (failures[:3], answered)
    assert log.count("serving certificate loaded") >= 4  # each of the 2 workers: at start and after the swap
    assert f"{REFUSED}: not a usable certificate/key pair" in log
    assert "Traceback" not in log
