"""Map HTTP requests onto store operations (the REST verbs), independent of sockets."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import yaml

from tests.kubeapi import discovery, errors
from tests.kubeapi.admission import Admission
from tests.kubeapi.patch import patcher
from tests.kubeapi.resources import ResourceRegistry, ResourceType
from tests.kubeapi.schemas import unknown_fields
from tests.kubeapi.selectors import field_selector, label_selector
from tests.kubeapi.store import Compacted, Event, Matcher, Store, Watcher

Obj = dict[str, Any]
BODY_TYPES = ["application/json", "application/yaml"]


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request as received (``path`` without the query string, ``query`` from ``parse_qs``)."""

    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    body: bytes
    headers: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def param(self, name: str) -> str | None:
        """First value of a query parameter."""
        values = self.query.get(name)
        return values[0] if values else None

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body) if self.body else None


@dataclass(frozen=True)
class Response:
    code: int
    body: Any
    content_type: str = "application/json"
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class WatchStream:
    """A watch to serve: ``initial`` events first, then the watcher's queue until ``timeout`` seconds."""

    rt: ResourceType
    watcher: Watcher | None
    initial: list[Event]
    timeout: float | None
    bookmarks: bool
    initial_events_end: bool


@dataclass(frozen=True)
class Route:
    rt: ResourceType
    namespace: str  # "" for cluster-scoped resources and all-namespace collections
    name: str | None


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";")[0].strip().lower()


class Router:
    """Resolves paths against the registry and runs the verb on the store."""

    def __init__(self, registry: ResourceRegistry, store: Store, server_address: str, admission: Admission):
        self.registry, self.store, self.server_address = registry, store, server_address
        self.admission = admission

    def handle(self, req: RecordedRequest) -> Response | WatchStream:
        if req.path in ("/healthz", "/livez", "/readyz"):
            return Response(200, "ok", "text/plain")
        if req.method == "GET":
            path = req.path.rstrip("/")
            doc = discovery.document(self.registry, path, self.server_address)
            if doc is not None:
                return Response(200, doc)
        route = self._route(req.path)
        method = req.method
        if route.name is None:
            if method == "GET":
                return self._watch(route, req) if req.param("watch") in ("true", "1") else self._list(route, req)
            if method == "POST" and (route.namespace or not route.rt.namespaced):
                return self._create(route, req)
            if method == "DELETE" and (route.namespace or not route.rt.namespaced):
                return self._delete_collection(route, req)
        elif method == "GET":
            return Response(200, self._get(route))
        elif method == "PUT":
            return self._update(route, route.name, req)
        elif method == "PATCH":
            return self._patch(route, route.name, req)
        elif method == "DELETE":
            return self._delete(route, req)
        raise errors.method_not_allowed()

    def _route(self, path: str) -> Route:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[0] == "api" and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.resource_not_found()
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        rt = self.registry.by_plural(group, version, rest[0])
        name = rest[1] if len(rest) == 2 else None
        # Subresources (status, scale, ...) are not served.
        if (
            rt is None
            or len(rest) > 2
            or (namespace and not rt.namespaced)
            or (rt.namespaced and name and not namespace)
        ):
            raise errors.resource_not_found()
        return Route(rt, namespace, name)

    @staticmethod
    def _decode(req: RecordedRequest) -> Obj:
        kind = media_type(req.content_type) or "application/json"
        if kind not in BODY_TYPES:
            raise errors.unsupported_media_type(BODY_TYPES)
        try:
            body = json.loads(req.body) if kind == "application/json" else yaml.safe_load(req.body)
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from None
        if not isinstance(body, dict):
            raise errors.bad_request("couldn't get version/kind; json parse error: the body is not a JSON object")
        return body

    def _matcher(self, route: Route, req: RecordedRequest) -> Matcher:
        labels = label_selector(req.param("labelSelector"))
        fields = field_selector(req.param("fieldSelector"), route.rt.field_selectors)
        return lambda obj: labels(obj) and fields(obj)

    def _get(self, route: Route) -> Obj:
        assert route.name is not None
        obj = self.store.get(route.rt, route.namespace, route.name)
        if obj is None:
            raise errors.not_found(route.rt.plural, route.rt.group, route.name)
        return obj

    def _list(self, route: Route, req: RecordedRequest) -> Response:
        """List with ``limit``/``continue`` paging: later pages read the first page's snapshot; once that is
        compacted, 410 with a token that continues from the current state (as etcd3's store answers)."""
        rt = route.rt
        token = req.param("continue")
        rv, start = _decode_continue(token) if token else (-1, "")
        try:
            items, rv = self.store.list(rt, route.namespace, self._matcher(route, req), rv if rv >= 0 else None)
        except Compacted:
            raise errors.continue_expired(_encode_continue(-1, start)) from None
        items = [o for o in items if _sort_key(o) > start]
        meta: Obj = {"resourceVersion": str(rv)}
        limit = int(_number(req, "limit"))
        if 0 < limit < len(items):
            items, rest = items[:limit], items[limit:]
            meta.update({"continue": _encode_continue(rv, _sort_key(items[-1])), "remainingItemCount": len(rest)})
        if rt.strategic_merge:  # built-in list items carry no apiVersion/kind; custom resources do
            for item in items:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        return Response(200, {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": items})

    def _watch(self, route: Route, req: RecordedRequest) -> WatchStream:
        """Start a watch. A compacted ``resourceVersion`` yields one ERROR event in a 200 stream, as the real
        server does for watches."""
        rv = req.param("resourceVersion") or ""
        initial_events = req.param("sendInitialEvents") == "true"
        since = None
        if rv not in ("", "0") and not initial_events:
            if not rv.isdigit():
                raise errors.bad_request(f'resourceVersion: Invalid value: "{rv}": must be a non-negative integer')
            since = int(rv)
        timeout = _number(req, "timeoutSeconds") or None  # fractions are accepted, unlike the real server
        bookmarks = req.param("allowWatchBookmarks") == "true"
        try:
            watcher, initial = self.store.watch(route.rt, route.namespace, self._matcher(route, req), since)
        except errors.ApiError as exc:
            return WatchStream(route.rt, None, [("ERROR", exc.status())], timeout, False, False)
        return WatchStream(route.rt, watcher, initial, timeout, bookmarks, initial_events)

    def _create(self, route: Route, req: RecordedRequest) -> Response:
        warnings: list[str] = []
        body = _check_fields(route.rt, req, self._decode(req), warnings)
        dry_run = _dry_run(req)
        body = self.admission.create(route.rt, route.namespace, body, req.query, warnings)
        created = self.store.create(route.rt, route.namespace, body, dry_run=dry_run)
        return Response(201, created, warnings=tuple(warnings))

    def _update(self, route: Route, name: str, req: RecordedRequest) -> Response:
        warnings: list[str] = []
        body = _check_fields(route.rt, req, self._decode(req), warnings)
        updated, created = self.store.update(route.rt, route.namespace, name, body, dry_run=_dry_run(req))
        return Response(201 if created else 200, updated, warnings=tuple(warnings))

    def _patch(self, route: Route, name: str, req: RecordedRequest) -> Response:
        rt = route.rt
        warnings: list[str] = []
        apply = patcher(media_type(req.content_type), req.body, rt.merge_keys, rt.strategic_merge)

        def checked(current: Obj) -> Any:
            return _check_fields(rt, req, apply(current), warnings)

        patched = self.store.patch(rt, route.namespace, name, checked, dry_run=_dry_run(req))
        return Response(200, patched, warnings=tuple(warnings))

    def _delete(self, route: Route, req: RecordedRequest) -> Response:
        assert route.name is not None
        options = _delete_options(req)
        rt = route.rt
        deleted = self.store.delete(
            rt, route.namespace, route.name, preconditions=options.get("preconditions"), dry_run=_dry_run(req, options)
        )
        if rt.return_deleted_object:
            return Response(200, deleted)
        details = {"name": route.name, "group": rt.group, "kind": rt.plural, "uid": deleted["metadata"]["uid"]}
        if not rt.group:
            del details["group"]
        return Response(
            200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
        )

    def _delete_collection(self, route: Route, req: RecordedRequest) -> Response:
        rt = route.rt
        dry_run = _dry_run(req, _delete_options(req))
        deleted = self.store.delete_collection(rt, route.namespace, self._matcher(route, req), dry_run=dry_run)
        meta = {"resourceVersion": str(self.store.resource_version)}
        return Response(
            200, {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": deleted}
        )


def _check_fields(rt: ResourceType, req: RecordedRequest, obj: Any, warnings: list[str]) -> Any:
    """``fieldValidation``: Strict rejects unknown fields, Warn (the default) reports them in
    ``Warning`` headers, Ignore does neither; the store drops them in every case."""
    mode = req.param("fieldValidation") or "Warn"
    if mode not in ("Ignore", "Warn", "Strict"):
        raise errors.bad_request(
            f'fieldValidation: Unsupported value: "{mode}": supported values: "Ignore", "Strict", "Warn"'
        )
    unknown = [f'unknown field "{path}"' for path in unknown_fields(obj, rt.schema, prune=False)]
    if unknown and mode == "Strict":
        raise errors.bad_request("strict decoding error: " + ", ".join(unknown))
    if mode == "Warn":
        warnings += unknown
    return obj


def _number(req: RecordedRequest, name: str) -> float:
    try:
        return float(req.param(name) or 0)
    except ValueError:
        raise errors.bad_request(f'{name}: Invalid value: "{req.param(name)}": must be a number') from None


def _dry_run(req: RecordedRequest, options: Obj | None = None) -> bool:
    values = req.query.get("dryRun", []) + list((options or {}).get("dryRun") or [])
    for value in values:
        if value != "All":
            raise errors.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    return bool(values)


def _delete_options(req: RecordedRequest) -> Obj:
    if not req.body.strip():
        return {}
    try:
        options = req.json()
    except ValueError:
        options = None
    if not isinstance(options, dict):
        raise errors.bad_request("couldn't decode DeleteOptions: the body is not a JSON object")
    return options


def _sort_key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def _encode_continue(rv: int, start: str) -> str:
    """A token for the items after ``start`` as of ``rv`` (-1: the current state)."""
    return base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": start}).encode()).decode()


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        state = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(state["rv"]), str(state["start"])
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise errors.bad_request(f"invalid continue token: continue key is not valid: {exc}") from None
