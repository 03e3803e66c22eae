"""The check's judgements that a healthy test cluster cannot stage on cue: certificates near or past their end, a
webhook that refuses the dry run (the path works), the standby condition, a policy installed but unbound, a
scheduler's Lease gone stale, and what the caller may not read. The faults a real server shows are proven against
one (tests/realkube/test_check.py); these cases feed the pure core what such a server would have answered."""

from __future__ import annotations

import base64
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.check.core import (
    CONFIGURATION,
    WEBHOOK,
    DryRun,
    Level,
    Served,
    Snapshot,
    Unread,
    passes,
    run,
    switched_since,
)
from certgen.certificates import KeyType, cert_pem, issue_ca

NOW = datetime(2026, 12, 7, 4, 0, tzinfo=UTC)


def bundle(days: float) -> str:
    ca = issue_ca(KeyType.ECDSA_P256, timedelta(days=days), NOW - timedelta(days=1))
    return base64.b64encode(cert_pem(ca.cert)).decode()


def configuration(**hook: Any) -> dict[str, Any]:
    webhook = {
        "name": WEBHOOK,
        "failurePolicy": "Fail",
        "clientConfig": {"service": {"namespace": "hami-system", "name": "hami-webhook"}, "caBundle": bundle(3650)},
        "namespaceSelector": {
            "matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]
        },
    } | hook
    return {"metadata": {"name": CONFIGURATION, "creationTimestamp": "2026-12-01T00:00:00Z"}, "webhooks": [webhook]}


GPU_POD = {"metadata": {"annotations": {"hami.io/gpu-type": "NVIDIA"}}, "spec": {"schedulerName": "hami-scheduler"}}
CPU_POD = {"metadata": {}, "spec": {"schedulerName": "default-scheduler"}}
POLICY = {"spec": {"variables": [{"name": "scheduler", "expression": "'hami-scheduler'"}]}}
LEASE = {
    "metadata": {"name": "hami-scheduler", "namespace": "hami-system"},
    "spec": {"holderIdentity": "s-0", "renewTime": "2026-12-07T03:59:50.000000Z", "leaseDurationSeconds": 15},
}
HEALTHY = Snapshot(
    namespace="team-a",
    now=NOW.timestamp(),
    default_scheduler="hami-scheduler",
    configuration=configuration(),
    configurations=[configuration()],
    namespace_object={"metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a"}}},
    service={"spec": {"clusterIP": "10.96.0.10"}},
    endpoint_slices=[{"endpoints": [{"addresses": ["10.244.0.10"], "conditions": {"ready": True}}]}],
    deployment={"spec": {"replicas": 1}, "status": {"readyReplicas": 1}},
    policies={"hami-webhook-routed": POLICY, "hami-webhook-reviewed": POLICY},
    bindings={"hami-webhook-routed": {}, "hami-webhook-reviewed": {}},
    leases=[LEASE],
    nodes=[{"metadata": {"name": "n1", "annotations": {"hami.io/node-nvidia-register": "[]"}}}],
    gpu=DryRun(GPU_POD),
    cpu=DryRun(CPU_POD),
    served=Served("10.96.0.10:443", True, "", (NOW + timedelta(days=365)).timestamp()),
    quota_access={"list pods": True},
)


def judged(snapshot: Snapshot, check: str) -> tuple[Level, str, str]:
    (found,) = [f for f in run(snapshot) if f.check == check]
    return found.level, found.message, found.fix


def test_the_healthy_snapshot_passes_every_check() -> None:
    assert [(f.check, f.level) for f in run(HEALTHY) if f.level is not Level.OK] == []
    assert passes(run(HEALTHY))


CASES = {
    "ca-expires-within-7-days": (
        replace(HEALTHY, configuration=configuration(clientConfig={"caBundle": bundle(5)})),
        "certificate", Level.WARNING, "expires within 7 days: caBundle CA valid until 2026-12-11",
    ),
    "served-certificate-expired": (
        replace(HEALTHY, served=Served("10.96.0.10:443", True, "", (NOW - timedelta(hours=1)).timestamp())),
        "certificate", Level.FAILURE, "expired: caBundle CA valid until",
    ),
    "unreadable-ca-bundle": (
        replace(HEALTHY, configuration=configuration(clientConfig={"caBundle": "bm90IGEgY2VydA=="})),
        "certificate", Level.FAILURE, "pods.hami.io has an unreadable caBundle",
    ),
    "webhook-refuses-the-dry-run": (
        replace(HEALTHY, gpu=DryRun(None, 'admission webhook "pods.hami.io" denied the request: quota exceeded')),
        "path", Level.WARNING, "reached the webhook, which refused it: admission webhook",
    ),
    "floor-routes-without-the-webhook": (
        replace(HEALTHY, gpu=DryRun({"metadata": {}, "spec": {"schedulerName": "hami-scheduler"}})),
        "path", Level.FAILURE, "comes back for hami-scheduler and unmarked",
    ),
    "standby": (
        replace(HEALTHY, configuration=configuration(matchConditions=[{"name": "standby", "expression": "false"}])),
        "configuration", Level.FAILURE, "pods.hami.io is on standby (matchCondition standby): never called",
    ),
    "routed-unbound": (
        replace(HEALTHY, bindings={"hami-webhook-reviewed": {}}),
        "policies", Level.WARNING, "installed but not bound: hami-webhook-routed",
    ),
    "scheduler-lease-stale": (
        replace(HEALTHY, now=NOW.timestamp() + 600),
        "scheduler", Level.WARNING, "no scheduler holds a Lease hami-scheduler renewed lately",
    ),
    "one-replica-of-two-ready": (
        replace(HEALTHY, deployment={"spec": {"replicas": 2}, "status": {"readyReplicas": 1}}),
        "endpoints", Level.WARNING, "1 ready endpoints, but Deployment hami-webhook: 1 of 2 replicas ready",
    ),
    "nodes-unreadable": (
        replace(HEALTHY, nodes=Unread('nodes is forbidden: User "alice" cannot list resource "nodes"')),
        "nodes", Level.WARNING, 'cannot read the Nodes: nodes is forbidden: User "alice"',
    ),
    "quota-rbac-missing": (
        replace(HEALTHY, quota_access={"list pods": True, "update leases in hami-system": False}),
        "quota", Level.FAILURE, "may not update leases in hami-system",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_each_judgement(case: str) -> None:
    snapshot, check, level, says = CASES[case]
    found_level, message, fix = judged(snapshot, check)
    assert (found_level, says in message) == (level, True), message
    assert fix or level is Level.OK or check == "path"


def test_the_switch_is_dated_by_the_field_manager_that_set_ignore() -> None:
    switched = configuration(failurePolicy="Ignore")
    key = f'k:{{"name":"{WEBHOOK}"}}'
    switched["metadata"]["managedFields"] = [
        {"manager": "kubectl-client-side-apply", "time": "2026-12-01T00:00:00Z", "fieldsV1": {"f:webhooks": {}}},
        {"manager": "kubectl-patch", "time": "2026-12-07T01:00:00Z",
         "fieldsV1": {"f:webhooks": {key: {"f:failurePolicy": {}}}}},
    ]  # fmt: skip
    assert switched_since(switched) == datetime(2026, 12, 7, 1, tzinfo=UTC).timestamp()
    assert switched_since(configuration()) is None
    del switched["metadata"]["managedFields"]  # applied with Ignore: since it was made
    assert switched_since(switched) == datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    level, message, fix = judged(replace(HEALTHY, configuration=configuration(failurePolicy="Ignore")), "configuration")
    assert level is Level.FAILURE and "since 2026-12-01T00:00:00Z (6d ago)" in message
    assert fix.startswith("scripts/emergency-failure-policy.sh Fail")
