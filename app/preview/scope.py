"""Which Pods kube-apiserver sends this webhook at all: its MutatingWebhookConfiguration, evaluated offline.

The preview reviews any Pod it is given, but the API server calls the webhook only for Pod CREATEs its rules
cover, in namespaces its namespaceSelector admits, for Pods its objectSelector admits, when every one of its
matchConditions holds. The rules are read from the configuration itself: by default the one the manifests
apply (manifests/base/mutatingwebhookconfiguration.yaml, shipped in the package), or an admin's rendered
copy, so there is no second copy of them here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from app.preview import matching

PACKAGED = "mutatingwebhookconfiguration.yaml"
OUR_WEBHOOK = "pods.hami.io"
NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by kube-apiserver (1.21+) on every namespace to its name: all that is known offline of its labels."""


class ScopeError(ValueError):
    """The webhook configuration cannot be read or used; the message names the file."""


@dataclass(frozen=True)
class Reach:
    """What the API server does with one Pod CREATE before the webhook would see it."""

    sent: bool
    why: str = ""
    """Why it is not sent (or rejected); empty when sent."""
    rejected: bool = False
    """A matchCondition failed to evaluate under failurePolicy Fail: the API server refuses the Pod."""


@dataclass(frozen=True)
class Scope:
    """One webhook of a MutatingWebhookConfiguration and where it was read from."""

    webhook: Mapping[str, Any]
    source: str
    unevaluated: str = ""
    """Why matchConditions are not evaluated (said once, not per Pod); empty when they are."""

    def reach(self, pod: Mapping[str, Any], namespace_labels: Mapping[str, str]) -> Reach:
        """Whether the API server would call the webhook for creating ``pod`` (defaulted, namespace set)."""
        hook = self.webhook
        name = hook.get("name", "")
        if not any(covers_pod_create(rule) for rule in hook.get("rules") or []):
            return Reach(False, f"no rule of webhook {name} covers creating Pods")
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace") or ""
        labels = {**namespace_labels, NAME_LABEL: namespace}
        try:
            failed = matching.failed_requirement(hook.get("namespaceSelector") or {}, labels)
            if failed:
                return Reach(False, f"namespace {namespace} is excluded by the namespaceSelector: {failed}")
            failed = matching.failed_requirement(hook.get("objectSelector") or {}, meta.get("labels") or {})
        except ValueError as exc:
            return Reach(False, f"webhook {name} has an invalid selector: {exc}")
        if failed:
            return Reach(False, f"the Pod's labels are excluded by the objectSelector: {failed}")
        if self.unevaluated:
            return Reach(True)
        result = matching.evaluate(hook.get("matchConditions"), _request(pod, namespace))
        if result.outcome is matching.Outcome.NO_MATCH:
            return Reach(False, f"matchConditions false: {', '.join(result.false)}")
        if result.outcome is matching.Outcome.ERROR:
            errors = "; ".join(result.errors)
            if hook.get("failurePolicy", "Fail") == "Ignore":
                return Reach(False, f"matchConditions could not be evaluated ({errors}); failurePolicy Ignore")
            return Reach(False, f"matchConditions could not be evaluated ({errors}); failurePolicy Fail", True)
        return Reach(True)


def covers_pod_create(rule: Mapping[str, Any]) -> bool:
    """Whether a webhook's rule sends Pod creates (``*`` included), as the API server matches rules."""

    def has(key: str, *values: str) -> bool:
        return any(value in (rule.get(key) or []) for value in values)

    return (
        has("operations", "CREATE", "*")
        and has("apiGroups", "", "*")
        and has("apiVersions", "v1", "*")
        and has("resources", "pods", "*", "*/*")
        and rule.get("scope", "*") in ("*", "Namespaced")
    )


def _request(pod: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """The AdmissionRequest attributes matchConditions see for a Pod CREATE."""
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    resource = {"group": "", "version": "v1", "resource": "pods"}
    return {
        "uid": "preview",
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": (pod.get("metadata") or {}).get("name") or "",
        "namespace": namespace,
        "operation": "CREATE",
        "userInfo": {"username": "preview"},
        "object": pod,
        "oldObject": None,
        "dryRun": True,
    }


def load_scope(path: str | None = None) -> Scope:
    """The webhook from the configuration at ``path`` (default: the packaged one): its only webhook, or
    pods.hami.io when it holds several. Its matchConditions are compiled now, so a bad one is named here."""
    if path:
        source = path
        try:
            with open(path, encoding="utf-8") as handle:
                documents = list(yaml.safe_load_all(handle))
        except OSError as exc:
            raise ScopeError(f"cannot read {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ScopeError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from exc
    else:
        source = f"the packaged {PACKAGED}"
        documents = list(yaml.safe_load_all(resources.files("app.preview").joinpath(PACKAGED).read_text()))
    hooks = [hook for config in _configurations(documents) for hook in config.get("webhooks") or []]
    hooks = [hook for hook in hooks if isinstance(hook, Mapping)]
    if not hooks:
        raise ScopeError(f"{source} holds no MutatingWebhookConfiguration with webhooks")
    if len(hooks) > 1:
        hooks = [hook for hook in hooks if hook.get("name") == OUR_WEBHOOK]
        if len(hooks) != 1:
            raise ScopeError(f"{source} holds several webhooks and not exactly one named {OUR_WEBHOOK}")
    (hook,) = hooks
    return Scope(hook, source, _compile(hook, source))


def _configurations(documents: Sequence[Any]) -> Iterator[Mapping[str, Any]]:
    for document in documents:
        if not isinstance(document, Mapping):
            continue
        if document.get("kind") == "MutatingWebhookConfiguration":
            yield document
        elif isinstance(document.get("items"), list):
            yield from _configurations(document["items"])


def _compile(hook: Mapping[str, Any], source: str) -> str:
    """Compile the matchConditions; why they cannot be evaluated when cel-python is not installed."""
    conditions = hook.get("matchConditions")
    if not conditions:
        return ""
    try:
        matching.compile_conditions(conditions)
    except ImportError:
        return (
            "matchConditions not evaluated: cel-python is not installed (the review extra: docs/operations.md, "
            '"The operator\'s tools"), so every Pod the selectors admit is reviewed as if the webhook were called'
        )
    except ValueError as exc:
        raise ScopeError(f"{source}: {exc}") from None
    return ""
