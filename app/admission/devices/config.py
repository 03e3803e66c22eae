"""HAMi's device config: the chart's defaults, the admin's file merged over them, and what in it is ignored.

The file is HAMi's own format, or the ConfigMap holding it as ``kubectl get configmap -o yaml`` exports it
(the config under its data key, ``device-config.yaml`` in HAMi's chart and ours). HAMi reads the file
leniently: a key it does not know is dropped without a word, so a misspelled ``resourceCountName`` silently
leaves the chart's default in force. Here every such key is named in a warning, with the closest known name.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from app.admission.devices.base import ConfigError, ConfigSection

CONFIG_MAP_KEY = "device-config.yaml"
"""The data key of HAMi chart's device ConfigMap (``<release>-scheduler-device``) and of ours."""

HAMI_ONLY_KEYS: Mapping[str, Any] = {
    "nvidia": {
        "deviceSplitCount": None,
        "deviceMemoryScaling": None,
        "deviceCoreScaling": None,
        "preConfiguredDeviceMemory": None,
        "libCudaLogLevel": None,
        "enableNumaTopology": None,
        "disableCoreLimit": None,
        "migProfileAllowlist": [{"models": None, "profiles": None}],
    },
    "enflame": {"resourceNameVGCU": None, "resourceNameVGCUPercentage": None},
    "mthreads": {"memoryPerCard": None},
}
"""Keys HAMi reads (its config structs, and the chart's template) that chart-defaults.yaml leaves out: the chart
does not render them, or only HAMi's scheduler and device plugins use them. Known, so never warned about."""


@dataclass(frozen=True)
class DeviceConfig:
    """The merged config the vendors are built from, and one line per key of the file that nothing reads."""

    root: ConfigSection
    warnings: tuple[str, ...] = ()


def chart_defaults() -> dict[str, Any]:
    """HAMi chart's device config, shipped with the package: a copy of its own for each caller, who merges the
    admin's file into it."""
    return copy.deepcopy(_parsed_chart_defaults())


@cache
def _parsed_chart_defaults() -> dict[str, Any]:
    """Parsed once per process: PyYAML's pure-Python loader took 32 ms of every settings build (libyaml's, which
    the wheels carry, 3 ms; a copy 0.3 ms), a third of the unit tests' time."""
    text = resources.files("app.admission.devices").joinpath("chart-defaults.yaml").read_text()
    loaded: dict[str, Any] = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return loaded


def load_device_config(path: str) -> DeviceConfig:
    """The chart's device config with the file at ``path`` (if any) merged over it: a missing section or key
    keeps the chart's default, not Go's zero value; a list given replaces the default list."""
    if not path:
        return DeviceConfig(ConfigSection(chart_defaults(), ""))
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    user = _unwrap(document, path)
    merged = _merge(chart_defaults(), user)
    warnings = tuple(f"{path}: {line}" for line in _unknown_keys(user, _known()))
    return DeviceConfig(ConfigSection(merged, ""), warnings)


def _unwrap(document: Any, path: str) -> Mapping[str, Any]:
    """The device sections, read from a ConfigMap when the file is one."""
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise ConfigError(f"{path}: expected a mapping of device sections")
    kind = document.get("kind")
    if kind is None:
        return document
    if kind != "ConfigMap":
        raise ConfigError(f"{path} holds a {kind}: expected HAMi's device config, or the ConfigMap that holds it")
    data = document.get("data") or {}
    if not isinstance(data, Mapping) or not data:
        raise ConfigError(f"{path}: the ConfigMap has no data")
    if CONFIG_MAP_KEY in data:
        key = CONFIG_MAP_KEY
    elif len(data) == 1:
        (key,) = data
    else:
        raise ConfigError(f"{path}: the ConfigMap has no data key {CONFIG_MAP_KEY} (it has {', '.join(sorted(data))})")
    try:
        inner = yaml.safe_load(data[key]) if isinstance(data[key], str) else data[key]
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: data[{key}] is not valid YAML: {exc}") from exc
    if inner is not None and not isinstance(inner, Mapping):
        raise ConfigError(f"{path}: data[{key}]: expected a mapping of device sections")
    return inner or {}


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge mappings; lists and scalars in ``override`` replace the default."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), Mapping):
            out[key] = _merge(base[key], value)
        else:
            out[key] = value
    return out


@cache
def _known() -> Any:
    """The shape of every key a HAMi component reads: the chart defaults' keys plus HAMI_ONLY_KEYS (a test checks
    every key a vendor module reads is among them). A mapping of shapes, a one-item list for a list of mappings,
    None for a leaf."""
    return _merge_shapes(_shape(chart_defaults()), HAMI_ONLY_KEYS)


def _shape(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list) and any(isinstance(item, Mapping) for item in value):
        shape: Any = {}
        for item in value:
            shape = _merge_shapes(shape, _shape(item))
        return [shape]
    return None


def _merge_shapes(left: Any, right: Any) -> Any:
    if isinstance(left, list) and isinstance(right, list):
        return [_merge_shapes(left[0], right[0])]
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        out = dict(left)
        for key, value in right.items():
            out[key] = _merge_shapes(left[key], value) if key in left else value
        return out
    return right if left is None else left


def _unknown_keys(value: Any, shape: Any, where: str = "") -> list[str]:
    """One line per key of ``value`` that ``shape`` does not hold, naming the closest known key if one is close."""
    found: list[str] = []
    if isinstance(shape, list) and isinstance(value, list):
        for index, item in enumerate(value):
            found += _unknown_keys(item, shape[0], f"{where}[{index}]")
    elif isinstance(shape, Mapping) and isinstance(value, Mapping):
        for key, item in value.items():
            place = f"{where}.{key}" if where else str(key)
            if key in shape:
                found += _unknown_keys(item, shape[key], place)
                continue
            what = "section" if not where else "key"
            close = difflib.get_close_matches(str(key), [str(k) for k in shape], n=1)
            advice = f" (did you mean {close[0]}?)" if close else ""
            found.append(f"{place}: unknown {what}, ignored{advice}")
    return found
