"""One frozen Settings object, read once from the environment; defaults are HAMi's chart.

Every knob is listed in KNOBS (name, default, meaning); the README's settings table
is checked against it by a test, so the two cannot drift apart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from app.annotations import GPU_POLICY_ANNOTATION, NODE_POLICY_ANNOTATION, AnnotationRules
from app.devices.base import ConfigError, Device
from app.devices.config import load_device_config
from app.devices.registry import build_devices, switched_off
from app.logs import FORMATS, LEVELS


class SettingsError(ValueError):
    """A setting is invalid; the message names the environment variable."""


@dataclass(frozen=True)
class Knob:
    env: str
    field: str
    default: str
    kind: type
    help: str


KNOBS: tuple[Knob, ...] = (
    Knob(
        "HAMI_SCHEDULER_NAME",
        "scheduler_name",
        "hami-scheduler",
        str,
        "schedulerName written into device Pods; empty disables the redirect and the nodeName check",
    ),
    Knob(
        "HAMI_FORCE_OVERWRITE_DEFAULT_SCHEDULER",
        "force_overwrite_default_scheduler",
        "true",
        bool,
        "also take over Pods whose schedulerName is default-scheduler",
    ),
    Knob("HAMI_ENABLE_ASCEND", "enable_ascend", "false", bool, "register one Ascend backend per vnpus.configs[] entry"),
    Knob(
        "HAMI_ENABLE_ILUVATAR", "enable_iluvatar", "false", bool, "register one Iluvatar backend per iluvatars[] entry"
    ),
    Knob(
        "HAMI_DEVICE_CONFIG",
        "device_config",
        "",
        str,
        "HAMi device-config YAML file, or its ConfigMap; missing sections and keys take the chart's defaults",
    ),
    Knob(
        "HAMI_NODE_SCHEDULER_POLICY",
        "node_scheduler_policy",
        "",
        str,
        "written as annotation hami.io/node-scheduler-policy on device Pods when set: binpack or spread",
    ),
    Knob(
        "HAMI_GPU_SCHEDULER_POLICY",
        "gpu_scheduler_policy",
        "",
        str,
        "written as annotation hami.io/gpu-scheduler-policy on device Pods when set: a comma-separated list of"
        " binpack, spread, topology-aware, mutex, numa",
    ),
    Knob(
        "HAMI_STRICT_ANNOTATIONS",
        "strict_annotations",
        "false",
        bool,
        "deny (400) device Pods whose HAMi annotations draw a warning (unknown key, value HAMi ignores, key HAMi"
        " writes) instead of admitting them with it",
    ),
    # -- observability (docs/operations.md, "Metrics" and "Logs") --
    Knob(
        "HAMI_METRICS_BIND",
        "metrics_bind",
        "0.0.0.0:9090",
        str,
        "address of the plain-HTTP Prometheus endpoint (/metrics) served by the gunicorn master; empty disables it",
    ),
    Knob("HAMI_LOG_FORMAT", "log_format", "text", str, "json (one object per line) or text; our lines and gunicorn's"),
    Knob("HAMI_LOG_LEVEL", "log_level", "info", str, "debug, info, warning or error; debug adds each review's patch"),
    Knob("HAMI_WEBHOOK_BIND", "bind", "0.0.0.0:9443", str, "address gunicorn listens on (HTTPS)"),
    Knob("HAMI_WEBHOOK_TLS_CERT", "tls_cert", "/tls/tls.crt", str, "serving certificate (PEM, leaf first)"),
    Knob("HAMI_WEBHOOK_TLS_KEY", "tls_key", "/tls/tls.key", str, "serving private key (PEM)"),
    Knob("HAMI_WEBHOOK_WORKERS", "workers", "2", int, "gunicorn worker processes"),
    Knob("HAMI_WEBHOOK_THREADS", "threads", "4", int, "threads per worker (keep-alive connections served at once)"),
    Knob("HAMI_WEBHOOK_TIMEOUT", "timeout", "30", int, "seconds a worker may stay silent before gunicorn restarts it"),
    Knob(
        "HAMI_WEBHOOK_KEEPALIVE",
        "keepalive",
        "120",
        int,
        "seconds an idle connection stays open; above the API server's 90 s so the client always closes first",
    ),
    # -- namespace device quota (README "Namespace quota") --
    Knob(
        "HAMI_QUOTA_ENABLED",
        "quota_enabled",
        "auto",
        str,
        "auto: quota on when in-cluster config or a kubeconfig loads; true: required (start-up fails without); false",
    ),
    Knob("HAMI_NAMESPACE", "namespace", "hami-system", str, "the webhook's own namespace: home of the ledger Leases"),
    Knob(
        "HAMI_QUOTA_RESERVATION_TTL",
        "quota_reservation_ttl",
        "60",
        int,
        "seconds a quota reservation counts when its Pod never appears (above the API server's 60 s request timeout)",
    ),
    Knob(
        "HAMI_QUOTA_STALE_AFTER",
        "quota_stale_after",
        "30",
        int,
        "seconds the Pod/ResourceQuota watch may stay broken before /readyz fails and quota'd admissions get HTTP 500",
    ),
    Knob(
        "HAMI_WEBHOOK_REQUEST_TIMEOUT",
        "request_timeout",
        "10",
        int,
        "seconds from a request's first byte until all of it must have arrived, else 408 and the connection closes",
    ),
    Knob(
        "HAMI_WEBHOOK_HANDSHAKE_TIMEOUT",
        "handshake_timeout",
        "5",
        int,
        "seconds from accepting a connection until its TLS handshake must be done, else it is closed",
    ),
)


@dataclass(frozen=True)
class Settings:
    """The knobs' values (defaults live in KNOBS) and the device backends built from the device config."""

    scheduler_name: str
    force_overwrite_default_scheduler: bool
    enable_ascend: bool
    enable_iluvatar: bool
    device_config: str
    node_scheduler_policy: str
    gpu_scheduler_policy: str
    strict_annotations: bool
    metrics_bind: str
    log_format: str
    log_level: str
    bind: str
    tls_cert: str
    tls_key: str
    workers: int
    threads: int
    timeout: int
    keepalive: int
    quota_enabled: str
    namespace: str
    quota_reservation_ttl: int
    quota_stale_after: int
    request_timeout: int
    handshake_timeout: int
    devices: tuple[Device, ...] = field(compare=False, repr=False)
    switched_off: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Resource names of the vendors a flag keeps off, each mapped to the variable that turns it on."""
    config_warnings: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """Keys of the device-config file that nothing reads (misspellings): logged once at start-up."""

    @cached_property
    def device_resources(self) -> dict[str, bool]:
        """Every vendor resource name, mapped to whether it is a device count (which must be whole)."""
        index: dict[str, bool] = {}
        for device in self.devices:
            for name in device.resource_names:
                index[name] = index.get(name, False) or name == device.quota_names.count
        return index

    @cached_property
    def annotation_rules(self) -> AnnotationRules:
        """HAMi's Pod annotations, with the per-chip keys of the configured backends."""
        return AnnotationRules(self.devices)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read every knob from ``env`` (default: os.environ) and build the device backends."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {k.field: _parse(k, env.get(k.env, k.default)) for k in KNOBS}
        _check_observability(values)
        if values["quota_enabled"].lower() not in ("auto", "true", "false"):
            raise SettingsError(f"HAMI_QUOTA_ENABLED: expected auto, true or false, got {values['quota_enabled']!r}")
        values["quota_enabled"] = values["quota_enabled"].lower()
        for name in (
            "workers",
            "threads",
            "timeout",
            "keepalive",
            "quota_reservation_ttl",
            "quota_stale_after",
            "request_timeout",
            "handshake_timeout",
        ):
            if values[name] < 1:
                knob = next(k for k in KNOBS if k.field == name)
                raise SettingsError(f"{knob.env}: must be at least 1, got {values[name]}")
        flags = {"enable_ascend": values["enable_ascend"], "enable_iluvatar": values["enable_iluvatar"]}
        try:
            config = load_device_config(values["device_config"])
            devices = build_devices(config.root, **flags)
            off = switched_off(config.root, **flags)
        except ConfigError as exc:
            raise SettingsError(f"HAMI_DEVICE_CONFIG: {exc}") from exc
        envs = {k.field: k.env for k in KNOBS}
        found = cls(
            devices=devices,
            switched_off={name: envs[flag] for name, flag in off.items()},
            config_warnings=config.warnings,
            **values,
        )
        _check_policies(found)
        return found


def _check_policies(settings: Settings) -> None:
    """The policies written into device Pods must be ones HAMi's scheduler understands (else it uses its own)."""
    for env, key, value in (
        ("HAMI_NODE_SCHEDULER_POLICY", NODE_POLICY_ANNOTATION, settings.node_scheduler_policy),
        ("HAMI_GPU_SCHEDULER_POLICY", GPU_POLICY_ANNOTATION, settings.gpu_scheduler_policy),
    ):
        accepts = settings.annotation_rules.rows[key].accepts
        if value and not accepts.accepts(value):
            raise SettingsError(f"{env}: expected {accepts.described}, got {value!r}")


def _check_observability(values: dict[str, Any]) -> None:
    values["log_format"], values["log_level"] = values["log_format"].lower(), values["log_level"].lower()
    if values["log_format"] not in FORMATS:
        raise SettingsError(f"HAMI_LOG_FORMAT: expected json or text, got {values['log_format']!r}")
    if values["log_level"] not in LEVELS:
        raise SettingsError(f"HAMI_LOG_LEVEL: expected one of {', '.join(LEVELS)}, got {values['log_level']!r}")
    bind = values["metrics_bind"]
    _host, colon, port = bind.rpartition(":")
    if bind and not (colon and port.isdigit() and int(port) < 65536):
        raise SettingsError(f"HAMI_METRICS_BIND: expected host:port or empty, got {bind!r}")


def _parse(knob: Knob, raw: str) -> Any:
    raw = raw.strip()
    if knob.kind is bool:
        if raw.lower() not in ("true", "false", "1", "0"):
            raise SettingsError(f"{knob.env}: expected true or false, got {raw!r}")
        return raw.lower() in ("true", "1")
    if knob.kind is int:
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{knob.env}: expected an integer, got {raw!r}") from None
    return raw
