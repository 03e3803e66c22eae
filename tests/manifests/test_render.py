"""Every mode renders with the real kubectl kustomize and validates, strictly, against Kubernetes' schemas."""

from __future__ import annotations

import json
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from app.admission.devices.config import chart_defaults, load_device_config
from app.preview.policies import NAMING_THE_SCHEDULER, Inputs, render
from app.preview.scope import load_scope
from app.settings import Settings
from testbed.install import kustomize
from tests.manifests.conftest import MANIFESTS, Obj, containers, one, overlay_file, write_overlay

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

# The oldest supported minor (matchConditions are GA since 1.30), a recent one, and the newest the package ships.
VERSIONS = ("1.30.0", "1.34.0", kubernetes_validate.latest_version())
# Cluster-scoped like the webhook configuration, though kustomize does not know it (the base undoes its namespace).
WEBHOOK_CONFIGURATIONS = {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
POLICY_KINDS = {f"{k}AdmissionPolicy{b}" for k in ("Validating", "Mutating") for b in ("", "Binding")}
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
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", *WEBHOOK_CONFIGURATIONS, *POLICY_KINDS}
    misplaced = [
        f"{o['kind']}/{o['metadata']['name']}"
        for o in rendered[mode]
        if o["kind"] not in cluster_scoped and o["metadata"].get("namespace") != "hami-system"
    ]
    assert not misplaced


def test_device_config_is_the_packaged_chart_defaults(base: list[Obj]) -> None:
    """kustomize cannot read app/admission/devices/, so manifests/ keeps a copy; it must not drift."""
    source = (MANIFESTS / "base" / "device-config.yaml").read_text()
    assert yaml.safe_load(source) == chart_defaults()
    config_map = one(base, "ConfigMap", "hami-device-config")
    assert set(config_map["data"]) == {"device-config.yaml"}
    assert yaml.safe_load(config_map["data"]["device-config.yaml"]) == chart_defaults()


def test_the_rendered_device_config_map_is_a_valid_device_config(base: list[Obj], tmp_path: Path) -> None:
    """`kubectl get configmap hami-device-config -o yaml` is accepted as it is, and every key in it is known."""
    path = tmp_path / "configmap.yaml"
    path.write_text(yaml.safe_dump(one(base, "ConfigMap", "hami-device-config")))
    config = load_device_config(str(path))
    assert config.warnings == ()
    assert config.root.section("nvidia").str("resourceCountName") == "nvidia.com/gpu"


def test_the_preview_evaluates_the_webhook_configuration_the_manifests_apply(base: list[Obj]) -> None:
    """`hami-webhook review` reads the configuration in the package (a link to manifests/base's), not a copy
    of its rules: the webhook it evaluates is the one kustomize renders (which re-folds the CEL's lines)."""

    def unfolded(hook: Obj) -> Obj:
        conditions = [{**c, "expression": " ".join(c["expression"].split())} for c in hook["matchConditions"]]
        return {**hook, "matchConditions": conditions}

    (rendered,) = one(base, "MutatingWebhookConfiguration", "hami-webhook-pods")["webhooks"]
    assert unfolded(load_scope().webhook) == unfolded(rendered)


def test_the_scheduler_name_is_set_once(overlays_dir: Path) -> None:
    """The README's overlay for another scheduler name: the webhook's setting and every policy that names the
    scheduler hold that name, exactly as `hami-webhook policies` writes them for it, and the old name is nowhere."""
    directory = write_overlay(overlays_dir / "hami-gpu-scheduler", "hami-gpu-scheduler")
    overlay_file(directory, "hami-gpu-scheduler", "scheduler-name.yaml")
    objects = kustomize(directory)
    settings = Settings.from_env({"HAMI_SCHEDULER_NAME": "gpu-scheduler"})
    written = render(Inputs(settings, load_scope().webhook))
    expected = {
        (o["kind"], o["metadata"]["name"]): o["spec"]
        for name in ("allocation-guard.yaml", "routed.yaml", "floor.yaml")
        for o in yaml.safe_load_all(written[name])
        if o["metadata"]["name"] in NAMING_THE_SCHEDULER
    }
    assert {key: one(objects, *key)["spec"] for key in expected} == expected
    (webhook,) = containers(one(objects, "Deployment", "hami-webhook")["spec"]["template"]["spec"])
    assert {e["name"]: e.get("value") for e in webhook["env"]}["HAMI_SCHEDULER_NAME"] == "gpu-scheduler"
    assert not re.findall(r"hami-scheduler(?!-name)", json.dumps(objects))
