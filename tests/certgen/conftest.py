"""Fixtures for certgen tests: the real API server (tests/realkube), a namespace of the test's own, and an
in-process runner whose requests go through the FaultyProxy `api`."""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from certgen import cli
from testbed.cluster import RealKube
from tests.certgen.helpers import MUTATING, VALIDATING, Certgen, Cluster, Run, namespace
from tests.realkube.faults import FaultyProxy


@pytest.fixture(autouse=True)
def _certgen_log_handlers() -> Iterator[None]:
    """certgen's CLI binds its log handler to the stderr of the moment, which under pytest is a capture closed
    after the test; later tests that log through certgen (write_local) would hit the closed file."""
    logger = logging.getLogger("certgen")
    handlers, level, propagate = logger.handlers[:], logger.level, logger.propagate
    yield
    logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate


@pytest.fixture(scope="session")
def bare_client(bare_kube: RealKube) -> Iterator[client.ApiClient]:
    """The official client, as admin, straight to `bare_kube` (closed at the end: unclosed pools warn)."""
    with config.new_client_from_config(config_file=bare_kube.kubeconfig_path) as api_client:
        yield api_client


@pytest.fixture
def cluster(bare_kube: RealKube, bare_client: client.ApiClient) -> Iterator[Cluster]:
    """A new namespace and a webhook configuration name no other test uses; both removed afterwards."""
    suffix = uuid.uuid4().hex[:8]
    with namespace(bare_client, f"certgen-{suffix}") as name:
        made = Cluster(bare_kube, bare_client, name, f"hami-webhook-{suffix}")
        try:
            yield made
        finally:
            for kind in (MUTATING, VALIDATING):
                try:
                    made.delete(kind, made.webhook)
                except ApiException as exc:
                    if exc.status != 404:
                        raise


@pytest.fixture
def certgen(
    api: FaultyProxy, bare_client: client.ApiClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Certgen:
    """Run ``certgen COMMAND ARGS`` in-process through `api` (``--kubeconfig`` added for cluster commands that
    do not name one).

    Every run is checked for leaked key material: no PEM key header and no
    Secret value stored on the server may appear in the output.
    """
    kubeconfig = api.kubeconfig(tmp_path / "proxy.kubeconfig")

    def run(*argv: str) -> Run:
        args = list(argv)
        command = next((i for i, arg in enumerate(args) if arg in ("create", "patch", "failure-policy")), None)
        if command is not None and "--kubeconfig" not in args:
            args[command + 1 : command + 1] = ["--kubeconfig", kubeconfig]
        code = cli.main(args)
        out, err = capsys.readouterr()
        output = out + err
        assert "PRIVATE KEY" not in output
        for value in _secret_values(bare_client):
            assert value[:40] not in output
        return Run(code, err)

    return run


def _secret_values(api_client: client.ApiClient) -> list[str]:
    values: list[str] = []
    raw: Any = client.CoreV1Api(api_client).list_secret_for_all_namespaces(_preload_content=False)
    for secret in json.loads(raw.data)["items"]:
        for encoded in (secret.get("data") or {}).values():
            values.append(encoded)
            values.extend(
                line for line in base64.b64decode(encoded).decode(errors="replace").splitlines() if len(line) > 40
            )
    return values
