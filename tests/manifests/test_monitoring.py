"""The optional monitoring component: it renders in an overlay, its objects reach the webhook's metrics port,
and every alert and dashboard expression parses as PromQL and names only metrics the webhook exports."""

from __future__ import annotations

import json

import kubernetes_validate
import promql_parser
import pytest

from app import metrics
from app.preview.policies import GUARD, REVIEWED, ROUTED
from testbed import ROOT
from tests.manifests.conftest import Obj, kustomize, one, write_overlay

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
# The API server's own (docs/operations.md)
APISERVER = {"apiserver_admission_webhook_fail_open_count", "apiserver_validating_admission_policy_check_total"}
# The per-namespace threshold of HamiWebhookQuotaNearLimit: a series the operator records, none the webhook exports.
THRESHOLD = "hami_webhook:quota_near_limit:threshold"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> set[str]:
    """Every sample name the webhook's collectors expose."""
    names = set()
    for collector in vars(metrics.collectors()).values():
        for family in collector.describe():
            names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def selectors(expr: str) -> set[str]:
    """The metric names an expression selects (it must parse)."""
    found: set[str] = set()
    pending = [promql_parser.parse(expr)]
    while pending:
        node = pending.pop()
        if isinstance(node, promql_parser.VectorSelector):
            found.add(node.name)
        for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
            child = getattr(node, attr, None)
            if isinstance(child, promql_parser.Expr):
                pending.append(child)
        pending.extend(a for a in getattr(node, "args", None) or [] if isinstance(a, promql_parser.Expr))
    return found


@pytest.fixture(scope="module")
def monitoring(tmp_path_factory: pytest.TempPathFactory) -> list[Obj]:
    return kustomize(write_overlay(tmp_path_factory.mktemp("overlays") / "hami-monitoring", "hami-monitoring"))


def rules(objects: list[Obj]) -> list[Obj]:
    return [r for g in one(objects, "PrometheusRule", "hami-webhook")["spec"]["groups"] for r in g["rules"]]


def test_metrics_service_reaches_the_metrics_port(monitoring: list[Obj]) -> None:
    service = one(monitoring, "Service", "hami-webhook-metrics")
    kubernetes_validate.validate(service, "1.30.0", strict=True)
    template = one(monitoring, "Deployment", "hami-webhook")["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    ports = {p["name"]: p for c in template["spec"]["containers"] for p in c.get("ports", [])}
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    assert ports["metrics"]["containerPort"] == 9090
    monitor = one(monitoring, "ServiceMonitor", "hami-webhook")["spec"]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["namespaceSelector"] == {"matchNames": [service["metadata"]["namespace"]]}
    assert [(e["port"], e["path"], e["scheme"]) for e in monitor["endpoints"]] == [("metrics", "/metrics", "http")]


def test_monitoring_objects_live_in_hami_system(monitoring: list[Obj]) -> None:
    objects = [("Service", "hami-webhook-metrics"), ("ServiceMonitor", "hami-webhook")]
    objects.append(("PrometheusRule", "hami-webhook"))
    for kind, name in objects:
        assert one(monitoring, kind, name)["metadata"]["namespace"] == "hami-system"


def test_alerts_cover_the_usual_thresholds(monitoring: list[Obj]) -> None:
    by_name = {r["alert"]: r for r in rules(monitoring)}
    assert "> 0.5" in by_name["HamiWebhookLatencyHigh"]["expr"] and "0.99" in by_name["HamiWebhookLatencyHigh"]["expr"]
    assert "> 0.01" in by_name["HamiWebhookErrorRate"]["expr"]
    assert "7 * 86400" in by_name["HamiWebhookCertificateExpiresSoon"]["expr"]
    assert "hami_webhook_quota_feed_synced" in by_name["HamiWebhookQuotaFeedOutOfSync"]["expr"]
    near = by_name["HamiWebhookQuotaNearLimit"]
    assert "* 0 + 0.9" in near["expr"] and near["for"] == "15m" and near["labels"]["severity"] == "warning"
    assert THRESHOLD in selectors(near["expr"])  # a namespace's own threshold, when it has one
    assert all(f"max by (namespace, quota_name) (hami_webhook_quota_{g}" in near["expr"] for g in ("used", "limit"))
    [hook] = one(monitoring, "MutatingWebhookConfiguration", "hami-webhook-pods")["webhooks"]
    assert f'fail_open_count{{name="{hook["name"]}"}}' in by_name["HamiWebhookFailedOpen"]["expr"]
    left_on = by_name["HamiWebhookFailurePolicyIgnored"]
    assert "> 3600" in left_on["expr"] and left_on["labels"]["severity"] == "critical"
    watched = {"HamiWebhookBypassed": (ROUTED, REVIEWED), "HamiAllocationAnnotationRefused": (GUARD,)}
    for name, policies in watched.items():
        assert all(policy in by_name[name]["expr"] for policy in policies)
        assert all(one(monitoring, "ValidatingAdmissionPolicy", policy) for policy in policies)
    for rule in by_name.values():
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"]


def test_rule_expressions_parse_and_use_exported_metrics(monitoring: list[Obj]) -> None:
    master = {family.name for gauge in metrics.master_gauges() for family in gauge.describe()}  # no panel: alerts
    names = exported() | master | APISERVER
    alerts = rules(monitoring)
    assert alerts
    for rule in alerts:
        used = selectors(rule["expr"]) - {THRESHOLD}
        assert used and used <= names, f"{rule['alert']}: {sorted(used - names)} not exported"


def test_dashboard_expressions_parse_and_use_exported_metrics() -> None:
    names = exported()
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs
    for expr in exprs:
        used = selectors(expr.replace("$namespace", "hami-system"))
        assert used and used <= names, f"{expr}: {sorted(used - names)} not exported"
    assert names <= {n for e in exprs for n in selectors(e.replace("$namespace", "x"))} | {
        n for n in names if n.endswith(("_sum", "_count"))
    }, "every exported metric has a panel"


def test_parser_rejects_nonsense() -> None:
    with pytest.raises(Exception):  # noqa: B017 (the library raises a plain ValueError/RuntimeError)
        selectors("sum(rate(x[5m]) >")
    assert selectors("rate(a_total[5m]) / on() group_left b") == {"a_total", "b"}
