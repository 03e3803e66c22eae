"""One frozen Settings object, read once from the environment; defaults are HAMi's chart.

Every knob is declared once, on its Settings field (variable, default, meaning, checks); KNOBS is derived
from the fields, the parsing from KNOBS, and a test checks the README's settings table against KNOBS.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from app.admission.annotations import GPU_POLICY_ANNOTATION, NODE_POLICY_ANNOTATION, AnnotationRules
from app.admission.devices.base import ConfigError, Device
from app.admission.devices.config import load_device_config
from app.admission.devices.registry import build_devices, switched_off
from app.admission.fits import FitsCheck
from app.admission.workloads import WorkloadChecks
from app.logs import FORMATS, LEVELS
from app.quota.startup import QuotaMode


class SettingsError(ValueError):
    """A setting is invalid; the message names the environment variable."""


@dataclass(frozen=True)
class Knob:
    """One setting: its variable, default and meaning, and the checks its value must pass. Declared once, on its
    Settings field (``_knob``); KNOBS, the parsing and the README table's test all read it from there."""

    env: str
    field: str
    default: str
    kind: type
    help: str
    minimum: int | None = None
    choices: tuple[str, ...] = ()  # case-insensitive; the value is the field's type made from it lower-cased


def _knob(env: str, default: str, help: str, *, minimum: int | None = None, choices: tuple[str, ...] = ()) -> Any:
    """A Settings field that is read from ``env``; its name and type come from the field itself."""
    return field(metadata={"knob": (env, default, help, minimum, choices)})


@dataclass(frozen=True)
class Settings:
    """The knobs' values and the device backends built from the device config."""

    scheduler_name: str = _knob(
        "HAMI_SCHEDULER_NAME",
        "hami-scheduler",
        "schedulerName written into device Pods; empty disables the redirect and the nodeName check",
    )
    force_overwrite_default_scheduler: bool = _knob(
        "HAMI_FORCE_OVERWRITE_DEFAULT_SCHEDULER", "true", "also take over Pods whose schedulerName is default-scheduler"
    )
    enable_ascend: bool = _knob("HAMI_ENABLE_ASCEND", "false", "register one Ascend backend per vnpus.configs[] entry")
    enable_iluvatar: bool = _knob(
        "HAMI_ENABLE_ILUVATAR", "false", "register one Iluvatar backend per iluvatars[] entry"
    )
    device_config: str = _knob(
        "HAMI_DEVICE_CONFIG",
        "",
        "HAMi device-config YAML file, or its ConfigMap; missing sections and keys take the chart's defaults",
    )
    node_scheduler_policy: str = _knob(
        "HAMI_NODE_SCHEDULER_POLICY",
        "",
        "written as annotation hami.io/node-scheduler-policy on device Pods when set: binpack or spread",
    )
    gpu_scheduler_policy: str = _knob(
        "HAMI_GPU_SCHEDULER_POLICY",
        "",
        "written as annotation hami.io/gpu-scheduler-policy on device Pods when set: a comma-separated list of"
        " binpack, spread, topology-aware, mutex, numa",
    )
    strict_annotations: bool = _knob(
        "HAMI_STRICT_ANNOTATIONS",
        "false",
        "deny (400) device Pods whose HAMi annotations draw a warning (unknown key, value HAMi ignores, key HAMi"
        " writes) instead of admitting them with it",
    )
    fits_nowhere: FitsCheck = _knob(
        "HAMI_FITS_NOWHERE",
        "warn",
        "warn: device Pods no registered node could hold, even on an empty cluster, are admitted with a warning"
        " saying what they asked and the best the cluster has; deny: refused (403); off: no Node inventory is kept",
        choices=tuple(FitsCheck),
    )
    workload_checks: WorkloadChecks = _knob(
        "HAMI_WORKLOAD_CHECKS",
        "warn",
        "warn: workloads (Deployments, Jobs, ...) whose Pods would be refused or warned about are admitted with"
        " warnings; deny: refused when every Pod would be; off: admitted without a word",
        choices=tuple(WorkloadChecks),
    )
    # -- observability (docs/operations.md, "Metrics" and "Logs") --
    metrics_bind: str = _knob(
        "HAMI_METRICS_BIND",
        "0.0.0.0:9090",
        "address of the plain-HTTP Prometheus endpoint (/metrics) served by the gunicorn master; empty disables it",
    )
    log_format: str = _knob(
        "HAMI_LOG_FORMAT", "text", "json (one object per line) or text; our lines and gunicorn's", choices=FORMATS
    )
    log_level: str = _knob(
        "HAMI_LOG_LEVEL", "info", "debug, info, warning or error; debug adds each review's patch", choices=LEVELS
    )
    bind: str = _knob("HAMI_WEBHOOK_BIND", "0.0.0.0:9443", "address gunicorn listens on (HTTPS)")
    tls_cert: str = _knob("HAMI_WEBHOOK_TLS_CERT", "/tls/tls.crt", "serving certificate (PEM, leaf first)")
    tls_key: str = _knob("HAMI_WEBHOOK_TLS_KEY", "/tls/tls.key", "serving private key (PEM)")
    workers: int = _knob(
        "HAMI_WEBHOOK_WORKERS", "1", "gunicorn worker processes (each keeps its own quota feed)", minimum=1
    )
    threads: int = _knob(
        "HAMI_WEBHOOK_THREADS", "8", "threads per worker (keep-alive connections served at once)", minimum=1
    )
    timeout: int = _knob(
        "HAMI_WEBHOOK_TIMEOUT", "30", "seconds a worker may stay silent before gunicorn restarts it", minimum=1
    )
    keepalive: int = _knob(
        "HAMI_WEBHOOK_KEEPALIVE",
        "120",
        "seconds an idle connection stays open; above the API server's 90 s so the client always closes first",
        minimum=1,
    )
    # -- namespace device quota (README "Namespace quota") --
    quota_mode: QuotaMode = _knob(
        "HAMI_QUOTA_ENABLED",
        "auto",
        "auto: quota on when in-cluster config or a kubeconfig loads; true: required (start-up fails without); false",
        choices=tuple(QuotaMode),
    )
    home_namespace: str = _knob(
        "HAMI_NAMESPACE", "hami-system", "the webhook's own namespace: home of the ledger Leases"
    )
    quota_reservation_ttl: int = _knob(
        "HAMI_QUOTA_RESERVATION_TTL",
        "60",
        "seconds a quota reservation counts when its Pod never appears (above the API server's 60 s request timeout)",
        minimum=1,
    )
    quota_gang_hold: int = _knob(
        "HAMI_QUOTA_GANG_HOLD",
        "300",
        "seconds a gang's unfilled room stays held after its last member's Pod is seen (twice that at most); 0: off",
        minimum=0,
    )
    quota_stale_after: int = _knob(
        "HAMI_QUOTA_STALE_AFTER",
        "30",
        "seconds the Pod/ResourceQuota watch may stay broken before /readyz fails and quota'd admissions get HTTP 500",
        minimum=1,
    )
    request_timeout: int = _knob(
        "HAMI_WEBHOOK_REQUEST_TIMEOUT",
        "10",
        "seconds from a request's first byte until all of it must have arrived, else 408 and the connection closes",
        minimum=1,
    )
    handshake_timeout: int = _knob(
        "HAMI_WEBHOOK_HANDSHAKE_TIMEOUT",
        "5",
        "seconds from accepting a connection until its TLS handshake must be done, else it is closed",
        minimum=1,
    )
    devices: tuple[Device, ...] = field(default=(), compare=False, repr=False)
    every_device: tuple[Device, ...] = field(default=(), compare=False, repr=False)
    """Every vendor of the device config, those a flag keeps off too: what HAMi's scheduler may allocate."""
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

    @cached_property
    def owned_annotations(self) -> AnnotationRules:
        """HAMi's Pod annotations with the per-chip keys of every vendor: its ``owned`` are never the author's."""
        return AnnotationRules(self.every_device)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read every knob from ``env`` (default: os.environ) and build the device backends."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {k.field: _parse(k, env.get(k.env, k.default)) for k in KNOBS}
        _check_metrics_bind(values["metrics_bind"])
        flags = {"enable_ascend": values["enable_ascend"], "enable_iluvatar": values["enable_iluvatar"]}
        try:
            config = load_device_config(values["device_config"])
            devices = build_devices(config.root, **flags)
            every_device = build_devices(config.root, enable_ascend=True, enable_iluvatar=True)
            off = switched_off(config.root, **flags)
        except ConfigError as exc:
            raise SettingsError(f"HAMI_DEVICE_CONFIG: {exc}") from exc
        envs = {k.field: k.env for k in KNOBS}
        found = cls(
            devices=devices,
            every_device=every_device,
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


def _check_metrics_bind(bind: str) -> None:
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
            number = int(raw)
        except ValueError:
            raise SettingsError(f"{knob.env}: expected an integer, got {raw!r}") from None
        if knob.minimum is not None and number < knob.minimum:
            raise SettingsError(f"{knob.env}: must be at least {knob.minimum}, got {number}")
        return number
    if knob.choices:
        if raw.lower() not in knob.choices:
            expected = f"{', '.join(knob.choices[:-1])} or {knob.choices[-1]}"
            raise SettingsError(f"{knob.env}: expected {expected}, got {raw!r}")
        return knob.kind(raw.lower())
    return raw


_KINDS = {
    "str": str,
    "bool": bool,
    "int": int,
    "QuotaMode": QuotaMode,
    "WorkloadChecks": WorkloadChecks,
    "FitsCheck": FitsCheck,
}
KNOBS: tuple[Knob, ...] = tuple(
    Knob(env, f.name, default, _KINDS[str(f.type)], help, minimum, choices)
    for f in fields(Settings)
    if "knob" in f.metadata
    for env, default, help, minimum, choices in [f.metadata["knob"]]
)
