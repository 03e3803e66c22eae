"""`certgen patch` and `certgen failure-policy` against the real API server, through the FaultyProxy `api`.

Rules: docs/rules.md#certgen-patch-touches-only-the-cabundle, #the-emergency-switch-sets-every-webhook.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from certgen import resources
from testbed.cluster import RealKube
from tests.certgen.helpers import (
    HOSTS,
    MUTATING,
    SECRET,
    VALIDATING,
    Certgen,
    Cluster,
    issue,
    json_lines,
    read_secret,
    requests_to,
    secret,
    seed_secrets,
    webhook,
    webhook_configuration,
)
from tests.realkube.faults import FaultyProxy

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

MATERIAL = issue(HOSTS, now=datetime.now(UTC))


@pytest.fixture
def patch(cluster: Cluster) -> tuple[str, ...]:
    """`certgen patch` for the test's namespace and webhook configuration."""
    return ("patch", "--namespace", cluster.namespace, "--secret-name", SECRET, "--webhook-name", cluster.webhook)


@pytest.fixture
def bundle_b64(cluster: Cluster) -> str:
    """Seed the Secrets `create` would have written; return the Secret's base64 ``ca.crt``."""
    seed_secrets(cluster, MATERIAL)
    return read_secret(cluster)["data"]["ca.crt"]


def configuration(cluster: Cluster, webhooks: list[dict[str, Any]], kind: str = MUTATING) -> dict[str, Any]:
    """Create the test's webhook configuration of `kind` on the server; the stored object."""
    return cluster.create(webhook_configuration(cluster.webhook, webhooks, kind))


def _without(obj: dict[str, Any], *webhook_fields: str) -> dict[str, Any]:
    """`obj` without server-managed metadata and the named webhook fields, for comparing the rest."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "generation", "managedFields")}
    webhooks = []
    for entry in obj["webhooks"]:
        entry = {k: v for k, v in entry.items() if k not in webhook_fields}
        entry["clientConfig"] = {k: v for k, v in entry["clientConfig"].items() if k not in webhook_fields}
        webhooks.append(entry)
    return {**obj, "metadata": meta, "webhooks": webhooks}


def test_patch_sets_the_bundle_on_every_webhook(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, patch: tuple[str, ...], bundle_b64: str
) -> None:
    before = configuration(
        cluster,
        [
            webhook("vgpu.hami.io", reinvocationPolicy="IfNeeded"),
            webhook("mlu.hami.io", clientConfig={"url": "https://example.test/webhook", "caBundle": "b2xk"}),
            webhook("dcu.hami.io", failurePolicy="Ignore", matchPolicy="Exact"),
        ],
    )

    run = certgen(*patch)
    assert run.code == 0, run.stderr
    after = cluster.configuration()
    assert [w["clientConfig"]["caBundle"] for w in after["webhooks"]] == [bundle_b64] * 3
    assert _without(after, "caBundle") == _without(before, "caBundle"), "only caBundle changes"
    assert [w["failurePolicy"] for w in after["webhooks"]] == ["Fail", "Fail", "Ignore"]

    [put] = api.writes()
    assert (
        put.method == "PUT"
        and put.path == f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{cluster.webhook}"
    )
    assert put.json()["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert not requests_to(api, "validatingwebhookconfigurations")
    assert not requests_to(api, "v1beta1")
    assert (
        sum(
            run.has("webhook changed", f"webhook={name}", "ca_bundle=updated")
            for name in ("vgpu.hami.io", "mlu.hami.io", "dcu.hami.io")
        )
        == 3
    )
    assert run.has("updated MutatingWebhookConfiguration", f"name={cluster.webhook}")


def test_second_patch_writes_nothing(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, patch: tuple[str, ...], bundle_b64: str
) -> None:
    configuration(cluster, [webhook("a.hami.io"), webhook("b.hami.io")])
    assert certgen(*patch).code == 0
    before, writes = cluster.configuration(), len(api.writes())

    run = certgen(*patch)
    assert run.code == 0
    assert cluster.configuration() == before
    assert len(api.writes()) == writes
    assert run.has("already up to date, not written")


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_patch_failure_policy_is_written(
    certgen: Certgen, cluster: Cluster, patch: tuple[str, ...], bundle_b64: str, policy: str
) -> None:
    configuration(
        cluster,
        [
            webhook("a.hami.io", failurePolicy="Fail"),
            webhook("b.hami.io", failurePolicy="Ignore"),
            webhook("c.hami.io"),
        ],
    )
    run = certgen(*patch, "--patch-failure-policy", policy)
    assert run.code == 0, run.stderr
    after = cluster.configuration()
    assert [w["failurePolicy"] for w in after["webhooks"]] == [policy] * 3
    assert {w["clientConfig"]["caBundle"] for w in after["webhooks"]} == {bundle_b64}
    other = "Ignore" if policy == "Fail" else "Fail"
    assert run.has("webhook changed", f'failure_policy="{other} -> {policy}"')


def test_patch_waits_until_the_configuration_appears(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, patch: tuple[str, ...], bundle_b64: str
) -> None:
    seen = []

    def appear_on_third_get(_: RealKube) -> None:
        seen.append(1)
        if len(seen) == 3:
            configuration(cluster, [webhook("a.hami.io")])

    api.before("GET", f"/mutatingwebhookconfigurations/{cluster.webhook}$", appear_on_third_get, times=3)
    run = certgen(*patch, "--timeout", "20s")
    assert run.code == 0, run.stderr
    assert len(requests_to(api, "/mutatingwebhookconfigurations/", "GET")) == 3
    assert cluster.configuration()["webhooks"][0]["clientConfig"]["caBundle"] == bundle_b64
    assert run.has("not found yet, waiting")


def test_patch_times_out_when_the_configuration_never_appears(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, patch: tuple[str, ...], bundle_b64: str
) -> None:
    run = certgen(*patch, "--timeout", "1s")
    assert run.code == 1
    # backing off 0.5 s, then 1 s, a one-second wait reads at most three times, then gives up
    assert 1 <= len(requests_to(api, "/mutatingwebhookconfigurations/", "GET")) <= 3
    assert run.has("[ERROR]", f"MutatingWebhookConfiguration '{cluster.webhook}' not found after waiting")
    assert not api.writes()


def test_patch_validating_only(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, patch: tuple[str, ...], bundle_b64: str
) -> None:
    configuration(cluster, [webhook("v.hami.io")], VALIDATING)
    run = certgen(*patch, "--patch-mutating=false", "--patch-validating")
    assert run.code == 0, run.stderr
    assert cluster.configuration(VALIDATING)["webhooks"][0]["clientConfig"]["caBundle"] == bundle_b64
    assert not requests_to(api, "mutatingwebhookconfigurations")


def test_patch_both_kinds(certgen: Certgen, cluster: Cluster, patch: tuple[str, ...], bundle_b64: str) -> None:
    configuration(cluster, [webhook("m.hami.io")])
    configuration(cluster, [webhook("v.hami.io")], VALIDATING)
    run = certgen(*patch, "--patch-validating=true", "--patch-failure-policy", "Ignore")
    assert run.code == 0, run.stderr
    for which in (MUTATING, VALIDATING):
        [entry] = cluster.configuration(which)["webhooks"]
        assert entry["clientConfig"]["caBundle"] == bundle_b64 and entry["failurePolicy"] == "Ignore"


def test_patch_rereads_after_a_conflict(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, patch: tuple[str, ...], bundle_b64: str
) -> None:
    configuration(cluster, [webhook("a.hami.io")])

    def concurrent_label(_: RealKube) -> None:
        current = cluster.configuration()
        current["metadata"]["labels"]["touched"] = "yes"
        cluster.replace(current)

    api.before("PUT", "/mutatingwebhookconfigurations/", concurrent_label)
    run = certgen(*patch)
    assert run.code == 0, run.stderr
    after = cluster.configuration()
    assert after["metadata"]["labels"]["touched"] == "yes", "the concurrent change is not overwritten"
    assert after["webhooks"][0]["clientConfig"]["caBundle"] == bundle_b64
    assert len(requests_to(api, "/mutatingwebhookconfigurations/", "PUT")) == 2


def test_patch_reads_the_kube_webhook_certgen_key(certgen: Certgen, cluster: Cluster, patch: tuple[str, ...]) -> None:
    stored = cluster.create(
        secret(SECRET, {"ca": MATERIAL.bundle, "cert": MATERIAL.cert, "key": MATERIAL.key}, "Opaque")
    )
    configuration(cluster, [webhook("a.hami.io")])
    run = certgen(*patch)
    assert run.code == 0, run.stderr
    assert cluster.configuration()["webhooks"][0]["clientConfig"]["caBundle"] == stored["data"]["ca"]
    assert run.has("using the kube-webhook-certgen CA key", "key=ca")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (None, f"Secret {{namespace}}/{SECRET} not found"),
        ({"tls.crt": MATERIAL.cert}, "has no CA certificate under key 'ca.crt' (keys present: tls.crt)"),
        ({"ca.crt": b"not a certificate"}, "has no CA certificate under key 'ca.crt'"),
    ],
    ids=["secret-missing", "ca-key-missing", "ca-garbage"],
)
def test_patch_fails_without_a_ca(
    certgen: Certgen,
    api: FaultyProxy,
    cluster: Cluster,
    patch: tuple[str, ...],
    data: dict[str, bytes] | None,
    expected: str,
) -> None:
    if data is not None:
        cluster.create(secret(SECRET, data, "Opaque"))
    configuration(cluster, [webhook("a.hami.io")])
    run = certgen(*patch)
    assert run.code == 1
    assert run.has("[ERROR]", expected.format(namespace=cluster.namespace))
    assert not api.writes()


def test_patch_forbidden_read_exits_1(
    certgen: Certgen, cluster: Cluster, patch: tuple[str, ...], bundle_b64: str, tmp_path: Path
) -> None:
    """A ServiceAccount that may read the Secrets but not the configuration: RBAC refuses the GET."""
    configuration(cluster, [webhook("a.hami.io")])
    kubeconfig = cluster.kube.account(
        cluster.namespace, "certgen", tmp_path / "secrets-only.kubeconfig", "--verb=get", "--resource=secrets"
    )
    run = certgen("--log-format", "json", *patch, "--kubeconfig", kubeconfig)
    assert run.code == 1
    [error] = [record["msg"] for record in json_lines(run.stderr) if record["level"] == "error"]
    user = f"system:serviceaccount:{cluster.namespace}:certgen"
    assert error == (
        f"read MutatingWebhookConfiguration {cluster.webhook}: HTTP 403 Forbidden: mutatingwebhookconfigurations"
        f'.admissionregistration.k8s.io "{cluster.webhook}" is forbidden: User "{user}" cannot get resource'
        ' "mutatingwebhookconfigurations" in API group "admissionregistration.k8s.io" at the cluster scope'
    )


def test_patch_server_error_on_the_write_exits_1(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster, patch: tuple[str, ...], bundle_b64: str
) -> None:
    configuration(cluster, [webhook("a.hami.io")])
    api.fail_next("PUT", "/mutatingwebhookconfigurations/", 500, message="nope")
    run = certgen(*patch)
    assert run.code == 1
    assert run.has("[ERROR]", "HTTP 500 InternalError", "nope")


# --- failure-policy ---------------------------------------------------------------------------


def test_failure_policy_flip_and_back(certgen: Certgen, api: FaultyProxy, cluster: Cluster) -> None:
    before = configuration(
        cluster,
        [
            webhook("a.hami.io", failurePolicy="Fail", clientConfig={"url": "https://x.test/", "caBundle": "Y2E="}),
            webhook("b.hami.io", failurePolicy="Ignore"),
        ],
    )

    run = certgen("failure-policy", "Ignore", "--webhook-name", cluster.webhook)
    assert run.code == 0, run.stderr
    flipped = cluster.configuration()
    assert [w["failurePolicy"] for w in flipped["webhooks"]] == ["Ignore", "Ignore"]
    assert _without(flipped, "failurePolicy") == _without(before, "failurePolicy"), "caBundle and the rest untouched"
    assert run.has("webhook changed", "webhook=a.hami.io", 'failure_policy="Fail -> Ignore"')
    assert run.has("webhook unchanged", "webhook=b.hami.io", "failure_policy=Ignore")

    writes = len(api.writes())
    again = certgen("failure-policy", "Ignore", "--webhook-name", cluster.webhook)
    assert again.code == 0 and len(api.writes()) == writes and cluster.configuration() == flipped

    back = certgen("failure-policy", "Fail", "--webhook-name", cluster.webhook)
    assert back.code == 0
    assert [w["failurePolicy"] for w in cluster.configuration()["webhooks"]] == ["Fail", "Fail"]
    assert back.has('failure_policy="Ignore -> Fail"', "webhook=b.hami.io")


def test_failure_policy_on_validating_kind(certgen: Certgen, cluster: Cluster) -> None:
    configuration(cluster, [webhook("v.hami.io")], VALIDATING)
    run = certgen("failure-policy", "Ignore", "--webhook-name", cluster.webhook, "--kind", "validating")
    assert run.code == 0
    assert cluster.configuration(VALIDATING)["webhooks"][0]["failurePolicy"] == "Ignore"


def test_failure_policy_missing_configuration_fails_at_once(
    certgen: Certgen, api: FaultyProxy, cluster: Cluster
) -> None:
    run = certgen("failure-policy", "Ignore", "--webhook-name", cluster.webhook)
    assert run.code == 1 and len(requests_to(api, "/mutatingwebhookconfigurations/", "GET")) == 1  # no waiting
    assert run.has("[ERROR]", "not found")


@pytest.mark.parametrize(
    ("entry", "policy", "old", "changed"),
    [
        ({"name": "w"}, "Fail", "Fail", False),
        ({"name": "w"}, "Ignore", "Fail", True),
        ({"name": "w", "failurePolicy": "Ignore"}, "Ignore", "Ignore", False),
        ({"name": "w", "failurePolicy": "Ignore"}, None, "Ignore", False),
    ],
    ids=["missing-is-fail", "missing-to-ignore", "same", "policy-untouched"],
)
def test_missing_failure_policy_counts_as_fail(
    entry: dict[str, Any], policy: str | None, old: str, changed: bool
) -> None:
    """The API server always stores a policy, so this case is only reachable as a plain dict."""
    [desired], [change] = resources.desired_webhooks([entry], None, policy)
    assert (change.old_policy, change.changed) == (old, changed)
    assert desired == (entry if not changed else {**entry, "failurePolicy": policy})
