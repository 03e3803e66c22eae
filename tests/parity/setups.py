"""The chart set-ups both webhooks are compared under: Helm values for HAMi's chart, and the same in our settings.

Each set-up is what an admin writes once (`helm install --set ...`); from it come HAMi's device config (rendered by
the chart itself), HAMi's scheduler flags (as the chart's Deployment passes them) and this webhook's settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SetUp:
    name: str
    values: Mapping[str, str] = field(default_factory=dict)
    """`helm --set` values of HAMi's chart."""

    @property
    def scheduler_name(self) -> str:
        return self.values.get("schedulerName", "hami-scheduler")

    @property
    def force_overwrite(self) -> bool:
        return self.values.get("scheduler.forceOverwriteDefaultScheduler", "true") == "true"

    def enabled(self, vendor: str) -> bool:
        return self.values.get(f"devices.{vendor}.enabled") == "true"

    def hami_flags(self) -> list[str]:
        """The flags beyond name, overwrite and config that the chart's scheduler Deployment adds."""
        return [f"--enable-{vendor}=true" for vendor in ("ascend", "iluvatar") if self.enabled(vendor)]

    def our_env(self, device_config: str) -> dict[str, str]:
        """This webhook's settings for the same install (README: carry HAMi's settings over)."""
        return {
            "HAMI_DEVICE_CONFIG": device_config,
            "HAMI_SCHEDULER_NAME": self.scheduler_name,
            "HAMI_FORCE_OVERWRITE_DEFAULT_SCHEDULER": str(self.force_overwrite).lower(),
            "HAMI_ENABLE_ASCEND": str(self.enabled("ascend")).lower(),
            "HAMI_ENABLE_ILUVATAR": str(self.enabled("iluvatar")).lower(),
        }


VENDORS_ON = {"devices.ascend.enabled": "true", "devices.iluvatar.enabled": "true"}

SETUPS = (
    SetUp("defaults"),
    SetUp("ascend-iluvatar", VENDORS_ON),
    SetUp("no-force-overwrite", {"scheduler.forceOverwriteDefaultScheduler": "false"}),
    SetUp("no-scheduler-name", {"schedulerName": ""}),
    SetUp(
        "overwrite-env",
        {
            **VENDORS_ON,
            "scheduler.overwriteEnv": "true",
            "devices.nvidia.gpuCorePolicy": "force",
            "devicePlugin.runtimeClassName": "nvidia",
            "devices.ascend.runtimeClassName": "ascend",
        },
    ),
)
