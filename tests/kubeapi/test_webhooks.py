"""admissionregistration.k8s.io/v1 defaulting and validation, as the real API server applies them."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import requests
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import FakeKubeAPI


@pytest.fixture
def admission(kube_client: client.ApiClient) -> client.AdmissionregistrationV1Api:
    return client.AdmissionregistrationV1Api(kube_client)


def mutating(*hooks: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "hami"},
        "webhooks": list(hooks),
    }


def hook(**overrides: Any) -> dict[str, Any]:
    base = {
        "name": "vgpu.hami.io",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "clientConfig": {"service": {"name": "hami", "namespace": "kube-system", "path": "/mutate"}},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
    }
    return {**base, **overrides}


URL = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def post(kube_api: FakeKubeAPI, body: dict[str, Any], code: int) -> dict[str, Any]:
    """POST raw JSON: the official client's own (pydantic) checks would reject these bodies first."""
    response = requests.post(kube_api.url + URL, json=body, timeout=5)
    assert response.status_code == code, response.text
    return response.json()


def invalid(kube_api: FakeKubeAPI, body: dict[str, Any]) -> dict[str, Any]:
    return post(kube_api, body, 422)


def test_mutating_defaults(admission: client.AdmissionregistrationV1Api, kube_api: FakeKubeAPI) -> None:
    admission.create_mutating_webhook_configuration(mutating(hook()))
    stored = kube_api.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "hami")
    assert stored is not None
    (webhook,) = stored["webhooks"]
    assert {k: webhook[k] for k in ("failurePolicy", "matchPolicy", "timeoutSeconds", "reinvocationPolicy")} == {
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "timeoutSeconds": 10,
        "reinvocationPolicy": "Never",
    }
    assert webhook["namespaceSelector"] == {} and webhook["objectSelector"] == {}
    assert webhook["rules"][0]["scope"] == "*"
    assert webhook["clientConfig"]["service"]["port"] == 443
    assert stored["metadata"]["generation"] == 1 and "namespace" not in stored["metadata"]


def test_validating_defaults_have_no_reinvocation_policy(admission: client.AdmissionregistrationV1Api) -> None:
    body = {**mutating(hook()), "kind": "ValidatingWebhookConfiguration"}
    created = admission.create_validating_webhook_configuration(body)
    (webhook,) = created.webhooks
    assert webhook.failure_policy == "Fail" and webhook.timeout_seconds == 10
    assert not hasattr(webhook, "reinvocation_policy")


def test_validation_messages(kube_api: FakeKubeAPI) -> None:
    bad = hook(
        name="short.name", sideEffects=None, admissionReviewVersions=[], failurePolicy="Maybe", timeoutSeconds=31
    )
    status = invalid(kube_api, mutating(bad))
    assert status["reason"] == "Invalid"
    assert status["details"]["kind"] == "MutatingWebhookConfiguration"
    assert status["details"]["group"] == "admissionregistration.k8s.io"
    assert status["message"] == (
        'MutatingWebhookConfiguration.admissionregistration.k8s.io "hami" is invalid: [webhooks[0].name: '
        'Invalid value: "short.name": should be a domain with at least three segments separated by dots, '
        'webhooks[0].failurePolicy: Unsupported value: "Maybe": supported values: "Fail", "Ignore", '
        "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun, "
        "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds, "
        "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1]"
    )
    assert [c["field"] for c in status["details"]["causes"]] == [
        "webhooks[0].name",
        "webhooks[0].failurePolicy",
        "webhooks[0].sideEffects",
        "webhooks[0].timeoutSeconds",
        "webhooks[0].admissionReviewVersions",
    ]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"sideEffects": "Some"},
            'webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun"',
        ),
        ({"clientConfig": {}}, "webhooks[0].clientConfig: Required value: exactly one of url or service is required"),
        (
            {"clientConfig": {"url": "https://x.example/m", "service": {"name": "a", "namespace": "b"}}},
            "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
        ),
        (
            {"clientConfig": {"url": "http://x.example/m"}},
            'webhooks[0].clientConfig.url: Invalid value: "http": '
            "'https' is the only allowed URL scheme; desired format: https://host[/path]",
        ),
        (
            {"admissionReviewVersions": ["v2"]},
            'webhooks[0].admissionReviewVersions: Invalid value: []string{"v2"}: '
            "must include at least one of v1, v1beta1",
        ),
        ({"timeoutSeconds": 0}, "webhooks[0].timeoutSeconds: Invalid value: 0: the timeout value must be between 1"),
        (
            {"rules": [{"operations": ["PATCH"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]},
            'webhooks[0].rules[0].operations[0]: Unsupported value: "PATCH": '
            'supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE"',
        ),
    ],
)
def test_invalid_webhooks(kube_api: FakeKubeAPI, overrides: dict[str, Any], message: str) -> None:
    assert message in invalid(kube_api, mutating(hook(**overrides)))["message"]


def test_duplicate_names(kube_api: FakeKubeAPI) -> None:
    status = invalid(kube_api, mutating(hook(), hook()))
    assert status["message"].endswith('webhooks[1].name: Duplicate value: "vgpu.hami.io"')


def test_ca_bundle_content_is_not_validated(
    admission: client.AdmissionregistrationV1Api, kube_api: FakeKubeAPI
) -> None:
    garbage = base64.b64encode(b"definitely not PEM").decode()
    body = mutating(hook(clientConfig={"url": "https://hami.example/mutate", "caBundle": garbage}))
    created = admission.create_mutating_webhook_configuration(body)
    assert created.webhooks[0].client_config.ca_bundle == garbage
    body["metadata"]["name"] = "not-base64"
    body["webhooks"][0]["clientConfig"]["caBundle"] = "not base64!"
    status = post(kube_api, body, 400)  # the real server cannot decode it into []byte either
    assert status["message"].endswith("illegal base64 data at input byte 3")


def test_update_and_noop(admission: client.AdmissionregistrationV1Api) -> None:
    created = admission.create_mutating_webhook_configuration(mutating(hook()))
    same = admission.replace_mutating_webhook_configuration("hami", created)
    assert same.metadata.resource_version == created.metadata.resource_version
    assert same.metadata.generation == 1
    created.webhooks[0].timeout_seconds = 5
    changed = admission.replace_mutating_webhook_configuration("hami", created)
    assert changed.metadata.generation == 2 and changed.webhooks[0].timeout_seconds == 5
    created.webhooks[0].timeout_seconds = 99
    with pytest.raises(ApiException) as conflict:  # stale resourceVersion is checked before validation
        admission.replace_mutating_webhook_configuration("hami", created)
    assert conflict.value.status == 409
