"""The resource table: the one place that says which kinds the fake server serves and how."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tests.kubeapi import kinds, schemas
from tests.kubeapi.errors import FieldError
from tests.kubeapi.schemas import Schema

Obj = dict[str, Any]
Prepare = Callable[[Obj, Obj | None], None]
Validate = Callable[[Obj, Obj | None], list[FieldError]]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
NAMESPACES = ("", "namespaces")


@dataclass(frozen=True, eq=False)
class ResourceType:
    """How one kind is addressed, discovered, defaulted, validated and patched.

    ``prepare(new, old)`` defaults/normalizes a candidate object in place (it may raise
    ``ApiError`` for undecodable input); ``validate(new, old)`` returns field errors (422).
    ``generation_fields`` are the top-level fields whose change bumps ``metadata.generation``
    (empty: the kind has no generation).  ``merge_keys`` override the strategic-merge-patch
    list keys of ``patch.DEFAULT_MERGE_KEYS`` for this kind. ``schema`` lists the known fields
    (see ``schemas``); None keeps every field, as for custom resources here. Without
    ``allow_unconditional_update`` a PUT must carry ``metadata.resourceVersion`` (422 otherwise);
    with ``allow_create_on_update`` a PUT of a missing object creates it.
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    name_format: str = "subdomain"
    generation_fields: tuple[str, ...] = ("spec",)
    field_selectors: tuple[str, ...] = ()
    merge_keys: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    strategic_merge: bool = True
    return_deleted_object: bool = False
    allow_unconditional_update: bool = True
    allow_create_on_update: bool = False
    prepare: Prepare | None = None
    validate: Validate | None = None
    schema: Schema = field(default_factory=lambda: schemas.SPEC_STATUS)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)


def _core(kind: str, plural: str, **kw: Any) -> ResourceType:
    return ResourceType("", "v1", kind, plural, **kw)


def _rbac(kind: str, plural: str, schema: Schema, namespaced: bool = True) -> ResourceType:
    """RBAC names may contain ':' (``system:auth-delegator``) and RBAC objects have no generation."""
    group = "rbac.authorization.k8s.io"
    return ResourceType(group, "v1", kind, plural, namespaced, name_format="path", generation_fields=(), schema=schema)


_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
_ADMISSION = "admissionregistration.k8s.io"

DEFAULT_RESOURCES: tuple[ResourceType, ...] = (
    _core(
        "Namespace",
        "namespaces",
        namespaced=False,
        short_names=("ns",),
        name_format="label",
        generation_fields=(),
        field_selectors=("status.phase",),
        return_deleted_object=True,
        prepare=kinds.prepare_namespace,
    ),
    _core(
        "Secret",
        "secrets",
        generation_fields=(),
        field_selectors=("type",),
        prepare=kinds.prepare_secret,
        validate=kinds.validate_secret,
        schema=schemas.SECRET,
    ),
    _core(
        "ConfigMap",
        "configmaps",
        short_names=("cm",),
        generation_fields=(),
        validate=kinds.validate_configmap,
        schema=schemas.CONFIG_MAP,
    ),
    _core(
        "Pod",
        "pods",
        short_names=("po",),
        categories=("all",),
        field_selectors=_POD_FIELDS,
        return_deleted_object=True,
        prepare=kinds.prepare_pod,
    ),
    _core(
        "Service",
        "services",
        short_names=("svc",),
        categories=("all",),
        name_format="label1035",
        merge_keys=MappingProxyType({"ports": "port"}),
        return_deleted_object=True,
    ),
    _core(
        "ServiceAccount", "serviceaccounts", short_names=("sa",), generation_fields=(), schema=schemas.SERVICE_ACCOUNT
    ),
    _core("ResourceQuota", "resourcequotas", short_names=("quota",), prepare=kinds.prepare_resource_quota),
    _core(
        "Event",
        "events",
        short_names=("ev",),
        generation_fields=(),
        field_selectors=_EVENT_FIELDS,
        schema=schemas.EVENT,
    ),
    ResourceType(
        _ADMISSION,
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        namespaced=False,
        generation_fields=("webhooks",),
        prepare=kinds.prepare_mutating_webhooks,
        validate=kinds.validate_mutating_webhooks,
        schema=schemas.MUTATING_WEBHOOKS,
    ),
    ResourceType(
        _ADMISSION,
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        namespaced=False,
        generation_fields=("webhooks",),
        prepare=kinds.prepare_validating_webhooks,
        validate=kinds.validate_validating_webhooks,
        schema=schemas.VALIDATING_WEBHOOKS,
    ),
    _rbac("Role", "roles", schemas.ROLE),
    _rbac("RoleBinding", "rolebindings", schemas.BINDING),
    _rbac("ClusterRole", "clusterroles", schemas.CLUSTER_ROLE, namespaced=False),
    _rbac("ClusterRoleBinding", "clusterrolebindings", schemas.BINDING, namespaced=False),
    ResourceType("apps", "v1", "Deployment", "deployments", short_names=("deploy",), categories=("all",)),
    ResourceType("batch", "v1", "Job", "jobs", categories=("all",)),
    ResourceType("batch", "v1", "CronJob", "cronjobs", short_names=("cj",), categories=("all",)),
    ResourceType(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        namespaced=False,
        short_names=("pc",),
        generation_fields=(),
        schema=None,
    ),
    ResourceType("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", short_names=("pdb",)),
    ResourceType(
        "networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", short_names=("netpol",), schema=schemas.SPEC_ONLY
    ),
    ResourceType(
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        generation_fields=(),
        schema=schemas.SPEC_ONLY,
        allow_unconditional_update=False,
        allow_create_on_update=True,
    ),
)


def default_plural(kind: str) -> str:
    """English plural the way CRD authors usually spell it (Issuer→issuers, Policy→policies)."""
    lower = kind.lower()
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return lower[:-1] + "ies"
    return lower + "s"


def custom_resource(
    api_version: str, kind: str, *, plural: str | None = None, namespaced: bool = True, short_names: Iterable[str] = ()
) -> ResourceType:
    """A CRD-like kind: no defaulting/validation and, like real custom resources, no strategic merge patch."""
    group, _, version = api_version.rpartition("/")
    return ResourceType(
        group,
        version,
        kind,
        plural or default_plural(kind),
        namespaced=namespaced,
        short_names=tuple(short_names),
        strategic_merge=False,
        schema=None,
        allow_unconditional_update=False,
    )


class ResourceRegistry:
    """Lookup of resource types by URL (group/version/plural) and by object (apiVersion/kind)."""

    def __init__(self, types: Iterable[ResourceType] = DEFAULT_RESOURCES):
        self._types: list[ResourceType] = []
        for rt in types:
            self.register(rt)

    def register(self, rt: ResourceType) -> ResourceType:
        """Add (or replace, matched by group/version/plural) a resource type."""
        self._types = [t for t in self._types if (t.group, t.version, t.plural) != (rt.group, rt.version, rt.plural)]
        self._types.append(rt)
        return rt

    def by_plural(self, group: str, version: str, plural: str) -> ResourceType | None:
        return next((t for t in self._types if (t.group, t.version, t.plural) == (group, version, plural)), None)

    def by_kind(self, api_version: str, kind: str) -> ResourceType:
        for rt in self._types:
            if rt.api_version == api_version and rt.kind == kind:
                return rt
        raise KeyError(f"fake kube-apiserver does not serve {api_version} {kind}; register it with register_resource()")

    def group_versions(self) -> dict[str, list[str]]:
        """Group name → versions, in registration order ("" is the core group)."""
        out: dict[str, list[str]] = {}
        for rt in self._types:
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [t for t in self._types if (t.group, t.version) == (group, version)]
