"""What the served webhook tells its operator, over TLS: device-config keys nothing reads (named once, at
start-up, with the closest known key) and Pods asking for a vendor that is off (in their review line)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml

from certgen.local import LocalFiles
from testbed.pods import container, pod
from testbed.reviews import admission_review
from tests.app.served import serve

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

ASCEND = {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "16384"}


def test_device_config_map_is_read_and_its_misspellings_are_named_once(pki: LocalFiles, tmp_path: Path) -> None:
    """HAMI_DEVICE_CONFIG pointing at the ConfigMap as kubectl exports it; two workers, one warning each key."""
    config = {"nvidia": {"gpuCorePolicy": "force", "defaultMemroy": 1000}, "enflam": {}}
    config_map = tmp_path / "device-configmap.yaml"
    config_map.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "hami-device-config", "namespace": "hami-system", "resourceVersion": "12"},
                "data": {"device-config.yaml": yaml.safe_dump(config, sort_keys=False)},
            }
        )
    )
    with serve(pki, HAMI_WEBHOOK_WORKERS="2", HAMI_LOG_FORMAT="json", HAMI_DEVICE_CONFIG=str(config_map)) as served:
        status, answer = served.post(admission_review(pod(container(limits={"nvidia.com/gpu": "1"})), uid="u-cm"))
        assert status == 200
        patch = json.loads(base64.b64decode(answer["response"]["patch"]))
        env = [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}]
        assert {"op": "add", "path": "/spec/containers/0/env", "value": env} in patch
        served.wait_for("Booting worker")
        lines = [json.loads(line) for line in served.lines]
    warnings = [line["msg"] for line in lines if line["level"] == "warning" and "HAMI_DEVICE_CONFIG" in line["msg"]]
    assert warnings == [
        f"HAMI_DEVICE_CONFIG: {config_map}: nvidia.defaultMemroy: unknown key, ignored (did you mean defaultMemory?)",
        f"HAMI_DEVICE_CONFIG: {config_map}: enflam: unknown section, ignored (did you mean enflame?)",
    ]


def test_a_pod_for_a_vendor_that_is_off_names_the_setting_in_its_review_line(pki: LocalFiles) -> None:
    with serve(pki, HAMI_WEBHOOK_WORKERS="1", HAMI_LOG_FORMAT="json") as served:
        status, answer = served.post(admission_review(pod(container(limits=ASCEND)), uid="u-ascend"))
        assert status == 200 and answer["response"]["allowed"] is True and "patch" not in answer["response"]
        served.post(admission_review(pod(container(limits={"nvidia.com/gpu": "1"})), uid="u-gpu"))
        served.wait_for('"uid":"u-gpu"')
        reviews = {line["uid"]: line for line in map(json.loads, served.lines) if line["msg"] == "review"}
    assert reviews["u-ascend"]["hint"] == (
        "huawei.com/Ascend910B3, huawei.com/Ascend910B3-memory belong to a device backend that is off: "
        "set HAMI_ENABLE_ASCEND=true to handle them"
    )
    assert "hint" not in reviews["u-gpu"], "a Pod an enabled vendor handles carries no hint"
    assert "hint" not in answer["response"]["status"] and "message" not in answer["response"]["status"]
