"""marshmallow schemas for the AdmissionReview envelope and the Pod fields the policy reads.

Only what the policy reads is validated, so a Pod from a newer Kubernetes with
fields we don't know passes untouched (unknown fields are kept, not rejected).
Errors come back as one readable line with the field path, for a 400 answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marshmallow import INCLUDE, Schema, ValidationError, fields, validate

from app import quantity

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class _Open(Schema):
    """Unknown fields are allowed and left alone."""

    class Meta:
        unknown = INCLUDE


def _str() -> fields.String:
    return fields.String(allow_none=True)


def _bool() -> fields.Boolean:
    return fields.Boolean(allow_none=True, truthy={True}, falsy={False})


class Quantity(fields.Field):
    """A Kubernetes quantity: a string like ``16Gi`` or ``500m``, or a bare number."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        try:
            quantity.parse(value)
        except quantity.QuantityError as exc:
            raise ValidationError(str(exc)) from exc
        return value


def _resource_list() -> fields.Dict:
    return fields.Dict(keys=fields.String(), values=Quantity(), allow_none=True)


class EnvVarSchema(_Open):
    name = fields.String(required=True)
    value = _str()


class SecurityContextSchema(_Open):
    privileged = _bool()


class ResourcesSchema(_Open):
    limits = _resource_list()
    requests = _resource_list()


class ContainerSchema(_Open):
    name = fields.String(required=True)
    resources = fields.Nested(ResourcesSchema, allow_none=True)
    env = fields.List(fields.Nested(EnvVarSchema), allow_none=True)
    securityContext = fields.Nested(SecurityContextSchema, allow_none=True)


class PodSpecSchema(_Open):
    containers = fields.List(fields.Nested(ContainerSchema), allow_none=True)
    initContainers = fields.List(fields.Nested(ContainerSchema), allow_none=True)
    schedulerName = _str()
    nodeName = _str()
    runtimeClassName = _str()


class ObjectMetaSchema(_Open):
    name = _str()
    generateName = _str()
    namespace = _str()
    annotations = fields.Dict(keys=fields.String(), values=fields.String(), allow_none=True)


class PodSchema(_Open):
    metadata = fields.Nested(ObjectMetaSchema, allow_none=True)
    spec = fields.Nested(PodSpecSchema, allow_none=True)


class GroupVersionKindSchema(_Open):
    group = _str()
    version = _str()
    kind = _str()


class GroupVersionResourceSchema(_Open):
    group = _str()
    version = _str()
    resource = _str()


class AdmissionRequestSchema(_Open):
    uid = fields.String(required=True, validate=validate.Length(min=1))
    kind = fields.Nested(GroupVersionKindSchema, required=True)
    resource = fields.Nested(GroupVersionResourceSchema, allow_none=True)
    subResource = _str()
    operation = fields.String(required=True, validate=validate.OneOf(OPERATIONS))
    namespace = _str()
    name = _str()
    object = fields.Raw(allow_none=True)
    dryRun = _bool()


class AdmissionReviewSchema(_Open):
    apiVersion = fields.String(required=True, validate=validate.OneOf(API_VERSIONS))
    kind = fields.String(required=True, validate=validate.Equal("AdmissionReview"))
    request = fields.Nested(AdmissionRequestSchema, required=True)


REVIEW = AdmissionReviewSchema()
POD = PodSchema()


def problems(schema: Schema, data: Any, prefix: str) -> str | None:
    """Validate ``data``; None when valid, else one line naming each bad field by path."""
    if not isinstance(data, Mapping):
        return f"{prefix}: must be a JSON object"
    errors = schema.validate(data)
    if not errors:
        return None
    return "; ".join(f"{path}: {message}" for path, message in _flatten(errors, prefix))


def _flatten(errors: Any, path: str) -> list[tuple[str, str]]:
    """(path, message) pairs: ``a.b[0]`` for fields and list items, ``a["key"]`` for mapping entries."""
    if not isinstance(errors, Mapping):
        return [(path, _readable(message)) for message in (errors if isinstance(errors, list) else [errors])]
    out: list[tuple[str, str]] = []
    for key, nested in errors.items():
        if isinstance(key, int):
            out += _flatten(nested, f"{path}[{key}]")
        elif key == "_schema":
            out += _flatten(nested, path)
        elif isinstance(nested, Mapping) and nested and set(nested) <= {"key", "value"}:
            for part in nested.values():  # a Dict field's entry: marshmallow nests it under "key"/"value"
                out += _flatten(part, f'{path}["{key}"]')
        else:
            out += _flatten(nested, f"{path}.{key}" if path else key)
    return out


def _readable(message: Any) -> str:
    """marshmallow's stock messages ("Not a valid string.") read better lower-cased after a path."""
    text = str(message)
    return text[0].lower() + text[1:].rstrip(".") if text.endswith(".") else text
