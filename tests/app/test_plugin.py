"""``kubectl hami`` shaped like kubectl, in process: each command's usage on a usage error (exit 1), ``--version``,
``review``'s ``-f``/``-n``/``-o``, and the quota's table, ``List`` and names. Against a real API server, through
kubectl's plugin discovery and an installed wheel: tests/realkube/test_quota_view.py."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import plugin
from app.quota.command import render
from app.quota.core.standing import Expiry, Figure, Standing

pytestmark = pytest.mark.unit  # its highest tier (tests/tiers.py checks it)

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: train}
spec:
  containers:
  - {name: cuda, image: cuda:12, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 4000}}}
"""
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: serve}
spec:
  replicas: 2
  selector: {matchLabels: {app: serve}}
  template:
    metadata: {labels: {app: serve}}
    spec:
      containers:
      - {name: cuda, image: cuda:12, resources: {limits: {nvidia.com/gpu: 1}}}
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = plugin(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("args", "usage", "said"),
    [
        pytest.param(("review", "--frobnicate"), "usage: kubectl hami review", "unrecognized arguments", id="review"),
        pytest.param(("quota", "--frobnicate"), "usage: kubectl hami quota", "unrecognized arguments", id="quota"),
        pytest.param(("quota", "-o", "table"), "usage: kubectl hami quota", "invalid choice", id="bad-output"),
        pytest.param(("quota", "-n", "a", "-l", "x=y"), "usage: kubectl hami quota", "use it with -A", id="l-not-A"),
        pytest.param(("quota", "--request-timeout", "soon"), "usage: kubectl hami quota", "invalid duration", id="t"),
        pytest.param(("review",), "usage: kubectl hami review", "give the manifests: -f FILE", id="no-file"),
    ],
)
def test_a_usage_error_shows_the_commands_usage_and_exits_1(capsys, args, usage: str, said: str) -> None:
    code, out, err = run(capsys, *args)
    assert (code, out) == (1, "")
    assert err.startswith(usage) and said in err.splitlines()[-1], err
    assert "Traceback" not in err


def test_unknown_command_version_and_help(capsys) -> None:
    assert run(capsys, "frobnicate") == (
        1, "", 'error: unknown command "frobnicate" for "kubectl hami"\nRun "kubectl hami --help" for usage.\n'
    )  # fmt: skip
    code, out, err = run(capsys, "--version")
    assert (code, err) == (0, "") and out.startswith("kubectl hami ") and out.split()[-1][0].isdigit(), out
    code, out, _ = run(capsys, "review", "--help")
    assert code == 0 and "-f FILE" in out and "-n NAMESPACE" in out


def test_review_reads_several_files_and_stdin_into_a_list(capsys, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(DEPLOYMENT.encode())))
    code, out, err = run(capsys, "review", "-n", "team", "-f", str(tmp_path / "pod.yaml"), "-f", "-", "-o", "json")
    assert code == 0, err
    listed = json.loads(out)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    assert [i["kind"] for i in listed["items"]] == ["Pod", "Deployment"]
    assert listed["items"][0]["spec"]["schedulerName"] == "hami-scheduler"
    assert err.splitlines()[0].startswith("team/train: allowed") and "team/serve" in err, err
    code, out, _ = run(capsys, "review", "-f", str(tmp_path / "pod.yaml"), "-o", "name")
    assert (code, out) == (0, "pod/train\n")
    code, out, _ = run(capsys, "review", "-f", str(tmp_path / "pod.yaml"), "-o", "yaml")
    assert yaml.safe_load(out)["kind"] == "List"


def test_review_of_an_unreadable_file_is_one_line(capsys, tmp_path: Path) -> None:
    code, out, err = run(capsys, "review", "-f", str(tmp_path / "absent.yaml"))
    assert (code, out, err) == (
        2,
        "",
        f"hami-webhook: cannot read {tmp_path / 'absent.yaml'}: No such file or directory\n",
    )


STANDINGS = [
    Standing("team-a", (Figure("nvidia.com/gpu", 8, "gpu", 3, 1),), 3, Expiry("r1", 42.4)),
    Standing("team-b", (Figure("nvidia.com/gpu", 4, "small", 4, 0),), 2, None),
]


def test_the_quota_table_list_and_names() -> None:
    table = render(STANDINGS, None, wide_scope=True).splitlines()
    assert [line.split() for line in table] == [
        ["NAMESPACE", "RESOURCE", "LIMIT", "USED", "HELD", "FREE", "PODS"],
        ["team-a", "nvidia.com/gpu", "8", "3", "1", "4", "3"],
        ["team-b", "nvidia.com/gpu", "4", "4", "0", "0", "2"],
    ]
    assert render(STANDINGS, None, wide_scope=True, headers=False).splitlines() == table[1:]
    wide = [line.split() for line in render(STANDINGS, "wide", wide_scope=False).splitlines()]
    assert wide[0][-5:] == ["RESOURCEQUOTA", "OLDEST-HOLD", "EXPIRES-IN", "HELD-FOR-GANGS", "GANGS"]
    assert wide[1][-5:] == ["gpu", "r1", "42s", "0", "<none>"]
    listed: Any = json.loads(render(STANDINGS, "json", wide_scope=True))
    assert (listed["kind"], [i["free"] for i in listed["items"]]) == ("List", [4, 0])
    assert yaml.safe_load(render(STANDINGS, "yaml", wide_scope=True)) == listed
    assert render(STANDINGS, "name", wide_scope=True) == "namespace/team-a\nnamespace/team-b\n"
