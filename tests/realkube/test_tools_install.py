"""The operator's tools as an operator gets them: scripts/dist.sh's krew archive unpacked as krew does, its
launcher installing the wheel into a fresh virtualenv (what `pipx install WHEEL` does), `kubectl hami` found by
kubectl's plugin discovery, against the newest real kube-apiserver with the webhook installed: kubectl's flags, a
namespace without quota, a List, stdin, bad input; `kubectl hami check` through the webhook; the workload warning
and the command give the same FREE; the webhook's own ServiceAccount may run `quota -A` (what `kubectl exec
deploy/hami-webhook -- hami-webhook quota -A` uses); the krew manifest names the archive by its sha256."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import ROOT
from testbed.cluster import RealKube, kubectl_binary
from testbed.install import Installed, apply
from testbed.wheels import wheelhouse
from tests.realkube.test_quota_view import gpu_pod, resource_quota
from tests.realkube.test_workload_warnings import ctr, workload

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

MEM = "nvidia.com/gpumem"
VERSION = next(
    line.split("=")[1].strip() for line in (ROOT / "setup.cfg").read_text().splitlines() if "version =" in line
)
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scripts/dist.sh's output, built once for the module."""
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "dist.sh"), str(out), "https://example.test/a.tar.gz"],
                          env=env, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(out / f) for f in (wheel_name(), archive_name(), "hami.yaml")]
    return out


def wheel_name() -> str:
    return f"hami_webhook-{VERSION}-py3-none-any.whl"


def archive_name() -> str:
    return f"kubectl-hami-{VERSION}.tar.gz"


def offline() -> dict[str, str]:
    """pip's settings for installing without an index: the dependency wheels built once per set of pins."""
    constraints = (ROOT / "constraints.txt").read_text()
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse(PIP, ROOT, constraints))}


@pytest.fixture(scope="module")
def tools(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The krew archive unpacked (krew's store), its launcher run once: it installs the wheel into a fresh
    virtualenv beside itself (pip offline here: the dependency wheels built once per set of pins)."""
    store = tmp_path_factory.mktemp("store")
    with tarfile.open(dist / archive_name()) as tar:
        tar.extractall(store, filter="data")
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin", "HOME": str(store), **offline()}
    for _ in range(2):  # installs on the first run, then only runs
        done = subprocess.run(
            [str(store / "kubectl-hami"), "--version"], env=env, capture_output=True, text=True, timeout=600
        )
        assert (done.returncode, done.stdout) == (0, f"kubectl hami {VERSION}\n"), done.stderr
    assert (store / "venv" / "bin" / "hami-webhook").exists()
    return store


def kubectl(kube: RealKube, bin_dir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real kubectl with only ``bin_dir`` and the system's directories on PATH: it finds kubectl-hami there."""
    env = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
        "HOME": str(bin_dir.parent),
        "KUBECONFIG": kube.kubeconfig_path,
    }
    return subprocess.run([kubectl_binary(), *args], env=env, input=stdin, capture_output=True, text=True, timeout=60)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1 and "Traceback" not in done.stderr, (done.returncode, done.stderr)
    return done.stderr.strip().splitlines()[-1]


def test_kubectl_hami_from_a_fresh_install(installed: Installed, tools: Path, tmp_path: Path) -> None:
    kube = installed.kube
    listed = kubectl(kube, tools, "plugin", "list")
    assert str(tools / "kubectl-hami") in listed.stdout, listed.stdout + listed.stderr
    assert kubectl(kube, tools, "hami", "--version").stdout == f"kubectl hami {VERSION}\n"

    suffix = uuid.uuid4().hex[:6]
    ns = kube.namespace(f"tools-{suffix}", labels={"team": f"t-{suffix}"})
    bare = kube.namespace(f"tools-bare-{suffix}")
    try:
        apply(kube, resource_quota(ns, "gpu", {MEM: 20000, "nvidia.com/gpu": 8}))
        kube.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(gpu_pod("a", 1, 4000)))

        table = kubectl(kube, tools, "hami", "quota", "-n", ns, "--context", "real", "--request-timeout", "5s")
        assert table.returncode == 0, table.stderr
        assert table.stdout.splitlines()[0].split() == ["RESOURCE", "LIMIT", "USED", "HELD", "FREE", "PODS"]
        assert (
            kubectl(kube, tools, "hami", "quota", "-n", ns, "--no-headers").stdout.splitlines()
            == (table.stdout.splitlines()[1:])
        )
        for output in ("json", "yaml"):
            shown = kubectl(kube, tools, "hami", "quota", "-n", ns, "-o", output)
            listed_items: Any = json.loads(shown.stdout) if output == "json" else yaml.safe_load(shown.stdout)
            assert (listed_items["apiVersion"], listed_items["kind"]) == ("v1", "List"), shown.stdout
            assert {i["resource"]: i["used"] for i in listed_items["items"]} == {MEM: 4000, "nvidia.com/gpu": 1}
        selected = kubectl(kube, tools, "hami", "quota", "-A", "-l", f"team=t-{suffix}", "-o", "name")
        assert (selected.returncode, selected.stdout) == (0, f"namespace/{ns}\n"), selected.stderr
        everywhere = kubectl(kube, tools, "hami", "quota", "-A")
        assert any(line.split()[0] == ns for line in everywhere.stdout.splitlines()), everywhere.stdout
        print(f"\n$ kubectl hami quota -A\n{everywhere.stdout}")

        checked = kubectl(kube, tools, "hami", "check", "-n", ns, "-o", "json")
        found = json.loads(checked.stdout)
        verdicts = {c["name"]: c["status"] for c in found["checks"]}
        assert (verdicts["path"], verdicts["cpu-pods"]) == ("ok", "ok"), checked.stdout  # through the webhook
        assert checked.returncode == (0 if found["passed"] else 1), checked.stderr  # (no kubelet: Pods never Ready)

        nothing = kubectl(kube, tools, "hami", "quota", "-n", bare)
        assert (nothing.returncode, nothing.stdout, nothing.stderr) == (
            0,
            "",
            f"No resources found in {bare} namespace.\n",
        )
        empty = kubectl(kube, tools, "hami", "quota", "-n", bare, "-o", "json")
        assert json.loads(empty.stdout)["items"] == [] and empty.returncode == 0

        job = workload("Job", "sweep", ctr({"nvidia.com/gpu": "1", MEM: "8000"}), parallelism=3)
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
        reviewed = kubectl(kube, tools, "hami", "review", "-n", ns, "-f", str(tmp_path / "job.yaml"), "-o", "name")
        assert (reviewed.returncode, reviewed.stdout) == (0, "job.batch/sweep\n"), reviewed.stderr
        piped = kubectl(kube, tools, "hami", "review", "-f", "-", "-o", "json", stdin=yaml.safe_dump(job))
        assert json.loads(piped.stdout)["kind"] == "List" and piped.returncode == 0, piped.stderr

        assert one_line(kubectl(kube, tools, "hami", "review", "-n")).endswith("expected one argument")
        assert "usage: kubectl hami quota" in kubectl(kube, tools, "hami", "quota", "--frobnicate").stderr
        assert one_line(kubectl(kube, tools, "hami", "quota", "--context", "nope")).startswith(
            "error: cannot load the kubeconfig"
        )
        missing = kubectl(kube, tools, "hami", "review", "-f", str(tmp_path / "absent.yaml"))
        assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
    finally:
        kube.kubectl("delete", "namespace", "--wait=false", ns, bare)


def test_the_warning_and_the_command_give_the_same_free(installed: Installed, tools: Path) -> None:
    """With room held for a Pod not seen yet, the Job's warning and `kubectl hami quota` name one FREE."""
    kube = installed.kube
    ns = kube.namespace(f"tools-free-{uuid.uuid4().hex[:6]}")
    try:
        apply(kube, resource_quota(ns, "gpu", {MEM: 20000}))
        kube.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(gpu_pod("a", 1, 4000)))
        # Admitted (room held), then refused by storage (the name is taken): held until the reservation's TTL.
        taken = kube.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(gpu_pod("a", 1, 6000)), check=False)
        assert "AlreadyExists" in taken.stderr, taken.stderr
        job = workload("Job", "sweep", ctr({"nvidia.com/gpu": "1", MEM: "8000"}), parallelism=3)

        def warned() -> str | None:
            done = kube.kubectl("apply", "-n", ns, "--dry-run=server", "-f", "-", stdin=json.dumps(job))
            found = re.search(rf"; (\d+) free in {ns}:", done.stderr)
            return found.group(1) if found and found.group(1) == "10000" else None

        said = kube.wait_for(warned, 30, interval=0.5)  # once the webhook's feed has the Pod and the hold
        shown = kubectl(kube, tools, "hami", "quota", "-n", ns, "-o", "json")
        (item,) = [i for i in json.loads(shown.stdout)["items"] if i["resource"] == MEM]
        assert (item["used"], item["held"], str(item["free"])) == (4000, 6000, said)
        # docs/operations.md ("When a namespace is full"): which Pods use it.
        page = (ROOT / "docs" / "operations.md").read_text()
        (columns,) = re.findall(r"-o custom-columns='([^']+)'", page)
        rows = kube.kubectl("get", "pods", "-n", ns, "-o", f"custom-columns={columns}").stdout.split()
        assert rows == ["POD", "OWNER", "GPU", "MEM", "a", "<none>", "1", "4k"], rows  # stored "4000" reads "4k"
    finally:
        kube.kubectl("delete", "namespace", "--wait=false", ns)


def test_the_webhooks_own_service_account_may_look_at_every_namespace(installed: Installed, tools: Path) -> None:
    """`kubectl -n hami-system exec deploy/hami-webhook -- hami-webhook quota -A` runs as it (README)."""
    command = [
        str(tools / "venv" / "bin" / "hami-webhook"),
        "quota",
        "-A",
        "--kubeconfig",
        installed.webhook_kubeconfig,
    ]
    done = subprocess.run(command,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def test_the_documented_quota_pod_passes_the_namespaces_pod_security(installed: Installed) -> None:
    """docs/operations.md's `kubectl run` of the image as quota-viewer, dry-run by the real API server: admitted
    in hami-system, whose `restricted` Pod Security level refuses a Pod without that securityContext."""
    kube = installed.kube
    page = (ROOT / "docs" / "operations.md").read_text()
    (overrides,) = re.findall(r"--overrides='([^']+)'", page[page.index("## The operator's tools") :][:4000])
    assert json.loads(overrides)["spec"]["containers"][0]["args"] == ["quota", "-A"]
    kube.kubectl("create", "serviceaccount", "quota-viewer", "-n", "hami-system")
    try:
        run = (
            "run",
            "hami-quota",
            "-n",
            "hami-system",
            "--restart=Never",
            "--image=hami-webhook:x",
            "--dry-run=server",
        )
        done = kube.kubectl(*run, f"--overrides={overrides}", check=False)
        assert done.returncode == 0 and "Warning" not in done.stderr, done.stderr
        bare = kube.kubectl(*run, check=False)  # the test can fail: without it, Pod Security refuses the Pod
        assert bare.returncode != 0 and "violates PodSecurity" in bare.stderr, bare.stderr
    finally:
        kube.kubectl("delete", "serviceaccount", "quota-viewer", "-n", "hami-system")


def test_the_krew_manifest_names_the_archive(dist: Path) -> None:
    manifest = yaml.safe_load((dist / "hami.yaml").read_text())
    (platform,) = manifest["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256((dist / archive_name()).read_bytes()).hexdigest()
    assert (platform["uri"], platform["bin"]) == ("https://example.test/a.tar.gz", "kubectl-hami")
    assert (manifest["kind"], manifest["metadata"]["name"], manifest["spec"]["version"]) == (
        "Plugin",
        "hami",
        f"v{VERSION}",
    )
