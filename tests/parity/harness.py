"""Both webhooks for one set-up, asked the same AdmissionReview: HAMi's over TLS, ours through its Flask views.

HAMi's webhook is its real binary (testbed/hami.py) with the device config its chart renders; this one is
`create_app` with the settings an admin would carry over, asked in process (the HTTP framing in front of it has
suites of its own), so thousands of Pods stay within CI's minutes.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch

from testbed import hami
from testbed.tls import client_context
from tests.parity.setups import SetUp


@dataclass(frozen=True)
class Answer:
    """One webhook's answer, read as kube-apiserver reads it."""

    status: int
    """The HTTP status."""
    allowed: bool | None
    """None when the body is no AdmissionReview answer."""
    code: int
    message: str
    pod: Any
    """The Pod after the patch (the Pod sent when there is none)."""

    def summary(self) -> str:
        verdict = {True: "allowed", False: "denied", None: "no answer"}[self.allowed]
        return f"HTTP {self.status}, {verdict}, code {self.code}: {self.message!r}"


def read(status: int, body: bytes, pod: Any) -> Answer:
    try:
        response = json.loads(body)["response"]
    except (ValueError, KeyError, TypeError):
        return Answer(status, None, status, body.decode(errors="replace")[:300], pod)
    result = response.get("status") or {}
    patched = pod
    if response.get("allowed") and response.get("patch"):
        ops = json.loads(base64.b64decode(response["patch"]))
        patched = jsonpatch.apply_patch(pod, ops)
    allowed, code = bool(response.get("allowed")), int(result.get("code") or 200)
    return Answer(status, allowed, code, result.get("message", ""), patched)


class Pair:
    """HAMi's webhook and ours, configured from one set-up."""

    def __init__(self, setup: SetUp, served: hami.Served, ours: Any) -> None:
        self.setup = setup
        self.served = served
        self.ours = ours
        self.connection = served.connection()

    def ask(self, review: dict[str, Any]) -> tuple[Answer, Answer]:
        """(HAMi's answer, ours) to one review."""
        body = json.dumps(review).encode()
        pod = review["request"]["object"]
        return self._hami(body, pod), self._ours(body, pod)

    def ask_hami(self, pod: Any) -> Answer:
        """HAMi's answer to `pod` alone."""
        from tests.parity.generate import review

        return self._hami(json.dumps(review(pod)).encode(), pod)

    def _hami(self, body: bytes, pod: Any) -> Answer:
        try:
            return self._post(body, pod)
        except (ConnectionError, OSError):  # a keep-alive connection the server closed is reopened once
            self.connection.close()
            self.connection = self.served.connection()
            return self._post(body, pod)

    def _post(self, body: bytes, pod: Any) -> Answer:
        self.connection.request("POST", "/webhook", body, {"Content-Type": "application/json"})
        reply = self.connection.getresponse()
        return read(reply.status, reply.read(), pod)

    def _ours(self, body: bytes, pod: Any) -> Answer:
        reply = self.ours.post("/webhook", data=body, content_type="application/json")
        return read(reply.status_code, reply.data, pod)


@contextmanager
def pair(reference: hami.Reference, setup: SetUp, tls: tuple[Path, Path, ssl.SSLContext]) -> Iterator[Pair]:
    """Both webhooks under `setup`, for the block's duration."""
    from app import create_app
    from app.settings import Settings

    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"parity-{setup.name}-")))
        config = workdir / "device-config.yaml"
        config.write_text(reference.render(setup.values))
        flags = hami.flags(
            config,
            scheduler_name=setup.scheduler_name,
            force_overwrite=setup.force_overwrite,
            extra=setup.hami_flags(),
        )
        served = stack.enter_context(hami.serve(reference, tls[0], tls[1], tls[2], flags, log=workdir / "hami.log"))
        ours = create_app(Settings.from_env(setup.our_env(str(config)))).test_client()
        both = Pair(setup, served, ours)
        stack.callback(lambda: both.connection.close())
        yield both


def local_tls(directory: Path) -> tuple[Path, Path, ssl.SSLContext]:
    """A CA and a serving pair for 127.0.0.1 (certgen's `local`), and a client trusting only that CA."""
    from certgen.local import write_local

    files = write_local(directory, ["localhost", "127.0.0.1"])
    return files.cert, files.key, client_context(files.ca_cert)
