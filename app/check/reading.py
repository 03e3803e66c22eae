"""What the check reads, with the caller's credentials: GETs and LISTs, two server-side dry-run creates, a TLS
handshake with the webhook's Service, and SubjectAccessReviews of the webhook's own ServiceAccount. Nothing is
written (``dryRun=All``; a SubjectAccessReview is answered, never stored). Every answer but "not found" and a
refusal that stops nothing becomes an ``Unread`` the checks name; no answer at all is ``CheckError``.
"""

from __future__ import annotations

import base64
import functools
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
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
    """Everything the checks judge. The calls go out together, in three waves of what depends on what (the
    configuration names the Service; the Deployment the scheduler's name and the webhook's account), the dry runs
    first: a hanging webhook costs its timeoutSeconds once, whatever else is read meanwhile."""
    from concurrent.futures import ThreadPoolExecutor

    reader = _Reader(api, timeout)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        gpu = pool.submit(reader.dry_run, namespace, {"nvidia.com/gpu": "1"})
        cpu = pool.submit(reader.dry_run, namespace, {"cpu": "100m"})
        first = _together(
            pool,
            namespace_object=lambda: reader.get(f"/api/v1/namespaces/{namespace}", f"get namespace {namespace}"),
            configuration=lambda: reader.get(
                f"{GROUP}/mutatingwebhookconfigurations/{CONFIGURATION}",
                f"get mutatingwebhookconfiguration {CONFIGURATION}",
            ),
            configurations=lambda: reader.list(f"{GROUP}/mutatingwebhookconfigurations", "list configurations"),
            floor_served=lambda: reader.serves("mutatingadmissionpolicies"),
            nodes=lambda: reader.list("/api/v1/nodes", "list nodes"),
            **{
                f"{what}:{policy}": functools.partial(
                    reader.get, f"{GROUP}/{plural}/{policy}", f"get {plural} {policy}"
                )
                for policy, kind in POLICIES.items()
                for what, plural in (("policy", kind), ("binding", kind.replace("policies", "policybindings")))
            },
        )
        if first["namespace_object"] is None:
            raise CheckError(f'namespaces "{namespace}" not found')
        snapshot = Snapshot(
            namespace=namespace,
            now=time.time(),
            default_scheduler=default_scheduler,
            configuration=first["configuration"],
            configurations=first["configurations"],
            namespace_object=first["namespace_object"],
            floor_served=first["floor_served"],
            nodes=first["nodes"],
            policies={p: first[f"policy:{p}"] for p in POLICIES if p != FLOOR or first["floor_served"]},
            bindings={p: first[f"binding:{p}"] for p in POLICIES if p != FLOOR or first["floor_served"]},
        )
        ns, name, port = service_ref(snapshot)
        second = _together(
            pool,
            service=lambda: reader.get(f"/api/v1/namespaces/{ns}/services/{name}", f"get service {ns}/{name}"),
            deployment=lambda: reader.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}", f"get {ns}/{name}"),
            endpoint_slices=lambda: reader.list(
                f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
                f"list endpointslices in namespace {ns}",
                {"labelSelector": f"kubernetes.io/service-name={name}"},
            ),
        )
        snapshot = _with(snapshot, **second)
        deployment, want = second["deployment"], scheduler_name(snapshot)
        leases = "/apis/coordination.k8s.io/v1/leases"
        third: dict[str, Callable[[], Any]] = {
            "leases": lambda: reader.list(leases, "list leases", {"fieldSelector": f"metadata.name={want}"}),
            "served": lambda: _probe(second["service"], hook(snapshot), ns, name, port),
        }
        if quota_on(deployment):
            home = container_env(deployment).get(HOME_ENV) or ns
            third["ledgers"] = lambda: reader.list(
                f"/apis/coordination.k8s.io/v1/namespaces/{home}/leases", f"list leases in namespace {home}"
            )
            third["quota_access"] = lambda: _access(reader, pool, deployment, ns, home)
        snapshot = _with(snapshot, **_together(pool, **third))
        return _with(snapshot, gpu=gpu.result(), cpu=cpu.result())


WORKERS = 8  # concurrent requests: the reads of one wave, and the two dry runs beside them
POLICIES = {
    ROUTED: "validatingadmissionpolicies",
    REVIEWED: "validatingadmissionpolicies",
    FLOOR: "mutatingadmissionpolicies",
}


def _together(pool: Executor, **calls: Callable[[], Any]) -> dict[str, Any]:
    """Each call's answer by name, all sent at once; the first CheckError among them raised."""
    futures = {name: pool.submit(call) for name, call in calls.items()}
    return {name: future.result() for name, future in futures.items()}


def _access(reader: _Reader, pool: Executor, deployment: Read, ns: str, home: str) -> Mapping[str, bool] | Unread:
    """What the webhook's ServiceAccount (the Deployment's) may do of what quota needs."""
    if not isinstance(deployment, dict):
        return Unread(f"no Deployment in {ns} to name the webhook's ServiceAccount")
    template = (deployment.get("spec") or {}).get("template") or {}
    account = str((template.get("spec") or {}).get("serviceAccountName") or "default")
    user = f"system:serviceaccount:{ns}:{account}"
    needs = [(need, None) for need in QUOTA_NEEDS] + [(need, home) for need in LEDGER_NEEDS]
    try:
        return _together(
            pool,
            **{f"{need} in {where}" if where else need: functools.partial(reader.allowed, user, need, where)
               for need, where in needs},
        )  # fmt: skip
    except ApiError as exc:  # SubjectAccessReviews refused to the caller
        return Unread(_said(exc))


def _with(snapshot: Snapshot, **changes: Any) -> Snapshot:
    from dataclasses import replace

    return replace(snapshot, **changes)


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

    def allowed(self, user: str, need: str, namespace: str | None) -> bool:
        """Whether ``user`` may do ``need`` ("verb resource"; cluster-wide when ``namespace`` is None)."""
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
        return bool(answer.get("status", {}).get("allowed"))


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
        except (ssl.SSLError, OSError) as exc:  # no handshake (a hanging or refusing server): nothing to verify
            return Served(address, False, f"no TLS handshake: {' '.join(str(exc).split())}")
    from cryptography import x509

    until = x509.load_der_x509_certificate(der).not_valid_after_utc.timestamp() if der else None
    return Served(address, True, "", until)
