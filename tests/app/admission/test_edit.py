"""Pod edits become minimal JSON Patch operations with one escaping rule."""

from __future__ import annotations

import jsonpatch

from app.admission.edit import ContainerEdit, PodEdit, Why, pointer

PLUMBING = Why("a test", filled=None)


def test_pointer_escapes_slash_and_tilde() -> None:
    assert pointer("metadata", "annotations", "a/b~c") == "/metadata/annotations/a~1b~0c"


def test_set_env_replaces_in_place_without_duplicates() -> None:
    obj = {
        "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {}}]}]}
    }
    edit = PodEdit(obj)
    ctr = edit.containers[0]
    ctr.set_env("B", "2", PLUMBING)
    ctr.set_env("C", "3", PLUMBING)
    ctr.set_env("A", "1", PLUMBING)  # unchanged: no operation
    ops = edit.ops()
    assert ops == [
        {"op": "replace", "path": "/spec/containers/0/env/1", "value": {"name": "B", "value": "2"}},
        {"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "C", "value": "3"}},
    ]
    patched = jsonpatch.apply_patch(obj, ops)
    assert [e["name"] for e in patched["spec"]["containers"][0]["env"]] == ["A", "B", "C"]


def test_equal_quantity_is_not_rewritten() -> None:
    ctr = ContainerEdit(("spec", "containers", 0), {"name": "c", "resources": {"limits": {"x.io/cores": 100}}})
    ctr.set_limit("x.io/cores", 100, PLUMBING)
    assert ctr.ops() == []


def test_missing_parents_are_created_whole() -> None:
    obj = {"spec": {"containers": [{"name": "c"}]}}
    edit = PodEdit(obj)
    edit.containers[0].set_limit("x.io/gpu", 1, PLUMBING)
    edit.containers[0].set_env("E", "v", PLUMBING)
    edit.annotations["k/1"] = "v"
    edit.set_spec("schedulerName", "s")
    ops = edit.ops()
    assert ops == [
        {"op": "add", "path": "/spec/containers/0/resources", "value": {"limits": {"x.io/gpu": "1"}}},
        {"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "E", "value": "v"}]},
        {"op": "add", "path": "/spec/schedulerName", "value": "s"},
        {"op": "add", "path": "/metadata", "value": {"annotations": {"k/1": "v"}}},
    ]
    assert jsonpatch.apply_patch(obj, ops)["metadata"] == {"annotations": {"k/1": "v"}}
