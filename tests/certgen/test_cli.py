"""The command line: help, usage errors (exit 2, no request), failures (exit 1), subprocess entry points."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from certgen import cli
from testbed import ROOT
from testbed.ports import free_port
from tests.certgen.helpers import CA_SECRET, HOSTS, SECRET, Certgen, Cluster, json_lines, read_secret
from tests.realkube.faults import FaultyProxy

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

NAMESPACE, WEBHOOK = "hami-system", "hami-webhook"  # for command lines refused before any request
CREATE = ("create", "--namespace", NAMESPACE, "--secret-name", SECRET)
PATCH = ("patch", "--namespace", NAMESPACE, "--secret-name", SECRET, "--webhook-name", WEBHOOK)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([], ["create", "patch", "failure-policy", "local", "exit codes"]),
        (["create"], ["--renew-before", "(default: 720h)", "--ca-secret-name", "CA signing key"]),
        (["patch"], ["--patch-failure-policy", "(default: 60s)", "--patch-validating", "(default: false)"]),
        (["failure-policy"], ["{Fail,Ignore}", "old -> new"]),
        (["local"], ["--out-dir", "(default: .local-tls)", "0600"]),
    ],
)
def test_help_explains_each_command(capsys: pytest.CaptureFixture[str], argv: list[str], words: list[str]) -> None:
    assert cli.main([*argv, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for word in words:
        assert word in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "required: COMMAND"),
        (["rotate"], "invalid choice: 'rotate'"),
        ([*CREATE], "required: --host"),
        (["create", "--host", HOSTS, "--secret-name", SECRET], "required: --namespace"),
        ([*CREATE, "--host", "a.svc,,b.svc"], "empty host name"),
        ([*CREATE, "--host", "a.svc,"], "empty host name"),
        ([*CREATE, "--host", "a_b.svc"], "invalid host 'a_b.svc'"),
        ([*CREATE, "--host", HOSTS, "--cert-validity", "1y"], "invalid duration '1y'"),
        ([*CREATE, "--host", HOSTS, "--renew-before", "0s"], "must be greater than zero"),
        ([*CREATE, "--host", HOSTS, "--renew-before", "8760h"], "--renew-before (8760h) must be shorter"),
        ([*CREATE, "--host", HOSTS, "--cert-validity", "20y"], "invalid duration"),
        ([*CREATE, "--host", HOSTS, "--ca-validity", "30d", "--renew-before", "1d"], "must not exceed --ca-validity"),
        ([*CREATE, "--host", HOSTS, "--key-type", "ed25519"], "invalid choice: 'ed25519'"),
        ([*CREATE, "--host", HOSTS, "--ca-secret-name", SECRET], "--ca-secret-name must differ"),
        ([*CREATE, "--host", HOSTS, "--ca-name", "tls.crt"], "must be different keys"),
        ([*CREATE, "--host", HOSTS, "--cert-name", "a/b"], "invalid Secret data key"),
        (["create", "--namespace", "Hami", "--secret-name", SECRET, "--host", HOSTS], "invalid namespace 'Hami'"),
        (["create", "--namespace", NAMESPACE, "--secret-name", "Bad_Name", "--host", HOSTS], "invalid name"),
        (["patch", "--namespace", NAMESPACE, "--secret-name", SECRET], "required: --webhook-name"),
        ([*PATCH, "--patch-failure-policy", "ignore"], "invalid choice: 'ignore'"),
        ([*PATCH, "--patch-failure-policy", "IgnoreOnInstallOnly"], "invalid choice"),
        ([*PATCH, "--patch-failure-policy", ""], "invalid choice: ''"),
        ([*PATCH, "--patch-mutating=false"], "nothing to patch"),
        ([*PATCH, "--patch-mutating=maybe"], "expected true or false"),
        ([*PATCH, "--timeout", "soon"], "invalid duration"),
        (["failure-policy", "ignore", "--webhook-name", WEBHOOK], "invalid choice: 'ignore'"),
        (["failure-policy", "Ignore"], "required: --webhook-name"),
        (["--log-format", "yaml", *CREATE, "--host", HOSTS], "invalid choice: 'yaml'"),
        ([*CREATE, "--host", HOSTS, "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_exit_2_without_any_request(
    certgen: Certgen, api: FaultyProxy, argv: list[str], message: str
) -> None:
    run = certgen(*argv)
    assert run.code == 2
    assert message in run.stderr
    assert "usage: certgen" in run.stderr
    assert api.requests == []


def test_unreachable_api_server_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    code = cli.main([*CREATE, "--host", HOSTS, "--kubeconfig", str(kubeconfig)])
    err = capsys.readouterr().err
    assert code == 1
    assert "[ERROR]" in err and "cannot reach the API server" in err and "Connection refused" in err
    assert "Traceback" not in err


def test_missing_kubeconfig_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main([*PATCH, "--kubeconfig", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert code == 1
    assert "cannot load Kubernetes client configuration" in err


def test_kubeconfig_from_the_environment(
    api: FaultyProxy,
    cluster: Cluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", api.kubeconfig(tmp_path / "kubeconfig"))
    argv = ["create", "--namespace", cluster.namespace, "--secret-name", SECRET, "--host", HOSTS]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert read_secret(cluster, CA_SECRET)
    assert api.writes(), "through the kubeconfig named by KUBECONFIG"


def test_python_dash_m_and_console_script(api: FaultyProxy, cluster: Cluster, tmp_path: Path) -> None:
    env = {**os.environ, "KUBECONFIG": api.kubeconfig(tmp_path / "kubeconfig"), "PYTHONPATH": str(ROOT)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    argv = [
        "create",
        "--namespace",
        cluster.namespace,
        "--secret-name",
        SECRET,
        "--host",
        HOSTS,
        "--log-format",
        "json",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "certgen", *argv], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert {"created Secret"} <= {record["msg"] for record in json_lines(done.stderr)}
    assert "PRIVATE KEY" not in done.stderr

    usage = subprocess.run(
        [sys.executable, "-m", "certgen", "create", "--host", "a,,b"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert usage.returncode == 2 and "empty host name" in usage.stderr

    script = Path(sys.executable).with_name("certgen")
    if not script.exists():
        pytest.skip("the package is not installed; `pip install -e .` provides the certgen script")
    again = subprocess.run([str(script), *argv], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 0, again.stderr
    assert all(record["msg"] != "created Secret" for record in json_lines(again.stderr))


def test_local_writes_then_keeps_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tls"
    assert cli.main(["local", "--out-dir", str(out), "--host", "localhost,127.0.0.1"]) == 0
    first = capsys.readouterr()
    assert "PRIVATE KEY" not in first.err + first.out
    assert "wrote files" in first.err and "files=ca.key,ca.crt,tls.key,tls.crt" in first.err
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]

    assert cli.main(["local", "--out-dir", str(out), "--host", "localhost,127.0.0.1", "--log-format", "json"]) == 0
    records = json_lines(capsys.readouterr().err)
    assert records[-1]["msg"] == "files unchanged"


def test_local_unwritable_directory_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["local", "--out-dir", str(blocker / "tls")]) == 1
    err = capsys.readouterr().err
    assert "[ERROR]" in err and str(blocker / "tls") in err
    assert "Traceback" not in err
