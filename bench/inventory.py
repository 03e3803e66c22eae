"""The device inventory and the fits-nowhere check, measured in process (no server, no cluster).

start-up   The inventory's first list at N nodes (8 GPUs each, a handful of shapes, each node's ids its own): the
           seconds to decode and index it, and the memory it holds afterwards (tracemalloc, in a second pass: what
           the Store keeps once the list's items are freed), medians over rounds.
events     What a watch event costs: a Node whose register annotation did not change (a heartbeat), and one
           re-registered with a GPU gone unhealthy.
review     review() of a device Pod with the inventory against the same review without one, and of a Pod with no
           device; alternating rounds, each a median of REPEAT calls, the ratio per round, the median ratio printed.

Usage: PYTHONPATH=. .venv/bin/python bench/inventory.py [--nodes 5000] [--rounds 7]
The machine is shared and noisy: compare ratios within one invocation, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from app.admission.fits import fitting
from app.admission.ports import QuotaOff
from app.admission.review import review
from app.inventory.store import Store
from app.settings import Settings
from testbed.nodes import A10, Held, gpu, node_metadata
from testbed.pods import container, pod
from testbed.reviews import admission_review

CARDS = ((A10, 24576), ("NVIDIA-NVIDIA A100-SXM4-80GB", 81920), ("NVIDIA-NVIDIA H100 80GB HBM3", 81559))
REPEAT = 400


def nodes(count: int, gpus: int = 8) -> list[dict[str, Any]]:
    """``count`` Nodes' metadata, each with ``gpus`` GPUs of one of three cards, on two NUMA nodes."""
    found = []
    for n in range(count):
        name = f"gpu-{n:05d}"
        card, memory = CARDS[n % len(CARDS)]
        found.append(node_metadata(name, [gpu(i, name, memory, card=card, numa=i * 2 // gpus) for i in range(gpus)]))
    return found


def start_up(count: int, rounds: int) -> None:
    settings = Settings.from_env({})
    seconds, held = [], []
    for _ in range(rounds):
        items = nodes(count)
        started = time.perf_counter()  # timed untraced: tracemalloc slows every allocation
        Store(fitting(settings.devices)).listed(None, items, "1")
        seconds.append(time.perf_counter() - started)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        store = Store(fitting(settings.devices))
        store.listed(None, items, "1")
        del items
        gc.collect()
        held.append(tracemalloc.get_traced_memory()[0] - before)
        tracemalloc.stop()
        del store
    took, kept = statistics.median(seconds), statistics.median(held) / 2**20
    print(f"start-up at {count} nodes ({count * 8} GPUs): list decoded and indexed in {took:.3f} s,"
          f" the inventory holds {kept:.1f} MiB (medians of {rounds})")  # fmt: skip


def events(count: int, rounds: int) -> None:
    settings = Settings.from_env({})
    store = Store(fitting(settings.devices))
    items = nodes(count)
    store.listed(None, items, "1")
    same = items[count // 2]
    sick = node_metadata(same["metadata"]["name"], [gpu(i, "x", health=i > 0) for i in range(8)])
    for label, changes in (("unchanged (heartbeat)", [same]), ("re-registered", [sick, same])):
        per = []
        for _ in range(rounds):
            started = time.perf_counter()
            for _ in range(100):
                for obj in changes:
                    store.event(None, "MODIFIED", obj, "2")
            per.append((time.perf_counter() - started) / (100 * len(changes)))
        print(f"event at {count} nodes, {label}: {statistics.median(per) * 1e6:.1f} µs")


def _timed(call: Callable[[], Any]) -> float:
    samples = []
    for _ in range(REPEAT):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def reviews(count: int, rounds: int) -> None:
    settings = Settings.from_env({})
    store = Store(fitting(settings.devices))
    store.listed(None, nodes(count), "1")
    held = Held(store)
    device = admission_review(pod(container("train", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"})))
    plain = admission_review(pod(container("web", limits={"cpu": "1"})))
    cases: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "device Pod": (
            lambda: review(device, settings, QuotaOff(), held),
            lambda: review(device, settings, QuotaOff()),
        ),
        "Pod without a device": (
            lambda: review(plain, settings, QuotaOff(), held),
            lambda: review(plain, settings, QuotaOff()),
        ),
    }
    for label, (with_inventory, without) in cases.items():
        ratios, pairs = [], []
        for r in range(rounds):
            order = (with_inventory, without) if r % 2 == 0 else (without, with_inventory)
            first, second = _timed(order[0]), _timed(order[1])
            on, off = (first, second) if r % 2 == 0 else (second, first)
            ratios.append(on / off)
            pairs.append((on, off))
        on = statistics.median(p[0] for p in pairs) * 1e6
        off = statistics.median(p[1] for p in pairs) * 1e6
        print(f"review of a {label} at {count} nodes: {off:.1f} -> {on:.1f} µs, "
              f"{statistics.median(ratios):.2f}x (median of {rounds} alternated rounds)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--parts", default="start-up,events,review")
    args = parser.parse_args()
    parts = args.parts.split(",")
    if "start-up" in parts:
        start_up(args.nodes, args.rounds)
    if "events" in parts:
        events(args.nodes, args.rounds)
    if "review" in parts:
        reviews(args.nodes, args.rounds)


if __name__ == "__main__":
    main()
