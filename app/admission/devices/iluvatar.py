"""Iluvatar GPUs (one backend per ``iluvatars[]`` entry, keyed by its ``commonWord``), their devices registered on
Nodes in HAMi's text format, one annotation per chip."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.admission.devices.base import ConfigSection, SlicedDevice, count_memory_core
from app.admission.devices.registered import DeviceRequest, RegisteredFits, go_int32, share, whole
from app.admission.edit import ContainerEdit, PodEdit, Why
from app.admission.quantity import INT32_MAX

ILUVATAR_MEMORY_UNIT = 256
"""One ``vMem`` unit is 256 MiB."""

CONTAINER_NAME_ENV = "SOL_CONTINER_NAME"
"""HAMi's spelling, which Iluvatar's runtime reads: do not correct it."""
SEVERAL_CARDS = Why("several GPUs are whole cards")
CONTAINER_NAME = Why("the container's name", filled=None)


@dataclass(frozen=True)
class Iluvatar(RegisteredFits, SlicedDevice):
    """HAMi's Iluvatar rules: several cards are whole cards, and the runtime learns the container name; its filter
    (pkg/device/iluvatar Fit) for fits nowhere."""

    register_name = "hami.io/node-{key}-register"
    noun, short = "Iluvatar {key}", "GPU"
    register_format = "text"
    id_keys = (("hami.io/use-{key}-uuid", "hami.io/no-use-{key}-uuid"),)

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        if not super().mutate(ctr, pod):
            return False
        count = ctr.limit_value(self.count_name)
        if count > 1 and self.core_name:
            ctr.set_limit(self.core_name, count * 100, SEVERAL_CARDS)
        if ctr.name and not ctr.has_env(CONTAINER_NAME_ENV):
            ctr.set_env(CONTAINER_NAME_ENV, ctr.name, CONTAINER_NAME)
        return True

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> DeviceRequest | None:
        """GenerateResourceRequests: the count as Go's int32 of it; vMem units (256 MiB) up to 2^31-1 MiB, else no
        request; cores 0 unless asked (Go's int32 of them); a fractional count reads as none, fractional cores as 0."""
        nums = whole(ctr.limit_or_request(self.count_name)) if self.count_name else None
        if nums is None or go_int32(nums) <= 0:
            return None
        memory = whole(ctr.limit_or_request(self.memory_name)) if self.memory_name else 0
        if ctr.limit_or_request(self.memory_name) is not None and (
            memory is None or not 0 <= memory <= INT32_MAX // ILUVATAR_MEMORY_UNIT
        ):
            return None
        cores = whole(ctr.limit_or_request(self.core_name)) if self.core_name else None
        cores = 0 if cores is None else go_int32(cores)
        return share(self.selected(annotations), go_int32(nums), (memory or 0) * ILUVATAR_MEMORY_UNIT, cores)


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
