"""``python -m bench``: the webhook's speed, in process and over the wire, beside a floor, in one run.

Prints a table, writes results.json and (with the ``bench`` extra) latency.png to --out.
Parts: 1 the pure core in process; 2 product, floor and HAMi's webhook over TLS under
gunicorn with wrk (installed by scripts/install-wrk.sh when missing and run as root);
3 RSS per worker over a soak; 4 the quota path; 5 Pod creates through kube-apiserver.
``--smoke`` runs every part with tiny counts in seconds (the test suite does).

Part 4 is bench/quota.py's in-process part, run as its own process (it starts a
real control plane of its own, tests/realkube); its printed figures are kept verbatim.
Part 5 is bench/apiserver.py, also its own process with its own control plane: device-Pod
creates through kube-apiserver with this webhook, HAMi's and none.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import inprocess, pods, wire

ROOT = Path(__file__).resolve().parents[1]
QUOTA_BENCH = ROOT / "bench" / "quota.py"
FRACTIONS = [0.25, 0.5, 0.75]
SINGLE_GPU_TARGET_US = 100
BIG_POD_TARGET_US = 10_000
THROUGHPUT_TARGET = 1.0
HAMI_CPU_TARGET = 1.0  # server CPU per review, over HAMi's own webhook's in the same bursts
P99_TARGET = 1.5
ADDED_P50_TARGET = 1.0  # through the API server: added latency per create, over HAMi's webhook's
CREATE_P99_TARGET = 1.2  # through the API server: p99 per create, over HAMi's webhook's
HOT_WORKER_TARGET = 1.2  # the busiest worker's share of requests, in units of a fair share
RSS_GROWTH_TARGET_KIB = 2048


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="where results go (%(default)s)")
    parser.add_argument("--smoke", action="store_true", help="every part with tiny counts (seconds; no targets)")
    parser.add_argument("--calls", type=int, default=3000, help="timed in-process calls per review (%(default)s)")
    parser.add_argument("--pairs", type=int, default=10, help="alternating saturation pairs (%(default)s)")
    parser.add_argument("--burst", type=float, default=2.0, help="seconds per saturation burst (%(default)s)")
    parser.add_argument("--rate-seconds", type=float, default=3.0, help="seconds per fixed-rate run (%(default)s)")
    parser.add_argument("--soak", type=int, default=100_000, help="requests for the RSS soak (%(default)s)")
    parser.add_argument("--no-wire", action="store_true", help="in-process part only")
    parser.add_argument("--require-wire", action="store_true", help="fail (exit 2) when wrk cannot be had")
    parser.add_argument("--no-apiserver", action="store_true", help="leave out part 5 (through kube-apiserver)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.smoke:
        args.calls, args.pairs, args.burst, args.rate_seconds, args.soak = 30, 1, 1, 1, 300
    started = time.monotonic()
    results: dict[str, Any] = {"machine": machine(), "command": " ".join(["python -m bench", *(argv or sys.argv[1:])])}
    results["inprocess"] = inprocess.run(args.calls)
    if not args.no_wire:
        wrk = wire.wrk_path(install=os.geteuid() == 0)
        if wrk is None:
            print("over the wire: skipped, wrk is not installed (sudo scripts/install-wrk.sh)", file=sys.stderr)
            if args.require_wire:
                return 2
        else:
            results["wire"] = over_the_wire(args, wrk)
    results["quota"] = quota_path(args.smoke)
    if not args.no_apiserver:
        results["apiserver"] = through_apiserver(args.smoke)
    results["targets"] = targets(results)
    results["machine"]["load_average_end"] = os.getloadavg()
    results["seconds"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    plotted = plot(results, args.out / "latency.png")
    print(table(results))
    print(
        f"\nwrote {args.out / 'results.json'}" + (f" and {plotted}" if plotted else " (plot: pip install -e .[bench])")
    )
    print(f"took {results['seconds']} s")
    return 0


def quota_path(smoke: bool) -> dict[str, Any]:
    """Part 4: bench/quota.py's figures (added latency per admission with a quota, ledger round trip included)."""
    command = [sys.executable, str(QUOTA_BENCH), "--parts", "inprocess"] + (["--smoke"] if smoke else [])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    return {"command": " ".join(command[1:]), "exit_code": done.returncode, "output": done.stdout + done.stderr}


def through_apiserver(smoke: bool) -> dict[str, Any]:
    """Part 5: bench/apiserver.py's table (kept verbatim) and figures."""
    with tempfile.TemporaryDirectory(prefix="hami-bench-") as tmp:
        figures = Path(tmp) / "apiserver.json"
        command = [sys.executable, "-m", "bench.apiserver", "--json", str(figures)] + (["--smoke"] if smoke else [])
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False)
        output = done.stdout + (done.stderr[-4000:] if done.returncode else "")
        out: dict[str, Any] = {"command": " ".join(command[1:3]), "exit_code": done.returncode, "output": output}
        if figures.exists():
            out["figures"] = json.loads(figures.read_text())
    return out


def machine() -> dict[str, Any]:
    served = serving()
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor(),
    )
    versions = {name: importlib.metadata.version(name) for name in ("flask", "werkzeug", "gunicorn", "marshmallow")}
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_average_start": os.getloadavg(),
        "versions": versions,
        "workers": served["HAMI_WEBHOOK_WORKERS"],
        "threads": served["HAMI_WEBHOOK_THREADS"],
    }


def serving() -> dict[str, str]:
    """The servers' workers and threads: as the Deployment ships them (one worker of 8 threads per replica)
    unless the environment says otherwise (HAMI_WEBHOOK_WORKERS=2 measures how connections spread over workers)."""
    return {
        name: os.environ.get(name, default)
        for name, default in (("HAMI_WEBHOOK_WORKERS", "1"), ("HAMI_WEBHOOK_THREADS", "8"))
    }


def over_the_wire(args: argparse.Namespace, wrk: str) -> dict[str, Any]:
    body = json.dumps(pods.reviews()["single-gpu"]).encode()
    with tempfile.TemporaryDirectory(prefix="hami-bench-") as tmp:
        workdir = Path(tmp)
        (workdir / "review.json").write_bytes(body)
        load = wire.Load(wrk, workdir / "review.json")
        with wire.servers(workdir, body, serving()) as (product, floor, peer):
            for server in (product, floor, *([peer] if peer else [])):  # warm-up: imports, caches, TLS sessions
                load.run(server, 1)
            out: dict[str, Any] = {"connections": wire.CONNECTIONS, "review_bytes": len(body)}
            out["saturation"] = wire.saturation(load, product, floor, args.pairs, args.burst, peer)
            floor_max = out["saturation"]["floor_rps"]["median"]
            out["rates"] = wire.fixed_rates(load, product, floor, floor_max, FRACTIONS, args.rate_seconds)
            out["memory"] = {
                server.name: wire.soak(load, server, args.soak, time_limit=min(75.0, max(10.0, args.soak / 1000)))
                for server in (product, floor)
            }
    return out


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each performance target (docs/performance.md) with the figure measured in this run."""
    rows: list[dict[str, Any]] = []

    def add(name: str, goal: str, measured: float | None, ok: bool | None, unit: str = "") -> None:
        rows.append({"target": name, "goal": goal, "measured": measured, "unit": unit, "met": ok})

    single = results["inprocess"]["single-gpu"]["median_us"]
    big = results["inprocess"]["200-containers"]["median_us"]
    add("in process: single-GPU review, median", f"<= {SINGLE_GPU_TARGET_US} µs", single, single <= 100, "µs")
    add("in process: 200-container Pod, median", f"<= {BIG_POD_TARGET_US} µs", big, big <= BIG_POD_TARGET_US, "µs")
    figures = results.get("apiserver", {}).get("figures")
    if figures:
        added, p99 = figures["ratios"]["added_p50"], figures["ratios"]["p99"]
        add("API server: added p50 per create / HAMi's", f"<= {ADDED_P50_TARGET}", added, added <= ADDED_P50_TARGET)
        add("API server: p99 per create / HAMi's", f"<= {CREATE_P99_TARGET}", p99, p99 <= CREATE_P99_TARGET)
    wire_results = results.get("wire")
    if not wire_results:
        return rows
    sat = wire_results["saturation"]
    ratio = sat["throughput_ratio"]["median"]
    add("throughput / floor's (median of pairs)", f">= {THROUGHPUT_TARGET}", ratio, ratio >= THROUGHPUT_TARGET)
    if "hami_cpu_ratio" in sat:
        cpu = sat["hami_cpu_ratio"]["median"]
        add("server CPU per review / HAMi's (median)", f"<= {HAMI_CPU_TARGET}", cpu, cpu <= HAMI_CPU_TARGET)
    half = next((r for r in wire_results["rates"] if r["fraction"] == 0.5), None)
    if half:
        p99 = half["p99_ratio"]
        add("p99 at 50 % of floor max / floor's p99", f"<= {P99_TARGET}", p99, p99 <= P99_TARGET)
    shares = []
    for pair in sat["pairs"]:
        counts = pair["product"]["per_worker_requests"]
        shares.append(max(counts) / max(sum(counts), 1) * len(counts))
    hot = max(shares)
    if len(sat["pairs"][0]["product"]["per_worker_requests"]) > 1:  # one worker (the shipped setting): no spread
        add(
            "busiest worker's share of requests (x fair share)",
            f"<= {HOT_WORKER_TARGET}",
            hot,
            hot <= HOT_WORKER_TARGET,
        )
    growth = max(wire_results["memory"]["product"]["growth_kib"])
    soaked = wire_results["memory"]["product"]["requests"]
    add(f"RSS growth per worker over {soaked} requests", f"<= {RSS_GROWTH_TARGET_KIB} KiB", growth,
        growth <= RSS_GROWTH_TARGET_KIB, "KiB")  # fmt: skip
    return rows


def table(results: dict[str, Any]) -> str:
    lines = [f"machine: {results['machine']['cpu']}, {results['machine']['cores']} cores, "
             f"Python {results['machine']['python']}, load average at start "
             f"{' '.join(f'{x:.2f}' for x in results['machine']['load_average_start'])}"]  # fmt: skip
    lines += ["", "1. in process: review() per call", f"{'review':18} {'median µs':>10} {'p99 µs':>10} {'calls':>7}"]
    for name, row in results["inprocess"].items():
        lines.append(f"{name:18} {row['median_us']:10.1f} {row['p99_us']:10.1f} {row['calls']:7d}")
    wire_results = results.get("wire")
    if wire_results:
        sat = wire_results["saturation"]
        n = len(sat["pairs"])
        lines += [
            "",
            f"2. over TLS, {wire_results['connections']} keep-alive connections (wrk), "
            f"{wire_results['review_bytes']} B single-GPU review; median [min-max] of {n} alternating pairs",
        ]
        lines.append(f"{'':26} {'product':>22} {'floor':>22} {'ratio':>20}")
        lines.append(_row("throughput req/s", sat["product_rps"], sat["floor_rps"], sat["throughput_ratio"], "{:.0f}"))
        cpu = sat["cpu_per_request_ratio"]
        lines.append(_row("server CPU µs/request", sat["product_cpu_us"], sat["floor_cpu_us"], cpu, "{:.0f}"))
        lines.append(_row("p99 at saturation µs", sat["product_p99_us"], sat["floor_p99_us"], None, "{:.0f}"))
        if "hami_cpu_ratio" in sat:
            lines += ["", f"{'':26} {'product':>22} {'HAMi (Go)':>22} {'ratio':>20}"]
            lines.append(
                _row("throughput req/s", sat["product_rps"], sat["hami_rps"], sat["hami_throughput_ratio"], "{:.0f}")
            )
            cpu = sat["hami_cpu_ratio"]
            lines.append(_row("server CPU µs/request", sat["product_cpu_us"], sat["hami_cpu_us"], cpu, "{:.0f}"))
            lines.append(_row("p99 at saturation µs", sat["product_p99_us"], sat["hami_p99_us"], None, "{:.0f}"))
        lines += ["", f"{'offered req/s':>14} {'':7} {'product p50/p95/p99 µs (got req/s)':>38} "
                  f"{'floor p50/p95/p99 µs (got req/s)':>38} {'p99 ratio':>9}"]  # fmt: skip
        for row in wire_results["rates"]:
            cells = [
                f"{row[s]['p50_us']}/{row[s]['p95_us']}/{row[s]['p99_us']} ({row[s]['rps']:.0f})"
                for s in ("product", "floor")
            ]
            offered = f"{row['offered_rps']:14.0f} {row['fraction']:6.0%}"
            lines.append(f"{offered} {cells[0]:>38} {cells[1]:>38} {row['p99_ratio']:9.2f}")
        lines += ["", "per-worker requests / connections held, saturation bursts (product | floor):"]
        for pair in sat["pairs"]:
            lines.append(
                f"  {pair['product']['per_worker_requests']} / {pair['product']['per_worker_connections']}"
                f"  |  {pair['floor']['per_worker_requests']} / {pair['floor']['per_worker_connections']}"
            )
        lines += ["", "3. RSS per worker, KiB: after warm-up -> after the soak (growth)"]
        for name, mem in wire_results["memory"].items():
            lines.append(
                f"  {name:8} {mem['rss_kib_warm']} -> {mem['rss_kib_after']} ({mem['growth_kib']}) "
                f"over {mem['requests']} requests" + ("" if mem["complete"] else " (time limit reached)")
            )
    lines += ["", f"4. quota path ({results['quota']['command']}, exit {results['quota']['exit_code']})"]
    lines += ["  " + line for line in results["quota"]["output"].splitlines()]
    if "apiserver" in results:
        lines += ["", results["apiserver"]["output"].rstrip()]
        if results["apiserver"]["exit_code"]:
            lines.append(f"  ({results['apiserver']['command']} exited {results['apiserver']['exit_code']})")
    lines += ["", "targets"]
    for row in results["targets"]:
        measured = "-" if row["measured"] is None else f"{row['measured']:.2f} {row['unit']}".strip()
        verdict = {True: "met", False: "NOT MET", None: "-"}[row["met"]]
        lines.append(f"  {row['target']:52} {row['goal']:>14} {measured:>14}  {verdict}")
    return "\n".join(lines)


def _row(
    label: str, product: dict[str, float], floor: dict[str, float], ratio: dict[str, float] | None, fmt: str
) -> str:
    def cell(s: dict[str, float], f: str) -> str:
        return f"{f.format(s['median'])} [{f.format(s['min'])}-{f.format(s['max'])}]"

    return f"{label:26} {cell(product, fmt):>22} {cell(floor, fmt):>22} {cell(ratio, '{:.2f}') if ratio else '':>20}"


def plot(results: dict[str, Any], path: Path) -> Path | None:
    """Latency percentiles against offered load, product and floor on one chart; None without matplotlib."""
    if "wire" not in results or importlib.util.find_spec("matplotlib") is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wire_results = results["wire"]
    sat = wire_results["saturation"]
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, style in (("product", "-"), ("floor", "--")):
        points = [(r["offered_rps"], r[name]) for r in wire_results["rates"]]
        pair = min(sat["pairs"], key=lambda p: abs(p[name]["rps"] - sat[f"{name}_rps"]["median"]))[name]
        points.append((pair["rps"], pair))  # the saturation point: the pair closest to the median throughput
        for pct, colour in (("p50", "tab:blue"), ("p95", "tab:orange"), ("p99", "tab:red")):
            xs, ys = [x for x, _ in points], [r[f"{pct}_us"] / 1000 for _, r in points]
            ax.plot(xs, ys, style, marker="o", color=colour, label=f"{name} {pct}")
    ax.set_xlabel("offered load, requests/s (25/50/75 % of the floor's maximum; last point: saturation)")
    ax.set_ylabel("latency, ms")
    ax.set_yscale("log")
    ax.set_title("hami-webhook vs a bare Flask floor, same gunicorn + TLS (single-GPU review)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(ncol=2, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":  # python -m bench.run, as python -m bench
    raise SystemExit(main())
