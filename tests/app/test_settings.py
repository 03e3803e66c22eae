"""Settings: every knob parsed from the environment, errors naming the variable, HAMi's device config merged."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from app.settings import KNOBS, Settings, SettingsError, WorkloadChecks

README = Path(__file__).resolve().parents[2] / "README.md"


def test_defaults_are_hamis_chart() -> None:
    settings = Settings.from_env({})
    assert (settings.scheduler_name, settings.force_overwrite_default_scheduler) == ("hami-scheduler", True)
    assert (settings.bind, settings.tls_cert, settings.tls_key) == ("0.0.0.0:9443", "/tls/tls.crt", "/tls/tls.key")
    keys = [d.key for d in settings.devices]
    assert keys[:3] == ["NVIDIA", "MLU", "DCU"]
    assert not any(k.startswith(("Ascend", "MR-V", "BI-V")) for k in keys)


def test_workload_checks_warn_by_default_and_read_any_case() -> None:
    assert Settings.from_env({}).workload_checks is WorkloadChecks.WARN
    assert Settings.from_env({"HAMI_WORKLOAD_CHECKS": " Deny "}).workload_checks is WorkloadChecks.DENY


def test_flags_register_ascend_and_iluvatar() -> None:
    keys = [d.key for d in Settings.from_env({"HAMI_ENABLE_ASCEND": "true", "HAMI_ENABLE_ILUVATAR": "1"}).devices]
    assert "Ascend910B3" in keys and "BI-V150" in keys


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({"HAMI_ENABLE_ASCEND": "yes"}, "HAMI_ENABLE_ASCEND: expected true or false, got 'yes'", id="bool"),
        pytest.param({"HAMI_WEBHOOK_WORKERS": "two"}, "HAMI_WEBHOOK_WORKERS: expected an integer, got 'two'", id="int"),
        pytest.param({"HAMI_WEBHOOK_THREADS": "0"}, "HAMI_WEBHOOK_THREADS: must be at least 1, got 0", id="range"),
        pytest.param(
            {"HAMI_WORKLOAD_CHECKS": "refuse"},
            "HAMI_WORKLOAD_CHECKS: expected warn, deny or off, got 'refuse'",
            id="choice",
        ),
        pytest.param(
            {"HAMI_DEVICE_CONFIG": "/nonexistent.yaml"},
            "HAMI_DEVICE_CONFIG: cannot read /nonexistent.yaml",
            id="missing-file",
        ),
    ],
)
def test_invalid_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        pytest.param("nvidia: [1, 2]", "HAMI_DEVICE_CONFIG: nvidia: expected a mapping, got list", id="section-type"),
        pytest.param(
            "nvidia:\n  defaultGPUNum: many",
            "HAMI_DEVICE_CONFIG: nvidia.defaultGPUNum: expected an integer, got 'many'",
            id="key-type",
        ),
        pytest.param(
            "nvidia:\n  gpuCorePolicy: max",
            "HAMI_DEVICE_CONFIG: nvidia.gpuCorePolicy: expected one of default, force, disable, got 'max'",
            id="policy",
        ),
        pytest.param("nvidia: {resourceCountName: [", "HAMI_DEVICE_CONFIG: ", id="yaml-syntax"),
    ],
)
def test_invalid_device_config(tmp_path: Path, yaml_text: str, message: str) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml_text)
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"HAMI_DEVICE_CONFIG": str(path)})
    assert str(caught.value).startswith(message)


def test_device_config_merges_over_chart_defaults(configured) -> None:
    settings = configured({"nvidia": {"resourceCountName": "example.com/gpu"}, "unknownVendor": {"x": 1}})
    nvidia = settings.devices[0]
    assert nvidia.count_name == "example.com/gpu"
    assert nvidia.memory_name == "nvidia.com/gpumem"  # untouched keys keep the chart's value
    assert nvidia.default_gpu_num == 1


def test_every_knob_is_in_the_readme_table() -> None:
    table = re.finditer(r"^\| `(HAMI_[A-Z_]+)` \| `([^`]*)` \|", README.read_text(), re.M)
    rows = {m.group(1): "" if m.group(2) == '""' else m.group(2) for m in table}
    assert rows == {k.env: k.default for k in KNOBS}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        pytest.param({"vnpus": {"configs": [{"resourceName": "huawei.com/x"}]}}, "needs a commonWord", id="empty-key"),
        pytest.param(
            {"vnpus": {"configs": [{"commonWord": "A"}, {"commonWord": "A"}]}}, "commonWord 'A' names two", id="dup"
        ),
    ],
)
def test_backend_keys_are_unique(tmp_path: Path, config: dict, message: str) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(SettingsError, match=message):
        Settings.from_env({"HAMI_DEVICE_CONFIG": str(path), "HAMI_ENABLE_ASCEND": "true"})
