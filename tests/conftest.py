"""Fixtures every test may use: the Kubernetes-like API server of tests/kubeapi."""

import os

from tests.kubeapi.fixtures import kube_api, kube_client, kubeconfig  # noqa: F401

# A gunicorn a test starts serves /metrics on a free loopback port unless the test names one: never
# 0.0.0.0:9090, where parallel servers would fight over one port.
os.environ.setdefault("HAMI_METRICS_BIND", "127.0.0.1:0")
