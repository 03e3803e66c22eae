"""Which documented deviation explains a difference between HAMi's answer and ours.

Each deviation of docs/rules.md#parity-with-hamis-code is one function here that rewrites exactly the aspect it
names, on one side or both; they are tried in order, and when the forms are equal after some of them, those are
the difference's classes. What no deviation explains is undocumented: the suite fails on it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import cache
from typing import Any

from app.settings import Settings
from tests.parity.forms import (
    Context,
    Facts,
    Form,
    containers,
    difference,
    edited,
    form,
    pruned,
    value_of,
)
from tests.parity.harness import Answer

CORE_POLICY = "GPU_CORE_UTILIZATION_POLICY"
CORE_POLICY_ANNOTATION = "hami.io/core-policy"
OUR_ANNOTATIONS = ("hami.io/gpu-type",)

Deviation = Callable[[Form, Form, Context, Answer, Answer], "tuple[Form, Form] | None"]
DEVIATIONS: dict[str, Deviation] = {}


def deviation(name: str) -> Callable[[Deviation], Deviation]:
    def register(function: Deviation) -> Deviation:
        DEVIATIONS[name] = function
        return function

    return register


@dataclass(frozen=True)
class Outcome:
    classes: tuple[str, ...]
    """The deviations that explain the difference; () for identical answers."""
    explained: bool
    remaining: str = ""
    """What still differs after the deviations tried (HAMi's form patched into ours), when not explained."""

    @property
    def identical(self) -> bool:
        return self.explained and not self.classes


def compare(hami: Answer, ours: Answer, ctx: Context, documented: Mapping[str, Any] | None = None) -> Outcome:
    """Identical, explained by documented deviations (which), or not explained."""
    theirs, mine = form(hami, ctx), form(ours, ctx)
    if theirs == mine:
        return Outcome((), True)
    used: list[str] = []
    for name, apply in DEVIATIONS.items():
        if documented is not None and name not in documented:
            continue
        rewritten = apply(theirs, mine, ctx, hami, ours)
        if rewritten is None or rewritten == (theirs, mine):
            continue
        theirs, mine = rewritten
        used.append(name)
        if theirs == mine:
            return Outcome(tuple(used), True)
    return Outcome(tuple(used), False, difference(theirs, mine))


# The deviations, in the order they are tried. Each names its rule in docs/rules.md's parity table.

FORGED = re.compile(r"^annotation (\S+) is written by HAMi's [a-z ]+, not by a Pod's author$")


@deviation("allocation-annotations-denied")
def _forged(theirs: Form, mine: Form, ctx: Context, hami: Answer, ours: Answer) -> tuple[Form, Form] | None:
    """HAMi v2.10 admits a Pod carrying an annotation its scheduler or device plugins write (its next release
    denies it); this webhook denies it, naming the annotation."""
    match = FORGED.match(ours.message)
    sent = ((ctx.pod.get("metadata") or {}).get("annotations")) or {}
    if ours.allowed is not False or ours.code != 403 or not match or match.group(1) not in sent:
        return None
    return (Form(False, None), mine) if match.group(1) in _owned() else None


@cache
def _owned() -> frozenset[str]:
    """The annotations HAMi's scheduler and device plugins write, every vendor's, for the chart's chips."""
    return frozenset(Settings.from_env({}).owned_annotations.owned)


NOT_AN_INTEGER = re.compile(r"^(\S+) must be an integer")


@deviation("amounts-read-by-value")
def _by_value(theirs: Form, mine: Form, ctx: Context, hami: Answer, ours: Answer) -> tuple[Form, Form] | None:
    """HAMi refuses a whole number spelt `2.0`, `1000m` or `01` for some resources; this webhook reads its value.

    Shown by asking HAMi again with the Pod's whole amounts written plainly, as kube-apiserver re-encodes them:
    that answer must be ours.
    """
    match = NOT_AN_INTEGER.match(hami.message)
    if hami.allowed is not False or ours.allowed is not True or not match or ctx.ask_hami is None:
        return None
    pod = copy.deepcopy(ctx.pod)
    rewritten = False
    for ctr, _ in containers(pod, None):
        for side in ((ctr.get("resources") or {}).get(key) for key in ("limits", "requests")):
            for name, amount in (side or {}).items():
                value = value_of(amount)
                if isinstance(value, Decimal) and value == value.to_integral_value() and amount != str(int(value)):
                    side[name] = str(int(value))
                    rewritten = True
    if not rewritten:
        return None
    again = ctx.ask_hami(pod)
    return form(again, replace(ctx, pod=pod)), mine


@deviation("ascend-env-spares-npu-containers")
def _ascend_env(theirs: Form, mine: Form, ctx: Context, hami: Answer, ours: Answer) -> tuple[Form, Form] | None:
    """HAMi hides every other chip's NPUs from a container that asks for an Ascend chip too."""

    def drop(ctr: dict, original: dict | None) -> None:
        if ctx.facts.ascend_counts.isdisjoint(((original or {}).get("resources") or {}).get("limits") or {}):
            return
        kept = len((original or {}).get("env") or [])
        env = ctr.get("env") or []
        tail = [entry for entry in env[kept:] if entry != {"name": "ASCEND_VISIBLE_DEVICES"}]
        ctr["env"] = env[:kept] + tail

    return edited(theirs, ctx, drop), mine


@deviation("core-policy-per-pod")
def _core_policy(theirs: Form, mine: Form, ctx: Context, hami: Answer, ours: Answer) -> tuple[Form, Form] | None:
    """HAMi writes the configured core policy into every container; this webhook only into those that use an
    NVIDIA GPU, and takes the Pod's `hami.io/core-policy` over the configured one."""
    annotated = CORE_POLICY_ANNOTATION in (((ctx.pod.get("metadata") or {}).get("annotations")) or {})

    def drop(ctr: dict, original: dict | None) -> None:
        if _uses_nvidia(ctr, original, ctx.facts) and not annotated:
            return
        sent = (original or {}).get("env") or []
        env = ctr.get("env") or []
        # The author's own entry, which the Pod's policy overwrote in place, reads as the author wrote it.
        authored = [sent[i] if entry.get("name") == CORE_POLICY else entry for i, entry in enumerate(env[: len(sent)])]
        ctr["env"] = authored + [entry for entry in env[len(sent) :] if entry.get("name") != CORE_POLICY]

    return edited(theirs, ctx, drop), (edited(mine, ctx, drop) if annotated else mine)


def _uses_nvidia(ctr: dict, original: dict | None, facts: Facts) -> bool:
    """As HAMi decides it, read off HAMi's Pod: the count in limits, or a count anywhere that got all cores."""
    limits = (ctr.get("resources") or {}).get("limits") or {}
    if facts.nvidia_count in limits:
        return True
    sent = (original or {}).get("resources") or {}
    asked = {**(sent.get("requests") or {}), **(sent.get("limits") or {})}
    return facts.nvidia_count in asked and facts.nvidia_cores in limits and facts.nvidia_cores not in asked


@deviation("env-set-not-appended")
def _env_set(theirs: Form, mine: Form, ctx: Context, hami: Answer, ours: Answer) -> tuple[Form, Form] | None:
    """HAMi appends a second entry for a name the container has; this webhook sets the one there."""

    def collapse(ctr: dict, original: dict | None) -> None:
        env = ctr.get("env") or []
        last = {entry.get("name"): entry for entry in env}
        seen: set[Any] = set()
        collapsed = []
        for entry in env:
            if entry.get("name") not in seen:
                seen.add(entry.get("name"))
                collapsed.append(last[entry.get("name")])
        if env:
            ctr["env"] = collapsed

    return edited(theirs, ctx, collapse), mine


AMOUNT_DENIAL = re.compile(r"^container (\S+): (\S+) must (not be negative|be a whole number|be at most (\d+))\b")
OUT_OF_RANGE = re.compile(r'\["([^"]+)"\]: out of range')
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def _amounts(ctr: dict, name: str) -> list[Any]:
    """The container's limit and request of `name`, by value where they are quantities."""
    resources = ctr.get("resources") or {}
    return [value_of((resources.get(side) or {}).get(name)) for side in ("limits", "requests")]


@deviation("invalid-amounts-denied")
def _invalid_amounts(theirs: Form, mine: Form, ctx: Context, hami: Answer, ours: Answer) -> tuple[Form, Form] | None:
    """HAMi lets a negative amount, a fractional count or one past 32 bits through; this webhook answers 400."""
    if ours.allowed is not False or ours.code != 400:
        return None
    beyond = OUT_OF_RANGE.search(ours.message)
    if beyond:
        for ctr, _ in containers(ctx.pod, None):
            for amount in _amounts(ctr, beyond.group(1)):
                if isinstance(amount, Decimal) and abs(amount) > INT64_MAX:
                    return Form(False, None), mine
        return None
    match = AMOUNT_DENIAL.match(ours.message)
    if not match:
        return None
    container, name, rule = match.group(1), match.group(2), match.group(3)
    for ctr, _ in containers(ctx.pod, None):
        if ctr.get("name") != container:
            continue
        for value in _amounts(ctr, name):
            if not isinstance(value, Decimal):
                continue
            if (
                (rule.startswith("not") and value < 0)
                or (rule.startswith("be a whole") and value != value.to_integral_value())
                or (rule.startswith("be at most") and value > INT32_MAX)
            ):
                return Form(False, None), mine
    return None


@deviation("requests-mirror-limits")
def _mirror(theirs: Form, mine: Form, ctx: Context, hami: Answer, ours: Answer) -> tuple[Form, Form] | None:
    """This webhook sets a device request to its limit; HAMi leaves requests as they are."""

    def mirror(ctr: dict, original: dict | None) -> None:
        resources = ctr.get("resources") or {}
        limits = resources.get("limits") or {}
        for name in ctx.facts.device_names.intersection(limits):
            resources.setdefault("requests", {})[name] = limits[name]

    return edited(theirs, ctx, mirror), edited(mine, ctx, mirror)


@deviation("device-pods-annotated")
def _annotated(theirs: Form, mine: Form, ctx: Context, hami: Answer, ours: Answer) -> tuple[Form, Form] | None:
    """This webhook writes `hami.io/gpu-type` on a device Pod whose author did not; HAMi leaves it to its scheduler."""
    sent = ((ctx.pod.get("metadata") or {}).get("annotations")) or {}
    if mine.pod is None or any(key in sent for key in OUR_ANNOTATIONS):
        return None
    pod = copy.deepcopy(mine.pod)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    for key in OUR_ANNOTATIONS:
        annotations.pop(key, None)
    return theirs, replace(mine, pod=pruned(pod))


@deviation("fixed-vendor-order")
def _vendor_order(theirs: Form, mine: Form, ctx: Context, hami: Answer, ours: Answer) -> tuple[Form, Form] | None:
    """Two vendors that set a runtime class: HAMi keeps whichever its Go map yields first, this webhook the first
    in its fixed order."""
    if theirs.pod is None or mine.pod is None or (ctx.pod.get("spec") or {}).get("runtimeClassName"):
        return None
    chosen = {form_.pod.get("spec", {}).get("runtimeClassName") for form_ in (theirs, mine)}
    if len(chosen) != 2 or not chosen <= ctx.facts.runtime_classes:
        return None
    pod = copy.deepcopy(theirs.pod)
    pod["spec"]["runtimeClassName"] = mine.pod["spec"]["runtimeClassName"]
    return replace(theirs, pod=pod), mine
