"""A fake Kubernetes API server for tests.

Use the pytest fixtures (``from tests.kubeapi.fixtures import kube_api, kube_client, kubeconfig``)::

    def test_x(kube_api, kubeconfig):
        kube_api.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "default"}})
        kubernetes.config.load_kube_config(config_file=kubeconfig)   # or use the kube_client fixture
        ...
        assert [r.method for r in kube_api.writes()] == ["PATCH"]

or ``with FakeKubeAPI(history_size=10) as api:`` for non-default settings. kubectl works through
``api.kubectl(...)`` or ``kubectl --kubeconfig=<api.kubeconfig_path> --cache-dir=<tmp>``.
Modules: ``server`` (FakeKubeAPI), ``httpd`` (HTTP/watch streaming), ``routes`` (REST verbs),
``store`` (objects, resourceVersions, watch history), ``resources`` (the kind table), ``kinds``
(defaulting/validation), ``schemas`` (known fields), ``patch``, ``selectors``, ``discovery``, ``errors``,
``admission`` (mutating webhooks called on CREATE, as kube-apiserver calls them, with the selectors and
matchConditions of app/matching.py).
"""

from tests.kubeapi.errors import ApiError
from tests.kubeapi.resources import ResourceType
from tests.kubeapi.routes import RecordedRequest
from tests.kubeapi.server import FakeKubeAPI

__all__ = ["ApiError", "FakeKubeAPI", "RecordedRequest", "ResourceType"]
