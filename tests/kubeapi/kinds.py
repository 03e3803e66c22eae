"""Kind-specific defaulting and validation, mirroring the real API server's strategies.

Only what this project's code can trip over is modelled: name formats, Secret data
rules, Namespace defaults and admissionregistration/v1 webhook defaults + validation.
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
from typing import Any
from urllib.parse import urlsplit

from tests.kubeapi import quantity
from tests.kubeapi.errors import ApiError, FieldError, invalid, not_supported, required

Obj = dict[str, Any]

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")

_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_LABEL1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_CONFIG_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
    "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
MAX_SECRET_BYTES = 1024 * 1024
MAX_ANNOTATION_BYTES = 256 * 1024


class Undecodable(ApiError):
    """400 for a body the real server's JSON decoder would refuse (wrong types, bad base64, bad quantities);
    ``detail`` is the decoder's own text, which is all a 500 shows when a webhook's patch causes it."""

    def __init__(self, obj: Obj, detail: str):
        kind, version = obj.get("kind", "object"), obj.get("apiVersion", "v1")
        super().__init__(400, f'{kind} in version "{version}" cannot be handled as a {kind}: {detail}')
        self.detail = detail


def canonical_quantities(obj: Obj, amounts: Any) -> None:
    """Rewrite a ``ResourceList`` in place in canonical form (``4000`` -> ``4k``), as decoding does."""
    if not isinstance(amounts, dict):
        return
    for name, value in amounts.items():
        try:
            amounts[name] = quantity.canonical(value if isinstance(value, str) else str(value))
        except quantity.QuantityError as exc:
            raise Undecodable(obj, str(exc)) from None


def _b64decode(obj: Obj, value: Any, field: str) -> bytes:
    if not isinstance(value, str):
        raise Undecodable(
            obj, f"json: cannot unmarshal {type(value).__name__} into Go struct field {field} of type []uint8"
        )
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        bad = next((i for i, c in enumerate(value) if not (c.isalnum() or c in "+/=")), len(value))
        raise Undecodable(obj, f"illegal base64 data at input byte {bad}") from None


# --- generic metadata -----------------------------------------------------------------------------


def check_metadata_types(obj: Obj) -> None:
    """Reject label/annotation values that Go could not decode into ``map[string]string``."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise Undecodable(obj, "metadata must be an object")
    for field in ("labels", "annotations"):
        values = meta.get(field) or {}
        if not isinstance(values, dict):
            raise Undecodable(obj, f"json: cannot unmarshal into Go struct field ObjectMeta.metadata.{field}")
        for value in values.values():
            if not isinstance(value, str):
                raise Undecodable(
                    obj,
                    f"json: cannot unmarshal {type(value).__name__} into Go struct field "
                    f"ObjectMeta.metadata.{field} of type string",
                )


def name_errors(field: str, name: str, name_format: str) -> list[FieldError]:
    """Errors for ``name`` under one of the formats used by ``ResourceType.name_format``."""
    if name_format == "path":
        for bad, msg in ((".", "may not be '.'"), ("..", "may not be '..'")):
            if name == bad:
                return [invalid(field, name, msg)]
        for bad in ("/", "%"):
            if bad in name:
                return [invalid(field, name, f"may not contain '{bad}'")]
        return []
    pattern, msg, limit = {
        "subdomain": (_SUBDOMAIN, _SUBDOMAIN_MSG, 253),
        "label": (_LABEL, _LABEL_MSG, 63),
        "label1035": (_LABEL1035, _LABEL1035_MSG, 63),
    }[name_format]
    details = []
    if len(name) > limit:
        details.append(f"must be no more than {limit} characters")
    if not pattern.fullmatch(name):
        details.append(msg)
    return [invalid(field, name, d) for d in details]


def _label_key_errors(key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    problems = []
    if prefix and not _SUBDOMAIN.fullmatch(prefix):
        problems.append("prefix part " + _SUBDOMAIN_MSG)
    if not name or len(name) > 63 or not _LABEL_VALUE.fullmatch(name):
        problems.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    return problems


def validate_metadata(obj: Obj, name_format: str) -> list[FieldError]:
    meta = obj["metadata"]
    errors = name_errors("metadata.name", meta.get("name", ""), name_format)
    for key, value in (meta.get("labels") or {}).items():
        errors += [invalid("metadata.labels", key, p) for p in _label_key_errors(key)]
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            errors.append(invalid("metadata.labels", value, _LABEL_VALUE_MSG))
    annotations = meta.get("annotations") or {}
    for key in annotations:
        errors += [invalid("metadata.annotations", key, p) for p in _label_key_errors(key.lower())]
    if sum(len(k) + len(v) for k, v in annotations.items()) > MAX_ANNOTATION_BYTES:
        errors.append(
            FieldError("TooLong", "metadata.annotations", detail=f"must have at most {MAX_ANNOTATION_BYTES} bytes")
        )
    return errors


# --- core/v1 ---------------------------------------------------------------------------------------


def prepare_namespace(obj: Obj, old: Obj | None) -> None:
    """Namespaces get the immutable name label, the ``kubernetes`` finalizer and phase Active."""
    meta = obj["metadata"]
    meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": meta.get("name", "")}
    spec = obj.setdefault("spec", {})
    if not spec.get("finalizers"):
        spec["finalizers"] = ["kubernetes"]
    obj["status"] = {"phase": "Terminating" if meta.get("deletionTimestamp") else "Active"}


_POD_DEFAULTS = {
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": 30,
    "dnsPolicy": "ClusterFirst",
    "securityContext": {},
    "schedulerName": "default-scheduler",
    "enableServiceLinks": True,
}


def _pull_policy(image: str) -> str:
    """``Always`` for ``:latest`` or untagged images, else ``IfNotPresent`` (a digest counts as pinned)."""
    if "@" in image:
        return "IfNotPresent"
    name = image.rpartition("/")[2]
    return "Always" if ":" not in name or name.endswith(":latest") else "IfNotPresent"


def prepare_pod(obj: Obj, old: Obj | None) -> None:
    """The decode-time defaults a Pod has before admission webhooks see it (a subset of ``SetDefaults_Pod``):
    spec-level defaults, per-container defaults, quantities in canonical form, and ``requests`` copied from
    ``limits`` where unset."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    canonical_quantities(obj, spec.get("overhead"))
    for key, value in _POD_DEFAULTS.items():
        _default(spec, key, copy.deepcopy(value))
    for field in ("initContainers", "containers"):
        for ctr in spec.get(field) or []:
            if not isinstance(ctr, dict):
                continue
            _default(ctr, "terminationMessagePath", "/dev/termination-log")
            _default(ctr, "terminationMessagePolicy", "File")
            if isinstance(ctr.get("image"), str):
                _default(ctr, "imagePullPolicy", _pull_policy(ctr["image"]))
            for port in ctr.get("ports") or []:
                if isinstance(port, dict):
                    _default(port, "protocol", "TCP")
            resources = ctr.get("resources")
            if isinstance(resources, dict):
                canonical_quantities(obj, resources.get("limits"))
                canonical_quantities(obj, resources.get("requests"))
            if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
                requests = resources.get("requests") if isinstance(resources.get("requests"), dict) else {}
                resources["requests"] = {**resources["limits"], **requests}


def prepare_resource_quota(obj: Obj, old: Obj | None) -> None:
    """Quantities in ``spec.hard`` and ``status`` are stored in canonical form."""
    for part, fields in (("spec", ("hard",)), ("status", ("hard", "used"))):
        section = obj.get(part)
        if isinstance(section, dict):
            for field in fields:
                canonical_quantities(obj, section.get(field))


def prepare_secret(obj: Obj, old: Obj | None) -> None:
    """Default ``type`` to Opaque and fold ``stringData`` into base64 ``data`` (it is never stored)."""
    if not obj.get("type"):
        obj["type"] = "Opaque"
    data = dict(obj.get("data") or {})
    for key, value in data.items():
        _b64decode(obj, value, f"Secret.data[{key}]")
    string_data = obj.pop("stringData", None) or {}
    for key, value in string_data.items():
        if not isinstance(value, str):
            raise Undecodable(obj, "json: cannot unmarshal into Go struct field Secret.stringData of type string")
        data[key] = base64.b64encode(value.encode()).decode()
    if data:
        obj["data"] = data


def _config_key_errors(field: str, keys: list[str]) -> list[FieldError]:
    errors = []
    for key in keys:
        path = f"{field}[{key}]"
        if not _CONFIG_KEY.fullmatch(key):
            errors.append(invalid(path, key, _CONFIG_KEY_MSG))
        elif key in (".", ".."):
            errors.append(invalid(path, key, f"must not be '{key}'"))
    return errors


def validate_secret(obj: Obj, old: Obj | None) -> list[FieldError]:
    """``ValidateSecretUpdate`` order: immutability first, then the secret itself."""
    data = obj.get("data") or {}
    errors = []
    if old is not None:
        if obj["type"] != old["type"]:
            errors.append(invalid("type", obj["type"], "field is immutable"))
        if old.get("immutable"):
            locked = "field is immutable when `immutable` is set"
            if data != (old.get("data") or {}):
                errors.append(FieldError("Forbidden", "data", detail=locked))
            if not obj.get("immutable"):
                errors.append(FieldError("Forbidden", "immutable", detail=locked))
    errors += _config_key_errors("data", list(data))
    if sum(len(base64.b64decode(v)) for v in data.values()) > MAX_SECRET_BYTES:
        errors.append(FieldError("TooLong", "data", detail=f"must have at most {MAX_SECRET_BYTES} bytes"))
    if obj["type"] == "kubernetes.io/tls":
        errors += [required(f"data[{key}]") for key in ("tls.crt", "tls.key") if key not in data]
    return errors


def validate_configmap(obj: Obj, old: Obj | None) -> list[FieldError]:
    return _config_key_errors("data", list(obj.get("data") or {})) + _config_key_errors(
        "binaryData", list(obj.get("binaryData") or {})
    )


# --- admissionregistration.k8s.io/v1 ---------------------------------------------------------------

_FAILURE_POLICIES = ["Fail", "Ignore"]
_MATCH_POLICIES = ["Equivalent", "Exact"]
_REINVOCATION_POLICIES = ["IfNeeded", "Never"]
_SIDE_EFFECTS = ["None", "NoneOnDryRun"]
_OPERATIONS = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"]
_SCOPES = ["*", "Cluster", "Namespaced"]
_REVIEW_VERSIONS = ["v1", "v1beta1"]
_URL_FORM = "; desired format: https://host[/path]"


def _default(obj: Obj, key: str, value: Any) -> None:
    """Go defaulting fills nil fields, and JSON ``null`` decodes to nil."""
    if obj.get(key) is None:
        obj[key] = value


def _prepare_webhooks(obj: Obj, mutating: bool) -> None:
    """Apply the v1 ``SetDefaults_*Webhook`` defaults; ``caBundle`` must only be valid base64."""
    for hook in obj.get("webhooks") or []:
        if not isinstance(hook, dict):
            raise Undecodable(obj, "json: cannot unmarshal into Go struct field webhooks of type object")
        _default(hook, "failurePolicy", "Fail")
        _default(hook, "matchPolicy", "Equivalent")
        _default(hook, "namespaceSelector", {})
        _default(hook, "objectSelector", {})
        _default(hook, "timeoutSeconds", 10)
        if mutating:
            _default(hook, "reinvocationPolicy", "Never")
        for rule in hook.get("rules") or []:
            _default(rule, "scope", "*")
        client_config = hook.get("clientConfig") or {}
        if client_config.get("caBundle") is not None:
            _b64decode(obj, client_config["caBundle"], "WebhookClientConfig.clientConfig.caBundle")
        if isinstance(client_config.get("service"), dict):
            _default(client_config["service"], "port", 443)


def prepare_mutating_webhooks(obj: Obj, old: Obj | None) -> None:
    _prepare_webhooks(obj, mutating=True)


def prepare_validating_webhooks(obj: Obj, old: Obj | None) -> None:
    _prepare_webhooks(obj, mutating=False)


def _fully_qualified_name_errors(field: str, name: str) -> list[FieldError]:
    if not name:
        return [required(field)]
    if errors := name_errors(field, name, "subdomain"):
        return errors
    if len(name.split(".")) < 3:
        return [invalid(field, name, "should be a domain with at least three segments separated by dots")]
    return []


def _rule_errors(rule: Obj, path: str) -> list[FieldError]:
    errors = []
    operations = rule.get("operations") or []
    if not operations:
        errors.append(required(f"{path}.operations"))
    if len(operations) > 1 and "*" in operations:
        errors.append(invalid(f"{path}.operations", operations, "if '*' is present, must not specify other operations"))
    errors += [
        not_supported(f"{path}.operations[{i}]", op, _OPERATIONS)
        for i, op in enumerate(operations)
        if op not in _OPERATIONS
    ]
    for field in ("apiGroups", "apiVersions"):
        values = rule.get(field) or []
        if not values:
            errors.append(required(f"{path}.{field}"))
        if len(values) > 1 and "*" in values:
            what = "API groups" if field == "apiGroups" else "API versions"
            errors.append(invalid(f"{path}.{field}", values, f"if '*' is present, must not specify other {what}"))
    if not rule.get("resources"):
        errors.append(required(f"{path}.resources"))
    if rule.get("scope") not in _SCOPES:
        errors.append(not_supported(f"{path}.scope", rule.get("scope"), _SCOPES))
    return errors


def _url_errors(field: str, url: str) -> list[FieldError]:
    parts = urlsplit(url)
    errors = []
    if parts.scheme != "https":
        errors.append(invalid(field, parts.scheme, "'https' is the only allowed URL scheme" + _URL_FORM))
    if not parts.hostname:
        errors.append(invalid(field, parts.hostname or "", "host must be specified" + _URL_FORM))
    if parts.username is not None:
        errors.append(invalid(field, parts.netloc.rpartition("@")[0], "user information is not permitted in the URL"))
    if parts.fragment:
        errors.append(invalid(field, parts.fragment, "fragments are not permitted in the URL"))
    if parts.query:
        errors.append(invalid(field, parts.query, "query parameters are not permitted in the URL"))
    return errors


def _service_errors(field: str, service: Obj) -> list[FieldError]:
    errors = []
    if not service.get("name"):
        errors.append(required(f"{field}.name", "service name is required"))
    if not service.get("namespace"):
        errors.append(required(f"{field}.namespace", "service namespace is required"))
    port = service.get("port")
    if not isinstance(port, int) or not 1 <= port <= 65535:
        errors.append(invalid(f"{field}.port", port, "port is not valid: must be between 1 and 65535, inclusive"))
    path = service.get("path")
    if path and path != "/" and not path.startswith("/"):
        errors.append(invalid(f"{field}.path", path, "must start with a '/'"))
    return errors


def _client_config_errors(field: str, client_config: Obj) -> list[FieldError]:
    url, service = client_config.get("url"), client_config.get("service")
    if (url is None) == (service is None):
        return [required(field, "exactly one of url or service is required")]
    if url is not None:
        return _url_errors(f"{field}.url", url)
    return _service_errors(f"{field}.service", service)


def _review_version_errors(field: str, versions: list[str]) -> list[FieldError]:
    if not versions:
        return [required(field, "must specify one of " + ", ".join(_REVIEW_VERSIONS))]
    errors = [invalid(f"{field}[{i}]", v, "duplicate version") for i, v in enumerate(versions) if v in versions[:i]]
    if not set(versions) & set(_REVIEW_VERSIONS):
        errors.append(invalid(field, versions, "must include at least one of " + ", ".join(_REVIEW_VERSIONS)))
    return errors


def _webhook_errors(hook: Obj, path: str, mutating: bool) -> list[FieldError]:
    errors = _fully_qualified_name_errors(f"{path}.name", hook.get("name", ""))
    for i, rule in enumerate(hook.get("rules") or []):
        errors += _rule_errors(rule, f"{path}.rules[{i}]")
    for field, allowed in (("failurePolicy", _FAILURE_POLICIES), ("matchPolicy", _MATCH_POLICIES)):
        if hook[field] not in allowed:
            errors.append(not_supported(f"{path}.{field}", hook[field], allowed))
    side_effects = hook.get("sideEffects")
    if side_effects is None:
        errors.append(required(f"{path}.sideEffects", "must specify one of " + ", ".join(_SIDE_EFFECTS)))
    elif side_effects not in _SIDE_EFFECTS:
        errors.append(not_supported(f"{path}.sideEffects", side_effects, _SIDE_EFFECTS))
    timeout = hook["timeoutSeconds"]
    if not isinstance(timeout, int) or not 1 <= timeout <= 30:
        errors.append(invalid(f"{path}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 seconds"))
    if mutating and hook["reinvocationPolicy"] not in _REINVOCATION_POLICIES:
        errors.append(not_supported(f"{path}.reinvocationPolicy", hook["reinvocationPolicy"], _REINVOCATION_POLICIES))
    return errors + _client_config_errors(f"{path}.clientConfig", hook.get("clientConfig") or {})


def _validate_webhooks(obj: Obj, mutating: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, hook in enumerate(obj.get("webhooks") or []):
        path = f"webhooks[{i}]"
        errors += _webhook_errors(hook, path, mutating)
        errors += _review_version_errors(f"{path}.admissionReviewVersions", hook.get("admissionReviewVersions") or [])
        name = hook.get("name", "")
        if name in seen:
            errors.append(FieldError("Duplicate", f"{path}.name", name))
        elif name:
            seen.add(name)
    return errors


def validate_mutating_webhooks(obj: Obj, old: Obj | None) -> list[FieldError]:
    return _validate_webhooks(obj, mutating=True)


def validate_validating_webhooks(obj: Obj, old: Obj | None) -> list[FieldError]:
    return _validate_webhooks(obj, mutating=False)
