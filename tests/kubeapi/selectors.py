"""``labelSelector`` / ``fieldSelector`` query parameters, parsed like ``k8s.io/apimachinery/pkg/labels``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from tests.kubeapi.errors import bad_request

Obj = dict[str, Any]
Matcher = Callable[[Obj], bool]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_SET = re.compile(rf"\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)\s*")
_EXISTS = re.compile(rf"\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*")
_BINARY = re.compile(rf"\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=|>|<)\s*(?P<value>{_VALUE})\s*")


def _split(selector: str) -> list[str]:
    """Split on commas that are not inside ``in (...)`` value lists."""
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def _requirement(text: str) -> Matcher:
    if m := _SET.fullmatch(text):
        key, values = m["key"], {v.strip() for v in m["values"].split(",") if v.strip()}
        if m["op"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _BINARY.fullmatch(text):
        key, op, value = m["key"], m["op"], m["value"]
        if op in ("=", "=="):
            return lambda labels: labels.get(key) == value
        if op == "!=":
            return lambda labels: labels.get(key) != value
        if not value.lstrip("-").isdigit():
            raise bad_request(
                f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: {value}"
            )
        bound = int(value)

        def compare(labels: dict[str, str]) -> bool:
            current = labels.get(key, "")
            if not current.lstrip("-").isdigit():
                return False
            return int(current) > bound if op == ">" else int(current) < bound

        return compare
    if m := _EXISTS.fullmatch(text):
        key = m["key"]
        if m["neg"]:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise bad_request(f"unable to parse requirement: {text.strip()!r} is not a valid label selector requirement")


def label_selector(selector: str | None) -> Matcher:
    """A predicate over objects for a ``labelSelector`` string (empty/None matches everything)."""
    requirements = [_requirement(part) for part in _split(selector or "")]

    def matches(obj: Obj) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(req(labels) for req in requirements)

    return matches


def lookup(obj: Obj, path: str) -> str:
    """Value of a dotted field path as the string a field selector compares against ("" if missing)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def field_selector(selector: str | None, supported: Iterable[str]) -> Matcher:
    """A predicate for a ``fieldSelector`` string; ``supported`` lists the kind's extra field paths."""
    allowed = {"metadata.name", "metadata.namespace", *supported}
    terms: list[tuple[str, bool, str]] = []
    for part in _split(selector or ""):
        m = re.fullmatch(r"\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*", part)
        if not m:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{part}'")
        if m[1] not in allowed:
            raise bad_request(f"field label not supported: {m[1]}")
        terms.append((m[1], m[2] != "!=", m[3]))

    def matches(obj: Obj) -> bool:
        return all((lookup(obj, path) == value) == equal for path, equal, value in terms)

    return matches
