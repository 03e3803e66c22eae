"""Mutable views of a Pod that remember what the policy changed, and why.

The policy edits copies of only the fields it may touch (container resources and
env, a few spec fields, annotations); the JSON Patch is then built from those
edits alone. Diffing the whole Pod with ``jsonpatch.make_patch`` would cost
milliseconds per review; this costs microseconds and can only ever emit
operations for what the policy really changed (docs/rules.md#the-patch-holds-only-what-changed).

An edit that the Pod's author should hear about carries a ``Why``; the admission
warnings are derived, like the patch, by comparing each such field as written with
its final value, so an edit that ends where it started earns neither.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jsonpointer import escape

from app.admission import notices, quantity
from app.admission.notices import Notice
from app.admission.quantity import Quantity

Op = dict[str, Any]


@dataclass(frozen=True)
class Why:
    """The rule behind an edit, in a few words, and the warning kind it earns: ``filled`` when the author
    had left the field out (None: plumbing the author need not hear about), ``replaced`` when it changed
    what they wrote."""

    rule: str
    filled: str | None = notices.DEFAULT
    replaced: str = notices.OVERWRITTEN


MIRRORED = Why("device requests must equal limits", filled=None, replaced=notices.REQUEST_FROM_LIMIT)
"""Requests copied from limits (requests mirror limits): warned only when the author asked for another request."""


def _change(where: str, subject: str, before: str | None, after: str, why: Why) -> Notice | None:
    """The warning for a field that went from ``before`` (None: absent) to ``after``, if the rule earns one."""
    if before is None:
        if why.filled is None:
            return None
        return Notice(why.filled, f"{where}{subject} set to {after} ({why.rule})")
    verb = "rounded to" if why.replaced == notices.ROUNDED else "replaced by"
    return Notice(why.replaced, f"{where}{subject} {before} {verb} {after} ({why.rule})")


def pointer(*parts: str | int) -> str:
    """JSON Pointer from unescaped parts: the one place escaping happens."""
    return "".join("/" + escape(str(part)) for part in parts)


def _dict_ops(path: tuple[str | int, ...], original: Any, current: dict[str, Any]) -> list[Op]:
    """Ops turning ``original`` (a dict, or absent/null) into ``current``: keys added, changed or removed."""
    if not isinstance(original, Mapping):
        return [{"op": "add", "path": pointer(*path), "value": dict(current)}] if current else []
    ops: list[Op] = [{"op": "remove", "path": pointer(*path, key)} for key in original if key not in current]
    for key, val in current.items():
        if key not in original:
            ops.append({"op": "add", "path": pointer(*path, key), "value": val})
        elif original[key] is not val and original[key] != val:
            ops.append({"op": "replace", "path": pointer(*path, key), "value": val})
    return ops


class ContainerEdit:
    """One container (init or app) as the vendors see it: resources and env are copies."""

    __slots__ = (
        "_env",
        "_env_changed",
        "_original",
        "_why",
        "limits",
        "name",
        "path",
        "privileged",
        "requests",
        "sidecar",
    )

    def __init__(self, path: tuple[str | int, ...], container: Mapping[str, Any]) -> None:
        self.path = path
        self._original = container
        self.name: str = container.get("name") or ""
        security = container.get("securityContext") or {}
        self.privileged: bool = security.get("privileged") is True
        # A native sidecar: an init container that keeps running beside the app containers.
        self.sidecar: bool = path[1] == "initContainers" and container.get("restartPolicy") == "Always"
        resources = container.get("resources") or {}
        self.limits: dict[str, Any] = dict(resources.get("limits") or {})
        self.requests: dict[str, Any] = dict(resources.get("requests") or {})
        self._env: list[Any] | None = None
        self._env_changed = False
        self._why: dict[tuple[str, str], Why] = {}

    # -- resources -------------------------------------------------------
    def limit(self, name: str) -> Quantity | None:
        """The parsed limit, or None when absent."""
        raw = self.limits.get(name)
        return None if raw is None else quantity.parse(raw)

    def request(self, name: str) -> Quantity | None:
        """The parsed request, or None when absent."""
        raw = self.requests.get(name)
        return None if raw is None else quantity.parse(raw)

    def limit_value(self, name: str) -> int:
        """HAMi's ``Value()`` of a limit (rounded up), 0 when absent."""
        found = self.limit(name)
        return 0 if found is None else found.value

    def limit_or_request(self, name: str) -> Quantity | None:
        """HAMi's frequent "limits, else requests" lookup."""
        found = self.limit(name)
        return self.request(name) if found is None else found

    def has(self, name: str) -> bool:
        """The resource is named in limits or requests."""
        return name in self.limits or name in self.requests

    def set_limit(self, name: str, amount: int, why: Why) -> None:
        """Set a limit to a whole number; an equal existing value is kept as written (requests mirror limits)."""
        current = self.limits.get(name)
        if current is None or quantity.parse(current).whole != amount:
            self.limits[name] = str(amount)
        self._why[("limits", name)] = why

    def mirror_request(self, name: str) -> None:
        """Request exactly the limit (docs/rules.md#requests-mirror-limits)."""
        self.requests[name] = self.limits[name]
        self._why[("requests", name)] = MIRRORED

    # -- env -------------------------------------------------------------
    @property
    def env(self) -> list[Any]:
        """The env list, copied on first use."""
        if self._env is None:
            self._env = list(self._original.get("env") or [])
        return self._env

    def has_env(self, name: str) -> bool:
        """The env var is present, whatever its value."""
        return any(isinstance(e, Mapping) and e.get("name") == name for e in self.env)

    def set_env(self, name: str, value: str, why: Why) -> None:
        """Set an env var: replaced in place when present (env vars are set, not appended), else appended."""
        self._why[("env", name)] = why
        wanted = {"name": name, "value": value}
        env = self.env
        present = False
        for index, entry in enumerate(env):
            if isinstance(entry, Mapping) and entry.get("name") == name:
                present = True
                if dict(entry) != wanted:
                    env[index] = wanted
                    self._env_changed = True
        if not present:
            env.append(wanted)
            self._env_changed = True

    # -- warnings ----------------------------------------------------------
    def changes(self) -> list[Notice]:
        """A warning for each field edited with a reason the author should hear, in the order first edited.

        A request that equalled its limit as written just follows that limit, whose own warning says why.
        """
        found: list[Notice] = []
        if not self._why:
            return found
        resources = self._original.get("resources") or {}
        written_limits = resources.get("limits") or {}
        written_requests = resources.get("requests") or {}
        shown: Callable[[Any], str]
        for (field, key), why in self._why.items():
            if field == "env":
                before, after = _env_entry(self._original.get("env"), key), _env_entry(self._env, key)
                subject = f"env {notices.name(key)}"
                shown = _env_value
            else:
                written = written_limits if field == "limits" else written_requests
                before, after = written.get(key), (self.limits if field == "limits" else self.requests).get(key)
                subject = f"{'limit' if field == 'limits' else 'request'} {notices.name(key)}"
                shown = _quantity
                if field == "requests" and before is not None and _same(before, written_limits.get(key)):
                    continue
            if after is None or before == after:
                continue
            where = f"container {notices.name(self.name)}: "
            change = _change(where, subject, None if before is None else shown(before), shown(after), why)
            if change is not None:
                found.append(change)
        return found

    # -- patch -----------------------------------------------------------
    def ops(self) -> list[Op]:
        """JSON Patch operations for what changed in this container."""
        ops: list[Op] = []
        resources = self._original.get("resources")
        if not isinstance(resources, Mapping):
            wanted = {k: v for k, v in (("limits", self.limits), ("requests", self.requests)) if v}
            if wanted:
                ops.append({"op": "add", "path": pointer(*self.path, "resources"), "value": wanted})
        else:
            for field, current in (("limits", self.limits), ("requests", self.requests)):
                ops += _dict_ops((*self.path, "resources", field), resources.get(field), current)
        if self._env_changed:
            ops += self._env_ops()
        return ops

    def _env_ops(self) -> list[Op]:
        original = self._original.get("env")
        env = self.env
        if not isinstance(original, list) or not original:
            return [{"op": "add", "path": pointer(*self.path, "env"), "value": env}]
        ops: list[Op] = [
            {"op": "replace", "path": pointer(*self.path, "env", index), "value": env[index]}
            for index, entry in enumerate(original)
            if env[index] is not entry
        ]
        ops += [{"op": "add", "path": pointer(*self.path, "env", "-"), "value": e} for e in env[len(original) :]]
        return ops


def _quantity(raw: Any) -> str:
    """A written quantity as a warning shows it: its grammar is short and printable, so bare."""
    return notices.name(str(raw))


def _same(one: Any, other: Any) -> bool:
    """Two written quantities are the same amount."""
    return other is not None and quantity.parse(one) == quantity.parse(other)


def _env_entry(env: Any, name: str) -> Any:
    """The first ``name`` entry of an env list, None when absent."""
    for entry in env if isinstance(env, list) else ():
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return entry
    return None


def _env_value(entry: Any) -> str:
    """An env entry's value as a warning shows it."""
    return notices.value(entry["value"]) if "value" in entry else "(valueFrom)"


class PodEdit:
    """The Pod-level fields the policy reads and writes, plus its containers in policy order."""

    __slots__ = ("_pod", "_spec", "_why", "annotations", "containers", "spec_changes")

    def __init__(self, pod: Mapping[str, Any]) -> None:
        self._pod = pod
        metadata = pod.get("metadata") or {}
        self._spec: Mapping[str, Any] = pod.get("spec") or {}
        self.annotations: dict[str, str] = dict(metadata.get("annotations") or {})
        self._why: dict[str, Why] = {}
        self.spec_changes: dict[str, Any] = {}
        self.containers: list[ContainerEdit] = [
            ContainerEdit(("spec", field, index), container)
            for field in ("initContainers", "containers")
            for index, container in enumerate(self._spec.get(field) or [])
        ]

    @property
    def pod(self) -> Mapping[str, Any]:
        """The Pod as the author wrote it."""
        return self._pod

    @property
    def written_annotations(self) -> Mapping[str, str]:
        """The annotations as the author wrote them."""
        return (self._pod.get("metadata") or {}).get("annotations") or {}

    def set_annotation(self, key: str, value: str, why: Why) -> None:
        """Set an annotation the author should hear about (the routing annotations are set directly)."""
        self.annotations[key] = value
        self._why[key] = why

    def changes(self) -> list[Notice]:
        """The warnings for what the policy changed: each container's in policy order, then the annotations'."""
        found = [change for container in self.containers for change in container.changes()]
        if not self._why:
            return found
        written = self.written_annotations
        for key, why in self._why.items():
            before, after = written.get(key), self.annotations[key]
            if before != after:
                shown = None if before is None else notices.value(before)
                change = _change("", f"annotation {notices.name(key)}", shown, notices.value(after), why)
                if change is not None:
                    found.append(change)
        return found

    def spec(self, field: str) -> Any:
        """A spec field as the policy last set it."""
        return self.spec_changes[field] if field in self.spec_changes else self._spec.get(field)

    def set_spec(self, field: str, value: Any) -> None:
        """Set a scalar spec field (schedulerName, runtimeClassName)."""
        if self._spec.get(field) != value:
            self.spec_changes[field] = value
        else:
            self.spec_changes.pop(field, None)

    def app_containers(self) -> list[ContainerEdit]:
        """The app containers only (quota counts them as a sum)."""
        return [c for c in self.containers if c.path[1] == "containers"]

    def init_containers(self) -> list[ContainerEdit]:
        """The init containers only, in start order (sidecars among them)."""
        return [c for c in self.containers if c.path[1] == "initContainers"]

    def ops(self) -> list[Op]:
        """Every JSON Patch operation of this review: containers, then spec, then annotations."""
        ops: list[Op] = []
        for container in self.containers:
            ops += container.ops()
        for field, value in self.spec_changes.items():
            verb = "replace" if field in self._spec else "add"
            ops.append({"op": verb, "path": pointer("spec", field), "value": value})
        metadata = self._pod.get("metadata")
        if not isinstance(metadata, Mapping):
            if self.annotations:
                ops.append({"op": "add", "path": "/metadata", "value": {"annotations": self.annotations}})
        else:
            ops += _dict_ops(("metadata", "annotations"), metadata.get("annotations"), self.annotations)
        return ops
