"""Vastai accelerators (backend ``Vastai``, device-config section ``vastai``): a whole-card count, nothing else."""

from __future__ import annotations

from app.admission.devices.base import ConfigSection, CountDevice


def build(root: ConfigSection) -> tuple[CountDevice, ...]:
    """The Vastai backend: found by its count in limits, never mutated (docs/rules.md#vastai-and-biren)."""
    return (CountDevice("Vastai", root.section("vastai").str("resourceCountName")),)
