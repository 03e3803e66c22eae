"""Where a manifest's Pods come from: Pods, the Pod templates of workloads, and the items of Lists.

kubectl prints several objects as a ``List`` (the API as a ``<Kind>List``, whose items may omit their kind);
each workload kind creates its Pods from a PodTemplateSpec at a fixed place. Pure: documents in, places out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from app.untrusted import shown

TEMPLATES: Mapping[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    "PodTemplate": ("template",),
}
"""Per kind, the path of the PodTemplateSpec its controller creates Pods from."""

Path = tuple[str | int, ...]


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


def dig(obj: Any, path: Path) -> Any:
    """The value at ``path`` in ``obj``, or None where the path leaves the document."""
    for part in path:
        if isinstance(part, int):
            obj = obj[part] if isinstance(obj, list) and part < len(obj) else None
        else:
            obj = obj.get(part) if isinstance(obj, Mapping) else None
    return obj


def template_pod(found: Found, namespace: str) -> dict[str, Any]:
    """The Pod a workload's controller would create from its template: the template's labels, annotations
    and spec, in the workload's namespace."""
    found_template = dig(found.obj, found.template or ())
    template: Mapping[str, Any] = found_template if isinstance(found_template, Mapping) else {}
    found_meta = template.get("metadata")
    meta: Mapping[str, Any] = found_meta if isinstance(found_meta, Mapping) else {}
    owner = dig(found.obj, ("metadata", "name"))
    metadata: dict[str, Any] = {key: meta[key] for key in ("labels", "annotations") if key in meta}
    metadata["namespace"] = namespace
    if isinstance(owner, str) and owner:
        metadata["generateName"] = f"{owner}-"
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata}
    if "spec" in template:
        pod["spec"] = template["spec"]
    return pod
