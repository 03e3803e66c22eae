"""Check-and-reserve through the real port: official client, fake API server, no mocks.

Rule: docs/rules.md#d-namespace-quota.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from app import create_app
from app.annotations import QUOTA_RESERVATION_ANNOTATION
from app.quota import QuotaOff, QuotaUnavailable
from app.quota.kube import KubeQuota, QuotaStartError, open_quota
from app.quota.ledger import LEDGER_ANNOTATION
from app.settings import Settings, SettingsError
from tests.app.quota.conftest import GPU, HOME, MEM, QUOTA_NS, eventually, quota_settings, resource_quota
from tests.app.reviews import Outcome, admission_review, container, pod, run
from tests.kubeapi import FakeKubeAPI

LEDGER = f"hami-quota-{QUOTA_NS}"


def gpu_pod(memory: int, namespace: str = QUOTA_NS, **metadata: Any) -> dict[str, Any]:
    obj = pod(container(limits={GPU: "1", MEM: str(memory)}), namespace=namespace)
    obj["metadata"].update(metadata)
    return obj


def admit(port: KubeQuota, settings: Settings, memory: int, uid: str, **review: Any) -> Outcome:
    return run(gpu_pod(memory), settings, port, uid=uid, **review)


def denied(outcome: Outcome) -> str:
    assert outcome.denial()[:3] == (False, 403, "GPUQuotaExceeded"), outcome.response
    return outcome.denial()[3]


def ledger(api: FakeKubeAPI) -> dict[str, Any]:
    lease = api.get("coordination.k8s.io/v1", "Lease", LEDGER, HOME)
    return json.loads(lease["metadata"]["annotations"][LEDGER_ANNOTATION]) if lease else {}


def ledger_requests(api: FakeKubeAPI) -> list[str]:
    return [f"{r.method} {r.path}" for r in api.requests if "/leases" in r.path]


def test_namespace_without_quota_never_touches_the_ledger(cluster: FakeKubeAPI, start_quota) -> None:
    port, settings = start_quota()
    cluster.put(resource_quota({"limits.cpu": "4"}))  # a quota, but not a device quota
    outcome = admit(port, settings, 4000, "u-1")
    assert outcome.response["allowed"] and QUOTA_RESERVATION_ANNOTATION not in json.dumps(outcome.ops)
    assert ledger_requests(cluster) == []
    assert not port.governs(QUOTA_NS)  # so the review does not even compute the Pod's demand


def test_reserve_until_full_then_deny_with_q4_message(cluster: FakeKubeAPI, start_quota) -> None:
    cluster.put(resource_quota({f"limits.{MEM}": "10000"}))
    port, settings = start_quota()
    assert port.governs(QUOTA_NS) and not port.governs("elsewhere")
    first, second = admit(port, settings, 4000, "u-1"), admit(port, settings, 6000, "u-2")  # 10000: equal fits
    for outcome, uid in ((first, "u-1"), (second, "u-2")):
        assert outcome.response["allowed"]
        assert outcome.patched["metadata"]["annotations"][QUOTA_RESERVATION_ANNOTATION] == uid
    assert denied(admit(port, settings, 1, "u-3")) == (
        f"exceeding resource quota: namespace {QUOTA_NS} {MEM} used 10000 + requested 1 > limit 10000"
    )
    assert {uid: entry["amounts"] for uid, entry in ledger(cluster).items()} == {
        "u-1": {MEM: 4000, GPU: 1},
        "u-2": {MEM: 6000, GPU: 1},
    }


def test_dry_run_checks_but_never_reserves(cluster: FakeKubeAPI, start_quota) -> None:
    cluster.put(resource_quota({f"limits.{MEM}": "5000"}))
    port, settings = start_quota()
    dry = admit(port, settings, 5000, "dry", dry_run=True)
    assert dry.response["allowed"] and QUOTA_RESERVATION_ANNOTATION not in json.dumps(dry.ops)
    assert denied(admit(port, settings, 6000, "dry-2", dry_run=True)).endswith("requested 6000 > limit 5000")
    assert [r.split()[0] for r in ledger_requests(cluster)] == ["GET", "GET"]
    assert admit(port, settings, 5000, "wet").response["allowed"]


def test_a_reservation_whose_pod_never_appears_expires(cluster: FakeKubeAPI, start_quota) -> None:
    cluster.put(resource_quota({f"limits.{MEM}": "4000"}))
    port, settings = start_quota(HAMI_QUOTA_RESERVATION_TTL="1")
    assert admit(port, settings, 4000, "lost").response["allowed"]  # never created: another webhook said no
    denied(admit(port, settings, 4000, "early"))
    time.sleep(1.1)
    assert admit(port, settings, 4000, "late").response["allowed"]
    assert list(ledger(cluster)) == ["late"]  # the expired entry was pruned by that write


def test_a_created_pod_counts_once_and_its_generated_name_is_tracked(cluster: FakeKubeAPI, start_quota) -> None:
    cluster.put(resource_quota({f"limits.{MEM}": "8000"}))
    port, settings = start_quota()
    outcome = admit(port, settings, 4000, "u-1")
    created = cluster.put(outcome.patched)  # generateName: the name is chosen only now
    assert created["metadata"]["name"].startswith("job-")
    eventually(lambda: port.feed.pods.consumed("u-1"), what="the feed to see the Pod")
    assert port.feed.in_use(QUOTA_NS, {"u-1": {MEM: 4000}}) == {MEM: 4000, GPU: 1}  # usage, not also reserved
    assert admit(port, settings, 4000, "u-2").response["allowed"]
    assert "used 8000 + requested 1 > limit 8000" in denied(admit(port, settings, 1, "u-3"))


def test_deleting_a_pod_and_raising_the_quota_take_effect(cluster: FakeKubeAPI, start_quota) -> None:
    cluster.put(resource_quota({f"limits.{MEM}": "4000"}))
    port, settings = start_quota(HAMI_QUOTA_RESERVATION_TTL="1")
    running = cluster.put(admit(port, settings, 4000, "u-1").patched)
    time.sleep(1.1)  # the reservation has expired: only the Pod holds the quota now
    denied(admit(port, settings, 4000, "u-2"))
    cluster.delete("v1", "Pod", running["metadata"]["name"], QUOTA_NS)
    eventually(lambda: admit(port, settings, 4000, "u-3").response["allowed"], 5, "the deletion to free quota")
    denied(admit(port, settings, 4000, "u-4"))
    cluster.put(resource_quota({f"limits.{MEM}": "8000"}))
    eventually(lambda: admit(port, settings, 4000, "u-5").response["allowed"], 5, "the raised quota")


def test_terminal_pods_are_released(cluster: FakeKubeAPI, start_quota) -> None:
    cluster.put(resource_quota({f"limits.{MEM}": "4000"}))
    port, _ = start_quota()
    done = cluster.put(gpu_pod(4000, name="done"))
    eventually(lambda: port.feed.in_use(QUOTA_NS, {}).get(MEM) == 4000, what="the Pod's usage")
    done["status"] = {"phase": "Succeeded"}
    cluster.put(done)
    eventually(lambda: port.feed.in_use(QUOTA_NS, {}) == {}, what="the finished Pod's release")


def test_several_quota_objects_are_all_enforced(cluster: FakeKubeAPI, start_quota) -> None:
    cluster.put(resource_quota({f"requests.{MEM}": "9000"}, name="memory"))
    cluster.put(resource_quota({GPU: "1"}, name="cards"))
    port, settings = start_quota()
    assert admit(port, settings, 1000, "u-1").response["allowed"]
    assert denied(admit(port, settings, 1000, "u-2")).endswith(f"{GPU} used 1 + requested 1 > limit 1")


def test_a_lost_compare_and_swap_decides_again(cluster: FakeKubeAPI, start_quota) -> None:
    """Another replica writes between our read and our write: 409, re-read, and now it does not fit."""
    cluster.put(resource_quota({f"limits.{MEM}": "4000"}))
    port, settings = start_quota()
    assert admit(port, settings, 1000, "u-1").response["allowed"]  # the ledger Lease exists now

    def other_replica(api: FakeKubeAPI) -> None:
        lease = api.get("coordination.k8s.io/v1", "Lease", LEDGER, HOME)
        entries = json.loads(lease["metadata"]["annotations"][LEDGER_ANNOTATION])
        entries["other"] = {"expires": time.time() + 60, "amounts": {MEM: 3000}}
        lease["metadata"]["annotations"][LEDGER_ANNOTATION] = json.dumps(entries)
        api.put(lease)

    cluster.before("PUT", f"/leases/{LEDGER}$", other_replica)
    assert "used 4000 + requested 3000 > limit 4000" in denied(admit(port, settings, 3000, "u-2"))
    puts = [(r.method, r.path) for r in cluster.requests if r.method == "PUT"]
    assert len(puts) == 1  # the losing write, then a fresh read that denied without writing
    assert set(ledger(cluster)) == {"u-1", "other"}


def test_ledger_failure_is_an_error_not_an_admission(cluster: FakeKubeAPI, start_quota) -> None:
    cluster.put(resource_quota({f"limits.{MEM}": "4000"}))
    port, settings = start_quota()
    cluster.fail_next("POST", "/leases$", 503, message="etcdserver: request timed out")
    unavailable = "quota ledger hami-system/hami-quota-ai: HTTP 503 Service Unavailable: etcdserver: request timed out"
    with pytest.raises(QuotaUnavailable, match=unavailable):
        admit(port, settings, 1000, "u-1")
    cluster.fail_next("PUT", f"/leases/{LEDGER}$", 409, times=1000)
    assert admit(port, settings, 1000, "u-2").response["allowed"]  # created by POST: no PUT yet
    started = time.monotonic()
    with pytest.raises(QuotaUnavailable, match="stayed contended"):
        admit(port, settings, 1000, "u-3")
    assert time.monotonic() - started < 6  # bounded well under the webhook's 10 s timeout
    assert set(ledger(cluster)) == {"u-2"}


def test_a_worker_whose_feed_has_not_synced_admits_no_device_pod(cluster: FakeKubeAPI) -> None:
    """Before its first ResourceQuota list a worker cannot know a namespace's quota: it must not admit."""
    cluster.put(resource_quota({f"limits.{MEM}": "4000"}))
    cluster.fail_next("GET", "^/api/v1/pods$", 500, times=1000, message="etcd is down")
    settings = quota_settings()
    port = open_quota(settings)
    assert isinstance(port, KubeQuota)
    try:
        assert not port.status()["ready"] and port.governs(QUOTA_NS) and port.governs("no-quota-here")
        with pytest.raises(QuotaUnavailable, match="the Pod and ResourceQuota lists have not synced yet"):
            admit(port, settings, 1000, "u-1")
        cpu_only = run(pod(container(limits={"cpu": "1"}), namespace=QUOTA_NS), settings, port, uid="u-2")
        assert cpu_only.response["allowed"]
        assert ledger_requests(cluster) == []
    finally:
        port.stop()


def test_readiness_follows_the_feed(cluster: FakeKubeAPI, start_quota) -> None:
    port, _ = start_quota(HAMI_QUOTA_STALE_AFTER="1")
    status = port.status()
    assert status["ready"] and status["synced"] == {"pods": True, "resourcequotas": True}
    cluster.stop()
    eventually(lambda: not port.status()["ready"], 10, "/readyz to turn unready")
    assert port.status()["broken_seconds"] > 1


@pytest.mark.parametrize("mode", ["auto", "false"])
def test_quota_is_off_without_api_configuration(mode: str, tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    port = open_quota(Settings.from_env({"HAMI_QUOTA_ENABLED": mode}))
    status = port.status()
    assert isinstance(port, QuotaOff) and status["ready"] and status["quota"] == "off"
    if mode == "auto":
        assert "no in-cluster config or kubeconfig" in status["reason"]
        assert "namespace device quota is off" in caplog.text


def test_required_quota_fails_clearly(tmp_path, monkeypatch, cluster: FakeKubeAPI) -> None:
    required = Settings.from_env({"HAMI_QUOTA_ENABLED": "true"})
    unreachable = f"HAMI_QUOTA_ENABLED=true but the Kubernetes API at {cluster.url} cannot be used"
    cluster.stop()
    with pytest.raises(QuotaStartError, match=unreachable):
        open_quota(required)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(QuotaStartError, match="HAMI_QUOTA_ENABLED=true but no Kubernetes API configuration"):
        open_quota(required)


def test_quota_enabled_setting_is_checked() -> None:
    with pytest.raises(SettingsError, match="HAMI_QUOTA_ENABLED: expected auto, true or false, got 'maybe'"):
        Settings.from_env({"HAMI_QUOTA_ENABLED": "maybe"})


def test_webhook_answers_http_500_when_quota_cannot_be_decided(cluster: FakeKubeAPI, start_quota) -> None:
    """Undecided quota is an error: a non-200 lets the API server apply failurePolicy; /readyz follows the feed."""
    cluster.put(resource_quota({f"limits.{MEM}": "4000"}))
    port, settings = start_quota(HAMI_QUOTA_STALE_AFTER="1")
    client = create_app(settings, port).test_client()
    assert client.get("/readyz").status_code == 200
    cluster.fail_next("GET", f"/leases/{LEDGER}$", 500, message="etcd is down")
    reply = client.post("/webhook", json=admission_review(gpu_pod(1000), uid="u-1"))
    assert reply.status_code == 500
    message = (
        "namespace quota could not be decided: "
        "quota ledger hami-system/hami-quota-ai: HTTP 500 Internal Server Error: etcd is down"
    )
    body = reply.get_json()
    assert (body["kind"], body["status"], body["code"], body["message"], body["error"]) == (
        "Status",
        "Failure",
        500,
        message,
        message,
    )
    cluster.stop()
    eventually(lambda: client.get("/readyz").status_code == 503, 10, "/readyz to fail")
    assert client.get("/readyz").get_json()["quota"]["ready"] is False
