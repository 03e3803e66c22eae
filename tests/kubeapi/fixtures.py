"""pytest fixtures for the fake API server; import them in a conftest:

from tests.kubeapi.fixtures import kube_api, kube_client, kubeconfig  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.kubeapi.server import FakeKubeAPI


@pytest.fixture
def kube_api(tmp_path: Path) -> Iterator[FakeKubeAPI]:
    """A started fake API server with namespaces "default" and "kube-system"; stopped afterwards.

    Fails the test if the server hit an unexpected exception (a bug or a failing ``before`` callback).
    """
    api = FakeKubeAPI(kubeconfig_dir=tmp_path / "kube-api").start()
    try:
        yield api
    finally:
        api.stop()
        # load_kube_config() in a test makes this server the process-wide default; don't leak a dead URL.
        if client.Configuration.get_default().host == api.url:
            client.Configuration.set_default(None)
    if api.errors:
        pytest.fail(f"fake kube-apiserver raised: {api.errors!r}")


@pytest.fixture
def kubeconfig(kube_api: FakeKubeAPI) -> str:
    """Path of a kubeconfig (``server: http://127.0.0.1:PORT``, no auth) for ``kube_api``."""
    return kube_api.kubeconfig_path


@pytest.fixture
def kube_client(kubeconfig: str) -> Iterator[client.ApiClient]:
    """An official-client ``ApiClient`` for ``kube_api`` that leaves the global default config alone
    and is closed afterwards (unclosed pools trip ``filterwarnings = error``)."""
    with config.new_client_from_config(config_file=kubeconfig) as api_client:
        yield api_client
