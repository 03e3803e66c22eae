"""The HTTP edge (decisions P1, P2): every malformed input gets a clear answer, never a 5xx or a stack trace."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from app import create_app
from app.http import MAX_BODY
from tests.app.reviews import admission_review, container, decode_patch, pod


@pytest.fixture
def client(settings):
    return create_app(settings).test_client()


def post(client, body: Any, content_type: str = "application/json"):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post("/webhook", data=data, content_type=content_type)


def test_gpu_pod_is_patched(client) -> None:
    request = admission_review(pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})), uid="u-1")
    reply = post(client, request)
    assert reply.status_code == 200 and reply.mimetype == "application/json"
    body = reply.get_json()
    assert body["response"]["uid"] == "u-1" and body["response"]["allowed"] is True
    assert {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"} in decode_patch(body["response"])


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "application/json;charset=UTF-8"])
def test_charset_parameter_is_accepted(client, content_type: str) -> None:
    reply = post(client, admission_review(pod(container())), content_type)
    assert reply.status_code == 200 and reply.get_json()["response"]["allowed"] is True


def test_wrong_content_type_with_uid_is_a_denied_review(client) -> None:
    reply = post(client, admission_review(pod(container()), uid="u-2"), "text/plain")
    assert reply.status_code == 200
    assert reply.get_json()["response"] == {
        "uid": "u-2",
        "allowed": False,
        "status": {
            "metadata": {},
            "status": "Failure",
            "code": 400,
            "reason": "BadRequest",
            "message": "contentType=text/plain, expected application/json",
        },
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"", "request body is empty", id="empty"),
        pytest.param(
            b"{not json",
            "request body is not JSON: unexpected character, expected a string key: line 1 column 2 (char 1)",
            id="not-json",
        ),
        pytest.param(
            b'{"request": {"uid": NaN}}',
            "request body is not JSON: unexpected character, expected a JSON value: line 1 column 21 (char 20)",
            id="nan",
        ),
        pytest.param(
            b"\xc3\x28",
            "request body is not JSON: str is not valid UTF-8: surrogates not allowed: line 1 column 1 (char 0)",
            id="bad-utf8",
        ),
        pytest.param(b"[1, 2]", "request.uid: missing; the body is not an AdmissionReview request", id="array"),
        pytest.param(
            b'{"request": {"uid": 7}}',
            "request.uid: missing; the body is not an AdmissionReview request",
            id="uid-not-string",
        ),
    ],
)
def test_unreadable_bodies_get_400_json(client, body: bytes, message: str) -> None:
    reply = post(client, body)
    assert reply.status_code == 400
    assert reply.get_json() == {"error": message, "code": 400}


def test_oversized_body_is_413(client) -> None:
    reply = post(client, b"x" * (MAX_BODY + 1))
    assert reply.status_code == 413
    response = reply.get_json()["response"]
    assert response["allowed"] is False and response["status"]["code"] == 413
    assert response["status"]["message"] == "request entity is too large; limit is 7340032 bytes"


def test_unknown_path_and_method(client) -> None:
    assert client.get("/nope").status_code == 404
    assert client.get("/nope").get_json()["code"] == 404
    reply = client.get("/webhook")
    assert reply.status_code == 405 and reply.get_json()["code"] == 405


def test_health_and_readiness(client) -> None:
    assert client.get("/healthz").get_json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    body = ready.get_json()
    assert body["ready"] is True and body["quota"]["quota"] == "off" and body["devices"][0] == "NVIDIA"


def test_internal_error_is_a_500_review_without_traceback(settings) -> None:
    class Broken:
        def admit(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("ledger exploded")

        def status(self) -> dict[str, Any]:
            return {"ready": True}

    client = create_app(settings, Broken()).test_client()
    reply = post(client, admission_review(pod(container()), uid="u-3"))
    assert reply.status_code == 200
    status = reply.get_json()["response"]["status"]
    assert (status["code"], status["reason"]) == (500, "InternalError")
    assert "Traceback" not in reply.get_data(as_text=True) and "ledger" not in reply.get_data(as_text=True)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
pod_like = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries({}, optional={"annotations": json_values, "namespace": json_values}),
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "containers": st.lists(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "name": json_values,
                            "resources": st.fixed_dictionaries(
                                {},
                                optional={
                                    "limits": json_values
                                    | st.dictionaries(
                                        st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "cambricon.com/vmlu"]),
                                        st.text(max_size=6) | st.integers(-3, 3),
                                        max_size=3,
                                    )
                                },
                            ),
                            "env": json_values,
                            "securityContext": json_values,
                        },
                    ),
                    max_size=3,
                )
                | json_values,
                "schedulerName": json_values,
                "nodeName": json_values,
            },
        ),
    },
)
reviews = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]) | json_values,
        "kind": st.just("AdmissionReview") | json_values,
        "request": st.fixed_dictionaries(
            {},
            optional={
                "uid": st.text(min_size=1, max_size=8) | json_values,
                "kind": st.just({"group": "", "version": "v1", "kind": "Pod"}) | json_values,
                "operation": st.sampled_from(["CREATE", "UPDATE"]) | json_values,
                "object": pod_like | json_values,
                "dryRun": json_values,
            },
        )
        | json_values,
    },
)


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=reviews | json_values)
def test_fuzzed_bodies_never_5xx(client, document: Any) -> None:
    reply = post(client, document)
    assert reply.status_code in (200, 400)
    body = reply.get_json()
    assert isinstance(body, dict)
    request = document.get("request") if isinstance(document, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    if isinstance(uid, str) and uid:
        assert reply.status_code == 200
        assert body["response"]["uid"] == uid
        assert body["response"]["status"]["code"] != 500
    else:
        assert reply.status_code == 400 and body["code"] == 400
