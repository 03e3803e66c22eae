"""Which of gunicorn's settings app.serving.worker cannot honour, refused at start rather than ignored.

gunicorn's config file promises gunicorn's semantics, and a setting silently ignored breaks that promise without a
word: a proxy's headers an operator means to trust, client certificates they mean to require, an access log they
look for. So the worker refuses to start when one of these is set to anything but gunicorn's default, with one
line naming each (gunicorn's arbiter asks the worker class to ``check_config`` before it forks; a RuntimeError
there is gunicorn's own "Error: ..." and exit 1). Every other setting is honoured: by gunicorn's arbiter (bind,
workers, timeouts, logging, the server hooks), by ``base.Worker`` (max_requests and its jitter, reload,
post_worker_init, worker_int, worker_abort), or by the worker itself (keepalive, worker_connections, threads,
certfile and keyfile, ``limit_request_*``, pre_request, post_request). Settings of gunicorn's ASGI worker and
the HTTP/2 details below ``http_protocols`` configure what no WSGI HTTP/1.1 worker runs, and stay gunicorn's no-ops.
"""

from __future__ import annotations

from typing import Any

_TLS = "TLS is the worker's own (app.serving.tls: TLS 1.2 and up, the certfile/keyfile pair alone)"
_PROXY = "no proxy's headers are trusted (wsgi.url_scheme is https, REMOTE_ADDR the peer's)"
_PARSER = "requests are parsed by llhttp under its own rules"
_ACCESS = "the worker writes no access log: each review is one log line of its own (HAMI_LOG_FORMAT)"

UNHONOURED = {
    "accesslog": _ACCESS,
    "access_log_format": _ACCESS,
    "statsd_host": "the worker sends no request metrics to statsd: scrape /metrics (HAMI_METRICS_BIND)",
    "ssl_context": _TLS,
    "ssl_version": _TLS,
    "cert_reqs": _TLS,
    "ca_certs": _TLS,
    "ciphers": _TLS,
    "suppress_ragged_eofs": _TLS,
    "do_handshake_on_connect": _TLS,
    "secure_scheme_headers": _PROXY,
    "forwarded_allow_ips": _PROXY,
    "forwarder_headers": _PROXY,
    "root_path": _PROXY,
    "proxy_protocol": "the PROXY protocol is not read",
    "protocol": "the worker speaks HTTP, not uwsgi",
    "header_map": "a header name with '_' is dropped, as gunicorn's default 'drop'",
    "http_protocols": "the worker speaks HTTP/1.1 alone",
    "http2_cleartext": "the worker speaks HTTP/1.1 alone",
    "http_parser": _PARSER,
    "permit_obsolete_folding": _PARSER,
    "strip_header_spaces": _PARSER,
    "permit_unconventional_http_method": _PARSER,
    "permit_unconventional_http_version": _PARSER,
    "casefold_http_method": _PARSER,
}
"""Each setting the worker does not honour, with what it does instead. Names this gunicorn lacks are skipped."""

SERVE_UNHONOURED = {
    name: "`hami-webhook serve` loads the webhook itself (gunicorn's own command does this)"
    for name in ("wsgi_app", "paste", "pythonpath", "chdir", "daemon", "check_config", "print_config")
}
"""What ``hami-webhook serve`` (app.serving.master.WebhookServer, gunicorn's BaseApplication) does not do of
gunicorn's own command: finding and loading an app, daemonizing, only checking or printing the configuration."""


def unhonoured(cfg: Any, defaults: Any, table: dict[str, str] = UNHONOURED) -> list[str]:
    """The settings in ``cfg`` (gunicorn's Config) that differ from ``defaults`` (a fresh Config) and that
    ``table`` lists, in its order."""
    return [
        name for name in table if name in cfg.settings and cfg.settings[name].get() != defaults.settings[name].get()
    ]


def refusal(names: list[str], table: dict[str, str] = UNHONOURED, who: str = "app.serving.worker") -> str:
    """One line naming each setting refused, and why."""
    reasons = "; ".join(f"{name}: {table[name]}" for name in names)
    return f"{who} does not honour gunicorn's {', '.join(names)} (set in the configuration): {reasons}"
