"""Logs: one parseable line per event, the admission fields, no secrets or Pod bodies, and no forging or flooding."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from app.logs import FIELD_LIMIT, MESSAGE_LIMIT, JsonFormatter, TextFormatter, bound
from certgen.local import LocalFiles
from testbed.pods import container, pod
from testbed.reviews import admission_review
from tests.app.served import Served, serve

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
FORGED = 'x\n[2026-01-01T00:00:00.000Z] [1] [INFO] review uid=forged allowed=true code=200 "'
REVIEW_FIELDS = {"uid", "namespace", "pod", "generateName", "operation", "allowed", "code", "reason", "message"}
HUGE = 6 * 1024 * 1024
QUANTITY = 1024 * 1024  # before the fix, this quantity made a 2,000,373-byte log line (it was echoed twice)


def record(msg: str, *args: object, fields: dict | None = None, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("bad\nvalue")
        except ValueError:
            exc_info = sys.exc_info()
    rec = logging.LogRecord("hami_webhook.review", logging.INFO, __file__, 1, msg, args, exc_info)
    if fields is not None:
        rec.fields = fields
    return rec


# --- the formatters ----------------------------------------------------------------------------------


def test_json_line_keeps_a_forged_uid_inside_its_field() -> None:
    line = JsonFormatter().format(record("review", fields={"uid": FORGED, "allowed": False, "code": 403}))
    assert "\n" not in line
    parsed = json.loads(line)
    assert (parsed["uid"], parsed["allowed"], parsed["code"], parsed["msg"]) == (FORGED, False, 403, "review")


@pytest.mark.parametrize(
    ("fields", "escaped"),
    [
        ({"pod": "p\x1b[2J\u202eevil"}, '"pod":"p\\u001b[2J\\u202eevil"'),  # terminal and bidi controls
        ({"pod": "gpu-\u00e9"}, '"pod":"gpu-\\u00e9"'),  # any non-ASCII character
        ({"n": 2**70}, f'"n":{2**70}'),  # beyond 64 bits
    ],
    ids=["controls", "non-ascii", "big-int"],
)
def test_json_line_is_ascii_and_escapes_what_a_terminal_would_act_on(fields: dict, escaped: str) -> None:
    line = JsonFormatter().format(record("review", fields=fields))
    assert line.isascii() and escaped in line
    assert json.loads(line)[next(iter(fields))] == next(iter(fields.values()))


def test_text_line_quotes_and_escapes_a_forged_uid() -> None:
    line = TextFormatter().format(record("review", fields={"uid": FORGED, "allowed": False}))
    assert "\n" not in line
    assert line.endswith(f" review uid={json.dumps(FORGED)} allowed=false")


@pytest.mark.parametrize("formatter", [JsonFormatter(), TextFormatter()], ids=["json", "text"])
def test_every_value_and_the_message_are_bounded(formatter: logging.Formatter) -> None:
    line = formatter.format(record("cannot count %s", "q" * HUGE, fields={"message": "m" * HUGE, "n": 1}))
    assert len(line) < FIELD_LIMIT + MESSAGE_LIMIT + 200
    assert f"[+{HUGE - FIELD_LIMIT} chars]" in line


def test_text_escapes_terminal_and_bidi_controls_in_messages() -> None:
    line = TextFormatter().format(record("pod %s", "\x1b[2J\u202eevil\r\nnext"))
    assert line.endswith("pod \\u001b[2J\\u202eevil\\r\\nnext")


def test_text_traceback_lines_are_indented() -> None:
    lines = TextFormatter().format(record("boom", exc=True)).split("\n")
    assert lines[0].endswith("[INFO] boom") and all(line.startswith("    ") for line in lines[1:])
    assert lines[-2:] == ["    ValueError: bad", "    value"]


def test_bound_says_how_much_was_cut() -> None:
    assert bound("abc", 5) == "abc"
    assert bound("abcdefgh", 5) == "abcde...[+3 chars]"


# --- a real gunicorn -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def json_server(pki: LocalFiles):
    with serve(pki, HAMI_WEBHOOK_WORKERS="1", HAMI_LOG_FORMAT="json") as served:
        yield served


def secret_pod() -> dict:
    """A GPU Pod whose body carries markers that must never reach the log."""
    ctr = container("ctr-marker-7f3a", GPU, env=[{"name": "API_TOKEN", "value": "s3cr3t-marker-91b2"}])
    ctr["image"] = "registry.example/image-marker-c4d5:1"
    obj = pod(ctr, annotations={"note": "annotation-marker-e6f7"})
    obj["metadata"]["name"] = "gpu-pod"
    return obj


def review_lines(served: Served) -> list[dict]:
    return [json.loads(line) for line in served.lines if '"msg":"review"' in line]


def test_json_lines_with_admission_fields_and_no_secrets(json_server: Served, pki: LocalFiles) -> None:
    status, answer = json_server.post(admission_review(secret_pod(), uid="uid-secret"))
    assert status == 200 and answer["response"]["allowed"] is True
    json_server.wait_for('"uid":"uid-secret"')
    parsed = [json.loads(line) for line in json_server.lines]  # every line, gunicorn's included, is JSON
    assert any(p["logger"] == "gunicorn.error" and p["msg"].startswith("Booting worker") for p in parsed)
    line = next(p for p in review_lines(json_server) if p["uid"] == "uid-secret")
    assert REVIEW_FIELDS | {"patch_ops", "warnings", "ms", "time", "level", "logger", "pid", "msg"} == set(line)
    assert (line["namespace"], line["pod"], line["operation"], line["allowed"], line["code"]) == (
        "default",
        "gpu-pod",
        "CREATE",
        True,
        200,
    )
    assert line["patch_ops"] > 0 and line["warnings"] == 0 and line["ms"] > 0 and line["level"] == "info"
    log = json_server.log()
    for marker in ("ctr-marker-7f3a", "s3cr3t-marker-91b2", "image-marker-c4d5", "annotation-marker-e6f7"):
        assert marker not in log, "the Pod body reached the log"
    key_lines = [k for k in Path(pki.key).read_text().splitlines() if k and not k.startswith("-----")]
    assert "PRIVATE KEY" not in log and not any(k in log for k in key_lines)
    assert '"patch"' not in log, "the patch is logged at debug only"


def test_denial_line_names_reason_and_message(json_server: Served) -> None:
    json_server.post(admission_review(pod(container(limits=GPU), nodeName="n1"), uid="uid-deny"))
    json_server.wait_for('"uid":"uid-deny"')
    line = next(p for p in review_lines(json_server) if p["uid"] == "uid-deny")
    assert (line["allowed"], line["code"], line["reason"], line["message"]) == (
        False,
        403,
        "Forbidden",
        "pod has node assigned",
    )
    assert (line["pod"], line["generateName"], line["patch_ops"]) == ("", "job-", 0)


def test_forged_uid_stays_in_one_json_line(json_server: Served) -> None:
    json_server.post(admission_review(pod(container()), uid=FORGED))
    json_server.wait_for("review uid=forged")
    lines = [line for line in json_server.lines if "uid=forged" in line]
    assert len(lines) == 1 and json.loads(lines[0])["uid"] == FORGED


def test_huge_quantity_gives_a_bounded_line(json_server: Served) -> None:
    """An invalid quantity was once echoed, twice, into the log line (logs cannot be forged or flooded)."""
    obj = pod(container(limits={"nvidia.com/gpu": "x" * QUANTITY}))
    status, answer = json_server.post(admission_review(obj, uid="uid-huge"))
    assert status == 200 and answer["response"]["status"]["code"] == 400
    json_server.wait_for('"uid":"uid-huge"')
    line = next(line for line in json_server.lines if '"uid":"uid-huge"' in line)
    assert len(line) < 2 * FIELD_LIMIT, len(line)
    assert max(len(line) for line in json_server.lines) < MESSAGE_LIMIT + FIELD_LIMIT


def test_text_format_cannot_be_forged(pki: LocalFiles) -> None:
    with serve(pki, HAMI_WEBHOOK_WORKERS="1") as served:
        served.post(admission_review(pod(container()), uid=FORGED))
        served.post(admission_review(pod(container()), uid="plain-uid"))
        served.wait_for("uid=plain-uid")
        assert any(f"uid={json.dumps(FORGED)}" in line for line in served.lines)
        assert sum(" review uid=" in line for line in served.lines) == 2
        assert not any(line.startswith("[2026-01-01") for line in served.lines)
        assert all(line.startswith(("[", "    ")) for line in served.lines)


def test_debug_adds_the_patch(pki: LocalFiles) -> None:
    with serve(pki, HAMI_WEBHOOK_WORKERS="1", HAMI_LOG_FORMAT="json", HAMI_LOG_LEVEL="debug") as served:
        served.post(admission_review(secret_pod(), uid="uid-debug"))
        found = served.wait_for(r'"msg":"review patch".*')
        patch = json.loads(json.loads(found.string)["patch"])
        assert {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"} in patch
        assert "s3cr3t-marker-91b2" not in served.log()
