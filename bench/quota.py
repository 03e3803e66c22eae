"""What namespace quota adds per admission, and what the feed holds per 10,000 Pods.

Latency: review() of one single-GPU Pod with quota off, with the real port in a
namespace without a device quota (no ledger traffic), and in a namespace with one
(ledger GET + compare-and-swap PUT to the API server). The API server is a real
kube-apiserver with its etcd on loopback (tests/realkube, binaries from
scripts/kube-binaries.sh). Medians over alternating rounds (the machine is shared).

Memory: traced allocations of the feed's Pod table after it took in 10,000 device
Pods (each a summary: namespace, reservation uid, amounts), the Pod objects themselves freed.
Usage (from the repository root; it starts a control plane of its own):
PYTHONPATH=. .venv/bin/python bench/quota.py [--rounds 5] [--number 200] [--pods 10000]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from app.edit import PodEdit
from app.quota import QuotaOff, demands
from app.quota.feed import PodTable
from app.quota.kube import KubeQuota, open_quota
from app.review import review
from app.settings import Settings
from tests.app.reviews import admission_review, container, pod
from tests.realkube.cluster import RealKube, binaries_from_env, build_binaries, pinned_versions

GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}


def per_call_us(call: Callable[[], Any], number: int) -> float:
    started = time.perf_counter()
    for _ in range(number):
        call()
    return (time.perf_counter() - started) / number * 1e6


def control_plane() -> RealKube:
    """etcd and kube-apiserver (no controllers: nothing here needs them), with namespaces free and quota,
    the latter with a device quota no admission here can exhaust."""
    binaries = binaries_from_env() or build_binaries(pinned_versions()[-1])
    kube = RealKube(binaries, Path(tempfile.mkdtemp(prefix="bench-quota-")), controllers=False).start()
    hard = {"limits.nvidia.com/gpumem": str(10**12)}
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in ("hami-system", "free", "quota")
    ]
    objects.append(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "q", "namespace": "quota"},
            "spec": {"hard": hard},
        }
    )
    kube.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in objects))
    return kube


def latency(rounds: int, number: int) -> None:
    kube = control_plane()
    try:
        os.environ["KUBECONFIG"] = kube.kubeconfig_path
        settings = Settings.from_env({"HAMI_QUOTA_ENABLED": "true", "HAMI_QUOTA_RESERVATION_TTL": "1"})
        port = open_quota(settings)
        assert isinstance(port, KubeQuota) and port.feed.synced(wait=30)
        off = QuotaOff()

        def one(namespace: str, quota: Any) -> Callable[[], Any]:
            template = admission_review(pod(container(limits=GPU), namespace=namespace))

            def call() -> Any:
                request = copy.deepcopy(template)
                request["request"]["uid"] = str(uuid.uuid4())  # each admission reserves under its own uid
                answer = review(request, settings, quota)["response"]
                assert answer["allowed"], answer
                return answer

            return call

        asked = demands(PodEdit(pod(container(limits=GPU))), settings.devices)
        cases = {
            "quota off": one("free", off),
            "quota on, namespace without quota": one("free", port),
            "quota on, namespace with quota (ledger)": one("quota", port),
            "port.admit() alone, without quota": lambda: port.admit("free", asked, uid="u", dry_run=False),
        }
        results: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(rounds):
            for name, call in cases.items():
                results[name].append(per_call_us(call, number))
                time.sleep(1.1)  # let this round's reservations expire: the ledger stays small
        port.stop()
    finally:
        kube.stop()
    base = statistics.median(results.pop("quota off"))
    alone = statistics.median(results.pop("port.admit() alone, without quota"))
    print(f"{'admission (one single-GPU Pod, review())':42} {'median µs':>10} {'added µs':>9}")
    print(f"{'quota off':42} {base:10.0f} {0:9.0f}")
    for name, runs in results.items():
        median = statistics.median(runs)
        print(f"{name:42} {median:10.0f} {median - base:9.0f}")
    print(f"{'port.admit() alone, without quota':42} {alone:10.1f}")


def device_pods(count: int) -> Iterator[dict[str, Any]]:
    for i in range(count):
        obj = pod(container(limits=GPU), namespace=f"team-{i % 50}")
        obj["metadata"].update(
            uid=str(uuid.uuid4()), name=f"job-{i}", annotations={"hami.io/quota-reservation": str(uuid.uuid4())}
        )
        yield obj


def memory(count: int) -> None:
    settings = Settings.from_env({})
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    table = PodTable(settings.devices, forget_after=60)
    table.replace(device_pods(count))
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(table) == count
    print(f"feed memory: {held / 1024 / 1024:.2f} MiB for {count} tracked Pods ({held / count:.0f} bytes per Pod)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=200)
    parser.add_argument("--pods", type=int, default=10000)
    args = parser.parse_args()
    latency(args.rounds, args.number)
    memory(args.pods)


if __name__ == "__main__":
    main()
