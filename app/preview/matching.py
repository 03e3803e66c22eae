"""Whether kube-apiserver calls a webhook for a request: label selectors and ``matchConditions``, as it decides.

For ``matchConditions`` kube-apiserver gives each CEL expression the variables ``object``, ``oldObject`` (null
on CREATE) and ``request`` (the AdmissionRequest's attributes without the objects), then decides:

- any condition false            -> the webhook is skipped (NO_MATCH), even if another one errored;
- otherwise any condition errors -> ERROR: the call fails, and ``failurePolicy`` decides (Fail rejects,
  Ignore skips the webhook);
- all conditions true            -> the webhook is called (MATCH).

A result that is not a boolean is an error, as in kube-apiserver. Expressions that do not compile are
rejected when the configuration is written, so here they raise ``ValueError`` naming the condition.
CEL is cel-python (``celpy``), imported on first use: the server never evaluates CEL and does not load it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import celpy

# The AdmissionRequest fields kube-apiserver puts in the ``request`` variable (object/oldObject are separate).
REQUEST_FIELDS = (
    "uid",
    "kind",
    "resource",
    "subResource",
    "requestKind",
    "requestResource",
    "requestSubResource",
    "name",
    "namespace",
    "operation",
    "userInfo",
    "dryRun",
    "options",
)


def matches_label_selector(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy a structured ``metav1.LabelSelector`` (``matchLabels`` + ``matchExpressions``);
    ``{}`` matches everything. ValueError for an operator the real server would not accept."""
    return failed_requirement(selector, labels) is None


def failed_requirement(selector: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
    """The first requirement of ``selector`` that ``labels`` fail, written as kubectl writes selectors, or None."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return f"{key}={value}"
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key", ""), expression.get("operator"), expression.get("values") or []
        if operator == "In":
            ok = key in labels and labels[key] in values
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif operator == "Exists":
            ok = key in labels
        elif operator == "DoesNotExist":
            ok = key not in labels
        else:
            raise ValueError(f"{operator!r} is not a valid label selector operator")
        if not ok:
            listed = f" ({', '.join(values)})" if operator in ("In", "NotIn") else ""
            return f"{key} {operator}{listed}"
    return None


class Outcome(enum.Enum):
    MATCH = "match"
    NO_MATCH = "no-match"
    ERROR = "error"


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    # "<condition name>: <message>" for every condition that errored (also reported with NO_MATCH).
    errors: tuple[str, ...] = ()
    # The names of the conditions that were false.
    false: tuple[str, ...] = ()


@cache
def _environment() -> celpy.Environment:
    import celpy

    return celpy.Environment()


@lru_cache(maxsize=256)
def _program(expression: str) -> celpy.Runner:
    """Compiling is the slow part of cel-python (a lark parse); a configuration is evaluated many times."""
    env = _environment()
    return env.program(env.compile(expression))


def compile_conditions(conditions: Sequence[Mapping[str, Any]]) -> list[tuple[str, celpy.Runner]]:
    """(name, program) per condition; ValueError naming the condition that does not compile."""
    import celpy

    compiled = []
    for index, condition in enumerate(conditions):
        name = str(condition.get("name", f"matchConditions[{index}]"))
        try:
            compiled.append((name, _program(str(condition["expression"]))))
        except (KeyError, celpy.CELParseError) as exc:
            raise ValueError(f"matchConditions[{index}] ({name}): cannot compile: {exc}") from None
    return compiled


def activation(request: Mapping[str, Any]) -> dict[str, Any]:
    """The CEL variables for one AdmissionReview ``request`` (the dict with ``object``/``oldObject``)."""
    import celpy

    attributes = {key: request[key] for key in REQUEST_FIELDS if key in request}
    return {
        "object": celpy.json_to_cel(request.get("object")),
        "oldObject": celpy.json_to_cel(request.get("oldObject")),
        "request": celpy.json_to_cel(attributes),
    }


def evaluate(conditions: Sequence[Mapping[str, Any]] | None, request: Mapping[str, Any]) -> Result:
    """Whether a webhook with these ``matchConditions`` is called for ``request``; no conditions always match."""
    if not conditions:
        return Result(Outcome.MATCH)
    import celpy
    from celpy import celtypes

    compiled = compile_conditions(conditions)
    variables = activation(request)
    errors: list[str] = []
    false: list[str] = []
    for name, program in compiled:
        value: object
        try:
            value = program.evaluate(variables)
        except celpy.CELEvalError as exc:
            value = exc
        if isinstance(value, celpy.CELEvalError):
            errors.append(f"{name}: {value.args[0] if value.args else value}")
        elif not isinstance(value, celtypes.BoolType):
            errors.append(f"{name}: expression must evaluate to bool, got {type(value).__name__}")
        elif not value:
            false.append(name)
    if false:
        return Result(Outcome.NO_MATCH, tuple(errors), tuple(false))
    return Result(Outcome.ERROR, tuple(errors)) if errors else Result(Outcome.MATCH)
