"""Fixtures for tests against a real kube-apiserver v1.20.2 (see tests/realkube/cluster.py).

`real_kube` (session): etcd + kube-apiserver, built by scripts/kube-apiserver.sh the first time unless
KUBE_APISERVER_BIN and ETCD_BIN point at binaries. Under CI=true it runs or fails, never skips.
`installed` (session): the webhook installed the way a user does it — namespace, Service, `certgen create`,
the MutatingWebhookConfiguration, `certgen patch`, and `hami-webhook serve` bound on the Service's ClusterIP.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.realkube.cluster import Binaries, RealKube, binaries_from_env, build_binaries
from tests.realkube.install import Installed, WebhookServer, install


def _binaries(pytestconfig: pytest.Config) -> Binaries:
    from_env = binaries_from_env()
    if from_env is not None:
        return from_env
    ci = os.environ.get("CI") == "true"
    if not ci and shutil.which("apt-get") is None:
        pytest.skip("no kube-apiserver: set KUBE_APISERVER_BIN and ETCD_BIN, or run scripts/kube-apiserver.sh (Debian)")
    # The first build takes minutes: let its progress through pytest's capture.
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        try:
            return build_binaries()
        except RuntimeError as exc:
            pytest.fail(str(exc)) if ci else pytest.skip(f"cannot build kube-apiserver here: {exc}")


@pytest.fixture(scope="session")
def real_kube(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealKube]:
    """A started kube-apiserver 1.20.2 (RBAC, static admin token, TokenRequest, service CIDR in 127/8)."""
    kube = RealKube(_binaries(pytestconfig), tmp_path_factory.mktemp("realkube"))
    try:
        kube.start()
        yield kube
    finally:
        kube.stop()


@pytest.fixture(scope="session")
def installed(real_kube: RealKube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """The webhook installed and serving; the API server reaches it through the Service's ClusterIP."""
    if os.geteuid() != 0 and os.environ.get("CI") != "true":
        pytest.skip("the webhook binds port 443 on the Service's ClusterIP: run as root")
    setup = install(real_kube, tmp_path_factory.mktemp("webhook"))
    try:
        yield setup
    finally:
        setup.webhook.stop()


@pytest.fixture
def webhook(installed: Installed) -> Iterator[WebhookServer]:
    """The running webhook; restarted after a test that stopped it."""
    yield installed.webhook
    if not installed.webhook.running:
        installed.webhook.start()
