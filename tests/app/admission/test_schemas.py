"""The compiled checks never accept what marshmallow rejects, and they do accept the Pods clusters send."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.admission import schemas
from testbed.pods import container, pod
from testbed.reviews import admission_review

ODD = st.sampled_from([None, True, False, 0, 1, -1, 1.5, "", "1", "lots", "500m", "16Gi", "CREATE", [], {}, [None]])
JSON = st.recursive(
    ODD, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
)


def mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually ``valid``, sometimes an odd value: enough valid data that the accepting path is exercised."""
    return st.one_of(valid, valid, valid, ODD)


STR = mostly(st.text(max_size=3) | st.none())


def shaped(keys: dict[str, Any], required: tuple[str, ...] = ()) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts with ``required`` and any subset of the other ``keys`` (mostly their own shape), and now and then
    an unknown key."""
    always = {k: mostly(v) for k, v in keys.items() if k in required}
    optional = {k: mostly(v) for k, v in keys.items() if k not in required}
    return st.fixed_dictionaries(always, optional=optional | {"extra": JSON})


QUANTITY = st.sampled_from(["1", "500m", "16Gi", 2, 0.5]) | ODD
RESOURCE_LIST = st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu"]), QUANTITY, max_size=2)
CONTAINER = st.fixed_dictionaries(
    {"name": st.text(max_size=3)},
    optional={
        "resources": shaped({"limits": RESOURCE_LIST, "requests": RESOURCE_LIST}),
        "env": st.lists(st.fixed_dictionaries({"name": st.text(max_size=2)}, optional={"value": STR}), max_size=2),
        "securityContext": shaped({"privileged": st.booleans()}),
    },
)
POD = shaped(
    {
        "metadata": shaped({"name": STR, "namespace": STR, "annotations": st.dictionaries(st.text(max_size=2), STR)}),
        "spec": shaped(
            {"containers": st.lists(CONTAINER, min_size=1, max_size=2), "schedulerName": STR, "nodeName": STR},
            required=("containers",),
        ),
    },
    required=("spec",),
)
REVIEW = shaped(
    {
        "apiVersion": st.sampled_from(schemas.API_VERSIONS),
        "kind": st.just("AdmissionReview"),
        "request": shaped(
            {
                "uid": STR,
                "kind": shaped({"group": STR, "kind": st.just("Pod")}),
                "operation": st.sampled_from(schemas.OPERATIONS),
                "object": JSON,
                "dryRun": st.booleans(),
            },
            required=("uid", "kind", "operation"),
        ),
    },
    required=("apiVersion", "kind", "request"),
)


@settings(max_examples=400)
@given(POD)
def test_a_pod_the_compiled_check_accepts_is_one_marshmallow_accepts(data: dict[str, Any]) -> None:
    if schemas.accepts(schemas.POD)(data):
        assert schemas.POD.validate(data) == {}


@settings(max_examples=400)
@given(REVIEW)
def test_a_review_the_compiled_check_accepts_is_one_marshmallow_accepts(data: dict[str, Any]) -> None:
    if schemas.accepts(schemas.REVIEW)(data):
        assert schemas.REVIEW.validate(data) == {}


def test_valid_reviews_take_the_compiled_path_and_invalid_ones_get_marshmallows_message() -> None:
    good = pod(container(limits={"nvidia.com/gpu": "1"}, env=[{"name": "A", "value": "b"}], privileged=False))
    assert schemas.accepts(schemas.POD)(good)
    assert schemas.accepts(schemas.REVIEW)(admission_review(good))

    bad = pod(container(limits={"nvidia.com/gpu": "lots"}, defaulted=False))
    assert not schemas.accepts(schemas.POD)(bad)
    assert schemas.problems(schemas.POD, bad, "request.object") == (
        "request.object.spec.containers[0].resources.limits[\"nvidia.com/gpu\"]: not a valid quantity: 'lots'"
    )
