"""Vastai accelerators (backend ``Vastai``, device-config section ``vastai``): a whole-card count, nothing else; the
devices (cards, or dies in die mode) registered on Nodes in HAMi's JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.admission.devices.base import ConfigSection, CountDevice
from app.admission.devices.registered import DeviceRequest, RegisteredFits, count_request
from app.admission.edit import ContainerEdit


@dataclass(frozen=True)
class Vastai(RegisteredFits, CountDevice):
    """Found by its count in limits, never mutated (docs/rules.md#vastai-and-biren); its filter (pkg/device/vastai
    Fit: health, ids, split count; in die mode as many dies as asked) for fits nowhere."""

    register_name = "hami.io/node-va-register"
    noun, short = "Vastai device", "device"
    id_keys = (("vastaitech.com/use-gpuuuid", "vastaitech.com/nouse-gpuuuid"),)

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> DeviceRequest | None:
        return count_request(ctr, self.count_name, self.selected(annotations))


def build(root: ConfigSection) -> tuple[Vastai, ...]:
    """The Vastai backend from the ``vastai`` section."""
    return (Vastai("Vastai", root.section("vastai").str("resourceCountName")),)
