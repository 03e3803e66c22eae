"""End to end: gunicorn serving the webhook over real TLS on loopback, as kube-apiserver would call it."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from certgen.local import LocalFiles, write_local
from testbed.pods import container, pod
from testbed.ports import free_port
from testbed.reviews import admission_review, redirected
from testbed.servers import Server, gunicorn, serving_env, stop, wait_ready
from testbed.tls import client_context

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

SERVICE_NAME = "hami-webhook.hami-system.svc"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> LocalFiles:
    """What `certgen local` writes (the certificate profile) for the Service's name and loopback."""
    return write_local(tmp_path_factory.mktemp("tls"), [SERVICE_NAME, "localhost", "127.0.0.1"])


@pytest.fixture(scope="module")
def server(pki: LocalFiles) -> Iterator[int]:
    port = free_port()
    proc = gunicorn(port, pki.cert, pki.key, HAMI_WEBHOOK_WORKERS="1")
    wait_ready(port, client_context(pki.ca_cert), proc)
    yield port
    log = stop(proc)
    assert "Traceback" not in log
    assert 'review uid=uid-v1 namespace=default pod="" generateName=job- operation=CREATE allowed=true code=200' in log


def call(conn: http.client.HTTPSConnection, body: dict[str, Any]) -> dict[str, Any]:
    conn.request("POST", "/webhook?timeout=10s", json.dumps(body), {"Content-Type": "application/json"})
    reply = conn.getresponse()
    assert reply.status == 200
    return json.loads(reply.read())


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_reviews_over_tls_keep_alive(server: int, pki: LocalFiles, host: str) -> None:
    obj = pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}))
    conn = http.client.HTTPSConnection(host, server, context=client_context(pki.ca_cert), timeout=5)
    for version in ("v1", "v1beta1"):
        answer = call(conn, admission_review(obj, version=version, uid=f"uid-{version}"))
        assert answer["apiVersion"] == f"admission.k8s.io/{version}" and answer["kind"] == "AdmissionReview"
        response = answer["response"]
        assert response["uid"] == f"uid-{version}" and response["allowed"] is True
        ops = json.loads(base64.b64decode(response["patch"]))
        assert jsonpatch.apply_patch(obj, ops) == redirected(obj)
    assert conn.sock is not None, "the connection was kept alive across both reviews"
    conn.close()


def test_denial_over_tls(server: int, pki: LocalFiles) -> None:
    conn = http.client.HTTPSConnection("127.0.0.1", server, context=client_context(pki.ca_cert), timeout=5)
    response = call(conn, admission_review(pod(container(limits={"nvidia.com/gpu": "1"}), nodeName="n1")))["response"]
    conn.close()
    assert (response["allowed"], response["status"]["code"], response["status"]["message"]) == (
        False,
        403,
        "pod has node assigned",
    )


def test_client_trusting_only_ca_crt_accepts_the_service_name(server: int, pki: LocalFiles) -> None:
    """As the API server calls it: the Service's name, verified against ca.crt alone."""
    with socket.create_connection(("127.0.0.1", server), timeout=10) as raw:
        with client_context(pki.ca_cert.read_bytes()).wrap_socket(raw, server_hostname=SERVICE_NAME) as tls:
            version = str(tls.version())
            tls.sendall(f"GET /healthz HTTP/1.1\r\nHost: {SERVICE_NAME}\r\nConnection: close\r\n\r\n".encode())
            response = b""
            while chunk := tls.recv(4096):
                response += chunk
    assert version in ("TLSv1.2", "TLSv1.3")
    assert response.startswith(b"HTTP/1.1 200") and json.loads(response.split(b"\r\n\r\n", 1)[1]) == {"status": "ok"}


def test_wrong_hostname_is_rejected(server: int, pki: LocalFiles) -> None:
    with socket.create_connection(("127.0.0.1", server), timeout=5) as raw:
        with pytest.raises(ssl.SSLCertVerificationError, match=r"Hostname mismatch|doesn.t match"):
            client_context(pki.ca_cert).wrap_socket(raw, server_hostname="hami-webhook.other.svc")


def test_tls_below_1_2_is_refused(server: int, pki: LocalFiles) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(str(pki.ca_cert))
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # asking for TLS 1.1 is the point
        context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_1
    with socket.create_connection(("127.0.0.1", server), timeout=5) as raw:
        with pytest.raises(ssl.SSLError):
            context.wrap_socket(raw, server_hostname="localhost")


def test_tls_1_3_is_accepted(server: int, pki: LocalFiles) -> None:
    context = client_context(pki.ca_cert)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    with socket.create_connection(("127.0.0.1", server), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.version() == "TLSv1.3"


@pytest.mark.parametrize(
    ("env", "code", "message"),
    [
        pytest.param(
            {"HAMI_WEBHOOK_TLS_CERT": "/nonexistent/tls.crt"},
            1,
            "file not found: /nonexistent/tls.crt",
            id="missing-cert",
        ),
        pytest.param(
            {"HAMI_WEBHOOK_TLS_KEY": "/nonexistent/tls.key"},
            1,
            "file not found: /nonexistent/tls.key",
            id="missing-key",
        ),
        pytest.param({"HAMI_WEBHOOK_TLS_KEY": "CA"}, 1, "not a usable certificate/key pair", id="key-is-not-a-key"),
        pytest.param(
            {"HAMI_ENABLE_ASCEND": "maybe"}, 2, "HAMI_ENABLE_ASCEND: expected true or false, got 'maybe'", id="bad-flag"
        ),
        pytest.param(
            {"GUNICORN_CMD_ARGS": "--forwarded-allow-ips=*"},
            1,
            "Error: app.serving.worker does not honour gunicorn's forwarded_allow_ips (set in the configuration)",
            id="setting-not-honoured",
        ),
        pytest.param(
            {"GUNICORN_CMD_ARGS": "--check-config"},
            1,
            "Error: hami-webhook serve does not honour gunicorn's check_config (set in the configuration)",
            id="serve-does-not-check",
        ),
    ],
)
def test_start_up_errors_are_clear(pki: LocalFiles, env: dict[str, str], code: int, message: str) -> None:
    base = serving_env(free_port(), pki.cert, pki.key)
    if env.get("HAMI_WEBHOOK_TLS_KEY") == "CA":
        env = {"HAMI_WEBHOOK_TLS_KEY": str(pki.ca_cert)}
    script = Path(sys.executable).with_name("hami-webhook")
    proc = Server([str(script), "serve"], {**base, **env})
    proc.wait(timeout=30)
    err = proc.log()
    assert proc.returncode == code
    assert message in err
    assert "Traceback" not in err
