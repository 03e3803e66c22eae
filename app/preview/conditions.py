"""The webhooks' matchConditions, CEL written from the vendors' resource names: the Pod configuration's (a
container asking for a device, no mirror Pod) and the workloads' (a template asking for a device or carrying a
HAMi annotation, changed, not made by a controller). ``hami-webhook policies`` writes them as patches of both
configurations (app/preview/policies.py); the preview evaluates them offline (app/preview/matching.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Obj = dict[str, Any]
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
NOT_MIRROR = {
    "name": "not-mirror-pod",
    "expression": f"!has(object.metadata.annotations) || !('{MIRROR_ANNOTATION}' in object.metadata.annotations)",
}


def quoted(names: Iterable[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)


def listed(names: Iterable[str], indent: str) -> str:
    return ",\n".join(f"{indent}'{name}'" for name in names)


def webhook_match_conditions(names: Iterable[str]) -> list[Obj]:
    """The MutatingWebhookConfiguration's matchConditions: any container asking for any of ``names`` in limits
    or requests (the webhook sees Pods before validation), and no mirror Pod."""
    return [{"name": "requests-accelerator", "expression": _asks_device("object", names)}, NOT_MIRROR]


def _asks_device(pod: str, names: Iterable[str]) -> str:
    """CEL: the Pod (or Pod template) ``pod`` has a container or init container asking for one of ``names``."""
    resources = listed(sorted(names), "        ")
    return (
        f"has({pod}.spec) &&\n"
        f"((has({pod}.spec.containers) ? {pod}.spec.containers : []) +\n"
        f" (has({pod}.spec.initContainers) ? {pod}.spec.initContainers : [])).exists(c,\n"
        "  has(c.resources) &&\n"
        "  [has(c.resources.limits) ? c.resources.limits : {},\n"
        "   has(c.resources.requests) ? c.resources.requests : {}].exists(m,\n"
        f"    m.exists(r, r in [\n{resources}\n      ])))"
    )


NOT_A_CONTROLLERS = {
    "name": "not-made-by-a-controller",
    "expression": "!has(object.metadata.ownerReferences) ||\n"
    "!object.metadata.ownerReferences.exists(o, has(o.controller) && o.controller)",
}
"""A ReplicaSet a Deployment makes, a Job a CronJob makes: the controller drops warnings, and its owner was checked."""
WORKLOAD_WEBHOOKS = (
    ("workloads.hami.io", ("spec", "template"), ("replicas", "parallelism", "completions")),
    ("cronjobs.workloads.hami.io", ("spec", "jobTemplate", "spec", "template"), ("parallelism", "completions")),
    ("podtemplates.workloads.hami.io", ("template",), ()),
)
"""The ValidatingWebhookConfiguration's webhooks, one per place a kind keeps its template (TEMPLATES): its name,
that place, and the fields of the spec holding it that say how many Pods run at once."""


def workload_match_conditions(names: Iterable[str], prefixes: Iterable[str]) -> dict[str, list[Obj]]:
    """Per webhook of WORKLOAD_WEBHOOKS, its matchConditions: a template asking for a device (the Pods' condition,
    on the template) or carrying an annotation under one of HAMi's ``prefixes``; and on an update, a template or
    a count of Pods that changed (kubectl apply of the same manifest, a status or metadata edit: not sent); and
    never an object a controller made."""
    names, prefixes = sorted(names), sorted(prefixes)
    conditions: dict[str, list[Obj]] = {}
    for webhook, path, counts in WORKLOAD_WEBHOOKS:
        template, before = ".".join(("object", *path)), ".".join(("oldObject", *path))
        present = " && ".join(f"has({'.'.join(('object', *path[: i + 1]))})" for i in range(len(path)))
        annotated = (
            f"has({template}.metadata) && has({template}.metadata.annotations) &&\n"
            f"{template}.metadata.annotations.exists(k, [{quoted(p + '/' for p in prefixes)}].exists(p,\n"
            "  k.startsWith(p)))"
        )
        changed = f"oldObject == null || {before} != {template}"
        if counts:
            spec, old_spec = template.rsplit(".", 1)[0], before.rsplit(".", 1)[0]
            changed += (
                f" ||\n[{quoted(counts)}].exists(f,\n"
                f"  (f in {spec} ? {spec}[f] : 0) != (f in {old_spec} ? {old_spec}[f] : 0))"
            )
        conditions[webhook] = [
            {
                "name": "template-asks-hami",
                "expression": f"{present} && (\n({_asks_device(template, names)}) ||\n({annotated}))",
            },
            {"name": "template-or-count-changed", "expression": changed},
            NOT_A_CONTROLLERS,
        ]
    return conditions
