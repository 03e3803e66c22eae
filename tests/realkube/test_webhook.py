"""The webhook as a user meets it: kube-apiserver calls it through the Service with certgen's caBundle, on each
pinned version (the newest, and the oldest the manifests support)."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest

from testbed.api import GPU, create, pod
from testbed.install import (
    IGNORE_LABEL,
    NAMESPACE,
    SECRET,
    Installed,
    apply,
    get,
    namespace,
    one,
    run_certgen,
)

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)


@pytest.fixture
def ns(any_installed: Installed) -> str:
    """A fresh namespace per test, so Pods from one test never meet another's."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    return any_installed.kube.namespace(name)


def test_gpu_pod_is_mutated_through_the_service(any_installed: Installed, ns: str) -> None:
    code, created, err = create(
        any_installed, ns, pod("gpu", GPU, metadata={"annotations": {"hami.io/core-policy": "force"}})
    )
    assert code == 0, err
    stored = get(any_installed.kube, "pod", "gpu", namespace=ns)
    assert stored["spec"] == created["spec"]
    assert stored["spec"]["schedulerName"] == "hami-scheduler"
    (container,) = stored["spec"]["containers"]
    # The API server stores quantities in canonical form (4000 -> 4k) before the webhook sees them.
    assert container["resources"]["requests"] == GPU | {"nvidia.com/gpumem": "4k"}
    assert container["env"] == [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}]
    assert stored["metadata"]["annotations"]["hami.io/gpu-type"] == "NVIDIA"
    # The API server found the webhook from the Service's ClusterIP alone: the Service has no endpoint (its
    # Pods are Pending, with no IP), and the API server dials ClusterIP:port, where the webhook listens here.
    selector = "kubernetes.io/service-name=hami-webhook"
    slices = any_installed.kube.get("endpointslices", "-l", selector, namespace=NAMESPACE)
    assert [s.get("endpoints") for s in slices["items"]] == [None]


def test_cpu_pod_is_untouched(any_installed: Installed, ns: str) -> None:
    code, created, err = create(any_installed, ns, pod("cpu", {"cpu": "1", "memory": "1Gi"}))
    assert code == 0, err
    assert created["spec"]["schedulerName"] == "default-scheduler"
    assert "annotations" not in created["metadata"]
    assert "env" not in created["spec"]["containers"][0]


@pytest.mark.parametrize(
    ("case", "obj", "message"),
    [
        (
            "privileged",
            pod("priv", GPU, container={"securityContext": {"privileged": True}}),
            'Error from server (Forbidden): error when creating "STDIN": admission webhook "pods.hami.io" '
            "denied the request: container cuda is privileged",
        ),
        (
            "node-bound",
            pod("bound", GPU, nodeName="node-1"),
            'Error from server (Forbidden): error when creating "STDIN": admission webhook "pods.hami.io" '
            "denied the request: pod has node assigned",
        ),
        (
            "fractional-count",
            pod("half", {"nvidia.com/gpu": "0.5"}),
            'Error from server (BadRequest): error when creating "STDIN": admission webhook "pods.hami.io" '
            "denied the request: ",
        ),
    ],
)
def test_denied_pods_get_the_message_kubectl_prints(
    any_installed: Installed, ns: str, case: str, obj: dict[str, Any], message: str
) -> None:
    code, _, err = create(any_installed, ns, obj)
    assert code == 1
    assert err.strip().startswith(message), err
    assert "cuda" in err or case != "fractional-count"
    assert any_installed.kube.kubectl("get", "pods", "-n", ns, "-o", "name").stdout == ""


def test_server_dry_run_is_mutated_and_not_stored(any_installed: Installed, ns: str) -> None:
    code, created, err = create(any_installed, ns, pod("dry", GPU), "--dry-run=server")
    assert code == 0, err
    assert created["spec"]["schedulerName"] == "hami-scheduler"
    assert created["metadata"]["annotations"]["hami.io/gpu-type"] == "NVIDIA"
    assert any_installed.kube.kubectl("get", "pods", "-n", ns, "-o", "name").stdout == ""


def test_generate_name_pod(any_installed: Installed, ns: str) -> None:
    code, created, err = create(any_installed, ns, pod("gpu-", GPU))
    assert code == 0, err
    name = created["metadata"]["name"]
    assert name.startswith("gpu-") and len(name) > len("gpu-")
    assert get(any_installed.kube, "pod", name, namespace=ns)["spec"]["schedulerName"] == "hami-scheduler"


def test_namespace_labelled_ignore_is_not_sent_to_the_webhook(any_installed: Installed) -> None:
    name = f"e2e-ignored-{uuid.uuid4().hex[:8]}"
    apply(any_installed.kube, namespace(name, IGNORE_LABEL))
    code, created, err = create(any_installed, name, pod("gpu", GPU))
    assert code == 0, err
    assert created["spec"]["schedulerName"] == "default-scheduler"


def test_v1beta1_only_configuration(any_installed: Installed) -> None:
    """The shipped configuration accepting only admission.k8s.io/v1beta1 reviews: the API server sends one."""
    name = f"e2e-v1beta1-{uuid.uuid4().hex[:8]}"
    kube = any_installed.kube
    # Only this configuration sees the namespace: the shipped one skips namespaces labelled "ignore".
    apply(kube, namespace(name, IGNORE_LABEL | {"e2e": name}))
    beta = copy.deepcopy(one(any_installed.objects, "MutatingWebhookConfiguration"))
    beta["metadata"]["name"] = name
    (hook,) = beta["webhooks"]
    hook |= {"admissionReviewVersions": ["v1beta1"], "namespaceSelector": {"matchLabels": {"e2e": name}}}
    apply(kube, beta)
    try:
        done = run_certgen(
            kube.kubeconfig_path, "patch", "--namespace", NAMESPACE, "--secret-name", SECRET, "--webhook-name", name
        )
        assert done.returncode == 0, done.stderr
        stored = get(kube, "mutatingwebhookconfiguration", name)
        assert stored["webhooks"][0]["admissionReviewVersions"] == ["v1beta1"]
        assert stored["webhooks"][0]["clientConfig"]["caBundle"] == any_installed.ca_bundle
        code, created, err = create(any_installed, name, pod("gpu", GPU))
        assert code == 0, err
        assert created["spec"]["schedulerName"] == "hami-scheduler"
    finally:
        kube.kubectl("delete", "mutatingwebhookconfiguration", name)


def test_system_namespaces_are_left_alone_by_name(any_installed: Installed) -> None:
    """Every namespace carries kubernetes.io/metadata.name (set by the API server), which the shipped
    namespaceSelector uses to keep kube-system away: a device Pod there is never sent to the webhook."""
    kube = any_installed.kube
    assert kube.get("namespace", "kube-system")["metadata"]["labels"]["kubernetes.io/metadata.name"] == "kube-system"
    code, created, err = create(any_installed, "kube-system", pod("gpu-", GPU), "--dry-run=server")
    assert code == 0, err
    assert created["spec"]["schedulerName"] == "default-scheduler"
