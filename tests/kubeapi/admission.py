"""What kube-apiserver's MutatingAdmissionWebhook plugin does on CREATE, for the fake API server.

The created object is decoded and defaulted, then every registered mutating webhook that matches
(rules, namespaceSelector, objectSelector, matchConditions) is called in order (configurations by
name, webhooks in list order) over HTTPS: SNI and certificate check for ``<service>.<namespace>.svc``
against the configuration's ``caBundle`` with no Common Name fallback, TLS 1.2+, ALPN http/1.1,
``?timeout=<N>s`` and a hard deadline of ``timeoutSeconds``. The first of ``admissionReviewVersions``
that kube-apiserver knows (v1, v1beta1) is sent; the answer is verified as kube-apiserver verifies
it, its JSON Patch applied, and ``failurePolicy`` decides about calling failures. Webhooks with
``reinvocationPolicy: IfNeeded`` are called once more if a later webhook changed the object.
Error texts and HTTP codes follow ``k8s.io/apiserver/pkg/admission/plugin/webhook``.

A Service is reached the way kube-apiserver's cluster-IP resolver reaches it: the Service must be
stored and have the port; its "cluster IP" is the loopback address the test maps in ``services``
(``api.services[("hami-system", "hami-webhook", 443)] = ("127.0.0.1", port)``). Only loopback
addresses are ever dialled, for service and ``url`` webhooks alike.
"""

from __future__ import annotations

import base64
import binascii
import copy
import http.client
import ipaddress
import json
import socket
import ssl
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import jsonpatch
import jsonpointer
from cryptography import x509

from app import matching
from app.matching import matches_label_selector
from tests.kubeapi import errors
from tests.kubeapi.errors import ApiError
from tests.kubeapi.kinds import Undecodable
from tests.kubeapi.resources import NAMESPACES, ResourceRegistry, ResourceType
from tests.kubeapi.store import Store, decode

Obj = dict[str, Any]
ServiceKey = tuple[str, str, int]  # (namespace, name, service port)
Address = tuple[str, int]

KNOWN_REVIEW_VERSIONS = ("v1", "v1beta1")
# Writes to these kinds never go to API-registered webhooks, so a broken webhook can always be fixed.
EXEMPT_KINDS = frozenset(
    {
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
)
ADMISSION_GROUP = "admissionregistration.k8s.io"
MAX_WARNING_RUNES = 4096
TRUNCATED_WARNING_RUNES = 256


@dataclass
class WebhookCall:
    """One webhook kube-apiserver decided to call (matching, not skipped), and how it went."""

    configuration: str
    webhook: str
    round: int
    url: str = ""
    review: Obj | None = None  # the AdmissionReview sent (None if the call failed before sending)
    status: int | None = None  # the webhook's HTTP status
    answer: Obj | None = None  # the AdmissionReview received
    error: str | None = None  # ErrCallingWebhook text: "failed calling webhook ...: ..."
    failed_open: bool = False  # a calling failure ignored under failurePolicy Ignore
    patched: bool = False  # the patch changed the object


@dataclass
class _Hook:
    configuration: str
    spec: Obj
    uid: str  # stable identity across rounds, like kube-apiserver's webhook accessor UID

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def ignore_failures(self) -> bool:
        return self.spec.get("failurePolicy") == "Ignore"


class CallingError(Exception):
    """kube-apiserver's ErrCallingWebhook: could not get a valid answer; ``failurePolicy`` applies."""


class Rejection(ApiError):
    """A webhook's denial: its own ``status``, adjusted as ``ToStatusErr`` does, goes back verbatim."""

    def __init__(self, status: Obj):
        super().__init__(status["code"], status.get("message", ""), status.get("reason") or "")
        self._status = status

    def status(self) -> Obj:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, **self._status}


@dataclass
class _Attributes:
    """admission.Attributes of one CREATE: what goes into every review of this request."""

    rt: ResourceType
    namespace: str
    name: str
    dry_run: bool
    options: Obj
    user_info: Obj
    obj: Obj
    warnings: list[str] = field(default_factory=list)

    def request(self, uid: str) -> Obj:
        gvk = {"group": self.rt.group, "version": self.rt.version, "kind": self.rt.kind}
        gvr = {"group": self.rt.group, "version": self.rt.version, "resource": self.rt.plural}
        request: Obj = {"uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr}
        if self.name:
            request["name"] = self.name
        if self.namespace:
            request["namespace"] = self.namespace
        request.update(
            operation="CREATE",
            userInfo=self.user_info,
            object=copy.deepcopy(self.obj),
            oldObject=None,
            dryRun=self.dry_run,
            options=self.options,
        )
        return request


class Admission:
    """The mutating-webhook admission step of the fake server; ``calls`` records every webhook called."""

    def __init__(self, registry: ResourceRegistry, store: Store, services: dict[ServiceKey, Address]):
        self._registry, self._store, self.services = registry, store, services
        self.calls: list[WebhookCall] = []
        # The admin kubeconfig's identity on a kubeadm cluster; the fake server does no authentication.
        self.user_info: Obj = {
            "username": "kubernetes-admin",
            "groups": ["kubeadm:cluster-admins", "system:authenticated"],
        }
        self._lock = threading.Lock()

    def calls_to(self, webhook: str) -> list[WebhookCall]:
        with self._lock:
            return [c for c in self.calls if c.webhook == webhook]

    # --- the CREATE path ---------------------------------------------------------------------

    def create(
        self, rt: ResourceType, namespace: str, body: Obj, query: dict[str, list[str]], warnings: list[str]
    ) -> Obj:
        """The object to store after mutating admission, or ApiError (the request fails, nothing stored)."""
        if rt.group == ADMISSION_GROUP and rt.kind in EXEMPT_KINDS:
            return body
        obj = decode(rt, body)
        meta = obj["metadata"]
        self._store.check_create(rt, namespace, meta)
        if rt.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if rt.prepare:
            rt.prepare(obj, None)
        hooks = self._hooks()
        if not hooks:
            return obj
        dry_run = bool(query.get("dryRun"))
        options: Obj = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        if dry_run:
            options["dryRun"] = query["dryRun"]
        for param in ("fieldManager", "fieldValidation"):
            if query.get(param):
                options[param] = query[param][0]
        name = meta.get("name") or ""  # generateName is resolved only when the object is stored
        attrs = _Attributes(rt, namespace, name, dry_run, options, copy.deepcopy(self.user_info), obj)
        try:
            self._dispatch(attrs, hooks)
        finally:
            warnings += _limit_warnings(attrs.warnings)
        return attrs.obj

    def _hooks(self) -> list[_Hook]:
        rt = self._registry.by_kind(f"{ADMISSION_GROUP}/v1", "MutatingWebhookConfiguration")
        configs = self._store.list(rt, "", lambda o: True)[0]
        return [
            _Hook(c["metadata"]["name"], hook, f"{c['metadata']['name']}/{i}")
            for c in sorted(configs, key=lambda c: c["metadata"]["name"])
            for i, hook in enumerate(c.get("webhooks") or [])
        ]

    def _dispatch(self, attrs: _Attributes, hooks: list[_Hook]) -> None:
        """Round 0 over all webhooks, then round 1 over the IfNeeded ones a later mutation invalidated."""
        invoked_reinvocable: set[str] = set()
        reinvoke: set[str] = set()
        for round_ in (0, 1):
            if round_ == 1 and not reinvoke:
                return
            for hook in hooks:
                if not self._should_call(hook, attrs):
                    continue
                if round_ == 1 and hook.uid not in reinvoke:
                    continue
                changed = self._call(hook, attrs, round_)
                if changed:
                    reinvoke |= invoked_reinvocable
                    invoked_reinvocable = set()
                if hook.spec.get("reinvocationPolicy") == "IfNeeded":
                    invoked_reinvocable.add(hook.uid)

    # --- matching ----------------------------------------------------------------------------

    def _should_call(self, hook: _Hook, attrs: _Attributes) -> bool:
        """ShouldCallHook: selectors, then rules, then matchConditions (a Fail-policy error is a 403)."""
        try:
            namespace_ok = self._namespace_matches(hook.spec.get("namespaceSelector") or {}, attrs)
            object_ok = matches_label_selector(
                hook.spec.get("objectSelector") or {}, attrs.obj["metadata"].get("labels") or {}
            )
        except ValueError as exc:
            raise errors.internal(str(exc)) from None
        if not (namespace_ok and object_ok) or not any(_rule_matches(r, attrs) for r in hook.spec.get("rules") or []):
            return False
        conditions = hook.spec.get("matchConditions")
        if not conditions:
            return True
        result = matching.evaluate(conditions, attrs.request(""))
        if result.outcome is matching.Outcome.ERROR and not hook.ignore_failures:
            message = result.errors[0] if len(result.errors) == 1 else "[" + ", ".join(result.errors) + "]"
            raise errors.forbidden(attrs.rt.plural, attrs.rt.group, attrs.name, message)
        return result.outcome is matching.Outcome.MATCH

    def _namespace_matches(self, selector: Obj, attrs: _Attributes) -> bool:
        if attrs.rt.key == NAMESPACES:
            return matches_label_selector(selector, attrs.obj["metadata"].get("labels") or {})
        if not attrs.namespace or not selector:
            return True  # cluster-scoped objects are never exempted
        namespaces = self._registry.by_kind("v1", "Namespace")
        stored = self._store.get(namespaces, "", attrs.namespace)
        if stored is None:
            raise errors.not_found("namespaces", "", attrs.namespace)
        return matches_label_selector(selector, stored["metadata"].get("labels") or {})

    # --- one call ----------------------------------------------------------------------------

    def _call(self, hook: _Hook, attrs: _Attributes, round_: int) -> bool:
        """Call one webhook and apply its answer; True if the object changed."""
        if attrs.dry_run and hook.spec.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise errors.bad_request(f'admission webhook "{hook.name}" does not support dry run')
        record = WebhookCall(hook.configuration, hook.name, round_)
        with self._lock:
            self.calls.append(record)
        try:
            response = self._exchange(hook, attrs, record)
        except CallingError as exc:
            record.error = f'failed calling webhook "{hook.name}": {exc}'
            if not hook.ignore_failures:
                raise errors.internal(record.error) from None
            record.failed_open = True
            return False
        attrs.warnings += [w for w in response.get("warnings") or [] if isinstance(w, str)]
        if not response.get("allowed"):
            raise Rejection(_denial_status(hook.name, response.get("status")))
        if not response["operations"]:
            return False
        before = attrs.obj
        attrs.obj = _apply_patch(hook.name, attrs.rt, before, response["operations"])
        record.patched = attrs.obj != before
        return record.patched

    def _exchange(self, hook: _Hook, attrs: _Attributes, record: WebhookCall) -> Obj:
        """POST the review and return the verified ``response``; CallingError for every calling failure."""
        versions = hook.spec.get("admissionReviewVersions") or []
        version = next((v for v in versions if v in KNOWN_REVIEW_VERSIONS), None)
        if version is None:
            raise CallingError(
                "could not create admission objects: "
                "webhook does not accept known AdmissionReview versions (v1, v1beta1)"
            )
        uid = str(uuid.uuid1())
        review = {"kind": "AdmissionReview", "apiVersion": f"admission.k8s.io/{version}", "request": attrs.request(uid)}
        record.review = review
        target = self._target(hook)
        record.url = target.url
        status, content_type, body = target.post(json.dumps(review).encode())
        record.status = status
        answer = _decode_answer(status, content_type, body)
        record.answer = answer
        return _verify(answer, version, uid)

    def _target(self, hook: _Hook) -> _Target:
        client_config = hook.spec.get("clientConfig") or {}
        timeout = int(hook.spec.get("timeoutSeconds") or 10)
        try:
            context = _client_context(client_config.get("caBundle"))
        except ValueError as exc:
            raise CallingError(f"could not get REST client: {exc}") from None
        service = client_config.get("service")
        if service is not None:
            port = int(service.get("port") or 443)
            server_name = f"{service['name']}.{service['namespace']}.svc"
            path = service.get("path") or ""
            url = f"https://{server_name}:{port}{path}?timeout={timeout}s"
            return _Target(url, server_name, port, path or "/", timeout, context, lambda: self._resolve(service, port))
        parts = urlsplit(client_config.get("url") or "")
        host = parts.hostname or ""
        port = parts.port or 443
        address = (host, port)
        url = f"{parts.scheme}://{parts.netloc}{parts.path}?timeout={timeout}s"
        return _Target(url, host, port, parts.path or "/", timeout, context, lambda: _loopback(address, host))

    def _resolve(self, service: Obj, port: int) -> Address:
        """kube-apiserver's cluster-IP service resolver, with the test's loopback mapping as the cluster IP."""
        namespace, name = service["namespace"], service["name"]
        stored = self._store.get(self._registry.by_kind("v1", "Service"), namespace, name)
        if stored is None:
            raise _DialError(f'service "{name}" not found')
        spec = stored.get("spec") or {}
        if spec.get("clusterIP") == "None":
            raise _DialError('cannot route to service with ClusterIP "None"')
        if spec.get("type") == "ExternalName":
            raise _DialError(f'unsupported service type "{spec["type"]}" for webhooks in the fake API server')
        if not any(p.get("port") == port for p in spec.get("ports") or []):
            raise _DialError(f'no service port {port} found for service "{name}"')
        address = self.services.get((namespace, name, port))
        if address is None:
            raise _DialError(f"dial tcp: no loopback address mapped for {namespace}/{name}:{port} (set services)")
        return _loopback(address, f"{namespace}/{name}")


# --- transport -----------------------------------------------------------------------------------


class _DialError(Exception):
    """The endpoint could not be resolved or dialled (text as Go prints it)."""


def _loopback(address: Address, what: str) -> Address:
    try:
        loopback = ipaddress.ip_address(address[0]).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise _DialError(f"dial tcp: {what} maps to {address[0]}: the fake API server only dials loopback addresses")
    return address


def _client_context(ca_bundle: str | None) -> ssl.SSLContext:
    """Go's crypto/tls client as kube-apiserver configures it: caBundle roots (system roots if empty),
    SAN-only hostname check, TLS 1.2+, http/1.1 only. No Python-only strictness (Go needs no AKI)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.hostname_checks_common_name = False
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # Go trusts any certificate in the root pool
    context.set_alpn_protocols(["http/1.1"])
    pem = base64.b64decode(ca_bundle) if ca_bundle else b""
    if not pem:
        context.load_default_certs()
        return context
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ValueError("unable to load root certificates: unable to parse bytes as PEM block")
    try:
        context.load_verify_locations(cadata=pem.decode("ascii", "replace"))
    except ssl.SSLError as exc:
        raise ValueError(f"unable to load root certificates: {exc.reason or exc}") from None
    return context


class _Connection(http.client.HTTPSConnection):
    """HTTPS to ``server_name`` (SNI, certificate check) over a socket to ``address`` (the resolved endpoint)."""

    def __init__(self, server_name: str, address: Address, context: ssl.SSLContext, timeout: float):
        super().__init__(server_name, address[1], context=context, timeout=timeout)
        self._address = address
        self._tls_context = context

    def connect(self) -> None:
        raw = socket.create_connection(self._address, self.timeout)
        try:
            self.sock = self._tls_context.wrap_socket(raw, server_hostname=self.host)
        except BaseException:
            raw.close()
            raise

    def abort(self) -> None:
        """Unblock a call stuck in the webhook (deadline passed)."""
        sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@dataclass(frozen=True)
class _Target:
    url: str  # as Go prints it in errors: https://svc.ns.svc:443/path?timeout=10s
    server_name: str
    port: int
    path: str
    timeout: int
    context: ssl.SSLContext
    resolve: Callable[[], Address]  # may raise _DialError

    def post(self, body: bytes) -> tuple[int, str | None, bytes]:
        """POST within ``timeout`` seconds: status, Content-Type and body; CallingError worded like client-go's."""
        try:
            address = self.resolve()
        except _DialError as exc:
            raise CallingError(f'failed to call webhook: Post "{self.url}": {exc}') from None
        conn = _Connection(self.server_name, address, self.context, self.timeout)
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                path = f"{self.path}?timeout={self.timeout}s"
                conn.putrequest("POST", path, skip_host=True, skip_accept_encoding=True)
                conn.putheader("Host", f"{self.server_name}:{self.port}")
                conn.putheader("User-Agent", "kube-apiserver-admission")
                conn.putheader("Content-Type", "application/json")
                conn.putheader("Accept", "application/json, */*")
                conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body)
                reply = conn.getresponse()
                outcome["result"] = (reply.status, reply.getheader("Content-Type"), reply.read())
            except BaseException as exc:  # reported to the caller below
                outcome["error"] = exc

        worker = threading.Thread(target=run, name=f"webhook-call {self.url}", daemon=True)
        worker.start()
        worker.join(self.timeout)
        try:
            if worker.is_alive():
                conn.abort()
                worker.join(5)
                raise CallingError(f'failed to call webhook: Post "{self.url}": context deadline exceeded')
            if "error" in outcome:
                reason = self._describe(outcome["error"], address)
                raise CallingError(f'failed to call webhook: Post "{self.url}": {reason}')
            status, content_type, data = outcome["result"]
            return status, content_type, data
        finally:
            conn.close()

    def _describe(self, exc: BaseException, address: Address) -> str:
        """Go's wording for what went wrong (net/http, crypto/tls, crypto/x509)."""
        if isinstance(exc, ConnectionRefusedError):
            return f"dial tcp {address[0]}:{address[1]}: connect: connection refused"
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return "context deadline exceeded"
        if isinstance(exc, ssl.SSLCertVerificationError):
            return "tls: failed to verify certificate: " + self._x509_error(exc, address)
        if isinstance(exc, ssl.SSLError):
            return f"remote error: tls: {exc.reason or exc}".lower()
        if isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError, http.client.IncompleteRead)):
            return "EOF"
        return f"{type(exc).__name__}: {exc}"

    def _x509_error(self, exc: ssl.SSLCertVerificationError, address: Address) -> str:
        code = exc.verify_code
        if code in (9, 10):
            return "x509: certificate has expired or is not yet valid"
        if code == 26:
            return "x509: certificate specifies an incompatible key usage"
        if code == 62:
            return _hostname_error(_peer_certificate(address, self.server_name), self.server_name)
        if code in (2, 18, 19, 20, 21, 27):
            return "x509: certificate signed by unknown authority"
        return f"x509: {exc.verify_message}"


def _peer_certificate(address: Address, server_name: str) -> x509.Certificate:
    """The leaf the server presents, fetched without verification, to word a hostname error like Go."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(address, 5) as raw, context.wrap_socket(raw, server_hostname=server_name) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _hostname_error(cert: x509.Certificate, host: str) -> str:
    """crypto/x509 HostnameError.Error() for a DNS host name."""
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        common_names = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        if common_names and str(common_names[0].value).lower() == host.lower():
            return "x509: certificate relies on legacy Common Name field, use SANs instead"
        return f"x509: certificate is not valid for any names, but wanted to match {host}"
    dns = names.get_values_for_type(x509.DNSName)
    if not dns:
        return f"x509: certificate is not valid for any names, but wanted to match {host}"
    return f"x509: certificate is valid for {', '.join(dns)}, not {host}"


# --- answers -------------------------------------------------------------------------------------

_GENERIC_ERRORS = {
    400: "the server rejected our request for an unknown reason",
    401: "the server has asked for the client to provide credentials",
    403: "the server does not allow access to the requested resource",
    404: "the server could not find the requested resource",
    405: "the server does not allow this method on the requested resource",
    409: "the server reported a conflict",
    422: "the server rejected our request due to an error in our request",
    429: "the server has received too many requests and has asked us to try again later",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted, but may still be processing the request",
}


def _is_text(content_type: str | None) -> bool:
    """client-go's ``isTextResponse``: only a text/* (or missing) Content-Type lets an error body be shown."""
    if not content_type:
        return True
    return content_type.split(";")[0].strip().lower().startswith("text/")


def _decode_answer(status: int, content_type: str | None, body: bytes) -> Obj:
    """client-go's ``Do().Into()``: 200-206 decode into an AdmissionReview, anything else is an error."""
    try:
        document = json.loads(body) if body else None
    except ValueError:
        document = None
    if not 200 <= status <= 206:
        if isinstance(document, dict) and document.get("kind") == "Status" and document.get("status") == "Failure":
            raise CallingError(f"failed to call webhook: {document.get('message', '')}")
        text = body[:2048].decode("utf-8", "replace").strip() if _is_text(content_type) else "unknown"
        message = _GENERIC_ERRORS.get(status)
        if message is None or status >= 500:
            message = f'an error on the server ("{text}") has prevented the request from succeeding'
        raise CallingError(f"failed to call webhook: {message}")
    if not isinstance(document, dict):
        raise CallingError("failed to call webhook: couldn't get version/kind; json parse error: not a JSON object")
    response = document.get("response")
    if isinstance(response, dict) and response.get("patch") is not None:
        value = response["patch"]
        try:  # response.patch is a []byte: decoding the whole answer fails on bad base64
            response["patch"] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError, TypeError):
            at = next((i for i, c in enumerate(str(value)) if not (c.isalnum() or c in "+/=")), len(str(value)))
            raise CallingError(f"failed to call webhook: illegal base64 data at input byte {at}") from None
    return document


def _verify(answer: Obj, version: str, uid: str) -> Obj:
    """VerifyAdmissionResponse: strict for v1 (uid, apiVersion/kind, patch/patchType), lenient for v1beta1."""

    def invalid(why: str) -> CallingError:
        return CallingError(f"received invalid webhook response: {why}")

    response = answer.get("response")
    if not isinstance(response, dict):
        raise invalid("webhook response was absent")
    patch, patch_type = response.get("patch") or b"", response.get("patchType")
    if version == "v1":
        if response.get("uid", "") != uid:
            raise invalid(f'expected response.uid="{uid}", got "{response.get("uid", "")}"')
        group, _, api_version = str(answer.get("apiVersion") or "").rpartition("/")
        if (answer.get("apiVersion"), answer.get("kind")) != ("admission.k8s.io/v1", "AdmissionReview"):
            got = f"{group}/{api_version}, Kind={answer.get('kind') or ''}"
            raise invalid(f"expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {got}")
        if patch and patch_type is None:
            raise invalid("webhook returned response.patch but not response.patchType")
        if not patch and patch_type is not None:
            raise invalid("webhook returned response.patchType but not response.patch")
        if patch_type == "":
            raise invalid('webhook returned invalid response.patchType of ""')
    allowed = response.get("allowed") is True
    operations = _decode_patch(patch, patch_type or "JSONPatch") if allowed and patch else []
    return {
        "allowed": allowed,
        "operations": operations,
        "status": response.get("status"),
        "warnings": response.get("warnings"),
    }


def _decode_patch(raw: bytes, patch_type: str) -> list[Obj]:
    """The JSON Patch operations (a calling failure if undecodable), checked before the patch type is."""
    try:
        operations = json.loads(raw)
    except ValueError as exc:
        raise CallingError(f"received undecodable patch in webhook response: {exc}") from None
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        raise CallingError(
            "received undecodable patch in webhook response: "
            "json: cannot unmarshal into Go value of type jsonpatch.Patch"
        )
    if operations and patch_type != "JSONPatch":
        raise CallingError(f'unsupported patch type "{patch_type}"')
    return operations


def _denial_status(webhook: str, status: Any) -> Obj:
    """ToStatusErr: the webhook's Status with code >= 400, status Failure and a message naming the webhook."""
    result = dict(status) if isinstance(status, dict) else {}
    result.pop("kind", None)
    result.pop("apiVersion", None)
    result.pop("metadata", None)
    if not isinstance(result.get("code"), int) or result["code"] < 400:
        result["code"] = 400
    if result.get("status") in (None, "", "Success"):
        result["status"] = "Failure"
    denied = f'admission webhook "{webhook}" denied the request'
    if result.get("message"):
        result["message"] = f"{denied}: {result['message']}"
    elif result.get("reason"):
        result["message"] = f"{denied}: {result['reason']}"
    else:
        result["message"] = f"{denied} without explanation"
    return result


def _apply_patch(webhook: str, rt: ResourceType, obj: Obj, operations: list[Obj]) -> Obj:
    """Apply JSON Patch operations; a patch that does not apply, or yields an object that does not decode,
    is a 500 whatever the failurePolicy (as in kube-apiserver)."""
    patched = copy.deepcopy(obj)
    for op in operations:
        try:
            patched = jsonpatch.JsonPatch([op]).apply(patched)
        except jsonpatch.JsonPatchTestFailed:
            raise errors.internal(f"testing value {op.get('path')} failed: test failed") from None
        except jsonpatch.InvalidJsonPatch as exc:
            unknown = "unknown" in str(exc).lower()
            raise errors.internal(f"Unexpected kind: {op.get('op')}" if unknown else str(exc)) from None
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
            raise errors.internal(_patch_failure(op, patched)) from None
    if not isinstance(patched, dict):
        raise errors.internal(f"admission webhook {webhook!r} patched the object into a non-object")
    try:
        obj = decode(rt, patched)
        if rt.prepare:
            rt.prepare(obj, None)  # decoding the patched object defaults it again (and canonicalizes quantities)
        return obj
    except Undecodable as exc:
        raise errors.internal(exc.detail) from None
    except ApiError as exc:
        raise errors.internal(exc.message) from None


def _patch_failure(op: Obj, doc: Any) -> str:
    """evanphx/json-patch's words for an operation whose path is missing (each wraps ErrMissing)."""
    name, path = op.get("op"), str(op.get("path"))
    parent, _, key = path.rpartition("/")
    try:
        container = jsonpointer.resolve_pointer(doc, parent)
    except jsonpointer.JsonPointerException:
        container = None
    found = isinstance(container, (dict, list))
    if name == "replace":
        return f"replace operation does not apply: doc is missing {'key' if found else 'path'}: {path}: missing value"
    if name == "remove" and isinstance(container, dict):
        key = key.replace("~1", "/").replace("~0", "~")
        return f"error in remove for path: '{path}': Unable to remove nonexistent key: {key}: missing value"
    return f'{name} operation does not apply: doc is missing path: "{path}": missing value'


def _limit_warnings(warnings: list[str]) -> list[str]:
    """What the API server's warning recorder keeps: non-empty, printable, unique, 4096 runes in total
    (past that, each is cut to 256 runes until the budget is spent)."""
    kept: list[str] = []
    total = 0
    for text in warnings:
        if not text or text in kept or any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in text):
            continue
        if total + len(text) > MAX_WARNING_RUNES:
            text = text[:TRUNCATED_WARNING_RUNES]
            if total + len(text) > MAX_WARNING_RUNES:
                break
        kept.append(text)
        total += len(text)
    return kept


def _rule_matches(rule: Obj, attrs: _Attributes) -> bool:
    """rules.Matcher for a CREATE of ``attrs.rt`` (no subresource)."""
    rt = attrs.rt
    scope = rule.get("scope") or "*"
    is_namespace = rt.key == NAMESPACES
    if scope == "Namespaced" and (is_namespace or not attrs.namespace):
        return False
    if scope == "Cluster" and not (is_namespace or not attrs.namespace):
        return False

    def listed(items: Any, value: str) -> bool:
        return any(item in ("*", value) for item in items or [])

    if not listed(rule.get("operations"), "CREATE") or not listed(rule.get("apiGroups"), rt.group):
        return False
    if not listed(rule.get("apiVersions"), rt.version):
        return False
    for resource in rule.get("resources") or []:
        res, _, sub = resource.partition("/")
        if res in ("*", rt.plural) and sub in ("*", ""):  # a CREATE of the object itself has no subresource
            return True
    return False
