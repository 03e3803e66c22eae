"""Hygon DCU (backend ``DCU``, device-config section ``hygon``): shaped like Cambricon MLU, its devices registered on
Nodes in HAMi's text format."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.admission.devices.base import ConfigSection, SlicedDevice, count_memory_core
from app.admission.devices.registered import DeviceRequest, RegisteredFits, share, whole
from app.admission.edit import ContainerEdit
from app.admission.quantity import INT32_MAX


@dataclass(frozen=True)
class Hygon(RegisteredFits, SlicedDevice):
    """HAMi's DCU rules; its filter (pkg/device/hygon Fit) for fits nowhere."""

    register_name = "hami.io/node-dcu-register"
    noun, short = "Hygon DCU", "DCU"
    register_format = "text"
    type_keys = ("hygon.com/use-dcutype", "hygon.com/nouse-dcutype")
    id_keys = (("hygon.com/use-gpuuuid", "hygon.com/nouse-gpuuuid"),)

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> DeviceRequest | None:
        """GenerateResourceRequests: a count of 1 to 2^31-1; memory times memoryFactor and cores (100 unless
        asked) within int32, else no request; a fractional amount reads as none."""
        nums = whole(ctr.limit_or_request(self.count_name)) if self.count_name else None
        if nums is None or not 0 < nums <= INT32_MAX:
            return None
        memory = whole(ctr.limit_or_request(self.memory_name)) if self.memory_name else None
        if memory is not None:
            memory *= max(self.memory_factor, 1)
            if not 0 <= memory <= INT32_MAX:
                return None
        cores = whole(ctr.limit_or_request(self.core_name)) if self.core_name else None
        if cores is not None and not 0 <= cores <= INT32_MAX:
            return None
        return share(self.selected(annotations), nums, memory or 0, 100 if cores is None else cores)


def build(root: ConfigSection) -> tuple[Hygon, ...]:
    """The DCU backend from the ``hygon`` section; its memory unit is the configured ``memoryFactor``."""
    section = root.section("hygon")
    return (
        Hygon(
            key="DCU",
            **count_memory_core(section),
            memory_factor=section.int("memoryFactor"),
            default_cores=100,
        ),
    )
