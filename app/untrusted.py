"""Reading and echoing untrusted documents at a cost proportional to their size.

JSON goes through orjson: linear, about twice as fast as the standard library on a
review, and it refuses nesting deeper than 1024 with an error instead of a RecursionError.
YAML (the CLI's Pod files) is checked as an event stream first, which stops early: size,
number of documents, nesting depth and the number of nodes once aliases are expanded are
all bounded before anything is built. Values are echoed in messages only through
``shown``, which never expands a structure and bounds a string.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson
import yaml

MAX_YAML_BYTES = 7 * 1024 * 1024
MAX_YAML_DOCUMENTS = 1000
MAX_YAML_DEPTH = 100
MAX_YAML_NODES = 1_000_000
"""Nodes in a file with every alias expanded: a billion-laughs file stops here, unbuilt."""
SHOWN_CHARS = 60

_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TAG = "tag:yaml.org,2002:"


class UntrustedError(ValueError):
    """The document cannot be read; the message is one bounded line."""


def shown(value: object, *, quoted: bool = True) -> str:
    """A short one-line rendering of an untrusted value for a message: strings cut, structures named, not expanded.

    ``quoted=False`` writes a short printable string as it is (for values already known to be quantities).
    """
    if isinstance(value, str):
        if len(value) <= SHOWN_CHARS:
            return value if not quoted and value.isprintable() else repr(value)
        return f"{value[:SHOWN_CHARS]!r}... ({len(value)} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    return f"a {type(value).__name__}"


def json_document(body: bytes) -> Any:
    """Parse a JSON body; UntrustedError when it is not JSON (including nesting deeper than 1024)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise UntrustedError(f"not JSON: {exc}") from None


def yaml_documents(data: bytes) -> list[Any]:
    """Every document in a YAML (or JSON) file, with JSON's types only; UntrustedError when unreadable or too big."""
    if len(data) > MAX_YAML_BYTES:
        raise UntrustedError(f"larger than {MAX_YAML_BYTES} bytes")
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise UntrustedError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        aliased = _check_shape(text)
        documents = list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        raise UntrustedError(_one_line(str(exc))) from None
    return [_unshared(d) for d in documents] if aliased else documents


def _unshared(value: Any) -> Any:
    """``value`` with every node its own, as kubectl's YAML-to-JSON conversion makes it: the loader gives an
    alias the anchor's very object, and an edit of one place (an annotation added to a map that the labels
    alias too) would show in the other. Bounded by the node count checked before loading."""
    if isinstance(value, dict):
        return {key: _unshared(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unshared(item) for item in value]
    return value


def _one_line(message: str, limit: int = 300) -> str:
    line = " ".join(message.split())
    return line if len(line) <= limit else line[:limit] + "..."


def _check_shape(text: str) -> bool:
    """Walk the event stream once, stopping at the first bound crossed, before any node is built; whether the
    text holds an alias."""
    documents = depth = expanded = 0
    aliased = False
    opened: list[tuple[str | None, int]] = []
    sizes: dict[str, int] = {}
    for event in yaml.parse(text, Loader=_Base):
        grown = 0
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > MAX_YAML_DOCUMENTS:
                raise UntrustedError(f"more than {MAX_YAML_DOCUMENTS} documents")
        elif isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise UntrustedError(f"nested deeper than {MAX_YAML_DEPTH} levels")
            opened.append((event.anchor, expanded))
            grown = 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            anchor, start = opened.pop()
            if anchor:
                sizes[anchor] = expanded - start
        elif isinstance(event, yaml.ScalarEvent):
            grown = 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            grown = sizes.get(event.anchor or "", 1)
            aliased = True
        expanded += grown
        if expanded > MAX_YAML_NODES:
            raise UntrustedError(f"more than {MAX_YAML_NODES} nodes once aliases are expanded")
    return aliased


class _Loader(_Base):  # type: ignore[valid-type,misc]
    """Safe loading restricted to what JSON (and so a Kubernetes object) can hold.

    Timestamps stay strings, as in Kubernetes' own YAML reading; binary, set and ordered-map
    tags are refused; an integer longer than 100 characters is refused before int() sees it.
    """

    yaml_implicit_resolvers: ClassVar[dict[Any, list[tuple[str, Any]]]] = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TAG + "timestamp"]
        for first, resolvers in _Base.yaml_implicit_resolvers.items()
    }


def _bounded_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    if len(node.value) > 100:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {len(node.value)} characters is too long", node.start_mark
        )
    return int(yaml.SafeLoader.construct_yaml_int(loader, node))


def _refused(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(None, None, f"{node.tag} is not a JSON type", node.start_mark)


_Loader.add_constructor(_TAG + "int", _bounded_int)
_Loader.add_constructor(_TAG + "timestamp", yaml.SafeLoader.construct_yaml_str)
for _tag in ("binary", "set", "omap", "pairs"):
    _Loader.add_constructor(_TAG + _tag, _refused)
