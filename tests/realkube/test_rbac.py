"""The shipped RBAC, enforced by a real RBAC authorizer: each ServiceAccount can do its job and no more.

Tokens come from the TokenRequest API (`kubectl create token`), as a Pod's projected token would.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from testbed.install import (
    CA_SECRET,
    CONFIGURATION,
    NAMESPACE,
    SECRET,
    Installed,
    get,
    job_commands,
    rendered,
    run_certgen,
)

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


def forbidden(call: Callable[[], Any]) -> str:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 403, caught.value
    return str(json.loads(caught.value.body)["message"])


@pytest.fixture
def as_webhook(installed: Installed) -> Iterator[client.ApiClient]:
    with config.new_client_from_config(config_file=installed.webhook_kubeconfig) as api:
        yield api


def test_certgen_account_recreates_and_updates_its_secrets(installed: Installed) -> None:
    """create (a deleted serving Secret) and update (changed hosts) with the Job's own token; same CA."""
    kube = installed.kube
    ca_version = get(kube, "secret", CA_SECRET, namespace=NAMESPACE)["metadata"]["resourceVersion"]
    kube.kubectl("delete", "secret", SECRET, "-n", NAMESPACE)
    create_argv, *patch_argvs = job_commands(rendered())  # create, then patch each configuration's caBundle
    done = run_certgen(installed.certgen_kubeconfig, *create_argv[1:])
    assert done.returncode == 0, done.stderr
    recreated = get(kube, "secret", SECRET, namespace=NAMESPACE)
    assert recreated["type"] == "kubernetes.io/tls"
    assert recreated["data"]["ca.crt"] == installed.ca_bundle

    hosts = next(a for a in create_argv if a.startswith("--host="))
    done = run_certgen(installed.certgen_kubeconfig, *[a for a in create_argv[1:] if a != hosts], hosts + ",127.0.0.1")
    assert done.returncode == 0, done.stderr
    updated = get(kube, "secret", SECRET, namespace=NAMESPACE)
    assert updated["metadata"]["uid"] == recreated["metadata"]["uid"]
    assert updated["data"]["tls.crt"] != recreated["data"]["tls.crt"]
    assert get(kube, "secret", CA_SECRET, namespace=NAMESPACE)["metadata"]["resourceVersion"] == ca_version

    for argv in (create_argv, *patch_argvs):  # back to what the Job makes; caBundle never changed
        done = run_certgen(installed.certgen_kubeconfig, *argv[1:])
        assert done.returncode == 0, done.stderr
    (hook,) = get(kube, "mutatingwebhookconfiguration", CONFIGURATION)["webhooks"]
    assert hook["clientConfig"]["caBundle"] == installed.ca_bundle


def test_certgen_account_cannot_write_outside_its_grant(installed: Installed) -> None:
    kube, token = installed.kube, installed.certgen_kubeconfig
    other = f"e2e-other-{uuid.uuid4().hex[:8]}"
    kube.kubectl("create", "secret", "generic", other, "-n", NAMESPACE, "--from-literal=k=v")
    kube.kubectl("create", "configmap", other, "-n", "default")

    def as_certgen(*args: str, stdin: str | None = None) -> str:
        done = kube.kubectl(*args, kubeconfig=token, stdin=stdin, check=False)
        assert done.returncode == 1, done.stdout
        return done.stderr

    sa = "system:serviceaccount:hami-system:hami-webhook-certgen"
    assert f'User "{sa}" cannot get resource "secrets" in API group "" in the namespace "hami-system"' in as_certgen(
        "get", "secret", other, "-n", NAMESPACE
    )
    replacement = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": other, "namespace": NAMESPACE}}
    assert "cannot update resource" in as_certgen("replace", "-f", "-", stdin=json.dumps(replacement))
    assert "cannot delete resource" in as_certgen("delete", "secret", other, "-n", NAMESPACE)
    assert 'cannot create resource "secrets" in API group "" in the namespace "default"' in as_certgen(
        "create", "secret", "generic", other, "-n", "default", "--from-literal=k=v"
    )
    assert 'cannot list resource "secrets"' in as_certgen("get", "secrets", "-n", NAMESPACE)
    assert 'cannot get resource "configmaps"' in as_certgen("get", "configmap", other, "-n", "default")

    # Another webhook configuration: certgen itself reports the 403 and exits 1.
    kube.kubectl("create", "-f", "-", stdin=json.dumps(inert_configuration(other)))
    try:
        done = run_certgen(token, "failure-policy", "Ignore", "--webhook-name", other)
        assert done.returncode == 1
        assert "403" in done.stderr and "Forbidden" in done.stderr and "Traceback" not in done.stderr
        assert "cannot get resource" in as_certgen("get", "mutatingwebhookconfiguration", other)
    finally:
        kube.kubectl("delete", "mutatingwebhookconfiguration", other)


def inert_configuration(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "inert.e2e.hami.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "clientConfig": {"url": "https://127.0.0.1:1/never"},
                "namespaceSelector": {"matchLabels": {"e2e": name}},
            }
        ],
    }


def test_webhook_account_reads_pods_quotas_nodes_and_keeps_leases(
    installed: Installed, as_webhook: client.ApiClient
) -> None:
    core = client.CoreV1Api(as_webhook)
    leases = client.CoordinationV1Api(as_webhook)
    assert core.list_pod_for_all_namespaces(limit=1).kind == "PodList"
    assert core.list_resource_quota_for_all_namespaces().kind == "ResourceQuotaList"
    assert core.list_node(limit=1).kind == "NodeList"  # the device inventory: Nodes' annotations, list + watch
    for list_call in (core.list_pod_for_all_namespaces, core.list_resource_quota_for_all_namespaces, core.list_node):
        for event in watch.Watch().stream(list_call, timeout_seconds=1):  # a 403 would raise ApiException
            assert event["type"] in ("ADDED", "MODIFIED", "DELETED")

    admission = client.AdmissionregistrationV1Api(as_webhook)  # the failure policy's gauge, every 30 s
    assert admission.read_mutating_webhook_configuration(CONFIGURATION).webhooks[0].failure_policy == "Fail"
    assert leases.list_namespaced_lease(NAMESPACE).kind == "LeaseList"  # the ledgers' cache: list + watch
    for event in watch.Watch().stream(leases.list_namespaced_lease, NAMESPACE, timeout_seconds=1):
        assert event["type"] in ("ADDED", "MODIFIED", "DELETED")

    name = f"hami-quota-e2e-{uuid.uuid4().hex[:8]}"
    body = {"metadata": {"name": name, "annotations": {"hami.io/quota-ledger": "{}"}}, "spec": {}}
    created = leases.create_namespaced_lease(NAMESPACE, body)
    got = leases.read_namespaced_lease(name, NAMESPACE)
    got.metadata.annotations["hami.io/quota-ledger"] = '{"uid": 1}'
    updated = leases.replace_namespaced_lease(name, NAMESPACE, got)
    assert updated.metadata.resource_version != created.metadata.resource_version
    stale = got  # compare-and-swap: a write with the old resourceVersion is a 409, not a 403
    with pytest.raises(ApiException) as conflict:
        leases.replace_namespaced_lease(name, NAMESPACE, stale)
    assert conflict.value.status == 409


def test_webhook_account_cannot_do_more(installed: Installed, as_webhook: client.ApiClient) -> None:
    core = client.CoreV1Api(as_webhook)
    leases = client.CoordinationV1Api(as_webhook)
    admission = client.AdmissionregistrationV1Api(as_webhook)
    sa = "system:serviceaccount:hami-system:hami-webhook"
    lease = {"metadata": {"name": "hami-quota-x"}, "spec": {}}
    checks: dict[str, Callable[[], Any]] = {
        "get one pod": lambda: core.read_namespaced_pod("any", "default"),
        "patch a node": lambda: core.patch_node("any", {"metadata": {"annotations": {"x": "y"}}}),
        "get one node": lambda: core.read_node("any"),
        "list secrets": lambda: core.list_namespaced_secret(NAMESPACE),
        "read its TLS secret": lambda: core.read_namespaced_secret(SECRET, NAMESPACE),
        "lease elsewhere": lambda: leases.create_namespaced_lease("default", lease),
        "delete a lease": lambda: leases.delete_namespaced_lease("hami-quota-x", NAMESPACE),
        "patch a lease": lambda: leases.patch_namespaced_lease("hami-quota-x", NAMESPACE, {"metadata": {}}),
        "list leases elsewhere": lambda: leases.list_namespaced_lease("default"),
        "watch leases everywhere": lambda: leases.list_lease_for_all_namespaces(watch=True, timeout_seconds=1),
        "rewrite device config": lambda: core.patch_namespaced_config_map(
            "hami-device-config", NAMESPACE, {"data": {"device-config.yaml": "{}"}}
        ),
        # It reads its own configuration's failurePolicy (the gauge), no other, and changes none.
        "edit its configuration": lambda: admission.patch_mutating_webhook_configuration(
            CONFIGURATION, {"metadata": {}}
        ),
        "list configurations": lambda: admission.list_mutating_webhook_configuration(),
        "create pods": lambda: core.create_namespaced_pod(
            "default", {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        ),
    }
    for what, call in checks.items():
        message = forbidden(call)
        assert f'User "{sa}" cannot' in message, (what, message)
