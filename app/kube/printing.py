"""kubectl's output shapes, for the commands that print what they found (``quota``, ``review``): a ``List`` for
``-o json|yaml``, ``KIND[.GROUP]/NAME`` for ``-o name``, columns padded as kubectl pads them, and the line kubectl
says when there is nothing. So ``kubectl hami`` reads, and pipes, as ``kubectl get`` does."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

LIST_FORMATS = ("json", "yaml")


def as_list(items: Iterable[Any]) -> dict[str, Any]:
    """``items`` as kubectl prints several objects: a ``v1`` ``List``."""
    return {"apiVersion": "v1", "kind": "List", "items": list(items), "metadata": {"resourceVersion": ""}}


def dump(document: Any, output: str) -> str:
    """``document`` as JSON (kubectl's 4-space indent) or YAML (plain: a node met twice is written twice)."""
    if output == "json":
        return json.dumps(document, indent=4) + "\n"
    import yaml

    class NoAliases(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return str(yaml.dump(document, Dumper=NoAliases, sort_keys=False))


def object_name(obj: Mapping[str, Any]) -> str:
    """``-o name``'s line for a Kubernetes object: ``pod/x``, ``deployment.apps/y`` (generateName's prefix when it
    has no name yet)."""
    api_version = str(obj.get("apiVersion") or "v1")
    group = api_version.rpartition("/")[0]
    kind = str(obj.get("kind") or "").lower()
    metadata = obj.get("metadata") or {}
    name = metadata.get("name") or metadata.get("generateName") or ""
    return f"{kind}.{group}/{name}" if group else f"{kind}/{name}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], *, headers: bool = True) -> str:
    """Columns three spaces apart, each as wide as its widest cell; ``headers=False`` is ``--no-headers``."""
    lines = [list(header), *(list(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    shown = lines if headers else lines[1:]
    return "".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in shown)


def nothing_found(namespace: str | None) -> str:
    """kubectl's line, on stderr, when a listing finds nothing (exit 0)."""
    return f"No resources found in {namespace} namespace." if namespace else "No resources found"
