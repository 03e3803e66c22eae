"""A pytest plugin that records every review the app tests make, for tests/app/admission/test_patch_unchanged.py.

It wraps ``app.admission.review.decide_review`` and writes each Pod CREATE reviewed with quota off (the settings'
environment, the device-config file's content, the Pod, and the answer's allowed, code and patch) to the
file named by HAMI_RECORD_PATCHES, once per distinct input. Re-record with::

    HAMI_RECORD_PATCHES=tests/app/admission/patches-before-warnings.json .venv/bin/python -m pytest \
        -p tests.app.admission.patch_recorder tests/app/admission/test_review.py tests/app/test_cli.py \
        tests/app/admission/devices -q
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.admission import review as review_module
from app.admission.ports import QuotaOff
from app.settings import KNOBS, Settings

_recorded: dict[str, dict[str, Any]] = {}


def environment(settings: Settings) -> dict[str, str]:
    """The settings' knobs that differ from the defaults, as environment variables (the config file aside)."""
    env: dict[str, str] = {}
    for knob in KNOBS:
        value = getattr(settings, knob.field)
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if knob.field != "device_config" and text != knob.default:
            env[knob.env] = text
    return env


@pytest.fixture(autouse=True)
def _record(monkeypatch: pytest.MonkeyPatch) -> None:
    decide_review = review_module.decide_review

    def recording(document: Any, settings: Settings, quota: Any, uid: str, *, governed: bool) -> Any:
        decision = decide_review(document, settings, quota, uid, governed=governed)
        request = document.get("request") if isinstance(document, dict) else None
        if isinstance(quota, QuotaOff) and isinstance(request, dict) and request.get("operation") == "CREATE":
            config = yaml.safe_load(Path(settings.device_config).read_text()) if settings.device_config else None
            case = {"env": environment(settings), "device_config": config, "pod": request.get("object")}
            key = json.dumps(case, sort_keys=True)
            outcome = {"allowed": decision.allowed, "code": decision.code, "patch": decision.patch}
            _recorded.setdefault(key, {**case, **outcome})
        return decision

    monkeypatch.setattr(review_module, "decide_review", recording)


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("HAMI_RECORD_PATCHES")
    if target:
        # One case per line, so diffs stay readable; the Pod keeps its own key order, which orders the patch.
        lines = (json.dumps(_recorded[key]) for key in sorted(_recorded))
        Path(target).write_text("[\n" + ",\n".join(lines) + "\n]\n")
