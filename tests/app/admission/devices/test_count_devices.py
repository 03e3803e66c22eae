"""Vastai and Biren: a whole-card count, found in limits only, never mutated (base.CountDevice).

Rule: docs/rules.md#vastai-and-biren.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from app.admission.devices import biren, vastai
from app.admission.devices.base import QuotaRequest
from app.admission.devices.config import load_device_config
from app.admission.edit import ContainerEdit
from testbed.pods import container, pod
from testbed.reviews import admitted, run

VENDORS = [
    pytest.param(vastai, "vastai", "vastaitech.com/va", "Vastai", id="vastai"),
    pytest.param(biren, "biren", "birentech.com/gpu", "Biren", id="biren"),
]


@pytest.mark.parametrize(("module", "section", "name", "key"), VENDORS)
@pytest.mark.parametrize(
    ("case", "found"),
    [
        pytest.param({"limits": "1"}, True, id="count-in-limits-found"),
        pytest.param({"requests": "1"}, False, id="count-only-in-requests-not-found"),
        pytest.param({}, False, id="no-resources-not-found"),
    ],
)
def test_found_only_in_limits(
    module: ModuleType, section: str, name: str, key: str, case: dict[str, str], found: bool, settings
) -> None:
    ctr = container(**{side: {name: amount} for side, amount in case.items()}, defaulted=False)
    expected = pod(dict(ctr), annotations={"hami.io/gpu-type": key} if found else None)
    if found:
        expected["spec"]["schedulerName"] = "hami-scheduler"
        expected["spec"]["containers"][0]["resources"]["requests"] = {name: "1"}
    assert admitted(pod(ctr), settings) == expected


@pytest.mark.parametrize(("module", "section", "name", "key"), VENDORS)
def test_renamed_by_device_config(module: ModuleType, section: str, name: str, key: str, configured) -> None:
    """The YAML key renames the resource: the chart's name is then an ordinary resource."""
    settings = configured({section: {"resourceCountName": "example.com/renamed"}})
    source = pod(container(limits={name: "1"}), container("renamed", limits={"example.com/renamed": "2"}))
    assert run(source, settings).patched == pod(
        container(limits={name: "1"}),
        container("renamed", limits={"example.com/renamed": "2"}),
        annotations={"hami.io/gpu-type": key},
        scheduler="hami-scheduler",
    )


@pytest.mark.parametrize(("module", "section", "name", "key"), VENDORS)
@pytest.mark.parametrize(
    ("side", "expected"),
    [
        pytest.param("limits", QuotaRequest(nums=2), id="count"),
        pytest.param("requests", None, id="requests-not-counted"),
        pytest.param(None, None, id="nothing-asked"),
    ],
)
def test_quota_request(
    module: ModuleType, section: str, name: str, key: str, side: str | None, expected: QuotaRequest | None
) -> None:
    (device,) = module.build(load_device_config("").root)
    ctr: dict[str, Any] = container(**({side: {name: "2"}} if side else {}), defaulted=False)
    assert device.quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected
