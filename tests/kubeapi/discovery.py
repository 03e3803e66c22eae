"""Legacy (non-aggregated) discovery documents built from the resource registry.

kubectl asks for aggregated discovery first; answering plain ``application/json`` makes
it fall back to ``/api``, ``/apis`` and one ``APIResourceList`` per group version.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tests.kubeapi.resources import ALL_VERBS, ResourceRegistry, ResourceType

VERSION = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.0-fake",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _resource(rt: ResourceType) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(ALL_VERBS),
    }
    if rt.short_names:
        doc["shortNames"] = list(rt.short_names)
    if rt.categories:
        doc["categories"] = list(rt.categories)
    return doc


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def document(registry: ResourceRegistry, path: str, server_address: str) -> dict[str, Any] | None:
    """The discovery document served at ``path``, or None if ``path`` is not a discovery endpoint."""
    if path.startswith("/openapi/v3"):
        return openapi_v3(registry, path)
    groups = registry.group_versions()
    parts = path.strip("/").split("/")
    if path == "/version":
        return VERSION
    if parts == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": groups.get("", []),
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        }
    if parts == ["apis"]:
        named = [_group(g, vs) for g, vs in groups.items() if g]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": named}
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups:
        return {"kind": "APIGroup", "apiVersion": "v1", **_group(parts[1], groups[parts[1]])}
    if len(parts) == 2 and parts[0] == "api":
        group, version = "", parts[1]
    elif len(parts) == 3 and parts[0] == "apis":
        group, version = parts[1], parts[2]
    else:
        return None
    if version not in groups.get(group, []):
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [_resource(rt) for rt in registry.in_group_version(group, version)],
    }


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_v3(registry: ResourceRegistry, path: str) -> dict[str, Any] | None:
    """Just enough OpenAPI v3 for kubectl's ``--validate=strict`` check: every kind's PATCH operation
    advertises the ``fieldValidation`` parameter, so kubectl leaves validation to the server (which,
    having no schemas, accepts unknown fields) instead of failing to download schemas."""
    groups = registry.group_versions()
    gv_paths = {_gv_path(g, v): (g, v) for g, vs in groups.items() for v in vs}
    if path == "/openapi/v3":
        digest = hashlib.sha256(json.dumps(sorted(gv_paths)).encode()).hexdigest()[:16]
        urls = {p: {"serverRelativeURL": f"/openapi/v3/{p}?hash={digest}"} for p in gv_paths}
        return {"paths": urls}
    gv = gv_paths.get(path.removeprefix("/openapi/v3/"))
    if gv is None:
        return None
    paths = {}
    for rt in registry.in_group_version(*gv):
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        patch = {
            "operationId": f"patch{rt.kind}",
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
            "responses": {"200": {"description": "OK"}},
        }
        paths[f"/{_gv_path(*gv)}{scope}/{rt.plural}/{{name}}"] = {"patch": patch}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]}, "paths": paths}
