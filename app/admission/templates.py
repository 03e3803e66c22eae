"""Where a workload keeps the Pod its controller creates, and that Pod as the API server would receive it. Pure.

One place for what both the webhook's workload check (app/admission/workloads.py) and the offline preview
(app/preview/) read from a Deployment, Job, CronJob and the other built-in kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TEMPLATES: Mapping[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    "PodTemplate": ("template",),
}
"""Per kind, the path of the PodTemplateSpec its controller creates Pods from."""

Path = tuple[str | int, ...]


def dig(obj: Any, path: Path) -> Any:
    """The value at ``path`` in ``obj``, or None where the path leaves the document."""
    for part in path:
        if isinstance(part, int):
            obj = obj[part] if isinstance(obj, list) and part < len(obj) else None
        else:
            obj = obj.get(part) if isinstance(obj, Mapping) else None
    return obj


def template_pod(obj: Any, template_path: Path, namespace: str) -> dict[str, Any]:
    """The Pod a workload's controller would create from the template at ``template_path``: the template's labels,
    annotations and spec, in the workload's namespace, named after the workload."""
    found_template = dig(obj, template_path)
    template: Mapping[str, Any] = found_template if isinstance(found_template, Mapping) else {}
    found_meta = template.get("metadata")
    meta: Mapping[str, Any] = found_meta if isinstance(found_meta, Mapping) else {}
    owner = dig(obj, ("metadata", "name"))
    metadata: dict[str, Any] = {key: meta[key] for key in ("labels", "annotations") if key in meta}
    metadata["namespace"] = namespace
    if isinstance(owner, str) and owner:
        metadata["generateName"] = f"{owner}-"
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata}
    if "spec" in template:
        pod["spec"] = template["spec"]
    return pod


def default_spec(spec: dict[str, Any]) -> None:
    """What kube-apiserver fills into a Pod's spec before webhooks see it, of what the policy reads: schedulerName
    (defaulted on templates too) and requests copied from limits (on Pods only). In place."""
    spec.setdefault("schedulerName", "default-scheduler")
    for field_name in ("initContainers", "containers"):
        containers = spec.get(field_name)
        for ctr in containers if isinstance(containers, list) else []:
            resources = ctr.get("resources") if isinstance(ctr, dict) else None
            if not isinstance(resources, dict):
                continue
            limits = resources.get("limits")
            if isinstance(limits, dict) and limits:
                if not isinstance(resources.get("requests"), dict):
                    resources["requests"] = {}
                for name, amount in limits.items():
                    resources["requests"].setdefault(name, amount)


def defaulted(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` with default_spec applied, leaving ``spec`` as it is: only what default_spec writes to (the spec,
    the container lists, each container and its resources and requests) is copied, everything else shared."""
    copied = dict(spec)
    for field_name in ("initContainers", "containers"):
        containers = copied.get(field_name)
        if isinstance(containers, list):
            copied[field_name] = [_own_resources(ctr) for ctr in containers]
    default_spec(copied)
    return copied


def _own_resources(ctr: Any) -> Any:
    if not isinstance(ctr, dict) or not isinstance(ctr.get("resources"), dict):
        return ctr
    resources = dict(ctr["resources"])
    if isinstance(resources.get("requests"), dict):
        resources["requests"] = dict(resources["requests"])
    return {**ctr, "resources": resources}
