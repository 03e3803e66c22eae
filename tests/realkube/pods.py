"""Pod manifests the tests create, and `kubectl create` as a user runs it."""

from __future__ import annotations

import json
from typing import Any

from tests.realkube.install import Installed

IMAGE = "nvidia/cuda:12.4.1-base-ubuntu22.04"


def pod(name: str, limits: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "cuda", "image": IMAGE}
    if limits:
        container["resources"] = {"limits": limits}
    container |= spec.pop("container", {})
    meta: dict[str, Any] = {"generateName": name} if name.endswith("-") else {"name": name}
    meta |= spec.pop("metadata", {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container]} | spec}


GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"}


def create(installed: Installed, ns: str, obj: dict[str, Any], *extra: str) -> tuple[int, dict[str, Any], str]:
    """`kubectl create -f - -o json`: exit code, the object the server returned, stderr."""
    done = installed.kube.kubectl(
        "create", "-n", ns, "-f", "-", "-o", "json", *extra, stdin=json.dumps(obj), check=False
    )
    return done.returncode, json.loads(done.stdout) if done.returncode == 0 else {}, done.stderr
