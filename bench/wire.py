"""Part 2 and 3: the product and the floor over TLS under gunicorn, driven by wrk with keep-alive.

Both servers are up at once, on loopback, under the same gunicorn settings (the
project's gunicorn.conf.py via bench/counted.py). Throughput is compared in short
alternating bursts and reported as ratios per pair, so the machine's noise (other
processes on the same cores) hits both sides alike. Every run is bounded in time.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import ssl
import statistics
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import counted
from certgen.local import LocalFiles, write_local
from testbed import ROOT, hami
from testbed.ports import free_port
from testbed.servers import Server as Gunicorn
from testbed.servers import gunicorn, stop
from testbed.tls import client_context

WRK_SCRIPT = Path(__file__).with_name("wrk.lua")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CONNECTIONS = 8


class WireError(RuntimeError):
    """A server or the load generator did not behave; the message says which and why."""


def wrk_path(install: bool) -> str | None:
    """The wrk binary; with ``install``, run scripts/install-wrk.sh first when it is missing."""
    found = shutil.which("wrk")
    if found or not install:
        return found
    subprocess.run(["bash", str(ROOT / "scripts" / "install-wrk.sh")], check=False)
    return shutil.which("wrk")


class Measured:
    """What the bench reads of a server's processes from /proc: CPU, connections held, memory, per process."""

    name: str
    port: int

    def workers(self) -> dict[int, int]:
        """pid -> requests answered (0 where the server does not count them), per live serving process."""
        raise NotImplementedError

    def cpu_seconds(self) -> dict[int, float]:
        """pid -> user+system CPU seconds, per worker."""
        out = {}
        for pid in self.workers():
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        return out

    def connections(self) -> dict[int, int]:
        """pid -> established connections on the server port that the worker holds."""
        port = f"{self.port:04X}"
        established = set()
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[1].endswith(":" + port) and cols[3] == "01":
                established.add(cols[9])
        out = {}
        for pid in self.workers():
            inodes = set()
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
            out[pid] = len(inodes & established)
        return out

    def rss_kib(self) -> dict[int, int]:
        """pid -> resident set size in KiB, per worker."""
        out = {}
        for pid in self.workers():
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out[pid] = int(line.split()[1])
        return out

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/webhook"


@dataclass
class Server(Measured):
    """One gunicorn master serving ``app`` over TLS on 127.0.0.1, from ``tree`` (a checkout: this one by default,
    another for a before/after) with extra gunicorn ``args``."""

    name: str
    app: str
    workdir: Path
    port: int = field(default_factory=free_port)
    proc: Gunicorn | None = None
    tree: Path = ROOT
    args: tuple[str, ...] = ()

    @property
    def counts_path(self) -> Path:
        return self.workdir / f"{self.name}.counts"

    def start(self, cert: Path, key: Path, env: dict[str, str]) -> None:
        self.counts_path.write_bytes(b"\0" * counted.SLOTS * counted.SLOT.size)
        # as the shipped manifests run it: JSON logs, metrics in multiprocess mode served by the master; the
        # product's one line per review goes to a file
        self.proc = gunicorn(
            self.port,
            cert,
            key,
            *self.args,
            config="python:bench.counted",
            app=self.app,
            log=self.workdir / f"{self.name}.log",
            cwd=self.tree,
            HAMI_BENCH_COUNTS=str(self.counts_path),
            HAMI_LOG_FORMAT="json",
            PYTHONPATH=str(self.tree),
            **env,
        )

    def wait_ready(self, workers: int, body: bytes, context: ssl.SSLContext, timeout: float = 30) -> None:
        """Until every worker has started and a review gets a correct answer (uid echoed, allowed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise WireError(f"{self.name} exited {self.proc.returncode}; see {self.workdir / self.name}.log")
            try:
                answer = _post(self.port, context, body)
            except OSError:
                time.sleep(0.2)
                continue
            _check_answer(self.name, answer, body)
            if len(self.workers()) >= workers:
                return
            time.sleep(0.2)
        raise WireError(f"{self.name} was not ready within {timeout:.0f} s")

    def workers(self) -> dict[int, int]:
        """pid -> requests answered, per live worker."""
        return {pid: n for pid, n in counted.read_counts(self.counts_path).items() if Path(f"/proc/{pid}").exists()}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop(self.proc, timeout=40)


@dataclass
class Peer(Measured):
    """HAMi's own webhook (Go, one process), served by testbed/hami.py: the reference for CPU per review."""

    port: int
    pid: int
    name: str = "hami"

    def workers(self) -> dict[int, int]:
        return {self.pid: 0} if Path(f"/proc/{self.pid}").exists() else {}


@contextmanager
def hami_peer(workdir: Path, pki: LocalFiles, body: bytes) -> Iterator[Peer | None]:
    """HAMi's webhook on the same certificate, answering the review correctly; None (with the reason printed)
    when it cannot be built here (no Go toolchain, no HAMi source)."""
    try:
        reference = hami.build()
    except hami.Unavailable as exc:
        print(f"over the wire: HAMi's webhook left out: {exc}")
        yield None
        return
    print(f"over the wire: HAMi's webhook built from {reference.source}")
    config = workdir / "hami-device-config.yaml"
    config.write_text(reference.render())
    context = client_context(pki.ca_cert)
    with hami.serve(reference, pki.cert, pki.key, context, hami.flags(config), log=workdir / "hami.log") as served:
        _check_answer("hami", _post(served.port, context, body), body)
        yield Peer(served.port, served.process.pid)


def _check_answer(name: str, answer: dict[str, Any], body: bytes) -> None:
    uid = json.loads(body)["request"]["uid"]
    if answer.get("response", {}).get("uid") != uid or answer["response"].get("allowed") is not True:
        raise WireError(f"{name} answered wrongly: {answer}")


def _post(port: int, context: ssl.SSLContext, body: bytes) -> dict[str, Any]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        conn.request("POST", "/webhook", body, {"Content-Type": "application/json"})
        return dict(json.loads(conn.getresponse().read()))
    finally:
        conn.close()


@contextmanager
def servers(workdir: Path, body: bytes, env: dict[str, str]) -> Iterator[tuple[Server, Server, Peer | None]]:
    """The product, the floor and HAMi's webhook (None when it cannot be built here), all up and answering
    correctly; stopped on the way out."""
    pki = write_local(workdir / "tls", ["localhost", "127.0.0.1"])
    product = Server("product", "wsgi:app", workdir)
    floor = Server("floor", "bench.floor:app", workdir)
    try:
        for server in (product, floor):
            server.start(pki.cert, pki.key, env)
        for server in (product, floor):
            server.wait_ready(int(env["HAMI_WEBHOOK_WORKERS"]), body, client_context(pki.ca_cert))
        with hami_peer(workdir, pki, body) as peer:
            yield product, floor, peer
    finally:
        for server in (product, floor):
            server.stop()


@dataclass
class Load:
    """Runs wrk against a server with the review body; ``pace_ms`` paces each connection."""

    wrk: str
    body_path: Path

    def run(self, server: Measured, seconds: float, pace_ms: float = 0) -> dict[str, Any]:
        env = {**os.environ, "BENCH_BODY": str(self.body_path), "BENCH_DELAY_MS": str(pace_ms or "")}
        before_cpu, before_n = server.cpu_seconds(), server.workers()
        command = [
            self.wrk, "-t2", f"-c{CONNECTIONS}", f"-d{max(round(seconds), 1)}s", "--timeout", "5s",
            "-s", str(WRK_SCRIPT), server.url,
        ]  # fmt: skip
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(seconds / 2)
        connections = server.connections()
        try:
            out, err = proc.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise WireError(f"wrk did not finish a {seconds} s run") from None
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if proc.returncode or not lines:
            raise WireError(f"wrk failed ({proc.returncode}): {err.strip() or out.strip()}")
        result: dict[str, Any] = json.loads(lines[-1])
        after_cpu, after_n = server.cpu_seconds(), server.workers()
        per_worker = {pid: after_n[pid] - before_n.get(pid, 0) for pid in after_n}
        cpu = {pid: after_cpu[pid] - before_cpu.get(pid, 0.0) for pid in after_cpu}
        result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
        result["per_worker_connections"] = sorted(connections.values(), reverse=True)
        result["per_worker_requests"] = sorted(per_worker.values(), reverse=True)
        result["per_worker_cpu_s"] = sorted((round(c, 2) for c in cpu.values()), reverse=True)
        result["cpu_us_per_request"] = sum(cpu.values()) / max(result["requests"], 1) * 1e6
        if result["errors"] or result["status_errors"]:
            raise WireError(f"{server.name}: {result['errors']} socket errors, {result['status_errors']} non-2xx")
        return result


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def saturation(
    load: Load, product: Server, floor: Server, pairs: int, seconds: float, peer: Peer | None = None
) -> dict[str, Any]:
    """Alternating bursts at saturation (8 keep-alive connections): ratios per pair, then their median.

    With HAMi's webhook as ``peer``, each pair is a triple (the order rotates) and also gives the product's
    CPU per request over HAMi's."""
    servers: list[Measured] = [product, floor] + ([peer] if peer else [])
    rows = []
    for index in range(pairs):
        shift = index % len(servers)
        runs = {server.name: load.run(server, seconds) for server in servers[shift:] + servers[:shift]}
        row = {
            **runs,
            "throughput_ratio": runs["product"]["rps"] / runs["floor"]["rps"],
            "cpu_ratio": runs["product"]["cpu_us_per_request"] / max(runs["floor"]["cpu_us_per_request"], 1e-9),
        }
        if peer:
            row["hami_cpu_ratio"] = runs["product"]["cpu_us_per_request"] / max(
                runs["hami"]["cpu_us_per_request"], 1e-9
            )
            row["hami_throughput_ratio"] = runs["product"]["rps"] / runs["hami"]["rps"]
        rows.append(row)
    out = {
        "pairs": rows,
        "throughput_ratio": spread([r["throughput_ratio"] for r in rows]),
        "cpu_per_request_ratio": spread([r["cpu_ratio"] for r in rows]),
    }
    for server in servers:
        out[f"{server.name}_rps"] = spread([r[server.name]["rps"] for r in rows])
        out[f"{server.name}_cpu_us"] = spread([r[server.name]["cpu_us_per_request"] for r in rows])
        out[f"{server.name}_p99_us"] = spread([r[server.name]["p99_us"] for r in rows])
    if peer:
        out["hami_cpu_ratio"] = spread([r["hami_cpu_ratio"] for r in rows])
        out["hami_throughput_ratio"] = spread([r["hami_throughput_ratio"] for r in rows])
    return out


def fixed_rates(
    load: Load, product: Server, floor: Server, floor_max: float, fractions: list[float], seconds: float
) -> list[dict[str, Any]]:
    """Latency at offered rates that are fractions of the floor's maximum, both servers at each rate.

    wrk paces each connection by a delay after each answer, so the delay is the
    interval less the measured time per request (one calibration run per server).
    """
    overhead = {}
    for server in (product, floor):
        interval = CONNECTIONS / (floor_max * fractions[0])
        probe = load.run(server, 1, pace_ms=interval * 1000)
        overhead[server.name] = max(0.0, CONNECTIONS / max(probe["rps"], 1e-9) - interval)
    rows = []
    for index, fraction in enumerate(fractions):
        rate = floor_max * fraction
        row: dict[str, Any] = {"fraction": fraction, "offered_rps": rate}
        for server in (product, floor) if index % 2 == 0 else (floor, product):
            pace = max(0.0, CONNECTIONS / rate - overhead[server.name]) * 1000
            row[server.name] = load.run(server, seconds, pace_ms=pace)
        row["p99_ratio"] = row["product"]["p99_us"] / max(row["floor"]["p99_us"], 1)
        rows.append(row)
    return rows


def soak(load: Load, server: Measured, requests: int, time_limit: float) -> dict[str, Any]:
    """RSS per worker after warm-up, then after ``requests`` more requests (bounded by ``time_limit``)."""
    before = server.rss_kib()
    start_count = sum(server.workers().values())
    deadline = time.monotonic() + time_limit
    rate = None
    while sum(server.workers().values()) - start_count < requests and time.monotonic() < deadline:
        left = requests - (sum(server.workers().values()) - start_count)
        seconds = min(deadline - time.monotonic(), left / rate * 1.05 + 0.2 if rate else 2.0)
        rate = load.run(server, max(seconds, 1))["rps"]
    after = server.rss_kib()
    done = sum(server.workers().values()) - start_count
    growth = {pid: after.get(pid, 0) - before[pid] for pid in before}
    return {
        "requests": done,
        "rss_kib_warm": sorted(before.values()),
        "rss_kib_after": sorted(after.values()),
        "growth_kib": sorted(growth.values()),
        "complete": done >= requests,
    }
