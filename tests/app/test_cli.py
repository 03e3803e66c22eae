"""``hami-webhook review`` (offline preview), ``hami-webhook local`` (the README's run command), and every module that
looks runnable runs (``python -m app``, ``app.cli``, ``certgen``, ``certgen.cli``, ``bench.run``)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from app.cli import main
from testbed.ports import free_port
from testbed.servers import stop

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

GPU_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: train
spec:
  containers:
  - name: cuda
    image: cuda:12
    resources:
      limits:
        nvidia.com/gpu: 1
        nvidia.com/gpumem: 4000
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pod.yaml"
    path.write_text(text)
    return path


def test_preview_prints_patched_pod(tmp_path: Path, capsys) -> None:
    assert main(["review", str(write(tmp_path, GPU_POD))]) == 0
    out, err = capsys.readouterr()
    assert err == "default/train: allowed, 2 patch operation(s)\n"
    patched = yaml.safe_load(out)
    assert patched["spec"]["schedulerName"] == "hami-scheduler"
    assert patched["metadata"]["annotations"] == {"hami.io/gpu-type": "NVIDIA"}
    assert patched["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}


def test_preview_patch_only(tmp_path: Path, capsys) -> None:
    assert main(["review", "--patch", str(write(tmp_path, GPU_POD))]) == 0
    ops = json.loads(capsys.readouterr().out)
    assert {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"} in ops


def test_preview_with_device_config(tmp_path: Path, capsys) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia:\n  gpuCorePolicy: force\n")
    assert main(["review", "--config", str(config), "--patch", str(write(tmp_path, GPU_POD))]) == 0
    ops = json.loads(capsys.readouterr().out)
    assert {
        "op": "add",
        "path": "/spec/containers/0/env",
        "value": [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}],
    } in ops


def test_preview_denied_exits_1(tmp_path: Path, capsys) -> None:
    denied = GPU_POD.replace("spec:\n", "spec:\n  nodeName: node-1\n")
    assert main(["review", str(write(tmp_path, denied))]) == 1
    assert capsys.readouterr().err == (
        "default/train: denied (403 Forbidden): pod has node assigned\n"
        "hint: spec.nodeName (node-1) binds the Pod to a node, past hami-scheduler: remove it\n"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("kind: ConfigMap\n", "holds no Pod", id="no-pod"),
        pytest.param("a: [", "cannot read", id="bad-yaml"),
    ],
)
def test_preview_bad_input_exits_2(tmp_path: Path, capsys, text: str, message: str) -> None:
    assert main(["review", str(write(tmp_path, text))]) == 2
    assert message in capsys.readouterr().err


def test_usage_error_exits_2(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["frobnicate"])
    assert caught.value.code == 2


def test_local_serves_and_its_curl_example_works(tmp_path: Path) -> None:
    """The README's run command: a fresh PKI, a printed curl command that really gets a patched review."""
    port = free_port()
    script = Path(sys.executable).with_name("hami-webhook")
    proc = subprocess.Popen(
        [str(script), "local", "--dir", str(tmp_path / "tls"), "--bind", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        banner = "".join(proc.stderr.readline() for _ in range(3))
        curl = re.search(r"^\s+(curl .*)$", banner, re.M)
        assert curl, banner
        command = shlex.split(curl.group(1))
        assert command[0] == "curl" and shutil.which("curl"), "the README example needs curl"
        deadline = time.monotonic() + 20
        while True:
            result = subprocess.run([*command, "--silent", "--show-error"], capture_output=True, text=True)
            if result.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert result.returncode == 0, result.stderr
        response = json.loads(result.stdout)["response"]
        assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    finally:
        stop(proc)


TYPO_POD = GPU_POD.replace(
    "metadata:\n", "metadata:\n  annotations:\n    hami.io/gpu-schedular-policy: spread\n"
).replace("        nvidia.com/gpumem: 4000\n", "")


def test_preview_prints_warnings_after_the_decision(tmp_path: Path, capsys) -> None:
    assert main(["review", "--patch", str(write(tmp_path, TYPO_POD))]) == 0
    assert capsys.readouterr().err == (
        "default/train: allowed, 4 patch operation(s)\n"
        "warning: unknown annotation hami.io/gpu-schedular-policy; did you mean hami.io/gpu-scheduler-policy?\n"
        "warning: container cuda: limit nvidia.com/gpucores set to 100 (a whole GPU comes with all its cores)\n"
    )


def _nodes_file(tmp_path: Path) -> Path:
    """`kubectl get nodes -o json` of two Nodes of four A100 80GB (one GPU of gpu-7 unhealthy), saved."""
    from testbed.nodes import gpu, node_metadata

    a100 = "NVIDIA-NVIDIA A100-SXM4-80GB"
    items = [
        {"apiVersion": "v1", "kind": "Node"}
        | node_metadata(name, [gpu(i, name, 81920, card=a100, numa=i // 2, health=i > 0 or name == "gpu-6")
                               for i in range(4)])
        for name in ("gpu-6", "gpu-7")
    ]  # fmt: skip
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def test_preview_checks_against_an_inventory_file(tmp_path: Path, capsys) -> None:
    too_big = GPU_POD.replace("nvidia.com/gpumem: 4000", "nvidia.com/gpumem: 100000")
    assert main(["review", "--patch", str(write(tmp_path, too_big)), "--inventory", str(_nodes_file(tmp_path))]) == 0
    assert capsys.readouterr().err == (
        "default/train: allowed, 2 patch operation(s)\n"
        "warning: container cuda asks 100000 MiB per GPU;"
        " the largest registered NVIDIA GPU has 81920 MiB (node gpu-6)\n"
    )
    assert main(["review", "--patch", str(write(tmp_path, too_big))]) == 0  # no inventory: nothing checked
    assert "asks" not in capsys.readouterr().err
    assert main(["review", str(write(tmp_path, too_big)), "--inventory", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_nodes_prints_each_nodes_devices(tmp_path: Path, capsys) -> None:
    from testbed.nodes import node_metadata
    from testbed.vendors import VENDORS, device

    path = _nodes_file(tmp_path)
    listed = json.loads(path.read_text())
    dcu, amd = VENDORS["DCU"], VENDORS["AMD"]
    devices = [device("DCU", i, "dcu-0", "DCU-K100_AI", 65520, 4, numa=i) for i in range(2)]
    both = node_metadata("dcu-0", devices, dcu.annotation, dcu.encode)
    both["metadata"]["annotations"] |= node_metadata("dcu-0", [device("AMD", 0, "dcu-0", "AMD-MI300X", 196592)],
                                                     amd.annotation)["metadata"]["annotations"]  # fmt: skip
    path.write_text(json.dumps(listed | {"items": [*listed["items"], both]}))
    assert main(["nodes", "-f", str(path)]) == 0
    assert [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()] == [
        "NODE VENDOR TYPE DEVICES HEALTHY MEMORY CORES SPLIT MODE NUMA",
        "dcu-0 DCU DCU-K100_AI 2 2 65520Mi 100 4 - 0,1",
        "dcu-0 AMD AMD-MI300X 1 1 196592Mi 100 10 - 0",
        "gpu-6 NVIDIA NVIDIA-NVIDIA A100-SXM4-80GB 4 4 81920Mi 100 10 hami-core 0,1",
        "gpu-7 NVIDIA NVIDIA-NVIDIA A100-SXM4-80GB 4 3 81920Mi 100 10 hami-core 0,1",
    ]  # columns aligned as kubectl aligns them (the spaces squeezed here)
    empty = tmp_path / "empty.json"
    empty.write_text('{"apiVersion": "v1", "kind": "List", "items": []}')
    assert main(["nodes", "-f", str(empty)]) == 0
    assert capsys.readouterr().err == "No resources found\n"


def test_preview_strict_denies_with_the_warning_as_message(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("HAMI_STRICT_ANNOTATIONS", "true")
    assert main(["review", str(write(tmp_path, TYPO_POD))]) == 2
    assert capsys.readouterr().err == (
        "default/train: denied (400 BadRequest): "
        "unknown annotation hami.io/gpu-schedular-policy; did you mean hami.io/gpu-scheduler-policy?\n"
    )


@pytest.mark.parametrize("module", ["app", "app.cli", "certgen", "certgen.cli", "bench.run"])
def test_every_module_that_looks_runnable_runs(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stderr) == (0, "") and done.stdout.startswith("usage: "), done.stderr
