"""Every mode renders with the real kubectl kustomize and validates, strictly, against Kubernetes' schemas."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from app.devices.config import chart_defaults
from tests.manifests.conftest import MANIFESTS, Obj, one

# The oldest supported minor (matchConditions are GA since 1.30), a recent one, and the newest the package ships.
VERSIONS = ("1.30.0", "1.34.0", kubernetes_validate.latest_version())
# CRDs are not in Kubernetes' schemas; the cert-manager test checks those objects field by field.
CRD_GROUPS = ("cert-manager.io/",)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("mode", ["certgen", "cert-manager", "manual"])
def test_every_object_validates_strictly(rendered: dict[str, list[Obj]], mode: str, version: str) -> None:
    errors = []
    for obj in rendered[mode]:
        if obj["apiVersion"].startswith(CRD_GROUPS):
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message} at {list(exc.path)}")
    assert not errors, "\n".join(errors)


def test_newest_schema_is_at_least_the_newest_tested_minor() -> None:
    assert tuple(int(p) for p in VERSIONS[-1].split(".")[:2]) >= (1, 34)


@pytest.mark.parametrize("mode", ["certgen", "cert-manager", "manual"])
def test_namespaced_objects_live_in_hami_system(rendered: dict[str, list[Obj]], mode: str) -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}
    misplaced = [
        f"{o['kind']}/{o['metadata']['name']}"
        for o in rendered[mode]
        if o["kind"] not in cluster_scoped and o["metadata"].get("namespace") != "hami-system"
    ]
    assert not misplaced


def test_device_config_is_the_packaged_chart_defaults(base: list[Obj]) -> None:
    """kustomize cannot read app/devices/, so manifests/ keeps a copy; it must not drift."""
    source = (MANIFESTS / "base" / "device-config.yaml").read_text()
    assert yaml.safe_load(source) == chart_defaults()
    config_map = one(base, "ConfigMap", "hami-device-config")
    assert set(config_map["data"]) == {"device-config.yaml"}
    assert yaml.safe_load(config_map["data"]["device-config.yaml"]) == chart_defaults()
