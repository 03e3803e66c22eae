"""API semantics the product and tests/kubeapi rely on, asserted against the real kube-apiserver 1.20.2.

Each test pins what tests/kubeapi answers too (tests/kubeapi/test_crud.py, test_quantity.py), so the fake
cannot drift from the real server unnoticed. See tests/realkube/README.md for the known differences.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.certgen.helpers import issue
from tests.kubeapi.test_admission import Webhook
from tests.kubeapi.test_crud import first_page_then_changes, lease, status
from tests.kubeapi.test_quantity import CANONICAL
from tests.realkube.cluster import LOOPBACK, RealKube

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def api(real_kube: RealKube) -> Iterator[client.ApiClient]:
    configuration = client.Configuration()
    config.load_kube_config(config_file=real_kube.kubeconfig_path, client_configuration=configuration)
    with client.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture
def ns(api: client.ApiClient) -> str:
    name = f"api-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


def test_quantities_are_stored_in_canonical_form(api: client.ApiClient, ns: str) -> None:
    """The same table tests/kubeapi/quantity.py is checked against, through a server-side dry run."""
    texts = [t for t in CANONICAL if not t.startswith("-")]  # a negative cpu limit is refused by validation
    containers = [{"name": f"c{i}", "image": "x", "resources": {"limits": {"cpu": t}}} for i, t in enumerate(texts)]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"}, "spec": {"containers": containers}}
    created = client.CoreV1Api(api).create_namespaced_pod(ns, pod, dry_run="All", _preload_content=False)
    stored = [c["resources"]["limits"]["cpu"] for c in json.loads(created.data)["spec"]["containers"]]
    assert dict(zip(texts, stored, strict=True)) == {t: CANONICAL[t] for t in texts}
    pod["spec"]["containers"] = [{"name": "c", "image": "x", "resources": {"limits": {"cpu": "1x"}}}]
    with pytest.raises(ApiException) as bad:
        client.CoreV1Api(api).create_namespaced_pod(ns, pod)
    assert bad.value.status == 400
    message = status(bad.value)["message"]
    assert message.startswith('Pod in version "v1" cannot be handled as a Pod: ')
    assert "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'" in message


def test_lease_updates_need_a_resource_version(api: client.ApiClient, ns: str) -> None:
    leases = client.CoordinationV1Api(api)
    created = api.sanitize_for_serialization(leases.create_namespaced_lease(ns, lease("l", ns)))
    unconditional = {**created, "metadata": {k: v for k, v in created["metadata"].items() if k != "resourceVersion"}}
    with pytest.raises(ApiException) as invalid:
        leases.replace_namespaced_lease("l", ns, unconditional)
    assert invalid.value.status == 422
    assert status(invalid.value)["message"] == (
        'leases.coordination.k8s.io "l" is invalid: metadata.resourceVersion: Invalid value: 0x0: '
        "must be specified for an update"
    )
    leases.replace_namespaced_lease("l", ns, created)


def test_update_of_a_deleted_lease(api: client.ApiClient, ns: str) -> None:
    leases = client.CoordinationV1Api(api)
    created = api.sanitize_for_serialization(leases.create_namespaced_lease(ns, lease("l", ns)))
    leases.delete_namespaced_lease("l", ns)
    with pytest.raises(ApiException) as conflict:
        leases.replace_namespaced_lease("l", ns, created)
    assert (conflict.value.status, status(conflict.value)["reason"]) == (409, "Conflict")
    assert status(conflict.value)["message"] == (
        f'Operation cannot be fulfilled on leases.coordination.k8s.io "l": StorageError: invalid object, Code: 4, '
        f"Key: /registry/leases/{ns}/l, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: "
        f"UID in precondition: {created['metadata']['uid']}, UID in object meta: "
    )
    # Without a uid the PUT creates the Lease (Leases allow create on update; ConfigMaps do not).
    recreated = leases.replace_namespaced_lease("l", ns, lease("l", ns, resourceVersion="1"), _preload_content=False)
    assert recreated.status == 201 and json.loads(recreated.data)["metadata"]["uid"] != created["metadata"]["uid"]
    with pytest.raises(ApiException) as missing:
        client.CoreV1Api(api).replace_namespaced_config_map("nope", ns, {"metadata": {"name": "nope"}})
    assert missing.value.status == 404


def compact(real_kube: RealKube) -> None:
    """Compact etcd's history up to now, through its v3 JSON gateway."""

    def post(path: str, body: Obj) -> Obj:
        request = urllib.request.Request(
            real_kube.etcd_url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            return json.loads(reply.read())  # type: ignore[no-any-return]

    revision = post("/v3/kv/range", {"key": "AA=="})["header"]["revision"]
    post("/v3/kv/compaction", {"revision": revision, "physical": True})


def test_paged_lists_read_a_snapshot_until_it_is_compacted(api: client.ApiClient, ns: str, real_kube: RealKube) -> None:
    core = client.CoreV1Api(api)
    page = first_page_then_changes(core, ns)
    core.patch_namespaced_config_map("b", ns, {"data": {"x": "1"}})
    rest = core.list_namespaced_config_map(ns, limit=10, _continue=page.metadata._continue)
    assert [(cm.metadata.name, cm.data) for cm in rest.items] == [("b", None), ("c", None)]
    assert rest.metadata.resource_version == page.metadata.resource_version

    compact(real_kube)
    with pytest.raises(ApiException) as gone:
        core.list_namespaced_config_map(ns, limit=1, _continue=page.metadata._continue)
    body = status(gone.value)
    assert (gone.value.status, body["reason"]) == (410, "Expired")
    assert body["message"] == (
        "The provided continue parameter is too old to display a consistent list result. You can start a new "
        "list without the continue parameter, or use the continue token in this response to retrieve the "
        "remainder of the results. Continuing with the provided token results in an inconsistent list - "
        "objects that were created, modified, or deleted between the time the first chunk was returned and "
        "now may show up in the list."
    )
    rest = core.list_namespaced_config_map(ns, _continue=body["metadata"]["continue"])
    assert [cm.metadata.name for cm in rest.items] == ["aa", "b"]  # after "a", as things are now
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_config_map(ns, limit=1, _continue="garbage")
    assert bad.value.status == 400
    assert status(bad.value)["message"].startswith("invalid continue token: continue key is not valid: ")


@pytest.fixture
def hook(api: client.ApiClient, ns: str, tmp_path: Path) -> Iterator[Webhook]:
    """A small HTTPS webhook behind a Service in `ns` (bound on its ClusterIP, a loopback address), called
    for Pods labelled with the namespace's name only, so no other test's Pods meet it."""
    core = client.CoreV1Api(api)
    core.create_namespaced_service(ns, {"metadata": {"name": "hook"}, "spec": {"ports": [{"port": 8443}]}})
    ip = core.read_namespaced_service("hook", ns).spec.cluster_ip
    assert ipaddress.ip_address(ip) in LOOPBACK
    material = issue(f"hook.{ns}.svc", now=datetime.now(UTC))
    server = Webhook(material, tmp_path, (ip, 8443))
    spec = {
        "name": "pods.kdiff.io",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "timeoutSeconds": 5,
        "objectSelector": {"matchLabels": {"hooked": ns}},
        "clientConfig": {
            "service": {"name": "hook", "namespace": ns, "path": "/mutate", "port": 8443},
            "caBundle": base64.b64encode(material.ca_cert).decode(),
        },
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
    }
    configurations = client.AdmissionregistrationV1Api(api)
    configurations.create_mutating_webhook_configuration({"metadata": {"name": ns}, "webhooks": [spec]})
    try:
        deadline = time.monotonic() + 30
        while not server.requests:  # the API server picks configurations up from an informer
            assert time.monotonic() < deadline, "kube-apiserver never called the webhook"
            core.create_namespaced_pod(ns, hooked_pod(ns), dry_run="All")
            time.sleep(0.2)
        yield server
    finally:
        configurations.delete_mutating_webhook_configuration(ns)
        server.close()


def hooked_pod(ns: str) -> Obj:
    container = {"name": "c", "image": "x"}
    return {"metadata": {"name": "p", "labels": {"hooked": ns}}, "spec": {"containers": [container]}}


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        (
            (500, b'{"error": "quota undecided", "code": 500}'),
            'an error on the server ("unknown") has prevented the request from succeeding',
        ),
        (
            (500, "quota undecided\n"),
            'an error on the server ("quota undecided") has prevented the request from succeeding',
        ),
        (
            (500, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "quota undecided"}),
            "quota undecided",
        ),
    ],
    ids=["json", "text", "status"],
)
def test_webhook_error_bodies_as_the_client_shows_them(
    api: client.ApiClient, ns: str, hook: Webhook, answer: tuple[int, Any], shown: str
) -> None:
    """client-go shows a webhook's error body only if it is text or a failure Status; tests/kubeapi does the
    same (test_admission.py::test_calling_failures_follow_failure_policy), with newer servers' wording
    ("failed to call webhook: " after the webhook's name)."""
    hook.answer = lambda review: answer
    with pytest.raises(ApiException) as failed:
        client.CoreV1Api(api).create_namespaced_pod(ns, hooked_pod(ns))
    body = status(failed.value)
    cause = f'failed calling webhook "pods.kdiff.io": {shown}'
    assert (failed.value.status, body["reason"]) == (500, "InternalError")
    assert (body["message"], body["details"]) == (f"Internal error occurred: {cause}", {"causes": [{"message": cause}]})
