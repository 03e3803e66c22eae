"""Shared by the certgen tests: names, object builders, and checks that verify output like a client would."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from certgen import pki
from testbed.cluster import RealKube
from testbed.tls import client_context
from tests.realkube.faults import FaultyProxy

SECRET = "hami-webhook-tls"
CA_SECRET = "hami-webhook-tls-ca"
# The webhook's Service, named in the certificate and the configurations. Only a name to certgen: the Secrets
# go to each test's own namespace (`Cluster.namespace`), which need not be the Service's.
SERVICE_NAMESPACE = "hami-system"
SERVICE_HOST = f"hami-webhook.{SERVICE_NAMESPACE}.svc"
HOSTS = f"{SERVICE_HOST},127.0.0.1"
MUTATING, VALIDATING = "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Run:
    """One certgen invocation: its exit code and what it wrote to stderr."""

    code: int
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stderr.splitlines()

    def has(self, *fragments: str) -> bool:
        """True if one line contains all `fragments`."""
        return any(all(f in line for f in fragments) for line in self.lines)


Certgen = Callable[..., Run]


def issue(
    hosts: str | list[str] = "svc.ns.svc,127.0.0.1",
    *,
    now: datetime,
    policy: pki.Policy | None = None,
) -> pki.Material:
    """A fresh CA and leaf as `create` would make them at `now`."""
    return pki.reconcile(pki.Stored(), hosts, policy or pki.Policy(), now).material


def stored(material: pki.Material, **replace: bytes | None) -> pki.Stored:
    """`material` as stored, with some parts replaced (or removed with None)."""
    parts = {
        "ca_cert": material.ca_cert,
        "ca_key": material.ca_key,
        "bundle": material.bundle,
        "cert": material.cert,
        "key": material.key,
    }
    return pki.Stored(**(parts | replace))


def certs(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem)


def spki(public_key: object) -> bytes:
    return public_key.public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def key_public_bytes(key_pem: bytes) -> bytes:
    return spki(serialization.load_pem_private_key(key_pem, password=None).public_key())


def handshake(cert_file: Path, key_file: Path, ca_pem: bytes, server_hostname: str) -> str:
    """TLS handshake in memory between a server using the files and a `client_context`.

    Returns the negotiated protocol version; raises ssl.SSLCertVerificationError
    when the client rejects the server's certificate.
    """
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert_file, key_file)
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context(ca_pem).wrap_bio(c_in, c_out, server_hostname=server_hostname)
    server = server_context.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for name, end, outgoing, peer_incoming in (
            ("client", client, c_out, s_in),
            ("server", server, s_out, c_in),
        ):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            if data := outgoing.read():
                peer_incoming.write(data)
        if all(done.values()):
            return str(client.version())
    raise AssertionError("handshake did not finish")


def write_pair(directory: Path, material: pki.Material) -> tuple[Path, Path]:
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(material.cert)
    key_file.write_bytes(material.key)
    return cert_file, key_file


# --- Kubernetes objects ------------------------------------------------------------

# The official client's typed calls for each kind a test seeds or reads: (API class, method suffix).
_CALLS: dict[str, tuple[type, str]] = {
    "Secret": (client.CoreV1Api, "namespaced_secret"),
    MUTATING: (client.AdmissionregistrationV1Api, "mutating_webhook_configuration"),
    VALIDATING: (client.AdmissionregistrationV1Api, "validating_webhook_configuration"),
}


@dataclass(frozen=True)
class Cluster:
    """The shared real API server as one test sets it up and checks it: a namespace and a webhook configuration
    name of its own. Calls go straight to the server, not through the FaultyProxy, so that the proxy's
    `requests` hold only what certgen sent."""

    kube: RealKube
    client: client.ApiClient
    namespace: str
    webhook: str

    def create(self, obj: Obj) -> Obj:
        """Create `obj` (in its own namespace, else the test's); the stored object."""
        return self._call("create", obj["kind"], obj.get("metadata", {}).get("namespace"), body=obj)

    def replace(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        return self._call("replace", obj["kind"], meta.get("namespace"), name=meta["name"], body=obj)

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        try:
            return self._call("read", kind, namespace, name=name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        self._call("delete", kind, namespace, name=name)

    def configuration(self, kind: str = MUTATING) -> Obj:
        """This test's webhook configuration of `kind`, as stored."""
        stored = self.get(kind, self.webhook)
        assert stored is not None, f"{kind} {self.webhook} missing"
        return stored

    def _call(self, verb: str, kind: str, namespace: str | None, **params: Any) -> Obj:
        api_class, suffix = _CALLS[kind]
        if suffix.startswith("namespaced_"):
            params["namespace"] = namespace or self.namespace
        response = getattr(api_class(self.client), f"{verb}_{suffix}")(**params, _preload_content=False)
        return json.loads(response.data)


@contextmanager
def namespace(api_client: client.ApiClient, name: str) -> Iterator[str]:
    """Namespace `name` for the block, deleted after it (the namespace controller removes what it holds)."""
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


def seed_secrets(
    cluster: Cluster, material: pki.Material, *, serving: dict[str, bytes] | None = None, secret_type: str = ""
) -> tuple[Obj, Obj]:
    """Store `material` as `create` would (or `serving` data instead), returning both stored Secrets."""
    data = (
        serving
        if serving is not None
        else {"tls.crt": material.cert, "tls.key": material.key, "ca.crt": material.bundle}
    )
    ca = cluster.create(secret(CA_SECRET, {"ca.crt": material.ca_cert, "ca.key": material.ca_key}, "Opaque"))
    return ca, cluster.create(secret(SECRET, data, secret_type or "kubernetes.io/tls"))


def secret(name: str, data: dict[str, bytes], secret_type: str, namespace: str | None = None) -> Obj:
    """A Secret for `namespace` (None: the test's own)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name} | ({"namespace": namespace} if namespace else {}),
        "type": secret_type,
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }


def read_secret(cluster: Cluster, name: str = SECRET) -> Obj:
    stored = cluster.get("Secret", name)
    assert stored is not None, f"Secret {name} missing"
    return stored


def secret_data(cluster: Cluster, name: str = SECRET) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in read_secret(cluster, name)["data"].items()}


def webhook_configuration(name: str, webhooks: list[Obj], kind: str = MUTATING) -> Obj:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "labels": {"app": "hami-webhook"}, "annotations": {"note": "keep"}},
        "webhooks": webhooks,
    }


def webhook(name: str, **extra: Any) -> Obj:
    """A complete v1 webhook entry as a chart would declare it."""
    entry = {
        "name": name,
        "admissionReviewVersions": ["v1", "v1beta1"],
        "sideEffects": "None",
        "timeoutSeconds": 10,
        "clientConfig": {
            "service": {"name": "hami-webhook", "namespace": SERVICE_NAMESPACE, "path": "/webhook", "port": 443}
        },
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "*"}
        ],
        "namespaceSelector": {
            "matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]
        },
        "objectSelector": {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]},
    }
    return entry | extra


def requests_to(api: FaultyProxy, fragment: str, method: str | None = None) -> list[Any]:
    return [r for r in api.requests if fragment in r.path and (method is None or r.method == method)]


def json_lines(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines()]
