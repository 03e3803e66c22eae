"""The Kubernetes client configuration both tools load: in-cluster first, else a kubeconfig."""

from __future__ import annotations

import os

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

LOAD_ERRORS = (ConfigException, OSError)
"""What ``load_configuration`` raises when neither an in-cluster service account nor a kubeconfig works."""


def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> client.Configuration:
    """``kubeconfig`` if given (or a ``context`` of $KUBECONFIG or ~/.kube/config); else the in-cluster service
    account, else $KUBECONFIG or ~/.kube/config.

    Raises one of LOAD_ERRORS. $KUBECONFIG is read here, at call time: the client reads it once at its own
    import, before a test or a wrapper may have set it.
    """
    configuration = client.Configuration()
    if kubeconfig or context:
        path = kubeconfig or os.environ.get("KUBECONFIG") or None
        config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        return configuration
    try:
        config.load_incluster_config(client_configuration=configuration)
    except ConfigException:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None, client_configuration=configuration)
    return configuration
