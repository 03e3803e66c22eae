"""CRUD semantics through the official Python client, compared with what the real API server does."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import requests
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import ApiError, FakeKubeAPI


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_client)


def secret(name: str, **fields: object) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, **fields}


def status(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)  # type: ignore[no-any-return]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_secret_lifecycle(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    created = core.create_namespaced_secret("default", secret("s", stringData={"k": "v"}))
    meta = created.metadata
    assert (meta.namespace, meta.name, created.type, created.data) == ("default", "s", "Opaque", {"k": b64("v")})
    assert created.string_data is None and meta.uid and meta.creation_timestamp and meta.generation is None
    assert int(meta.resource_version) > 0

    fetched = core.read_namespaced_secret("s", "default")
    assert fetched.metadata.uid == meta.uid

    fetched.data["k2"] = b64("v2")
    updated = core.replace_namespaced_secret("s", "default", fetched)
    assert int(updated.metadata.resource_version) > int(meta.resource_version)
    assert kube_api.get("v1", "Secret", "s")["data"] == {"k": b64("v"), "k2": b64("v2")}

    deleted = core.delete_namespaced_secret("s", "default")
    assert deleted["status"] == "Success" and deleted["details"]["uid"] == meta.uid  # this client returns a dict
    assert kube_api.get("v1", "Secret", "s") is None


def test_not_found_and_already_exists(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_secret("nope", "default")
    assert missing.value.status == 404
    assert status(missing.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'secrets "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "secrets"},
        "code": 404,
    }
    core.create_namespaced_secret("default", secret("s"))
    with pytest.raises(ApiException) as dup:
        core.create_namespaced_secret("default", secret("s"))
    assert (dup.value.status, status(dup.value)["reason"]) == (409, "AlreadyExists")
    assert status(dup.value)["message"] == 'secrets "s" already exists'


def test_stale_resource_version_conflicts(core: client.CoreV1Api) -> None:
    first = core.create_namespaced_secret("default", secret("s"))
    core.patch_namespaced_secret("s", "default", {"metadata": {"labels": {"a": "b"}}})
    first.metadata.labels = {"a": "c"}
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_secret("s", "default", first)
    assert conflict.value.status == 409
    assert status(conflict.value)["reason"] == "Conflict"
    assert status(conflict.value)["message"] == (
        'Operation cannot be fulfilled on secrets "s": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    first.metadata.resource_version = None  # no resourceVersion: unconditional update
    assert core.replace_namespaced_secret("s", "default", first).metadata.labels == {"a": "c"}


def test_update_of_missing_object_is_404(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as missing:
        core.replace_namespaced_secret("s", "default", secret("s"))
    assert missing.value.status == 404


def test_noop_update_keeps_resource_version(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    created = core.create_namespaced_secret("default", secret("s", data={"k": b64("v")}))
    writes_before = kube_api.resource_version
    same = core.replace_namespaced_secret("s", "default", created)
    patched = core.patch_namespaced_secret("s", "default", {"data": {"k": b64("v")}})
    assert same.metadata.resource_version == patched.metadata.resource_version == created.metadata.resource_version
    assert kube_api.resource_version == writes_before


def test_namespace_must_exist(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    with pytest.raises(ApiException) as missing:
        core.create_namespaced_secret("nowhere", secret("s"))
    assert missing.value.status == 404
    assert status(missing.value)["message"] == 'namespaces "nowhere" not found'
    with pytest.raises(ApiError, match='namespaces "nowhere" not found'):
        kube_api.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "nowhere"}})


def test_body_namespace_must_match_url(core: client.CoreV1Api) -> None:
    body = {"metadata": {"name": "s", "namespace": "kube-system"}}
    with pytest.raises(ApiException) as mismatch:
        core.create_namespaced_secret("default", body)
    assert mismatch.value.status == 400
    assert "does not match the namespace sent on the request" in status(mismatch.value)["message"]


def test_generate_name_and_dry_run(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    made = core.create_namespaced_config_map("default", {"metadata": {"generateName": "cfg-"}})
    assert made.metadata.name.startswith("cfg-") and len(made.metadata.name) == 9
    dry = core.create_namespaced_config_map("default", {"metadata": {"name": "dry"}}, dry_run="All")
    assert dry.metadata.name == "dry" and dry.metadata.resource_version is None
    assert kube_api.get("v1", "ConfigMap", "dry") is None
    core.delete_namespaced_config_map(made.metadata.name, "default", dry_run="All")
    assert kube_api.get("v1", "ConfigMap", made.metadata.name) is not None


def test_secret_rules(core: client.CoreV1Api) -> None:
    core.create_namespaced_secret("default", secret("s", type="Opaque"))
    with pytest.raises(ApiException) as immutable:
        core.patch_namespaced_secret("s", "default", {"type": "kubernetes.io/tls", "stringData": {"tls.crt": "c"}})
    body = status(immutable.value)
    assert (immutable.value.status, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'Secret "s" is invalid: [type: Invalid value: "kubernetes.io/tls": field is immutable, '
        "data[tls.key]: Required value]"
    )
    assert body["details"]["causes"][1] == {
        "reason": "FieldValueRequired",
        "message": "Required value",
        "field": "data[tls.key]",
    }
    with pytest.raises(ApiException) as bad_base64:
        core.create_namespaced_secret("default", secret("b", data={"k": "not base64!"}))
    assert bad_base64.value.status == 400
    assert "illegal base64 data at input byte 3" in status(bad_base64.value)["message"]
    with pytest.raises(ApiException) as bad_key:
        core.create_namespaced_secret("default", secret("k", stringData={"no/slash": "x"}))
    assert status(bad_key.value)["details"]["causes"][0]["field"] == "data[no/slash]"


def test_invalid_names_are_422(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as bad:
        core.create_namespaced_config_map("default", {"metadata": {"name": "Not_Valid"}})
    assert bad.value.status == 422
    assert status(bad.value)["message"].startswith(
        'ConfigMap "Not_Valid" is invalid: metadata.name: Invalid value: "Not_Valid": a lowercase RFC 1123 subdomain'
    )


def test_list_with_selectors_and_paging(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    for ns, name, labels in [
        ("default", "a", {"app": "web", "tier": "front"}),
        ("default", "b", {"app": "web"}),
        ("default", "c", {"app": "db"}),
        ("other", "d", {"app": "web"}),
    ]:
        kube_api.put(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, "labels": labels}}
        )

    def names(**kwargs: object) -> list[str]:
        return [cm.metadata.name for cm in core.list_namespaced_config_map("default", **kwargs).items]

    assert names(label_selector="app=web") == ["a", "b"]
    assert names(label_selector="app!=web") == ["c"]
    assert names(label_selector="app in (db, cache)") == ["c"]
    assert names(label_selector="app notin (db),!tier") == ["b"]
    assert names(label_selector="tier") == ["a"]
    assert names(field_selector="metadata.name=b") == ["b"]
    everywhere = core.list_config_map_for_all_namespaces(label_selector="app=web")
    assert [(cm.metadata.namespace, cm.metadata.name) for cm in everywhere.items] == [
        ("default", "a"),
        ("default", "b"),
        ("other", "d"),
    ]
    assert everywhere.metadata.resource_version == kube_api.resource_version

    page = core.list_namespaced_config_map("default", limit=2)
    assert [cm.metadata.name for cm in page.items] == ["a", "b"] and page.metadata.remaining_item_count == 1
    rest = core.list_namespaced_config_map("default", limit=2, _continue=page.metadata._continue)
    assert [cm.metadata.name for cm in rest.items] == ["c"] and rest.metadata._continue is None

    with pytest.raises(ApiException) as bad:
        core.list_namespaced_config_map("default", field_selector="data.x=1")
    assert (bad.value.status, status(bad.value)["message"]) == (400, "field label not supported: data.x")


def test_raw_list_items_have_no_type_meta(kube_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    kube_api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
    raw = core.list_namespaced_config_map("default", _preload_content=False)
    body = json.loads(raw.data)
    assert (body["kind"], body["apiVersion"]) == ("ConfigMapList", "v1")
    assert "kind" not in body["items"][0] and kube_api.list("v1", "ConfigMap")[0]["kind"] == "ConfigMap"


def test_delete_preconditions(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_secret("default", secret("s"))
    stale = client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version="1"))
    with pytest.raises(ApiException) as conflict:
        core.delete_namespaced_secret("s", "default", body=stale)
    assert conflict.value.status == 409
    assert "Precondition failed: ResourceVersion in precondition: 1" in status(conflict.value)["message"]
    fresh = client.V1DeleteOptions(
        preconditions=client.V1Preconditions(resource_version=created.metadata.resource_version)
    )
    core.delete_namespaced_secret("s", "default", body=fresh)


def test_namespace_deletion_terminates_then_purges(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    core.create_namespace({"metadata": {"name": "doomed"}})
    assert core.read_namespace("doomed").metadata.labels == {"kubernetes.io/metadata.name": "doomed"}
    core.create_namespaced_secret("doomed", secret("s"))
    core.delete_namespace("doomed")
    terminating = core.read_namespace("doomed")
    assert terminating.status.phase == "Terminating" and terminating.metadata.deletion_timestamp
    with pytest.raises(ApiException) as forbidden:
        core.create_namespaced_secret("doomed", secret("t"))
    assert forbidden.value.status == 403
    assert status(forbidden.value)["message"] == (
        'secrets "t" is forbidden: unable to create new content in namespace doomed because it is being terminated'
    )
    assert status(forbidden.value)["details"]["causes"] == [
        {
            "reason": "NamespaceTerminating",
            "message": "namespace doomed is being terminated",
            "field": "metadata.namespace",
        }
    ]
    kube_api.delete("v1", "Namespace", "doomed")  # the seeding helper purges at once
    assert kube_api.get("v1", "Secret", "s", "doomed") is None and kube_api.get("v1", "Namespace", "doomed") is None


def test_register_custom_resource(kube_client: client.ApiClient, kube_api: FakeKubeAPI) -> None:
    kube_api.register_resource("cert-manager.io/v1", "Issuer")
    custom = client.CustomObjectsApi(kube_client)
    issuer = {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "ca"}, "spec": {"ca": {}}}
    created = custom.create_namespaced_custom_object("cert-manager.io", "v1", "default", "issuers", issuer)
    assert created["metadata"]["generation"] == 1
    listed = custom.list_namespaced_custom_object("cert-manager.io", "v1", "default", "issuers")
    assert listed["items"][0]["kind"] == "Issuer"  # custom resource list items keep their type meta
    args = ("cert-manager.io", "v1", "default", "issuers", "ca")
    merged = custom.patch_namespaced_custom_object(*args, {"spec": {"ca": {"secretName": "root"}}})
    assert merged["spec"] == {"ca": {"secretName": "root"}} and merged["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as smp:
        custom.patch_namespaced_custom_object(
            *args, {"spec": {}}, _content_type="application/strategic-merge-patch+json"
        )
    assert smp.value.status == 415  # like real CRDs: no strategic merge patch
    assert kube_api.list("cert-manager.io/v1", "Issuer", "default")[0]["spec"] == {"ca": {"secretName": "root"}}


def test_unknown_fields_are_dropped_with_a_warning(kube_api: FakeKubeAPI) -> None:
    url = f"{kube_api.url}/api/v1/namespaces/default/configmaps"
    yaml_body = "metadata: {name: c}\ndata: {k: v}\ndatta: {typo: 1}\n"  # YAML bodies are accepted too
    created = requests.post(url, data=yaml_body, headers={"Content-Type": "application/yaml"}, timeout=5)
    assert created.status_code == 201 and created.headers["Warning"] == '299 - "unknown field \\"datta\\""'
    assert list(created.json()) == ["kind", "apiVersion", "metadata", "data"]
    strict = requests.post(
        url, params={"fieldValidation": "Strict"}, json={"metadata": {"name": "d"}, "x": 1}, timeout=5
    )
    assert strict.status_code == 400 and strict.json()["message"] == 'strict decoding error: unknown field "x"'


def test_global_client_configuration(kubeconfig: str) -> None:
    config.load_kube_config(config_file=kubeconfig)  # the kube_api fixture resets the global default afterwards
    with client.ApiClient() as api_client:
        namespaces = client.CoreV1Api(api_client).list_namespace()
    assert [ns.metadata.name for ns in namespaces.items] == ["default", "kube-system"]


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        ("POST", "/api/v1/namespaces/default/secrets/s", 405),
        ("PUT", "/api/v1/namespaces/default/secrets", 405),
        ("GET", "/api/v1/secrets/s", 404),  # a namespaced object needs its namespace
        ("GET", "/api/v1/namespaces/default/widgets", 404),
        ("GET", "/api/v1/namespaces/default/secrets/s/status", 404),  # no subresources
        ("GET", "/apis/example.com/v1", 404),
    ],
)
def test_unroutable_requests(kube_api: FakeKubeAPI, method: str, path: str, code: int) -> None:
    response = requests.request(method, kube_api.url + path, json={}, timeout=5)
    assert response.status_code == code and response.json()["code"] == code


def lease(name: str, namespace: str = "default", **metadata: object) -> dict[str, object]:
    meta = {"name": name, "namespace": namespace, **metadata}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": {}}


def test_lease_updates_need_a_resource_version(kube_client: client.ApiClient) -> None:
    """Leases allow no unconditional update (the quota ledger's compare-and-swap depends on it); Secrets
    and ConfigMaps do (test_stale_resource_version_conflicts). Texts as kube-apiserver 1.20.2 answers."""
    leases = client.CoordinationV1Api(kube_client)
    created = kube_client.sanitize_for_serialization(leases.create_namespaced_lease("default", lease("l")))
    unconditional = {**created, "metadata": {k: v for k, v in created["metadata"].items() if k != "resourceVersion"}}
    with pytest.raises(ApiException) as invalid:
        leases.replace_namespaced_lease("l", "default", unconditional)
    assert invalid.value.status == 422
    assert status(invalid.value)["message"] == (
        'leases.coordination.k8s.io "l" is invalid: metadata.resourceVersion: Invalid value: 0x0: '
        "must be specified for an update"
    )
    assert status(invalid.value)["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 0x0: must be specified for an update",
            "field": "metadata.resourceVersion",
        }
    ]
    leases.replace_namespaced_lease("l", "default", created)  # with its resourceVersion: fine


def test_update_of_a_deleted_lease(kube_client: client.ApiClient) -> None:
    """A PUT carrying the uid of an object deleted meanwhile fails its uid precondition (409, retry), not 404."""
    leases = client.CoordinationV1Api(kube_client)
    created = kube_client.sanitize_for_serialization(leases.create_namespaced_lease("default", lease("l")))
    leases.delete_namespaced_lease("l", "default")
    with pytest.raises(ApiException) as conflict:
        leases.replace_namespaced_lease("l", "default", created)
    uid = created["metadata"]["uid"]
    assert (conflict.value.status, status(conflict.value)["reason"]) == (409, "Conflict")
    assert status(conflict.value)["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "l": StorageError: invalid object, Code: 4, '
        "Key: /registry/leases/default/l, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: "
        f"UID in precondition: {uid}, UID in object meta: "
    )
    # Without a uid the PUT creates the Lease (Leases allow create on update; Secrets do not: 404 above).
    recreated = leases.replace_namespaced_lease("l", "default", lease("l", resourceVersion="1"), _preload_content=False)
    assert recreated.status == 201 and json.loads(recreated.data)["metadata"]["uid"] != uid


def first_page_then_changes(core: client.CoreV1Api, namespace: str = "default") -> client.V1ConfigMapList:
    """ConfigMaps a, b, c; the first page of a one-item list; then aa created and c deleted (here and in
    tests/realkube/test_apiserver.py, so both servers answer the same sequence)."""
    for name in ("a", "b", "c"):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    page = core.list_namespaced_config_map(namespace, limit=1)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "aa"}})
    core.delete_namespaced_config_map("c", namespace)
    return page


def test_later_pages_read_the_first_page_snapshot(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    page = first_page_then_changes(core)
    core.patch_namespaced_config_map("b", "default", {"data": {"x": "1"}})
    rest = core.list_namespaced_config_map("default", limit=10, _continue=page.metadata._continue)
    assert [(cm.metadata.name, cm.data) for cm in rest.items] == [("b", None), ("c", None)]
    assert rest.metadata.resource_version == page.metadata.resource_version


def test_continue_token_of_a_compacted_snapshot_is_410(core: client.CoreV1Api, kube_api: FakeKubeAPI) -> None:
    """The answer carries a token that goes on from the current state (inconsistent, said so)."""
    page = first_page_then_changes(core)
    kube_api.compact()
    with pytest.raises(ApiException) as gone:
        core.list_namespaced_config_map("default", limit=1, _continue=page.metadata._continue)
    body = status(gone.value)
    assert (gone.value.status, body["reason"]) == (410, "Expired")
    assert body["message"].startswith("The provided continue parameter is too old to display a consistent list")
    rest = core.list_namespaced_config_map("default", _continue=body["metadata"]["continue"])
    assert [cm.metadata.name for cm in rest.items] == ["aa", "b"]  # after "a", as things are now
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_config_map("default", limit=1, _continue="garbage")
    assert bad.value.status == 400
    assert status(bad.value)["message"].startswith("invalid continue token: continue key is not valid: ")


def test_quantities_are_stored_in_canonical_form(core: client.CoreV1Api) -> None:
    container = {"name": "c", "image": "x", "resources": {"limits": {"cpu": "0.5", "memory": "1024Mi", "x/m": "4000"}}}
    created = core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": [container]}})
    canonical = {"cpu": "500m", "memory": "1Gi", "x/m": "4k"}
    assert created.spec.containers[0].resources.limits == canonical
    assert created.spec.containers[0].resources.requests == canonical
    quota = core.create_namespaced_resource_quota(
        "default", {"metadata": {"name": "q"}, "spec": {"hard": {"requests.x/m": "8000"}}}
    )
    assert quota.spec.hard == {"requests.x/m": "8k"}
    container["resources"]["limits"]["cpu"] = "1x"
    with pytest.raises(ApiException) as bad:
        core.create_namespaced_pod("default", {"metadata": {"name": "q"}, "spec": {"containers": [container]}})
    assert bad.value.status == 400
    assert status(bad.value)["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: '
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )
