"""The representative AdmissionReviews the benchmark sends, as kube-apiserver would build them.

Pods carry what real workloads carry (labels, env, probes, volume mounts, owner
references), so parsing and validation cost what they cost in a cluster, not
what a three-line Pod costs. The single-GPU review is about 3 KiB of JSON.
"""

from __future__ import annotations

import copy
from typing import Any

from app.preview.documents import admission_review
from testbed.pods import container, pod


def _container(name: str, limits: dict[str, str], *, env: int = 8, privileged: bool = False) -> dict[str, Any]:
    return container(
        name,
        limits,
        image=f"registry.example.com/ml/{name}:2024.06.1",
        env=[{"name": f"TRAINER_OPTION_{i}", "value": f"value-{i}"} for i in range(env)]
        + [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
        privileged=privileged or None,
        command=["python", "-m", "trainer"],
        args=["--epochs", "10", "--data", "/data/set"],
        ports=[{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}],
        volumeMounts=[
            {"name": "data", "mountPath": "/data", "readOnly": True},
            {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ],
        readinessProbe={"httpGet": {"path": "/ready", "port": 9100}, "periodSeconds": 10},
        terminationMessagePath="/dev/termination-log",
        terminationMessagePolicy="File",
        imagePullPolicy="IfNotPresent",
    )


def _pod(containers: list[dict[str, Any]], *, init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return pod(
        *containers,
        name="trainer-7d9f8b6c5-",
        namespace="ml",
        init=init,
        metadata={
            "labels": {"app.kubernetes.io/name": "trainer", "pod-template-hash": "7d9f8b6c5"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2024-06-01T10:00:00Z"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "trainer-7d9f8b6c5",
                    "uid": "0b0e1c9a-6b4f-4d39-9a55-3b1f3c2d9e11",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        restartPolicy="Never",
        terminationGracePeriodSeconds=30,
        dnsPolicy="ClusterFirst",
        serviceAccountName="trainer",
        securityContext={"runAsNonRoot": True, "fsGroup": 1000},
        tolerations=[
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
        volumes=[
            {"name": "data", "persistentVolumeClaim": {"claimName": "training-data"}},
            {"name": "kube-api-access-x7k2p", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
        ],
        priority=0,
        enableServiceLinks=True,
    )


def _review(obj: dict[str, Any]) -> dict[str, Any]:
    return admission_review(obj, uid="2c5f4f0e-8a1b-4c1e-9a3f-6f0a2b7d9c41")


GPU = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}


def reviews() -> dict[str, dict[str, Any]]:
    """name -> AdmissionReview, in the order the tables print them."""
    mixed = [
        _container("cuda", GPU),
        _container("mlu", {"cpu": "2", "cambricon.com/mlu": "1"}),
        _container("dcu", {"cpu": "2", "hygon.com/dcunum": "1", "hygon.com/dcumem": "2000"}),
        _container("sidecar", {"cpu": "100m", "memory": "64Mi"}),
    ]
    return {
        "cpu-only": _review(_pod([_container("web", {"cpu": "500m", "memory": "256Mi"})])),
        "single-gpu": _review(_pod([_container("cuda", GPU)])),
        "multi-vendor": _review(_pod(mixed, init=[_container("fetch", {"cpu": "1"}, env=2)])),
        "200-containers": _review(_pod([_container(f"c{i}", GPU, env=4) for i in range(200)])),
        "denied": _review(_pod([_container("cuda", GPU, privileged=True)])),
    }


def workload_reviews() -> dict[str, dict[str, Any]]:
    """name -> AdmissionReview of a Deployment CREATE whose template is one of ``reviews``' Pods (the workload
    check's cost: the same Pod review, the template copied and defaulted first)."""
    found = {}
    for name in ("single-gpu", "denied", "200-containers"):
        review = copy.deepcopy(reviews()[name])
        pod = review["request"]["object"]
        template = {"metadata": {k: pod["metadata"][k] for k in ("labels", "annotations")}, "spec": pod["spec"]}
        review["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
        review["request"]["resource"] = {"group": "apps", "version": "v1", "resource": "deployments"}
        review["request"]["object"] = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "trainer", "namespace": "ml"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app.kubernetes.io/name": "trainer"}},
                "template": template,
            },
        }
        found[f"deploy/{name}"] = review
    return found
