"""The group objects gangs are declared by, kept by list + watch like the feed's other tables: PodGroups of
Kubernetes' scheduling API, of coscheduling and of Volcano, cluster-wide (they are few). No I/O here: FeedStreams
(app/quota/feed/life.py) runs the streams ``group_streams`` makes, and the Feed (app/quota/feed/feed.py) applies what
they find under its lock.

An API the server does not serve (no CRD, the feature gate off) or the webhook may not read never lists: its Pods
are charged alone, with a warning saying so; its stream keeps trying at the back-off's pace (a CRD installed later
is picked up), and it never counts against readiness.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from app.quota.core.gang import COSCHEDULING, KUEUE, UPSTREAM, VOLCANO, Gang, group, kueue_size, object_size

# (API group, version): every version read of one API group fills the same table; scheduling.k8s.io's PodGroup
# is v1beta1 from Kubernetes 1.37, v1alpha2 in 1.36.
APIS = ((UPSTREAM, "v1beta1"), (UPSTREAM, "v1alpha2"), (COSCHEDULING, "v1alpha1"), (VOLCANO, "v1beta1"))


class GroupTable:
    """Gang sizes per (namespace, key), and the API groups whose PodGroups have been listed."""

    def __init__(self) -> None:
        self._sizes: dict[tuple[str, str], int] = {}
        self._listed: set[str] = set()

    def replace(self, api: str, items: Iterable[Mapping[str, Any]]) -> None:
        self._sizes = {k: v for k, v in self._sizes.items() if not k[1].startswith(f"{api}/")}
        self._listed.add(api)
        for obj in items:
            self.apply(api, "ADDED", obj)

    def apply(self, api: str, kind: str, obj: Mapping[str, Any]) -> None:
        if kind == "BOOKMARK":
            return
        meta = obj.get("metadata") or {}
        where = (meta.get("namespace") or "", f"{api}/{meta.get('name') or ''}")
        if kind == "DELETED" or meta.get("deletionTimestamp"):  # deleted: a finalizer may keep it while Pods live
            self._sizes.pop(where, None)
        else:
            self._sizes[where] = object_size(api, obj)

    def gang(self, namespace: str, pod: Mapping[str, Any]) -> tuple[Gang | None, str]:
        """The Pod's gang, or None when it is charged alone, with the reason to tell its author ("" none: no group,
        or a group that is no gang). Raises GroupRefused for a Kueue size that cannot be read."""
        key = group(pod)
        if not key:
            return None, ""
        api, _, name = key.partition("/")
        if api == KUEUE:
            size = kueue_size(namespace, pod)
            return (Gang(key, size), "") if size > 1 else (None, "")
        if api not in self._listed:
            return None, f"pod group {name}: the {api} PodGroup API is not served here; the Pod is charged alone"
        known = self._sizes.get((namespace, key))
        if known is None:
            return None, f"pod group {name} ({api}) does not exist yet; the Pod is charged alone"
        return (Gang(key, known), "") if known > 1 else (None, "")

    def gone(self, namespace: str, keys: Iterable[str]) -> frozenset[str]:
        """Of ``keys``, the groups whose object is known not to exist (their API listed, the object not there)."""
        return frozenset(k for k in keys if k.partition("/")[0] in self._listed and (namespace, k) not in self._sizes)


def group_streams(
    api_client: Any, listed: Callable[[str, list[dict[str, Any]]], None], event: Callable[[str, str, Any], None]
) -> list[tuple[str, Callable[..., Any], Callable[..., None], Callable[..., None]]]:
    """For each API version of APIS: its stream's name, list call and callbacks (FeedStreams makes each Stream)."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    out: list[tuple[str, Callable[..., Any], Callable[..., None], Callable[..., None]]] = []
    for api, version in APIS:
        call = functools.partial(custom.list_cluster_custom_object, api, version, "podgroups")
        out.append(
            (
                f"podgroups.{api}/{version}",
                call,
                lambda stream, items, rv, api=api: listed(api, items),
                lambda stream, kind, obj, rv, api=api: event(api, kind, obj),
            )
        )
    return out
