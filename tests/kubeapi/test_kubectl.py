"""The real kubectl binary against the fake server: discovery, apply/get/delete, re-apply, CRDs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.kubeapi import FakeKubeAPI

MANIFESTS = """\
apiVersion: v1
kind: Namespace
metadata:
  name: hami-system
---
apiVersion: v1
kind: Secret
metadata:
  name: hami-tls
  namespace: hami-system
type: kubernetes.io/tls
data:
  tls.crt: Y2VydA==
  tls.key: a2V5
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: hami-webhook
  namespace: hami-system
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: hami-webhook
webhooks:
  - name: vgpu.hami.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    clientConfig:
      service: {name: hami-webhook, namespace: hami-system, path: /mutate}
    rules:
      - {operations: ["CREATE"], apiGroups: [""], apiVersions: ["v1"], resources: ["pods"], scope: "*"}
"""
OBJECTS = [
    ("v1", "Namespace", "hami-system", None),
    ("v1", "Secret", "hami-tls", "hami-system"),
    ("v1", "ServiceAccount", "hami-webhook", "hami-system"),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "hami-webhook", None),
]


def versions(kube_api: FakeKubeAPI) -> list[str | None]:
    return [(o or {}).get("metadata", {}).get("resourceVersion") for o in (kube_api.get(*spec) for spec in OBJECTS)]


def test_apply_get_reapply_delete(kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    manifest = tmp_path / "all.yaml"
    manifest.write_text(MANIFESTS)
    applied = kube_api.kubectl("apply", "-f", str(manifest))
    assert applied.stdout.splitlines() == [
        "namespace/hami-system created",
        "secret/hami-tls created",
        "serviceaccount/hami-webhook created",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/hami-webhook created",
    ]
    before = versions(kube_api)
    assert None not in before

    got = json.loads(kube_api.kubectl("get", "mutatingwebhookconfiguration", "hami-webhook", "-o", "json").stdout)
    assert got["webhooks"][0]["timeoutSeconds"] == 10  # server-side defaults are visible
    assert "kubectl.kubernetes.io/last-applied-configuration" in got["metadata"]["annotations"]
    listed = json.loads(kube_api.kubectl("get", "secrets,sa", "-n", "hami-system", "-o", "json").stdout)
    assert [(i["kind"], i["metadata"]["name"]) for i in listed["items"]] == [
        ("Secret", "hami-tls"),
        ("ServiceAccount", "hami-webhook"),
    ]
    table = kube_api.kubectl("get", "ns").stdout
    assert table.split()[:2] == ["NAME", "AGE"] and "hami-system" in table

    (tmp_path / "kustomization.yaml").write_text("resources: [all.yaml]\n")
    reapplied = kube_api.kubectl("apply", "-k", str(tmp_path))
    assert len(reapplied.stdout.splitlines()) == 4
    assert all(line.endswith(" unchanged") for line in reapplied.stdout.splitlines())
    assert versions(kube_api) == before

    deleted = kube_api.kubectl("delete", "-f", str(manifest))  # waits for the namespace to terminate
    assert deleted.stdout.splitlines()[0] == 'namespace "hami-system" deleted'
    assert versions(kube_api) == [None] * 4


def test_apply_changes_and_custom_resources(kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    kube_api.register_resource("cert-manager.io/v1", "Issuer")
    manifest = tmp_path / "issuer.yaml"
    issuer = "apiVersion: cert-manager.io/v1\nkind: Issuer\nmetadata: {name: ca}\nspec: {ca: {secretName: %s}}\n"
    manifest.write_text(issuer % "one")
    kube_api.kubectl("apply", "-f", str(manifest))
    manifest.write_text(issuer % "two")
    assert kube_api.kubectl("apply", "-f", str(manifest)).stdout.strip() == "issuer.cert-manager.io/ca configured"
    stored = kube_api.get("cert-manager.io/v1", "Issuer", "ca")
    assert stored is not None and stored["spec"] == {"ca": {"secretName": "two"}}
    (patch,) = [r for r in kube_api.writes() if r.method == "PATCH"]
    assert patch.content_type == "application/merge-patch+json"  # kubectl knows CRDs take no strategic merge

    missing = kube_api.kubectl("get", "issuer", "nope", check=False)
    assert missing.returncode == 1
    assert missing.stderr.strip() == 'Error from server (NotFound): issuers.cert-manager.io "nope" not found'
    server_side = kube_api.kubectl("apply", "--server-side", "-f", str(manifest), check=False)
    assert server_side.returncode == 1 and "Server-side apply not available" in server_side.stderr


def test_kubectl_strict_field_validation(kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    manifest = tmp_path / "typo.yaml"
    manifest.write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringdata: {a: b}\n")
    strict = kube_api.kubectl("apply", "-f", str(manifest), check=False)
    assert strict.returncode == 1
    assert 'strict decoding error: unknown field "stringdata"' in strict.stderr
    warned = kube_api.kubectl("create", "--validate=warn", "-f", str(manifest))
    assert 'Warning: unknown field "stringdata"' in warned.stderr
    stored = kube_api.get("v1", "Secret", "s")
    assert stored is not None and "stringdata" not in stored and "data" not in stored
