"""Quota you can see, through the real API server (each pinned version) with two webhook replicas behind the
Service: both replicas' gauges, ``hami-webhook quota -o json`` and ``kubectl hami quota`` show the figures this
test computes itself from the Pods it created (HAMi's arithmetic: memory per device times the devices), a
ResourceQuota's series go with it, a smaller one moves the limit and its label; the dashboard and the alert name
only series a live /metrics has, and promtool evaluates the alert (with per-namespace thresholds) and the
documented queries on that scrape. The command's bad input, with the shipped hami-webhook-quota-viewer RBAC, is
answered in one line on each version."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.utils import parse_quantity
from prometheus_client.parser import text_string_to_metric_families

from app.quota.core.encoding import LEDGER_ANNOTATION
from testbed import ROOT
from testbed.api import create_at_once, pod
from testbed.cluster import RealKube, kubectl_binary
from testbed.install import Installed, WebhookServer, apply
from testbed.replicas import Replicas, start_replicas
from testbed.rules import promtool_test, selector
from tests.manifests.test_monitoring import DASHBOARD, THRESHOLD, selectors
from tests.realkube.quota_replicas import CRD_GROUPS, member, podgroup, podgroup_crds, quota_namespace, stored

pytestmark = pytest.mark.cluster  # its highest tier (tests/tiers.py checks it)

MEM, GPU = "nvidia.com/gpumem", "nvidia.com/gpu"
GAUGES = (
    "hami_webhook_quota_limit",
    "hami_webhook_quota_used",
    "hami_webhook_quota_held",
    "hami_webhook_quota_held_for_gangs",
)
BIN = Path(sys.executable).parent  # hami-webhook and kubectl-hami, as the package installs them
VIEWER = ROOT / "manifests" / "base" / "rbac" / "quota-viewer.yaml"


@pytest.fixture
def two_webhooks(any_installed: Installed) -> Iterator[Replicas]:
    """Two replicas (one worker each, as the Deployment runs them) with /metrics on free loopback ports; a hold
    lasts 5 minutes (HAMI_QUOTA_RESERVATION_TTL), longer than the test looks at it on a loaded machine."""
    work = any_installed.work / f"view-{uuid.uuid4().hex[:6]}"
    podgroup_crds(any_installed.kube)  # served before the replicas start: they list them at once
    env = {"HAMI_METRICS_BIND": "127.0.0.1:0", "HAMI_QUOTA_RESERVATION_TTL": "300"}
    replicas = start_replicas(any_installed, 2, work, env)
    try:
        yield replicas
    finally:
        logs = replicas.stop()
        if not any_installed.webhook.running:
            any_installed.webhook.start()
    for log in logs:
        assert "Traceback" not in log, log


def denials(url: str, ns: str) -> list[tuple[dict[str, str], float]]:
    """The quota denial counter's samples for ``ns`` (by cause) on one replica's /metrics."""
    found = scrape(url).get("hami_webhook_quota_denials_total", [])
    return [(labels, value) for labels, value in found if labels["namespace"] == ns]


def metrics_url(server: WebhookServer) -> str:
    found = re.search(r"metrics: serving (http://\S+/metrics)", server.log.read_text())
    assert found, server.log.read_text()[-2000:]
    return found.group(1)


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of a /metrics page by name."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def quota_series(url: str, ns: str) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    samples = scrape(url)
    return {
        (name, tuple(sorted(labels.items())), value)
        for name in GAUGES
        for labels, value in samples.get(name, [])
        if labels["namespace"] == ns
    }


def expected_series(ns: str, figures: dict[str, dict[str, Any]]) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    """The gauges as the figures say, labelled as HAMi's scheduler labels its quota gauges (plus resourcequota)."""
    out = set()
    for resource, f in figures.items():
        base = {"namespace": ns, "quota_name": resource, "resourcequota": f["quota"]}
        with_limit = tuple(sorted((base | {"limit": str(f["limit"])}).items()))
        out.add(("hami_webhook_quota_limit", tuple(sorted(base.items())), float(f["limit"])))
        out.add(("hami_webhook_quota_used", with_limit, float(f["used"])))
        out.add(("hami_webhook_quota_held", with_limit, float(f["held"])))
        out.add(("hami_webhook_quota_held_for_gangs", with_limit, float(f.get("heldForGangs", 0))))
    return out


def gpu_pod(name: str, devices: int, memory: int) -> dict[str, Any]:
    return pod(name, {GPU: str(devices), MEM: str(memory)})


def demand(obj: dict[str, Any]) -> dict[str, int]:
    """HAMi's arithmetic, written out here: a container's gpumem is per device, so it counts times the devices."""
    limits = {k: int(parse_quantity(v)) for k, v in obj["spec"]["containers"][0]["resources"]["limits"].items()}
    return {GPU: limits[GPU], MEM: limits[GPU] * limits[MEM]}  # stored "1000" reads back as "1k"


def figures(
    limits: dict[str, dict[str, int]], pods: list[dict[str, Any]], held: dict[str, int]
) -> dict[str, dict[str, Any]]:
    """Per resource: the smallest limit and the ResourceQuota setting it, what ``pods`` use, what is ``held``."""
    out = {}
    for r in (GPU, MEM):
        limit, quota = min((q[r], name) for name, q in limits.items() if r in q)
        out[r] = {"limit": limit, "quota": quota, "used": sum(demand(p)[r] for p in pods), "held": held.get(r, 0)}
    return out


def quota_command(kube: RealKube, *args: str, program: str = "hami-webhook") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "KUBECONFIG": kube.kubeconfig_path}
    env = {k: v for k, v in env.items() if not k.startswith(("KUBERNETES_", "HAMI_"))}
    command = [str(BIN / program), *args] if program != "kubectl" else [kubectl_binary(), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_gauges_and_the_quota_command_show_the_figures(
    any_installed: Installed, two_webhooks: Replicas, promtool: Path, tmp_path: Path
) -> None:
    kube = any_installed.kube
    urls = [metrics_url(s) for s in two_webhooks.servers]
    ns = kube.namespace(f"e2e-view-{uuid.uuid4().hex[:8]}")
    limits = {"gpu": {MEM: 20000, GPU: 10}}
    apply(kube, resource_quota(ns, "gpu", limits["gpu"]))
    try:
        small, big = gpu_pod("small-", 1, 1000), gpu_pod("big-", 2, 1500)
        _, calls = create_at_once(kube, ns, small, 4, 4)
        _, more = create_at_once(kube, ns, big, 2, 2)
        assert [c.status for c in calls + more] == [201] * 6, [c.refusal for c in calls + more]
        pods = kube.get("pods", namespace=ns)["items"]
        gone = [p["metadata"]["name"] for p in pods][::3]
        settled = expected_series(ns, figures(limits, pods, {}))
        for url in urls:  # every grant taken ahead in the bursts closed: nothing held beyond the Pods
            kube.wait_for(lambda url=url: quota_series(url, ns) == settled, 30, interval=0.5)
        kube.kubectl("delete", "pod", "-n", ns, "--wait=false", *gone)
        alive = [p for p in pods if p["metadata"]["name"] not in gone]
        time.sleep(1.5)  # the next admission alone, not in a burst: its room is a reservation, not a grant
        # A hold with no Pod: admitted (room reserved), then refused by storage (the name is taken).
        phantom = gpu_pod(alive[0]["metadata"]["name"], 1, 2500)
        taken = kube.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(phantom), check=False)
        assert "AlreadyExists" in taken.stderr, taken.stderr

        expected = expected_series(ns, figures(limits, alive, demand(phantom)))
        for url in urls:
            kube.wait_for(lambda url=url: quota_series(url, ns) == expected, 30, interval=0.5)

        shown = quota_command(kube, "quota", "-n", ns, "-o", "json")
        assert shown.returncode == 0, shown.stderr
        items = {i["resource"]: i for i in json.loads(shown.stdout)["items"]}
        for resource, f in figures(limits, alive, demand(phantom)).items():
            item = items[resource]
            assert (item["limit"], item["used"], item["held"], item["resourceQuota"]) == (
                f["limit"], f["used"], f["held"], f["quota"]
            )  # fmt: skip
            assert item["free"] == f["limit"] - f["used"] - f["held"] and item["pods"] == len(alive)
            assert item["oldestHold"] is not None

        # A second, smaller ResourceQuota sets the memory limit now, and its label says so.
        limits["gpu-small"] = {MEM: 15000}
        apply(kube, resource_quota(ns, "gpu-small", limits["gpu-small"]))
        expected = expected_series(ns, figures(limits, alive, demand(phantom)))
        for url in urls:
            kube.wait_for(lambda url=url: quota_series(url, ns) == expected, 30, interval=0.5)

        # The plugin: kubectl finds it on PATH and runs it.
        listed = quota_command(kube, "plugin", "list", program="kubectl")
        assert f"{BIN / 'kubectl-hami'}" in listed.stdout, listed.stdout + listed.stderr
        table = quota_command(kube, "hami", "quota", "-n", ns, program="kubectl")
        assert table.returncode == 0, table.stderr
        header, *lines = table.stdout.splitlines()
        assert header.split() == ["RESOURCE", "LIMIT", "USED", "HELD", "FREE", "PODS"]
        mem = figures(limits, alive, demand(phantom))[MEM]
        row = [MEM, mem["limit"], mem["used"], mem["held"], mem["limit"] - mem["used"] - mem["held"], len(alive)]
        assert [str(v) for v in row] in [line.split() for line in lines], table.stdout

        live_metrics_name_the_dashboards_series(kube, urls[0])
        the_rules_hold_on_the_scrape(promtool, kube, urls[0], ns, tmp_path)
        shown_all = quota_command(kube, "quota", "-A")
        assert shown_all.returncode == 0 and ns in shown_all.stdout, shown_all.stderr
        print(f"\n$ hami-webhook quota -A\n{shown_all.stdout}\n$ curl {urls[1]} | grep hami_webhook_quota_")
        print("\n".join(sorted(f"{n}{dict(labels)} {v}" for n, labels, v in quota_series(urls[1], ns))))

        # The ResourceQuotas go: so do the namespace's series, on both replicas.
        kube.kubectl("delete", "resourcequota", "-n", ns, "gpu", "gpu-small")
        for url in urls:
            kube.wait_for(lambda url=url: quota_series(url, ns) == set(), 30, interval=0.5)
    finally:
        kube.kubectl("delete", "namespace", "--wait=false", ns)


def resource_quota(ns: str, name: str, hard: dict[str, int], scope: str = "limits") -> dict[str, Any]:
    spec = {"hard": {f"{scope}.{r}": str(v) for r, v in hard.items()}}
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": ns}, "spec": spec}


# Series that exist only after their first event (a labelled counter has no sample before), or only in the API
# server's /metrics after a webhook failed open: named by the dashboard or the rules, absent from a fresh scrape.
AFTER_AN_EVENT = {
    "hami_webhook_quota_ledger_full_total",
    "hami_webhook_quota_denials_total",
    "hami_webhook_warnings_total",
    "apiserver_admission_webhook_fail_open_count",
    "apiserver_validating_admission_policy_check_total",
    # the device inventory's, per vendor once a Node registers devices (none here), and its first warning's
    "hami_webhook_inventory_nodes",
    "hami_webhook_inventory_devices",
    "hami_webhook_fits_nowhere_total",
}


def test_crd_gangs_race_and_the_room_a_gang_holds_shows(any_installed: Installed, two_webhooks: Replicas) -> None:
    """On each version (1.30: no Workload API, the CRDs only): two coscheduling or Volcano gangs of 4 racing into
    room for 6 store one whole and the other not at all, each refusal counted with cause gang; a gang's first member
    alone holds its others' room, which both replicas' gauges and ``-o wide`` show."""
    kube = any_installed.kube
    spaces = [quota_namespace(kube, 6) for _ in range(3)]
    urls = [metrics_url(s) for s in two_webhooks.servers]
    try:
        for ns, way in zip(spaces, CRD_GROUPS, strict=False):
            apply(kube, podgroup(kube, way, ns, "red", 4), podgroup(kube, way, ns, "blue", 4))
            _, calls = create_at_once(kube, ns, [member(way, "red", 4), member(way, "blue", 4)], 8, 8)
            names = [p["metadata"]["generateName"] for p in stored(kube, ns)]
            assert sorted(names.count(f"{g}-") for g in ("red", "blue")) == [0, 4], (way, calls)
            refused = sum(1 for c in calls if c.quota_denial)

            def counted(ns: str = ns, refused: int = refused) -> list[tuple[str, float]] | None:  # once answered
                causes = [(labels["cause"], value) for url in urls for labels, value in denials(url, ns)]
                return causes if sum(v for _, v in causes) == refused else None

            assert {cause for cause, _ in kube.wait_for(counted, 10, interval=0.2)} == {"gang"}, refused
        ns = spaces[2]
        apply(kube, podgroup(kube, "scheduling.x-k8s.io", ns, "solo", 4))
        _, first = create_at_once(kube, ns, member("scheduling.x-k8s.io", "solo", 4), 1, 1)
        assert [c.status for c in first] == [201]
        labels = tuple(sorted({"namespace": ns, "quota_name": MEM, "limit": "6000", "resourcequota": "gpu"}.items()))
        held = ("hami_webhook_quota_held_for_gangs", labels, 3000.0)
        for url in urls:
            kube.wait_for(lambda url=url: held in quota_series(url, ns), 30, interval=0.5)
        wide = quota_command(kube, "quota", "-n", ns, "-o", "wide")
        row = next(line.split() for line in wide.stdout.splitlines() if line.startswith(MEM))
        assert row[-2:] == ["3000", "scheduling.x-k8s.io/solo=1/4"], wide.stdout
    finally:
        for ns in spaces:
            kube.kubectl("delete", "namespace", "--wait=false", ns)


def live_metrics_name_the_dashboards_series(kube: RealKube, url: str) -> None:
    """Every expression of the dashboard and the PrometheusRule parses and selects series a live scrape has (the
    webhook's /metrics and the API server's), the quota gauges among them; the webhook's labels are safe to
    honour."""
    samples = scrape(url)
    # The ServiceMonitor honours the webhook's labels (honorLabels): none may stand in for a target label the
    # Prometheus Operator sets, and only the quota gauges carry a namespace (the quota'd one).
    target_labels = {"job", "instance", "pod", "service", "container", "endpoint"}
    assert not {k for found in samples.values() for labels, _ in found for k in labels} & target_labels
    assert {n for n, found in samples.items() for labels, _ in found if "namespace" in labels} == set(GAUGES)
    live = set(samples) | {
        line.split("{")[0].split(" ")[0]
        for line in kube.kubectl("get", "--raw", "/metrics").stdout.splitlines()
        if line and not line.startswith("#")
    }
    rules_file = ROOT / "manifests" / "components" / "monitoring" / "prometheusrule.yaml"
    rules = [r for g in yaml.safe_load(rules_file.read_text())["spec"]["groups"] for r in g["rules"]]
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [r["expr"] for r in rules] + [t["expr"] for p in panels for t in p["targets"]]
    # THRESHOLD is recorded by the operator's own rule, never scraped.
    named = {n for e in exprs for n in selectors(e.replace("$namespace", "hami-system"))} - {THRESHOLD}
    assert set(GAUGES) <= named & live
    assert named - live <= AFTER_AN_EVENT, sorted(named - live - AFTER_AN_EVENT)


# The queries docs/operations.md ("Metrics") gives, each evaluated below as written there.
USED_BY_LIMIT = "hami_webhook_quota_used / ignoring (limit) hami_webhook_quota_limit"
FREE = (
    "clamp_min(max by (namespace, quota_name) (hami_webhook_quota_limit)\n"
    "  - max by (namespace, quota_name) (hami_webhook_quota_used + hami_webhook_quota_held), 0)"
)


def the_rules_hold_on_the_scrape(promtool: Path, kube: RealKube, url: str, ns: str, work: Path) -> None:
    """Prometheus's rule engine on this scrape's quota series, held for 30 minutes and copied under two more
    namespaces with thresholds of their own (2: never; 0.01: as soon as anything is used): the shipped
    HamiWebhookQuotaNearLimit fires exactly where used and held / limit reach each namespace's threshold (0.9
    unless set), and the documented used / limit and FREE give the command's figures."""
    page = (ROOT / "docs" / "operations.md").read_text()
    assert USED_BY_LIMIT in page and FREE in page
    found = [(n, labels, v) for n in GAUGES for labels, v in scrape(url).get(n, []) if labels["namespace"] == ns]
    done = quota_command(kube, "quota", "-n", ns, "-o", "json")  # settled: the same figures as the scrape's
    shown = {i["resource"]: i for i in json.loads(done.stdout)["items"]}
    target = {"job": "hami-webhook-metrics", "instance": "replica-0"}
    thresholds = {ns: 0.9, f"{ns}-quiet": 2.0, f"{ns}-eager": 0.01}
    series = [(n, {**labels, **target, "namespace": name}, v) for name in thresholds for n, labels, v in found]
    extra = [
        {"record": THRESHOLD, "expr": f"vector({t})", "labels": {"namespace": name}}
        for name, t in thresholds.items()
        if name != ns
    ]
    alert = {"alertname": "HamiWebhookQuotaNearLimit", "alertstate": "firing", "severity": "warning"}
    firing = [
        {"labels": selector("ALERTS", alert | {"namespace": name, "quota_name": r}), "value": 1}
        for name, t in thresholds.items()
        for r, f in sorted(shown.items())
        if (f["used"] + f["held"]) / f["limit"] >= t
    ]
    assert any(f"{ns}-eager" in a["labels"] for a in firing) and not any("-quiet" in a["labels"] for a in firing)
    ratio = [
        {
            "labels": selector("", {"namespace": name, "quota_name": r, "resourcequota": f["resourceQuota"], **target}),
            "value": f["used"] / f["limit"],
        }
        for name in thresholds
        for r, f in shown.items()
    ]
    free = [
        {"labels": selector("", {"namespace": name, "quota_name": r}), "value": f["free"]}
        for name in thresholds
        for r, f in shown.items()
    ]
    promtool_test(
        promtool,
        work / "rules",
        series,
        extra_rules=extra,
        expressions=[
            {"expr": 'ALERTS{alertname="HamiWebhookQuotaNearLimit"}', "eval_time": "20m", "exp_samples": firing},
            {"expr": USED_BY_LIMIT, "eval_time": "5m", "exp_samples": ratio},
            {"expr": FREE, "eval_time": "5m", "exp_samples": free},
        ],
    )


@pytest.fixture
def viewer(any_installed: Installed) -> Iterator[tuple[str, str, str, str]]:
    """A quota'd namespace, a ledgers' namespace of its own, and a ServiceAccount bound to the shipped ClusterRole
    only (its Role in the ledgers' namespace not bound yet): the two namespaces, its kubeconfig, and the role's
    name."""
    kube, suffix = any_installed.kube, uuid.uuid4().hex[:8]
    ns, home = kube.namespace(f"view-bad-{suffix}"), kube.namespace(f"view-home-{suffix}")
    name = f"viewer-{home}"
    cluster_role, role = list(yaml.safe_load_all(VIEWER.read_text()))
    cluster_role["metadata"]["name"] = name
    role["metadata"] |= {"name": name, "namespace": home}
    apply(kube, {"apiVersion": "v1", "kind": "List", "items": [cluster_role, role]})
    kube.kubectl("create", "serviceaccount", "viewer", "-n", home)
    kube.kubectl("create", "clusterrolebinding", name, f"--clusterrole={name}", f"--serviceaccount={home}:viewer")
    user = f"system:serviceaccount:{home}:viewer"
    kube.wait_for(
        lambda: kube.kubectl("auth", "can-i", "list", "pods", f"--as={user}", check=False).returncode == 0, 30
    )
    token = kube.kubectl("create", "token", "viewer", "-n", home).stdout.strip()
    try:
        yield ns, home, kube.kubeconfig_for(token, any_installed.work / f"{name}.kubeconfig"), name
    finally:
        kube.kubectl("delete", "clusterrolebinding,clusterrole", name, check=False)
        kube.kubectl("delete", "namespace", "--wait=false", ns, home)


def test_bad_input_is_one_line_and_exit_1(
    any_installed: Installed, viewer: tuple[str, str, str, str], tmp_path: Path
) -> None:
    """An unknown namespace, kubeconfigs that do not load, RBAC that forbids the Leases (naming the verb and the
    object), a hand-edited ledger: each one line on stderr and exit 1, never a traceback. A namespace without a
    device quota is no error: kubectl's "No resources found", exit 0."""
    kube, (ns, home, kubeconfig, role) = any_installed.kube, viewer
    as_viewer = ("quota", "--kubeconfig", kubeconfig, "--webhook-namespace", home)
    apply(kube, resource_quota(ns, "gpu", {"cpu": 4}, "requests"))
    assert one_line_error(quota_command(kube, *as_viewer, "-n", "no-such-namespace")) == (
        'error: namespaces "no-such-namespace" not found'
    )
    bare = quota_command(kube, *as_viewer, "-n", ns)  # a namespace without a device quota, as kubectl says it
    assert (bare.returncode, bare.stdout, bare.stderr) == (0, "", f"No resources found in {ns} namespace.\n")
    for name, text in (("absent", None), ("garbage", "clusters: [oops"), ("not-a-kubeconfig", "just text")):
        if text is not None:
            (tmp_path / name).write_text(text)
        said = one_line_error(quota_command(kube, "quota", "--kubeconfig", str(tmp_path / name), "-A"))
        assert said.startswith(f"error: cannot load the kubeconfig ({tmp_path / name}): "), said

    kube.kubectl("delete", "resourcequota", "-n", ns, "gpu")
    apply(kube, resource_quota(ns, "gpu", {MEM: 10000}))
    forbidden = one_line_error(quota_command(kube, *as_viewer, "-n", ns))
    user = f"system:serviceaccount:{home}:viewer"
    assert forbidden.startswith(
        f"error: forbidden: cannot get leases.coordination.k8s.io hami-quota-{ns} in namespace {home}: "
    ), forbidden
    assert f'User "{user}" cannot get resource "leases"' in forbidden
    listing = one_line_error(quota_command(kube, *as_viewer, "-A"))
    assert f"cannot list leases.coordination.k8s.io in namespace {home}" in listing

    kube.kubectl("create", "rolebinding", "viewer", "-n", home, f"--role={role}", f"--serviceaccount={home}:viewer")
    can = ("auth", "can-i", "get", "leases.coordination.k8s.io", "-n", home, f"--as={user}")
    kube.wait_for(lambda: kube.kubectl(*can, check=False).returncode == 0, 30)
    fine = quota_command(kube, *as_viewer, "-n", ns)
    assert fine.returncode == 0 and fine.stdout.split()[:6] == ["RESOURCE", "LIMIT", "USED", "HELD", "FREE", "PODS"]

    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": f"hami-quota-{ns}", "namespace": home, "annotations": {}},
    }
    for text, says in (("{not json", "is not JSON"), ('{"x": {"expires": "soon"}}', "entry 'x' lacks")):
        lease["metadata"]["annotations"][LEDGER_ANNOTATION] = text
        apply(kube, lease)
        broken = one_line_error(quota_command(kube, *as_viewer, "-n", ns))
        where = f"{home}/hami-quota-{ns}"
        assert broken.startswith(f"error: quota ledger {where} is malformed: annotation {LEDGER_ANNOTATION}"), broken
        assert says in broken, broken


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1 and done.stdout == "", (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr.strip()
