"""HAMi's Pod annotations checked on device Pods: cases generated from the table itself, warned and strict."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.admission.annotations import (
    CHIP,
    NODE_LABEL,
    TABLE,
    Annotation,
    AnnotationRules,
    ListOf,
    OneOf,
    Text,
    Weights,
)
from app.preview.generated import annotation_tables, shown_key
from app.settings import Settings, SettingsError
from testbed.pods import container, pod
from testbed.reviews import run

MLU = {"cambricon.com/vmlu": "1"}
"""A device no vendor rule reads an annotation for, so every finding below is the table's."""
CHIPS = {"HAMI_ENABLE_ASCEND": "true", "HAMI_ENABLE_ILUVATAR": "true"}
SETTINGS = Settings.from_env(CHIPS)
STRICT = Settings.from_env({**CHIPS, "HAMI_STRICT_ANNOTATIONS": "true"})
RULES = SETTINGS.annotation_rules


def valid_values(row: Annotation) -> list[str]:
    """Values the row's reader understands: every choice, a list of them all, a sample of free text."""
    accepts = row.accepts
    if isinstance(accepts, OneOf):
        return list(accepts.choices)
    if isinstance(accepts, ListOf):
        return [*accepts.choices, ",".join(accepts.choices), f" {accepts.choices[-1]} , {accepts.choices[0]}"]
    if isinstance(accepts, Weights):
        return ["slot=1,core=1,memory=3", "memory=0, core=+2 ,slot=0"]
    assert isinstance(accepts, Text)
    return ["GPU-7f3a,GPU-91b2", ""]


def invalid_values(row: Annotation) -> list[str]:
    """Values the row's reader would ignore or refuse."""
    accepts = row.accepts
    if isinstance(accepts, OneOf):
        return [accepts.choices[0].upper() + "x", "", f"{accepts.choices[0]} "]
    if isinstance(accepts, ListOf):
        return [f"{accepts.choices[0]},bogus", "", ",", f" {accepts.choices[0]}"]
    if isinstance(accepts, Weights):
        return [
            "slot=1,core=1",
            "slot=0,core=0,memory=0",
            "slot=-1,core=1,memory=1",
            "slot=1,core=1,gpu=1",
            "slot=1,slot=1,memory=1",
            "slot=a,core=1,memory=1",
            "slot=1,core=1,memory=99999999999999999999",
        ]
    return []


def misspelled(key: str) -> str:
    """``key`` with the second-to-last character dropped: a typo one edit away."""
    return key[:-2] + key[-1]


USER_KEYS = [key for key, row in RULES.rows.items() if not row.written_by]
HAMI_KEYS = SETTINGS.owned_annotations.owned
CHECKED_KEYS = [key for key in RULES.rows if key.split("/")[0] in RULES.prefixes]
VALID = [
    pytest.param(key, value, id=f"{key}={value!r}") for key in USER_KEYS for value in valid_values(RULES.rows[key])
]
INVALID = [
    pytest.param(key, value, id=f"{key}={value!r}") for key in USER_KEYS for value in invalid_values(RULES.rows[key])
]


def device_pod(annotations: dict[str, str]) -> dict[str, Any]:
    return pod(container(limits=MLU), annotations=annotations)


def warnings_of(obj: dict[str, Any], settings: Settings = SETTINGS) -> list[str]:
    outcome = run(obj, settings)
    assert outcome.response["allowed"] is True, outcome.denial()
    return outcome.response.get("warnings", [])


def test_every_row_is_generated_for() -> None:
    """Each row of the table yields a known key here (the chips of both per-chip backends configured)."""
    assert {row.key for row in RULES.rows.values()} == {row.key for row in TABLE}
    assert "hami.io/use-Ascend910B3-uuid" in RULES.rows and "hami.io/no-use-MR-V100-uuid" in RULES.rows
    assert all(CHIP not in key for key in RULES.rows)
    assert len(INVALID) > 20 and len(VALID) > 50


@pytest.mark.parametrize(("key", "value"), VALID)
def test_valid_value_draws_no_warning(key: str, value: str) -> None:
    assert warnings_of(device_pod({key: value})) == []
    assert run(device_pod({key: value}), STRICT).response["allowed"] is True


def invalid(key: str, value: str) -> str:
    """The warning: the value and the accepted values, or the accepted values alone when both do not fit."""
    described = RULES.rows[key].accepts.described
    shown = repr(value) if len(value) <= 16 else repr(value[:16]) + "..."
    text = f"annotation {key}: {shown} is not {described}"
    return text if len(text) <= 120 else f"annotation {key} accepts {described}"


@pytest.mark.parametrize(("key", "value"), INVALID)
def test_invalid_value_is_warned_with_the_accepted_values(key: str, value: str) -> None:
    assert warnings_of(device_pod({key: value})) == [invalid(key, value)]


@pytest.mark.parametrize(("key", "value"), INVALID)
def test_invalid_value_is_denied_when_strict(key: str, value: str) -> None:
    outcome = run(device_pod({key: value}), STRICT)
    assert outcome.denial() == (False, 400, "BadRequest", invalid(key, value))
    assert outcome.ops == [] and "warnings" not in outcome.response


def test_every_accepted_set_fits_a_warning() -> None:
    """Even without the value, each warning lists the accepted values in full."""
    checked = [key for key in USER_KEYS if invalid_values(RULES.rows[key])]
    assert checked, "no annotation a user writes has a value to warn about"
    for key in checked:
        assert len(f"annotation {key} accepts {RULES.rows[key].accepts.described}") <= 120, key


@pytest.mark.parametrize("key", CHECKED_KEYS)
def test_misspelled_key_names_the_known_one(key: str) -> None:
    typo = misspelled(key)
    assert typo not in RULES.rows
    assert warnings_of(device_pod({typo: "x"})) == [f"unknown annotation {typo}; did you mean {key}?"]
    assert run(device_pod({typo: "x"}), STRICT).denial() == (
        False,
        400,
        "BadRequest",
        f"unknown annotation {typo}; did you mean {key}?",
    )


@pytest.mark.parametrize("key", HAMI_KEYS)
@pytest.mark.parametrize("scheduler", ["hami-scheduler", "volcano"])
@pytest.mark.parametrize("limits", [MLU, {"cpu": "1"}], ids=["device", "cpu"])
def test_key_hami_writes_is_denied_on_every_pod(key: str, scheduler: str, limits: dict[str, str]) -> None:
    """A Pod may not carry an allocation of its own making, whatever it asks for and whichever its scheduler:
    HAMi's device plugins read their devices from these keys (docs/rules.md#allocations-are-hamis)."""
    row = SETTINGS.owned_annotations.rows[key]
    text = f"annotation {key} is written by {row.written_by}, not by a Pod's author"
    forged = pod(container(limits=limits), annotations={"team": "a", key: "x"}, scheduler=scheduler)
    for settings in (SETTINGS, STRICT):
        assert run(forged, settings).denial() == (False, 403, "Forbidden", text)


@pytest.mark.parametrize("scheduler", ["hami-scheduler", "volcano"])
@pytest.mark.parametrize("limits", [MLU, {"cpu": "1"}], ids=["device", "cpu"])
def test_label_hami_writes_is_denied_on_every_pod(scheduler: str, limits: dict[str, str]) -> None:
    """The node label HAMi's scheduler sets beside its annotation is not the author's either: HAMi's vGPU monitor
    counts a Pod's use by it."""
    forged = pod(container(limits=limits), metadata={"labels": {"app": "a", NODE_LABEL: "n1"}}, scheduler=scheduler)
    text = f"label {NODE_LABEL} is written by HAMi's scheduler, not by a Pod's author"
    assert run(forged, SETTINGS).denial() == (False, 403, "Forbidden", text)


def test_webhook_keys_are_the_authors_to_keep() -> None:
    """What this webhook writes is not an allocation: reviewing its own output again must admit it."""
    assert not SETTINGS.owned_annotations.forged(
        {"mthreads.com/request-gpu-num": "1", "hami.io/gpu-type": "NVIDIA"}, {"app": "a"}
    )


def test_prefixes_are_where_hami_reads() -> None:
    """hami.io and every vendor prefix HAMi reads a Pod annotation under; mthreads.com is only written to."""
    assert RULES.prefixes == {
        "hami.io",
        "nvidia.com",
        "cambricon.com",
        "hygon.com",
        "huawei.com",
        "metax-tech.com",
        "mthreads.ai",
        "enflame.com",
        "baidu.com",
        "aws.amazon.com",
        "amd.com",
        "vastaitech.com",
        "birentech.com",
    }


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({"example.com/gpu-scheduler-policy": "x"}, id="other-prefix"),
        pytest.param({"scheduler-policy": "x"}, id="no-prefix"),
        pytest.param({"mthreads.com/anything": "x"}, id="prefix-hami-only-writes"),
        pytest.param({"sub.hami.io/x": "x", "hami.io.example/x": "x"}, id="look-alike-prefixes"),
        pytest.param({"kubernetes.io/description": "x"}, id="kubernetes"),
    ],
)
def test_annotations_outside_hami_prefixes_are_not_checked(annotations: dict[str, str]) -> None:
    assert warnings_of(device_pod(annotations)) == []
    assert run(device_pod(annotations), STRICT).response["allowed"] is True


def test_only_device_pods_are_checked() -> None:
    annotations = {"hami.io/gpu-schedular-policy": "binpack", "hami.io/node-scheduler-policy": "binpak"}
    plain = pod(container(limits={"cpu": "1"}), annotations=annotations)
    assert warnings_of(plain) == []
    outcome = run(plain, STRICT)
    assert outcome.response["allowed"] is True and outcome.ops == []


def test_chip_keys_follow_the_configured_backends() -> None:
    """hami.io/use-<chip>-uuid exists only for chips of an enabled backend."""
    obj = device_pod({"hami.io/use-Ascend910B3-uuid": "NPU-1"})
    assert warnings_of(obj) == []
    plain = Settings.from_env({})
    [warning] = warnings_of(obj, plain)
    assert warning.startswith("unknown annotation hami.io/use-Ascend910B3-uuid; did you mean ")


def test_a_key_far_from_every_known_one_gets_the_likest_under_its_prefix() -> None:
    [warning] = warnings_of(device_pod({"aws.amazon.com/zzzz": "x"}))
    assert warning == "unknown annotation aws.amazon.com/zzzz; did you mean aws.amazon.com/use-neuron-uuid?"


def test_several_findings_are_all_named_in_order_and_strict_joins_them() -> None:
    annotations = {
        "hami.io/gpu-schedular-policy": "binpack",
        "nvidia.com/numa-bind": "yes",
        "hami.io/use-xpu-uid": "x",
    }
    expected = [
        "unknown annotation hami.io/gpu-schedular-policy; did you mean hami.io/gpu-scheduler-policy?",
        "annotation nvidia.com/numa-bind: 'yes' is not true or false",
        "unknown annotation hami.io/use-xpu-uid; did you mean hami.io/use-xpu-uuid?",
    ]
    assert warnings_of(device_pod(annotations)) == expected
    assert run(device_pod(annotations), STRICT).denial()[3] == "; ".join(expected)


def test_hami_examples_are_accepted() -> None:
    """Annotations as HAMi's own examples and docs write them."""
    annotations = {
        "nvidia.com/use-gputype": "A100,V100",
        "nvidia.com/nouse-gputype": "1080,2080",
        "nvidia.com/use-gpuuuid": "GPU-03f69c50-207a-2038-9b45-23cac89cb67d,GPU-03f69c50-207a-2038-9b45-23cac89cb67e",
        "nvidia.com/vgpu-mode": "mig",
        "hami.io/node-scheduler-policy": "spread",
        "hami.io/gpu-scheduler-policy": "binpack",
        "metax-tech.com/sgpu-topology-aware": "true",
        "metax-tech.com/sgpu-qos-policy": "best-effort",
        "hygon.com/use-dcutype": "DCU-K100_AI",
        "huawei.com/vnpu-mode": "hami-core",
    }
    assert warnings_of(device_pod(annotations)) == []


def test_policy_settings_must_be_understood_by_the_scheduler() -> None:
    with pytest.raises(SettingsError, match=r"^HAMI_GPU_SCHEDULER_POLICY: expected a comma-separated list of binpack"):
        Settings.from_env({"HAMI_GPU_SCHEDULER_POLICY": "binpak"})
    with pytest.raises(SettingsError, match=r"^HAMI_NODE_SCHEDULER_POLICY: expected one of binpack, spread, got"):
        Settings.from_env({"HAMI_NODE_SCHEDULER_POLICY": "topology-aware"})
    assert Settings.from_env({"HAMI_GPU_SCHEDULER_POLICY": "binpack,numa"}).gpu_scheduler_policy == "binpack,numa"


def test_rules_without_configured_chips_have_no_chip_keys() -> None:
    rules = AnnotationRules(())
    assert not any(key.startswith("hami.io/use-") and key != "hami.io/use-xpu-uuid" for key in rules.rows)


# -- docs/annotations.md shows the table and an example that holds; the README's short table agrees --------------
ROOT = Path(__file__).resolve().parents[3]
ANNOTATIONS_PAGE = ROOT / "docs" / "annotations.md"
README = ROOT / "README.md"


def test_annotations_page_tables_are_the_table() -> None:
    """Every row, in order: what an author may set, then what HAMi writes, grouped by writer (`hami-webhook
    generate` writes both tables)."""
    text = ANNOTATIONS_PAGE.read_text()
    for table in annotation_tables():
        assert "\n".join(table) in text, "run `hami-webhook generate`"
    listed = re.search(r"a prefix where HAMi reads Pod annotations \(([^)]*)\)", text.replace("\n", " "))
    assert listed and set(re.findall(r"`([^`]+)`", listed.group(1))) == RULES.prefixes


def test_readme_short_table_rows_are_rows_of_the_table() -> None:
    """The README lists a few annotations an author sets; each is a row an author may set, described as the table
    describes it."""
    section = README.read_text().split("## Annotations\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (`[^|]+`) \| ([^|]+) \|$", section, re.M)
    assert rows, "the README's annotation table"
    by_key = {shown_key(row): row for row in TABLE if not row.written_by}
    for keys, accepted in rows:
        for key in keys.split(", "):
            assert key in by_key, key
            assert by_key[key].accepts.described == accepted.strip(), key


def test_kubectl_example_is_what_the_webhook_says(make_settings) -> None:
    section = ANNOTATIONS_PAGE.read_text().split("## What kubectl shows you", 1)[1].split("\n## ", 1)[0]
    manifest = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    shown = re.findall(r"^Warning: (.*)$", section, re.M)
    denied = re.search(r"denied the request: (.*)$", section, re.M).group(1)
    assert run(manifest, make_settings()).response["warnings"] == shown
    assert run(manifest, make_settings(HAMI_STRICT_ANNOTATIONS="true")).denial()[3] == denied


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        pytest.param("nvidia.com/gpu-scheduler-policy", "hami.io/gpu-scheduler-policy", id="wrong-prefix"),
        pytest.param("hami.io/numa-bind", "nvidia.com/numa-bind", id="wrong-prefix-to-vendor"),
        pytest.param("nvidia.com/use-gpu-type", "nvidia.com/use-gputype", id="same-prefix-first"),
        pytest.param("amd.com/use-gpuuuid", "amd.com/use-gpu-uuid", id="vendor-spelling"),
    ],
)
def test_closest_prefers_the_same_prefix_then_any(typo: str, meant: str) -> None:
    assert RULES.closest(typo) == meant
