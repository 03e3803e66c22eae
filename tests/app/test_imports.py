"""Importing app modules is cheap and has no side effect: no Flask or Kubernetes client for a leaf module,
no environment read and no exit for any module (only the gunicorn configuration, app.serving.master, reads settings).

Each check runs in a fresh interpreter, where nothing is imported yet.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testbed import ROOT

pytestmark = pytest.mark.server  # its highest tier (tests/tiers.py checks it)

HEAVY = ("flask", "werkzeug", "kubernetes", "gunicorn")
PROBE = """
import json, os, sys

class Watched(dict):
    '''The environment, noting every HAMI_ variable a module reads while it is imported.'''
    read = []
    def _note(self, key):
        if str(key).startswith("HAMI_"):
            self.read.append(key)
    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)
    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)
    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)

os.environ = Watched(os.environ)
import importlib
importlib.import_module(sys.argv[1])
loaded = sorted({name.split(".")[0] for name in sys.modules})
print(json.dumps({"loaded": loaded, "read": sorted(set(os.environ.read))}))
"""
# Every setting made invalid: a module that read one at import would fail or exit here.
BROKEN = {
    "HAMI_WEBHOOK_WORKERS": "many",
    "HAMI_WEBHOOK_THREADS": "-1",
    "HAMI_WEBHOOK_TLS_CERT": "/nonexistent/tls.crt",
    "HAMI_WEBHOOK_TLS_KEY": "/nonexistent/tls.key",
    "HAMI_WEBHOOK_REQUEST_TIMEOUT": "soon",
    "HAMI_WEBHOOK_HANDSHAKE_TIMEOUT": "soon",
    "HAMI_QUOTA_ENABLED": "maybe",
    "HAMI_LOG_FORMAT": "xml",
    "HAMI_DEVICE_CONFIG": "/nonexistent/device-config.yaml",
}


def imported(module: str, env: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Import ``module`` alone in a new interpreter: the top-level packages it loaded, the HAMI_ variables it read."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"import {module} failed ({done.returncode}): {done.stderr[-2000:]}"
    result: dict[str, list[str]] = json.loads(done.stdout)
    return result


CORE = [
    "app",
    "app.kube",
    "app.kube.backoff",
    "app.admission.quantity",
    "app.untrusted",
    "app.admission.edit",
    "app.settings",
    "app.admission.review",
    "app.metrics",
    "app.cli",
    "app.quota.core.decision",
]


@pytest.mark.parametrize("module", CORE)
def test_core_modules_load_neither_flask_nor_kubernetes_nor_gunicorn(module: str) -> None:
    loaded = imported(module)["loaded"]
    assert not set(HEAVY) & set(loaded), f"import {module} loads {sorted(set(HEAVY) & set(loaded))}"


def test_the_worker_does_not_load_the_kubernetes_client() -> None:
    assert "kubernetes" not in imported("app.serving.worker")["loaded"]


@pytest.mark.parametrize(
    "module",
    [
        "app",
        "app.admission.quantity",
        "app.settings",
        "app.admission.review",
        "app.metrics",
        "app.cli",
        "app.serving.http",
        "app.serving.worker",
    ],
)
def test_importing_reads_no_setting_and_survives_a_broken_environment(module: str) -> None:
    assert imported(module, BROKEN)["read"] == []
