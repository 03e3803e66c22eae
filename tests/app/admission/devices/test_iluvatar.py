"""Iluvatar: several cards are whole cards (cores = count x 100), and the container name goes to env.

Rule: docs/rules.md#iluvatar.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.devices.base import Device, QuotaRequest
from app.admission.edit import ContainerEdit
from app.settings import Settings
from testbed.pods import container, pod
from testbed.reviews import redirected, run

COUNT = "iluvatar.ai/BI-V150-vgpu"
MEMORY = "iluvatar.ai/BI-V150.vMem"
CORES = "iluvatar.ai/BI-V150.vCore"
NAME_ENV = {"name": "SOL_CONTINER_NAME", "value": "main"}


@pytest.fixture
def enabled(make_settings) -> Settings:
    return make_settings(HAMI_ENABLE_ILUVATAR="true")


def bi_v150(settings: Settings) -> Device:
    return next(d for d in settings.devices if d.key == "BI-V150")


@pytest.mark.parametrize(
    ("limits", "env", "resources", "expected_env"),
    [
        (
            {COUNT: "2", CORES: "1"},
            None,
            {"limits": {COUNT: "2", CORES: "200"}, "requests": {COUNT: "2", CORES: "200"}},
            [NAME_ENV],
        ),
        (
            {COUNT: "3"},
            None,
            {"limits": {COUNT: "3", CORES: "300"}, "requests": {COUNT: "3", CORES: "300"}},
            [NAME_ENV],
        ),
        (
            {COUNT: "1", MEMORY: "64", CORES: "50"},
            [{"name": "A", "value": "1"}],
            {"limits": {COUNT: "1", MEMORY: "64", CORES: "50"}, "requests": {COUNT: "1", MEMORY: "64", CORES: "50"}},
            [{"name": "A", "value": "1"}, NAME_ENV],
        ),
        (
            {COUNT: "1"},
            [{"name": "SOL_CONTINER_NAME", "value": "mine"}],
            {"limits": {COUNT: "1"}, "requests": {COUNT: "1"}},
            [{"name": "SOL_CONTINER_NAME", "value": "mine"}],
        ),
    ],
    ids=[
        "go-test-count-2-vcore-1-overwritten",
        "count-3-gets-300-cores",
        "single-card-keeps-cores-env-appended",
        "user-env-kept",
    ],
)
def test_found(
    limits: dict[str, str],
    env: list[dict[str, str]] | None,
    resources: dict[str, Any],
    expected_env: list[dict[str, str]],
    enabled: Settings,
) -> None:
    obj = pod(container(limits=limits, env=env))
    expected = redirected(obj, devices="BI-V150")
    expected["spec"]["containers"][0]["resources"] = resources
    expected["spec"]["containers"][0]["env"] = expected_env
    assert run(obj, enabled).patched == expected


def test_init_container_gets_its_own_name(enabled: Settings) -> None:
    obj = pod(container(), init=[container("setup", limits={COUNT: "1"})])
    expected = redirected(obj, devices="BI-V150")
    expected["spec"]["initContainers"][0]["env"] = [{"name": "SOL_CONTINER_NAME", "value": "setup"}]
    assert run(obj, enabled).patched == expected


@pytest.mark.parametrize(
    "ctr",
    [container(limits={MEMORY: "64", CORES: "50"}), container(requests={COUNT: "1"}), container(limits={"cpu": "1"})],
    ids=["memory-and-cores-without-count", "count-only-in-requests", "no-iluvatar-resource"],
)
def test_without_count_in_limits_nothing_changes(ctr: dict[str, Any], enabled: Settings) -> None:
    outcome = run(pod(ctr), enabled)
    assert outcome.response["allowed"] is True and outcome.ops == []


def test_disabled_by_default(settings: Settings) -> None:
    assert not any(d.key == "BI-V150" for d in settings.devices)
    assert run(pod(container(limits={COUNT: "2"})), settings).ops == []


def test_one_backend_per_configured_entry(configured) -> None:
    entry = {
        "commonWord": "MR-V100",
        "chipName": "MR-V100",
        "resourceCountName": "iluvatar.ai/vgpu",
        "resourceMemoryName": "iluvatar.ai/vcuda-memory",
        "resourceCoreName": "iluvatar.ai/vcuda-core",
    }
    settings = configured({"iluvatars": [entry]}, HAMI_ENABLE_ILUVATAR="true")
    assert [d.key for d in settings.devices if d.key.startswith(("MR-", "BI-"))] == ["MR-V100"]
    obj = pod(container(limits={"iluvatar.ai/vgpu": "2"}))
    expected = redirected(obj, devices="MR-V100")
    expected["spec"]["containers"][0]["resources"] = {
        "limits": {"iluvatar.ai/vgpu": "2", "iluvatar.ai/vcuda-core": "200"},
        "requests": {"iluvatar.ai/vgpu": "2", "iluvatar.ai/vcuda-core": "200"},
    }
    expected["spec"]["containers"][0]["env"] = [NAME_ENV]
    assert run(obj, settings).patched == expected


def test_empty_list_registers_nothing(configured) -> None:
    settings = configured({"iluvatars": []}, HAMI_ENABLE_ILUVATAR="true")
    assert not any(d.key.startswith(("MR-", "BI-")) for d in settings.devices)


@pytest.mark.parametrize(
    ("ctr", "expected"),
    [
        (container(limits={COUNT: "1", MEMORY: "4"}), QuotaRequest(nums=1, memory=4 * 256, cores=0)),
        (container(limits={COUNT: "1", CORES: "50"}), QuotaRequest(nums=1, memory=0, cores=50)),
        (container(requests={COUNT: "2", MEMORY: "8"}), QuotaRequest(nums=2, memory=2048, cores=0)),
        (container(limits={COUNT: "1", MEMORY: "0.5"}), None),
        (container(limits={MEMORY: "4"}), None),
    ],
    ids=["memory-in-256-MiB-units", "cores-given", "requests-only", "fractional-memory", "no-count"],
)
def test_quota_request(ctr: dict[str, Any], expected: QuotaRequest | None, enabled: Settings) -> None:
    device = bi_v150(enabled)
    assert device.quota_names.memory_factor == 256
    assert device.quota_request(ContainerEdit(("spec", "containers", 0), ctr)) == expected
