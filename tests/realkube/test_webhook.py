"""The webhook as a user meets it: kube-apiserver 1.20 calls it through the Service with certgen's caBundle."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest

from tests.realkube.install import (
    CONFIGURATION,
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
from tests.realkube.pods import GPU, create, pod


@pytest.fixture
def ns(installed: Installed) -> str:
    """A fresh namespace per test, so Pods from one test never meet another's."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    apply(installed.kube, namespace(name))
    return name


def test_gpu_pod_is_mutated_through_the_service(installed: Installed, ns: str) -> None:
    code, created, err = create(
        installed, ns, pod("gpu", GPU, metadata={"annotations": {"hami.io/core-policy": "force"}})
    )
    assert code == 0, err
    stored = get(installed.kube, "pod", "gpu", namespace=ns)
    assert stored["spec"] == created["spec"]
    assert stored["spec"]["schedulerName"] == "hami-scheduler"
    (container,) = stored["spec"]["containers"]
    # The API server stores quantities in canonical form (4000 -> 4k) before the webhook sees them.
    assert container["resources"]["requests"] == GPU | {"nvidia.com/gpumem": "4k"}
    assert container["env"] == [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}]
    assert stored["metadata"]["annotations"]["hami.io/gpu-type"] == "NVIDIA"
    # The API server found the webhook from the Service's ClusterIP alone: nothing made Endpoints.
    endpoints = installed.kube.kubectl("get", "endpoints", "hami-webhook", "-n", NAMESPACE, check=False)
    assert endpoints.returncode != 0 and "NotFound" in endpoints.stderr


def test_cpu_pod_is_untouched(installed: Installed, ns: str) -> None:
    code, created, err = create(installed, ns, pod("cpu", {"cpu": "1", "memory": "1Gi"}))
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
    installed: Installed, ns: str, case: str, obj: dict[str, Any], message: str
) -> None:
    code, _, err = create(installed, ns, obj)
    assert code == 1
    assert err.strip().startswith(message), err
    assert "cuda" in err or case != "fractional-count"
    assert installed.kube.kubectl("get", "pods", "-n", ns, "-o", "name").stdout == ""


def test_server_dry_run_is_mutated_and_not_stored(installed: Installed, ns: str) -> None:
    code, created, err = create(installed, ns, pod("dry", GPU), "--dry-run=server")
    assert code == 0, err
    assert created["spec"]["schedulerName"] == "hami-scheduler"
    assert created["metadata"]["annotations"]["hami.io/gpu-type"] == "NVIDIA"
    assert installed.kube.kubectl("get", "pods", "-n", ns, "-o", "name").stdout == ""


def test_generate_name_pod(installed: Installed, ns: str) -> None:
    code, created, err = create(installed, ns, pod("gpu-", GPU))
    assert code == 0, err
    name = created["metadata"]["name"]
    assert name.startswith("gpu-") and len(name) > len("gpu-")
    assert get(installed.kube, "pod", name, namespace=ns)["spec"]["schedulerName"] == "hami-scheduler"


def test_namespace_labelled_ignore_is_not_sent_to_the_webhook(installed: Installed) -> None:
    name = f"e2e-ignored-{uuid.uuid4().hex[:8]}"
    apply(installed.kube, namespace(name, IGNORE_LABEL))
    code, created, err = create(installed, name, pod("gpu", GPU))
    assert code == 0, err
    assert created["spec"]["schedulerName"] == "default-scheduler"


def test_v1beta1_only_configuration(installed: Installed) -> None:
    """The shipped configuration written through admissionregistration/v1beta1, accepting only v1beta1 reviews."""
    name = f"e2e-v1beta1-{uuid.uuid4().hex[:8]}"
    kube = installed.kube
    # Only this configuration sees the namespace: the shipped one skips namespaces labelled "ignore".
    apply(kube, namespace(name, IGNORE_LABEL | {"e2e": name}))
    beta = copy.deepcopy(one(installed.objects, "MutatingWebhookConfiguration"))
    beta["apiVersion"] = "admissionregistration.k8s.io/v1beta1"
    beta["metadata"]["name"] = name
    (hook,) = beta["webhooks"]
    hook |= {"admissionReviewVersions": ["v1beta1"], "namespaceSelector": {"matchLabels": {"e2e": name}}}
    del hook["matchConditions"], hook["objectSelector"]
    apply(kube, beta)
    try:
        done = run_certgen(
            kube.kubeconfig_path, "patch", "--namespace", NAMESPACE, "--secret-name", SECRET, "--webhook-name", name
        )
        assert done.returncode == 0, done.stderr
        stored = get(kube, "mutatingwebhookconfigurations.v1beta1.admissionregistration.k8s.io", name)
        assert stored["webhooks"][0]["admissionReviewVersions"] == ["v1beta1"]
        assert stored["webhooks"][0]["clientConfig"]["caBundle"] == installed.ca_bundle
        code, created, err = create(installed, name, pod("gpu", GPU))
        assert code == 0, err
        assert created["spec"]["schedulerName"] == "hami-scheduler"
    finally:
        kube.kubectl("delete", "mutatingwebhookconfiguration", name)


def test_match_conditions_are_dropped_by_1_20(installed: Installed) -> None:
    """matchConditions is 1.27+. kubectl checks against 1.20's schema and refuses it; sent without that check
    (as the install does), 1.20 drops the field silently, so every Pod the selectors let through is sent
    to the webhook. tests/manifests and tests/kubeapi keep covering the CEL behaviour of newer servers."""
    shipped = one(installed.objects, "MutatingWebhookConfiguration")
    assert [c["name"] for c in shipped["webhooks"][0]["matchConditions"]] == ["requests-accelerator", "not-mirror-pod"]
    refused = installed.kube.kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(shipped), check=False)
    assert refused.returncode == 1
    assert 'unknown field "matchConditions" in io.k8s.api.admissionregistration.v1.MutatingWebhook' in refused.stderr
    (stored,) = get(installed.kube, "mutatingwebhookconfiguration", CONFIGURATION)["webhooks"]
    assert "matchConditions" not in stored


def test_namespaces_have_no_name_label_in_1_20(installed: Installed, ns: str) -> None:
    """1.21+ labels every namespace kubernetes.io/metadata.name; 1.20 does not, so the shipped
    namespaceSelector's exclusion of kube-system by that label matches nothing here."""
    assert "kubernetes.io/metadata.name" not in (get(installed.kube, "namespace", ns)["metadata"].get("labels") or {})
    assert "kubernetes.io/metadata.name" not in (
        get(installed.kube, "namespace", "kube-system")["metadata"].get("labels") or {}
    )
