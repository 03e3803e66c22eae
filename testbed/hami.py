"""HAMi's own webhook and scheduler, built from its source by scripts/hami-reference.sh: the reference for
parity and speed, and the scheduler the allocation guard must let through.

`build()` returns the build (exit codes 2-4 of the script mean "cannot build here": `Unavailable`, which the
suites skip off CI and fail on with CI=true), `render()` HAMi's chart's device config for a set-up,
`manifests()` any of the chart's templates as `helm template` renders them, and `serve()` runs HAMi's webhook
over TLS on 127.0.0.1 until the block ends.
"""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed import ROOT
from testbed.ports import free_port
from testbed.servers import Server, stop, wait_ready

BUILD_SCRIPT = ROOT / "scripts" / "hami-reference.sh"
DEFAULT_SOURCE_DIR = ROOT.parent / "shared" / "hami-src"
# What the script's exit codes mean when it cannot build here (its header lists them).
CANNOT_BUILD = {2: "a HAMi source tree", 3: "a Go toolchain (go)", 4: "the Go module proxy"}


class Unavailable(Exception):
    """HAMi's webhook cannot be built on this machine; the message says what is missing."""


@dataclass(frozen=True)
class Reference:
    """One build of HAMi's webhook: the binary, the chart renderer, the chart, and where it came from."""

    bin: Path

    @property
    def webhook(self) -> Path:
        return self.bin / "hami-webhook"

    @property
    def scheduler(self) -> Path:
        """HAMi's cmd/scheduler: its scheduler extender (/filter, /bind) and webhook, unchanged."""
        return self.bin / "hami-scheduler"

    def registers(self, nodes: Sequence[tuple[str, Mapping[str, str]]], config: Path, *flags: str) -> list[Any]:
        """What HAMi's scheduler reads from each Node's annotations (tests/hami/registers/main.go): per node, per
        vendor the device config at ``config`` and ``flags`` switch on, its devices or its error."""
        command = [str(self.bin / "hami-registers"), f"--device-config-file={config}", *flags]
        listed = json.dumps([{"name": name, "annotations": dict(annotations)} for name, annotations in nodes])
        done = subprocess.run(command, input=listed, check=True, capture_output=True, text=True)
        return list(json.loads(done.stdout))

    @property
    def source(self) -> str:
        """The HAMi source that was built (a path), as the build recorded it."""
        return (self.bin / "SOURCE").read_text().splitlines()[0]

    def render(self, values: Mapping[str, str] = {}) -> str:
        """The chart's device-config.yaml, as `helm install --set key=value ...` would write it."""
        sets = [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]
        command = [str(self.bin / "render-device-config"), "--chart", str(self.bin / "chart"), *sets]
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout

    def manifests(
        self,
        kube_version: str,
        *templates: str,
        release: str = "hami",
        namespace: str = "kube-system",
        values: Mapping[str, str] = {},
    ) -> list[dict[str, Any]]:
        """The objects of the chart's `templates` (paths in the chart) as `helm template --kube-version` renders
        them with the chart's defaults, for `helm install RELEASE -n NAMESPACE` (HAMi's install guide: hami in
        kube-system)."""
        names = [arg for name in templates for arg in ("--template", name)]
        command = [str(self.bin / "render-device-config"), "--chart", str(self.bin / "chart"), *names]
        command += ["--kube-version", kube_version, "--release", release, "--namespace", namespace]
        command += [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]
        rendered = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        return [obj for obj in yaml.safe_load_all(rendered) if obj]


def build(source: str | Path | None = None) -> Reference:
    """scripts/hami-reference.sh [SOURCE]: built once into the user's cache, then reused (seconds)."""
    command = ["bash", str(BUILD_SCRIPT), *([str(source)] if source else [])]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode in CANNOT_BUILD:
        raise Unavailable(f"{BUILD_SCRIPT.name} needs {CANNOT_BUILD[done.returncode]} to build HAMi's webhook")
    if done.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} exited {done.returncode} (its progress is on stderr above)")
    return Reference(Path(done.stdout.strip().splitlines()[-1]))


@dataclass(frozen=True)
class Served:
    """A running HAMi webhook: where to reach it and the CA that signed its certificate."""

    port: int
    context: ssl.SSLContext
    process: Server

    def connection(self, timeout: float = 10) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=timeout)


def flags(
    device_config: Path,
    *,
    scheduler_name: str = "hami-scheduler",
    force_overwrite: bool = True,
    extra: Sequence[str] = (),
) -> list[str]:
    """HAMi's scheduler flags as its chart passes them (`--scheduler-name`, `--force-overwrite-...`, the config)."""
    return [
        f"--scheduler-name={scheduler_name}",
        f"--force-overwrite-default-scheduler={str(force_overwrite).lower()}",
        f"--device-config-file={device_config}",
        *extra,
    ]


@contextmanager
def serve(
    reference: Reference,
    cert: Path,
    key: Path,
    context: ssl.SSLContext,
    args: Sequence[str],
    port: int = 0,
    log: Path | None = None,
) -> Iterator[Served]:
    """HAMi's webhook with `args` (see `flags`) on 127.0.0.1, ready when the block starts, stopped after it.
    Its log goes to `log` when given (a benchmark's many lines), else it is kept in memory."""
    port = port or free_port()
    command = [str(reference.webhook), f"--http_bind=127.0.0.1:{port}", f"--cert_file={cert}", f"--key_file={key}"]
    process = Server([*command, *args], env={}, log=log)
    served = Served(port, context, process)
    try:
        wait_ready(port, context, process, path="/healthz", name="HAMi's webhook")  # HAMi's has no /readyz
        yield served
    finally:
        stop(process, timeout=10)
