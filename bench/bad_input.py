"""What hostile input costs: wall time, peak RSS and the answer, one child process per case.

Each case runs in its own Python process under a time limit and an address-space cap, so a case
that blows up is reported ("timeout" / "MemoryError") instead of taking the machine with it.
HTTP cases post through the Flask test client in process (no sockets), CLI cases run
``hami-webhook review FILE`` as a user would.
Usage: .venv/bin/python bench/bad_input.py [--timeout 60] [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HTTP_CASE = """
import json, sys, time
from app import create_app
from app.preview.documents import admission_review
client = create_app().test_client()
body = sys.stdin.buffer.read()
started = time.perf_counter()
reply = client.post("/webhook", data=body, content_type="application/json")
elapsed = time.perf_counter() - started
text = reply.get_data(as_text=True)
try:
    doc = json.loads(text)
    status = (doc.get("response") or {}).get("status") or {}
    detail = status.get("code", doc.get("code")), (status.get("message") or doc.get("error") or "")[:90]
except ValueError:
    detail = None, text[:90]
print(json.dumps({"http": reply.status_code, "code": detail[0], "message": detail[1], "seconds": elapsed}))
"""


def review_with(limits: dict[str, object]) -> bytes:
    from app.preview.documents import admission_review
    from testbed.pods import container, pod

    obj = pod(container("c", limits, image=None, defaulted=False), name="p")
    return json.dumps(admission_review(obj, uid="bench")).encode()


def deep_json(depth: int) -> bytes:
    return b'{"request": {"uid": "bench", "object": ' + b"[" * depth + b"]" * depth + b"}}"


def alias_bomb(levels: int = 9, width: int = 10) -> str:
    """A billion-laughs document whose top alias is used as a quantity."""
    lines = ['l0: &l0 "x"']
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    lines += [
        "kind: Pod",
        "metadata: {name: bomb}",
        f"spec: {{containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: *l{levels}}}}}}}]}}",
    ]
    return "\n".join(lines) + "\n"


def many_documents(megabytes: int) -> str:
    doc = "---\nkind: ConfigMap\nmetadata: {name: filler}\ndata: {a: b}\n"
    return doc * (megabytes * 1024 * 1024 // len(doc))


def run(command: list[str], stdin: bytes | None, timeout: float) -> tuple[str, float, float]:
    """(outcome, seconds, peak RSS MiB) of one child, capped at 2 GiB of address space."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    with tempfile.TemporaryFile() as feed, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        feed.write(stdin or b"")
        feed.seek(0)
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdin=feed, stdout=out, stderr=err, preexec_fn=cap)
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid or time.perf_counter() > deadline:
                break
            time.sleep(0.01)
        seconds = time.perf_counter() - started
        if not pid:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            outcome = f"killed after {timeout:.0f} s"
        else:
            out.seek(0)
            err.seek(0)
            lines = out.read().decode(errors="replace").strip() or err.read().decode(errors="replace").strip()
            last = lines.splitlines()[-1] if lines else ""
            outcome = f"exit {os.waitstatus_to_exitcode(status)}: {last}"
        proc.returncode = 0
    return outcome[:170], seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    python = [sys.executable, "-c", HTTP_CASE]
    cli = [str(Path(sys.executable).with_name("hami-webhook")), "review"]
    with tempfile.TemporaryDirectory() as tmp:
        bomb, big = Path(tmp) / "bomb.yaml", Path(tmp) / "many.yaml"
        bomb.write_text(alias_bomb())
        big.write_text(many_documents(50))
        cases = {
            "http nvidia.com/gpu: 1e1000000": (python, review_with({"nvidia.com/gpu": "1e1000000"})),
            "http nvidia.com/priority: 1e5000": (
                python,
                review_with({"nvidia.com/gpu": "1", "nvidia.com/priority": "1e5000"}),
            ),
            "http gpu: 5000-digit string": (python, review_with({"nvidia.com/gpu": "9" * 5000})),
            "http JSON nested 1,000 deep": (python, deep_json(1000)),
            "http JSON nested 100,000 deep": (python, deep_json(100_000)),
            "cli alias bomb as quantity": ([*cli, str(bomb)], None),
            "cli 50 MB of documents": ([*cli, str(big)], None),
        }
        print(f"{'case':36} {'seconds':>8} {'peak MiB':>9}  outcome")
        for name, (command, stdin) in cases.items():
            if args.only and args.only not in name:
                continue
            outcome, seconds, rss = run(command, stdin, args.timeout)
            print(f"{name:36} {seconds:8.2f} {rss:9.0f}  {outcome}", flush=True)


if __name__ == "__main__":
    main()
