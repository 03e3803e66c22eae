"""MetaX GPUs: whole cards (backend ``Metax-GPU``) and sGPU slices (``Metax-SGPU``), section ``metax``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property

from app.admission.devices.base import (
    ConfigSection,
    CountDevice,
    DeviceRequestError,
    OwnsItsQuotaNames,
    QuotaNames,
    QuotaRequest,
    whole_in_range,
)
from app.admission.devices.registered import NO_PERCENTAGE, DeviceRequest, RegisteredFits
from app.admission.edit import ContainerEdit, PodEdit, Why
from app.admission.quantity import INT32_MAX

APP_CLASS_ANNOTATION = "metax-tech.com/sgpu-app-class"
APP_CLASSES = ("online", "offline")
QOS_ANNOTATION = "metax-tech.com/sgpu-qos-policy"
QOS_POLICIES = ("best-effort", "fixed-share", "burst-share")
DEFAULT_QOS = Why("the default for sGPU Pods that are not online")
SGPU_MEMORY_UNIT = 1024
"""A bare ``vmemory`` number is GiB; HAMi accounts MiB."""
MIB = 1024 * 1024


@dataclass(frozen=True)
class MetaxSGPU(RegisteredFits, OwnsItsQuotaNames):
    """HAMi's sGPU rules: an app class pins one device, and every non-online Pod carries a QoS policy.

    Only limits are read, here, for quota and by its filter (pkg/device/metax sdevice.go Fit: health, ids, split
    count, memory, and cores unless the Pod is online; an empty device takes any app class and QoS policy), which
    fits nowhere follows; its devices are MetaX's own list in ``metax-tech.com/node-gpu-devices``.
    """

    count_name: str
    memory_name: str
    core_name: str
    key: str = "Metax-SGPU"
    register_name = "metax-tech.com/node-gpu-devices"
    register_format = "metax"
    noun, short = "MetaX sGPU device", "GPU"
    id_keys = (("metax-tech.com/use-gpuuuid", "metax-tech.com/nouse-gpuuuid"),)
    more_keys = (APP_CLASS_ANNOTATION,)

    @cached_property
    def quota_names(self) -> QuotaNames:
        return QuotaNames(self.memory_name, self.core_name, self.count_name, SGPU_MEMORY_UNIT)

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        if not self.count_name or self.count_name not in ctr.limits:
            return False
        app_class = pod.annotations.get(APP_CLASS_ANNOTATION)
        if app_class is not None:
            if app_class not in APP_CLASSES:
                raise DeviceRequestError(f"{APP_CLASS_ANNOTATION} must be set one of [{', '.join(APP_CLASSES)}]")
            if ctr.limit_value(self.count_name) != 1:
                raise DeviceRequestError("app-class pod must request single device")
        if app_class != "online":
            qos = pod.annotations.get(QOS_ANNOTATION)
            if qos is None:
                pod.set_annotation(QOS_ANNOTATION, "best-effort", DEFAULT_QOS)
            elif qos not in QOS_POLICIES:
                raise DeviceRequestError(f"{QOS_ANNOTATION} must be set one of [{', '.join(QOS_POLICIES)}]")
        return True

    def quota_request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        count = ctr.limit(self.count_name) if self.count_name else None
        nums = whole_in_range(count, 1, INT32_MAX)
        if nums is None:
            return None
        cores_raw = ctr.limit(self.core_name) if self.core_name else None
        cores = 100 if cores_raw is None else cores_raw.value
        memory = self._memory_mib(ctr)
        return None if memory is None else QuotaRequest(nums=nums, memory=memory, cores=cores)

    def fit_request(self, ctr: ContainerEdit, annotations: Mapping[str, str]) -> DeviceRequest | None:
        """GenerateResourceRequests, limits only: a count of 1 to 2^31-1; cores 100 unless asked (a fraction reads
        as 100, beyond int32 no request), compared unclamped, and not at all for an online Pod; memory in MiB, 0 for
        the whole card."""
        nums = whole_in_range(ctr.limit(self.count_name), 1, INT32_MAX) if self.count_name else None
        memory = self._memory_mib(ctr)
        raw = ctr.limit(self.core_name) if self.core_name else None
        cores = 100 if raw is None or raw.whole is None else whole_in_range(raw, 0, INT32_MAX)
        if nums is None or memory is None or cores is None:
            return None
        online = annotations.get(APP_CLASS_ANNOTATION) == "online"
        return replace(
            self.selected(annotations),
            nums=nums,
            memory=memory,
            percentage=NO_PERCENTAGE if memory else 100,
            cores=None if online else cores,
        )

    def _memory_mib(self, ctr: ContainerEdit) -> int | None:
        """MiB per device: a value written with a unit is bytes, a bare number GiB; None when out of range."""
        amount = ctr.limit(self.memory_name) if self.memory_name else None
        whole = None if amount is None else amount.whole
        if whole is None:
            return 0
        if any(char.isalpha() for char in str(ctr.limits[self.memory_name])):
            mib = whole // MIB
            return mib if 0 <= mib <= INT32_MAX else None
        return whole * SGPU_MEMORY_UNIT if 0 <= whole <= INT32_MAX // SGPU_MEMORY_UNIT else None


def build(root: ConfigSection) -> tuple[CountDevice, MetaxSGPU]:
    """Both MetaX backends from the ``metax`` section."""
    section = root.section("metax")
    return (
        CountDevice(key="Metax-GPU", count_name=section.str("resourceCountName")),
        MetaxSGPU(
            count_name=section.str("resourceVCountName"),
            memory_name=section.str("resourceVMemoryName"),
            core_name=section.str("resourceVCoreName"),
        ),
    )
