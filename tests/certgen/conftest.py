"""Fixtures for certgen tests: the fake API server, a seeded namespace, and an in-process runner."""

from __future__ import annotations

import base64

import pytest

from certgen import cli
from tests.certgen.helpers import NAMESPACE, Certgen, Run
from tests.kubeapi.server import FakeKubeAPI


@pytest.fixture
def api(kube_api: FakeKubeAPI) -> FakeKubeAPI:
    """The fake API server with the webhook's namespace."""
    kube_api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return kube_api


@pytest.fixture
def certgen(api: FakeKubeAPI, capsys: pytest.CaptureFixture[str]) -> Certgen:
    """Run ``certgen COMMAND ARGS`` in-process against `api` (``--kubeconfig`` added for cluster commands).

    Every run is checked for leaked key material: no PEM key header and no
    Secret value stored on the server may appear in the output.
    """

    def run(*argv: str) -> Run:
        args = list(argv)
        command = next((i for i, arg in enumerate(args) if arg in ("create", "patch", "failure-policy")), None)
        if command is not None:
            args[command + 1 : command + 1] = ["--kubeconfig", api.kubeconfig_path]
        code = cli.main(args)
        out, err = capsys.readouterr()
        output = out + err
        assert "PRIVATE KEY" not in output
        for value in _secret_values(api):
            assert value[:40] not in output
        return Run(code, err)

    return run


def _secret_values(api: FakeKubeAPI) -> list[str]:
    values = []
    for secret in api.list("v1", "Secret"):
        for encoded in (secret.get("data") or {}).values():
            values.append(encoded)
            values.extend(
                line for line in base64.b64decode(encoded).decode(errors="replace").splitlines() if len(line) > 40
            )
    return values
