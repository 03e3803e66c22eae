"""Fixtures every test may use: the real Kubernetes control plane of tests/realkube."""

import os

from tests.realkube.fixtures import (  # noqa: F401
    any_installed,
    any_kube,
    api,
    bare_kube,
    clusters,
    installed,
    namespaces,
    real_kube,
    webhook,
)

# A gunicorn a test starts serves /metrics on a free loopback port unless the test names one: never
# 0.0.0.0:9090, where parallel servers would fight over one port.
os.environ.setdefault("HAMI_METRICS_BIND", "127.0.0.1:0")
