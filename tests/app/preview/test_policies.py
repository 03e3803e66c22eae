"""The admission policies are written from the webhook's own lists: the shipped ones are exactly what
`hami-webhook policies` writes for the chart's defaults, and what it writes follows the device config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from app.cli import main
from app.preview.generated import GeneratedError, expected, spliced, tabled
from app.preview.policies import GUARD, ROUTED, Inputs, mutated, render, scheduler_of
from app.preview.scope import load_scope
from app.settings import Settings
from testbed import ROOT

MANIFESTS = ROOT / "manifests"
SHIPPED = {
    "allocation-guard.yaml": MANIFESTS / "base" / "policies" / "allocation-guard.yaml",
    "routed.yaml": MANIFESTS / "base" / "policies" / "routed.yaml",
    "floor.yaml": MANIFESTS / "components" / "floor" / "floor.yaml",
}
WEBHOOK_CONFIGURATION = MANIFESTS / "base" / "mutatingwebhookconfiguration.yaml"
WORKLOAD_CONFIGURATION = MANIFESTS / "base" / "validatingwebhookconfiguration.yaml"


def chart_defaults() -> dict[str, str]:
    return render(Inputs(Settings.from_env({}), load_scope().webhook))


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_policies_are_the_commands_output_for_the_chart_defaults(name: str) -> None:
    rerun = f"run `hami-webhook generate`: it rewrites {SHIPPED[name].relative_to(ROOT)}"
    assert SHIPPED[name].read_text() == chart_defaults()[name], rerun


def test_shipped_match_conditions_are_the_commands() -> None:
    """Every resource name of every vendor (Ascend and Iluvatar too: the webhook says why it passes those)."""
    pods, workloads = yaml.safe_load_all(chart_defaults()["match-conditions.yaml"])
    (written,) = pods["webhooks"]
    (shipped,) = yaml.safe_load(WEBHOOK_CONFIGURATION.read_text())["webhooks"]
    assert written["name"] == shipped["name"]
    assert shipped["matchConditions"] == written["matchConditions"]
    shipped_workloads = yaml.safe_load(WORKLOAD_CONFIGURATION.read_text())
    assert shipped_workloads["metadata"] == workloads["metadata"]
    assert [(w["name"], w["matchConditions"]) for w in shipped_workloads["webhooks"]] == [
        (w["name"], w["matchConditions"]) for w in workloads["webhooks"]
    ]


def test_generate_finds_every_shipped_file_current(capsys: pytest.CaptureFixture[str]) -> None:
    """Byte for byte, the configurations' hand-written parts kept: what `hami-webhook generate` would write."""
    assert main(["generate", "--check"]) == 0, capsys.readouterr().err


def test_generate_rewrites_each_matchconditions_block_and_keeps_the_rest() -> None:
    text = "# by hand\nwebhooks:\n- name: a\n  matchConditions:\n  - name: old\n    expression: x\n\n- name: b\n"
    text += "  matchConditions:\n  - name: old\n    expression: x\n  timeoutSeconds: 5\n"
    hooks = [{"matchConditions": [{"name": "new", "expression": "y"}]}] * 2
    assert spliced(text, hooks, "f.yaml") == text.replace("old", "new").replace("x\n", "y\n")
    with pytest.raises(GeneratedError, match=r"f\.yaml has 2 matchConditions blocks, 1 webhooks to write"):
        spliced(text, hooks[:1], "f.yaml")


def test_generate_rewrites_a_markdown_table_whole_and_keeps_the_text() -> None:
    text = "Before.\n\n| a | b |\n|---|---|\n| old | row |\n| gone | row |\n\nAfter.\n"
    table = ["| a | b |", "|---|---|", "| new | row |"]
    assert tabled(text, [table], "p.md") == "Before.\n\n| a | b |\n|---|---|\n| new | row |\n\nAfter.\n"
    with pytest.raises(GeneratedError, match=r"p\.md has no table headed \| c \|"):
        tabled(text, [["| c |"]], "p.md")


def test_generate_refuses_a_tree_without_manifests(tmp_path: Path) -> None:
    with pytest.raises(GeneratedError, match="run it from a checkout"):
        expected(tmp_path, chart_defaults())


def test_the_workload_webhooks_cover_every_kind_that_creates_pods_from_a_template() -> None:
    """Each kind of TEMPLATES is sent, CREATE and UPDATE, to the webhook whose conditions read its template's place;
    never a subresource (the scale subresource autoscalers call)."""
    from app.admission.templates import TEMPLATES
    from app.admission.workloads import WORKLOAD_KINDS
    from app.preview.conditions import WORKLOAD_WEBHOOKS

    paths = {name: path for name, path, _counts in WORKLOAD_WEBHOOKS}
    covered = {}
    for hook in yaml.safe_load(WORKLOAD_CONFIGURATION.read_text())["webhooks"]:
        assert (hook["failurePolicy"], hook["sideEffects"], hook["clientConfig"]["service"]["path"]) == (
            "Ignore",
            "None",
            "/workloads",
        )
        assert hook["timeoutSeconds"] <= 5
        for rule in hook["rules"]:
            assert rule["operations"] == ["CREATE", "UPDATE"]
            for resource in rule["resources"]:
                assert "/" not in resource
                covered[(rule["apiGroups"][0], resource)] = paths[hook["name"]]
    assert covered == {WORKLOAD_KINDS[kind]: path for kind, path in TEMPLATES.items()}


def test_command_writes_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies", "--out", str(tmp_path)]) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == chart_defaults()


def test_guard_lists_every_owned_key_of_every_vendor_and_the_given_components(tmp_path: Path) -> None:
    config = tmp_path / "devices.yaml"
    config.write_text(
        "vnpus:\n  configs:\n    - {chipName: 910X, commonWord: Ascend910X, resourceName: huawei.com/Ascend910X}\n"
    )
    out = tmp_path / "out"
    assert main(["policies", "--config", str(config), "--hami-component", "gpu:my-scheduler", "--out", str(out)]) == 0
    policy, binding = yaml.safe_load_all((out / "allocation-guard.yaml").read_text())
    assert policy["metadata"]["name"] == binding["spec"]["policyName"] == GUARD
    listed = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "written")
    owned = Settings.from_env({"HAMI_DEVICE_CONFIG": str(config)}).owned_annotations.owned
    assert "huawei.com/Ascend910X" in owned and "hami.io/Ascend910X-devices-to-allocate" in owned
    assert all(f"'{key}'" in listed for key in owned)
    skipped = policy["spec"]["matchConditions"][0]
    assert skipped == {
        "name": "not-hami-component",
        "expression": "!(request.userInfo.username in ['system:serviceaccount:gpu:my-scheduler'])",
    }


def test_the_shipped_guard_pins_no_account_nor_scheduler_and_asks_the_authorizer_last() -> None:
    """Trust by permission: no user name in it, and no check names a scheduler (a vendor's own scheduler and plugin
    are trusted as HAMi's are, and the webhook charges and seals a device Pod whatever its scheduler); the
    authorizer only after an owned key is found written, and after the cheap test (a ServiceAccount)."""
    policy, _ = yaml.safe_load_all(chart_defaults()["allocation-guard.yaml"])
    assert [c["name"] for c in policy["spec"]["matchConditions"]] == ["metadata-written"]
    allocation, reservation = policy["spec"]["validations"]
    expression = allocation["expression"]
    assert "system:serviceaccount:kube-system" not in yaml.safe_dump(policy)
    assert "schedulerName" not in yaml.safe_dump(policy)
    assert "oldObject == null && request.kind.kind == 'Pod'" in reservation["expression"]
    order = [
        "size(variables.written) + size(variables.labelled) == 0 ||",
        "request.userInfo.username.startsWith('system:serviceaccount:')",
        "authorizer.group('').resource('nodes').check('patch').allowed()",
    ]
    assert [expression.index(part) for part in order] == sorted(expression.index(part) for part in order)


def test_the_guard_looks_at_the_pods_annotations_once() -> None:
    """The cost of a create does not grow with the owned keys: the annotations written are found in one pass over
    the Pod's map (and the old one's), and only those are looked up in the owned list, which appears once."""
    policy, _ = yaml.safe_load_all(chart_defaults()["allocation-guard.yaml"])
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["changed"].startswith("variables.now.filter(k,")
    assert variables["written"].startswith("variables.changed.filter(k, k in [")
    owned = Settings.from_env({}).owned_annotations.owned
    annotations = yaml.safe_dump(
        {**policy["spec"], "variables": {k: v for k, v in variables.items() if k != "labelled"}}
    )
    assert [key for key in owned if annotations.count(f"'{key}'") != 1] == []
    assert "'hami.io/quota-reservation' in variables.changed" in policy["spec"]["validations"][1]["expression"]


def test_a_malformed_component_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies", "--hami-component", "hami-scheduler"]) == 2
    assert "--hami-component 'hami-scheduler': expected NAMESPACE:NAME" in capsys.readouterr().err


def test_the_policies_follow_the_settings(tmp_path: Path) -> None:
    """Another scheduler name everywhere, the enabled vendors' names only, and no floor and no default-scheduler
    check when the webhook leaves default-scheduler Pods alone."""
    env = {"HAMI_SCHEDULER_NAME": "gpu-scheduler", "HAMI_FORCE_OVERWRITE_DEFAULT_SCHEDULER": "false"}
    files = render(Inputs(Settings.from_env(env), load_scope().webhook))
    assert "floor.yaml" not in files
    policy, deny, *outside = [
        o for o in yaml.safe_load_all(files["routed.yaml"]) if o["metadata"]["name"].startswith(ROUTED)
    ]
    assert [v["expression"] for v in policy["spec"]["validations"]] == [
        "!has(object.spec.nodeName) || object.spec.schedulerName != variables.scheduler"
    ]
    assert scheduler_of(policy) == "gpu-scheduler"
    assert "hami-scheduler" not in "".join(files.values())
    devices = policy["spec"]["matchConditions"][0]["expression"]
    assert "'nvidia.com/gpu'" in devices and "huawei.com" not in devices  # Ascend is off by default
    assert deny["spec"]["validationActions"] == ["Deny"] and len(outside) == 3


def test_outside_the_scope_is_the_complement_of_each_requirement() -> None:
    """The webhook's selectors AND their requirements (the Pods it mutates: less those opted out by their label);
    the warning bindings cover each one's opposite."""
    scope = load_scope().webhook
    objects = list(yaml.safe_load_all(chart_defaults()["routed.yaml"]))
    outside = [o["spec"]["matchResources"] for o in objects if o["metadata"]["name"].startswith(f"{ROUTED}-outside")]
    requirements = [
        *(("namespaceSelector", r) for r in scope["namespaceSelector"]["matchExpressions"]),
        *(("objectSelector", r) for r in mutated(scope)["matchExpressions"]),
    ]
    assert len(outside) == len(requirements)
    for match, (field, requirement) in zip(outside, requirements, strict=True):
        (negated,) = match[field]["matchExpressions"]
        assert requirement["operator"] == "NotIn"
        assert negated == {**requirement, "operator": "In"}


SELECTOR = {
    "matchLabels": {"team": "ml"},
    "matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["gpu", "npu"]},
        {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]},
        {"key": "quota", "operator": "Exists"},
        {"key": "legacy", "operator": "DoesNotExist"},
    ],
}


@pytest.mark.parametrize(
    "labels",
    [
        {"team": "ml", "tier": "gpu", "quota": ""},
        {"team": "ml", "tier": "npu", "quota": "x", "hami.io/webhook": "on"},
        {"team": "ml", "tier": "gpu", "quota": "", "hami.io/webhook": "ignore"},
        {"team": "ml", "tier": "gpu", "quota": "", "legacy": "1"},
        {"team": "ml", "tier": "gpu"},
        {"team": "ml", "tier": "cpu", "quota": ""},
        {"team": "ai", "tier": "gpu", "quota": ""},
        {},
    ],
    ids=["all", "other-values", "opted-out", "legacy", "no-quota", "not-in", "match-labels", "none"],
)
def test_the_guards_scope_is_the_webhooks_selector_in_cel(labels: dict[str, str]) -> None:
    """The reservation check's scope in CEL selects what the API server's selector does, operator by operator (a
    label the object lacks passes NotIn and DoesNotExist only)."""
    import celpy

    from app.preview.matching import matches_label_selector
    from app.preview.policies import _selected

    env = celpy.Environment()
    expression = " && ".join(_selected(SELECTOR, "labels"))
    found = env.program(env.compile(expression)).evaluate({"labels": celpy.json_to_cel(labels)})
    assert bool(found) == matches_label_selector(SELECTOR, labels)


def test_no_scheduler_name_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HAMI_SCHEDULER_NAME", "")
    assert main(["policies"]) == 2
    assert "HAMI_SCHEDULER_NAME is empty" in capsys.readouterr().err


def test_only_names_the_webhook_takes_for_a_device_pod_are_checked() -> None:
    """A lone name no vendor claims leaves the Pod on default-scheduler in the webhook too: never refused."""
    policy = next(yaml.safe_load_all(chart_defaults()["routed.yaml"]))
    devices = policy["spec"]["matchConditions"][0]["expression"]
    assert "'nvidia.com/gpu'" in devices and "'nvidia.com/gpumem'" in devices  # a default count applies
    assert "'nvidia.com/priority'" not in devices and "'cambricon.com/mlu.smlu.vcore'" not in devices


def _deployment(limits: dict[str, str], annotations: dict[str, str] | None = None, **spec: object) -> dict:
    template: dict = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    template["spec"]["containers"][0]["resources"] = {"limits": limits}
    if annotations:
        template["metadata"]["annotations"] = annotations
    return {"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1, **spec, "template": template}}


GPU_DEPLOYMENT = _deployment({"nvidia.com/gpu": "1"})
OWNED = {
    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u", "controller": True}]
}


@pytest.mark.parametrize(
    ("obj", "old", "sent"),
    [
        pytest.param(GPU_DEPLOYMENT, None, True, id="device-template"),
        pytest.param(_deployment({"cpu": "1"}), None, False, id="cpu-only"),
        pytest.param(_deployment({"cpu": "1"}, {"hami.io/node-scheduler-policy": "spread"}), None, True, id="hami-key"),
        pytest.param(_deployment({"cpu": "1"}, {"example.com/x": "y"}), None, False, id="other-annotation"),
        pytest.param({**GPU_DEPLOYMENT, "metadata": {"name": "d", "labels": {"x": "y"}}}, GPU_DEPLOYMENT, False,
                     id="update-metadata-only"),
        pytest.param(_deployment({"nvidia.com/gpu": "1"}, replicas=3), GPU_DEPLOYMENT, True, id="update-replicas"),
        pytest.param(_deployment({"nvidia.com/gpu": "2"}), GPU_DEPLOYMENT, True, id="update-template"),
        pytest.param({**GPU_DEPLOYMENT, "metadata": {"name": "d", **OWNED}}, None, False, id="a-controllers"),
        pytest.param({"kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}, None, False, id="no-template"),
    ],
)  # fmt: skip
def test_the_workload_conditions_send_what_they_say(obj: dict, old: dict | None, sent: bool) -> None:
    """Evaluated as kube-apiserver evaluates them (cel-python, app/preview/matching.py); the real server decides the
    same in tests/realkube/test_workload_warnings.py."""
    from app.preview import matching

    (hook, *_) = yaml.safe_load(WORKLOAD_CONFIGURATION.read_text())["webhooks"]
    request = {"kind": {"group": "apps", "version": "v1", "kind": "Deployment"}, "object": obj, "oldObject": old}
    request["operation"] = "UPDATE" if old else "CREATE"
    result = matching.evaluate(hook["matchConditions"], request)
    assert result.errors == ()
    assert (result.outcome is matching.Outcome.MATCH) == sent
