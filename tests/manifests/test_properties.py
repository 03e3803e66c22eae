"""Security, availability and scope properties, asserted on the rendered objects (not the source files)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from app.preview.policies import NAMING_THE_SCHEDULER
from app.settings import Settings
from certgen.cli import build_parser
from testbed import ROOT
from testbed import version as project_version
from tests.manifests.conftest import MANIFESTS, NAMESPACE, Obj, containers, find, one, pod_specs

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

MODES = ["certgen", "cert-manager", "manual"]
WEBHOOK_LABELS = {"app.kubernetes.io/name": "hami-webhook", "app.kubernetes.io/component": "webhook"}
SERVICE_HOSTS = {
    "hami-webhook.hami-system.svc",
    "hami-webhook.hami-system.svc.cluster.local",
}


def deployment(objects: list[Obj]) -> Obj:
    return one(objects, "Deployment", "hami-webhook")


def webhook_container(objects: list[Obj]) -> Obj:
    (container,) = deployment(objects)["spec"]["template"]["spec"]["containers"]
    return container


def hook(objects: list[Obj]) -> Obj:
    (only,) = one(objects, "MutatingWebhookConfiguration", "hami-webhook-pods")["webhooks"]
    return only


def env(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env", [])}


# --- security: least-privilege RBAC, hardened Pods ------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_every_pod_is_hardened(rendered: dict[str, list[Obj]], mode: str) -> None:
    specs = pod_specs(rendered[mode])
    assert specs, "no Pod templates rendered"
    for where, pod in specs.items():
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] > 0, where
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC"), where
        assert all("hostPath" not in v for v in pod.get("volumes", [])), where
        for container in containers(pod):
            sc = container["securityContext"]
            name = f"{where}/{container['name']}"
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc.get("privileged", False) is False, name
            assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add"), name


@pytest.mark.parametrize("mode", MODES)
def test_tokens_are_mounted_only_into_pods_whose_account_has_rbac(rendered: dict[str, list[Obj]], mode: str) -> None:
    objects = rendered[mode]
    accounts = find(objects, "ServiceAccount")
    assert accounts and all(sa["automountServiceAccountToken"] is False for sa in accounts)
    bound = {
        subject["name"]
        for binding in [*find(objects, "RoleBinding"), *find(objects, "ClusterRoleBinding")]
        for subject in binding["subjects"]
        if subject["kind"] == "ServiceAccount" and subject["namespace"] == NAMESPACE
    }
    for where, pod in pod_specs(objects).items():
        assert pod["serviceAccountName"] in {sa["metadata"]["name"] for sa in accounts}, where
        if pod.get("automountServiceAccountToken"):
            assert pod["serviceAccountName"] in bound, where


@pytest.mark.parametrize("mode", MODES)
def test_no_rbac_wildcards(rendered: dict[str, list[Obj]], mode: str) -> None:
    roles = [*find(rendered[mode], "Role"), *find(rendered[mode], "ClusterRole")]
    assert "hami-webhook" in {role["metadata"]["name"] for role in roles}, "the webhook's own role is checked"
    for role in roles:
        assert role["rules"], role["metadata"]["name"]
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), role["metadata"]["name"]


def rules(role: Obj) -> list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    return sorted(
        (
            tuple(r["apiGroups"]),
            tuple(sorted(r["resources"])),
            tuple(sorted(r["verbs"])),
            tuple(sorted(r.get("resourceNames", []))),
        )
        for r in role["rules"]
    )


def test_webhook_rbac_is_what_the_quota_feature_needs_and_no_more(base: list[Obj]) -> None:
    """The quota's reads (gangs' PodGroups too) and ledgers, the device inventory's Nodes (read only), by name the
    policies that name the scheduler, and its own configuration's failurePolicy (a gauge)."""
    assert rules(one(base, "ClusterRole", "hami-webhook")) == [
        (("",), ("nodes",), ("list", "watch"), ()),
        (("",), ("pods", "resourcequotas"), ("list", "watch"), ()),
        (
            ("admissionregistration.k8s.io",),
            ("mutatingadmissionpolicies", "validatingadmissionpolicies"),
            ("get",),
            tuple(sorted(NAMING_THE_SCHEDULER)),
        ),
        (("admissionregistration.k8s.io",), ("mutatingwebhookconfigurations",), ("get",), ("hami-webhook-pods",)),
        (
            ("scheduling.k8s.io", "scheduling.x-k8s.io", "scheduling.volcano.sh"),
            ("podgroups",),
            ("get", "list", "watch"),
            (),
        ),
    ]
    role = one(base, "Role", "hami-webhook")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rules(role) == [(("coordination.k8s.io",), ("leases",), ("create", "get", "list", "update", "watch"), ())]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        binding = one(base, kind, "hami-webhook")
        assert binding["roleRef"]["name"] == "hami-webhook"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hami-webhook", "namespace": NAMESPACE}]


def test_webhook_rbac_lives_in_one_file() -> None:
    kinds = [d["kind"] for d in yaml.safe_load_all((ROOT / "manifests/base/rbac/webhook.yaml").read_text())]
    assert sorted(kinds) == sorted(["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"])


def test_certgen_rbac_is_exactly_docs_certgen_md(base: list[Obj]) -> None:
    text = (ROOT / "docs/certgen.md").read_text()
    block = re.search(r"## RBAC.*?```yaml\n(.*?)```", text, re.S)
    assert block, "docs/certgen.md lost its RBAC block"
    documented = {d["kind"]: d for d in yaml.safe_load_all(block.group(1))}
    for kind in ("Role", "ClusterRole"):
        assert rules(one(base, kind, "hami-webhook-certgen")) == rules(documented[kind])
    # resourceNames wherever Kubernetes can enforce them: everything but create.
    for kind in ("Role", "ClusterRole"):
        for rule in one(base, kind, "hami-webhook-certgen")["rules"]:
            assert rule["verbs"] == ["create"] or rule.get("resourceNames"), rule


# --- the webhook Deployment: replicas, probes, shutdown, resources, priority, certificate reload ---


def test_replicas_spread_across_nodes_with_a_disruption_budget(base: list[Obj]) -> None:
    spec = deployment(base)["spec"]
    assert spec["replicas"] >= 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = spec["template"]
    assert WEBHOOK_LABELS.items() <= pod["metadata"]["labels"].items()
    by_node = [c for c in pod["spec"]["topologySpreadConstraints"] if c["topologyKey"] == "kubernetes.io/hostname"]
    assert by_node and by_node[0]["maxSkew"] == 1 and by_node[0]["whenUnsatisfiable"] == "DoNotSchedule"
    assert by_node[0]["labelSelector"]["matchLabels"] == WEBHOOK_LABELS
    pdb = one(base, "PodDisruptionBudget", "hami-webhook")["spec"]
    assert pdb["selector"]["matchLabels"] == WEBHOOK_LABELS
    assert 1 <= pdb["minAvailable"] < spec["replicas"]


def test_probes_use_the_real_tls_port(base: list[Obj]) -> None:
    container = webhook_container(base)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"https": 9443, "metrics": 9090}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, "https", "HTTPS")
    assert env(container)["HAMI_WEBHOOK_BIND"]["value"].endswith(":9443")


def test_grace_period_outlasts_prestop_and_gunicorn_graceful_timeout(base: list[Obj]) -> None:
    from app.serving import master as serving  # gunicorn's real settings

    pod = deployment(base)["spec"]["template"]["spec"]
    command = webhook_container(base)["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pause = int(command[1])
    assert pause >= 5
    assert pod["terminationGracePeriodSeconds"] > pause + serving.graceful_timeout


def test_resources_requested_and_cpu_not_limited(base: list[Obj]) -> None:
    resources = webhook_container(base)["resources"]
    assert {"cpu", "memory"} <= resources["requests"].keys()
    assert "cpu" not in resources.get("limits", {})
    for where, pod in pod_specs(base).items():
        for container in containers(pod):
            assert "cpu" not in container["resources"].get("limits", {}), where


def test_priority_class(base: list[Obj]) -> None:
    assert deployment(base)["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"


def test_settings_env_and_mounts(base: list[Obj], tmp_path: Path) -> None:
    """The container's env parses with the real Settings, reading the rendered ConfigMap where it is mounted."""
    pod = deployment(base)["spec"]["template"]["spec"]
    container = webhook_container(base)
    variables = env(container)
    assert variables["HAMI_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert variables["HAMI_LOG_FORMAT"]["value"] == "json"
    assert variables["HAMI_METRICS_BIND"]["value"] == "0.0.0.0:9090"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert all(m["readOnly"] for name, m in mounts.items() if name != "tmp")
    # TLS: the serving Secret at /tls, and the settings point into it.
    tls = next(name for name, v in volumes.items() if v.get("secret", {}).get("secretName") == "hami-webhook-tls")
    assert mounts[tls]["mountPath"] == "/tls"
    # Whole-volume mounts (no subPath): the kubelet swaps renewed certificate files in place for the reloader.
    assert all("subPath" not in m for m in container["volumeMounts"])
    # Device config: HAMI_DEVICE_CONFIG names the key of the mounted ConfigMap.
    config = next(n for n, v in volumes.items() if v.get("configMap", {}).get("name") == "hami-device-config")
    assert variables["HAMI_DEVICE_CONFIG"]["value"] == f"{mounts[config]['mountPath']}/device-config.yaml"
    (tmp_path / "device-config.yaml").write_text(
        one(base, "ConfigMap", "hami-device-config")["data"]["device-config.yaml"]
    )
    literal = {name: e["value"] for name, e in variables.items() if "value" in e}
    literal["HAMI_DEVICE_CONFIG"] = str(tmp_path / "device-config.yaml")
    settings = Settings.from_env(literal)
    assert (settings.tls_cert, settings.tls_key) == ("/tls/tls.crt", "/tls/tls.key")
    assert settings.device_resources


def test_service_and_network_policy_reach_the_webhook_port(base: list[Obj]) -> None:
    service = one(base, "Service", "hami-webhook")["spec"]
    assert service["selector"] == WEBHOOK_LABELS
    assert service["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]
    policy = one(base, "NetworkPolicy", "hami-webhook")["spec"]
    assert policy["podSelector"]["matchLabels"] == WEBHOOK_LABELS
    assert policy["policyTypes"] == ["Ingress"]
    allowed = {p["port"] for rule in policy["ingress"] for p in rule["ports"]}
    assert "https" in allowed and all("from" not in rule for rule in policy["ingress"])


# --- the webhook configuration: what is sent, fail closed, a short timeout, called again if needed ---


def test_namespace_is_ignored_by_its_own_webhook(base: list[Obj]) -> None:
    assert one(base, "Namespace", NAMESPACE)["metadata"]["labels"]["hami.io/webhook"] == "ignore"


def test_webhook_scope_and_policies(base: list[Obj]) -> None:
    config = hook(base)
    assert config["name"] == "pods.hami.io"
    assert config["admissionReviewVersions"] == ["v1", "v1beta1"]
    assert config["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert config["sideEffects"] == "None"
    assert config["matchPolicy"] == "Equivalent"
    assert config["failurePolicy"] == "Fail"
    assert config["timeoutSeconds"] == 10
    assert config["reinvocationPolicy"] == "IfNeeded"
    service = config["clientConfig"]["service"]
    assert service == {"name": "hami-webhook", "namespace": NAMESPACE, "path": "/webhook", "port": 443}
    assert {c["name"] for c in config["matchConditions"]} == {"requests-accelerator", "not-mirror-pod"}


def test_selectors_keep_system_and_opted_out_namespaces_away_but_not_opted_out_pods(base: list[Obj]) -> None:
    """A Pod's own opt-out label is its author's to write: it must still reach the webhook, which charges it to the
    namespace's quota without mutating it (docs/rules.md#the-opt-out-label)."""
    config = hook(base)
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    namespaces = config["namespaceSelector"]["matchExpressions"]
    assert ignore in namespaces
    by_name = next(e for e in namespaces if e["key"] == "kubernetes.io/metadata.name")
    assert by_name["operator"] == "NotIn"
    assert {"kube-system", "kube-node-lease", NAMESPACE} <= set(by_name["values"])
    assert config["objectSelector"] == {}  # as the API server stores none: GitOps sees no difference


# --- TLS modes: the certificate names the Service, the caBundle is put back, renewal --------------


def certgen_pods(objects: list[Obj]) -> dict[str, Obj]:
    return {
        k: v for k, v in pod_specs(objects).items() if k in {"Job/hami-webhook-certgen", "CronJob/hami-webhook-certgen"}
    }


def test_certgen_job_and_cronjob_create_then_patch(base: list[Obj]) -> None:
    pods = certgen_pods(base)
    assert set(pods) == {"Job/hami-webhook-certgen", "CronJob/hami-webhook-certgen"}
    parser = build_parser()
    for where, pod in pods.items():
        assert pod["serviceAccountName"] == "hami-webhook-certgen"
        assert pod["restartPolicy"] == "OnFailure"
        (create,) = pod["initContainers"]
        patch, workloads = pod["containers"]
        assert create["command"] == patch["command"] == workloads["command"] == ["certgen"]
        assert create["image"] == patch["image"] == workloads["image"] == webhook_container(base)["image"]
        created = parser.parse_args([a.replace("$(POD_NAMESPACE)", NAMESPACE) for a in create["args"]])
        assert (created.namespace, created.secret_name) == (NAMESPACE, "hami-webhook-tls"), where
        assert SERVICE_HOSTS <= set(created.host), where
        patched = [
            parser.parse_args([a.replace("$(POD_NAMESPACE)", NAMESPACE) for a in c["args"]]) for c in (patch, workloads)
        ]
        assert [
            (p.namespace, p.secret_name, p.webhook_name, p.patch_mutating, p.patch_validating) for p in patched
        ] == [
            (NAMESPACE, "hami-webhook-tls", "hami-webhook-pods", True, False),
            (NAMESPACE, "hami-webhook-tls", "hami-webhook-workloads", False, True),
        ], where
    cron = one(base, "CronJob", "hami-webhook-certgen")["spec"]
    assert cron["concurrencyPolicy"] == "Forbid"
    # Daily runs renew well inside certgen's 30-day renew-before window.
    assert re.fullmatch(r"\d+ \d+ \* \* \*", cron["schedule"])


def test_certgen_job_can_be_reapplied(base: list[Obj]) -> None:
    """A Job's template is immutable: the Job removes itself after finishing, so the next apply recreates it."""
    job = one(base, "Job", "hami-webhook-certgen")
    assert 0 < job["spec"]["ttlSecondsAfterFinished"] <= 600
    assert "generateName" not in job["metadata"]


def test_cert_manager_mode_chains_issuers_and_injects_the_ca(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["cert-manager"]
    assert not certgen_pods(objects)
    assert not [o for o in objects if "certgen" in o["metadata"]["name"]]
    issuers = {o["metadata"]["name"]: o["spec"] for o in find(objects, "Issuer")}
    certificates = {o["metadata"]["name"]: o["spec"] for o in find(objects, "Certificate")}
    serving = certificates["hami-webhook-serving"]
    assert serving["secretName"] == "hami-webhook-tls"
    assert SERVICE_HOSTS <= set(serving["dnsNames"])
    ca_issuer = issuers[serving["issuerRef"]["name"]]
    ca_cert = next(c for c in certificates.values() if c["secretName"] == ca_issuer["ca"]["secretName"])
    assert ca_cert["isCA"] is True and ca_cert["secretName"] == "hami-webhook-tls-ca"
    assert issuers[ca_cert["issuerRef"]["name"]] == {"selfSigned": {}}
    annotations = one(objects, "MutatingWebhookConfiguration", "hami-webhook-pods")["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/hami-webhook-serving"


def test_manual_mode_has_no_certificate_tooling_and_publishes_the_given_ca(
    rendered: dict[str, list[Obj]], overlays_dir: Path
) -> None:
    objects = rendered["manual"]
    assert not certgen_pods(objects)
    assert not [o for o in objects if "certgen" in o["metadata"]["name"] or "cert-manager" in o["apiVersion"]]
    secret = one(objects, "Secret", "hami-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    ca = (overlays_dir / "hami-manual" / "ca.crt").read_bytes()
    assert base64.b64decode(secret["data"]["ca.crt"]) == ca
    for webhook in one(objects, "MutatingWebhookConfiguration", "hami-webhook-pods")["webhooks"]:
        assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == ca


def test_default_mode_leaves_the_ca_bundle_to_certgen(base: list[Obj]) -> None:
    """No caBundle in the manifests: kubectl apply then never overwrites the one certgen wrote."""
    assert "caBundle" not in hook(base)["clientConfig"]
    assert "annotations" not in one(base, "MutatingWebhookConfiguration", "hami-webhook-pods")["metadata"]


def test_readme_production_overlay_sets_the_image_and_the_tls_mode(
    overlays_dir: Path, rendered: dict[str, list[Obj]]
) -> None:
    """The README's overlay for a registry of one's own: every Pod pulls from it, and cert-manager makes the TLS."""
    from tests.manifests.conftest import kustomize, write_overlay

    objects = kustomize(write_overlay(overlays_dir / "hami-production", "hami-production"))
    images = {c["image"] for pod in pod_specs(objects).values() for c in containers(pod)}
    assert images == {f"registry.example.com/gpu/hami-webhook:{project_version()}"}
    assert "Deployment/hami-webhook" in pod_specs(objects)
    assert {(o["kind"], o["metadata"]["name"]) for o in objects} == {
        (o["kind"], o["metadata"]["name"]) for o in rendered["cert-manager"]
    }, "exactly the cert-manager mode's objects"
    annotations = one(objects, "MutatingWebhookConfiguration", "hami-webhook-pods")["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/hami-webhook-serving"


def test_readme_rollout_overlay_opts_in_and_ignores_failures(overlays_dir: Path) -> None:
    from tests.manifests.conftest import kustomize, write_overlay

    objects = kustomize(write_overlay(overlays_dir / "hami-rollout", "hami-rollout"))
    config = hook(objects)
    assert config["namespaceSelector"]["matchLabels"] == {"hami.io/webhook": "enabled"}
    assert (
        config["namespaceSelector"]["matchExpressions"]
        == hook(kustomize(MANIFESTS))["namespaceSelector"]["matchExpressions"]
    )
    assert config["failurePolicy"] == "Ignore"
    for version in ("1.30.0", kubernetes_validate.latest_version()):
        kubernetes_validate.validate(
            one(objects, "MutatingWebhookConfiguration", "hami-webhook-pods"), version, strict=True
        )
