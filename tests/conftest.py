"""Fixtures every test may use: the real Kubernetes control plane of tests/realkube, HAMi's examples and its
own code built from source."""

import os
from pathlib import Path

import pytest

from testbed import HAMI_EXAMPLES, hami
from tests.realkube.fixtures import (  # noqa: F401
    any_installed,
    any_kube,
    api,
    bare_kube,
    clusters,
    go_toolchain,
    installed,
    namespaces,
    promtool,
    real_kube,
    webhook,
)
from tests.tiers import pytest_collection_modifyitems, tier_guard  # noqa: F401  (the tiers)

# A gunicorn a test starts serves /metrics on a free loopback port unless the test names one: never
# 0.0.0.0:9090, where parallel servers would fight over one port.
os.environ.setdefault("HAMI_METRICS_BIND", "127.0.0.1:0")


@pytest.fixture(scope="session")
def hami_examples() -> Path:
    """HAMi's own example manifests, read where they are (shared/ beside the repository), never copied into it.

    A machine without them skips; under CI=true (where shared/ is always beside the clone) they must be there.
    """
    if not (HAMI_EXAMPLES / "examples").is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"HAMi's examples are missing: expected them in {HAMI_EXAMPLES}")
        pytest.skip(f"HAMi's examples are not at {HAMI_EXAMPLES}")
    return HAMI_EXAMPLES


@pytest.fixture(scope="session")
def hami_reference(pytestconfig: pytest.Config) -> hami.Reference:
    """HAMi's webhook, scheduler and chart renderer built from its source (testbed/hami.py), once a session.

    A machine that cannot build them (no source, Go or module proxy) skips; under CI=true they must build.
    """
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # the first build takes minutes: let its progress through
        try:
            return hami.build()
        except hami.Unavailable as exc:
            if os.environ.get("CI") == "true":
                pytest.fail(f"HAMi's code must build under CI=true: {exc}")
            pytest.skip(str(exc))
