"""gunicorn settings for the webhook, derived from Settings.

gthread workers, because the API server keeps HTTPS connections alive and a sync
worker would close each one, paying a TLS handshake per review (about 6x the CPU).
The top-level gunicorn.conf.py re-exports this module; ``hami-webhook serve`` loads it directly.
"""

from __future__ import annotations

import os
import ssl
import sys
from typing import Any

from app import logs, metrics
from app.settings import Settings, SettingsError

__all__ = [
    "accesslog",
    "bind",
    "certfile",
    "child_exit",
    "errorlog",
    "graceful_timeout",
    "keepalive",
    "keyfile",
    "logconfig_dict",
    "loglevel",
    "on_exit",
    "on_starting",
    "post_worker_init",
    "ssl_context",
    "threads",
    "timeout",
    "when_ready",
    "worker_class",
    "worker_tmp_dir",
    "workers",
]


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except SettingsError as exc:
        sys.stderr.write(f"hami-webhook: invalid setting: {exc}\n")
        raise SystemExit(2) from None


_settings_now = _settings()
bind = [_settings_now.bind]
certfile = _settings_now.tls_cert
keyfile = _settings_now.tls_key
worker_class = "gthread"
workers = _settings_now.workers
threads = _settings_now.threads
timeout = _settings_now.timeout
graceful_timeout = 30
keepalive = _settings_now.keepalive
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
accesslog = None
errorlog = "-"
loglevel = _settings_now.log_level
logconfig_dict = logs.logconfig(_settings_now.log_format, _settings_now.log_level)


def tls_problem(cert: str, key: str) -> str | None:
    """Why the certificate and key cannot serve TLS, or None when they can."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:  # an OSError too: catch it first
        return f"not a usable certificate/key pair: {exc.reason or exc}"
    except FileNotFoundError as exc:
        return f"file not found: {exc.filename}"
    except OSError as exc:
        return f"cannot read {exc.filename}: {exc.strerror or exc}"
    return None


def ssl_context(config: Any, default_ssl_context_factory: Any) -> ssl.SSLContext:
    """TLS 1.2 is the floor, as for kube-apiserver's own client."""
    context = default_ssl_context_factory()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def on_starting(server: Any) -> None:
    """Refuse to start, with a clear message, when the serving certificate cannot be loaded."""
    problem = tls_problem(server.cfg.certfile, server.cfg.keyfile)
    if problem:
        server.log.error(
            "cannot serve TLS (HAMI_WEBHOOK_TLS_CERT=%s, HAMI_WEBHOOK_TLS_KEY=%s): %s",
            server.cfg.certfile,
            server.cfg.keyfile,
            problem,
        )
        raise SystemExit(1)


# --- metrics: one /metrics server in the master over every worker's files (README "Metrics") ---


def when_ready(server: Any) -> None:
    """Before the workers fork: a fresh multiprocess directory on the tmpfs, and the /metrics server.

    A taken address is logged, not fatal: admissions matter more than scrapes (Prometheus shows ``up 0``).
    """
    if not _settings_now.metrics_bind:
        return
    directory = metrics.prepare_multiprocess(worker_tmp_dir)
    try:
        host, port = metrics.serve(_settings_now.metrics_bind)
    except OSError as exc:
        server.log.error("metrics: cannot listen on %s: %s", _settings_now.metrics_bind, exc)
        return
    server.log.info("metrics: serving http://%s:%s/metrics", host, port, extra={"fields": {"dir": directory}})


def post_worker_init(worker: Any) -> None:
    """The certificate this worker serves: its expiry becomes the expiry gauge."""
    try:
        metrics.certificate_file_served(worker.cfg.certfile)
    except (OSError, ValueError) as exc:
        worker.log.warning("metrics: cannot read the expiry of %s: %s", worker.cfg.certfile, exc)


def child_exit(server: Any, worker: Any) -> None:
    """A dead worker's live gauges leave the sums; its counters stay (totals never go back)."""
    if os.environ.get(metrics.MULTIPROC_ENV):
        metrics.process_dead(worker.pid)


def on_exit(server: Any) -> None:
    metrics.remove_multiprocess()
