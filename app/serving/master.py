"""gunicorn settings for the webhook, derived from Settings.

Our own worker (app.serving.worker, on gunicorn's base worker): the API server keeps HTTPS connections alive, and a sync
worker would close each one, paying a TLS handshake per review (about 6x the CPU); app.serving.worker keeps them, does
TLS itself (one cached, hot-reloaded SSLContext) and reads requests without holding a thread.
The top-level gunicorn.conf.py re-exports this module; ``hami-webhook serve`` starts gunicorn through its
documented custom-application interface (``WebhookServer``, a ``gunicorn.app.base.BaseApplication``) with the same
settings.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.config import Config

from app import logs, metrics
from app.serving import honoured
from app.serving.tls import server_context
from app.settings import Settings, SettingsError

__all__ = [
    "accesslog",
    "bind",
    "certfile",
    "child_exit",
    "control_socket_disable",
    "errorlog",
    "graceful_timeout",
    "keepalive",
    "keyfile",
    "logconfig_dict",
    "loglevel",
    "on_exit",
    "on_starting",
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


settings = _settings()
bind = [settings.bind]
certfile = settings.tls_cert
keyfile = settings.tls_key
worker_class = "app.serving.worker.WebhookWorker"
workers = settings.workers
threads = settings.threads
timeout = settings.timeout
# The Deployment's budget: preStop sleep 5 s + this 20 s (STOP_LINGER 5 s of it answering with
# Connection: close, then in-flight requests) < terminationGracePeriodSeconds 40.
graceful_timeout = 20
keepalive = settings.keepalive
# gunicorn 27's control socket would be created under $HOME: not wanted on a read-only root filesystem.
control_socket_disable = True
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
accesslog = None
errorlog = "-"
loglevel = settings.log_level
logconfig_dict = logs.logconfig(settings.log_format, settings.log_level)


def on_starting(server: Any) -> None:
    """Refuse to start, with a clear message, when the serving certificate cannot be loaded; name once (here in
    the master, not in every worker) each key of the device config that nothing reads."""
    for warning in settings.config_warnings:
        server.log.warning("HAMI_DEVICE_CONFIG: %s", warning)
    try:
        server_context(server.cfg.certfile, server.cfg.keyfile)
    except ValueError as problem:
        server.log.error(
            "cannot serve TLS (HAMI_WEBHOOK_TLS_CERT=%s, HAMI_WEBHOOK_TLS_KEY=%s): %s",
            server.cfg.certfile,
            server.cfg.keyfile,
            problem,
        )
        raise SystemExit(1) from None


# --- metrics: one /metrics server in the master over every worker's files (docs/operations.md) ---


def when_ready(server: Any) -> None:
    """Before the workers fork: a fresh multiprocess directory on the tmpfs and the /metrics server; then the
    scheduler the installed policies name, compared with the setting.

    A taken address is logged, not fatal: admissions matter more than scrapes (Prometheus shows ``up 0``).
    """
    if settings.metrics_bind:
        _serve_metrics(server)
        watch_failure_policy(server)
    check_installed_policies(server)


def _serve_metrics(server: Any) -> None:
    directory = metrics.prepare_multiprocess(worker_tmp_dir)
    try:
        host, port = metrics.serve(settings.metrics_bind)
    except OSError as exc:
        server.log.error("metrics: cannot listen on %s: %s", settings.metrics_bind, exc)
        return
    server.log.info("metrics: serving http://%s:%s/metrics", host, port, extra={"fields": {"dir": directory}})


def check_installed_policies(server: Any) -> None:
    """Once, in the master before the workers fork: the scheduler each installed admission policy names against
    HAMI_SCHEDULER_NAME. Any difference is one error line naming both names, and the gauge
    hami_webhook_policy_scheduler_mismatch; the webhook still starts and stays ready (it routes as configured;
    the policies check by their own name until the overlay sets one name for both: docs/operations.md). No API
    (a local run), no permission or no such policy: nothing to compare, said at debug level."""
    if not settings.scheduler_name:
        return
    from kubernetes import client

    from app.kube.config import LOAD_ERRORS, load_configuration
    from app.kube.errors import ApiError, describe
    from app.kube.transport import request
    from app.preview.policies import FLOOR, NAMING_THE_SCHEDULER, scheduler_of

    try:
        configuration = load_configuration()
    except LOAD_ERRORS as exc:
        server.log.debug("installed policies: not compared, no Kubernetes API configuration (%s)", exc)
        return
    configuration.retries = False  # one try each, within the timeout: the start waits for nothing longer
    group = "/apis/admissionregistration.k8s.io/v1"
    named: dict[str, str] = {}  # policy -> the scheduler it names
    with client.ApiClient(configuration) as api:
        for name in NAMING_THE_SCHEDULER:
            kind = "mutatingadmissionpolicies" if name == FLOOR else "validatingadmissionpolicies"
            try:
                policy = request(api, "GET", f"{group}/{kind}/{name}", timeout=(2, 3), action=f"read {name}")
            except ApiError as exc:  # 404: not installed (the floor is optional; 1.30 has no mutating policies)
                server.log.debug("installed policies: %s not compared: %s", name, describe(exc))
                continue
            except Exception as exc:  # no answer: the API server is away, for every other policy too
                server.log.debug("installed policies: not compared: %s", describe(exc))
                return
            named[name] = scheduler_of(policy)
    for name, installed in named.items():
        metrics.policy_scheduler(name, mismatched=installed != settings.scheduler_name)
    other = {name: installed for name, installed in named.items() if installed != settings.scheduler_name}
    if other:
        server.log.error(
            "the admission policies %s name scheduler %s, HAMI_SCHEDULER_NAME is %s: set one name for both "
            "(the scheduler-name component, docs/operations.md)",
            ", ".join(other),
            ", ".join(sorted(set(other.values()))),
            settings.scheduler_name,
            extra={"fields": {"policies": other, "setting": settings.scheduler_name}},
        )


FAILURE_POLICY_EVERY = 30.0  # seconds between two reads of the webhook configuration


def watch_failure_policy(server: Any) -> None:
    """From the master, every 30 s on a thread of its own: since when the webhook configuration's failurePolicy is
    Ignore (the check's ``switched_since``), as the gauge the alert HamiWebhookFailurePolicyIgnored reads: the
    emergency switch left on silently unroutes device Pods whenever a call fails. Off the review path (the workers
    never read it); no API configuration (a local run): not watched. A failed read keeps the last value.

    Everything the thread runs is imported here, before it starts: the workers fork while it runs, and a module
    half-imported by another thread at a fork stays locked in the child."""
    import threading

    from kubernetes import client

    from app.check.core import CONFIGURATION, switched_since
    from app.kube.config import LOAD_ERRORS, load_configuration
    from app.kube.errors import describe
    from app.kube.transport import request

    try:
        configuration = load_configuration()
    except LOAD_ERRORS as exc:
        server.log.debug("failure policy: not watched, no Kubernetes API configuration (%s)", exc)
        return
    configuration.retries = False
    api = client.ApiClient(configuration)
    path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{CONFIGURATION}"

    def watch() -> None:
        while True:
            try:
                found = request(api, "GET", path, timeout=(2, 5), action=f"read {CONFIGURATION}")
            except Exception as exc:  # no permission, no such configuration, no answer: said, and tried again
                server.log.debug("failure policy: %s not read: %s", CONFIGURATION, describe(exc))
            else:
                metrics.failure_policy_ignored_since(switched_since(found) or 0)
            time.sleep(FAILURE_POLICY_EVERY)

    threading.Thread(target=watch, name="failure-policy", daemon=True).start()


def child_exit(server: Any, worker: Any) -> None:
    """A dead worker's live gauges leave the sums; its counters stay (totals never go back)."""
    if os.environ.get(metrics.MULTIPROC_ENV):
        metrics.process_dead(worker.pid)


def on_exit(server: Any) -> None:
    metrics.remove_multiprocess()


class WebhookServer(BaseApplication):
    """``hami-webhook serve``: gunicorn with this module's settings, as ``gunicorn -c gunicorn.conf.py wsgi:app``
    runs it, GUNICORN_CMD_ARGS applied over them as gunicorn applies it; ``factory`` makes the app in each worker."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory
        super().__init__()

    def load_config(self) -> None:
        for name in __all__:  # as gunicorn reads a config file: a name this gunicorn does not have is skipped
            if name in self.cfg.settings:  # (control_socket_disable is gunicorn 24's; 23 is in the range)
                self.cfg.set(name, globals()[name])
        self.cfg.set("default_proc_name", "hami-webhook")
        from_env = self.cfg.parser().parse_args(self.cfg.get_cmd_args_from_env())
        for name, value in vars(from_env).items():
            if value is not None and name != "args":
                self.cfg.set(name.lower(), value)
        refused = honoured.unhonoured(self.cfg, Config(), honoured.SERVE_UNHONOURED)
        if refused:  # gunicorn prints it as "Error: ..." and exits 1
            raise RuntimeError(honoured.refusal(refused, honoured.SERVE_UNHONOURED, "hami-webhook serve"))

    def load(self) -> Any:
        return self.factory()
