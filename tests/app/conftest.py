from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml

from app.settings import Settings
from certgen.local import LocalFiles, write_local


@pytest.fixture
def settings() -> Settings:
    """The shipped defaults: HAMi chart device config, hami-scheduler."""
    return Settings.from_env({})


@pytest.fixture
def make_settings() -> Callable[..., Settings]:
    """Settings from environment variables, e.g. make_settings(HAMI_ENABLE_ASCEND="true")."""
    return lambda **env: Settings.from_env(env)


@pytest.fixture
def configured(tmp_path) -> Callable[..., Settings]:
    """Settings with a device-config YAML merged over the chart defaults, e.g. configured({"nvidia": {...}})."""

    def build(config: dict, **env: str) -> Settings:
        path = tmp_path / "device-config.yaml"
        path.write_text(yaml.safe_dump(config))
        return Settings.from_env({"HAMI_DEVICE_CONFIG": str(path), **env})

    return build


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> LocalFiles:
    """A CA and a serving pair for localhost/127.0.0.1, shared by a module's gunicorn tests."""
    return write_local(tmp_path_factory.mktemp("tls"), ["localhost", "127.0.0.1"])
