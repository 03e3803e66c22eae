"""Biren (spec §2.13): a whole-card count, found in limits only, never mutated."""

from __future__ import annotations

from typing import Any

import pytest

from app.devices import biren
from app.devices.base import QuotaRequest
from app.edit import ContainerEdit
from app.settings import load_device_config
from tests.app.reviews import container, pod, run

GPU = "birentech.com/gpu"

ADMITTED = [
    pytest.param(
        pod(container(limits={GPU: "1"})),
        pod(container(limits={GPU: "1"}), annotations={"hami.io/gpu-type": "Biren"}, scheduler="hami-scheduler"),
        id="count-in-limits-found",
    ),
    pytest.param(
        pod(container(requests={GPU: "1"}, defaulted=False)),
        pod(container(requests={GPU: "1"}, defaulted=False)),
        id="count-only-in-requests-not-found",
    ),
    pytest.param(pod(container()), pod(container()), id="no-resources-not-found"),
]


@pytest.mark.parametrize(("source", "expected"), ADMITTED)
def test_admitted(source: dict[str, Any], expected: dict[str, Any], settings) -> None:
    outcome = run(source, settings)
    assert outcome.denial() == (True, 200, "", "")
    assert outcome.patched == expected


def test_renamed_by_device_config(configured) -> None:
    """The YAML key renames the resource: the chart's name is then an ordinary resource."""
    settings = configured({"biren": {"resourceCountName": "birentech.com/br"}})
    source = pod(container(limits={GPU: "1"}), container("renamed", limits={"birentech.com/br": "2"}))
    assert run(source, settings).patched == pod(
        container(limits={GPU: "1"}),
        container("renamed", limits={"birentech.com/br": "2"}),
        annotations={"hami.io/gpu-type": "Biren"},
        scheduler="hami-scheduler",
    )


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        pytest.param(container(limits={GPU: "2"}), QuotaRequest(nums=2), id="count"),
        pytest.param(container(requests={GPU: "2"}, defaulted=False), None, id="requests-not-counted"),
        pytest.param(container(), None, id="nothing-asked"),
    ],
)
def test_quota_request(ctr: dict[str, Any], expected: QuotaRequest | None) -> None:
    (device,) = biren.build(load_device_config(""))
    assert device.quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected
