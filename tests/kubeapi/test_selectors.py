"""Label and field selector parsing (the query parameters of list and watch)."""

from __future__ import annotations

import pytest

from tests.kubeapi.errors import ApiError
from tests.kubeapi.selectors import field_selector, label_selector

OBJ = {"metadata": {"name": "a", "namespace": "ns", "labels": {"app": "web", "tier": "front", "weight": "5"}}}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app==web,tier=front", True),
        ("app!=web", False),
        ("missing!=x", True),
        ("app in (db, web)", True),
        ("app notin (web),tier", False),
        ("missing notin (x)", True),
        ("tier", True),
        ("!tier", False),
        ("weight>4,weight<6", True),
        ("weight>5", False),
    ],
)
def test_label_selector(selector: str, matches: bool) -> None:
    assert label_selector(selector)(OBJ) is matches


@pytest.mark.parametrize("selector", ["app=(", "a b", "weight>x"])
def test_invalid_label_selector_is_400(selector: str) -> None:
    with pytest.raises(ApiError) as bad:
        label_selector(selector)
    assert bad.value.code == 400


def test_field_selector() -> None:
    assert field_selector("metadata.name=a,metadata.namespace!=other", ())(OBJ)
    assert not field_selector("metadata.name==b", ())(OBJ)
    assert field_selector("spec.nodeName=", ("spec.nodeName",))(OBJ)  # missing fields compare as ""
    with pytest.raises(ApiError, match=r"field label not supported: spec\.nodeName"):
        field_selector("spec.nodeName=n1", ())
