"""Pod manifests: one builder for the Pods the reviews, the real-cluster tests and the benchmark send.

The defaults give the shape a mutating webhook receives (see docs/rules.md#webhooks-see-a-defaulted-pod):
requests copied from limits, ``default-scheduler``, a namespace. A Pod for `kubectl create` leaves those
to the API server (``defaulted=False``, ``namespace=None``, ``scheduler=None``).
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def container(
    name: str = "main",
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
    *,
    image: str | None = "cuda:12",
    env: list[Obj] | None = None,
    privileged: bool | None = None,
    defaulted: bool = True,
    **fields: Any,
) -> Obj:
    """A container; with ``defaulted`` the API server's limits→requests copy is applied. ``fields`` go in as is."""
    ctr: Obj = {"name": name}
    if image is not None:
        ctr["image"] = image
    ctr |= fields
    resources: Obj = {}
    if limits is not None:
        resources["limits"] = dict(limits)
    merged = dict(limits or {}) if defaulted else {}
    merged.update(requests or {})
    if merged:
        resources["requests"] = merged
    if resources:
        ctr["resources"] = resources
    if env is not None:
        ctr["env"] = env
    if privileged is not None:
        ctr["securityContext"] = {"privileged": privileged}
    return ctr


def pod(
    *containers: Obj,
    name: str = "job-",
    namespace: str | None = "default",
    annotations: dict[str, str] | None = None,
    metadata: Obj | None = None,
    scheduler: str | None = "default-scheduler",
    init: list[Obj] | None = None,
    **spec: Any,
) -> Obj:
    """A Pod of ``containers`` (one default container if none); a ``name`` ending in "-" is a generateName.

    ``metadata`` is merged over the name, namespace and annotations; ``spec`` fields over the containers.
    """
    meta: Obj = {"generateName": name} if name.endswith("-") else {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    meta |= metadata or {}
    body: Obj = {"containers": list(containers) or [container()], **spec}
    if init:
        body["initContainers"] = init
    if scheduler is not None:
        body["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}
