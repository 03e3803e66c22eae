"""Fixtures for tests against a real Kubernetes control plane (testbed/cluster.py), for every suite.

`real_kube` (session): the newest pinned version; `any_kube`: each pinned version in turn (newest and the
oldest the manifests support), for what must hold on both. Binaries are built by scripts/kube-binaries.sh the
first time unless KUBE_APISERVER_BIN, KUBE_CONTROLLER_MANAGER_BIN and ETCD_BIN point at binaries (then only one
version runs). With no Go toolchain the tests skip, except under CI=true, where they run or fail.
`installed` / `any_installed` (session): the webhook installed the way a user does it (testbed/install.py).
`promtool` (session): Prometheus's promtool, built like the binaries, for the alert rules' tests.
`go_toolchain` (session): Go's path, for a test whose own process builds the binaries (skip without, fail on CI).
`bare_kube` (session): a second cluster of the newest version with nothing installed, and `api` a FaultyProxy in
front of it (tests/realkube/faults.py), for certgen's and the quota's own tests; after each test the
MutatingWebhookConfigurations it made are deleted, so none is left to block another test's Pods.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

from testbed.cluster import (
    Binaries,
    RealKube,
    binaries_from_env,
    build_binaries,
    build_promtool,
    build_scheduler,
    pinned_versions,
)
from testbed.install import Installed, WebhookServer, install
from tests.realkube.faults import FaultyProxy

CI = os.environ.get("CI") == "true"
Built = TypeVar("Built")
VERSIONS = pinned_versions()
NEWEST, OLDEST = VERSIONS[-1], VERSIONS[0]


class Clusters:
    """Started clusters by version, made on first use and kept for the session."""

    def __init__(self, pytestconfig: pytest.Config, tmp: pytest.TempPathFactory):
        self._config, self._tmp = pytestconfig, tmp
        self.kubes: dict[str, RealKube] = {}
        self.installs: dict[str, Installed] = {}

    def kube(self, version: str, purpose: str = "") -> RealKube:
        key = f"{version}{purpose}"
        if key not in self.kubes:
            kube = RealKube(self._binaries(version), self._tmp.mktemp(f"kube-{key}"))
            self.kubes[key] = kube  # stopped at the end even if start() fails half-way
            kube.start()
        return self.kubes[key]

    def own(self, version: str, purpose: str) -> RealKube:
        """A cluster of its own for tests that install, switch or uninstall (the shared `installed` one must stay
        as it is); they bind port 443 on a Service's ClusterIP, which needs root (or CAP_NET_BIND_SERVICE)."""
        if os.geteuid() != 0 and not CI:
            pytest.skip("the webhook binds port 443 on its Service's ClusterIP: run as root")
        return self.kube(version, f"-{purpose}")

    def installed(self, version: str) -> Installed:
        if version not in self.installs:
            if os.geteuid() != 0 and not CI:
                pytest.skip("the webhook binds port 443 on the Service's ClusterIP: run as root")
            self.installs[version] = install(self.kube(version), self._tmp.mktemp(f"webhook-{version}"))
        return self.installs[version]

    def discard(self, kube: RealKube) -> None:
        """Stop a cluster of its own before the session ends (one that runs a scheduler holds a core's worth of
        processes, and no later test can share it)."""
        self.kubes = {key: kept for key, kept in self.kubes.items() if kept is not kube}
        kube.stop()

    def stop(self) -> None:
        """All at once: each control plane takes seconds to shut down, and none waits on another."""
        for done in self.installs.values():
            done.webhook.stop()
        with ThreadPoolExecutor(max_workers=len(self.kubes) or 1) as pool:
            for stopped in [pool.submit(kube.stop) for kube in self.kubes.values()]:
                stopped.result()

    def scheduler(self, version: str) -> Path:
        """kube-scheduler of `version`, built and cached like the control plane's binaries."""
        return self._build(build_scheduler, version)

    def promtool(self) -> Path:
        """promtool, built and cached like the control plane's binaries (one per session, whatever the version)."""
        return self._build(lambda _: build_promtool(), "")

    def _binaries(self, version: str) -> Binaries:
        from_env = binaries_from_env()
        if from_env is not None:
            return from_env
        return self._build(build_binaries, version)

    def _build(self, build: Callable[[str], Built], version: str) -> Built:
        # Cached binaries come back at once; the first build takes minutes: let its progress through.
        capture = self._config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            try:
                return build(version)
            except FileNotFoundError as exc:
                if CI:
                    pytest.fail(str(exc))
                pytest.skip(f"no Kubernetes binaries (install Go, or set KUBE_APISERVER_BIN...): {exc}")
            except RuntimeError as exc:
                pytest.fail(str(exc))


@pytest.fixture(scope="session")
def clusters(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    made = Clusters(pytestconfig, tmp_path_factory)
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture(scope="session")
def promtool(clusters: Clusters) -> Path:
    """Prometheus's promtool (`promtool test rules`), built from Go modules the first time."""
    return clusters.promtool()


@pytest.fixture(scope="session")
def go_toolchain() -> str:
    """The Go toolchain the Kubernetes binaries and HAMi's webhook are built with, for a test that builds them in a
    process of its own (the benchmark's smoke run): skips where Go is missing, except under CI=true."""
    found = shutil.which("go")
    if found is None:
        if CI:
            pytest.fail("Go is missing: the Kubernetes binaries and HAMi's webhook are built with it")
        pytest.skip("no Go toolchain (go): the Kubernetes binaries and HAMi's webhook are built with it")
    return found


@pytest.fixture(scope="session")
def real_kube(clusters: Clusters) -> RealKube:
    """The newest pinned Kubernetes, started (RBAC, static admin token, controllers, service CIDR in 127/8)."""
    return clusters.kube(NEWEST)


@pytest.fixture(scope="session", params=sorted({NEWEST, OLDEST}, reverse=True))
def any_kube(request: pytest.FixtureRequest, clusters: Clusters) -> RealKube:
    """Each pinned version that must hold the test: the newest, then the oldest the manifests support."""
    if binaries_from_env() is not None and request.param != NEWEST:
        pytest.skip("binaries from KUBE_APISERVER_BIN etc.: one version only")
    return clusters.kube(request.param)


@pytest.fixture(scope="session")
def installed(clusters: Clusters) -> Installed:
    """The webhook installed on the newest version; the API server reaches it through the Service's ClusterIP."""
    return clusters.installed(NEWEST)


@pytest.fixture(scope="session")
def any_installed(any_kube: RealKube, clusters: Clusters) -> Installed:
    """The webhook installed on each version of `any_kube`."""
    return clusters.installed(next(v for v, k in clusters.kubes.items() if k is any_kube))


@pytest.fixture(scope="session")
def bare_kube(clusters: Clusters) -> RealKube:
    """The newest version with nothing installed."""
    return clusters.kube(NEWEST, "-bare")


@pytest.fixture
def api(bare_kube: RealKube, tmp_path: Path) -> Iterator[FaultyProxy]:
    """A FaultyProxy in front of `bare_kube`; webhook configurations the test made are deleted after it."""
    before = _webhook_configurations(bare_kube)
    proxy = FaultyProxy(bare_kube).start()
    try:
        yield proxy
    finally:
        proxy.stop()
        made = _webhook_configurations(bare_kube) - before
        if made:
            bare_kube.kubectl("delete", "--wait=false", "mutatingwebhookconfigurations", *sorted(made))


def _webhook_configurations(kube: RealKube) -> set[str]:
    listed = kube.read("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations")
    return {item["metadata"]["name"] for item in listed["items"]}


@pytest.fixture
def namespaces(installed: Installed) -> Iterator[Callable[[str], str]]:
    """Make namespaces on the installed cluster, deleted after the test: controllers stop retrying what they
    were asked for there (a Deployment beyond its quota keeps calling the webhook), so no call outlives its test."""
    made: list[str] = []

    def make(prefix: str) -> str:
        made.append(installed.kube.namespace(f"{prefix}-{uuid.uuid4().hex[:8]}"))
        return made[-1]

    yield make
    if made:
        installed.kube.kubectl("delete", "namespace", "--wait=false", *made)


@pytest.fixture
def webhook(installed: Installed) -> Iterator[WebhookServer]:
    """The running webhook; restarted after a test that stopped it."""
    yield installed.webhook
    if not installed.webhook.running:
        installed.webhook.start()
