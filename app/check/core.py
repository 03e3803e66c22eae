"""The checks as functions of what was read: a Snapshot in, one Finding per check out, in the order an operator looks
(docs/operations.md, "Checking the install"). Pure: no client, no socket, no clock (``now`` is read at the edge).

The dry run of a one-GPU Pod is the authority (it crosses the Service, TLS, the caBundle and the matchConditions
in one step, as cert-manager's ``cmctl check api`` does); every other check says why it failed, or what will
hurt next.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.admission.annotations import GPU_TYPE_ANNOTATION
from app.admission.review import DEFAULT_SCHEDULER
from app.preview.matching import failed_requirement
from app.preview.policies import FLOOR, REVIEWED, ROUTED, scheduler_of
from app.preview.scope import covers_pod_create

Obj = dict[str, Any]
CONFIGURATION = "hami-webhook-pods"
WEBHOOK = "pods.hami.io"
HOME, SERVICE = "hami-system", "hami-webhook"  # where the shipped configuration's Service is, when none is read
STANDBY = "standby"  # the migration's matchCondition (manifests/components/standby): never called
SCHEDULER_ENV, QUOTA_ENV, HOME_ENV = "HAMI_SCHEDULER_NAME", "HAMI_QUOTA_ENABLED", "HAMI_NAMESPACE"
REGISTER = ("hami.io/node-", "-register")  # HAMi's device plugins register a node's devices in this annotation
SOON = 7 * 86400  # seconds: a certificate expiring sooner is a warning (HamiWebhookCertificateExpiresSoon's)
FRESH = 60.0  # seconds: a scheduler's Lease renewed longer ago than this and its duration has no leader
DOCS = "docs/operations.md"
BIND_CHECKER = f"bind the ClusterRole hami-webhook-checker to whoever runs the check ({DOCS}#checking-the-install)"
LOOK_AT_PODS = "kubectl -n {ns} get pods -l app.kubernetes.io/component=webhook; kubectl -n {ns} logs deploy/{name}"
RENEW = "kubectl -n {ns} create job --from=cronjob/hami-webhook-certgen certgen-now (README, Troubleshooting)"


class Level(enum.Enum):
    OK = "ok"
    WARNING = "warning"
    FAILURE = "failure"


@dataclass(frozen=True)
class Finding:
    """One line of the check: ``fix`` is the one thing to do (a command or a docs link) when it is not ok."""

    check: str
    level: Level
    message: str
    fix: str = ""


@dataclass(frozen=True)
class Unread:
    """An object or list the reader could not read (RBAC, an error answer): the checks that need it say so."""

    reason: str


Read = Obj | None | Unread  # None: not found
Listed = list[Obj] | Unread


@dataclass(frozen=True)
class DryRun:
    """A server-side dry-run create: the Pod the API server would store, or the message it refused with."""

    pod: Obj | None
    refusal: str = ""


@dataclass(frozen=True)
class Served:
    """The TLS handshake with the webhook's Service, verified against the caBundle: ``reached`` false when this
    machine cannot open a connection there (outside the cluster, most likely); ``error`` the verification's."""

    address: str
    reached: bool
    error: str = ""
    not_after: float | None = None


@dataclass(frozen=True)
class Snapshot:
    """Everything the checks judge, read at one moment (``now``, Unix seconds)."""

    namespace: str
    now: float
    default_scheduler: str  # the webhook's HAMI_SCHEDULER_NAME when its Deployment sets none
    configuration: Read
    configurations: Listed  # every MutatingWebhookConfiguration
    namespace_object: Read
    service: Read = None
    endpoint_slices: Listed = field(default_factory=list)
    deployment: Read = None
    policies: Mapping[str, Read] = field(default_factory=dict)  # routed, reviewed, floor (when served)
    bindings: Mapping[str, Read] = field(default_factory=dict)  # their bindings, by the policy's name
    floor_served: bool = False  # the server serves MutatingAdmissionPolicy (admissionregistration.k8s.io/v1)
    leases: Listed = field(default_factory=list)  # Leases named as the webhook's scheduler, in any namespace
    nodes: Listed = field(default_factory=list)
    gpu: DryRun = DryRun(None, "not tried")
    cpu: DryRun = DryRun(None, "not tried")
    served: Served | None = None
    quota_access: Mapping[str, bool] | Unread | None = None  # "verb resource" -> allowed to the webhook; None: off
    ledgers: Listed = field(default_factory=list)


def run(snapshot: Snapshot) -> list[Finding]:
    """Every check, in the order an operator looks: the path itself, then each cause of its failure."""
    return [check(snapshot) for check in CHECKS]


def passes(results: Iterable[Finding]) -> bool:
    """Device Pods go through the webhook: no check failed (warnings say what will hurt next)."""
    return all(result.level is not Level.FAILURE for result in results)


# --- what the snapshot says, shared by several checks ---------------------------------------------------------


def hook(snapshot: Snapshot) -> Obj | None:
    """Our webhook in the configuration, when both were read."""
    if not isinstance(snapshot.configuration, dict):
        return None
    return next((h for h in snapshot.configuration.get("webhooks") or () if h.get("name") == WEBHOOK), None)


def service_ref(snapshot: Snapshot) -> tuple[str, str, int]:
    """The Service the webhook calls: namespace, name, port (the shipped one when the configuration names none)."""
    service = ((hook(snapshot) or {}).get("clientConfig") or {}).get("service") or {}
    return str(service.get("namespace") or HOME), str(service.get("name") or SERVICE), int(service.get("port") or 443)


def container_env(deployment: Read) -> dict[str, str]:
    """The webhook container's environment variables set by value in the Deployment."""
    if not isinstance(deployment, dict):
        return {}
    containers = ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
    webhook = next((c for c in containers if c.get("name") == "webhook"), containers[0] if containers else {})
    return {e["name"]: str(e.get("value", "")) for e in webhook.get("env") or () if "name" in e and "value" in e}


def scheduler_name(snapshot: Snapshot) -> str:
    """The scheduler the webhook routes device Pods to: its Deployment's HAMI_SCHEDULER_NAME, else the default."""
    return container_env(snapshot.deployment).get(SCHEDULER_ENV, snapshot.default_scheduler)


def quota_on(deployment: Read) -> bool:
    return container_env(deployment).get(QUOTA_ENV, "auto").lower() != "false"


def switched_since(configuration: Obj, webhook: str = WEBHOOK) -> float | None:
    """When ``webhook``'s failurePolicy was set to Ignore (Unix seconds), or None while it is Fail.

    The emergency switch and certgen write only that field, so the managedFields entry that owns it carries the
    time of the switch; when no entry owns it (a configuration applied with Ignore), its creation."""
    found = next((h for h in configuration.get("webhooks") or () if h.get("name") == webhook), None)
    if found is None or found.get("failurePolicy", "Fail") != "Ignore":
        return None
    key = f'k:{{"name":"{webhook}"}}'
    metadata = configuration.get("metadata") or {}
    for entry in metadata.get("managedFields") or ():
        owned = ((entry.get("fieldsV1") or {}).get("f:webhooks") or {}).get(key) or {}
        if "f:failurePolicy" in owned and entry.get("time"):
            return _instant(entry["time"])
    created = metadata.get("creationTimestamp")
    return _instant(created) if created else None


def _instant(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ago(seconds: float) -> str:
    """A duration as kubectl's AGE column writes it: 45s, 12m, 3h, 2d."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _unread(check: str, what: str, unread: Unread) -> Finding:
    return Finding(check, Level.WARNING, f"cannot read {what}: {unread.reason}", BIND_CHECKER)


# --- the checks ------------------------------------------------------------------------------------------


def path(snapshot: Snapshot) -> Finding:
    """The dry run of a one-GPU Pod: back for HAMi's scheduler and marked by the webhook."""
    want, ns, gpu = scheduler_name(snapshot), snapshot.namespace, snapshot.gpu
    said = f"a one-GPU Pod (server-side dry run in {ns})"
    if gpu.pod is None:
        if f'admission webhook "{WEBHOOK}" denied the request' in gpu.refusal:  # reached: the path works
            return Finding("path", Level.WARNING, f"{said} reached the webhook, which refused it: {gpu.refusal}")
        return Finding("path", Level.FAILURE, f"{said} is refused: {gpu.refusal}", _fix_for(gpu.refusal, snapshot))
    pod_scheduler = str((gpu.pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER)
    marked = GPU_TYPE_ANNOTATION in ((gpu.pod.get("metadata") or {}).get("annotations") or {})
    if marked and pod_scheduler == want:
        return Finding("path", Level.OK, f"{said} comes back for {want}, marked by {WEBHOOK}")
    if marked:
        return Finding(
            "path", Level.FAILURE, f"{said} comes back marked by {WEBHOOK} but for {pod_scheduler}, not {want}",
            f"one scheduler name everywhere: {DOCS}#renaming-hamis-scheduler",
        )  # fmt: skip
    unrouted = "unrouted, on default-scheduler" if pod_scheduler == DEFAULT_SCHEDULER else f"for {pod_scheduler}"
    return Finding(
        "path", Level.FAILURE,
        f"{said} comes back {unrouted} and unmarked: the webhook was not called, or failed under failurePolicy "
        "Ignore (no device checks, no quota)",
        "the first failure below says why",
    )  # fmt: skip


def _fix_for(refusal: str, snapshot: Snapshot) -> str:
    """The one thing to do for a refused dry run, from the API server's message."""
    ns, name, _ = service_ref(snapshot)
    if "x509" in refusal or "certificate" in refusal:
        return RENEW.format(ns=ns)
    if f'failed calling webhook "{WEBHOOK}"' in refusal:
        return LOOK_AT_PODS.format(ns=ns, name=name)
    if "forbidden" in refusal.lower() and "cannot create resource" in refusal:
        return BIND_CHECKER
    return "the failures below say why"


def cpu_pods(snapshot: Snapshot) -> Finding:
    """A CPU Pod comes back untouched: the matchConditions keep every other Pod away from the webhook."""
    cpu, ns = snapshot.cpu, snapshot.namespace
    if cpu.pod is None:
        return Finding(
            "cpu-pods", Level.FAILURE, f"a CPU Pod (dry run in {ns}) is refused: {cpu.refusal}",
            _fix_for(cpu.refusal, snapshot),
        )  # fmt: skip
    scheduler = (cpu.pod.get("spec") or {}).get("schedulerName")
    marked = GPU_TYPE_ANNOTATION in ((cpu.pod.get("metadata") or {}).get("annotations") or {})
    if scheduler != DEFAULT_SCHEDULER or marked:
        return Finding(
            "cpu-pods", Level.FAILURE, f"a CPU Pod comes back changed (schedulerName {scheduler})",
            f"restore the webhook's matchConditions: kubectl apply -k manifests ({DOCS}#admission-policies)",
        )  # fmt: skip
    return Finding("cpu-pods", Level.OK, "a CPU Pod comes back untouched")


def configuration(snapshot: Snapshot) -> Finding:
    """The configuration exists, holds our webhook, is not on standby, and fails closed."""
    if isinstance(snapshot.configuration, Unread):
        return _unread("configuration", f"MutatingWebhookConfiguration {CONFIGURATION}", snapshot.configuration)
    if snapshot.configuration is None:
        return Finding(
            "configuration", Level.FAILURE, f"MutatingWebhookConfiguration {CONFIGURATION} is not installed",
            "kubectl apply -k manifests (README, Install in a cluster)",
        )  # fmt: skip
    found = hook(snapshot)
    if found is None:
        return Finding(
            "configuration", Level.FAILURE, f"{CONFIGURATION} has no webhook {WEBHOOK}",
            "kubectl apply -k manifests (README, Install in a cluster)",
        )  # fmt: skip
    if any(c.get("name") == STANDBY for c in found.get("matchConditions") or ()):
        return Finding(
            "configuration", Level.FAILURE, f"{WEBHOOK} is on standby (matchCondition {STANDBY}): never called",
            "finish the migration: docs/migration-from-hami.md",
        )  # fmt: skip
    since = switched_since(snapshot.configuration)
    if since is not None:
        return Finding(
            "configuration", Level.FAILURE,
            f"{WEBHOOK} has failurePolicy Ignore since {_utc(since)} ({_ago(snapshot.now - since)} ago): whenever a "
            "call fails, device Pods are admitted unrouted and unchecked",
            "scripts/emergency-failure-policy.sh Fail (once the webhook is healthy)",
        )  # fmt: skip
    timeout = found.get("timeoutSeconds", 10)
    return Finding("configuration", Level.OK, f"{CONFIGURATION}: {WEBHOOK}, failurePolicy Fail, timeout {timeout}s")


def endpoints(snapshot: Snapshot) -> Finding:
    """The Service exists and has ready endpoints; the Deployment has its replicas."""
    ns, name, _ = service_ref(snapshot)
    fix = LOOK_AT_PODS.format(ns=ns, name=name)
    for what, read in (("Service", snapshot.service), ("Deployment", snapshot.deployment)):
        if isinstance(read, Unread):
            return _unread("endpoints", f"{what} {ns}/{name}", read)
    if snapshot.service is None:
        return Finding(
            "endpoints", Level.FAILURE, f"Service {ns}/{name}, which {CONFIGURATION} calls, does not exist",
            "kubectl apply -k manifests",
        )  # fmt: skip
    if isinstance(snapshot.endpoint_slices, Unread):
        return _unread("endpoints", f"the EndpointSlices of Service {ns}/{name}", snapshot.endpoint_slices)
    ready = sum(
        len(e.get("addresses") or ())
        for s in snapshot.endpoint_slices
        for e in s.get("endpoints") or ()
        if (e.get("conditions") or {}).get("ready") is not False
    )
    deployment = snapshot.deployment if isinstance(snapshot.deployment, dict) else {}
    status = deployment.get("status") or {}
    wanted = int((deployment.get("spec") or {}).get("replicas", 1))
    replicas = f"Deployment {name}: {int(status.get('readyReplicas') or 0)} of {wanted} replicas ready"
    if snapshot.deployment is None:
        replicas = f"no Deployment {ns}/{name}"
    if ready == 0:
        return Finding("endpoints", Level.FAILURE, f"Service {ns}/{name} has no ready endpoints ({replicas})", fix)
    if snapshot.deployment is not None and int(status.get("readyReplicas") or 0) < wanted:
        return Finding("endpoints", Level.WARNING, f"Service {ns}/{name}: {ready} ready endpoints, but {replicas}", fix)
    return Finding("endpoints", Level.OK, f"Service {ns}/{name}: {ready} ready endpoints; {replicas}")


def certificate(snapshot: Snapshot) -> Finding:
    """The caBundle holds a CA that verifies the certificate the replicas serve, neither expiring soon."""
    found = hook(snapshot)
    ns, _, _ = service_ref(snapshot)
    if found is None:
        return Finding("certificate", Level.WARNING, "no webhook configuration to read the caBundle from")
    bundle = (found.get("clientConfig") or {}).get("caBundle") or ""
    authorities = _certificates(bundle)
    if not authorities:
        return Finding(
            "certificate", Level.FAILURE, f"{WEBHOOK} has {'an unreadable' if bundle else 'no'} caBundle: "
            "the API server cannot trust the webhook", RENEW.format(ns=ns),
        )  # fmt: skip
    ca_until = min(until for until in authorities)
    said = f"caBundle CA valid until {_utc(ca_until)}"
    served = snapshot.served
    if served is not None and served.reached:
        if served.error:
            return Finding(
                "certificate", Level.FAILURE,
                f"the caBundle does not verify the certificate served at {served.address}: {served.error}",
                RENEW.format(ns=ns),
            )  # fmt: skip
        until = min(ca_until, served.not_after or ca_until)
        said += f"; it verifies the certificate served at {served.address}, valid until {_utc(served.not_after or 0)}"
    else:
        if "x509" in snapshot.gpu.refusal:
            return Finding(
                "certificate", Level.FAILURE, f"the API server does not trust the webhook's certificate: "
                f"{snapshot.gpu.refusal}", RENEW.format(ns=ns),
            )  # fmt: skip
        until = ca_until
        where = f" ({served.error})" if served is not None and served.error else ""
        vouched = "the dry run vouches for it" if snapshot.gpu.pod is not None else "unverified"
        said += f"; the served certificate is not reachable from here{where}: {vouched}"
    if until <= snapshot.now:
        return Finding("certificate", Level.FAILURE, f"expired: {said}", RENEW.format(ns=ns))
    if until - snapshot.now < SOON:
        return Finding("certificate", Level.WARNING, f"expires within 7 days: {said}", RENEW.format(ns=ns))
    return Finding("certificate", Level.OK, said)


def _certificates(bundle: str) -> list[float]:
    """The notAfter (Unix seconds) of each certificate in a base64 PEM caBundle; [] when it holds none."""
    import base64
    import binascii

    from cryptography import x509

    try:
        pem = base64.b64decode(bundle, validate=True)
        return [c.not_valid_after_utc.timestamp() for c in x509.load_pem_x509_certificates(pem)]
    except (ValueError, binascii.Error):
        return []


def namespace(snapshot: Snapshot) -> Finding:
    """The namespace of the dry run is in the webhook's namespaceSelector."""
    ns = snapshot.namespace
    if isinstance(snapshot.namespace_object, Unread):
        return _unread("namespace", f"namespace {ns}", snapshot.namespace_object)
    found = hook(snapshot)
    if found is None or snapshot.namespace_object is None:
        return Finding("namespace", Level.WARNING, f"namespace {ns}: nothing to compare with")
    labels = (snapshot.namespace_object.get("metadata") or {}).get("labels") or {}
    failed = failed_requirement(found.get("namespaceSelector") or {}, labels)
    if failed is None:
        return Finding("namespace", Level.OK, f"namespace {ns} is in the webhook's namespaceSelector")
    fix = f"kubectl label namespace {ns} hami.io/webhook-"
    if failed.startswith("kubernetes.io/metadata.name"):
        fix = f"run device Pods in another namespace: {ns} is excluded by design ({DOCS}#admission-policies)"
    return Finding(
        "namespace", Level.FAILURE,
        f"namespace {ns} fails the webhook's namespaceSelector ({failed}): its device Pods are never reviewed", fix,
    )  # fmt: skip


def other_webhooks(snapshot: Snapshot) -> Finding:
    """No other HAMi webhook mutates Pods beside ours (HAMi's own vgpu.hami.io, HAMi-DRA's)."""
    if isinstance(snapshot.configurations, Unread):
        return _unread("other-webhooks", "the MutatingWebhookConfigurations", snapshot.configurations)
    others = [
        (str(c["metadata"]["name"]), str(h.get("name")))
        for c in snapshot.configurations
        if c["metadata"]["name"] != CONFIGURATION
        for h in c.get("webhooks") or ()
        if _hami(str(c["metadata"]["name"]), str(h.get("name"))) and any(map(covers_pod_create, h.get("rules") or ()))
    ]
    if not others:
        return Finding("other-webhooks", Level.OK, "no other HAMi webhook mutates Pods")
    # The API server calls mutating webhooks in the order of their configurations' names, then as listed.
    named = ", ".join(
        f"{hook_name} ({name}, called {'before' if name < CONFIGURATION else 'after'} {WEBHOOK})"
        for name, hook_name in others
    )
    return Finding(
        "other-webhooks", Level.FAILURE,
        f"another HAMi webhook mutates Pods too: {named}; device Pods are mutated twice, by two policies",
        f"remove it (HAMi's chart: disable its webhook) as docs/migration-from-hami.md does; "
        f"kubectl delete mutatingwebhookconfiguration {others[0][0]}",
    )  # fmt: skip


def _hami(configuration_name: str, webhook_name: str) -> bool:
    return webhook_name.endswith(".hami.io") or "hami" in configuration_name.lower()


def scheduler(snapshot: Snapshot) -> Finding:
    """One scheduler name across the webhook, the policies and the dry run, and a scheduler of that name runs."""
    want = scheduler_name(snapshot)
    names = {f"the webhook ({SCHEDULER_ENV})": want}
    for policy in (ROUTED, REVIEWED, FLOOR):
        read = snapshot.policies.get(policy)
        if isinstance(read, dict) and scheduler_of(read):
            names[f"policy {policy}"] = scheduler_of(read)
    gpu = snapshot.gpu.pod
    if gpu is not None and GPU_TYPE_ANNOTATION in ((gpu.get("metadata") or {}).get("annotations") or {}):
        names["the dry run's Pod"] = str(gpu["spec"].get("schedulerName"))
    if len(set(names.values())) > 1:
        said = ", ".join(f"{who} {name}" for who, name in names.items())
        return Finding(
            "scheduler", Level.FAILURE, f"scheduler names differ: {said}",
            f"one name for all: the scheduler-name component ({DOCS}#renaming-hamis-scheduler)",
        )  # fmt: skip
    if isinstance(snapshot.leases, Unread):
        return _unread("scheduler", f"the Leases named {want}", snapshot.leases)
    held = [lease for lease in snapshot.leases if _renewed(lease, snapshot.now)]
    if not held:
        return Finding(
            "scheduler", Level.WARNING,
            f"one name, {want}, but no scheduler holds a Lease {want} renewed lately: device Pods will stay Pending",
            "kubectl get pods -A -l app.kubernetes.io/component=hami-scheduler",
        )  # fmt: skip
    where = held[0]["metadata"]
    holder = (held[0].get("spec") or {}).get("holderIdentity") or "?"
    return Finding(
        "scheduler",
        Level.OK,
        f"one name, {want}; its scheduler runs (Lease {where['namespace']}/{where['name']} held by {holder})",
    )


def _renewed(lease: Obj, now: float) -> bool:
    spec = lease.get("spec") or {}
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    if not spec.get("holderIdentity") or not renewed:
        return False
    return now - _instant(str(renewed)) <= max(FRESH, float(spec.get("leaseDurationSeconds") or 0) * 2)


def policies(snapshot: Snapshot) -> Finding:
    """The admission policies are installed and bound; the floor where the server has MutatingAdmissionPolicy."""
    missing: list[str] = []
    unbound: list[str] = []
    notes: list[str] = []
    for policy in (ROUTED, REVIEWED, FLOOR):
        read, binding = snapshot.policies.get(policy), snapshot.bindings.get(policy)
        if policy == FLOOR and not snapshot.floor_served:
            notes.append("no floor: this server has no MutatingAdmissionPolicy")
            continue
        if isinstance(read, Unread):
            return _unread("policies", f"admission policy {policy}", read)
        if read is None:
            (notes if policy == FLOOR else missing).append(policy)
            continue
        if isinstance(binding, Unread):
            return _unread("policies", f"the binding of {policy}", binding)
        if binding is None:
            unbound.append(policy)
    if missing or unbound:
        said = "; ".join(
            part
            for part in (
                f"not installed: {', '.join(missing)}" if missing else "",
                f"installed but not bound: {', '.join(unbound)}" if unbound else "",
            )
            if part
        )
        return Finding(
            "policies", Level.WARNING, f"{said}: device Pods stored past the webhook go unnoticed",
            f"kubectl apply -k manifests ({DOCS}#admission-policies)",
        )  # fmt: skip
    if FLOOR in notes:
        notes[notes.index(FLOOR)] = "the floor component is not installed (optional)"
    return Finding("policies", Level.OK, "; ".join([f"{ROUTED} and {REVIEWED} installed and bound", *notes]))


def nodes(snapshot: Snapshot) -> Finding:
    """Some node registered by HAMi's device plugins: without one, device Pods stay Pending."""
    if isinstance(snapshot.nodes, Unread):
        return _unread("nodes", "the Nodes", snapshot.nodes)
    registered: dict[str, list[str]] = {}
    for node in snapshot.nodes:
        for key in (node.get("metadata") or {}).get("annotations") or {}:
            head, tail = REGISTER
            if key.startswith(head) and key.endswith(tail) and len(key) > len(head) + len(tail):
                registered.setdefault(key[len(head) : -len(tail)], []).append(node["metadata"]["name"])
    if not registered:
        return Finding(
            "nodes", Level.WARNING,
            f"no node registered by HAMi's device plugins (annotation {REGISTER[0]}<vendor>{REGISTER[1]}) among "
            f"{len(snapshot.nodes)}: device Pods will stay Pending",
            "kubectl get pods -A -l app.kubernetes.io/component=hami-device-plugin (HAMi's install guide)",
        )  # fmt: skip
    said = "; ".join(f"{vendor}: {_names(found)}" for vendor, found in sorted(registered.items()))
    return Finding("nodes", Level.OK, f"registered by HAMi's device plugins: {said}")


def _names(found: Sequence[str], shown: int = 3) -> str:
    more = f" and {len(found) - shown} more" if len(found) > shown else ""
    return ", ".join(sorted(found)[:shown]) + more


QUOTA_NEEDS = ("list pods", "watch pods", "list resourcequotas", "watch resourcequotas")
LEDGER_NEEDS = ("get leases", "list leases", "watch leases", "create leases", "update leases")


def quota(snapshot: Snapshot) -> Finding:
    """Where quota is on: the webhook's own RBAC for it, and the ledgers readable."""
    if snapshot.quota_access is None:
        return Finding("quota", Level.OK, f"quota is off ({QUOTA_ENV}=false)")
    if isinstance(snapshot.quota_access, Unread):
        return _unread("quota", "what the webhook's ServiceAccount may do", snapshot.quota_access)
    denied = [need for need, allowed in snapshot.quota_access.items() if not allowed]
    if denied:
        return Finding(
            "quota", Level.FAILURE,
            f"quota is on, but the webhook's ServiceAccount may not {', '.join(denied)}: its replicas stay unready "
            "or refuse device Pods in quota'd namespaces",
            "kubectl apply -k manifests (base/rbac/webhook.yaml)",
        )  # fmt: skip
    if isinstance(snapshot.ledgers, Unread):
        return _unread("quota", "the quota ledgers", snapshot.ledgers)
    count = sum(1 for lease in snapshot.ledgers if str(lease["metadata"]["name"]).startswith("hami-quota-"))
    return Finding("quota", Level.OK, f"quota is on: the webhook's RBAC allows it; {count} ledgers readable")


CHECKS: tuple[Callable[[Snapshot], Finding], ...] = (
    path,
    cpu_pods,
    configuration,
    endpoints,
    certificate,
    namespace,
    other_webhooks,
    scheduler,
    policies,
    nodes,
    quota,
)
