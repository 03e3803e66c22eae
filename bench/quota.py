"""Namespace device quota, measured through a real control plane (tests/realkube: etcd, kube-apiserver and
kube-controller-manager built by scripts/kube-binaries.sh, the webhook installed with `kubectl apply -k`).

burst      Device Pods created at once by client threads through kube-apiserver, with webhook replicas behind
           the Service's ClusterIP (a round-robin forwarder plays kube-proxy): creates/s, p50 and p99 of the
           create calls in a namespace without a device quota, with a quota that has room for all, and with
           room for 50; and, for reference, in a namespace whose ResourceQuota limits another extended
           resource (``limits.example.com/widgets``): what kube-apiserver's own quota admission costs a
           namespace with a ResourceQuota of that shape, the webhook doing nothing for it. Rounds alternate the
           order of the cases; each run is divided by the no-quota run of its own round, and the medians of
           those ratios are printed. Every run is checked: exactly the Pods that fit are created, and nothing
           is refused except by the quota.
inprocess  What review() costs per admission: quota off, quota on in a namespace without a device quota,
           and with one (the ledger round trips to the API server), medians over alternating rounds; beside
           it, a Pod naming a group that is no gang (the group's lookup) and a gang's member joining its hold.
scale      One replica's start-to-ready and worker RSS against the number of non-device Pods in the cluster,
           with one quota'd namespace holding device Pods; and what the API server sent it, by its own
           metrics (LIST bytes and requests for Pods).

Usage (from the repository root, as root: the webhook binds the Service's ClusterIP on port 443):
PYTHONPATH=. .venv/bin/python bench/quota.py [--parts burst,inprocess,scale] [--rounds 5]
The machine is shared and noisy: compare ratios within one invocation, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.admission.edit import PodEdit
from app.admission.ports import QuotaOff
from app.admission.review import review
from app.quota.core.encoding import LEDGER_ANNOTATION
from app.quota.core.gang import KUEUE_LABEL, KUEUE_TOTAL
from app.quota.evaluator import QuotaEvaluator
from app.quota.lease import KubeLeases
from app.quota.startup import open_quota
from app.readiness import Readiness
from app.settings import Settings
from bench.inprocess import percentile
from testbed.api import Api, create_at_once
from testbed.cluster import RealKube, binaries_from_env, build_binaries, pinned_versions
from testbed.install import Installed, install
from testbed.pods import container, pod
from testbed.ports import free_port
from testbed.replicas import start_replicas
from testbed.reviews import admission_review

MEM = "nvidia.com/gpumem"
GPU = {"nvidia.com/gpu": "1", MEM: "1000"}
IMAGE = "nvidia/cuda:12.4.1-base-ubuntu22.04"
CASES = ("no quota", "other quota", "room for all", "room for 50")
PARTS = ("burst", "inprocess", "churn", "scale")


# --- the cluster --------------------------------------------------------------------------------------------


def control_plane(work: Path) -> RealKube:
    binaries = binaries_from_env() or build_binaries(pinned_versions()[-1])
    return RealKube(binaries, work / "kube").start()


def namespace(kube: RealKube, name: str, hard: dict[str, str] | None = None) -> str:
    kube.namespace(name)
    if hard is not None:
        quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": name}}
        kube.kubectl("apply", "-f", "-", stdin=json.dumps(quota | {"spec": {"hard": hard}}))
    return name


def delete_namespaces(kube: RealKube, names: Iterable[str], timeout: float = 300) -> None:
    """Delete and wait until they are gone (the namespace controller deletes their Pods first)."""
    names = list(names)
    if not names:
        return
    kube.kubectl("delete", "namespace", "--wait=false", *names)
    kube.wait_for(lambda: not any(kube.exists("namespace", n) for n in names), timeout, interval=1)


def device_pod(name: str = "burst-") -> dict[str, Any]:
    ctr = {"name": "cuda", "image": IMAGE, "resources": {"limits": GPU}}
    meta = {"generateName": name} if name.endswith("-") else {"name": name}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [ctr]}}


def apiserver_metrics(
    kube: RealKube,
    wanted: tuple[str, ...] = (
        "apiserver_request_total",
        "apiserver_response_sizes_sum",
        "apiserver_watch_events_total",
    ),
) -> dict[str, float]:
    """The API server's /metrics samples whose names start with one of ``wanted``, keyed by name{labels}."""
    api = Api(kube)
    try:
        status, data = api.call("GET", "/metrics")
    finally:
        api.close()
    assert status == 200, data[:200]
    out: dict[str, float] = {}
    for line in data.decode().splitlines():
        if line.startswith(wanted):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def pod_traffic(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What the API server served between two scrapes: Pod LIST requests and bytes, Pod watch events, and the
    ledger Leases' writes (conflicts among them), reads and watch events."""

    def total(name: str, *labels: str) -> float:
        return sum(
            value - before.get(key, 0.0)
            for key, value in after.items()
            if key.startswith(name + "{") and all(label in key for label in labels)
        )

    pods, leases = 'resource="pods"', 'resource="leases"'
    return {
        "list_requests": total("apiserver_request_total", pods, 'verb="LIST"'),
        "list_mib": total("apiserver_response_sizes_sum", pods, 'verb="LIST"') / 2**20,
        "watch_requests": total("apiserver_request_total", pods, 'verb="WATCH"'),
        "watch_events": total("apiserver_watch_events_total", pods),
        "lease_writes": total("apiserver_request_total", leases, 'verb="PUT"')
        + total("apiserver_request_total", leases, 'verb="POST"'),
        "lease_conflicts": total("apiserver_request_total", leases, 'code="409"'),
        "lease_reads": total("apiserver_request_total", leases, 'verb="GET"'),
        "lease_events": total("apiserver_watch_events_total", leases),
    }


def cpu_seconds() -> dict[str, float]:
    """CPU seconds used so far by this process's descendants, by program: the control plane's parts, the
    webhook replicas (workers included), the forwarder, and this bench's clients (``self``)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        used[pid] = (int(fields[11]) + int(fields[12])) / tick
        program = " ".join(c.decode(errors="replace") for c in cmdline[:3])
        names[pid] = next(
            (label for key, label in (("kube-apiserver", "apiserver"), ("etcd", "etcd"),
                                      ("kube-controller-manager", "controller-manager"),
                                      ("hami-webhook", "webhook"), ("forwarder", "forwarder")) if key in program),
            "other",
        )  # fmt: skip
    me = os.getpid()
    out: dict[str, float] = {"self": used.get(me, 0.0)}
    for pid in used:
        ancestor, label = pid, ""
        while ancestor in parents and ancestor != me:
            label = label if names.get(ancestor, "other") == "other" else names[ancestor]
            ancestor = parents[ancestor]
        if ancestor == me and pid != me:
            out[label or "other"] = out.get(label or "other", 0.0) + used[pid]
    return out


# --- burst --------------------------------------------------------------------------------------------------


@dataclass
class Burst:
    seconds: float
    latencies: list[float]
    created: int
    denied: int
    failures: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds

    def p(self, pct: float) -> float:
        return percentile(self.latencies, pct)


def burst(kube: RealKube, ns: str, pods: int, threads: int) -> Burst:
    """`pods` device Pods created at once by `threads` clients; each create timed on its own."""
    started, calls = create_at_once(kube, ns, device_pod(), pods, threads)
    out = Burst(max(c.ended for c in calls) - started, [c.ended - c.started for c in calls], 0, 0)
    for call in calls:
        if call.status == 201:
            out.created += 1
        elif call.quota_denial:
            out.denied += 1
        else:
            out.failures.append(f"HTTP {call.status}: {call.refusal.get('message')}")
    return out


def workers(installed: Installed, env: dict[str, str] | None = None) -> str:
    """Worker processes per replica: as the installed Deployment sets them (or ``env`` overrides)."""
    return (env or {}).get("HAMI_WEBHOOK_WORKERS") or installed.webhook.ctr.env.get("HAMI_WEBHOOK_WORKERS", "?")


def case_quota(case: str, pods: int) -> tuple[dict[str, str] | None, int]:
    """The burst case's ResourceQuota (its ``hard``; None: no ResourceQuota) and how many of ``pods`` fit."""
    if case == "no quota":
        return None, pods
    if case == "other quota":  # the same shape for kube-apiserver's quota admission, no device of the webhook's
        return {"limits.example.com/widgets": str(10 * pods)}, pods
    room = pods if case == "room for all" else 50
    return {f"limits.{MEM}": str(room * 1000)}, min(room, pods)


def burst_part(installed: Installed, work: Path, args: argparse.Namespace) -> None:
    kube = installed.kube
    env = dict(item.split("=", 1) for item in args.replica_env)
    replicas = start_replicas(installed, args.replicas, work / "replicas", env)
    runs: dict[str, list[Burst]] = {case: [] for case in CASES}
    ratios: dict[str, dict[str, list[float]]] = {case: {"rate": [], "p50": [], "p99": []} for case in CASES[1:]}
    traffic: dict[str, list[dict[str, float]]] = {case: [] for case in CASES}
    cpu: dict[str, list[dict[str, float]]] = {case: [] for case in CASES}
    problems: list[str] = []
    try:
        for rnd in range(args.rounds):
            order = CASES[rnd % len(CASES) :] + CASES[: rnd % len(CASES)]
            this: dict[str, Burst] = {}
            for case in order:
                hard, expected = case_quota(case, args.pods)
                ns = namespace(kube, f"burst-{rnd}-{case.replace(' ', '-')}-{uuid.uuid4().hex[:4]}", hard)
                time.sleep(2)  # every worker's feed has seen the new quota
                before, cpu_before = apiserver_metrics(kube), cpu_seconds()
                done = burst(kube, ns, args.pods, args.threads)
                cpu_after = cpu_seconds()
                traffic[case].append(pod_traffic(before, apiserver_metrics(kube)))
                cpu[case].append({k: v - cpu_before.get(k, 0.0) for k, v in cpu_after.items()})
                if done.created != expected or done.failures:
                    problems.append(
                        f"round {rnd} {case}: created {done.created} (expected {expected}), denied {done.denied}, "
                        f"{len(done.failures)} failed: {sorted(set(done.failures))[:3]}"
                    )
                this[case] = done
                runs[case].append(done)
                print(
                    f"  round {rnd} {case:13} {done.rate:6.1f}/s p50 {done.p(50) * 1000:6.0f} ms "
                    f"p99 {done.p(99) * 1000:6.0f} ms created {done.created} denied {done.denied} "
                    f"failed {len(done.failures)}",
                    file=sys.stderr,
                    flush=True,
                )
                delete_namespaces(kube, [ns])
            base = this["no quota"]
            for case in CASES[1:]:
                ratios[case]["rate"].append(this[case].rate / base.rate)
                ratios[case]["p50"].append(this[case].p(50) / base.p(50))
                ratios[case]["p99"].append(this[case].p(99) / base.p(99))
    finally:
        logs = replicas.stop()
        if args.keep_logs:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for i, text in enumerate(logs):
                (args.keep_logs / f"replica-{i}.log").write_text(text)
    undecided = sum(log.count("quota undecided") for log in logs)
    med = statistics.median
    print(
        f"\n{args.pods} device Pods at once, {args.threads} client threads, {args.replicas} webhook replicas "
        f"x {workers(installed, env)} worker(s); medians of {args.rounds} alternating rounds"
    )
    print(f"{'':28} {'creates/s':>10} {'p50 ms':>8} {'p99 ms':>8}   {'rate':>6} {'p50':>6} {'p99':>6}  pod events")
    for case in CASES:
        rate = med(b.rate for b in runs[case])
        p50 = med(b.p(50) for b in runs[case]) * 1000
        p99 = med(b.p(99) for b in runs[case]) * 1000
        events = med(t["watch_events"] for t in traffic[case]) / args.pods
        if case == "no quota":
            ratio = f"{'1.00x':>6} {'1.00x':>6} {'1.00x':>6}"
        else:
            ratio = " ".join(f"{med(ratios[case][k]):5.2f}x" for k in ("rate", "p50", "p99"))
        print(f"{case:28} {rate:10.1f} {p50:8.0f} {p99:8.0f}   {ratio}  {events:6.1f}/Pod")
    print("\nper Pod (medians): ledger Lease writes, of which 409, reads, watch events; CPU ms by process")
    for case in CASES:
        row = {k: med(t[k] for t in traffic[case]) / args.pods for k in traffic[case][0]}
        spent = {k: med(c.get(k, 0.0) for c in cpu[case]) * 1000 / args.pods for k in cpu[case][0]}
        print(
            f"{case:28} writes {row['lease_writes']:.2f} (409 {row['lease_conflicts']:.2f}) reads "
            f"{row['lease_reads']:.2f} events {row['lease_events']:.1f}  cpu "
            + " ".join(f"{k} {v:.1f}" for k, v in sorted(spent.items()) if v >= 0.05)
        )
    print(f"replica connections from the API server: {replicas.connections}")
    print(f"'quota undecided' (HTTP 500) in the replicas' logs: {undecided}")
    print("every run exact (created == fits, no other refusal)" if not problems else "PROBLEMS:")
    for problem in problems:
        print(f"  {problem}")


# --- in process ---------------------------------------------------------------------------------------------


def per_call_us(call: Callable[[], Any], number: int) -> float:
    started = time.perf_counter()
    for _ in range(number):
        call()
    return (time.perf_counter() - started) / number * 1e6


def inprocess_part(kube: RealKube, args: argparse.Namespace) -> None:
    namespace(kube, "hami-system")  # the ledgers' home (HAMI_NAMESPACE's default)
    free = namespace(kube, f"free-{uuid.uuid4().hex[:4]}")
    limited = namespace(kube, f"quota-{uuid.uuid4().hex[:4]}", {f"limits.{MEM}": str(10**12)})
    os.environ["KUBECONFIG"] = kube.kubeconfig_path
    settings = Settings.from_env({"HAMI_QUOTA_ENABLED": "true", "HAMI_QUOTA_RESERVATION_TTL": "1"})
    port = open_quota(settings, Readiness())
    assert isinstance(port, QuotaEvaluator) and port.feed.wait_synced(30)
    time.sleep(1)
    off = QuotaOff()

    def one(ns: str, quota: Any, group: int = 0) -> Callable[[], Any]:
        """Review one Pod; ``group``: a member of a Kueue plain-Pod group of that size (1: no gang)."""
        marks = {"labels": {KUEUE_LABEL: f"g{group}"}, "annotations": {KUEUE_TOTAL: str(group)}} if group else {}
        template = admission_review(pod(container(limits=GPU), namespace=ns, metadata=marks))

        def call() -> Any:
            request = copy.deepcopy(template)
            request["request"]["uid"] = str(uuid.uuid4())  # each admission reserves under its own uid
            answer = review(request, settings, quota)["response"]
            assert answer["allowed"], answer
            return answer

        return call

    asked = PodEdit(pod(container(limits=GPU)))
    cases = {
        "quota off": one(free, off),
        "quota on, namespace without quota": one(free, port),
        "quota on, namespace with quota (ledger)": one(limited, port),
        "the same, a Pod of a group that is no gang": one(limited, port, 1),
        "the same, a gang's member (joins its hold)": one(limited, port, 999_999),  # a Kueue count: 6 digits at most
        "port.admit() alone, without quota": lambda: port.admit(free, asked, uid="u", dry_run=False),
    }
    results: dict[str, list[float]] = {name: [] for name in cases}
    try:
        for _ in range(args.rounds):
            for name, call in cases.items():
                results[name].append(per_call_us(call, args.number))
                time.sleep(1.1)  # let this round's reservations expire: the ledger stays small
    finally:
        port.stop()
        delete_namespaces(kube, [free, limited])
    base = statistics.median(results.pop("quota off"))
    alone = statistics.median(results.pop("port.admit() alone, without quota"))
    print(f"\n{'admission (one single-GPU Pod, review())':42} {'median µs':>10} {'added µs':>9}")
    print(f"{'quota off':42} {base:10.0f} {0:9.0f}")
    for name, runs in results.items():
        median = statistics.median(runs)
        print(f"{name:42} {median:10.0f} {median - base:9.0f}")
    print(f"{'port.admit() alone, without quota':42} {alone:10.1f}")


# --- scale --------------------------------------------------------------------------------------------------


def by_clients(kube: RealKube, numbers: Iterable[int], threads: int, call: Callable[[Api, int], None]) -> None:
    """``call(api, number)`` for each number, spread over ``threads`` clients with a connection each; returns
    when all are done."""
    left = iter(numbers)
    lock = threading.Lock()

    def client() -> None:
        api = Api(kube)
        try:
            while True:
                with lock:
                    number = next(left, None)
                if number is None:
                    return
                call(api, number)
        finally:
            api.close()

    workers = [threading.Thread(target=client) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def fill(kube: RealKube, target: int, have: int, threads: int = 16, per_namespace: int = 2000) -> int:
    """Create CPU-only Pods until the cluster holds `target` of them (namespaces filler-N, `per_namespace`
    each); the webhook is never called for them (its matchConditions)."""
    cpu = {"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "10m"}}}
    body = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "cpu-"},
                       "spec": {"containers": [cpu]}}).encode()  # fmt: skip
    for index in range(have // per_namespace, -(-target // per_namespace)):
        namespace(kube, f"filler-{index}")
    failures: list[str] = []

    def create(api: Api, number: int) -> None:
        status, data = api.call("POST", f"/api/v1/namespaces/filler-{number // per_namespace}/pods", body)
        if status != 201:
            failures.append(f"HTTP {status}: {data[:200]!r}")

    by_clients(kube, range(have, target), threads, create)
    if failures:
        raise RuntimeError(f"{len(failures)} filler Pods not created: {failures[:3]}")
    return target


def worker_rss_mib(master: int) -> list[float]:
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(master)], capture_output=True, text=True).stdout
    out = []
    for pid in children.split():
        status = Path(f"/proc/{pid}/status").read_text()
        out.append(int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024)  # type: ignore[union-attr]
    return out


def churn_part(installed: Installed, work: Path, args: argparse.Namespace) -> None:
    """A long burst of short-lived Pods in one namespace: each client creates a Pod, then the Pod ends (its
    kubelet would report Succeeded; here the client does), and the next one comes. Every create must be
    answered by the quota (admitted, or denied when the namespace is momentarily full), never refused
    otherwise; the ledger Lease is sampled to show how many entries it held at most."""
    kube = installed.kube
    replicas = start_replicas(installed, args.replicas, work / "churn-replicas")
    ns = namespace(kube, f"churn-{uuid.uuid4().hex[:4]}", {f"limits.{MEM}": str(args.churn_room * 1000)})
    time.sleep(2)
    body = json.dumps(device_pod("churn-")).encode()
    outcomes: list[str] = []  # "created" or "denied", one per create (list.append is atomic)
    failures: list[str] = []
    sizes: list[tuple[int, int]] = []
    done = threading.Event()

    def live_briefly(api: Api, number: int) -> None:
        status, data = api.call("POST", f"/api/v1/namespaces/{ns}/pods", body)
        if status == 201:
            name = json.loads(data)["metadata"]["name"]
            finished = json.dumps({"status": {"phase": "Succeeded"}}).encode()
            api.call("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", finished, merge=True)
            outcomes.append("created")
        elif status == 403 and json.loads(data).get("reason") == "GPUQuotaExceeded":
            outcomes.append("denied")
        else:
            failures.append(f"HTTP {status}: {json.loads(data).get('message', '')[:300]}")

    def sample() -> None:
        api = Api(kube)
        try:
            while not done.wait(0.5):
                status, data = api.call(
                    "GET", f"/apis/coordination.k8s.io/v1/namespaces/hami-system/leases/{KubeLeases.name(ns)}"
                )
                if status == 200:
                    text = json.loads(data)["metadata"].get("annotations", {}).get(LEDGER_ANNOTATION, "{}")
                    sizes.append((len(json.loads(text)), len(text)))
        finally:
            api.close()

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    try:
        by_clients(kube, range(args.churn), args.threads, live_briefly)
    finally:
        done.set()
        sampler.join()
        seconds = time.monotonic() - started
        logs = replicas.stop()
        delete_namespaces(kube, [ns])
    print(
        f"\n{args.churn} short-lived device Pods through one namespace (room for {args.churn_room} at a time), "
        f"{args.threads} clients, {args.replicas} replicas: {seconds:.0f} s, created {outcomes.count('created')}, "
        f"denied {outcomes.count('denied')}, failed {len(failures)}"
    )
    print(f"ledger entries at most {max((n for n, _ in sizes), default=0)}, "
          f"annotation at most {max((b for _, b in sizes), default=0)} bytes (sampled every 0.5 s)")  # fmt: skip
    for failure in sorted(set(failures))[:3]:
        print(f"  failed: {failure}")
    print(f"'quota undecided' (HTTP 500) in the replicas' logs: {sum(log.count('quota undecided') for log in logs)}")


def scale_part(installed: Installed, work: Path, args: argparse.Namespace) -> None:
    kube = installed.kube
    installed.webhook.stop()
    quotad = namespace(kube, "scale-quota", {f"limits.{MEM}": str(10**9)})
    api = Api(kube)
    for i in range(20):  # device Pods the webhook never saw (its objectSelector skips them) still count
        bypassed = device_pod(f"gpu-{i}")
        bypassed["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
        body = json.dumps(bypassed).encode()
        status, data = api.call("POST", f"/api/v1/namespaces/{quotad}/pods", body)
        assert status == 201, data
    api.close()
    rows = []
    have = 0
    for target in args.scale:
        have = fill(kube, target, have)
        starts, rss, traffic = [], [], []
        for rep in range(args.repeats):
            server = installed.webhook.with_address("127.0.0.1", free_port(), work / f"scale-{target}-{rep}.log")
            before = apiserver_metrics(kube)
            started = time.monotonic()
            server.start(timeout=600)
            starts.append(time.monotonic() - started)
            time.sleep(1)
            assert server._proc is not None
            rss.extend(worker_rss_mib(server._proc.pid))
            traffic.append(pod_traffic(before, apiserver_metrics(kube)))
            server.stop()
        rows.append((target, statistics.median(starts), statistics.median(rss), max(rss), traffic))
        print(f"  {target} non-device Pods: ready in {starts}, worker RSS {rss}", file=sys.stderr, flush=True)
    print(f"\none replica ({workers(installed)} worker(s)), medians of {args.repeats} starts")
    print(f"{'non-device Pods':>16} {'start-to-ready s':>17} {'worker RSS MiB':>15} {'max':>6} "
          f"{'LIST reqs':>10} {'LIST MiB':>9}")  # fmt: skip
    for target, start, median_rss, max_rss, traffic in rows:
        lists = statistics.median(t["list_requests"] for t in traffic)
        mib = statistics.median(t["list_mib"] for t in traffic)
        print(f"{target:>16} {start:17.2f} {median_rss:15.1f} {max_rss:6.1f} {lists:10.0f} {mib:9.1f}")


# --- main ---------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated, of: " + ", ".join(PARTS))
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (burst, inprocess)")
    parser.add_argument("--pods", type=int, default=300, help="Pods per burst")
    parser.add_argument("--threads", type=int, default=32, help="client threads per burst")
    parser.add_argument("--replicas", type=int, default=3, help="webhook replicas behind the ClusterIP")
    parser.add_argument("--number", type=int, default=200, help="timed calls per in-process case and round")
    parser.add_argument("--scale", default="0,10000,40000", help="non-device Pod counts for the scale part")
    parser.add_argument("--repeats", type=int, default=3, help="replica starts per Pod count (scale)")
    parser.add_argument("--churn", type=int, default=5000, help="short-lived Pods through one namespace (churn)")
    parser.add_argument("--churn-room", type=int, default=100, help="Pods that fit at a time (churn)")
    parser.add_argument("--replica-env", action="append", default=[], help="KEY=VALUE for the replicas (burst)")
    parser.add_argument("--keep-logs", type=Path, help="copy the replicas' logs here (burst)")
    parser.add_argument("--smoke", action="store_true", help="every part, tiny counts, no targets")
    args = parser.parse_args()
    args.scale = [int(n) for n in args.scale.split(",")]
    if args.smoke:
        args.rounds, args.pods, args.threads, args.number, args.scale, args.repeats = 1, 60, 8, 5, [0, 200], 1
        args.churn = 100
    parts = args.parts.split(",")
    print(f"load average at start: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-quota-") as tmp:
        kube = control_plane(Path(tmp))
        installed = None
        try:
            if "inprocess" in parts:
                inprocess_part(kube, args)
            if {"burst", "churn", "scale"} & set(parts):  # the webhook installed, as a user does it
                installed = install(kube, Path(tmp) / "install")
            if installed is not None and "burst" in parts:
                burst_part(installed, Path(tmp), args)
            if installed is not None and "churn" in parts:
                churn_part(installed, Path(tmp), args)
            if installed is not None and "scale" in parts:
                scale_part(installed, Path(tmp), args)
        finally:
            if installed is not None:
                installed.webhook.stop()
            kube.stop()
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
