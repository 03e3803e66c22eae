"""The admission policies are written from the webhook's own lists: the shipped ones are exactly what
`hami-webhook policies` writes for the chart's defaults, and what it writes follows the device config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from app.cli import main
from app.policies import GUARD, HAMI_COMPONENTS, Inputs, render
from app.scope import load_scope
from app.settings import Settings
from tests.support import ROOT

SHIPPED = {
    "allocation-guard.yaml": ROOT / "manifests" / "base" / "policies" / "allocation-guard.yaml",
}


def chart_defaults() -> dict[str, str]:
    return render(Inputs(Settings.from_env({}), load_scope().webhook))


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_policies_are_the_commands_output_for_the_chart_defaults(name: str) -> None:
    rerun = f"run: hami-webhook policies --out {SHIPPED[name].parent}"
    assert SHIPPED[name].read_text() == chart_defaults()[name], rerun


def test_command_writes_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies", "--out", str(tmp_path)]) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == chart_defaults()


def test_guard_lists_every_owned_key_of_every_vendor_and_the_given_components(tmp_path: Path) -> None:
    config = tmp_path / "devices.yaml"
    config.write_text(
        "vnpus:\n  configs:\n    - {chipName: 910X, commonWord: Ascend910X, resourceName: huawei.com/Ascend910X}\n"
    )
    out = tmp_path / "out"
    assert main(["policies", "--config", str(config), "--hami-component", "gpu:my-scheduler", "--out", str(out)]) == 0
    policy, binding = yaml.safe_load_all((out / "allocation-guard.yaml").read_text())
    assert policy["metadata"]["name"] == binding["spec"]["policyName"] == GUARD
    listed = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "written")
    owned = Settings.from_env({"HAMI_DEVICE_CONFIG": str(config)}).owned_annotations.owned
    assert "huawei.com/Ascend910X" in owned and "hami.io/Ascend910X-devices-to-allocate" in owned
    assert all(f"'{key}'" in listed for key in owned)
    users = policy["spec"]["matchConditions"][0]["expression"]
    assert "'system:serviceaccount:gpu:my-scheduler'" in users
    assert not any(account.split(":")[1] in users for account in HAMI_COMPONENTS)


def test_a_malformed_component_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies", "--hami-component", "hami-scheduler"]) == 2
    assert "--hami-component 'hami-scheduler': expected NAMESPACE:NAME" in capsys.readouterr().err
