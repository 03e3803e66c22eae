"""The Secrets and webhook configurations certgen reads and writes.

Objects travel as plain JSON dicts through the official client's transport, so
fields this client version does not model survive a read-modify-write. Every
write is GET → decide → PUT with the resourceVersion read (POST when absent);
a 409 means someone else wrote first, so the caller re-reads and decides again. The client configuration,
the API error and the back-off are the webhook's own (app.kube).
"""

from __future__ import annotations

import base64
import copy
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from app.kube import transport
from app.kube.backoff import Backoff
from app.kube.config import LOAD_ERRORS, load_configuration
from app.kube.errors import CONFLICT, NOT_FOUND, ApiError
from app.kube.transport import JSON
from certgen import certificates, log, pki

MAX_ATTEMPTS = 5
REQUEST_TIMEOUT = (10, 30)  # connect, read (seconds)
FIELD_MANAGER = "hami-webhook-certgen"
TLS_SECRET = "kubernetes.io/tls"
OPAQUE_SECRET = "Opaque"
CA_CERT_KEY, CA_KEY_KEY = "ca.crt", "ca.key"
LEGACY_CA_KEY = "ca"
"""Where kube-webhook-certgen keeps the CA in its (Opaque) Secret."""
APPEARANCE_WAIT = Backoff(first=0.5, cap=5.0)
"""Polling for a webhook configuration that is not there yet (its manifest may be applied after the Job)."""
AGAIN = (CONFLICT, NOT_FOUND)
"""Answers to a write that mean someone else changed the object first: read again and decide again."""


class KubeError(Exception):
    """A failure the CLI reports as one error line and exit code 1 (as it does an ApiError)."""


@contextmanager
def connect(kubeconfig: str | None) -> Iterator[client.ApiClient]:
    """Client from `kubeconfig` if given, else in-cluster config, else $KUBECONFIG or ~/.kube/config."""
    try:
        configuration = load_configuration(kubeconfig)
    except LOAD_ERRORS as exc:
        raise KubeError(f"cannot load Kubernetes client configuration: {exc}") from None
    with client.ApiClient(configuration) as api:
        api.user_agent = FIELD_MANAGER
        yield api


def _request(api: client.ApiClient, method: str, path: str, action: str, body: JSON | None = None) -> JSON:
    """One API call; an answer other than 2xx raises ApiError, a connection error KubeError, each naming `action`."""
    query = {"fieldManager": FIELD_MANAGER} if method in ("POST", "PUT") else None
    try:
        return transport.request(api, method, path, timeout=REQUEST_TIMEOUT, body=body, query=query, action=action)
    except ApiException as exc:  # the client's wrapping of TLS failures
        raise KubeError(f"{action}: cannot reach the API server: {exc.reason}") from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KubeError(f"{action}: cannot reach the API server: {exc}") from None


def _get(api: client.ApiClient, path: str, action: str) -> JSON | None:
    try:
        return _request(api, "GET", path, action)
    except ApiError as exc:
        if exc.code == NOT_FOUND:
            return None
        raise


# --- Secrets -----------------------------------------------------------------


@dataclass(frozen=True)
class SecretLayout:
    """Where `create` keeps the PKI: a serving Secret the webhook pod mounts, and a
    separate CA Secret it does not, so the pod never holds the CA signing key."""

    namespace: str
    name: str
    ca_secret_name: str
    cert_key: str = "tls.crt"
    key_key: str = "tls.key"
    bundle_key: str = CA_CERT_KEY

    @property
    def serving_type(self) -> str:
        """kubernetes.io/tls, unless custom key names rule it out (it requires tls.crt/tls.key)."""
        if (self.cert_key, self.key_key) == ("tls.crt", "tls.key"):
            return TLS_SECRET
        return OPAQUE_SECRET


def _secret_path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{quote(namespace, safe='')}/secrets"
    return f"{base}/{quote(name, safe='')}" if name else base


def _read_secret(api: client.ApiClient, namespace: str, name: str) -> JSON | None:
    return _get(api, _secret_path(namespace, name), f"read Secret {namespace}/{name}")


def _secret_data(secret: JSON | None) -> dict[str, bytes]:
    if secret is None:
        return {}
    return {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}


def ensure_secrets(
    api: client.ApiClient,
    layout: SecretLayout,
    hosts: Sequence[str],
    policy: pki.Policy,
) -> None:
    """Bring both Secrets to what `pki.reconcile` decides; no write when nothing changes."""
    ns = layout.namespace
    for attempt in range(1, MAX_ATTEMPTS + 1):
        ca_secret = _read_secret(api, ns, layout.ca_secret_name)
        serving = _read_secret(api, ns, layout.name)
        ca_data, serving_data = _secret_data(ca_secret), _secret_data(serving)
        stored = pki.Stored(
            ca_cert=ca_data.get(CA_CERT_KEY),
            ca_key=ca_data.get(CA_KEY_KEY),
            bundle=serving_data.get(layout.bundle_key, serving_data.get(LEGACY_CA_KEY)),
            cert=serving_data.get(layout.cert_key),
            key=serving_data.get(layout.key_key),
        )
        plan = pki.reconcile(stored, hosts, policy, datetime.now(UTC))
        plan.report()
        material = plan.material
        try:
            _write_secret(
                api,
                ns,
                layout.ca_secret_name,
                OPAQUE_SECRET,
                {CA_CERT_KEY: material.ca_cert, CA_KEY_KEY: material.ca_key},
                ca_secret,
            )
            _write_secret(
                api,
                ns,
                layout.name,
                layout.serving_type,
                {
                    layout.cert_key: material.cert,
                    layout.key_key: material.key,
                    layout.bundle_key: material.bundle,
                },
                serving,
            )
            return
        except ApiError as exc:
            if exc.code not in AGAIN:
                raise
            log.warning("concurrent change, reading again", attempt=attempt, error=str(exc))
    raise KubeError(f"gave up after {MAX_ATTEMPTS} attempts: the Secrets keep changing concurrently")


def _write_secret(
    api: client.ApiClient,
    namespace: str,
    name: str,
    secret_type: str,
    data: Mapping[str, bytes],
    existing: JSON | None,
) -> None:
    """Make Secret `name` hold exactly `data` with `secret_type`, writing only on difference."""
    where = {"namespace": namespace, "name": name}
    metadata = dict(where)
    if existing is not None and existing.get("type", OPAQUE_SECRET) != secret_type:
        meta = existing["metadata"]
        preconditions = {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}
        _request(
            api,
            "DELETE",
            _secret_path(namespace, name),
            f"delete Secret {namespace}/{name}",
            {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions},
        )
        log.info(
            "deleted Secret to recreate it",
            **where,
            reason=f"type {existing.get('type', OPAQUE_SECRET)} is immutable and must be {secret_type}",
        )
        metadata |= {k: v for k, v in meta.items() if k in ("labels", "annotations")}
        existing = None
    encoded = {key: base64.b64encode(value).decode() for key, value in data.items()}
    if existing is None:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": secret_type,
            "data": encoded,
        }
        created = _request(api, "POST", _secret_path(namespace), f"create Secret {namespace}/{name}", body)
        log.info(
            "created Secret",
            **where,
            type=secret_type,
            keys=sorted(data),
            resource_version=created["metadata"].get("resourceVersion"),
        )
        return
    current = _secret_data(existing)
    if current == data:
        log.info("Secret unchanged, not written", **where)
        return
    changed = sorted(k for k in current.keys() | data.keys() if current.get(k) != data.get(k))
    updated = _request(
        api,
        "PUT",
        _secret_path(namespace, name),
        f"update Secret {namespace}/{name}",
        {**existing, "data": encoded},
    )
    log.info(
        "updated Secret",
        **where,
        changed=changed,
        resource_version=updated["metadata"].get("resourceVersion"),
    )


def read_ca_bundle(api: client.ApiClient, namespace: str, name: str, bundle_key: str) -> bytes:
    """The CA bundle PEM from the serving Secret; KubeError if the Secret or a certificate is missing."""
    secret = _read_secret(api, namespace, name)
    if secret is None:
        raise KubeError(f"Secret {namespace}/{name} not found: run `certgen create` first")
    data = _secret_data(secret)
    key = bundle_key
    if key not in data and LEGACY_CA_KEY in data:
        key = LEGACY_CA_KEY
        log.info(
            "using the kube-webhook-certgen CA key",
            namespace=namespace,
            name=name,
            key=key,
            reason=f"the Secret has no {bundle_key!r} key",
        )
    if not certificates.parse_certificates(data.get(key)):
        raise KubeError(
            f"Secret {namespace}/{name} has no CA certificate under key {bundle_key!r}"
            f" (keys present: {', '.join(sorted(data)) or 'none'})"
        )
    return data[key]


# --- Webhook configurations -------------------------------------------------


@dataclass(frozen=True)
class WebhookKind:
    kind: str
    plural: str

    def path(self, name: str) -> str:
        return f"/apis/admissionregistration.k8s.io/v1/{self.plural}/{quote(name, safe='')}"


MUTATING = WebhookKind("MutatingWebhookConfiguration", "mutatingwebhookconfigurations")
VALIDATING = WebhookKind("ValidatingWebhookConfiguration", "validatingwebhookconfigurations")
POLICIES = ("Fail", "Ignore")
DEFAULT_POLICY = "Fail"
"""What the API server assumes (and stores) when a v1 webhook has no failurePolicy."""


@dataclass(frozen=True)
class WebhookChange:
    """What happens to one webhook entry; a missing failurePolicy reads as Fail."""

    name: str
    old_policy: str
    new_policy: str
    ca_bundle_changed: bool

    @property
    def changed(self) -> bool:
        return self.ca_bundle_changed or self.old_policy != self.new_policy


def desired_webhooks(
    webhooks: Sequence[JSON], ca_b64: str | None, failure_policy: str | None
) -> tuple[list[JSON], list[WebhookChange]]:
    """The webhook entries with caBundle and/or failurePolicy set, and what changed in each."""
    desired, changes = [], []
    for webhook in webhooks:
        new = copy.deepcopy(webhook)
        if ca_b64 is not None:
            new.setdefault("clientConfig", {})["caBundle"] = ca_b64
        old_policy = webhook.get("failurePolicy") or DEFAULT_POLICY
        if failure_policy is not None and failure_policy != old_policy:
            new["failurePolicy"] = failure_policy
        desired.append(new)
        changes.append(
            WebhookChange(
                name=str(webhook.get("name")),
                old_policy=old_policy,
                new_policy=failure_policy or old_policy,
                ca_bundle_changed=ca_b64 is not None and webhook.get("clientConfig", {}).get("caBundle") != ca_b64,
            )
        )
    return desired, changes


def update_webhooks(
    api: client.ApiClient,
    kind: WebhookKind,
    name: str,
    *,
    ca_bundle: bytes | None = None,
    failure_policy: str | None = None,
    wait_until: float | None = None,
) -> None:
    """Set caBundle and/or failurePolicy on every webhook of one configuration.

    Waits with exponential backoff until the monotonic time `wait_until` for
    the configuration to appear, writes only when some webhook changes, and
    logs each webhook's outcome.
    """
    ca_b64 = base64.b64encode(ca_bundle).decode() if ca_bundle is not None else None
    for attempt in range(1, MAX_ATTEMPTS + 1):
        obj = _wait_for(api, kind, name, wait_until if attempt == 1 else None)
        if not obj.get("webhooks"):
            log.warning(f"{kind.kind} has no webhooks, nothing to set", name=name)
            return
        webhooks, changes = desired_webhooks(obj["webhooks"], ca_b64, failure_policy)
        if not any(change.changed for change in changes):
            _report(kind, name, changes)
            log.info(f"{kind.kind} already up to date, not written", name=name)
            return
        try:
            updated = _request(api, "PUT", kind.path(name), f"update {kind.kind} {name}", {**obj, "webhooks": webhooks})
        except ApiError as exc:
            if exc.code not in AGAIN:
                raise
            log.warning("concurrent change, reading again", attempt=attempt, error=str(exc))
            continue
        _report(kind, name, changes)
        log.info(f"updated {kind.kind}", name=name, resource_version=updated["metadata"].get("resourceVersion"))
        return
    raise KubeError(f"gave up after {MAX_ATTEMPTS} attempts: {kind.kind} {name} keeps changing")


def _wait_for(api: client.ApiClient, kind: WebhookKind, name: str, wait_until: float | None) -> JSON:
    action = f"read {kind.kind} {name}"
    start, attempt = time.monotonic(), 0
    while (obj := _get(api, kind.path(name), action)) is None:
        remaining = (wait_until or 0) - time.monotonic()
        if remaining <= 0:
            waited = time.monotonic() - start
            raise KubeError(f"{kind.kind} {name!r} not found" + (f" after waiting {waited:.1f}s" if waited else ""))
        if attempt == 0:
            log.info(f"{kind.kind} not found yet, waiting", name=name, up_to=f"{remaining:.1f}s")
        time.sleep(min(APPEARANCE_WAIT.delay(attempt), remaining))
        attempt += 1
    return obj


def _report(kind: WebhookKind, configuration: str, changes: Sequence[WebhookChange]) -> None:
    for change in changes:
        policy = change.new_policy
        if change.old_policy != change.new_policy:
            policy = f"{change.old_policy} -> {change.new_policy}"
        log.info(
            "webhook changed" if change.changed else "webhook unchanged",
            kind=kind.kind,
            configuration=configuration,
            webhook=change.name,
            failure_policy=policy,
            ca_bundle="updated" if change.ca_bundle_changed else "unchanged",
        )
