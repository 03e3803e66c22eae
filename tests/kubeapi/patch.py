"""PATCH bodies: RFC 6902 JSON patch, RFC 7386 merge patch and Kubernetes strategic merge patch.

The strategic merge follows ``k8s.io/apimachinery/pkg/util/strategicpatch`` for the
parts clients use: merge-keyed lists, ``$patch`` (merge/replace/delete),
``$setElementOrder/<list>``, ``$retainKeys`` and ``$deleteFromPrimitiveList/<list>``.
List fields are looked up by field name (see ``DEFAULT_MERGE_KEYS``), not by schema.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

import jsonpatch
import jsonpointer

from tests.kubeapi.errors import ApiError, bad_request, unsupported_media_type

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

DEFAULT_MERGE_KEYS: Mapping[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "ownerReferences": "uid",
    "conditions": "type",
    "webhooks": "name",
}
# Lists of scalars whose patch strategy is "merge" (union) rather than replace.
MERGED_SCALAR_LISTS = frozenset({"finalizers"})

_ORDER = "$setElementOrder/"
_DELETE_FROM = "$deleteFromPrimitiveList/"
_DELETE = object()  # result of a ``$patch: delete`` map: remove the field


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(
    original: dict[str, Any], patch: dict[str, Any], merge_keys: Mapping[str, str]
) -> dict[str, Any]:
    """Apply a strategic merge patch; ``merge_keys`` maps list field names to their merge key."""
    result = _StrategicMerge(merge_keys).map(copy.deepcopy(original), patch)
    return {} if result is _DELETE else result


class _StrategicMerge:
    """One patch application; ``map``/``value``/``list`` mirror Go's mergeMap/mergeSlice recursion."""

    def __init__(self, merge_keys: Mapping[str, str]):
        self.merge_keys = merge_keys

    def map(self, original: dict[str, Any], patch: dict[str, Any]) -> Any:
        directive = patch.get("$patch", "merge")
        if directive == "delete":
            return _DELETE
        if directive == "replace":
            return self.map({}, {k: v for k, v in patch.items() if k != "$patch"})
        if directive != "merge":
            raise bad_request(f"unknown patch type: {directive} in map: {json.dumps(patch)}")
        result = dict(original)
        if "$retainKeys" in patch:
            retain = patch["$retainKeys"] or []
            result = {k: v for k, v in result.items() if k in retain}
        for key, values in patch.items():
            if key.startswith(_DELETE_FROM) and isinstance(result.get(key[len(_DELETE_FROM) :]), list):
                field = key[len(_DELETE_FROM) :]
                result[field] = [v for v in result[field] if v not in values]
        for key, value in patch.items():
            if key.startswith("$"):
                continue
            merged = _DELETE if value is None else self.value(key, result.get(key), value)
            if merged is _DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
        for key, order in patch.items():
            field = key[len(_ORDER) :]
            if key.startswith(_ORDER) and isinstance(result.get(field), list):
                result[field] = self.reorder(field, result[field], order, original.get(field) or [])
        return result

    def value(self, field: str, original: Any, patch: Any) -> Any:
        if isinstance(patch, dict):
            return self.map(original if isinstance(original, dict) else {}, patch)
        if not isinstance(patch, list):
            return patch
        base = original if isinstance(original, list) else []
        if field in MERGED_SCALAR_LISTS:
            return _normalize_order(_dedupe(base + patch), patch, base, _value_key)
        merge_key = self.merge_keys.get(field)
        if merge_key is None or not all(isinstance(e, dict) for e in patch):
            return copy.deepcopy(patch)
        return self.list(base, patch, merge_key)

    def list(self, original: list[Any], patch: list[dict[str, Any]], merge_key: str) -> list[Any]:
        key = _keyed(merge_key)
        items = [e for e in patch if "$patch" not in e]
        deleted = set()
        for element in patch:
            directive = element.get("$patch")
            if directive == "delete" and merge_key in element:
                deleted.add(key(element))
            elif directive == "delete":
                raise bad_request(f"map: {json.dumps(element)} does not contain declared merge key: {merge_key}")
            elif directive not in (None, "replace"):
                raise bad_request(f"invalid list directive $patch: {directive} in {json.dumps(element)}")
        if any(e.get("$patch") == "replace" for e in patch):
            return [self.map({}, e) for e in items]
        merged = [e for e in original if not (isinstance(e, dict) and key(e) in deleted)]
        for element in items:
            if merge_key not in element:
                raise bad_request(f"map: {json.dumps(element)} does not contain declared merge key: {merge_key}")
            index = next((i for i, e in enumerate(merged) if isinstance(e, dict) and key(e) == key(element)), None)
            if index is None:
                merged.append(self.map({}, element))
            else:
                merged[index] = self.map(merged[index], element)
        return _normalize_order(merged, items, original, key)

    def reorder(self, field: str, merged: list[Any], order: list[Any], original: list[Any]) -> list[Any]:
        """``$setElementOrder`` wins over patch order, which wins over live order."""
        merge_key = self.merge_keys.get(field)
        key = _keyed(merge_key) if merge_key else _value_key
        wanted = [key(e) for e in order]
        by_key = {key(e): e for e in merged}
        listed = [by_key[k] for k in wanted if k in by_key]
        return _merge_sorted([e for e in merged if key(e) not in wanted], listed, original, key)


def _value_key(value: Any) -> Any:
    return json.dumps(value, sort_keys=True)


def _keyed(merge_key: str) -> Callable[[Any], Any]:
    return lambda e: json.dumps(e.get(merge_key) if isinstance(e, dict) else e, sort_keys=True)


def _dedupe(values: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for v in values:
        if _value_key(v) not in seen:
            seen.add(_value_key(v))
            out.append(v)
    return out


def _normalize_order(merged: list[Any], patch: list[Any], original: list[Any], key: Callable[[Any], Any]) -> list[Any]:
    """Like Go's ``normalizeElementOrder``: patch items in patch order, interleaved with live-only items."""
    patch_keys = [key(e) for e in patch]
    in_patch = sorted((e for e in merged if key(e) in patch_keys), key=lambda e: patch_keys.index(key(e)))
    live_keys = [key(e) for e in original]
    live_only = sorted((e for e in merged if key(e) not in patch_keys), key=lambda e: _index(live_keys, key(e)))
    return _merge_sorted(live_only, in_patch, original, key)


def _index(keys: list[Any], k: Any) -> int:
    return keys.index(k) if k in keys else -1


def _merge_sorted(left: list[Any], right: list[Any], original: list[Any], key: Callable[[Any], Any]) -> list[Any]:
    """Go's ``mergeSortedSlice``: take a live-only item first only if it precedes the patch item in the live list."""
    live_keys = [key(e) for e in original]
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right):
            out.append(left[i])
            i += 1
        elif i >= len(left):
            out.append(right[j])
            j += 1
        else:
            li, ri = _index(live_keys, key(left[i])), _index(live_keys, key(right[j]))
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise bad_request(f"error decoding patch: {exc}") from None


def _json_patch(operations: list[Any], original: dict[str, Any]) -> Any:
    try:
        return jsonpatch.JsonPatch(operations).apply(original)
    except jsonpatch.InvalidJsonPatch as exc:
        raise bad_request(str(exc)) from None
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise ApiError(422, str(exc)) from None


def patcher(
    content_type: str, body: bytes, merge_keys: Mapping[str, str], strategic: bool
) -> Callable[[dict[str, Any]], Any]:
    """Check the media type and decode the body up front (415/400 before any lookup, like the real
    server) and return the function that patches the current object.

    Server-side apply (``application/apply-patch+yaml``) is deliberately not implemented: 415.
    """
    accepted = [JSON_PATCH, MERGE_PATCH] + ([STRATEGIC_MERGE_PATCH] if strategic else [])
    if content_type not in accepted:
        raise unsupported_media_type(accepted)
    document = _json(body)
    if content_type == JSON_PATCH:
        if not isinstance(document, list):
            raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        return lambda original: _json_patch(document, original)
    if content_type == MERGE_PATCH:
        return lambda original: merge_patch(original, document)
    if not isinstance(document, dict):
        raise bad_request("error decoding patch: a strategic merge patch must be a JSON object")
    keys = {**DEFAULT_MERGE_KEYS, **merge_keys}
    return lambda original: strategic_merge_patch(original, document, keys)
