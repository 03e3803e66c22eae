"""Shutdown loses no request: SIGTERM under keep-alive load, and readiness turns before the listener closes."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time

from certgen.local import write_local
from tests.app.serving.test_transport import REVIEW
from tests.support.ports import free_port
from tests.support.servers import gunicorn, wait_ready
from tests.support.tls import client_context


def test_sigterm_under_load_answers_every_request(tmp_path) -> None:
    pki = write_local(tmp_path, ["localhost", "127.0.0.1"])
    context = client_context(pki.ca_cert)
    port = free_port()
    proc = gunicorn(port, pki.cert, pki.key, HAMI_WEBHOOK_WORKERS="2")
    wait_ready(port, context, proc)
    failures: list[str] = []
    counts = {"answered": 0, "closing": 0, "refused": 0}
    stop_at = time.monotonic() + 10

    def load() -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        while time.monotonic() < stop_at and proc.poll() is None:
            try:
                conn.request("POST", "/webhook", REVIEW, {"Content-Type": "application/json"})
            except ConnectionRefusedError:
                counts["refused"] += 1  # not accepted: a cluster sends it to another Pod
                conn.close()
                time.sleep(0.05)
                continue
            except (OSError, http.client.HTTPException) as exc:
                failures.append(f"accepted, then {exc!r}")
                conn.close()
                continue
            try:
                reply = conn.getresponse()
                assert reply.status == 200 and json.loads(reply.read())["response"]["uid"] == "u1"
                counts["answered"] += 1
                if reply.will_close:
                    counts["closing"] += 1
                    conn.close()
            except (OSError, http.client.HTTPException) as exc:
                failures.append(f"sent, then {exc!r}")
                conn.close()
            time.sleep(0.01)
        conn.close()

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    readyz = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    while True:  # readiness turns while the listener still answers
        readyz.request("GET", "/readyz")
        reply = readyz.getresponse()
        body = json.loads(reply.read())
        if reply.status == 503:
            break
        assert time.monotonic() - signalled < 2, "still ready 2 s after SIGTERM"
    readyz.close()
    assert body["ready"] is False and body["stopping"] is True
    for thread in threads:
        thread.join(20)
    proc.wait(timeout=25)
    log = proc.log()
    assert time.monotonic() - signalled < 20
    assert failures == [], (failures[:5], counts, log[-3000:])
    assert counts["closing"] >= 4 and counts["refused"] > 0, counts
    assert proc.returncode == 0 and "Traceback" not in log
