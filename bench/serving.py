"""Serving compared: the same review over TLS to two or more gunicorn servers, in alternating bursts.

    python -m bench.serving --against /tmp/main   # this tree's worker against another checkout's (before/after)
    python -m bench.serving --asgi                # our worker against gunicorn 27's asgi worker, same app,
                                                  # and against that worker's floor (bench/asgi.py)

Each burst is wrk with 8 keep-alive connections for ``--seconds``; the order rotates each round, so the
machine's noise hits every server alike. A figure is the median over rounds of requests per second and of
server CPU per review (the workers' user+system time over the reviews answered), each beside its ratio to the
first server's in the same round. Loopback only; every run bounded in count and time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench import pods, wire
from certgen.local import write_local
from testbed.tls import client_context

ASGI = ("-k", "asgi", "--asgi-loop", "uvloop", "--http-parser", "fast", "--asgi-lifespan", "off")


def contenders(args: argparse.Namespace, workdir: Path) -> list[wire.Server]:
    if args.asgi:
        return [
            wire.Server("ours", "wsgi:app", workdir),
            wire.Server("asgi", "bench.asgi:app", workdir, args=ASGI),
            wire.Server("ours-floor", "bench.asgi:wsgi_floor", workdir),
            wire.Server("asgi-floor", "bench.asgi:floor", workdir, args=ASGI),
        ]
    return [wire.Server("before", "wsgi:app", workdir, tree=args.against), wire.Server("after", "wsgi:app", workdir)]


def compare(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    body = json.dumps(pods.reviews()["single-gpu"]).encode()
    env = {"HAMI_WEBHOOK_WORKERS": "1", "HAMI_WEBHOOK_THREADS": "8"}
    with tempfile.TemporaryDirectory(prefix="hami-serving-") as tmp:
        workdir = Path(tmp)
        (workdir / "review.json").write_bytes(body)
        pki = write_local(workdir / "tls", ["localhost", "127.0.0.1"])
        servers = contenders(args, workdir)
        load = wire.Load(args.wrk, workdir / "review.json")
        try:
            for server in servers:
                server.start(pki.cert, pki.key, env)
            for server in servers:
                server.wait_ready(1, body, client_context(pki.ca_cert), timeout=60)
                load.run(server, 1)  # warm-up: imports, caches
            rows = []
            for index in range(args.rounds):
                shift = index % len(servers)
                rows.append({s.name: load.run(s, args.seconds) for s in servers[shift:] + servers[:shift]})
        finally:
            for server in servers:
                server.stop()
    first = servers[0].name
    out = {}
    for server in servers:
        name = server.name
        out[name] = {
            "rps": statistics.median(r[name]["rps"] for r in rows),
            "cpu_us": statistics.median(r[name]["cpu_us_per_request"] for r in rows),
            "p50_us": statistics.median(r[name]["p50_us"] for r in rows),
            "rps_ratio": statistics.median(r[name]["rps"] / r[first]["rps"] for r in rows),
            "cpu_ratio": statistics.median(
                r[name]["cpu_us_per_request"] / r[first]["cpu_us_per_request"] for r in rows
            ),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serving", description=__doc__)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--against", type=Path, help="another checkout, served first as the reference")
    which.add_argument("--asgi", action="store_true", help="gunicorn's asgi worker (uvloop, gunicorn_h1c)")
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds (%(default)s)")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per burst (%(default)s)")
    args = parser.parse_args(argv)
    args.wrk = wire.wrk_path(install=False)
    if args.wrk is None:
        parser.error("wrk is not installed (sudo scripts/install-wrk.sh)")
    figures = compare(args)
    print(f"{'server':<10} {'req/s':>8} {'ratio':>6} {'CPU µs/review':>14} {'ratio':>6} {'p50 µs':>7}")
    for name, f in figures.items():
        print(
            f"{name:<10} {f['rps']:>8.0f} {f['rps_ratio']:>6.2f} {f['cpu_us']:>14.0f} {f['cpu_ratio']:>6.2f}"
            f" {f['p50_us']:>7.0f}"
        )
    print(f"medians of {args.rounds} alternating rounds of {args.seconds:g} s, 8 connections, single-GPU review")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
