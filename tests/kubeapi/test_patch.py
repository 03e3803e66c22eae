"""PATCH through the official client (all three patch types) and the strategic merge rules themselves."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubeapi.patch import DEFAULT_MERGE_KEYS, merge_patch, strategic_merge_patch

JSON_PATCH = "application/json-patch+json"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot really\n").decode()


def webhook(name: str, path: str) -> dict[str, Any]:
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "clientConfig": {"service": {"name": "hami", "namespace": "kube-system", "path": path}},
    }


@pytest.fixture
def admission(kube_client: client.ApiClient) -> client.AdmissionregistrationV1Api:
    api = client.AdmissionregistrationV1Api(kube_client)
    body = {"metadata": {"name": "hami"}, "webhooks": [webhook("a.hami.io", "/a"), webhook("b.hami.io", "/b")]}
    api.create_mutating_webhook_configuration(body)
    return api


def hooks(config: client.V1MutatingWebhookConfiguration) -> dict[str, dict[str, Any]]:
    """Webhooks by name, in wire format (camelCase keys)."""
    with client.ApiClient() as api_client:
        return {h["name"]: h for h in api_client.sanitize_for_serialization(config)["webhooks"]}


def test_strategic_merge_by_name_keeps_other_webhook(admission: client.AdmissionregistrationV1Api) -> None:
    patch = {"webhooks": [{"name": "b.hami.io", "clientConfig": {"caBundle": CA}}]}
    patched = admission.patch_mutating_webhook_configuration("hami", patch)  # dict body → strategic merge
    by_name = hooks(patched)
    assert list(by_name) == ["a.hami.io", "b.hami.io"]
    assert by_name["b.hami.io"]["clientConfig"]["caBundle"] == CA
    assert by_name["b.hami.io"]["clientConfig"]["service"]["path"] == "/b"  # merged, not replaced
    assert "caBundle" not in by_name["a.hami.io"]["clientConfig"]
    assert patched.metadata.generation == 2


def test_merge_patch_replaces_the_list(admission: client.AdmissionregistrationV1Api) -> None:
    patch = {"webhooks": [webhook("c.hami.io", "/c")]}
    patched = admission.patch_mutating_webhook_configuration("hami", patch, _content_type=MERGE)
    assert list(hooks(patched)) == ["c.hami.io"]
    assert hooks(patched)["c.hami.io"]["timeoutSeconds"] == 10  # defaulted again after the patch


def test_json_patch_on_webhook_and_test_op_failure(admission: client.AdmissionregistrationV1Api) -> None:
    ops = [
        {"op": "test", "path": "/webhooks/1/name", "value": "b.hami.io"},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": CA},
    ]
    patched = admission.patch_mutating_webhook_configuration("hami", ops)  # list body → JSON patch
    assert hooks(patched)["b.hami.io"]["clientConfig"]["caBundle"] == CA
    with pytest.raises(ApiException) as failed:
        admission.patch_mutating_webhook_configuration(
            "hami", [{"op": "test", "path": "/webhooks/0/name", "value": "x"}]
        )
    assert failed.value.status == 422


def test_strategic_delete_directive(admission: client.AdmissionregistrationV1Api) -> None:
    patch = {"webhooks": [{"name": "a.hami.io", "$patch": "delete"}]}
    assert list(hooks(admission.patch_mutating_webhook_configuration("hami", patch))) == ["b.hami.io"]


def test_patches_on_secret(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"a": "1", "b": "2"}})
    merged = core.patch_namespaced_secret(
        "s", "default", {"data": {"a": None}, "stringData": {"c": "3"}}, _content_type=MERGE
    )
    assert sorted(merged.data) == ["b", "c"] and merged.string_data is None
    strategic = core.patch_namespaced_secret("s", "default", {"metadata": {"labels": {"x": "y"}}})
    assert strategic.metadata.labels == {"x": "y"} and sorted(strategic.data) == ["b", "c"]
    ops = [{"op": "replace", "path": "/data/b", "value": base64.b64encode(b"two").decode()}]
    replaced = core.patch_namespaced_secret("s", "default", ops)
    assert base64.b64decode(replaced.data["b"]) == b"two"


def test_resource_version_in_patch_is_a_precondition(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"k": "1"}})
    rv = created.metadata.resource_version
    patched = core.patch_namespaced_config_map(
        "c", "default", {"metadata": {"resourceVersion": rv}, "data": {"k": "2"}}
    )
    with pytest.raises(ApiException) as conflict:
        core.patch_namespaced_config_map("c", "default", {"metadata": {"resourceVersion": rv}, "data": {"k": "3"}})
    assert conflict.value.status == 409 and json.loads(conflict.value.body)["reason"] == "Conflict"
    assert core.read_namespaced_config_map("c", "default").data == {"k": "2"}
    assert patched.metadata.resource_version != rv


def test_unsupported_patch_types_and_missing_objects(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as missing:
        core.patch_namespaced_config_map("nope", "default", {"data": {}})
    assert missing.value.status == 404
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    for content_type in ("application/apply-patch+yaml", "application/json"):
        with pytest.raises(ApiException) as unsupported:
            core.patch_namespaced_config_map("c", "default", {"data": {}}, _content_type=content_type)
        assert unsupported.value.status == 415
        assert json.loads(unsupported.value.body)["reason"] == "UnsupportedMediaType"


def test_dry_run_patch_does_not_store(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"k": "1"}})
    dry = core.patch_namespaced_config_map("c", "default", {"data": {"k": "2"}}, dry_run="All")
    assert dry.data == {"k": "2"}
    assert core.read_namespaced_config_map("c", "default").data == {"k": "1"}


# --- strategic merge semantics (pure functions) ----------------------------------------------------


def smp(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    return strategic_merge_patch(original, patch, DEFAULT_MERGE_KEYS)


def test_new_list_items_go_first_like_go() -> None:
    original = {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}
    patched = smp(original, {"containers": [{"name": "c", "image": "2"}, {"name": "b", "image": "2"}]})
    assert patched == {
        "containers": [{"name": "c", "image": "2"}, {"name": "a", "image": "1"}, {"name": "b", "image": "2"}]
    }
    assert original["containers"][1]["image"] == "1"  # input untouched


def test_set_element_order_and_replace_and_retain_keys() -> None:
    original = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}], "strategy": {"type": "X", "x": {}}}
    patch = {
        "$setElementOrder/env": [{"name": "B"}, {"name": "A"}],
        "env": [{"name": "A", "value": "3"}],
        "strategy": {"$retainKeys": ["type"], "type": "Recreate"},
    }
    assert smp(original, patch) == {
        "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "3"}],
        "strategy": {"type": "Recreate"},
    }
    replaced = smp(original, {"env": [{"name": "Z"}, {"$patch": "replace"}]})
    assert replaced["env"] == [{"name": "Z"}]
    assert smp({"spec": {"a": {"b": 1}}}, {"spec": {"a": {"$patch": "delete"}}}) == {"spec": {}}
    assert smp({"spec": {"a": {"b": 1}, "c": 2}}, {"spec": {"$patch": "replace", "a": {}}}) == {"spec": {"a": {}}}


def test_scalar_and_unkeyed_lists() -> None:
    original = {"metadata": {"finalizers": ["a", "b"]}, "args": ["x", "y"]}
    patch = {"metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"]}, "args": ["z"]}
    assert smp(original, patch) == {"metadata": {"finalizers": ["c", "b"]}, "args": ["z"]}


def test_service_ports_merge_by_port() -> None:
    original = {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}
    patched = strategic_merge_patch(original, {"ports": [{"port": 443, "targetPort": 8443}]}, {"ports": "port"})
    assert patched["ports"][1] == {"port": 443, "name": "https", "targetPort": 8443}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from("abc"), children, max_size=3),
    max_leaves=10,
)
documents = st.dictionaries(st.sampled_from("abcd"), json_values, max_size=4)


@given(documents, documents)
def test_strategic_merge_equals_merge_patch_without_keyed_lists(
    original: dict[str, Any], patch: dict[str, Any]
) -> None:
    """With no merge keys and no directives, a strategic merge patch is an RFC 7386 merge patch."""
    assert strategic_merge_patch(original, patch, {}) == merge_patch(original, patch)
