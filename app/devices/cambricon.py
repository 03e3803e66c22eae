"""Cambricon MLU (backend ``MLU``, device-config section ``cambricon``)."""

from __future__ import annotations

from app.devices.base import ConfigSection, SlicedDevice

MLU_MEMORY_UNIT = 256
"""One ``mlu.smlu.vmemory`` unit is 256 MiB."""


def build(root: ConfigSection) -> tuple[SlicedDevice, ...]:
    """The MLU backend from the ``cambricon`` section; a whole card is 100 cores."""
    section = root.section("cambricon")
    return (
        SlicedDevice(
            key="MLU",
            count_name=section.str("resourceCountName"),
            memory_name=section.str("resourceMemoryName"),
            core_name=section.str("resourceCoreName"),
            memory_factor=MLU_MEMORY_UNIT,
            default_cores=100,
        ),
    )
