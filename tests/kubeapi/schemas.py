"""Known-field schemas, so unknown fields are dropped (or rejected with ``fieldValidation=Strict``)
the way the real server's typed decoding does it.

A schema is ``None`` (anything goes below this point), a dict of field name → schema, or a
one-element list ``[schema]`` for a list whose items follow ``schema``. Only the top level,
``metadata`` and webhook configurations are described in depth.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

Schema: TypeAlias = Mapping[str, "Schema"] | list["Schema"] | None

METADATA: Schema = dict.fromkeys(
    (
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    )
)


def kind(*fields: str, **nested: Schema) -> Schema:
    """A top-level object schema: type meta, metadata, ``fields`` (opaque) and ``nested`` schemas."""
    return {"apiVersion": None, "kind": None, "metadata": METADATA, **dict.fromkeys(fields), **nested}


_SERVICE = dict.fromkeys(("namespace", "name", "path", "port"))
_RULE = dict.fromkeys(("operations", "apiGroups", "apiVersions", "resources", "scope"))
_VALIDATING_WEBHOOK: dict[str, Schema] = {
    **dict.fromkeys(
        (
            "name",
            "failurePolicy",
            "matchPolicy",
            "namespaceSelector",
            "objectSelector",
            "sideEffects",
            "timeoutSeconds",
            "admissionReviewVersions",
            "matchConditions",
        )
    ),
    "clientConfig": {"url": None, "caBundle": None, "service": _SERVICE},
    "rules": [_RULE],
}

SPEC_STATUS = kind("spec", "status")
SECRET = kind("data", "stringData", "type", "immutable")
CONFIG_MAP = kind("data", "binaryData", "immutable")
SERVICE_ACCOUNT = kind("secrets", "imagePullSecrets", "automountServiceAccountToken")
EVENT = kind(
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
)
ROLE = kind("rules")
CLUSTER_ROLE = kind("rules", "aggregationRule")
BINDING = kind("subjects", "roleRef")
SPEC_ONLY = kind("spec")
VALIDATING_WEBHOOKS = kind(webhooks=[_VALIDATING_WEBHOOK])
MUTATING_WEBHOOKS = kind(webhooks=[{**_VALIDATING_WEBHOOK, "reinvocationPolicy": None}])


def unknown_fields(obj: Any, schema: Schema, *, prune: bool, path: str = "") -> list[str]:
    """Paths of fields ``schema`` does not know (``webhooks[0].clientConfig.servce``); removed if ``prune``."""
    found: list[str] = []
    if isinstance(schema, list) and isinstance(obj, list):
        for i, item in enumerate(obj):
            found += unknown_fields(item, schema[0], prune=prune, path=f"{path}[{i}]")
    elif isinstance(schema, Mapping) and isinstance(obj, dict):
        for key in list(obj):
            where = f"{path}.{key}" if path else key
            if key not in schema:
                found.append(where)
                if prune:
                    del obj[key]
            else:
                found += unknown_fields(obj[key], schema[key], prune=prune, path=where)
    return found
