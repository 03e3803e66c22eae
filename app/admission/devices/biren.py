"""Biren GPUs (backend ``Biren``, device-config section ``biren``): a whole-card count, nothing else; the devices
registered on Nodes in HAMi's JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.admission.devices.base import ConfigSection, CountDevice
from app.admission.devices.registered import DeviceRequest, RegisteredFits, count_request
from app.admission.edit import ContainerEdit


@dataclass(frozen=True)
class Biren(RegisteredFits, CountDevice):
    """Found by its count in limits, never mutated (docs/rules.md#vastai-and-biren); its filter (pkg/device/biren
    Fit: health, ids, split count) for fits nowhere."""

    register_name = "hami.io/node-biren-register"
    noun, short = "Biren GPU", "GPU"
    id_keys = (("birentech.com/use-gpuuuid", "birentech.com/nouse-gpuuuid"),)

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> DeviceRequest | None:
        return count_request(ctr, self.count_name, self.selected(annotations))


def build(root: ConfigSection) -> tuple[Biren, ...]:
    """The Biren backend from the ``biren`` section."""
    return (Biren("Biren", root.section("biren").str("resourceCountName")),)
