"""What the check reads, with the caller's credentials: GETs and LISTs, two server-side dry-run creates, a TLS
handshake with the webhook's Service, and SubjectAccessReviews of the webhook's own ServiceAccount. Nothing is
written (``dryRun=All``; a SubjectAccessReview is answered, never stored). Every answer but "not found" and a
refusal that stops nothing becomes an ``Unread`` the checks name; no answer at all is ``CheckError``.
"""

from __future__ import annotations

import base64
import socket
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.check.core import (
    CONFIGURATION,
    HOME_ENV,
    LEDGER_NEEDS,
    QUOTA_NEEDS,
    DryRun,
    Listed,
    Obj,
    Read,
    Served,
    Snapshot,
    Unread,
    container_env,
    hook,
    quota_on,
    scheduler_name,
    service_ref,
)
from app.kube.errors import NOT_FOUND, ApiError
from app.preview.policies import FLOOR, REVIEWED, ROUTED

if TYPE_CHECKING:
    from kubernetes import client

GROUP = "/apis/admissionregistration.k8s.io/v1"
PROBE_TIMEOUT = 2.0  # seconds for the TLS handshake with the Service: outside the cluster it is seldom reachable
CHECK_LABEL = {"app.kubernetes.io/name": "hami-webhook-check"}
"""On the dry-run Pods, so an audit log or another webhook can tell them apart."""


class CheckError(Exception):
    """What stops the check before it can judge anything (the API server unreachable, the namespace unknown)."""


def read(api: client.ApiClient, namespace: str, default_scheduler: str, timeout: float | None) -> Snapshot:
    """Everything the checks judge, read in the order they need it (the configuration names the Service)."""
    reader = _Reader(api, timeout)
    namespace_object = reader.get(f"/api/v1/namespaces/{namespace}", f"get namespace {namespace}")
    if namespace_object is None:
        raise CheckError(f'namespaces "{namespace}" not found')
    scene = Snapshot(
        namespace=namespace,
        now=time.time(),
        default_scheduler=default_scheduler,
        configuration=reader.get(f"{GROUP}/mutatingwebhookconfigurations/{CONFIGURATION}", "get configuration"),
        configurations=reader.list(f"{GROUP}/mutatingwebhookconfigurations", "list mutatingwebhookconfigurations"),
        namespace_object=namespace_object,
    )
    ns, name, port = service_ref(scene)
    service = reader.get(f"/api/v1/namespaces/{ns}/services/{name}", f"get service {ns}/{name}")
    deployment = reader.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}", f"get deployment {ns}/{name}")
    slices = reader.list(
        f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
        f"list endpointslices in namespace {ns}",
        {"labelSelector": f"kubernetes.io/service-name={name}"},
    )
    floor_served = reader.serves("mutatingadmissionpolicies")
    policies: dict[str, Read] = {}
    bindings: dict[str, Read] = {}
    for policy in (ROUTED, REVIEWED, FLOOR):
        kind = "mutatingadmissionpolicies" if policy == FLOOR else "validatingadmissionpolicies"
        if policy == FLOOR and not floor_served:
            continue
        policies[policy] = reader.get(f"{GROUP}/{kind}/{policy}", f"get {kind} {policy}")
        binding = kind.replace("policies", "policybindings")
        bindings[policy] = reader.get(f"{GROUP}/{binding}/{policy}", f"get {binding} {policy}")
    scene = _with(scene, service=service, deployment=deployment, endpoint_slices=slices)
    want = scheduler_name(scene)
    scene = _with(
        scene,
        policies=policies,
        bindings=bindings,
        floor_served=floor_served,
        leases=reader.list(
            "/apis/coordination.k8s.io/v1/leases", "list leases", {"fieldSelector": f"metadata.name={want}"}
        ),
        nodes=reader.list("/api/v1/nodes", "list nodes"),
        gpu=reader.dry_run(namespace, {"nvidia.com/gpu": "1"}),
        cpu=reader.dry_run(namespace, {"cpu": "100m"}),
        served=_probe(service, hook(scene), ns, name, port),
    )
    if quota_on(deployment):
        home = container_env(deployment).get(HOME_ENV) or ns
        template = (deployment.get("spec") or {}).get("template") or {} if isinstance(deployment, dict) else {}
        account = str((template.get("spec") or {}).get("serviceAccountName") or "default")
        user = f"system:serviceaccount:{ns}:{account}"
        scene = _with(
            scene,
            quota_access=reader.access(user, QUOTA_NEEDS, None) | reader.access(user, LEDGER_NEEDS, home)
            if isinstance(deployment, dict)
            else Unread(f"no Deployment {ns}/{name} to name the webhook's ServiceAccount"),
            ledgers=reader.list(
                f"/apis/coordination.k8s.io/v1/namespaces/{home}/leases", f"list leases in namespace {home}"
            ),
        )
    return scene


def _with(scene: Snapshot, **changes: Any) -> Snapshot:
    from dataclasses import replace

    return replace(scene, **changes)


class _Reader:
    """One ApiClient's calls, each answer or failure turned into what the Snapshot holds."""

    def __init__(self, api: client.ApiClient, timeout: float | None) -> None:
        self._api, self._timeout = api, timeout

    def _call(self, method: str, path: str, action: str, **kwargs: Any) -> Obj:
        from app.kube.transport import request

        try:
            return request(self._api, method, path, timeout=self._timeout, action=action, **kwargs)
        except ApiError:
            raise
        except Exception as exc:  # no answer: nothing else will get one either
            host = self._api.configuration.host
            said = " ".join(str(exc).split()) or type(exc).__name__
            raise CheckError(f"cannot {action}: the API server at {host} did not answer: {said}") from exc

    def get(self, path: str, action: str) -> Read:
        try:
            return self._call("GET", path, action)
        except ApiError as exc:
            return None if exc.code == NOT_FOUND else Unread(_said(exc))

    def list(self, path: str, action: str, query: dict[str, str] | None = None) -> Listed:
        try:
            return list(self._call("GET", path, action, query=query).get("items") or [])
        except ApiError as exc:
            return Unread(_said(exc))

    def serves(self, resource: str) -> bool:
        """Whether admissionregistration.k8s.io/v1 serves ``resource`` (discovery, readable by every user)."""
        try:
            found = self._call("GET", GROUP, "discover admissionregistration.k8s.io/v1")
        except ApiError:
            return False
        return any(r.get("name") == resource for r in found.get("resources") or ())

    def dry_run(self, namespace: str, limits: dict[str, str]) -> DryRun:
        """A one-container Pod created with ``dryRun=All``: what the API server would store, or its refusal."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "hami-webhook-check-", "labels": dict(CHECK_LABEL)},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "check", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}
                ],
            },
        }
        path = f"/api/v1/namespaces/{namespace}/pods"
        try:
            return DryRun(self._call("POST", path, "dry-run create a Pod", body=pod, query={"dryRun": "All"}))
        except ApiError as exc:
            return DryRun(None, " ".join((exc.message or str(exc)).split()))

    def access(self, user: str, needs: tuple[str, ...], namespace: str | None) -> dict[str, bool]:
        """Whether ``user`` may do each of ``needs`` ("verb resource"; cluster-wide when ``namespace`` is None)."""
        found = {}
        for need in needs:
            verb, resource = need.split()
            group = "coordination.k8s.io" if resource == "leases" else ""
            attributes = {"verb": verb, "resource": resource, "group": group}
            if namespace is not None:
                attributes["namespace"] = namespace
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": user, "resourceAttributes": attributes},
            }
            answer = self._call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", need, body=review)
            found[f"{need} in {namespace}" if namespace else need] = bool(answer.get("status", {}).get("allowed"))
        return found


def _said(exc: ApiError) -> str:
    return " ".join((exc.message or str(exc)).split())


def _probe(service: Read, found: Obj | None, ns: str, name: str, port: int) -> Served | None:
    """A TLS handshake with the Service's ClusterIP, verified against the caBundle as the API server verifies it
    (the name ``NAME.NAMESPACE.svc``); None when there is no address or no bundle to try."""
    bundle = ((found or {}).get("clientConfig") or {}).get("caBundle") or ""
    ip = ((service or {}).get("spec") or {}).get("clusterIP") if isinstance(service, dict) else None
    if not bundle or not ip or ip == "None":
        return None
    address = f"{ip}:{port}"
    try:
        context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as exc:
        return Served(address, True, f"unreadable caBundle: {exc}")
    return _handshake(address, lambda raw: context.wrap_socket(raw, server_hostname=f"{name}.{ns}.svc"))


def _handshake(address: str, wrap: Callable[[socket.socket], ssl.SSLSocket]) -> Served:
    host, _, port = address.rpartition(":")
    try:
        raw = socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT)
    except OSError as exc:
        return Served(address, False, exc.strerror or type(exc).__name__)
    with raw:
        try:
            with wrap(raw) as tls:
                der = tls.getpeercert(binary_form=True)
        except ssl.SSLCertVerificationError as exc:
            return Served(address, True, f"x509: {exc.verify_message}")
        except (ssl.SSLError, OSError) as exc:
            return Served(address, True, f"TLS handshake failed: {exc}")
    from cryptography import x509

    until = x509.load_der_x509_certificate(der).not_valid_after_utc.timestamp() if der else None
    return Served(address, True, "", until)
