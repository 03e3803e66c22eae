"""Hygon DCU (backend ``DCU``, device-config section ``hygon``): shaped like Cambricon MLU."""

from __future__ import annotations

from app.admission.devices.base import ConfigSection, SlicedDevice, count_memory_core


def build(root: ConfigSection) -> tuple[SlicedDevice, ...]:
    """The DCU backend from the ``hygon`` section; its memory unit is the configured ``memoryFactor``."""
    section = root.section("hygon")
    return (
        SlicedDevice(
            key="DCU",
            **count_memory_core(section),
            memory_factor=section.int("memoryFactor"),
            default_cores=100,
        ),
    )
