"""The device config's known keys: every key a vendor module reads is one, so only a misspelling is warned about."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from app.admission.devices import config
from app.admission.devices.base import ConfigSection

DEVICES = Path(config.__file__).parent
READERS = {name for name, value in vars(ConfigSection).items() if callable(value) and not name.startswith("_")}


def read_keys() -> dict[str, set[str]]:
    """Every string literal a vendor module passes to a ConfigSection reader, by module."""
    found: dict[str, set[str]] = {}
    for module in sorted(DEVICES.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in READERS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.setdefault(module.stem, set()).add(node.args[0].value)
    return found


def known_names(shape: Any) -> set[str]:
    if isinstance(shape, list):
        return known_names(shape[0])
    if isinstance(shape, dict):
        return set(shape) | {name for value in shape.values() for name in known_names(value)}
    return set()


def test_every_key_a_vendor_reads_is_known() -> None:
    keys = read_keys()
    assert {"nvidia", "ascend", "enflame", "iluvatar"} <= set(keys), "the scan found the vendor modules"
    known = known_names(config._known())
    unknown = {module: sorted(names - known) for module, names in keys.items() if names - known}
    assert not unknown, f"keys read by vendor modules but warned about as unknown: {unknown}"


def test_the_chart_defaults_draw_no_warning(tmp_path: Path) -> None:
    path = tmp_path / "chart.yaml"
    path.write_text((DEVICES / "chart-defaults.yaml").read_text())
    assert config.load_device_config(str(path)).warnings == ()
