"""Gangs: Pods that only run together, and the room a gang's first member holds for all of them. Pure.

A Pod names its group in one of four ways the ecosystem writes (docs/quota.md, "Gangs"); ``group`` reads which
from the Pod alone, as a key ``<API group>/<name>``. The gang's size comes from the group object (read through the
``Groups`` port, app/quota/ports.py), or for Kueue's plain-Pod groups from the Pod's own annotation
(``kueue_size``). Each key names its group within the Pod's namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

UPSTREAM = "scheduling.k8s.io"  # spec.schedulingGroup.podGroupName -> PodGroup .spec.schedulingPolicy.gang.minCount
COSCHEDULING = "scheduling.x-k8s.io"  # label scheduling.x-k8s.io/pod-group -> PodGroup .spec.minMember
VOLCANO = "scheduling.volcano.sh"  # annotation scheduling.k8s.io/group-name -> PodGroup .spec.minMember
KUEUE = "kueue.x-k8s.io"  # label kueue.x-k8s.io/pod-group-name, annotation kueue.x-k8s.io/pod-group-total-count
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
KUEUE_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_DIGITS = (
    6  # a Kueue total count is at most this many ASCII digits (999,999 Pods): what any figure made of it fits
)


@dataclass(frozen=True, slots=True)
class Gang:
    """A Pod's group (``key``: ``<API group>/<name>``) and how many of its Pods only run together."""

    key: str
    size: int


def group(pod: Mapping[str, Any]) -> str:
    """The key of the group ``pod`` names ("" none), the upstream field first, then coscheduling, Volcano, Kueue."""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    upstream = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    if upstream:
        return f"{UPSTREAM}/{upstream}"
    if labels.get(COSCHEDULING_LABEL):
        return f"{COSCHEDULING}/{labels[COSCHEDULING_LABEL]}"
    volcano = next((annotations[a] for a in VOLCANO_ANNOTATIONS if annotations.get(a)), "")
    if volcano:
        return f"{VOLCANO}/{volcano}"
    return f"{KUEUE}/{labels[KUEUE_LABEL]}" if labels.get(KUEUE_LABEL) else ""


class GroupRefused(ValueError):
    """A Pod whose group size is its author's word and cannot be read: the Pod is refused with this one line."""


def kueue_size(namespace: str, pod: Mapping[str, Any]) -> int:
    """The size a Kueue plain-Pod group's member declares on itself (0: none). Raises GroupRefused unless it is
    ASCII digits, KUEUE_DIGITS at most: ``str.isdigit`` also takes "²", which ``int`` refuses, and a count of
    thousands of digits makes figures Python will not print; the author's word must not fail a review."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(KUEUE_TOTAL) or ""
    if not text:
        return 0
    if not (text.isascii() and text.isdigit() and len(text) <= KUEUE_DIGITS):
        shown = text if len(text) <= 12 else f"{text[:12]}..."
        raise GroupRefused(
            f"exceeding resource quota: namespace {namespace} {KUEUE_TOTAL}: gang {group(pod)}: {shown!r} is not a "
            f"count of at most {KUEUE_DIGITS} ASCII digits"
        )
    return int(text)


def object_size(api: str, obj: Mapping[str, Any]) -> int:
    """The gang size a group object declares: ``minCount`` of a gang policy, ``minMember``; 0 for none (a basic
    policy, or no size): its Pods are charged alone."""
    spec = obj.get("spec") or {}
    if api == UPSTREAM:
        size = ((spec.get("schedulingPolicy") or {}).get("gang") or {}).get("minCount")
    else:
        size = spec.get("minMember")
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else 0
