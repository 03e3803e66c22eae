"""Check-and-reserve through the real port: official client, real API server, no mocks.

Rules: the quota rules of docs/rules.md."""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from app import create_app
from app.admission.ports import QuotaOff, QuotaUnavailable
from app.admission.review import QUOTA_RESERVATION_ANNOTATION
from app.quota.committer import ADMIT_BUDGET, REQUEST_TIMEOUT
from app.quota.core.encoding import LEDGER_ANNOTATION, MARK_ANNOTATION, MAX_LEDGER_BYTES, encode
from app.quota.core.entries import Reserved, tag
from app.quota.evaluator import QuotaEvaluator
from app.quota.startup import QuotaStartError, open_quota
from app.readiness import Readiness
from app.settings import Settings, SettingsError
from certgen.local import write_local
from testbed.cluster import RealKube
from testbed.pods import container, pod
from testbed.polling import eventually
from testbed.ports import free_port
from testbed.reviews import Outcome, admission_review, run
from testbed.servers import gunicorn, stop, wait_ready
from testbed.tls import client_context
from tests.app.quota.conftest import GPU, MEM, Cluster, in_use, resource_quota, unique

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

Admit = Callable[..., Outcome]


def gpu_pod(memory: int, namespace: str) -> dict[str, Any]:
    return pod(container(limits={GPU: "1", MEM: str(memory)}), namespace=namespace)


@pytest.fixture
def admitter(cluster: Cluster) -> Callable[[QuotaEvaluator, Settings], Admit]:
    """``admit = admitter(port, settings)``, then ``admit(memory, uid, **review)``: one GPU Pod reviewed in the
    quota'd namespace."""

    def bind(port: QuotaEvaluator, settings: Settings) -> Admit:
        def admit(memory: int, uid: str, **review: Any) -> Outcome:
            return run(gpu_pod(memory, cluster.ns), settings, port, uid=uid, **review)

        return admit

    return bind


def denied(outcome: Outcome) -> str:
    assert outcome.denial()[:3] == (False, 403, "GPUQuotaExceeded"), outcome.response
    return outcome.denial()[3]


def test_namespace_without_quota_never_touches_the_ledger(cluster: Cluster, start_quota, admitter) -> None:
    cluster.quota({"limits.cpu": "4"})  # a quota, but not a device quota
    port, settings = start_quota()
    outcome = admitter(port, settings)(4000, "u-1")
    assert outcome.response["allowed"] and QUOTA_RESERVATION_ANNOTATION not in json.dumps(outcome.ops)
    assert cluster.ledger_requests() == []
    assert not port.governs(cluster.ns)  # so the review does not even compute the Pod's demand


def test_reserves_until_full_then_denies_naming_used_requested_and_limit(
    cluster: Cluster, start_quota, admitter
) -> None:
    cluster.quota({f"limits.{MEM}": "10000"})
    port, settings = start_quota()
    admit = admitter(port, settings)
    assert port.governs(cluster.ns) and not port.governs("elsewhere")
    first, second = admit(4000, "u-1"), admit(6000, "u-2")  # 10000: equal fits
    for outcome, uid in ((first, "u-1"), (second, "u-2")):
        assert outcome.response["allowed"]
        assert outcome.patched["metadata"]["annotations"][QUOTA_RESERVATION_ANNOTATION].startswith(f"{uid}.")
    assert denied(admit(1, "u-3")) == (
        f"exceeding resource quota: namespace {cluster.ns} {MEM} used 10000 + requested 1 > limit 10000"
    )
    assert {uid: entry["amounts"] for uid, entry in cluster.ledger().items()} == {
        "u-1": {MEM: 4000, GPU: 1},
        "u-2": {MEM: 6000, GPU: 1},
    }


def test_dry_run_checks_but_never_reserves(cluster: Cluster, start_quota, admitter) -> None:
    cluster.quota({f"limits.{MEM}": "5000"})
    port, settings = start_quota()
    admit = admitter(port, settings)
    dry = admit(5000, "dry", dry_run=True)
    assert dry.response["allowed"] and QUOTA_RESERVATION_ANNOTATION not in json.dumps(dry.ops)
    assert denied(admit(6000, "dry-2", dry_run=True)).endswith("requested 6000 > limit 5000")
    assert [r.split()[0] for r in cluster.ledger_requests()] == ["GET"]  # read once (absent), then cached
    assert admit(5000, "wet").response["allowed"]


def test_a_reservation_whose_pod_never_appears_expires(cluster: Cluster, start_quota, admitter) -> None:
    cluster.quota({f"limits.{MEM}": "4000"})
    port, settings = start_quota(HAMI_QUOTA_RESERVATION_TTL="1")
    admit = admitter(port, settings)
    assert admit(4000, "lost").response["allowed"]  # never created: another webhook said no
    denied(admit(4000, "early"))
    time.sleep(1.1)
    assert admit(4000, "late").response["allowed"]
    assert list(cluster.ledger()) == ["late"]  # the expired entry was pruned by that write


def test_a_created_pod_counts_once_and_its_generated_name_is_tracked(cluster: Cluster, start_quota, admitter) -> None:
    cluster.quota({f"limits.{MEM}": "8000"})
    port, settings = start_quota()
    admit = admitter(port, settings)
    outcome = admit(4000, "u-1")
    created = cluster.create_pod(outcome.patched)  # generateName: the name is chosen only now
    assert created["metadata"]["name"].startswith("job-")
    eventually(lambda: port.feed.pods.taken(cluster.ns, "u-1") is not None, what="the feed to see the Pod")
    assert in_use(port.feed, cluster.ns, {"u-1": {MEM: 4000}}) == {MEM: 4000, GPU: 1}  # usage, not also reserved
    assert admit(4000, "u-2").response["allowed"]
    assert "used 8000 + requested 1 > limit 8000" in denied(admit(1, "u-3"))
    # The write that reserved u-2 dropped u-1: its Pod counts as usage for every worker whose Pod watch has
    # reached the mark, the Pod's resourceVersion, which every decision waits for.
    lease = cluster.lease()
    assert lease is not None and set(cluster.ledger()) == {"u-2"}
    assert int(lease["metadata"]["annotations"][MARK_ANNOTATION]) >= int(created["metadata"]["resourceVersion"])


def test_deleting_a_pod_and_raising_the_quota_take_effect(cluster: Cluster, start_quota, admitter) -> None:
    cluster.quota({f"limits.{MEM}": "4000"})
    port, settings = start_quota(HAMI_QUOTA_RESERVATION_TTL="1")
    admit = admitter(port, settings)
    running = cluster.create_pod(admit(4000, "u-1").patched)
    time.sleep(1.1)  # the reservation has expired: only the Pod holds the quota now
    denied(admit(4000, "u-2"))
    cluster.delete_pod(running["metadata"]["name"])  # never bound to a node: gone at once
    eventually(lambda: admit(4000, "u-3").response["allowed"], 5, "the deletion to free quota")
    denied(admit(4000, "u-4"))
    cluster.quota({f"limits.{MEM}": "8000"})
    eventually(lambda: admit(4000, "u-5").response["allowed"], 5, "the raised quota")


def test_terminal_pods_are_released(cluster: Cluster, start_quota) -> None:
    cluster.quota({f"limits.{MEM}": "4000"})
    port, _ = start_quota()
    obj = gpu_pod(4000, cluster.ns)
    obj["metadata"] = {"name": "done"}
    cluster.create_pod(obj)
    eventually(lambda: in_use(port.feed, cluster.ns, {}).get(MEM) == 4000, what="the Pod's usage")
    cluster.finish_pod("done", "Succeeded")  # what its kubelet reports when the containers end
    eventually(lambda: in_use(port.feed, cluster.ns, {}) == {}, what="the finished Pod's release")


def test_several_quota_objects_are_all_enforced(cluster: Cluster, start_quota, admitter) -> None:
    cluster.quota({f"requests.{MEM}": "9000"}, name="memory")
    cluster.quota({GPU: "1"}, name="cards")
    port, settings = start_quota()
    assert port.feed.view(cluster.ns).limits == {MEM: 9000, GPU: 1}
    admit = admitter(port, settings)
    assert admit(1000, "u-1").response["allowed"]
    assert denied(admit(1000, "u-2")).endswith(f"{GPU} used 1 + requested 1 > limit 1")


def test_a_lost_compare_and_swap_decides_again(cluster: Cluster, start_quota, admitter) -> None:
    """Another replica writes between our read and our write: 409, re-read, and now it does not fit."""
    cluster.quota({f"limits.{MEM}": "4000"})
    port, settings = start_quota()
    admit = admitter(port, settings)
    assert admit(1000, "u-1").response["allowed"]  # the ledger Lease exists now

    def other_replica(kube: RealKube) -> None:
        lease = cluster.lease()
        assert lease is not None
        entries = json.loads(lease["metadata"]["annotations"][LEDGER_ANNOTATION])
        entries["other"] = {"expires": time.time() + 60, "amounts": {MEM: 3000}}
        lease["metadata"]["annotations"][LEDGER_ANNOTATION] = json.dumps(entries)
        cluster.leases.replace_namespaced_lease(cluster.ledger_name, cluster.home, lease)

    cluster.proxy.before("PUT", f"/leases/{cluster.ledger_name}$", other_replica)
    assert "used 4000 + requested 3000 > limit 4000" in denied(admit(3000, "u-2"))
    assert [r.split()[0] for r in cluster.ledger_requests()].count("PUT") == 1  # lost; the fresh read denied
    assert set(cluster.ledger()) == {"u-1", "other"}


def test_ledger_failure_is_an_error_not_an_admission(cluster: Cluster, start_quota, admitter) -> None:
    cluster.quota({f"limits.{MEM}": "4000"})
    port, settings = start_quota()
    admit = admitter(port, settings)
    cluster.proxy.fail_next("POST", "/leases$", 503, message="etcdserver: request timed out")
    unavailable = (
        f"quota ledger {cluster.home}/{cluster.ledger_name}: "
        "HTTP 503 Service Unavailable: etcdserver: request timed out"
    )
    with pytest.raises(QuotaUnavailable, match=unavailable):
        admit(1000, "u-1")
    cluster.proxy.fail_next("PUT", f"/leases/{cluster.ledger_name}$", 409, times=1000)
    assert admit(1000, "u-2").response["allowed"]  # created by POST: no PUT yet
    before = len(cluster.ledger_requests())
    # Every write loses; the budget runs out on a lost write or, on a loaded machine, on the read after one.
    with pytest.raises(QuotaUnavailable, match=rf"stayed contended for {ADMIT_BUDGET:g} s|did not answer within"):
        admit(1000, "u-3")
    tried = [r.split()[0] for r in cluster.ledger_requests()[before:]]
    assert tried.count("PUT") > 1 and set(tried) <= {"PUT", "GET"}, tried  # lost rounds tried again, in budget
    assert set(cluster.ledger()) == {"u-2"}


def test_a_write_without_an_answer_is_read_again_not_sent_again(cluster: Cluster, start_quota, admitter) -> None:
    """The compare-and-swap reaches the API server but its answer is lost: the commit reads the ledger, finds its
    entry there, and admits, with one write; a write that never arrived is decided again on the read."""
    cluster.quota({f"limits.{MEM}": "4000"})
    port, settings = start_quota()
    admit = admitter(port, settings)
    assert admit(1000, "u-1").response["allowed"]  # the ledger Lease exists now
    put = f"/leases/{cluster.ledger_name}$"
    for uid, answer in (("u-2", True), ("u-3", False)):
        before = len(cluster.ledger_requests())
        cluster.proxy.hold_next("PUT", put, answer=answer)
        outcome = admit(1000, uid)  # admitted: one 2 s request and its re-read fit the admission's budget
        assert outcome.response["allowed"], outcome.response
        assert outcome.patched["metadata"]["annotations"][QUOTA_RESERVATION_ANNOTATION].startswith(f"{uid}.")
        methods = [r.split()[0] for r in cluster.ledger_requests()[before:]]
        assert methods == (["PUT", "GET"] if answer else ["PUT", "GET", "PUT"]), methods
    assert set(cluster.ledger()) == {"u-1", "u-2", "u-3"}


def test_an_unanswered_ledger_says_so_within_the_budget(cluster: Cluster, start_quota, admitter) -> None:
    """Every request is tried once within the time the admission has left (no hidden retries of the client's
    pool): a ledger the API server never answers for is refused in time, naming the request that hung."""
    cluster.quota({f"limits.{MEM}": "4000"})
    port, settings = start_quota()
    admit = admitter(port, settings)
    assert admit(1000, "u-1").response["allowed"]
    before = len(cluster.ledger_requests())
    cluster.proxy.hold_next("PUT", f"/leases/{cluster.ledger_name}$", times=1000)
    cluster.proxy.hold_next("GET", f"/leases/{cluster.ledger_name}$", times=1000)
    with pytest.raises(QuotaUnavailable) as refused:
        admit(1000, "u-2")
    said = re.search(
        rf"quota ledger {cluster.home}/{cluster.ledger_name}: the API server did not answer within ([0-9.]+) s",
        str(refused.value),
    )
    assert said is not None, refused.value
    assert REQUEST_TIMEOUT - 0.1 <= float(said[1]) <= ADMIT_BUDGET, said[1]  # its own wait (one decimal), in budget
    assert "grant" not in str(refused.value) and "contended" not in str(refused.value)
    methods = [r.split()[0] for r in cluster.ledger_requests()[before:]]
    assert methods == ["PUT", "GET"], methods  # the write once, then the read that would tell whether it landed
    cluster.proxy.release()


def test_a_worker_whose_feed_has_not_synced_admits_no_device_pod(cluster: Cluster, admitter) -> None:
    """Before its first ResourceQuota list a worker cannot know a namespace's quota: it must not admit."""
    cluster.quota({f"limits.{MEM}": "4000"})
    cluster.proxy.fail_next("GET", f"^/api/v1/namespaces/{cluster.ns}/pods$", 500, times=1000, message="etcd down")
    settings = cluster.settings()
    port = open_quota(settings, Readiness())
    assert isinstance(port, QuotaEvaluator)
    try:
        assert not port.status()["ready"] and port.governs(cluster.ns) and port.governs("no-quota-here")
        with pytest.raises(QuotaUnavailable, match="the Pod and ResourceQuota lists have not synced yet"):
            admitter(port, settings)(1000, "u-1")
        cpu_only = run(pod(container(limits={"cpu": "1"}), namespace=cluster.ns), settings, port, uid="u-2")
        assert cpu_only.response["allowed"]
        assert cluster.ledger_requests() == []
    finally:
        port.stop()


def test_readiness_follows_the_feed(cluster: Cluster, start_quota) -> None:
    port, _ = start_quota(HAMI_QUOTA_STALE_AFTER="1")
    status = port.status()
    assert status["ready"] and status["synced"] == {"pods": True, "resourcequotas": True}
    cluster.proxy.stop()  # the API server is gone for this port
    eventually(lambda: not port.status()["ready"], 10, "/readyz to turn unready")
    assert port.status()["broken_seconds"] > 1


def test_a_replica_cut_off_from_the_api_server_steps_aside(cluster: Cluster, start_quota, admitter) -> None:
    """A black-holed network (nothing copied, nothing closed): within seconds the port says the API server is
    lost, /readyz turns unready, the worker is told to shed its connections, and an admission into the quota'd
    namespace is refused at once saying so (one elsewhere still fits). Healed by resuming what was held (the
    partition test, tests/realkube/test_quota_partition.py, heals both ways), it is ready again once its streams
    answered, and admits."""
    cluster.quota({f"limits.{MEM}": "4000"})
    port, settings = start_quota()
    admit = admitter(port, settings)
    assert admit(1000, "u-1").response["allowed"]
    cluster.proxy.black_hole()  # how many unanswered probes make it step aside: test_contact.py
    eventually(lambda: not port.status()["ready"], 10, "/readyz to turn unready")
    assert port.contact.shedding.is_set()
    assert port.status()["api_server"].startswith("the API server has not answered this replica for")
    before = len(cluster.ledger_requests())
    with pytest.raises(QuotaUnavailable, match=f"namespace {cluster.ns}: the API server has not answered"):
        admit(1000, "u-2")
    elsewhere = run(gpu_pod(1000, "no-quota-here"), settings, port, uid="u-3")
    assert elsewhere.response["allowed"]
    time.sleep(3)
    cluster.proxy.heal()
    healed = time.monotonic()
    eventually(lambda: port.status()["ready"], 15, "/readyz to turn ready again")
    assert len(cluster.ledger_requests()) == before  # u-2 was refused without a request that could hang
    assert not port.contact.shedding.is_set()
    print(f"\nhealed: ready again {time.monotonic() - healed:.1f} s after")
    assert admit(1000, "u-4").response["allowed"]


@pytest.mark.parametrize("mode", ["auto", "false"])
def test_quota_is_off_without_api_configuration(mode: str, tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    port = open_quota(Settings.from_env({"HAMI_QUOTA_ENABLED": mode}), Readiness())
    status = port.status()
    assert isinstance(port, QuotaOff) and status["ready"] and status["quota"] == "off"
    if mode == "auto":
        assert "no in-cluster config or kubeconfig" in status["reason"]
        assert "namespace device quota is off" in caplog.text


def test_required_quota_fails_clearly(tmp_path, monkeypatch, cluster: Cluster) -> None:
    required = Settings.from_env({"HAMI_QUOTA_ENABLED": "true"})
    unreachable = f"HAMI_QUOTA_ENABLED=true but the Kubernetes API at {cluster.proxy.url} cannot be used"
    cluster.proxy.stop()
    with pytest.raises(QuotaStartError, match=unreachable):
        open_quota(required, Readiness())
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(QuotaStartError, match="HAMI_QUOTA_ENABLED=true but no Kubernetes API configuration"):
        open_quota(required, Readiness())


def test_quota_enabled_setting_is_checked() -> None:
    with pytest.raises(SettingsError, match="HAMI_QUOTA_ENABLED: expected auto, true or false, got 'maybe'"):
        Settings.from_env({"HAMI_QUOTA_ENABLED": "maybe"})


def test_webhook_answers_http_500_when_quota_cannot_be_decided(cluster: Cluster, start_quota) -> None:
    """A non-200 lets the API server apply the configured failurePolicy
    (docs/rules.md#undecided-quota-is-an-error-never-an-admission); /readyz follows the feed."""
    cluster.quota({f"limits.{MEM}": "4000"})
    port, settings = start_quota(HAMI_QUOTA_STALE_AFTER="1")
    client = create_app(settings, port).test_client()
    assert client.get("/readyz").status_code == 200
    cluster.proxy.fail_next("GET", f"/leases/{cluster.ledger_name}$", 500, message="etcd is down")
    reply = client.post("/webhook", json=admission_review(gpu_pod(1000, cluster.ns), uid="u-1"))
    assert reply.status_code == 500
    message = (
        "namespace quota could not be decided: "
        f"quota ledger {cluster.home}/{cluster.ledger_name}: HTTP 500 Internal Server Error: etcd is down"
    )
    body = reply.get_json()
    assert (body["kind"], body["status"], body["code"], body["message"], body["error"]) == (
        "Status",
        "Failure",
        500,
        message,
        message,
    )
    cluster.proxy.stop()
    eventually(lambda: client.get("/readyz").status_code == 503, 10, "/readyz to fail")
    assert client.get("/readyz").get_json()["quota"]["ready"] is False


def test_native_sidecars_count_in_the_usage_of_running_pods(cluster: Cluster, start_quota) -> None:
    """The feed counts a stored Pod as admission does: a sidecar (init container with restartPolicy Always)
    runs beside the app container, so both hold GPU memory at once."""
    cluster.quota({f"limits.{MEM}": "100000"})
    port, _ = start_quota()
    obj = pod(container(limits={GPU: "1", MEM: "500"}), namespace=cluster.ns)
    obj["metadata"] = {"name": "with-sidecar"}
    obj["spec"]["initContainers"] = [container("proxy", limits={GPU: "1", MEM: "1000"}) | {"restartPolicy": "Always"}]
    cluster.create_pod(obj)
    eventually(lambda: in_use(port.feed, cluster.ns, {}) == {MEM: 1500, GPU: 2}, what="the sidecar Pod's usage")


def test_a_pod_consumes_only_its_own_namespaces_reservation(cluster: Cluster, start_quota, admitter) -> None:
    """A Pod elsewhere carrying this namespace's seal (a copied annotation) does not stand in for this namespace's
    admitted Pod: the seal binds its namespace, so its reservation keeps counting here, and none counts there."""
    elsewhere = unique("other")
    cluster.kube.namespace(elsewhere)
    try:
        cluster.quota({f"limits.{MEM}": "100000"})
        cluster.core.create_namespaced_resource_quota(elsewhere, resource_quota({f"limits.{MEM}": "100000"}, elsewhere))
        port, settings = start_quota()
        sealed = admitter(port, settings)(1000, "u-1").patched["metadata"]["annotations"][QUOTA_RESERVATION_ANNOTATION]
        copied = pod(container(limits={GPU: "1", MEM: "1000"}), annotations={QUOTA_RESERVATION_ANNOTATION: sealed})
        copied["metadata"] = {"name": "copied", "annotations": copied["metadata"]["annotations"]}
        cluster.core.create_namespaced_pod(elsewhere, copied)
        eventually(lambda: in_use(port.feed, elsewhere, {}) == {MEM: 1000, GPU: 1}, what="the Pod elsewhere")
        assert port.feed.pods.taken(elsewhere, "u-1") is None
        assert port.feed.pods.taken(cluster.ns, "u-1") is None
        assert in_use(port.feed, cluster.ns, {"u-1": {MEM: 1000}}) == {MEM: 1000}
    finally:
        cluster.kube.kubectl("delete", "namespace", "--wait=false", elsewhere)


def test_a_full_ledger_refuses_clearly_and_is_counted(cluster: Cluster, start_quota, admitter) -> None:
    """Entries leave the ledger as their Pods appear; admissions whose Pods never appear stay until their TTL.
    A ledger that cannot hold one more entry answers HTTP 500 with what happened, and the metric counts it."""
    cluster.quota({f"limits.{MEM}": str(10**9)})
    entries, expires = {}, time.time() + 600
    size = 0
    while size < MAX_LEDGER_BYTES - 60:  # room for no more than a few bytes
        # An entry takes about 80 bytes: filled in strides that never overshoot, so a few encodes, not thousands.
        for _ in range(max(1, (MAX_LEDGER_BYTES - 60 - size) // 120)):
            entries[f"lost-{len(entries):06d}-{'x' * 24}"] = Reserved(expires, {MEM: 1})
        size = len(encode(entries))
    lease = {
        "metadata": {"name": cluster.ledger_name, "labels": {"app.kubernetes.io/managed-by": "hami-webhook"},
                     "annotations": {LEDGER_ANNOTATION: encode(entries)}},
        "spec": {},
    }  # fmt: skip
    cluster.leases.create_namespaced_lease(cluster.home, lease)
    port, settings = start_quota()
    full = REGISTRY.get_sample_value("hami_webhook_quota_ledger_full_total", {"namespace": cluster.ns}) or 0
    with pytest.raises(QuotaUnavailable) as refused:
        admitter(port, settings)(1000, "one-too-many")
    assert str(refused.value) == (
        f"quota ledger {cluster.home}/{cluster.ledger_name} is full: {len(entries)} entries for admitted Pods not "
        f"seen yet fill the {MAX_LEDGER_BYTES} bytes one Lease can hold; they leave it as their Pods appear, or "
        "after HAMI_QUOTA_RESERVATION_TTL (60 s) if they never do"
    )
    assert REGISTRY.get_sample_value("hami_webhook_quota_ledger_full_total", {"namespace": cluster.ns}) == full + 1
    assert len(cluster.ledger()) == len(entries)


def test_a_served_replica_cut_off_closes_its_kept_alive_connections(cluster: Cluster, tmp_path) -> None:
    """The whole server (gunicorn, the project's worker): when its quota loses the API server, /readyz turns 503
    and an idle kept-alive connection is closed by the server, as on SIGTERM, so the API server reconnects
    through the Service to a ready replica; healed, it is ready again."""
    cluster.quota({f"limits.{MEM}": "4000"})
    pki = write_local(tmp_path, ["localhost", "127.0.0.1"])
    context = client_context(pki.ca_cert)
    port = free_port()
    proc = gunicorn(port, pki.cert, pki.key, HAMI_QUOTA_ENABLED="true", HAMI_NAMESPACE=cluster.home)
    try:
        wait_ready(port, context, proc, timeout=30)
        kept = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        kept.request("GET", "/readyz")
        answer = kept.getresponse()
        assert answer.status == 200 and answer.getheader("Connection") != "close"
        answer.read()
        cluster.proxy.black_hole()
        assert kept.sock is not None
        kept.sock.settimeout(10)  # a bound to stop waiting: how soon it steps aside is test_contact.py's count
        assert kept.sock.recv(1) == b""  # the server closed the idle connection
        fresh = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
        fresh.request("GET", "/readyz")
        unready = fresh.getresponse()
        assert unready.status == 503 and unready.getheader("Connection") == "close"
        assert "has not answered" in json.loads(unready.read())["quota"]["api_server"]
        kept.close()
        fresh.close()
        cluster.proxy.heal(reset=True)
        wait_ready(port, context, proc, timeout=15)
    finally:
        stop(proc)


def test_a_pod_reviewed_again_is_charged_once_and_a_copy_of_its_seal_is_charged(cluster: Cluster, start_quota) -> None:
    """kube-apiserver reviews a Pod again, with a new request uid, after a later webhook changed it: the seal the
    first review wrote makes it the same admission, charged once (docs/rules.md#charged-once-per-pod). The same
    seal presented by another requester, or by the same one once a Pod carrying it is stored, is charged."""
    cluster.quota({f"limits.{MEM}": "4000"})
    port, settings = start_quota()
    obj = gpu_pod(2000, cluster.ns)
    obj["metadata"]["name"] = "train"
    first = run(obj, settings, port, uid="call-1")
    sealed = first.patched["metadata"]["annotations"][QUOTA_RESERVATION_ANNOTATION]
    injected = json.loads(json.dumps(first.patched))
    injected["metadata"].setdefault("labels", {})["injected"] = "yes"  # what an injector after us changed
    injected["spec"]["containers"].append(container("proxy", limits={"cpu": "1"}))
    again = run(injected, settings, port, uid="call-2")
    assert again.response["allowed"]
    assert again.patched["metadata"]["annotations"][QUOTA_RESERVATION_ANNOTATION] == sealed
    assert {uid: entry["amounts"] for uid, entry in cluster.ledger().items()} == {"call-1": {MEM: 2000, GPU: 1}}
    stolen = run(injected, settings, port, uid="call-3", user="mallory")  # another requester: charged
    assert stolen.patched["metadata"]["annotations"][QUOTA_RESERVATION_ANNOTATION].startswith("call-3.")
    cluster.create_pod(injected)
    nonce = sealed.split(".")[1]
    eventually(lambda: port.feed.consumed(cluster.ns, "call-1", nonce), what="the stored Pod's seal counted")
    # the same requester and name once a Pod carrying the seal is stored: a copy, charged (and the room is full)
    assert denied(run(injected, settings, port, uid="call-4")) == (
        f"exceeding resource quota: namespace {cluster.ns} {MEM} used 4000 + requested 2000 > limit 4000"
    )


def test_a_pod_reviewed_again_with_a_larger_demand_is_charged_the_difference(cluster: Cluster, start_quota) -> None:
    """A later webhook that adds a device container makes the Pod ask more: its entry grows by the difference only,
    the Pod carries a seal for its whole demand, and once stored it takes the entry's room exactly
    (docs/rules.md#charged-once-per-pod). A difference that does not fit is refused on the difference."""
    cluster.quota({f"limits.{MEM}": "4000"})
    port, settings = start_quota()
    obj = gpu_pod(2000, cluster.ns)
    obj["metadata"]["name"] = "train"
    first = run(obj, settings, port, uid="call-1")
    grown = json.loads(json.dumps(first.patched))
    grown["spec"]["containers"].append(container("helper", limits={GPU: "1", MEM: "1000"}))
    again = run(grown, settings, port, uid="call-2")
    assert again.response["allowed"]
    sealed = again.patched["metadata"]["annotations"][QUOTA_RESERVATION_ANNOTATION]
    assert (
        sealed.startswith("call-1.")
        and sealed != first.patched["metadata"]["annotations"][QUOTA_RESERVATION_ANNOTATION]
    )
    ledger = cluster.ledger()
    assert {uid: entry["amounts"] for uid, entry in ledger.items()} == {"call-1": {MEM: 3000, GPU: 2}}
    assert ledger["call-1"]["uids"] == tag("call-2")
    assert (
        run(grown, settings, port, uid="call-2")
        .patched["metadata"]["annotations"][QUOTA_RESERVATION_ANNOTATION]
        .startswith("call-1.")
    )  # the API server sending the second call again: listed, charged once
    assert cluster.ledger()["call-1"]["amounts"] == {MEM: 3000, GPU: 2}
    cluster.create_pod(again.patched)
    nonce = sealed.split(".")[1]
    eventually(lambda: port.feed.consumed(cluster.ns, "call-1", nonce), what="the grown Pod counted against its entry")
    assert run(gpu_pod(1000, cluster.ns), settings, port, uid="call-3").response["allowed"]  # 3000 + 1000: full
    assert denied(run(gpu_pod(1000, cluster.ns), settings, port, uid="call-4")) == (
        f"exceeding resource quota: namespace {cluster.ns} {MEM} used 4000 + requested 1000 > limit 4000"
    )
