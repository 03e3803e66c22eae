"""A webhook's ``matchConditions`` evaluated the way kube-apiserver does, with cel-python.

kube-apiserver gives each expression the variables ``object``, ``oldObject`` (null on CREATE) and
``request`` (the AdmissionRequest's attributes without the objects), then decides:

- any condition false            -> the webhook is skipped (NO_MATCH), even if another one errored;
- otherwise any condition errors -> ERROR: the call fails, and ``failurePolicy`` decides (Fail rejects,
  Ignore skips the webhook);
- all conditions true            -> the webhook is called (MATCH).

A result that is not a boolean is an error, as in kube-apiserver. Expressions that do not compile are
rejected when the configuration is written, so here they raise ``ValueError`` naming the condition.
The fake API server's webhook calling and the manifest tests both use this one implementation.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes

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


class Outcome(enum.Enum):
    MATCH = "match"
    NO_MATCH = "no-match"
    ERROR = "error"


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    # "<condition name>: <message>" for every condition that errored (also reported with NO_MATCH).
    errors: tuple[str, ...] = ()


_ENV = celpy.Environment()


@lru_cache(maxsize=256)
def _program(expression: str) -> celpy.Runner:
    """Compiling is the slow part of cel-python (a lark parse); a configuration is evaluated many times."""
    return _ENV.program(_ENV.compile(expression))


def compile_conditions(conditions: Sequence[Mapping[str, Any]]) -> list[tuple[str, celpy.Runner]]:
    """(name, program) per condition; ValueError naming the condition that does not compile."""
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
    attributes = {key: request[key] for key in REQUEST_FIELDS if key in request}
    return {
        "object": celpy.json_to_cel(request.get("object")),
        "oldObject": celpy.json_to_cel(request.get("oldObject")),
        "request": celpy.json_to_cel(attributes),
    }


def evaluate(conditions: Sequence[Mapping[str, Any]] | None, request: Mapping[str, Any]) -> Result:
    """Whether a webhook with these ``matchConditions`` is called for ``request``; no conditions always match."""
    variables = activation(request)
    errors: list[str] = []
    matched = True
    for name, program in compile_conditions(conditions or ()):
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
            matched = False
    if not matched:
        return Result(Outcome.NO_MATCH, tuple(errors))
    return Result(Outcome.ERROR, tuple(errors)) if errors else Result(Outcome.MATCH)
