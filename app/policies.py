"""The admission policies kube-apiserver runs in process beside the webhook, written from the webhook's own lists.

Three ValidatingAdmissionPolicies and one MutatingAdmissionPolicy
(docs/rules.md#the-api-server-checks-what-the-webhook-cannot):

- the allocation guard: only HAMi's components write the annotations that hand a Pod its devices, on any
  create or update, in every namespace (the webhook sees creates in its scope only);
- routed: a device Pod in the webhook's scope is never stored on default-scheduler or with a node (what a
  skipped or failed-open webhook leaves); out of scope it is a warning;
- reviewed: a warning for a device Pod bound for HAMi's scheduler that the webhook never marked;
- the floor (a kustomize component, Kubernetes 1.36+): device Pods routed to HAMi's scheduler in process.

Every list in them comes from here: the resource names from the device config, the scheduler name from
Settings, the owned annotations from app/annotations.py, the scope from the MutatingWebhookConfiguration, so
an overlay with its own device config runs ``hami-webhook policies`` instead of copying names by hand. The
shipped manifests hold this module's output for the chart's defaults (a test keeps them equal). Pure: dicts in,
YAML text out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from app.settings import Settings

Obj = dict[str, Any]
API = "admissionregistration.k8s.io/v1"
PREFIX = "hami-webhook-"
GUARD = f"{PREFIX}allocation-guard"
ROUTED = f"{PREFIX}routed"
REVIEWED = f"{PREFIX}reviewed"
FLOOR = f"{PREFIX}floor"
DEFAULT_SCHEDULER = "default-scheduler"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
HAMI_COMPONENTS = ("kube-system:hami-scheduler", "kube-system:hami-device-plugin")
"""HAMi's chart's ServiceAccounts (release ``hami`` in kube-system): its scheduler and NVIDIA device plugin."""
GENERATED = (
    "# Written by `hami-webhook policies` from the device config, the settings and the webhook's scope;\n"
    "# edit those and run it again (docs/rules.md#one-source-for-every-list), never this file.\n"
)
POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
NOT_MIRROR = {
    "name": "not-mirror-pod",
    "expression": f"!has(object.metadata.annotations) || !('{MIRROR_ANNOTATION}' in object.metadata.annotations)",
}


@dataclass(frozen=True)
class Inputs:
    """What the policies are written from."""

    settings: Settings
    scope: Mapping[str, Any]
    """The webhook of the MutatingWebhookConfiguration: its namespaceSelector and objectSelector."""
    components: Sequence[str] = HAMI_COMPONENTS
    """``namespace:name`` of each ServiceAccount that may write HAMi's allocation annotations."""


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)


def _listed(names: Iterable[str], indent: str) -> str:
    return ",\n".join(f"{indent}'{name}'" for name in names)


def webhook_match_conditions(names: Iterable[str]) -> list[Obj]:
    """The MutatingWebhookConfiguration's matchConditions: any container asking for any of ``names`` in limits
    or requests (the webhook sees Pods before validation), and no mirror Pod."""
    listed = _listed(sorted(names), "        ")
    expression = (
        "has(object.spec) &&\n"
        "((has(object.spec.containers) ? object.spec.containers : []) +\n"
        " (has(object.spec.initContainers) ? object.spec.initContainers : [])).exists(c,\n"
        "  has(c.resources) &&\n"
        "  [has(c.resources.limits) ? c.resources.limits : {},\n"
        "   has(c.resources.requests) ? c.resources.requests : {}].exists(m,\n"
        f"    m.exists(r, r in [\n{listed}\n      ])))"
    )
    return [{"name": "requests-accelerator", "expression": expression}, NOT_MIRROR]


def _requests_device(names: Iterable[str]) -> Obj:
    """A container or init container with a limit on one of ``names``. Limits only: validating policies see the
    Pod after validation, which requires a limit for every extended resource requested."""
    has_device = (
        f"has(c.resources) && has(c.resources.limits) && c.resources.limits.exists(r, r in [{_quoted(sorted(names))}])"
    )
    expression = (
        f"object.spec.containers.exists(c, {has_device}) ||\n"
        f"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, {has_device}))"
    )
    return {"name": "requests-device", "expression": expression}


def _policy(kind: str, name: str, spec: Obj) -> Obj:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": name}, "spec": spec}


def _binding(kind: str, name: str, policy: str, actions: Sequence[str] = (), **match: Obj) -> Obj:
    spec: Obj = {"policyName": policy}
    if actions:
        spec["validationActions"] = list(actions)
    if match:
        spec["matchResources"] = match
    return _policy(kind, name, spec)


def allocation_guard(owned: Sequence[str], components: Sequence[str]) -> list[Obj]:
    """Creates and updates of Pods that add, change or remove an annotation of ``owned`` are refused, unless
    made by one of ``components``. The status and binding subresources are matched too, since both can write a
    Pod's annotations (a Binding's are copied onto its Pod); the kubelet's status updates and kube-scheduler's
    bindings never touch these, so they stop at the matchConditions and are never refused."""
    users = [f"system:serviceaccount:{account}" for account in components]
    changed = (
        "(k in variables.now) != (k in variables.before) ||\n"
        "  (k in variables.now && variables.now[k] != variables.before[k])"
    )
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    **POD_RULE,
                    "resources": ["pods", "pods/status", "pods/binding", "bindings"],
                    "operations": ["CREATE", "UPDATE"],
                }
            ]
        },
        "matchConditions": [
            {"name": "not-hami-component", "expression": f"!(request.userInfo.username in [{_quoted(users)}])"},
            {
                "name": "annotations-written",
                "expression": "oldObject == null ? has(object.metadata.annotations) :\n"
                "(has(object.metadata.annotations) ? object.metadata.annotations : {}) !=\n"
                "(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {})",
            },
        ],
        "variables": [
            {"name": "now", "expression": "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
            {
                "name": "before",
                "expression": "oldObject != null && has(oldObject.metadata.annotations) ?\n"
                "oldObject.metadata.annotations : {}",
            },
            {"name": "written", "expression": f"[\n{_listed(owned, '  ')}\n].filter(k,\n  {changed})"},
        ],
        "validations": [
            {
                "expression": "size(variables.written) == 0",
                "messageExpression": "'annotation ' + variables.written[0] +\n"
                '" is written by HAMi\'s scheduler and device plugins only: " + request.userInfo.username +\n'
                "(oldObject != null ? ' may not add, change or remove it' :\n"
                " request.kind.kind == 'Binding' ? ' may not bind a Pod with it' : ' may not create a Pod with it')",
                "reason": "Forbidden",
            }
        ],
    }
    binding = _binding("ValidatingAdmissionPolicyBinding", GUARD, GUARD, ["Deny"])
    return [_policy("ValidatingAdmissionPolicy", GUARD, spec), binding]


def render(inputs: Inputs) -> dict[str, str]:
    """Each policy file's YAML text, by file name."""
    owned = inputs.settings.owned_annotations.owned
    return {"allocation-guard.yaml": _yaml(allocation_guard(owned, inputs.components))}


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line expressions, never anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _string)


def _yaml(objects: Sequence[Obj]) -> str:
    return GENERATED + "---\n".join(yaml.dump(o, Dumper=_Dumper, sort_keys=False, width=120) for o in objects)
