"""Part 5: device-Pod creates through a real kube-apiserver with this webhook, with HAMi's own webhook, and with none.

    python -m bench.apiserver [--smoke] [--pods 300] [--burst 300] [--rounds 3] [--json FILE]

One control plane (tests/realkube) and the webhook installed the way a user does it (testbed/install.py),
run as two replicas behind its Service (testbed/replicas.py). HAMi's webhook (the reference build,
testbed/hami.py) runs the same way: two processes behind a Service of its own and the same forwarder,
called through a copy of our MutatingWebhookConfiguration that differs only in its name, Service and CA. Three
namespaces, labelled so that each configuration matches one of them and the third none. Then, in one run:

- sequential, ``--rounds`` times: one client creates a device Pod in each namespace in turn (the order
  rotates), ``--pods`` each;
- burst, ``--rounds`` times: ``--burst`` Pods at once from 16 clients into each namespace, the order rotating.

Each create is timed at the client; the added latency is a case's percentile less the no-webhook case's, and
the ratios are this webhook's over HAMi's, taken within each round and then the median over rounds. The API server's own
``apiserver_admission_webhook_admission_duration_seconds`` per webhook is printed beside (its buckets are
coarse: 5 ms, 25 ms, ...; its mean is exact). Every create is checked: 201, and the scheduler name each case
must give (a webhook's, or the default).
"""

from __future__ import annotations

import argparse
import base64
import copy
import ipaddress
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.inprocess import percentile
from bench.quota import apiserver_metrics, control_plane, device_pod
from certgen.local import write_local
from testbed import hami
from testbed.api import Api, create_at_once
from testbed.cluster import LOOPBACK, RealKube
from testbed.install import NAMESPACE, Installed, install
from testbed.ports import free_port
from testbed.replicas import forward, start_replicas
from testbed.tls import client_context

CASES = ("none", "hami", "product")
LABEL = "hami-bench/webhook"  # which configuration matches a namespace: its value is the case
HAMI_SERVICE = "hami-reference"
HAMI_WEBHOOK = "pods.hami-reference.io"
OUR_CONFIG = "hami-webhook-pods"
SCHEDULER = "hami-scheduler"  # what both webhooks set on a device Pod (ours by default, HAMi's by flag)
REPLICAS = 2
BURST_CLIENTS = 16
HISTOGRAM = "apiserver_admission_webhook_admission_duration_seconds"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=300, help="sequential creates per case and round (%(default)s)")
    parser.add_argument("--burst", type=int, default=300, help="Pods per burst (%(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="sequential rounds and bursts per case (%(default)s)")
    parser.add_argument("--replica-env", action="append", default=[], help="KEY=VALUE for this webhook's replicas")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--smoke", action="store_true", help="tiny counts: proves the part runs (no figures)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.smoke:
        args.pods, args.burst, args.rounds = 3, 6, 1
    try:
        reference = hami.build()
    except hami.Unavailable as exc:
        print(f"through the API server: skipped, {exc}")
        return 0
    print(f"through the API server: HAMi's webhook built from {reference.source}")
    with tempfile.TemporaryDirectory(prefix="hami-bench-apiserver-") as tmp:
        work = Path(tmp)
        kube = control_plane(work)
        try:
            installed = install(kube, work / "install")
            connections: dict[str, Any] = {}
            env = dict(item.split("=", 1) for item in args.replica_env)
            with serving(installed, reference, work, connections, env) as names:
                results = measure(kube, names, args)
            results["connections"] = connections
        finally:
            kube.stop()
    print(table(results, args))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if not results["problems"] else 1


# --- the three cases ----------------------------------------------------------------------------------------


@contextmanager
def serving(
    installed: Installed, reference: hami.Reference, work: Path, connections: dict[str, Any], env: dict[str, str]
) -> Iterator[dict[str, str]]:
    """Both webhooks up behind their Services and configured, and a namespace per case; yields case -> namespace.
    On the way out, ``connections`` gets the connections the API server opened to each replica."""
    kube = installed.kube
    with ExitStack() as stack:
        replicas = start_replicas(installed, REPLICAS, work / "replicas", env)

        def stopped() -> None:
            replicas.stop()
            connections["product"] = sorted(replicas.connections.values())

        stack.callback(stopped)
        ip = hami_service(kube)
        pki = write_local(work / "hami-tls", [f"{HAMI_SERVICE}.{NAMESPACE}.svc", "127.0.0.1"])  # 127.0.0.1: readiness
        config = work / "hami-device-config.yaml"
        config.write_text(reference.render())
        backends = []
        for i in range(REPLICAS):
            served = stack.enter_context(
                hami.serve(reference, pki.cert, pki.key, client_context(pki.ca_cert), hami.flags(config),
                           port=free_port(), log=work / f"hami-{i}.log")
            )  # fmt: skip
            backends.append(f"127.0.0.1:{served.port}")
        forwarder = forward(f"{ip}:443", backends)

        def forwarded() -> None:
            out, _ = forwarder.communicate("", timeout=30)
            connections["hami"] = sorted(json.loads(out.splitlines()[-1]).values()) if out.strip() else []

        stack.callback(forwarded)
        configure(kube, base64.b64encode(pki.ca_cert.read_bytes()).decode())
        suffix = uuid.uuid4().hex[:4]
        yield {case: kube.namespace(f"bench-{case}-{suffix}", {LABEL: case}) for case in CASES}


def hami_service(kube: RealKube) -> str:
    """A ClusterIP Service for HAMi's webhook beside ours; its address, which must be on loopback (we bind it)."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": HAMI_SERVICE, "namespace": NAMESPACE},
        "spec": {"ports": [{"port": 443, "targetPort": 8443}], "selector": {"app": HAMI_SERVICE}},
    }
    kube.kubectl("apply", "-f", "-", stdin=json.dumps(service))
    ip = json.loads(kube.kubectl("get", "service", HAMI_SERVICE, "-n", NAMESPACE, "-o", "json").stdout)
    address = ip["spec"]["clusterIP"]
    if ipaddress.ip_address(address) not in LOOPBACK:
        raise RuntimeError(f"Service {HAMI_SERVICE} got ClusterIP {address}, outside 127.0.0.0/8")
    return str(address)


def configure(kube: RealKube, hami_ca: str) -> None:
    """Our installed configuration limited to the "product" namespace, and a copy of it for HAMi's webhook
    limited to the "hami" one: the same rules, matchConditions, timeout and failure policy for both."""
    ours = json.loads(kube.kubectl("get", "mutatingwebhookconfiguration", OUR_CONFIG, "-o", "json").stdout)
    ours["metadata"] = {"name": OUR_CONFIG}
    theirs = copy.deepcopy(ours)
    theirs["metadata"] = {"name": HAMI_SERVICE}
    for config, case in ((ours, "product"), (theirs, "hami")):
        (webhook,) = config["webhooks"]
        webhook["namespaceSelector"].setdefault("matchExpressions", []).append(
            {"key": LABEL, "operator": "In", "values": [case]}
        )
    (hook,) = theirs["webhooks"]
    hook["name"] = HAMI_WEBHOOK
    hook["clientConfig"] = {
        "service": {**hook["clientConfig"]["service"], "name": HAMI_SERVICE},
        "caBundle": hami_ca,
    }
    for config in (ours, theirs):
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(config))
    # The admission policies would refuse the "none" case's unrouted device Pods; their cost is bench.policies'.
    policies = "validatingadmissionpolicies,validatingadmissionpolicybindings"
    kube.kubectl("delete", policies, "-l", "app.kubernetes.io/name=hami-webhook")


# --- measuring ----------------------------------------------------------------------------------------------


def measure(kube: RealKube, names: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    """Sequential rounds, then bursts; each figure the median over rounds, each ratio taken within a round."""
    problems: list[str] = []
    warm_up(kube, names)
    before = webhook_histogram(kube)
    rounds = [creates_in_turn(kube, names, args.pods, problems) for _ in range(args.rounds)]
    after = webhook_histogram(kube)
    bursts: list[dict[str, dict[str, float]]] = []
    for rnd in range(args.rounds):
        bursts.append({})
        for case in CASES[rnd % len(CASES) :] + CASES[: rnd % len(CASES)]:
            started, calls = create_at_once(kube, names[case], device_pod(), args.burst, BURST_CLIENTS)
            latencies = [c.ended - c.started for c in calls]
            failed = [c.status for c in calls if c.status != 201]
            if failed or len(calls) != args.burst:
                problems.append(f"burst {rnd} {case}: {len(calls)} creates, not 201: {failed[:5]}")
            seconds = max(c.ended for c in calls) - started
            bursts[-1][case] = {"rate": len(calls) / seconds, "p50": percentile(latencies, 50),
                                "p99": percentile(latencies, 99)}  # fmt: skip
    seq = [{case: {"p50": percentile(v, 50), "p99": percentile(v, 99)} for case, v in r.items()} for r in rounds]
    med = statistics.median

    def added(case: str, pct: str) -> float:
        return med(r[case][pct] - r["none"][pct] for r in seq)

    def ratio(runs: list[dict[str, dict[str, float]]], key: str, over_none: bool = False) -> float:
        if over_none:
            return med((r["product"][key] - r["none"][key]) / max(r["hami"][key] - r["none"][key], 1e-9) for r in runs)
        return med(r["product"][key] / r["hami"][key] for r in runs)

    return {
        "sequential": {case: {k: med(r[case][k] for r in seq) for k in ("p50", "p99")} for case in CASES},
        "added": {case: {k: added(case, k) for k in ("p50", "p99")} for case in ("hami", "product")},
        "ratios": {  # this webhook's over HAMi's, within each round, then the median
            "added_p50": ratio(seq, "p50", over_none=True),
            "p99": ratio(seq, "p99"),
            "burst_rate": ratio(bursts, "rate"),
            "burst_p99": ratio(bursts, "p99"),
        },
        "burst": {case: {k: med(b[case][k] for b in bursts) for k in ("rate", "p50", "p99")} for case in CASES},
        "histogram": {name: delta(after.get(name, {}), before.get(name, {})) for name in after},
        "problems": problems,
    }


def warm_up(kube: RealKube, names: dict[str, str], timeout: float = 60) -> None:
    """Until each case's namespace gets its webhook (the API server picks up configurations a moment later)."""
    api = Api(kube)
    deadline = time.monotonic() + timeout
    try:
        for case, ns in names.items():
            while settled_scheduler_of(api, ns) != expected_scheduler(case):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"namespace {ns} never got {case}'s webhook")
                time.sleep(0.2)
            for _ in range(5):  # connections to both replicas open, caches warm
                scheduler_of(api, ns)
    finally:
        api.close()


def settled_scheduler_of(api: Api, ns: str) -> str:
    """scheduler_of, or "" while the API server still applies the admission policies deleted a moment ago
    (it drops them as its informer catches up, as it picks up webhook configurations)."""
    try:
        return scheduler_of(api, ns)
    except PolicyRefusal:
        return ""


class PolicyRefusal(RuntimeError):
    """A create refused by an admission policy the bench deleted."""


def expected_scheduler(case: str) -> str:
    return "default-scheduler" if case == "none" else SCHEDULER


def scheduler_of(api: Api, ns: str) -> str:
    status, data = api.call("POST", f"/api/v1/namespaces/{ns}/pods", json.dumps(device_pod()).encode())
    if status == 403 and b"ValidatingAdmissionPolicy" in data:
        raise PolicyRefusal(f"create in {ns}: {data[:300]!r}")
    if status != 201:
        raise RuntimeError(f"create in {ns}: HTTP {status}: {data[:300]!r}")
    return str(json.loads(data)["spec"].get("schedulerName"))


def creates_in_turn(kube: RealKube, names: dict[str, str], pods: int, problems: list[str]) -> dict[str, list[float]]:
    """One client, one create at a time, the cases in rotating order; seconds per create, checked after timing."""
    body = json.dumps(device_pod()).encode()
    out: dict[str, list[float]] = {case: [] for case in CASES}
    api = Api(kube)
    try:
        for i in range(pods):
            for case in CASES[i % len(CASES) :] + CASES[: i % len(CASES)]:
                started = time.perf_counter()
                status, data = api.call("POST", f"/api/v1/namespaces/{names[case]}/pods", body)
                out[case].append(time.perf_counter() - started)
                got = json.loads(data).get("spec", {}).get("schedulerName") if status == 201 else None
                if got != expected_scheduler(case):
                    problems.append(f"sequential {case}: HTTP {status}, schedulerName {got}")
    finally:
        api.close()
    return out


def webhook_histogram(kube: RealKube) -> dict[str, dict[str, float]]:
    """The API server's webhook-duration histogram per webhook name: cumulative count per bucket, sum, count."""
    out: dict[str, dict[str, float]] = {}
    for key, value in apiserver_metrics(kube, (HISTOGRAM,)).items():
        labels = dict(part.split("=", 1) for part in key[key.index("{") + 1 : -1].split(","))
        name = labels.get("name", "").strip('"')
        if labels.get("type", '"admit"') != '"admit"':
            continue
        field = labels["le"].strip('"') if "le" in labels else key[len(HISTOGRAM) + 1 : key.index("{")]
        out.setdefault(name, {})
        out[name][field] = out[name].get(field, 0.0) + value
    return out


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


# --- the table ----------------------------------------------------------------------------------------------


def table(results: dict[str, Any], args: argparse.Namespace) -> str:
    seq, burst, added, ratios = results["sequential"], results["burst"], results["added"], results["ratios"]
    lines = [
        f"5. through kube-apiserver: device-Pod creates, {REPLICAS} replicas of each webhook behind its Service",
        f"sequential, one client, {args.pods} creates per case alternating, median of {args.rounds} round(s)",
        f"  {'':10} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10} {'added p99':>10}",
    ]
    for case in CASES:
        row = seq[case]
        extra = f"{added[case]['p50'] * 1000:10.2f} {added[case]['p99'] * 1000:10.2f}" if case in added else ""
        lines.append(f"  {case:10} {row['p50'] * 1000:8.2f} {row['p99'] * 1000:8.2f} {extra}")
    lines.append(f"  this webhook / HAMi's: added p50 {ratios['added_p50']:.2f}x, p99 per create {ratios['p99']:.2f}x")
    lines.append(f"burst, {args.burst} Pods from {BURST_CLIENTS} clients, median of {args.rounds} round(s)")
    for case in CASES:
        row = burst[case]
        lines.append(f"  {case:10} {row['rate']:7.1f} creates/s  p50 {row['p50'] * 1000:7.1f} ms  "
                     f"p99 {row['p99'] * 1000:7.1f} ms")  # fmt: skip
    lines.append(f"  this webhook / HAMi's: rate {ratios['burst_rate']:.2f}x, p99 {ratios['burst_p99']:.2f}x")
    lines.append(f"API server's {HISTOGRAM} (type admit), sequential rounds:")
    for name, hist in sorted(results["histogram"].items()):
        count = hist.get("count", 0.0)
        if not count:
            continue
        buckets = sorted((float(k), v) for k, v in hist.items() if k not in ("sum", "count") and k != "+Inf")
        shown = " ".join(f"<={le * 1000:g}ms {v / count:.0%}" for le, v in buckets[:4])
        lines.append(f"  {name:24} {count:6.0f} calls, mean {hist['sum'] / count * 1000:6.2f} ms  {shown}")
    lines.append("connections the API server opened to each replica (whole run): " + ", ".join(
        f"{case} {n}" for case, n in results["connections"].items()))  # fmt: skip
    if results["problems"]:
        lines += ["PROBLEMS:", *(f"  {p}" for p in results["problems"][:20])]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
