"""app/kube/errors.py: ApiError, read from what a real kube-apiserver answers (tests/realkube), through both the
generated client and a raw call, so the Status it carries is the server's own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from app.kube.config import load_configuration
from app.kube.errors import NOT_FOUND, ApiError, describe
from testbed.cluster import RealKube

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


@pytest.fixture
def api_client(bare_kube: RealKube, monkeypatch: pytest.MonkeyPatch) -> Iterator[client.ApiClient]:
    monkeypatch.setenv("KUBECONFIG", bare_kube.kubeconfig_path)  # read at call time, not at the client's import
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with client.ApiClient(load_configuration()) as api_client:
        yield api_client


def test_a_missing_object_is_an_api_error_carrying_the_servers_status(api_client: client.ApiClient) -> None:
    name = f"absent-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ApiException) as raised:
        client.CoreV1Api(api_client).read_namespaced_secret(name, "default")
    error = ApiError.from_client(raised.value)
    assert (error.code, error.reason, error.status["kind"]) == (NOT_FOUND, "NotFound", "Status")
    assert str(error) == f'HTTP 404 NotFound: secrets "{name}" not found'
    assert describe(raised.value) == f'HTTP 404 Not Found: secrets "{name}" not found'


def test_a_raw_answer_gives_the_same_error_with_its_action(api_client: client.ApiClient) -> None:
    method, url, headers, _, _ = api_client.param_serialize(
        "GET", "/api/v1/namespaces/default/secrets/absent", auth_settings=["BearerToken"]
    )
    response = api_client.call_api(method, url, header_params=headers)
    response.read()
    error = ApiError.from_response(response.status, response.reason, response.data, "read Secret default/absent")
    assert str(error) == 'read Secret default/absent: HTTP 404 NotFound: secrets "absent" not found'


def test_a_body_that_is_not_a_status_becomes_the_message() -> None:
    error = ApiError.from_response(502, "Bad Gateway", b"<html>upstream down</html>\n")
    assert (str(error), error.reason) == ("HTTP 502 Bad Gateway: <html>upstream down</html>", "Bad Gateway")
    assert str(ApiError.from_response(503, "Service Unavailable", b"")) == "HTTP 503 Service Unavailable"
