"""Run a stored Pod template's containers as local processes, doing what the kubelet does for them.

There is no kubelet in the test cluster (testbed/cluster.py), so the install tests run what it would:
the commands, args and env of a Pod (or Pod template) as stored by the API server (``$(VAR)`` expanded like the
kubelet, ``fieldRef`` to the namespace or the Pod's name resolved), its Secret and ConfigMap volumes as files in
a temp dir with paths under their mount points (``subPath`` too) pointed there, and a kubeconfig carrying a
TokenRequest token of the Pod's own ServiceAccount in place of the projected token. Listening addresses are
moved to loopback addresses.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.cluster import RealKube
from testbed.ports import free_port

Obj = dict[str, Any]
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: defined names are replaced, ``$$`` is a literal ``$``,
    undefined references stay as written."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REFERENCE.sub(one, text)


@dataclass
class Container:
    """One container of a Pod template, ready to run here."""

    argv: list[str]
    env: dict[str, str]
    ports: dict[str, tuple[str, int]] = field(default_factory=dict)  # container port name -> loopback address
    volumes: list[Volume] = field(default_factory=list)

    def sync(self, kube: RealKube) -> None:
        """Bring the Secret and ConfigMap volumes up to date, as the kubelet does every minute or so."""
        for volume in self.volumes:
            volume.write(kube)


@dataclass(frozen=True)
class Volume:
    """A Secret or ConfigMap volume, laid out as the kubelet does: the keys are symlinks into ``..data``,
    itself a symlink swapped atomically to a new timestamped directory on each update."""

    kind: str  # "secret" | "configmap"
    name: str
    namespace: str
    directory: Path

    def write(self, kube: RealKube) -> None:
        data = kube.get(self.kind, self.name, namespace=self.namespace).get("data") or {}
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = self.directory / f"..{time.time_ns()}"
        stamp.mkdir()
        for key, value in data.items():
            (stamp / key).write_bytes(base64.b64decode(value) if self.kind == "secret" else value.encode())
        swap = self.directory / "..data_tmp"
        swap.unlink(missing_ok=True)
        swap.symlink_to(stamp.name)
        swap.replace(self.directory / "..data")
        for key in data:
            link = self.directory / key
            if not link.is_symlink():
                link.symlink_to(Path("..data") / key)


def _field_ref(path: str, namespace: str, template: Obj) -> str:
    if path == "metadata.namespace":
        return namespace
    if path == "metadata.name" and "name" in template["metadata"]:  # a Pod's; a template has none
        return str(template["metadata"]["name"])
    raise AssertionError(f"fieldRef {path} is not modelled by the install test")


def _volumes(kube: RealKube, template: Obj, namespace: str, root: Path) -> dict[str, Volume]:
    """Volume name -> its Secret's or ConfigMap's keys as files under `root`."""
    found: dict[str, Volume] = {}
    for volume in template["spec"].get("volumes") or []:
        if "secret" in volume:
            source = Volume("secret", volume["secret"]["secretName"], namespace, root / volume["name"])
        elif "configMap" in volume:
            source = Volume("configmap", volume["configMap"]["name"], namespace, root / volume["name"])
        else:
            continue
        source.write(kube)
        found[volume["name"]] = source
    return found


def container(
    kube: RealKube,
    template: Obj,
    name: str,
    namespace: str,
    root: Path,
    binaries: dict[str, str] | None = None,
    listen: dict[str, tuple[str, int]] | None = None,
    programs: dict[str, Path] | None = None,
) -> Container:
    """The container ``name`` (init or regular) of a Pod ``template`` as a local process description.

    ``command[0]`` is looked up next to this Python (the venv's console scripts), so ``certgen`` and
    ``hami-webhook`` are the repository's own, unless ``programs`` names its file (an image's binary built
    here); ``binaries`` may name the image's ENTRYPOINT for containers that only give ``args``. In env values
    and ``--flag=value`` arguments, paths under a mount point and listening addresses are localized.
    """
    spec = template["spec"]
    ctr = next(c for c in (spec.get("initContainers") or []) + spec["containers"] if c["name"] == name)
    volumes = _volumes(kube, template, namespace, root / name)
    mounts = {
        m["mountPath"].rstrip("/"): volumes[m["name"]].directory / m.get("subPath", "")
        for m in ctr.get("volumeMounts") or []
        if m["name"] in volumes
    }
    chosen = listen or {}
    ports = {
        p.get("name", str(p["containerPort"])): chosen.get(p.get("name", ""), ("127.0.0.1", free_port()))
        for p in ctr.get("ports") or []
    }
    by_number = {str(p["containerPort"]): ports[p.get("name", str(p["containerPort"]))] for p in ctr.get("ports") or []}
    env: dict[str, str] = {}
    for var in ctr.get("env") or []:
        if "valueFrom" in var:
            value = _field_ref(var["valueFrom"]["fieldRef"]["fieldPath"], namespace, template)
        else:
            value = expand(var.get("value", ""), env)
        env[var["name"]] = _localize(value, mounts, by_number)
    command = ctr.get("command") or [(binaries or {})[ctr["name"]]]
    args = [_localize_flag(expand(a, env), mounts, by_number) for a in command[1:] + (ctr.get("args") or [])]
    return Container([_executable(expand(command[0], env), programs or {}), *args], env, ports, list(volumes.values()))


def _localize(value: str, mounts: dict[str, Path], ports: dict[str, tuple[str, int]]) -> str:
    """Paths under a mount point go to its temp dir; ``0.0.0.0:<containerPort>`` (or ``:<containerPort>``)
    to its loopback address."""
    for mount, directory in mounts.items():
        if value == mount or value.startswith(mount + "/"):
            return str(directory) + value[len(mount) :]
    host, colon, port = value.rpartition(":")
    if colon and host in ("0.0.0.0", "") and port in ports:
        return "{}:{}".format(*ports[port])
    return value


def _localize_flag(arg: str, mounts: dict[str, Path], ports: dict[str, tuple[str, int]]) -> str:
    """``--flag=value`` with its value localized; any other argument as it is."""
    flag, equals, value = arg.partition("=")
    return f"{flag}={_localize(value, mounts, ports)}" if equals and flag.startswith("-") else arg


def _executable(name: str, programs: dict[str, Path]) -> str:
    if name in programs:
        return str(programs[name])
    beside = Path(sys.executable).with_name(name)
    assert beside.exists(), f"{name} is not installed next to {sys.executable}"
    return str(beside)


def run(ctr: Container, kubeconfig: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a container to completion, authenticated by `kubeconfig` (its ServiceAccount's token)."""
    return subprocess.run(
        ctr.argv, env=process_env(ctr, kubeconfig), capture_output=True, text=True, timeout=timeout, check=False
    )


def process_env(ctr: Container, kubeconfig: str) -> dict[str, str]:
    """The container's env plus what a process needs here; in-cluster detection is kept off."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "HAMI_"))}
    return {**base, **ctr.env, "KUBECONFIG": kubeconfig}
