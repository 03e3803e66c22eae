"""Where a manifest's Pods come from: Pods, the Pod templates of workloads, and the items of Lists.

kubectl prints several objects as a ``List`` (the API as a ``<Kind>List``, whose items may omit their kind);
each workload kind creates its Pods from a PodTemplateSpec at a fixed place. Pure: documents in, places out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from app.admission.templates import TEMPLATES, Path, dig
from app.admission.templates import template_pod as pod_from_template
from app.untrusted import shown

__all__ = ["TEMPLATES", "Found", "dig", "objects", "template_pod"]


@dataclass(frozen=True)
class Found:
    """One object of a document: where it sits, and where the Pod it creates is described."""

    at: Path
    """Its path inside the document: () at the top, ("items", 3) in a List."""
    kind: str
    obj: Any
    template: Path | None
    """() for a Pod, the template's path for a workload, None for anything that creates no Pod."""

    def label(self, namespace: str) -> str:
        """How messages name it: ``namespace/name`` for a Pod, ``Kind/namespace/name`` otherwise, after its place
        in a List (``items[3] ...``); only the place for something that is not an object."""
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in self.at).lstrip(".")
        if not isinstance(self.obj, Mapping):
            return where
        meta = self.obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        if meta.get("name"):
            name = shown(meta["name"], quoted=False)
        elif meta.get("generateName"):
            name = shown(meta["generateName"], quoted=False) + "*"
        else:
            name = "(unnamed)"
        if self.kind in TEMPLATES or self.kind == "Pod" or meta.get("namespace"):
            name = f"{shown(meta.get('namespace') or namespace, quoted=False)}/{name}"
        if self.kind != "Pod":
            name = f"{shown(self.kind or 'an object without a kind', quoted=False)}/{name}"
        return f"{where} {name}" if where else name


def objects(document: Any, at: Path = (), kind: str = "") -> Iterator[Found]:
    """Every object in ``document``, List items in order (Lists within Lists too)."""
    if not isinstance(document, Mapping):
        yield Found(at, "", document, None)
        return
    kind = document.get("kind") or kind
    kind = kind if isinstance(kind, str) else ""
    items = document.get("items")
    if kind.endswith("List") and isinstance(items, list):
        item_kind = kind.removesuffix("List") if kind != "List" else ""
        for index, item in enumerate(items):
            yield from objects(item, (*at, "items", index), item_kind)
        return
    yield Found(at, kind, document, () if kind == "Pod" else TEMPLATES.get(kind))


def template_pod(found: Found, namespace: str) -> dict[str, Any]:
    """The Pod a workload's controller would create from its template (app/admission/templates.py)."""
    return pod_from_template(found.obj, found.template or (), namespace)
