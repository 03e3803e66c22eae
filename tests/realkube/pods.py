"""Pod manifests the tests create, and `kubectl create` as a user runs it."""

from __future__ import annotations

import json
from typing import Any

from tests.realkube.install import Installed
from tests.support import pods as support

IMAGE = "nvidia/cuda:12.4.1-base-ubuntu22.04"


def pod(name: str, limits: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A one-container Pod as a user writes it for `kubectl create -n`: the API server fills in the rest."""
    ctr = support.container("cuda", limits or None, image=IMAGE, defaulted=False) | spec.pop("container", {})
    return support.pod(ctr, name=name, namespace=None, scheduler=None, metadata=spec.pop("metadata", None), **spec)


GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"}


def create(installed: Installed, ns: str, obj: dict[str, Any], *extra: str) -> tuple[int, dict[str, Any], str]:
    """`kubectl create -f - -o json`: exit code, the object the server returned, stderr."""
    done = installed.kube.kubectl(
        "create", "-n", ns, "-f", "-", "-o", "json", *extra, stdin=json.dumps(obj), check=False
    )
    return done.returncode, json.loads(done.stdout) if done.returncode == 0 else {}, done.stderr
