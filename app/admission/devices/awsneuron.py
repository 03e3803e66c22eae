"""AWS Neuron devices and NeuronCores (backend ``AWSNeuron``, device-config section ``awsneuron``).

HAMi learns the cores per device from the Nodes its scheduler registers (capped at
2) and validates core requests against it, falling back to 2 before any Node is
seen. This webhook observes no Nodes, so it is always in that state: core requests
are validated and split with 2 cores per device, and a device-count request carries
no cores for quota, as HAMi's admission does until its first Node (docs/rules.md#aws-neuron).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from app.admission.devices.base import ConfigSection, DeviceRequestError, OwnsItsQuotaNames, QuotaNames, QuotaRequest
from app.admission.edit import ContainerEdit, PodEdit
from app.admission.quantity import INT32_MAX, Quantity

CORES_PER_DEVICE = 2
MAX_CORES = INT32_MAX * CORES_PER_DEVICE


def _checked(amount: Quantity, name: str, maximum: int) -> int:
    """HAMi's validateResourceRequest: a positive int64 no larger than ``maximum``."""
    whole = amount.whole
    if whole is None:
        raise DeviceRequestError(f"{name} must be an integer")
    if whole <= 0:
        raise DeviceRequestError(f"{name} must be greater than 0")
    if whole > maximum:
        raise DeviceRequestError(f"{name} must not exceed {maximum}")
    return whole


@dataclass(frozen=True)
class AWSNeuron(OwnsItsQuotaNames):
    """HAMi's Neuron rules: a device count, else a core count; found only when the request is valid."""

    count_name: str
    core_name: str
    key: str = "AWSNeuron"

    @classmethod
    def from_config(cls, section: ConfigSection) -> AWSNeuron:
        return cls(count_name=section.str("resourceCountName"), core_name=section.str("resourceCoreName"))

    @cached_property
    def quota_names(self) -> QuotaNames:
        return QuotaNames(cores=self.core_name, count=self.count_name)

    def mutate(self, ctr: ContainerEdit, pod: PodEdit) -> bool:
        return self._request(ctr) is not None

    def quota_request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        try:
            return self._request(ctr)
        except DeviceRequestError:
            return None

    def _request(self, ctr: ContainerEdit) -> QuotaRequest | None:
        """The devices and cores per device asked for; None when neither is named; raises when invalid."""
        count = ctr.limit_or_request(self.count_name) if self.count_name else None
        if count is not None:
            return QuotaRequest(nums=_checked(count, self.count_name, INT32_MAX))
        cores = ctr.limit_or_request(self.core_name) if self.core_name else None
        if cores is None:
            return None
        wanted = _checked(cores, self.core_name, MAX_CORES)
        if wanted <= CORES_PER_DEVICE:
            return QuotaRequest(nums=1, cores=wanted)
        if wanted % CORES_PER_DEVICE:
            raise DeviceRequestError(f"{self.core_name} must be 1 or a multiple of {CORES_PER_DEVICE}, got {wanted}")
        return QuotaRequest(nums=wanted // CORES_PER_DEVICE, cores=CORES_PER_DEVICE)


def build(root: ConfigSection) -> tuple[AWSNeuron, ...]:
    """The Neuron backend from the ``awsneuron`` section."""
    return (AWSNeuron.from_config(root.section("awsneuron")),)
