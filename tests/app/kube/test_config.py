"""app/kube/config.py: the client configuration, in-cluster else a kubeconfig, and how its absence is told."""

from __future__ import annotations

import pytest

from app.kube.config import LOAD_ERRORS, load_configuration


def test_no_configuration_is_one_of_the_load_errors(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(LOAD_ERRORS):
        load_configuration()
    with pytest.raises(LOAD_ERRORS):
        load_configuration(str(tmp_path / "absent"))
