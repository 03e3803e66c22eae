"""Iluvatar GPUs (one backend per ``iluvatars[]`` entry, keyed by its ``commonWord``)."""

from __future__ import annotations

from dataclasses import dataclass

from app.admission.devices.base import ConfigSection, SlicedDevice, count_memory_core
from app.admission.edit import ContainerEdit, PodEdit, Why

ILUVATAR_MEMORY_UNIT = 256
"""One ``vMem`` unit is 256 MiB."""

CONTAINER_NAME_ENV = "SOL_CONTINER_NAME"
"""HAMi's spelling, which Iluvatar's runtime reads: do not correct it."""
SEVERAL_CARDS = Why("several GPUs are whole cards")
CONTAINER_NAME = Why("the container's name", filled=None)


@dataclass(frozen=True)
class Iluvatar(SlicedDevice):
    """HAMi's Iluvatar rules: several cards are whole cards, and the runtime learns the container name."""

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        if not super().mutate(ctr, pod):
            return False
        count = ctr.limit_value(self.count_name)
        if count > 1 and self.core_name:
            ctr.set_limit(self.core_name, count * 100, SEVERAL_CARDS)
        if ctr.name and not ctr.has_env(CONTAINER_NAME_ENV):
            ctr.set_env(CONTAINER_NAME_ENV, ctr.name, CONTAINER_NAME)
        return True


def build(root: ConfigSection) -> tuple[Iluvatar, ...]:
    """One backend per ``iluvatars[]`` entry; a core request defaults to none."""
    return tuple(
        Iluvatar(
            key=entry.str("commonWord"),
            **count_memory_core(entry),
            memory_factor=ILUVATAR_MEMORY_UNIT,
            default_cores=0,
        )
        for entry in root.sections("iluvatars")
    )
