"""kube-apiserver's matchConditions semantics, as app/preview/matching.py reproduces them."""

from __future__ import annotations

from typing import Any

import pytest

from app.preview.matching import Outcome, evaluate


def condition(name: str, expression: str) -> dict[str, str]:
    return {"name": name, "expression": expression}


def request(obj: Any, **fields: Any) -> dict[str, Any]:
    return {"uid": "u1", "operation": "CREATE", "namespace": "default", "object": obj, "oldObject": None, **fields}


POD = {"metadata": {"name": "p", "labels": {"team": "a"}}, "spec": {"containers": [{"name": "c"}]}}
TRUE = condition("yes", "true")
FALSE = condition("no", "false")
ERROR = condition("broken", "object.spec.missing == 1")


@pytest.mark.parametrize(
    ("conditions", "outcome"),
    [
        pytest.param(None, Outcome.MATCH, id="no-conditions"),
        pytest.param([TRUE, TRUE], Outcome.MATCH, id="all-true"),
        pytest.param([TRUE, FALSE], Outcome.NO_MATCH, id="one-false"),
        pytest.param([ERROR, FALSE], Outcome.NO_MATCH, id="false-wins-over-error"),
        pytest.param([ERROR, TRUE], Outcome.ERROR, id="error-without-false"),
        pytest.param([condition("int", "1")], Outcome.ERROR, id="not-a-bool"),
    ],
)
def test_outcome_follows_kube_apiserver(conditions: list[dict[str, str]] | None, outcome: Outcome) -> None:
    assert evaluate(conditions, request(POD)).outcome is outcome


def test_errors_name_the_condition() -> None:
    result = evaluate([ERROR], request(POD))
    assert result.errors and result.errors[0].startswith("broken: ")


def test_variables_are_object_old_object_and_request_attributes() -> None:
    conditions = [
        condition("label", "object.metadata.labels.team == 'a'"),
        condition("create", "request.operation == 'CREATE' && request.namespace == 'default'"),
        condition("old", "oldObject == null"),
        condition("objects-not-in-request", "!has(request.object)"),
    ]
    assert evaluate(conditions, request(POD)).outcome is Outcome.MATCH
    assert evaluate(conditions, request(POD, operation="UPDATE")).outcome is Outcome.NO_MATCH


def test_expression_that_does_not_compile_is_rejected_with_its_name() -> None:
    with pytest.raises(ValueError, match=r"matchConditions\[0\] \(bad\): cannot compile"):
        evaluate([condition("bad", "object.(")], request(POD))
