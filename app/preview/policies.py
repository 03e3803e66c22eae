"""The admission policies kube-apiserver runs in process beside the webhook, written from the webhook's own lists.

Three ValidatingAdmissionPolicies and one MutatingAdmissionPolicy
(docs/rules.md#the-api-server-checks-what-the-webhook-cannot):

- the allocation guard: only HAMi's components and their kind (ServiceAccounts the API server's authorizer lets
  patch Nodes) write the annotations and the label that hand a Pod its devices, on any create or update, in every
  namespace (the webhook sees creates in its scope only); and the quota reservation is the webhook's alone;
- routed: a device Pod in the webhook's scope is never stored on default-scheduler or with a node (what a
  skipped or failed-open webhook leaves); out of scope it is a warning;
- reviewed: a warning for a device Pod bound for HAMi's scheduler that the webhook never marked;
- the floor (a kustomize component, Kubernetes 1.36+): device Pods routed to HAMi's scheduler in process.

Every list in them comes from here: the resource names from the device config, the scheduler name from
Settings, the owned annotations from app/admission/annotations.py, the scope from the MutatingWebhookConfiguration, so
an overlay with its own device config runs ``hami-webhook policies`` instead of copying names by hand. The
shipped manifests hold this module's output for the chart's defaults (a test keeps them equal). Pure: dicts in,
YAML text out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from app.admission.annotations import GPU_TYPE_ANNOTATION, MUTATED, OWNED_LABELS, QUOTA_RESERVATION_ANNOTATION
from app.admission.devices.base import Device
from app.admission.ports import QuotaOff, ReviewSettings
from app.admission.review import DEFAULT_SCHEDULER, decide
from app.preview.conditions import NOT_MIRROR, listed, quoted, webhook_match_conditions, workload_match_conditions

Obj = dict[str, Any]
API = "admissionregistration.k8s.io/v1"
PREFIX = "hami-webhook-"
GUARD = f"{PREFIX}allocation-guard"
ROUTED = f"{PREFIX}routed"
REVIEWED = f"{PREFIX}reviewed"
FLOOR = f"{PREFIX}floor"
SCHEDULER_VARIABLE = "scheduler"
SCHEDULER_NAME = f"variables.{SCHEDULER_VARIABLE}"
"""How a policy's expressions name HAMi's scheduler: through one variable (``_scheduler``)."""
NAMING_THE_SCHEDULER = (ROUTED, REVIEWED, FLOOR)
"""The policies that name HAMi's scheduler."""
SERVICE_ACCOUNT = "system:serviceaccount:"
"""The prefix of every ServiceAccount's user name."""
COMPONENT_CHECK = ("", "nodes", "patch")
"""What the authorizer must allow a writer of allocation annotations: API group, resource, verb (cluster-wide).
HAMi's scheduler and every device plugin hold it to register and lock Nodes; HAMi's own webhook asks the same."""
GENERATED = (
    "# Written by `hami-webhook policies` from the device config, the settings and the webhook's scope;\n"
    "# edit those and run it again (docs/rules.md#one-source-for-every-list), never this file.\n"
)
POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}


class PolicySettings(ReviewSettings, Protocol):
    """What the policies are written from besides a review's settings: every vendor of the device config, those a
    flag keeps off too (HAMi's scheduler may allocate them). app/settings.py's Settings is one."""

    @property
    def every_device(self) -> tuple[Device, ...]: ...


@dataclass(frozen=True)
class Inputs:
    """What the policies are written from."""

    settings: PolicySettings
    scope: Mapping[str, Any]
    """The webhook of the MutatingWebhookConfiguration: its namespaceSelector and objectSelector."""
    components: Sequence[str] = ()
    """``namespace:name`` of ServiceAccounts trusted to write HAMi's allocation annotations without the
    authorizer's check (none by default: the check finds HAMi's components wherever they are installed)."""
    configuration: str = "hami-webhook-pods"
    """The MutatingWebhookConfiguration's name, for the patch of its matchConditions."""
    workloads: str = "hami-webhook-workloads"
    """The ValidatingWebhookConfiguration's name (workloads' templates), for the patch of its matchConditions."""


def _requests_device(names: Iterable[str]) -> Obj:
    """A container or init container with a limit on one of ``names``. Limits only: validating policies see the
    Pod after validation, which requires a limit for every extended resource requested, and mutating policies
    see it after defaulting, which copies limits into requests."""
    expression = (
        "(has(object.spec.initContainers) ?\n"
        "  object.spec.containers + object.spec.initContainers : object.spec.containers).exists(c,\n"
        "  has(c.resources) && has(c.resources.limits) && c.resources.limits.exists(r, r in [\n"
        f"{listed(sorted(names), '    ')}\n"
        "  ]))"
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


def allocation_guard(settings: PolicySettings, scope: Mapping[str, Any], components: Sequence[str] = ()) -> list[Obj]:
    """Creates and updates of Pods that add, change or remove an annotation of the owned ones or a label of
    OWNED_LABELS are refused unless made by a ServiceAccount that the API server's authorizer lets patch Nodes, or
    by one of ``components``; whichever scheduler the Pod names, so a vendor's own scheduler and device plugin keep
    writing on their Pods what HAMi's write on its own. The status and binding subresources are matched too, since
    both can write a Pod's metadata (a Binding's annotations are copied onto its Pod); the kubelet's status updates
    and kube-scheduler's bindings never touch these, so they stop at the matchConditions and are never refused.

    The quota reservation is the webhook's own, which only writes it when it charges a device Pod it reviews, in
    its ``scope`` (whatever the Pod's scheduler or opt-out label: docs/rules.md#every-device-pod-is-charged): any
    other write of it is refused, whoever makes it (the feed counts the Pods that carry it). The keys written are
    found in one pass over the Pod's annotations (and the old ones', on an update), each looked up in the owned
    list, which the API server holds as a set; the authorizer is asked last, only once an owned key is found
    written. A map has no order, so a refusal names the least key written, the same one on every try."""
    group, resource, verb = COMPONENT_CHECK
    skipped = []
    if components:
        users = quoted(f"{SERVICE_ACCOUNT}{account}" for account in components)
        skipped.append({"name": "not-hami-component", "expression": f"!(request.userInfo.username in [{users}])"})
    labelled = (
        "(k in variables.labels) != (k in variables.labelsBefore) ||\n"
        "  (k in variables.labels && variables.labels[k] != variables.labelsBefore[k])"
    )
    owned = listed(settings.owned_annotations.owned, "  ")
    device = _requests_device(_device_names(settings))["expression"]
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
            *skipped,
            {
                "name": "metadata-written",
                "expression": "oldObject == null ? has(object.metadata.annotations) || has(object.metadata.labels) :\n"
                "(has(object.metadata.annotations) ? object.metadata.annotations : {}) !=\n"
                "(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}) ||\n"
                "(has(object.metadata.labels) ? object.metadata.labels : {}) !=\n"
                "(has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})",
            },
        ],
        "variables": [
            {"name": "now", "expression": "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
            {
                "name": "before",
                "expression": "oldObject != null && has(oldObject.metadata.annotations) ?\n"
                "oldObject.metadata.annotations : {}",
            },
            {
                "name": "changed",
                "expression": "variables.now.filter(k,\n"
                "  !(k in variables.before) || variables.now[k] != variables.before[k]) +\n"
                "variables.before.filter(k, !(k in variables.now))",
            },
            {"name": "written", "expression": f"variables.changed.filter(k, k in [\n{owned}\n])"},
            {"name": "labels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
            {
                "name": "labelsBefore",
                "expression": "oldObject != null && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}",
            },
            {
                "name": "labelled",
                "expression": f"[{quoted(OWNED_LABELS)}].filter(k,\n  {labelled})",
            },
            {
                "name": "namespaceLabels",
                "expression": "has(namespaceObject.metadata.labels) ? namespaceObject.metadata.labels : {}",
            },
        ],
        "validations": [
            {
                "expression": "size(variables.written) + size(variables.labelled) == 0 || (\n"
                f"  request.userInfo.username.startsWith('{SERVICE_ACCOUNT}') &&\n"
                f"  authorizer.group('{group}').resource('{resource}').check('{verb}').allowed())",
                "messageExpression": "(size(variables.written) > 0 ? 'annotation ' + variables.written.min() :\n"
                " 'label ' + variables.labelled[0]) +\n"
                "\" is written by HAMi's scheduler and device plugins only (ServiceAccounts allowed to "
                f'{verb} {resource}): " + request.userInfo.username +\n'
                "(oldObject != null ? ' may not add, change or remove it' :\n"
                " request.kind.kind == 'Binding' ? ' may not bind a Pod with it' : ' may not create a Pod with it')",
                "reason": "Forbidden",
            },
            {
                "expression": f"!('{QUOTA_RESERVATION_ANNOTATION}' in variables.changed) ||\n"
                f"oldObject == null && request.kind.kind == 'Pod' &&\n{_in_scope(scope)} &&\n{device}",
                "messageExpression": f'"annotation {QUOTA_RESERVATION_ANNOTATION} is written by hami-webhook only, '
                'when it charges a device Pod it reviews: " +\n'
                "request.userInfo.username + (oldObject != null ? ' may not add, change or remove it' :\n"
                " request.kind.kind == 'Binding' ? ' may not bind a Pod with it' :\n"
                " ' may not create a Pod with it asking for no device or out of its scope')",
                "reason": "Forbidden",
            },
        ],
    }
    binding = _binding("ValidatingAdmissionPolicyBinding", GUARD, GUARD, ["Deny"])
    return [_policy("ValidatingAdmissionPolicy", GUARD, spec), binding]


def _scheduler(settings: PolicySettings) -> Obj:
    """The variable that names HAMi's scheduler, the one place a policy holds it: a CEL string literal, which the
    scheduler-name component rewrites between its quotes (docs/rules.md#one-scheduler-name)."""
    return {"name": SCHEDULER_VARIABLE, "expression": f"'{settings.scheduler_name}'"}


def scheduler_of(policy: Mapping[str, Any]) -> str:
    """The scheduler an installed policy routes to or checks for, read from its variable ("" when it names none)."""
    for variable in (policy.get("spec") or {}).get("variables") or ():
        if variable.get("name") == SCHEDULER_VARIABLE:
            return str(variable.get("expression", "")).strip().strip("'")
    return ""


def _device_names(settings: PolicySettings) -> list[str]:
    """The resource names that alone make the webhook take a Pod for a device Pod, found by asking the vendors as
    the webhook does (a one-container Pod asking for one of them): an enabled vendor's count, and its memory or
    cores where a default count applies. A lone name that no vendor claims (Cambricon's vcore, NVIDIA's priority)
    or a switched-off vendor's leaves the Pod unchanged on default-scheduler, so no policy may refuse or
    reroute it."""
    names = sorted({name for device in settings.devices for name in device.resource_names})
    return [name for name in names if _claimed(name, settings)]


def _claimed(name: str, settings: PolicySettings) -> bool:
    limits = {name: "1"}
    ctr = {"name": "probe", "image": "probe", "resources": {"limits": limits, "requests": dict(limits)}}
    spec = {"schedulerName": settings.scheduler_name, "containers": [ctr]}  # past the scheduler-name gate
    probe = {"metadata": {"name": "probe"}, "spec": spec}
    return bool(
        decide(probe, settings, QuotaOff(), namespace="probe", uid="probe", dry_run=True, governed=False).devices
    )


def _on_device_pods(settings: PolicySettings, *conditions: Obj, reinvocation: str = "") -> Obj:
    """The start of a policy's spec over the device Pods being created, mirror Pods apart, that also meet
    ``conditions``: it fails closed (an error in it refuses the Pod); the caller adds what it checks or sets."""
    spec: Obj = {"failurePolicy": "Fail"}
    if reinvocation:
        spec["reinvocationPolicy"] = reinvocation
    spec["matchConstraints"] = {"resourceRules": [{**POD_RULE, "operations": ["CREATE"]}]}
    spec["matchConditions"] = [*conditions, _requests_device(_device_names(settings)), NOT_MIRROR]
    return spec


def routed(settings: PolicySettings, scope: Mapping[str, Any]) -> list[Obj]:
    """A device Pod stored on default-scheduler, or bound to a node while meant for HAMi's scheduler, is what a
    webhook that was skipped or failed open leaves: denied in the webhook's scope, a warning outside it."""
    validations = []
    if settings.force_overwrite_default_scheduler:
        validations.append(
            {
                "expression": f"object.spec.schedulerName != '{DEFAULT_SCHEDULER}'",
                "messageExpression": f'"a device Pod would be stored on {DEFAULT_SCHEDULER}, not routed to " + '
                f"{SCHEDULER_NAME} +\n"
                '" by hami-webhook (opted out, not called, failed under failurePolicy Ignore, or a later webhook added '
                "the device): HAMi's device plugins refuse to start it\"",
                "reason": "Forbidden",
            }
        )
    validations.append(
        {
            "expression": f"!has(object.spec.nodeName) || object.spec.schedulerName != {SCHEDULER_NAME}",
            "messageExpression": f'"a device Pod for " + {SCHEDULER_NAME} + " has spec.nodeName set:" +\n'
            "\" it would skip HAMi's scheduler, which allocates its devices (hami-webhook denies this: it was opted "
            'out, not called, or failed under failurePolicy Ignore)"',
            "reason": "Forbidden",
        }
    )
    spec = {**_on_device_pods(settings), "variables": [_scheduler(settings)], "validations": validations}
    binding = "ValidatingAdmissionPolicyBinding"
    namespaces, pods = scope.get("namespaceSelector") or {}, mutated(scope)
    outside = [
        _binding(binding, f"{ROUTED}-outside-{index}", ROUTED, ["Warn", "Audit"], **{field: selector})
        for index, (field, selector) in enumerate(
            [("namespaceSelector", s) for s in _complement(namespaces)]
            + [("objectSelector", s) for s in _complement(pods)],
            1,
        )
    ]
    inside = _binding(binding, ROUTED, ROUTED, ["Deny"], namespaceSelector=namespaces, objectSelector=pods)
    return [_policy("ValidatingAdmissionPolicy", ROUTED, spec), inside, *outside]


def mutated(scope: Mapping[str, Any]) -> Obj:
    """The Pods the webhook mutates, as an objectSelector: those its configuration sends (its objectSelector, none
    shipped), less those labelled to opt out, which it only charges (docs/rules.md#the-opt-out-label)."""
    selector = dict(scope.get("objectSelector") or {})
    expressions = list(selector.get("matchExpressions") or [])
    return {**selector, "matchExpressions": expressions + ([MUTATED] if MUTATED not in expressions else [])}


NEGATED = {"In": "NotIn", "NotIn": "In", "Exists": "DoesNotExist", "DoesNotExist": "Exists"}


def _requirements(selector: Mapping[str, Any]) -> list[Obj]:
    """A label selector's requirements, each of ``matchLabels`` as an ``In`` of one value; the selector ANDs them."""
    return [
        {"key": key, "operator": "In", "values": [value]} for key, value in (selector.get("matchLabels") or {}).items()
    ] + list(selector.get("matchExpressions") or [])


def _complement(selector: Mapping[str, Any]) -> list[Obj]:
    """Selectors that together match what ``selector`` does not: one per requirement, each negated (a label
    selector ANDs its requirements, and a binding cannot OR them)."""
    negated = []
    for requirement in _requirements(selector):
        opposite = {"key": requirement["key"], "operator": NEGATED[requirement["operator"]]}
        if "values" in requirement and requirement["operator"] in ("In", "NotIn"):
            opposite["values"] = list(requirement["values"])
        negated.append({"matchExpressions": [opposite]})
    return negated


def _selected(selector: Mapping[str, Any], labels: str) -> list[str]:
    """CEL, one test per requirement of ``selector`` on the label map ``labels``, as the API server matches a
    selector: a requirement on a label the object lacks holds for NotIn and DoesNotExist, not for In and Exists."""
    tests = []
    for requirement in _requirements(selector):
        key, operator = requirement["key"], requirement["operator"]
        found = f"'{key}' in {labels}"
        valued = f"{labels}['{key}'] in [{quoted(requirement.get('values') or ())}]"
        tests.append(
            {
                "In": f"({found} && {valued})",
                "NotIn": f"(!({found}) || !({valued}))",
                "Exists": f"({found})",
                "DoesNotExist": f"!({found})",
            }[operator]
        )
    return tests


def _in_scope(scope: Mapping[str, Any]) -> str:
    """CEL: the Pod's namespace and the Pod itself match the webhook's selectors (the labels of both in the
    variables ``namespaceLabels`` and ``labels``)."""
    tests = _selected(scope.get("namespaceSelector") or {}, "variables.namespaceLabels")
    tests += _selected(scope.get("objectSelector") or {}, "variables.labels")
    return " &&\n".join(tests) or "true"


def reviewed(settings: PolicySettings) -> list[Obj]:
    """A warning, everywhere, for a device Pod bound for HAMi's scheduler that the webhook never marked: its
    devices and quota were not checked (an opted-out Pod naming the scheduler itself, or a failed-open call)."""
    spec = {
        **_on_device_pods(settings),
        "variables": [_scheduler(settings)],
        "validations": [
            {
                "expression": f"object.spec.schedulerName != {SCHEDULER_NAME} ||\n"
                f"(has(object.metadata.annotations) && '{GPU_TYPE_ANNOTATION}' in object.metadata.annotations)",
                "messageExpression": f'"a device Pod for " + {SCHEDULER_NAME} +\n" without hami-webhook\'s mark '
                f"({GPU_TYPE_ANNOTATION}): the webhook did not review it, so its device requests and quota were not "
                'checked"',
            }
        ],
    }
    binding = _binding("ValidatingAdmissionPolicyBinding", REVIEWED, REVIEWED, ["Warn", "Audit"])
    return [_policy("ValidatingAdmissionPolicy", REVIEWED, spec), binding]


def floor(settings: PolicySettings, scope: Mapping[str, Any]) -> list[Obj]:
    """In the webhook's scope, a device Pod on default-scheduler is routed to HAMi's scheduler in process, before
    any webhook, and again after them (a later webhook that adds a device): under failurePolicy Ignore an outage
    then leaves device Pods unmutated but routed. Only with HAMI_FORCE_OVERWRITE_DEFAULT_SCHEDULER on, the one
    case where the webhook itself reroutes default-scheduler Pods."""
    on_default = {"name": "on-default-scheduler", "expression": f"object.spec.schedulerName == '{DEFAULT_SCHEDULER}'"}
    spec = {
        **_on_device_pods(settings, on_default, reinvocation="IfNeeded"),
        "variables": [_scheduler(settings)],
        "mutations": [
            {
                "patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": f"Object{{spec: Object.spec{{schedulerName: {SCHEDULER_NAME}}}}}"},
            }
        ],
    }
    namespaces: Obj = scope.get("namespaceSelector") or {}
    pods = mutated(scope)
    binding = _binding(
        "MutatingAdmissionPolicyBinding", FLOOR, FLOOR, namespaceSelector=namespaces, objectSelector=pods
    )
    return [_policy("MutatingAdmissionPolicy", FLOOR, spec), binding]


class PolicyError(ValueError):
    """The settings leave nothing for a policy to hold to; the message names the setting."""


def render(inputs: Inputs) -> dict[str, str]:
    """Each file's YAML text, by file name: the three validating policies, the floor (only written when the
    webhook reroutes default-scheduler Pods), and the webhooks' matchConditions as patches of both configurations."""
    settings = inputs.settings
    if not settings.scheduler_name:
        raise PolicyError("HAMI_SCHEDULER_NAME is empty: the webhook routes no Pod, so no policy can check routing")
    every = sorted({name for device in settings.every_device for name in device.resource_names})
    conditions = {
        "apiVersion": API,
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": inputs.configuration},
        "webhooks": [{"name": inputs.scope.get("name", ""), "matchConditions": webhook_match_conditions(every)}],
    }
    files = {
        "allocation-guard.yaml": allocation_guard(settings, inputs.scope, inputs.components),
        "routed.yaml": [*routed(settings, inputs.scope), *reviewed(settings)],
        "match-conditions.yaml": [conditions, _workload_conditions(inputs, every)],
    }
    if settings.force_overwrite_default_scheduler:
        files["floor.yaml"] = floor(settings, inputs.scope)
    return {name: _yaml(objects) for name, objects in files.items()}


def _workload_conditions(inputs: Inputs, every: Sequence[str]) -> Obj:
    """The workload configuration's matchConditions, as a patch of it."""
    found = workload_match_conditions(every, inputs.settings.owned_annotations.prefixes)
    return {
        "apiVersion": API,
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": inputs.workloads},
        "webhooks": [{"name": name, "matchConditions": conditions} for name, conditions in found.items()],
    }


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line expressions, never anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _string)


def dump(obj: Obj) -> str:
    """One object as the generated files hold it: keys in order, multi-line expressions as blocks, 120 columns."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=120)


def _yaml(objects: Sequence[Obj]) -> str:
    return GENERATED + "---\n".join(dump(o) for o in objects)
