"""How an answer is compared: the comparable form of a webhook's answer to one review.

Both answers become comparable forms: allowed or not, and for an admitted Pod the Pod after its patch, with
quantities read by value, JSON nulls and empty objects dropped (Go's encoding/json writes them for every zero
field when HAMi re-encodes the Pod), and the env vars vendors append ordered by vendor, because HAMi asks its
vendors in Go map order, which changes from call to call. Equal forms are identical answers; what explains a
difference is tests/parity/deviations.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import jsonpatch
import yaml
from kubernetes.utils.quantity import parse_quantity

from tests.parity.harness import Answer

VENDOR_ENV = {
    "CUDA_TASK_PRIORITY": 0,
    "GPU_CORE_UTILIZATION_POLICY": 0,
    "NVIDIA_VISIBLE_DEVICES": 0,
    "SOL_CONTINER_NAME": 3,
    "ASCEND_VISIBLE_DEVICES": 4,
}
"""Env vars HAMi's vendors append, by the vendor's place in this webhook's fixed order (docs/rules.md)."""


@dataclass(frozen=True)
class Facts:
    """What the deviations read of a set-up's device config."""

    nvidia_count: str
    nvidia_cores: str
    ascend_counts: frozenset[str]
    device_names: frozenset[str]
    runtime_classes: frozenset[str]
    """The runtime classes vendors set (NVIDIA's and each Ascend chip's)."""

    @classmethod
    def of(cls, device_config: str, device_names: frozenset[str]) -> Facts:
        config = yaml.safe_load(device_config)
        chips = (config.get("vnpus") or {}).get("configs") or []
        return cls(
            nvidia_count=(config.get("nvidia") or {}).get("resourceCountName", ""),
            nvidia_cores=(config.get("nvidia") or {}).get("resourceCoreName", ""),
            ascend_counts=frozenset(chip["resourceName"] for chip in chips if chip.get("resourceName")),
            device_names=device_names,
            runtime_classes=frozenset(
                name
                for name in [(config.get("nvidia") or {}).get("runtimeClassName")]
                + [chip.get("runtimeClassName") for chip in chips]
                if name
            ),
        )


@dataclass(frozen=True)
class Context:
    """What the deviations may read besides the answers: the Pod sent, and the set-up's facts."""

    pod: Any
    facts: Facts
    ask_hami: Callable[[Any], Answer] | None = None
    """HAMi's answer to another Pod (for a deviation that shows what HAMi does with the Pod rewritten)."""


@dataclass(frozen=True)
class Form:
    """An answer as it is compared."""

    allowed: bool | None
    pod: Any


def form(answer: Answer, ctx: Context) -> Form:
    return Form(answer.allowed, canonical(answer.pod, ctx) if answer.allowed else None)


def canonical(pod: Any, ctx: Context) -> Any:
    pod = pruned(copy.deepcopy(pod))
    for ctr, original in containers(pod, ctx.pod):
        resources = ctr.get("resources") or {}
        for side in ("limits", "requests"):
            if isinstance(resources.get(side), dict):
                resources[side] = {name: value_of(amount) for name, amount in resources[side].items()}
        if isinstance(ctr.get("env"), list):
            kept = len((original or {}).get("env") or [])
            tail = sorted(ctr["env"][kept:], key=lambda entry: VENDOR_ENV.get(entry.get("name"), -1))
            ctr["env"] = ctr["env"][:kept] + tail
    return pod


def value_of(amount: Any) -> Any:
    try:
        return parse_quantity(amount)
    except (ValueError, TypeError):
        return amount


EMPTY: tuple[Any, ...] = (None, {}, [], "")
MAPS = frozenset({"annotations", "labels"})
"""Maps whose empty values are values: every other empty field is one Go's `omitempty` leaves out."""


def pruned(node: Any, keep_empty: bool = False) -> Any:
    """`node` without the empty fields Go's encoder omits."""
    if isinstance(node, dict):
        inner = {key: pruned(value, key in MAPS) for key, value in node.items()}
        return {key: value for key, value in inner.items() if keep_empty or not any(value == e for e in EMPTY)}
    if isinstance(node, list):
        return [pruned(value) for value in node]
    return node


def containers(pod: Any, original: Any) -> Iterator[tuple[dict, dict | None]]:
    """Each container of `pod` beside the same container of `original` (by list and index)."""
    for field in ("initContainers", "containers"):
        sent = ((original or {}).get("spec") or {}).get(field) or []
        for index, ctr in enumerate(((pod or {}).get("spec") or {}).get(field) or []):
            yield ctr, sent[index] if index < len(sent) else None


def edited(form_: Form, ctx: Context, change: Callable[[dict, dict | None], None]) -> Form:
    if form_.pod is None:
        return form_
    pod = copy.deepcopy(form_.pod)
    for ctr, original in containers(pod, ctx.pod):
        change(ctr, original)
    return replace(form_, pod=pruned(pod))


def difference(theirs: Form, mine: Form) -> str:
    if theirs.allowed != mine.allowed:
        return f"allowed: HAMi {theirs.allowed}, ours {mine.allowed}"
    plain = [json.loads(json.dumps(pod, default=str)) for pod in (theirs.pod, mine.pod)]
    ops = jsonpatch.make_patch(*plain).patch
    return json.dumps(ops, default=str)
