"""docs/gitops.md: what it tells Argo CD and Flux users to write parses, and selects or changes exactly what it
says. The caBundle a tool is told to ignore is computed the way certgen writes it, not typed in here."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import jq
import jsonpatch
import pytest
import yaml

from certgen.resources import desired_webhooks
from testbed import ROOT
from tests.manifests.conftest import Obj, find, kustomize, one, write_overlay

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

GITOPS = ROOT / "docs" / "gitops.md"
MWC = "MutatingWebhookConfiguration"


def application() -> dict[str, Any]:
    (block,) = re.findall(r"```yaml\n(# argocd-application\.yaml\n.*?)```", GITOPS.read_text(), re.S)
    return yaml.safe_load(block)


def written_by_certgen(configuration: Obj) -> Obj:
    """The configuration as it is in the cluster once certgen (or cainjector, the same field) wrote the CA."""
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
    webhooks, _ = desired_webhooks(configuration["webhooks"], ca, None)
    return {**configuration, "webhooks": webhooks}


def differing_paths(rendered: Obj, live: Obj) -> set[tuple[str | int, ...]]:
    return {
        tuple(int(p) if p.isdigit() else p for p in op["path"].split("/")[1:])
        for op in jsonpatch.make_patch(rendered, live)
    }


def test_argocd_application_ignores_the_configuration_by_its_rendered_identity(base: list[Obj]) -> None:
    app = application()
    assert "RespectIgnoreDifferences=true" in app["spec"]["syncPolicy"]["syncOptions"]
    (rule,) = app["spec"]["ignoreDifferences"]
    configuration = one(base, MWC, rule["name"])
    assert rule["group"] == configuration["apiVersion"].split("/")[0] and rule["kind"] == configuration["kind"]


@pytest.mark.parametrize("mode", ["certgen", "cert-manager"])
def test_argocd_jq_path_selects_exactly_what_certgen_or_cainjector_writes(
    mode: str, rendered: dict[str, list[Obj]]
) -> None:
    (rule,) = application()["spec"]["ignoreDifferences"]
    configuration = one(rendered[mode], MWC, rule["name"])
    live = written_by_certgen(configuration)
    changed = differing_paths(configuration, live)
    assert changed == {("webhooks", 0, "clientConfig", "caBundle")}
    (expression,) = rule["jqPathExpressions"]
    selected = {tuple(p) for p in jq.compile(f"[path({expression})]").input_value(live).first()}
    assert selected == changed


def test_the_json_pointer_in_the_text_selects_the_same_field(base: list[Obj]) -> None:
    (pointers,) = re.findall(r"`jsonPointers: \[(.*?)\]`", GITOPS.read_text())
    (pointer,) = pointers.split(",")
    live = written_by_certgen(one(base, MWC, "hami-webhook-pods"))
    assert {tuple(int(p) if p.isdigit() else p for p in pointer.split("/")[1:])} == differing_paths(
        one(base, MWC, "hami-webhook-pods"), live
    )
    assert len(live["webhooks"]) == 1, "the pointer names webhooks/0: the configuration must keep one webhook"


def test_manual_mode_renders_the_ca_bundle_so_git_owns_it(rendered: dict[str, list[Obj]]) -> None:
    """Why the text says not to ignore it there: the ignored field would be desired state."""
    (rule,) = application()["spec"]["ignoreDifferences"]
    (expression,) = rule["jqPathExpressions"]
    configuration = one(rendered["manual"], MWC, rule["name"])
    assert jq.compile(f"[{expression}]").input_value(configuration).first() != []


def only_the_job_differs(objects: list[Obj], base: list[Obj]) -> Obj:
    """The overlay's certgen Job; every other object is exactly the default install's."""
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, objects)) == sorted(map(key, base))
    others = [o for o in objects if o["kind"] != "Job"]
    assert others == [o for o in base if o["kind"] != "Job"]
    (job,) = find(objects, "Job")
    return job


def test_argocd_overlay_makes_the_certgen_job_a_sync_hook(tmp_path: Path, base: list[Obj]) -> None:
    job = only_the_job_differs(kustomize(write_overlay(tmp_path / "hami-argocd", "hami-argocd")), base)
    assert job["metadata"]["annotations"] == {
        "argocd.argoproj.io/hook": "Sync",
        "argocd.argoproj.io/hook-delete-policy": "BeforeHookCreation",
    }
    assert job["spec"] == one(base, "Job", "hami-webhook-certgen")["spec"]


def test_flux_overlay_keeps_the_certgen_job_and_recreates_it_on_change(tmp_path: Path, base: list[Obj]) -> None:
    job = only_the_job_differs(kustomize(write_overlay(tmp_path / "hami-flux", "hami-flux")), base)
    assert job["metadata"]["annotations"] == {"kustomize.toolkit.fluxcd.io/force": "enabled"}
    expected = dict(one(base, "Job", "hami-webhook-certgen")["spec"])
    del expected["ttlSecondsAfterFinished"]
    assert job["spec"] == expected
