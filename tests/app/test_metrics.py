"""Metrics: real gunicorn workers over TLS, one /metrics for all of them, the sums right, dead workers cleaned up."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from cryptography import x509
from prometheus_client import REGISTRY

from app import metrics
from certgen.local import LocalFiles
from testbed.pods import container, pod
from testbed.ports import taken_port
from testbed.reviews import admission_review
from tests.app.served import Served, sample, serve

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}


@pytest.fixture(scope="module")
def server(pki: LocalFiles):
    with serve(pki, HAMI_WEBHOOK_WORKERS="3", HAMI_LOG_FORMAT="json") as served:
        yield served


def reviews(served: Served) -> list[dict]:
    return [json.loads(line) for line in served.lines if '"msg":"review"' in line]


KINDS = {
    "patched": lambda i: admission_review(pod(container(limits=GPU)), uid=f"p-{i}"),
    "passed": lambda i: admission_review(pod(container()), uid=f"c-{i}"),
    "denied": lambda i: admission_review(pod(container(limits=GPU), nodeName="n1"), uid=f"d-{i}"),
}


def test_sums_over_workers(server: Served, pki: LocalFiles) -> None:
    """Reviews on fresh connections land on several workers; /metrics shows the totals of all of them."""
    before = len(reviews(server))
    sent: Counter[str] = Counter()
    deadline = time.monotonic() + 60
    for i in range(300):  # bounded: stop once several workers have answered and every kind was sent twice
        kind = list(KINDS)[i % 3]
        status, _ = server.post(KINDS[kind](i))
        assert status == 200
        sent[kind] += 1
        pids = {r["pid"] for r in reviews(server)[before:]}
        if (len(pids) >= 2 and i >= 30) or time.monotonic() > deadline:
            break
    server.wait_for(rf'"uid":"[pcd]-{i}"')
    assert len({r["pid"] for r in reviews(server)[before:]}) >= 2, "the reviews all went to one worker"
    total = sum(sent.values())
    text = server.scrape()
    assert sample(text, "controller_runtime_webhook_requests_total", code="200", webhook="/webhook") == total
    assert sample(text, "controller_runtime_webhook_latency_seconds_count", webhook="/webhook") == total
    assert sample(text, "controller_runtime_webhook_latency_seconds_bucket", le="+Inf", webhook="/webhook") == total
    assert (sample(text, "controller_runtime_webhook_latency_seconds_bucket", le="0.5", webhook="/webhook") or 0) > 0
    assert (sample(text, "controller_runtime_webhook_latency_seconds_sum", webhook="/webhook") or 0) > 0
    assert sample(text, "controller_runtime_webhook_requests_in_flight", webhook="/webhook") == 0
    assert sample(text, "hami_webhook_decisions_total", outcome="patched", reason="") == sent["patched"]
    assert sample(text, "hami_webhook_decisions_total", outcome="passed", reason="") == sent["passed"]
    assert sample(text, "hami_webhook_decisions_total", outcome="denied", reason="Forbidden") == sent["denied"]
    assert sample(text, "hami_webhook_device_matches_total", device="NVIDIA") == sent["patched"]


def test_expiry_gauge_is_the_served_certificate(server: Served, pki: LocalFiles) -> None:
    leaf = x509.load_pem_x509_certificate(Path(pki.cert).read_bytes())
    text = server.scrape()
    assert sample(text, "hami_webhook_certificate_expiry_timestamp_seconds") == leaf.not_valid_after_utc.timestamp()
    assert (sample(text, "hami_webhook_certificate_loads_total") or 0) >= 3  # each of the 3 workers loaded it


def test_http_errors_are_counted_by_code(server: Served) -> None:
    before = sample(server.scrape(), "controller_runtime_webhook_requests_total", code="400", webhook="/webhook") or 0
    assert server.post(b"{}")[0] == 400
    assert server.post(b"not json")[0] == 400
    after = sample(server.scrape(), "controller_runtime_webhook_requests_total", code="400", webhook="/webhook")
    assert after == before + 2


def test_in_flight_counts_requests_being_served(server: Served) -> None:
    """The worker hands a request to the app only once it has all of it; a big review is then in flight a while."""
    big = admission_review(pod(*(container(f"c{i}", limits=GPU) for i in range(1500))), uid="big")
    body = json.dumps(big).encode()
    stop = threading.Event()

    def load() -> None:
        conn = server.connection()
        try:
            while not stop.is_set():
                assert server.post(body, conn)[0] == 200
        finally:
            conn.close()

    senders = [threading.Thread(target=load, daemon=True) for _ in range(3)]
    for sender in senders:
        sender.start()
    try:
        seen = 0.0
        deadline = time.monotonic() + 15
        while seen < 1 and time.monotonic() < deadline:
            seen = sample(server.scrape(), "controller_runtime_webhook_requests_in_flight", webhook="/webhook") or 0
    finally:
        stop.set()
        for sender in senders:
            sender.join(30)
    assert seen >= 1, "no request ever showed as in flight"
    assert sample(server.scrape(), "controller_runtime_webhook_requests_in_flight", webhook="/webhook") == 0


def test_dead_worker_keeps_its_counts_and_drops_its_gauges(pki: LocalFiles) -> None:
    with serve(pki, HAMI_WEBHOOK_WORKERS="2", HAMI_LOG_FORMAT="json") as served:
        directory = Path(served.wait_for(r'"dir":"([^"]+)"').group(1))
        for i in range(6):
            assert served.post(KINDS["patched"](i))[0] == 200
        served.wait_for(r'"uid":"p-5"')
        victim = reviews(served)[0]["pid"]
        assert any(f.name.endswith(f"_{victim}.db") and "live" in f.name for f in directory.iterdir())
        booted = set(re.findall(r"Booting worker with pid: (\d+)", served.log()))
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while set(re.findall(r"Booting worker with pid: (\d+)", served.log())) == booted:
            assert time.monotonic() < deadline, "gunicorn did not replace the killed worker"
            time.sleep(0.05)
        while any(f.name == f"gauge_livesum_{victim}.db" for f in directory.iterdir()):
            assert time.monotonic() < deadline, "the dead worker's live gauges were not removed"
            time.sleep(0.05)
        text = served.scrape()
        assert sample(text, "controller_runtime_webhook_requests_total", code="200", webhook="/webhook") == 6
        assert sample(text, "hami_webhook_device_matches_total", device="NVIDIA") == 6
        assert sample(text, "controller_runtime_webhook_requests_in_flight", webhook="/webhook") == 0
    assert not directory.exists(), "the multiprocess directory is removed when gunicorn exits"


def test_taken_metrics_port_is_logged_and_admissions_go_on(pki: LocalFiles) -> None:
    with taken_port() as taken:
        bind = f"127.0.0.1:{taken}"
        with serve(pki, HAMI_METRICS_BIND=bind, HAMI_WEBHOOK_WORKERS="1") as served:
            served.wait_for(rf"metrics: cannot listen on {bind}")
            assert served.post(KINDS["patched"](0))[0] == 200


def test_quota_off_exports_no_quota_gauges(pki: LocalFiles) -> None:
    with serve(pki, HAMI_QUOTA_ENABLED="false", HAMI_WEBHOOK_WORKERS="1") as served:
        assert served.post(KINDS["patched"](0))[0] == 200
        served.wait_for(r"review uid=p-0 ")  # counted, then logged, once the answer has left (app/serving/http.py)
        text = served.scrape()
        assert "hami_webhook_decisions_total" in text
        assert not [line for line in text.splitlines() if line.startswith(tuple(metrics.QuotaGauges.NAMES))]
        assert not [name for name in metrics.QuotaGauges.NAMES if f"# HELP {name} " in text]


def test_metrics_can_be_turned_off(pki: LocalFiles) -> None:
    with serve(pki, HAMI_METRICS_BIND="", HAMI_WEBHOOK_WORKERS="1") as served:
        assert served.post(KINDS["patched"](0))[0] == 200
        assert "metrics: serving" not in served.log()


# --- the hooks other parts call (in this process: prometheus_client counts in memory) -----------------


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_certificate_hooks() -> None:
    loads, rejections = (
        value("hami_webhook_certificate_loads_total"),
        value("hami_webhook_certificate_reload_rejections_total"),
    )
    metrics.certificate_loaded(1_900_000_000.0)
    metrics.certificate_rejected()
    assert value("hami_webhook_certificate_expiry_timestamp_seconds") == 1_900_000_000.0
    assert value("hami_webhook_certificate_loads_total") == loads + 1
    assert value("hami_webhook_certificate_reload_rejections_total") == rejections + 1


def test_quota_feed_sync_hook() -> None:
    metrics.quota_feed_synced("pods", True)
    assert value("hami_webhook_quota_feed_synced", resource="pods") == 1
    metrics.quota_feed_synced("pods", False)
    assert value("hami_webhook_quota_feed_synced", resource="pods") == 0


def test_inventory_and_fits_nowhere_hooks() -> None:
    metrics.inventory({"NVIDIA": 3}, {"NVIDIA": 24}, 1_900_000_000.0)
    assert value("hami_webhook_inventory_nodes", vendor="NVIDIA") == 3
    assert value("hami_webhook_inventory_devices", vendor="NVIDIA") == 24
    assert value("hami_webhook_inventory_updated_timestamp_seconds") == 1_900_000_000.0
    before = value("hami_webhook_fits_nowhere_total", namespace="ml", resource="nvidia.com/gpu")
    metrics.decided("patched", "", unfit=("nvidia.com/gpu", "nvidia.com/gpu"), namespace="ml")
    assert value("hami_webhook_fits_nowhere_total", namespace="ml", resource="nvidia.com/gpu") == before + 2


def quota_samples() -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    """What a scrape of the master's quota gauges yields now."""
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value) for f in metrics.QuotaGauges().collect() for s in f.samples
    }


def test_quota_gauges_read_the_newest_workers_figures_and_forget_a_dead_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the gunicorn master: each worker's whole set of figures is a file; a scrape reads the newest (all workers
    watch the same objects), a dead worker's goes with it, and none at all means no series (quota off)."""
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(tmp_path))
    assert quota_samples() == set()
    row = ("ai", "nvidia.com/gpumem", "gpu", 8000, 2000, 500, 300)
    older = tmp_path / metrics.QUOTA_FILE.format(pid=1)
    older.write_text(json.dumps([[*row[:3], 8000, 1000, 0, 0]]))
    os.utime(older, ns=(1, 1))
    metrics.quota_standings([row])  # this process, now
    labels = {"namespace": "ai", "quota_name": "nvidia.com/gpumem", "resourcequota": "gpu"}
    limited = tuple(sorted((labels | {"limit": "8000"}).items()))
    assert quota_samples() == {
        ("hami_webhook_quota_limit", tuple(sorted(labels.items())), 8000.0),
        ("hami_webhook_quota_used", limited, 2000.0),
        ("hami_webhook_quota_held", limited, 500.0),
        ("hami_webhook_quota_held_for_gangs", limited, 300.0),
    }
    metrics.process_dead(os.getpid())
    assert not (tmp_path / metrics.QUOTA_FILE.format(pid=os.getpid())).exists()
    assert ("hami_webhook_quota_used", limited, 1000.0) in quota_samples()
    metrics.quota_standings([])  # the namespace's quota went
    assert quota_samples() == set()
