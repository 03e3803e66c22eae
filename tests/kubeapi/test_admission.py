"""Mutating admission on CREATE, checked against kube-apiserver's behaviour: the product's own webhook under
gunicorn over TLS, and small purpose-built HTTPS webhooks on loopback for the failure paths."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from certgen import pki
from tests.certgen.helpers import issue
from tests.kubeapi import FakeKubeAPI
from tests.support.ports import free_port
from tests.support.servers import gunicorn, stop, wait_ready

NS = "hooks"
SERVICE_HOST = f"hook.{NS}.svc"
Answer = Callable[[dict[str, Any]], tuple[int, Any]]


# --- a small HTTPS webhook --------------------------------------------------------------------------


class Webhook:
    """An HTTPS server on ``address`` (a loopback one) answering with ``answer(review) -> (status, body)`` (JSON,
    or text/plain for a str body); records what it got."""

    def __init__(self, material: pki.Material, tmp: Path, address: tuple[str, int] = ("127.0.0.1", 0)):
        cert, key = tmp / "hook.crt", tmp / "hook.key"
        cert.write_bytes(material.cert)
        key.write_bytes(material.key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server_names: list[str | None] = []
        context.sni_callback = lambda sock, name, ctx: self.server_names.append(name)  # type: ignore[assignment,misc,func-returns-value]
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.answer: Answer = allow
        hook = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.requests.append((self.path, dict(self.headers.items()), review))
                status, body = hook.answer(review)
                text = isinstance(body, str)  # a str answer goes out as text/plain, anything else as JSON
                data = body.encode() if text else body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8" if text else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(address, Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def reviews(self) -> list[dict[str, Any]]:
        return [review for _, _, review in self.requests]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def response(review: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """An answer in the request's version echoing its uid, as a correct webhook writes it."""
    body = {"uid": review["request"]["uid"], "allowed": True, **fields}
    return {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": body}


def patch_answer(*operations: dict[str, Any]) -> Answer:
    encoded = base64.b64encode(json.dumps(list(operations)).encode()).decode()
    return lambda review: (200, response(review, patchType="JSONPatch", patch=encoded))


def allow(review: dict[str, Any]) -> tuple[int, Any]:
    return 200, response(review)


@pytest.fixture(scope="module")
def material() -> pki.Material:
    return issue(f"{SERVICE_HOST},127.0.0.1", now=datetime.now(UTC))


@pytest.fixture
def webhook(material: pki.Material, tmp_path: Path) -> Iterator[Webhook]:
    server = Webhook(material, tmp_path)
    yield server
    server.close()


def b64(pem: bytes) -> str:
    return base64.b64encode(pem).decode()


def hook_spec(ca: bytes, name: str = "pods.example.io", **overrides: Any) -> dict[str, Any]:
    spec = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "timeoutSeconds": 5,
        "clientConfig": {"service": {"name": "hook", "namespace": NS, "path": "/mutate"}, "caBundle": b64(ca)},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
    }
    return {**spec, **overrides}


def register(api: FakeKubeAPI, *hooks: dict[str, Any], name: str = "example") -> None:
    api.put(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": list(hooks),
        }
    )


def serve_service(api: FakeKubeAPI, port: int, namespace: str = NS, name: str = "hook") -> None:
    """The webhook Service, and the loopback port standing in for its cluster IP."""
    if api.get("v1", "Namespace", namespace) is None:
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    spec = {"ports": [{"name": "https", "port": 443, "targetPort": 9443}], "selector": {"app": name}}
    api.put({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace}, "spec": spec})
    api.services[(namespace, name, 443)] = ("127.0.0.1", port)


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_client)


@pytest.fixture
def hooked(kube_api: FakeKubeAPI, webhook: Webhook) -> FakeKubeAPI:
    serve_service(kube_api, webhook.port)
    return kube_api


def gpu_pod(**metadata: Any) -> dict[str, Any]:
    meta = {"generateName": "job-", **metadata}
    container = {"name": "main", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container]}}


def failure(exc: pytest.ExceptionInfo[ApiException]) -> tuple[int, str, str]:
    body = json.loads(exc.value.body)
    return exc.value.status, body.get("reason", ""), body["message"]


# --- the request kube-apiserver sends ---------------------------------------------------------------


def test_review_has_kube_apiserver_shape(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material, core: client.CoreV1Api
) -> None:
    register(hooked, hook_spec(material.ca_cert))
    created = core.create_namespaced_pod("default", gpu_pod(labels={"app": "x"}), field_manager="test")
    ((path, headers, review),) = webhook.requests
    assert path == "/mutate?timeout=5s"
    assert headers["Host"] == f"{SERVICE_HOST}:443" and headers["Content-Type"] == "application/json"
    assert headers["User-Agent"] == "kube-apiserver-admission"
    assert webhook.server_names == [SERVICE_HOST]
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    request = review["request"]
    assert uuid.UUID(request["uid"])
    gvk, gvr = {"group": "", "version": "v1", "kind": "Pod"}, {"group": "", "version": "v1", "resource": "pods"}
    assert (request["kind"], request["resource"], request["requestKind"], request["requestResource"]) == (
        gvk,
        gvr,
        gvk,
        gvr,
    )
    assert "name" not in request, "generateName is resolved after admission"
    assert (request["namespace"], request["operation"], request["dryRun"], request["oldObject"]) == (
        "default",
        "CREATE",
        False,
        None,
    )
    assert request["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "test"}
    assert request["userInfo"]["username"] == "kubernetes-admin"
    pod = request["object"]
    assert pod["metadata"] == {"generateName": "job-", "namespace": "default", "labels": {"app": "x"}}
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1"}
    assert created.metadata.name.startswith("job-") and created.metadata.uid
    [call] = hooked.admission.calls_to("pods.example.io")
    assert call.url == f"https://{SERVICE_HOST}:443/mutate?timeout=5s" and call.error is None


def test_each_call_gets_a_new_uid_and_named_pods_carry_their_name(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material, core: client.CoreV1Api
) -> None:
    register(hooked, hook_spec(material.ca_cert))
    core.create_namespaced_pod("default", gpu_pod(name="first"))
    core.create_namespaced_pod("default", gpu_pod(name="second"))
    first, second = (r["request"] for r in webhook.reviews)
    assert first["uid"] != second["uid"]
    assert (first["name"], second["name"]) == ("first", "second")


def test_dry_run_is_sent_and_nothing_is_stored(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material, core: client.CoreV1Api
) -> None:
    register(hooked, hook_spec(material.ca_cert))
    webhook.answer = patch_answer({"op": "add", "path": "/metadata/labels", "value": {"seen": "yes"}})
    created = core.create_namespaced_pod("default", gpu_pod(name="dry"), dry_run="All")
    assert created.metadata.labels == {"seen": "yes"}
    request = webhook.reviews[0]["request"]
    assert request["dryRun"] is True and request["options"]["dryRun"] == ["All"]
    assert hooked.get("v1", "Pod", "dry") is None


@pytest.mark.parametrize(
    ("versions", "sent"),
    [(["v1beta1", "v1"], "v1beta1"), (["v1", "v1beta1"], "v1"), (["v2", "v1"], "v1")],
)
def test_first_known_review_version_is_sent(
    hooked: FakeKubeAPI,
    webhook: Webhook,
    material: pki.Material,
    core: client.CoreV1Api,
    versions: list[str],
    sent: str,
) -> None:
    register(hooked, hook_spec(material.ca_cert, admissionReviewVersions=versions))
    core.create_namespaced_pod("default", gpu_pod())
    assert webhook.reviews[0]["apiVersion"] == f"admission.k8s.io/{sent}"


def test_v1beta1_answers_are_checked_leniently(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material, core: client.CoreV1Api
) -> None:
    register(hooked, hook_spec(material.ca_cert, admissionReviewVersions=["v1beta1"]))
    ops = base64.b64encode(json.dumps([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]).encode())
    webhook.answer = lambda review: (200, {"response": {"allowed": True, "patch": ops.decode()}})  # no uid/kind/type
    created = core.create_namespaced_pod("default", gpu_pod())
    assert created.metadata.labels == {"a": "b"}


# --- answers and patches -----------------------------------------------------------------------------


def test_patch_is_applied_and_stored(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material, core: client.CoreV1Api
) -> None:
    register(hooked, hook_spec(material.ca_cert))
    webhook.answer = patch_answer({"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"})
    created = core.create_namespaced_pod("default", gpu_pod(name="p"))
    stored = hooked.get("v1", "Pod", "p")
    assert stored is not None and stored["spec"]["schedulerName"] == "hami-scheduler"
    assert created.spec.scheduler_name == "hami-scheduler"


@pytest.mark.parametrize(
    ("status", "code", "reason", "message"),
    [
        ({"code": 403, "reason": "Forbidden", "message": "no"}, 403, "Forbidden", "denied the request: no"),
        ({"code": 200, "message": "low code"}, 400, "", "denied the request: low code"),
        ({"reason": "NotAllowed"}, 400, "NotAllowed", "denied the request: NotAllowed"),
        (None, 400, "", "denied the request without explanation"),
    ],
)
def test_denials_are_returned_as_kube_apiserver_words_them(
    hooked: FakeKubeAPI,
    webhook: Webhook,
    material: pki.Material,
    core: client.CoreV1Api,
    status: dict[str, Any] | None,
    code: int,
    reason: str,
    message: str,
) -> None:
    register(hooked, hook_spec(material.ca_cert, failurePolicy="Ignore"))  # a denial is not a calling failure
    denial = {"status": status} if status else {}
    webhook.answer = lambda review: (200, response(review, allowed=False, **denial))
    with pytest.raises(ApiException) as denied:
        core.create_namespaced_pod("default", gpu_pod(name="p"))
    assert failure(denied) == (code, reason, f'admission webhook "pods.example.io" {message}')
    assert hooked.get("v1", "Pod", "p") is None


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            lambda r: (200, {"response": {"uid": r["request"]["uid"], "allowed": True}}),
            "received invalid webhook response: expected webhook response of admission.k8s.io/v1, "
            "Kind=AdmissionReview, got /, Kind=",
        ),
        (
            lambda r: (200, response(r, uid="other")),
            'received invalid webhook response: expected response.uid="{uid}", got "other"',
        ),
        (
            lambda r: (200, response(r, patch=base64.b64encode(b"[]").decode())),
            "received invalid webhook response: webhook returned response.patch but not response.patchType",
        ),
        (
            lambda r: (200, response(r, patchType="JSONPatch", patch=base64.b64encode(b"{}").decode())),
            "received undecodable patch in webhook response: "
            "json: cannot unmarshal into Go value of type jsonpatch.Patch",
        ),
        (  # client-go shows an error body only if it is text: a JSON one that is no Status is "unknown"
            lambda r: (500, b"boom"),
            'failed to call webhook: an error on the server ("unknown") has prevented the request from succeeding',
        ),
        (
            lambda r: (500, "boom\n"),
            'failed to call webhook: an error on the server ("boom") has prevented the request from succeeding',
        ),
        (
            lambda r: (500, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "no quota"}),
            "failed to call webhook: no quota",
        ),
    ],
    ids=["no-kind", "wrong-uid", "patch-without-type", "patch-not-a-list", "http-500-json", "http-500-text", "status"],
)
def test_calling_failures_follow_failure_policy(
    hooked: FakeKubeAPI,
    webhook: Webhook,
    material: pki.Material,
    core: client.CoreV1Api,
    answer: Answer,
    why: str,
) -> None:
    register(hooked, hook_spec(material.ca_cert))
    webhook.answer = answer
    with pytest.raises(ApiException) as failed:
        core.create_namespaced_pod("default", gpu_pod(name="p"))
    uid = webhook.reviews[0]["request"]["uid"]
    expected = f'Internal error occurred: failed calling webhook "pods.example.io": {why.format(uid=uid)}'
    assert failure(failed) == (500, "InternalError", expected)
    register(hooked, hook_spec(material.ca_cert, failurePolicy="Ignore"))
    created = core.create_namespaced_pod("default", gpu_pod(name="p"))
    assert created.metadata.labels is None and hooked.get("v1", "Pod", "p") is not None
    assert [c.failed_open for c in hooked.admission.calls] == [False, True]


@pytest.mark.parametrize(
    ("operation", "why"),
    [  # the texts kube-apiserver 1.20.2 answered (evanphx/json-patch wraps ErrMissing: ": missing value")
        (
            {"op": "add", "path": "/metadata/annotations/x", "value": "1"},
            'add operation does not apply: doc is missing path: "/metadata/annotations/x": missing value',
        ),
        (
            {"op": "replace", "path": "/spec/nope/x", "value": "1"},
            "replace operation does not apply: doc is missing path: /spec/nope/x: missing value",
        ),
        (
            {"op": "replace", "path": "/spec/nope", "value": "1"},
            "replace operation does not apply: doc is missing key: /spec/nope: missing value",
        ),
        (
            {"op": "remove", "path": "/spec/nope"},
            "error in remove for path: '/spec/nope': Unable to remove nonexistent key: nope: missing value",
        ),
        (
            {"op": "test", "path": "/spec/schedulerName", "value": "zzz"},
            "testing value /spec/schedulerName failed: test failed",
        ),
        (  # the patched object is decoded again, and a quantity that does not parse stops it
            {"op": "add", "path": "/spec/containers/0/resources/limits/cpu", "value": "1x"},
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
    ],
    ids=["add", "replace-path", "replace-key", "remove", "test", "quantity"],
)
def test_a_patch_that_does_not_apply_is_a_500_even_under_ignore(
    hooked: FakeKubeAPI,
    webhook: Webhook,
    material: pki.Material,
    core: client.CoreV1Api,
    operation: dict[str, Any],
    why: str,
) -> None:
    register(hooked, hook_spec(material.ca_cert, failurePolicy="Ignore"))
    webhook.answer = patch_answer(operation)
    with pytest.raises(ApiException) as failed:
        core.create_namespaced_pod("default", gpu_pod(name="p"))
    assert failure(failed) == (500, "InternalError", f"Internal error occurred: {why}")
    assert json.loads(failed.value.body)["details"] == {"causes": [{"message": why}]}


def test_warnings_reach_the_client(hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material) -> None:
    register(hooked, hook_spec(material.ca_cert))
    webhook.answer = lambda review: (200, response(review, warnings=["GPU pod redirected", "", "GPU pod redirected"]))
    pod = json.dumps(gpu_pod(name="warned"))
    result = hooked.kubectl("create", "-f", "-", input=pod)
    assert result.stderr.count("Warning: GPU pod redirected") == 1


# --- transport --------------------------------------------------------------------------------------


def test_timeout_is_a_calling_failure(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material, core: client.CoreV1Api
) -> None:
    register(hooked, hook_spec(material.ca_cert, timeoutSeconds=1))

    def slow(review: dict[str, Any]) -> tuple[int, Any]:
        time.sleep(3)
        return allow(review)

    webhook.answer = slow
    started = time.monotonic()
    with pytest.raises(ApiException) as failed:
        core.create_namespaced_pod("default", gpu_pod(name="p"))
    assert time.monotonic() - started < 2.5, "the call was not cut at timeoutSeconds"
    assert failure(failed)[2] == (
        'Internal error occurred: failed calling webhook "pods.example.io": failed to call webhook: '
        f'Post "https://{SERVICE_HOST}:443/mutate?timeout=1s": context deadline exceeded'
    )
    assert webhook.requests[0][0] == "/mutate?timeout=1s"
    register(hooked, hook_spec(material.ca_cert, timeoutSeconds=1, failurePolicy="Ignore"))
    assert core.create_namespaced_pod("default", gpu_pod(name="p")).metadata.name == "p"


def other_ca_cert() -> bytes:
    return issue(SERVICE_HOST, now=datetime.now(UTC)).ca_cert


@pytest.mark.parametrize(
    ("bundle", "why"),
    [
        (
            other_ca_cert,
            'Post "https://hook.hooks.svc:443/mutate?timeout=5s": '
            "tls: failed to verify certificate: x509: certificate signed by unknown authority",
        ),
        (
            lambda: b"not a PEM",
            "could not get REST client: unable to load root certificates: unable to parse bytes as PEM block",
        ),
        (
            lambda: b"",
            'Post "https://hook.hooks.svc:443/mutate?timeout=5s": '
            "tls: failed to verify certificate: x509: certificate signed by unknown authority",
        ),
    ],
    ids=["other-ca", "garbage", "empty-means-system-roots"],
)
def test_certificate_must_chain_to_ca_bundle(
    hooked: FakeKubeAPI, webhook: Webhook, core: client.CoreV1Api, bundle: Callable[[], bytes], why: str
) -> None:
    register(hooked, hook_spec(bundle()))
    with pytest.raises(ApiException) as failed:
        core.create_namespaced_pod("default", gpu_pod())
    prefix = "" if why.startswith("could not") else "failed to call webhook: "
    assert failure(failed)[2] == f'Internal error occurred: failed calling webhook "pods.example.io": {prefix}{why}'
    assert webhook.requests == []


def test_hostname_is_checked_against_sans_only(kube_api: FakeKubeAPI, tmp_path: Path, core: client.CoreV1Api) -> None:
    """A certificate for another Service name fails, even though its CA is trusted (no CN fallback)."""
    wrong = issue("elsewhere.hooks.svc", now=datetime.now(UTC))
    server = Webhook(wrong, tmp_path)
    try:
        serve_service(kube_api, server.port)
        register(kube_api, hook_spec(wrong.ca_cert))
        with pytest.raises(ApiException) as failed:
            core.create_namespaced_pod("default", gpu_pod())
    finally:
        server.close()
    assert failure(failed)[2].endswith(
        "tls: failed to verify certificate: x509: certificate is valid for elsewhere.hooks.svc, not hook.hooks.svc"
    )


def test_service_must_exist_and_expose_the_port(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material, core: client.CoreV1Api
) -> None:
    service = {"service": {"name": "hook", "namespace": NS, "path": "/mutate", "port": 8443}}
    register(hooked, hook_spec(material.ca_cert, clientConfig={**service, "caBundle": b64(material.ca_cert)}))
    with pytest.raises(ApiException) as no_port:
        core.create_namespaced_pod("default", gpu_pod())
    assert failure(no_port)[2].endswith(': no service port 8443 found for service "hook"')
    register(hooked, hook_spec(material.ca_cert))
    hooked.delete("v1", "Service", "hook", NS)
    with pytest.raises(ApiException) as missing:
        core.create_namespaced_pod("default", gpu_pod())
    assert failure(missing)[2].endswith(': service "hook" not found')
    assert webhook.requests == []


def test_webhook_configuration_writes_never_go_to_webhooks(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material
) -> None:
    everything = [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]
    register(hooked, hook_spec(material.ca_cert, rules=everything))
    webhook.answer = lambda review: (500, b"down")
    config = hooked.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "example")
    assert config is not None
    new = {**config, "metadata": {"name": "second"}}
    hooked.kubectl("create", "-f", "-", input=json.dumps(new))
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    failed = hooked.kubectl("create", "-f", "-", input=json.dumps(configmap), check=False)
    assert failed.returncode != 0 and 'failed calling webhook "pods.example.io"' in failed.stderr
    assert [r["request"]["kind"]["kind"] for r in webhook.reviews] == ["ConfigMap"]


# --- which webhooks are called -----------------------------------------------------------------------


def test_namespace_selector_sees_the_automatic_name_label(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material, core: client.CoreV1Api
) -> None:
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NS]}]}
    register(hooked, hook_spec(material.ca_cert, namespaceSelector=selector))
    core.create_namespaced_pod(NS, gpu_pod())
    assert webhook.requests == []
    core.create_namespaced_pod("default", gpu_pod())
    assert len(webhook.requests) == 1


def test_object_selector_and_match_conditions(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material, core: client.CoreV1Api
) -> None:
    not_ignored = {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]}
    gpu_only = [
        {
            "name": "has-gpu",
            "expression": "object.spec.containers.exists(c, has(c.resources.limits) && "
            "'nvidia.com/gpu' in c.resources.limits)",
        }
    ]
    register(hooked, hook_spec(material.ca_cert, objectSelector=not_ignored, matchConditions=gpu_only))
    core.create_namespaced_pod("default", gpu_pod(labels={"hami.io/webhook": "ignore"}))
    cpu = gpu_pod()
    del cpu["spec"]["containers"][0]["resources"]
    core.create_namespaced_pod("default", cpu)
    assert webhook.requests == []
    core.create_namespaced_pod("default", gpu_pod())
    assert len(webhook.requests) == 1


def test_match_condition_errors_follow_failure_policy(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material, core: client.CoreV1Api
) -> None:
    broken = [{"name": "broken", "expression": "object.spec.missing == 1"}]
    register(hooked, hook_spec(material.ca_cert, matchConditions=broken))
    with pytest.raises(ApiException) as forbidden:
        core.create_namespaced_pod("default", gpu_pod(name="p"))
    status, reason, message = failure(forbidden)
    assert (status, reason) == (403, "Forbidden") and message.startswith('pods "p" is forbidden: broken: ')
    register(hooked, hook_spec(material.ca_cert, matchConditions=broken, failurePolicy="Ignore"))
    core.create_namespaced_pod("default", gpu_pod(name="p"))
    assert webhook.requests == []


def test_if_needed_reinvokes_once_after_a_later_change(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material, core: client.CoreV1Api
) -> None:
    """First webhook adds label a, second label b: the IfNeeded first one sees the second's change."""

    def by_path(review: dict[str, Any]) -> tuple[int, Any]:
        labels = review["request"]["object"]["metadata"].get("labels") or {}
        label = "a" if webhook.requests[-1][0].startswith("/a") else "b"
        if label in labels:
            return allow(review)
        ops = [{"op": "add", "path": "/metadata/labels", "value": {**labels, label: "1"}}]
        return patch_answer(*ops)(review)

    webhook.answer = by_path

    def spec(name: str, path: str, policy: str) -> dict[str, Any]:
        service = {"name": "hook", "namespace": NS, "path": path}
        config = {"service": service, "caBundle": b64(material.ca_cert)}
        return hook_spec(material.ca_cert, name=name, clientConfig=config, reinvocationPolicy=policy)

    register(hooked, spec("a.example.io", "/a", "IfNeeded"), spec("b.example.io", "/b", "IfNeeded"))
    created = core.create_namespaced_pod("default", gpu_pod())
    assert created.metadata.labels == {"a": "1", "b": "1"}
    assert [(c.webhook, c.round) for c in hooked.admission.calls] == [
        ("a.example.io", 0),
        ("b.example.io", 0),
        ("a.example.io", 1),
    ]
    hooked.admission.calls.clear()
    register(hooked, spec("a.example.io", "/a", "Never"), spec("b.example.io", "/b", "IfNeeded"))
    core.create_namespaced_pod("default", gpu_pod())
    assert [c.webhook for c in hooked.admission.calls] == ["a.example.io", "b.example.io"]


def test_configurations_run_in_name_order(
    hooked: FakeKubeAPI, webhook: Webhook, material: pki.Material, core: client.CoreV1Api
) -> None:
    register(hooked, hook_spec(material.ca_cert, name="z.example.io"), name="b-second")
    register(hooked, hook_spec(material.ca_cert, name="y.example.io"), name="a-first")
    core.create_namespaced_pod("default", gpu_pod())
    assert [c.webhook for c in hooked.admission.calls] == ["y.example.io", "z.example.io"]


# --- the product's own webhook ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def product(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, pki.LocalFiles]]:
    """hami-webhook under gunicorn with a certificate for hami-webhook.hami-system.svc."""
    files = pki.write_local(tmp_path_factory.mktemp("product-tls"), ["hami-webhook.hami-system.svc"])
    port = free_port()
    proc = gunicorn(port, files.cert, files.key, HAMI_WEBHOOK_WORKERS="1")
    context = ssl.create_default_context(cafile=str(files.ca_cert))
    context.check_hostname = False
    wait_ready(port, context, proc, timeout=60)
    yield port, files
    assert "Traceback" not in stop(proc)


def test_the_product_webhook_redirects_gpu_pods_and_denies_bound_ones(
    kube_api: FakeKubeAPI, product: tuple[int, pki.LocalFiles], core: client.CoreV1Api
) -> None:
    port, files = product
    serve_service(kube_api, port, namespace="hami-system", name="hami-webhook")
    spec = hook_spec(files.ca_cert.read_bytes(), name="pods.hami.io", admissionReviewVersions=["v1", "v1beta1"])
    spec["clientConfig"]["service"] = {"name": "hami-webhook", "namespace": "hami-system", "path": "/webhook"}
    register(kube_api, spec, name="hami-webhook")
    created = core.create_namespaced_pod("default", gpu_pod())
    stored = kube_api.get("v1", "Pod", created.metadata.name)
    assert stored is not None and stored["spec"]["schedulerName"] == "hami-scheduler"
    bound = gpu_pod(name="bound")
    bound["spec"]["nodeName"] = "node-1"
    denied = kube_api.kubectl("create", "-f", "-", input=json.dumps(bound), check=False)
    assert denied.returncode == 1
    assert (
        'Error from server (Forbidden): error when creating "STDIN": admission webhook "pods.hami.io" '
        "denied the request: pod has node assigned"
    ) in denied.stderr
    assert kube_api.get("v1", "Pod", "bound") is None
