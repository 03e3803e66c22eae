"""Admission warnings never change a patch: every Pod the app tests reviewed before warnings existed is
reviewed again and must get the same decision and the very same JSON Patch.

patches-before-warnings.json was recorded with tests/app/admission/patch_recorder.py (its docstring has the command)
on the commit before admission warnings were added; each line is one distinct case (settings, Pod, answer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.admission.ports import QuotaOff
from app.admission.review import review
from app.settings import Settings
from testbed.reviews import admission_review, decode_patch

CASES: list[dict[str, Any]] = json.loads((Path(__file__).parent / "patches-before-warnings.json").read_text())


def test_the_recording_covers_every_kind_of_case() -> None:
    """Device Pods patched, plain Pods passed, denials, and non-default settings are all in the recording."""
    kinds = {(case["allowed"], bool(case["patch"])) for case in CASES}
    assert kinds == {(True, True), (True, False), (False, False)}
    assert any(case["device_config"] for case in CASES) and any(case["env"] for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_same_patch_as_before_warnings(case: dict[str, Any], tmp_path: Path) -> None:
    env = dict(case["env"])
    if case["device_config"] is not None:
        path = tmp_path / "device-config.yaml"
        path.write_text(yaml.safe_dump(case["device_config"]))
        env["HAMI_DEVICE_CONFIG"] = str(path)
    response = review(admission_review(case["pod"]), Settings.from_env(env), QuotaOff())["response"]
    assert (response["allowed"], response["status"]["code"]) == (case["allowed"], case["code"])
    assert decode_patch(response) == case["patch"]
