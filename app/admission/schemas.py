"""marshmallow schemas for the AdmissionReview envelope and the Pod fields the policy reads.

Only what the policy reads is validated, so a Pod from a newer Kubernetes with
fields we don't know passes untouched (unknown fields are kept, not rejected).
Errors come back as one readable line with the field path, for a 400 answer.

The schemas stay the single source of truth, but running marshmallow's machinery
on every review costs more than the rest of the review (over 40 ms for a
200-container Pod). So each schema is also compiled once, at import, into plain
checks derived from its declared fields; a body they accept is one marshmallow
accepts, and anything they do not accept goes through marshmallow itself, which
decides and words the error. Field types the compiler does not know are checked
by their own marshmallow ``deserialize``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from marshmallow import INCLUDE, Schema, ValidationError, fields, validate
from marshmallow.validate import Validator

from app.admission import quantity

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


class QuantityField(fields.Field):
    """A Kubernetes quantity: a string like ``16Gi`` or ``500m``, or a bare number."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        try:
            quantity.parse(value)
        except quantity.QuantityError as exc:
            raise ValidationError(str(exc)) from exc
        return value


def _resource_list() -> fields.Dict:
    return fields.Dict(keys=fields.String(), values=QuantityField(), allow_none=True)


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
    labels = fields.Dict(keys=fields.String(), values=fields.String(), allow_none=True)


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


Check = Callable[[Any], bool]


@functools.cache
def accepts(schema: Schema) -> Check:
    """A check, compiled from ``schema``'s fields, that only says True for data marshmallow accepts."""
    if schema.unknown != INCLUDE or any(schema._hooks.values()):
        return lambda data: not schema.validate(data)
    checks = [
        (field.data_key or name, field.required, _field_check(field)) for name, field in schema.load_fields.items()
    ]

    def check(data: Any) -> bool:
        if not isinstance(data, dict):
            return False
        for key, required, ok in checks:
            if key in data:
                if not ok(data[key]):
                    return False
            elif required:
                return False
        return True

    return check


def _field_check(field: fields.Field) -> Check:
    """None per ``allow_none``, then the type's check, then the field's validators.

    Without validators, a type check that refuses None already is the field's check, alone or after one
    ``is None`` test: one call per field, not two (15-20 % of the validation's time).
    """
    kind, refuses_none = _type_check(field)
    allow_none, validators = field.allow_none, list(field.validators)
    if not validators and refuses_none:
        if kind is _is_str:
            return _is_str_or_none if allow_none else _is_str
        return (lambda value: value is None or kind(value)) if allow_none else kind
    if not validators:
        return lambda value: allow_none if value is None else kind(value)

    def check(value: Any) -> bool:
        if value is None:
            return allow_none
        return kind(value) and all(_passes(validator, value) for validator in validators)

    return check


def _passes(validator: Callable[[Any], Any], value: Any) -> bool:
    try:
        return validator(value) is not False or isinstance(validator, Validator)
    except ValidationError:
        return False


def _type_check(field: fields.Field) -> tuple[Check, bool]:
    """The check for a non-null value's type and content, and whether it says False for None too; exact
    types only, so subclasses take the generic path."""
    kind = type(field)
    if kind is fields.Raw:
        return (lambda value: True), False
    if kind is fields.String:
        return _is_str, True
    if (
        isinstance(field, fields.Boolean)
        and kind is fields.Boolean
        and field.truthy == {True}
        and field.falsy == {False}
    ):
        return (lambda value: value is True or value is False), True
    if isinstance(field, fields.Nested) and kind is fields.Nested and not field.many:
        nested = field.schema
        if isinstance(nested, Schema):
            return accepts(nested), True
    if isinstance(field, fields.List) and kind is fields.List:
        return functools.partial(_list, _field_check(field.inner)), True
    if isinstance(field, fields.Dict) and kind is fields.Dict:
        keys = _field_check(field.key_field) if field.key_field else None
        values = _field_check(field.value_field) if field.value_field else None
        return functools.partial(_dict, keys, values), True
    return functools.partial(_deserializes, field), False


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_str_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _list(item: Check, value: Any) -> bool:
    if not isinstance(value, list):
        return False
    for entry in value:
        if not item(entry):
            return False
    return True


def _dict(keys: Check | None, values: Check | None, value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    for key, entry in value.items():
        if (keys is not None and not keys(key)) or (values is not None and not values(entry)):
            return False
    return True


def _deserializes(field: fields.Field, value: Any) -> bool:
    """A field type the compiler does not know: its own conversion decides (None was handled before)."""
    try:
        field._deserialize(value, None, None)
    except ValidationError:
        return False
    return True


REVIEW = AdmissionReviewSchema()
POD = PodSchema()
accepts(REVIEW)  # compiled here, once, not on the first review
accepts(POD)


def problems(schema: Schema, data: Any, prefix: str) -> str | None:
    """Validate ``data``; None when valid, else one line naming each bad field by path."""
    if not isinstance(data, Mapping):
        return f"{prefix}: must be a JSON object"
    if accepts(schema)(data):
        return None
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
