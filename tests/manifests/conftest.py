"""Render the manifests with the real ``kubectl kustomize``, once per TLS mode.

The overlays for the cert-manager and manual modes are the README's own examples (section "TLS modes"),
so what the README tells an admin to write is exactly what these tests render.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from certgen.local import write_local
from testbed import ROOT
from testbed.cluster import RealKube, kubectl_binary
from testbed.install import MANIFESTS, kustomize

README = ROOT / "README.md"
NAMESPACE = "hami-system"
# How README examples refer to this repository's manifests/ directory.
README_MANIFESTS = "../hami-webhook/manifests"

Obj = dict[str, Any]


def readme_overlays() -> dict[str, str]:
    """Overlay examples in README.md and docs/*.md: yaml blocks whose first line is ``# <name>/kustomization.yaml``."""
    text = "\n".join(path.read_text() for path in (README, *sorted((ROOT / "docs").glob("*.md"))))
    found = re.findall(r"^( *)```yaml\n\1# ([\w.-]+)/kustomization\.yaml\n(.*?)^\1```", text, re.S | re.M)
    blocks = {name: textwrap.dedent(body) for _, name, body in found}  # a block may be indented in a list
    assert len(blocks) == len(found), "two overlay examples share a name"
    return blocks


def write_overlay(directory: Path, name: str) -> Path:
    """README overlay ``name`` in ``directory``, pointing at this repository's manifests."""
    overlays = readme_overlays()
    assert name in overlays, f"README has no overlay example '# {name}/kustomization.yaml' (has {sorted(overlays)})"
    directory.mkdir(parents=True, exist_ok=True)
    relative = Path(*[".."] * len(directory.relative_to(directory.anchor).parts)) / MANIFESTS.relative_to(
        MANIFESTS.anchor
    )
    (directory / "kustomization.yaml").write_text(overlays[name].replace(README_MANIFESTS, str(relative)))
    return directory


def overlay_file(directory: Path, name: str, file: str) -> None:
    """The docs' example of ``file`` beside overlay ``name`` (a block whose first line is ``# name/file``, in
    README.md or docs/), written into ``directory``."""
    text = "\n".join(path.read_text() for path in (README, *sorted((ROOT / "docs").glob("*.md"))))
    found = re.search(rf"^```yaml\n# {re.escape(name)}/{re.escape(file)}\n(.*?)^```", text, re.S | re.M)
    assert found, f"no example '# {name}/{file}' in the docs"
    (directory / file).write_text(found.group(1))


def manual_overlay(directory: Path) -> Path:
    """The README's manual-mode overlay with a real CA and serving certificate next to it."""
    files = write_local(str(directory / "pki"), ("hami-webhook.hami-system.svc",))
    write_overlay(directory, "hami-manual")
    for key, source in (("tls.crt", files.cert), ("tls.key", files.key), ("ca.crt", files.ca_cert)):
        (directory / key).write_bytes(Path(source).read_bytes())
    return directory


@pytest.fixture(scope="session")
def overlays_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("overlays")


@pytest.fixture(scope="session")
def rendered(overlays_dir: Path) -> dict[str, list[Obj]]:
    """Every TLS mode's objects: certgen is ``manifests/`` itself, the others the README's overlays."""
    return {
        "certgen": kustomize(MANIFESTS),
        "cert-manager": kustomize(write_overlay(overlays_dir / "hami-cert-manager", "hami-cert-manager")),
        "manual": kustomize(manual_overlay(overlays_dir / "hami-manual")),
    }


@pytest.fixture(scope="session")
def base(rendered: dict[str, list[Obj]]) -> list[Obj]:
    """The default install (``kubectl apply -k manifests``)."""
    return rendered["certgen"]


def find(objects: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[Obj], kind: str, name: str) -> Obj:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def pod_specs(objects: list[Obj]) -> dict[str, Obj]:
    """Every Pod template, by "<kind>/<name>"."""
    specs = {}
    for obj in objects:
        spec = obj.get("spec", {})
        if obj["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        if "template" in spec:
            specs[f"{obj['kind']}/{obj['metadata']['name']}"] = spec["template"]["spec"]
    return specs


def containers(pod: Obj) -> list[Obj]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def kubectl_env(kubeconfig: str, cache: Path) -> dict[str, str]:
    """What the kubectl-only scripts run with: the venv's kubectl first on PATH, `kubeconfig`, and a discovery
    cache of their own."""
    path = f"{Path(kubectl_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "KUBECONFIG": kubeconfig, "KUBECACHEDIR": str(cache)}


def create(kube: RealKube, obj: Obj) -> Obj:
    """Create `obj` straight on the real server (not through a test's FaultyProxy); the stored object."""
    return json.loads(kube.kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(obj)).stdout)
