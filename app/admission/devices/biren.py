"""Biren GPUs (backend ``Biren``, device-config section ``biren``): a whole-card count, nothing else."""

from __future__ import annotations

from app.admission.devices.base import ConfigSection, CountDevice


def build(root: ConfigSection) -> tuple[CountDevice, ...]:
    """The Biren backend: found by its count in limits, never mutated (docs/rules.md#vastai-and-biren)."""
    return (CountDevice("Biren", root.section("biren").str("resourceCountName")),)
