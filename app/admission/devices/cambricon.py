"""Cambricon MLU (backend ``MLU``, device-config section ``cambricon``)."""

from __future__ import annotations

from app.admission.devices.base import ConfigSection, SlicedDevice, count_memory_core

MLU_MEMORY_UNIT = 256
"""One ``mlu.smlu.vmemory`` unit is 256 MiB."""


def build(root: ConfigSection) -> tuple[SlicedDevice, ...]:
    """The MLU backend from the ``cambricon`` section; a whole card is 100 cores."""
    section = root.section("cambricon")
    return (
        SlicedDevice(
            key="MLU",
            **count_memory_core(section),
            memory_factor=MLU_MEMORY_UNIT,
            default_cores=100,
        ),
    )
