"""Fixtures every test may use: the Kubernetes-like API server of tests/kubeapi."""

from tests.kubeapi.fixtures import kube_api, kube_client, kubeconfig  # noqa: F401
