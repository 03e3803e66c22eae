"""No over-admission under concurrency (docs/rules.md#no-over-admission-under-concurrency): three gunicorn
webhooks, two workers each, one real API server.

With room for exactly K Pods in a namespace, N >> K admissions fired at once, spread over the webhooks, must
allow exactly K and deny the rest with the quota denial's message (docs/rules.md#the-quota-denial-says-why),
never anything else. Several namespaces (rounds) with different K, from one Pod to a room big enough for
grants (room taken ahead by a worker), so a lucky pass is unlikely; every round also checks the ledger: each
admitted Pod's reservation is in it, and its entries never hold more than the limit.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from certgen.local import LocalFiles, write_local
from testbed import ROOT
from testbed.cluster import RealKube
from testbed.pods import container, pod
from testbed.ports import free_port
from testbed.reviews import admission_review
from testbed.servers import stop
from testbed.tls import client_context
from tests.app.quota.conftest import GPU, MEM, resource_quota, unique

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

KS = (1, 3, 7, 12, 25)  # per round, in a namespace of its own: how many Pods of 1000 MiB fit
N = 60  # admissions fired at once per namespace
WEBHOOKS, WORKERS = 3, "2"


@pytest.fixture
def webhooks(tmp_path: Path, bare_kube: RealKube) -> Iterator[tuple[list[int], LocalFiles, str, dict[str, int]]]:
    """Three gunicorn webhooks with quota required, sharing ``bare_kube``; their logs are checked afterwards.
    Yields their ports, the PKI, the ledgers' namespace and the rounds (namespace -> K)."""
    home, rounds = unique("hami"), {unique(f"race-{k}"): k for k in KS}
    for name in (home, *rounds):
        bare_kube.namespace(name)
    quotas = [resource_quota({f"limits.{MEM}": str(k * 1000)}, namespace) for namespace, k in rounds.items()]
    bare_kube.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(q) for q in quotas))
    pki = write_local(tmp_path / "tls", ["localhost", "127.0.0.1"])
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    ports, procs = [free_port() for _ in range(WEBHOOKS)], []
    for port in ports:
        env.update(
            HAMI_WEBHOOK_BIND=f"127.0.0.1:{port}",
            HAMI_WEBHOOK_TLS_CERT=str(pki.cert),
            HAMI_WEBHOOK_TLS_KEY=str(pki.key),
            HAMI_WEBHOOK_WORKERS=WORKERS,
            HAMI_WEBHOOK_THREADS="4",
            HAMI_QUOTA_ENABLED="true",
            HAMI_NAMESPACE=home,
            KUBECONFIG=bare_kube.kubeconfig_path,
        )
        command = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"]
        pipes = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
        procs.append(subprocess.Popen(command, cwd=ROOT, env=dict(env), text=True, **pipes))
    try:
        for port, proc in zip(ports, procs, strict=True):
            all_workers_ready(port, client_context(pki.ca_cert), proc)
        yield ports, pki, home, rounds
    finally:
        for proc in procs:  # all at once: each lingers for seconds before it exits
            proc.terminate()
        logs = [stop(proc) for proc in procs]
        bare_kube.kubectl("delete", "namespace", "--wait=false", home, *rounds, check=False)
    for log in logs:
        assert "Traceback" not in log and "quota undecided" not in log, log


def all_workers_ready(port: int, context: ssl.SSLContext, proc: subprocess.Popen[str]) -> None:
    """Every worker has booted and synced: /readyz (answered by any worker) says 200 many times in a row.
    Worker boot imports the Kubernetes client, slow on a busy machine: a generous bound."""
    deadline, streak = time.monotonic() + 120, 0
    while streak < 20:
        assert proc.poll() is None, f"webhook exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
        assert time.monotonic() < deadline, "webhook workers did not all become ready"
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
        try:
            conn.request("GET", "/readyz")
            streak = streak + 1 if conn.getresponse().status == 200 else 0
        except OSError:
            streak = 0
        finally:
            conn.close()
        if not streak:
            time.sleep(0.2)


def fire(ports: list[int], pki: LocalFiles, namespace: str) -> list[tuple[int, dict[str, Any]]]:
    """N admissions released together, spread over the webhooks; (HTTP status, response) each."""
    barrier = threading.Barrier(N, timeout=30)
    results: list[tuple[int, dict[str, Any]]] = []
    obj = pod(container(limits={GPU: "1", MEM: "1000"}), namespace=namespace)

    def one(i: int) -> None:
        body = json.dumps(admission_review(obj, uid=f"{namespace}-{i}"))
        port = ports[i % len(ports)]
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=client_context(pki.ca_cert), timeout=15)
        barrier.wait()  # not after connecting: a gthread worker's thread waits on an idle connection's request
        try:
            conn.request("POST", "/webhook?timeout=10s", body, {"Content-Type": "application/json"})
            reply = conn.getresponse()
            data = json.loads(reply.read())
            results.append((reply.status, data.get("response") or data))
        finally:
            conn.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(N)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == N
    return results


def reservation(response: dict[str, Any]) -> str:
    """The ledger entry an admitted Pod's patch names (its seal's first part)."""
    ops = json.loads(base64.b64decode(response["patch"]))
    (found,) = [
        op["value"]
        for op in ops
        if op["path"] == "/metadata/annotations/hami.io~1quota-reservation"
        or (op["path"] == "/metadata/annotations" and "hami.io/quota-reservation" in op["value"])
    ]
    sealed = found if isinstance(found, str) else found["hami.io/quota-reservation"]
    return str(sealed).partition(".")[0]


def test_exactly_k_admitted_across_three_webhooks(
    webhooks: tuple[list[int], LocalFiles, str, dict[str, int]], bare_kube: RealKube
) -> None:
    ports, pki, home, rounds = webhooks
    for namespace, k in rounds.items():
        results = fire(ports, pki, namespace)
        assert {status for status, _ in results} == {200}, results
        allowed = [r for _, r in results if r["allowed"]]
        denied = [r for _, r in results if not r["allowed"]]
        assert len(allowed) == k, (namespace, len(allowed))
        message = (
            f"exceeding resource quota: namespace {namespace} {MEM} used {k * 1000} + requested 1000 > limit {k * 1000}"
        )
        assert [(d["status"]["code"], d["status"]["reason"], d["status"]["message"]) for d in denied] == [
            (403, "GPUQuotaExceeded", message)
        ] * (N - k)
        lease = bare_kube.get("lease", f"hami-quota-{namespace}", namespace=home)
        entries = json.loads(lease["metadata"]["annotations"]["hami.io/quota-ledger"])
        # No Pod was created: every admission's room is still held by the entry its Pod would carry, and all
        # the entries together (grants' room not used yet included) never hold more than the limit.
        assert {reservation(r) for r in allowed} <= set(entries)
        assert sum(e["amounts"][MEM] for e in entries.values()) <= k * 1000
