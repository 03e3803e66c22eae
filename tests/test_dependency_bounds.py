"""Dependencies: every one is declared with the range the code is tested with, and both ends are tested.

The newest end is constraints.txt (scripts/lock.sh), which the image and the rest of the suite run on. The
oldest end is tested here: a fresh virtualenv gets the package with each declared dependency at its lower
bound (the constraints are computed from setup.cfg, so they cannot drift from it), then serves a review over
TLS with quota on against a real kube-apiserver (tests/realkube), answers /metrics, previews a Pod with the
CLI, and runs certgen against the API. A lower bound that is too old fails here: gunicorn's is 23.0, the oldest
whose base.Worker (app/serving/worker.py's only gunicorn base) serves as app.serving.worker uses it.
"""

from __future__ import annotations

import ast
import base64
import configparser
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from certgen.local import LocalFiles
from testbed import ROOT
from testbed.cluster import RealKube
from testbed.pods import container, pod
from testbed.ports import free_port
from testbed.reviews import admission_review
from testbed.servers import Server, serving_env, stop, wait_ready
from testbed.tls import client_context
from testbed.wheels import wheelhouse

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


def requirements(review: bool = True) -> list[Requirement]:
    """setup.cfg's install_requires, and its `review` extra (the preview's CEL: the product's, not the tests',
    though the image does not install it)."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    lines = parser["options"]["install_requires"] + (parser["options.extras_require"]["review"] if review else "")
    return [Requirement(line) for line in lines.split("\n") if line.strip()]


def lower_bounds() -> list[str]:
    """``name==version`` for every dependency's ``>=`` bound: the oldest install setup.cfg allows."""
    return [f"{r.name}=={s.version}" for r in requirements() for s in r.specifier if s.operator == ">="]


def test_every_dependency_has_a_lower_and_an_upper_bound() -> None:
    unbounded = [
        str(r) for r in requirements() if {s.operator for s in r.specifier} != {">=", "<"} or len(r.specifier) != 2
    ]
    assert not unbounded, f"declare '>=oldest tested,<next major' for: {unbounded}"


def test_the_lock_is_inside_the_declared_ranges() -> None:
    """constraints.txt (the newest end, what the image runs) satisfies setup.cfg."""
    pins = dict(
        line.split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    pinned = {canonicalize_name(name): version for name, version in pins.items()}
    outside = {str(r): pinned.get(canonicalize_name(r.name)) for r in requirements(review=False)}
    outside = {r: v for r, v in outside.items() if v is None or not Requirement(r).specifier.contains(v)}
    assert not outside, f"constraints.txt is outside setup.cfg (run scripts/lock.sh): {outside}"


def imported_distributions() -> set[str]:
    """Distributions whose modules app/, certgen/ and the two entry files import."""
    modules: set[str] = set()
    for path in [*ROOT.glob("app/**/*.py"), *ROOT.glob("certgen/**/*.py"), ROOT / "wsgi.py", ROOT / "gunicorn.conf.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    owners = packages_distributions()
    return {canonicalize_name(d) for m in modules - sys.stdlib_module_names for d in owners.get(m, [])} - {
        "hami-webhook"
    }


def test_every_imported_distribution_is_declared() -> None:
    """A module imported directly is a dependency of ours, even when another dependency brings it today."""
    declared = {canonicalize_name(r.name) for r in requirements()}
    assert imported_distributions() <= declared, sorted(imported_distributions() - declared)


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def oldest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean virtualenv with the package and every dependency at the lower bound setup.cfg declares (their wheels
    built once per set of bounds, testbed/wheels.py)."""
    root = tmp_path_factory.mktemp("oldest")
    source = root / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "*.egg-info", "build", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    run(*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", root / "wheels", ".", cwd=source)
    (root / "lower-bounds.txt").write_text("\n".join(lower_bounds()) + "\n")
    target = root / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    wheel = next((root / "wheels").glob("hami_webhook-*.whl"))
    python = target / "bin" / "python"
    spec = f"{wheel}[review]"
    wheels = wheelhouse(pip, source, (root / "lower-bounds.txt").read_text(), "[review]")
    offline = ["--no-index", "--find-links", wheels, "--no-compile", "--constraint", root / "lower-bounds.txt"]
    run(*pip, "--python", python, "install", "--quiet", *offline, spec, cwd=root)
    installed = {
        canonicalize_name(p["name"]): p["version"]
        for p in json.loads(run(*pip, "--python", python, "list", "--format=json", cwd=root))
    }
    for bound in lower_bounds():
        name, version = bound.split("==")
        assert Requirement(f"{name}=={version}").specifier.contains(installed[canonicalize_name(name)]), bound
    return target


def test_oldest_allowed_versions_serve_review_and_make_certificates(
    oldest: Path, bare_kube: RealKube, tmp_path: Path
) -> None:
    bin_dir = oldest / "bin"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "KUBECONFIG": bare_kube.kubeconfig_path}
    run(bin_dir / "certgen", "local", "--out-dir", tmp_path / "tls", cwd=tmp_path, env=env)
    pki = LocalFiles(*(tmp_path / "tls" / name for name in ("ca.crt", "tls.crt", "tls.key")))

    suffix = tmp_path.name[-12:].lower().replace("_", "-").strip("-")
    home, ai = bare_kube.namespace(f"deps-home-{suffix}"), bare_kube.namespace(f"deps-ai-{suffix}")
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": ai}}
    bare_kube.kubectl("apply", "-f", "-", stdin=json.dumps(quota | {"spec": {"hard": {"nvidia.com/gpu": "2"}}}))
    port, metrics_port = free_port(), free_port()
    server = Server(
        [str(bin_dir / "hami-webhook"), "serve"],
        serving_env(
            port,
            pki.cert,
            pki.key,
            **env,
            HAMI_METRICS_BIND=f"127.0.0.1:{metrics_port}",
            HAMI_WEBHOOK_WORKERS="1",
            HAMI_QUOTA_ENABLED="true",
            HAMI_NAMESPACE=home,
        ),
    )
    try:
        wait_ready(port, client_context(pki.ca_cert), server, timeout=60)  # ready = quota lists synced
        review = admission_review(pod(container(limits={"nvidia.com/gpu": "1"}), namespace=ai), uid="lower-1")
        conn = http.client.HTTPSConnection("localhost", port, context=client_context(pki.ca_cert), timeout=20)
        conn.request("POST", "/webhook", json.dumps(review), {"Content-Type": "application/json"})
        reply = conn.getresponse()
        answer = json.loads(reply.read())
        conn.close()
        metrics = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=10)
        metrics.request("GET", "/metrics")
        scraped = metrics.getresponse().read().decode()
        metrics.close()
    except (OSError, AssertionError) as exc:  # not ready, or a worker died mid-request: show why
        pytest.fail(f"{exc!r}; the server's log:\n{stop(server)}")
    log = stop(server)
    assert "Traceback" not in log, log
    assert reply.status == 200 and answer["response"]["allowed"] is True, log
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"} in patch
    assert "hami.io/quota-reservation" in json.dumps(patch), "the quota ledger (a Lease) was written"
    assert bare_kube.exists("lease", f"hami-quota-{ai}", namespace=home)
    assert re.search(r'^hami_webhook_decisions_total\{[^}]*outcome="patched"[^}]*\} 1\.0$', scraped, re.M), scraped

    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: gpu}\nspec:\n"
        "  containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]\n"
    )
    assert "hami-scheduler" in run(bin_dir / "hami-webhook", "review", manifest, "--patch", cwd=tmp_path, env=env)

    run(
        bin_dir / "certgen",
        "create",
        "--namespace",
        home,
        "--secret-name",
        "hami-webhook-tls",
        "--host",
        "hami-webhook.hami-system.svc",
        cwd=tmp_path,
        env=env,
    )
    secret = bare_kube.get("secret", "hami-webhook-tls", namespace=home)
    assert set(secret["data"]) >= {"tls.crt", "tls.key", "ca.crt"}
