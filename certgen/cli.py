"""The ``certgen`` command line: argparse subcommands over `pki` and `resources`.

Everything a user can get wrong is checked before the first API request, so a
usage error (exit 2) never touches the cluster; failures while talking to the
cluster are one error line (``[ERROR]``, or ``"level":"error"`` in JSON) and exit 1.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta

from app.kube.errors import ApiError
from certgen import certificates, local, log, pki, resources
from certgen.duration import format_duration, parse_duration

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DATA_KEY = re.compile(r"[-._a-zA-Z0-9]+")

_DESCRIPTION = """\
Certificates and caBundle for hami-webhook's admission webhook.

  create          keep a CA and a serving certificate in Kubernetes Secrets,
                  renewing them before they expire or when --host changes
  patch           write the CA bundle (and optionally failurePolicy) into every
                  webhook of the webhook configuration
  failure-policy  flip failurePolicy of every webhook to Fail or Ignore
  local           the same PKI as files, for running the webhook locally
"""
_EPILOG = """\
exit codes: 0 success (including "nothing to change"), 1 failure (API error,
missing Secret or CA, timeout), 2 usage error (nothing was sent to the API).
Kubernetes access: --kubeconfig, else in-cluster config, else $KUBECONFIG or
~/.kube/config. Durations are Go-style: 8760h, 720h, 30m, 90s, or days: 365d.
"""

_HOST_HELP = (
    "comma-separated certificate names: IP addresses become IP SANs, the rest DNS SANs "
    "(e.g. hami-webhook.hami-system.svc,127.0.0.1)"
)


class UsageError(Exception):
    """A bad combination of arguments, found before any API request (exit 2)."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keep descriptions as written and append real defaults (booleans the Go way)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if not action.option_strings or default in (None, argparse.SUPPRESS) or "default" in text:
            return text
        shown = str(default).lower() if isinstance(default, bool) else "%(default)s"
        return f"{text} (default: {shown})"


def _checked(pattern: re.Pattern[str], max_len: int, what: str, expected: str) -> Callable[[str], str]:
    """An argparse type that rejects names the API server would reject, before any request."""

    def check(text: str) -> str:
        if len(text) > max_len or not pattern.fullmatch(text):
            raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: expected {expected}")
        return text

    return check


_object_name = _checked(_DNS_SUBDOMAIN, 253, "name", "a lower-case DNS subdomain")
_namespace = _checked(_DNS_LABEL, 63, "namespace", "a lower-case DNS label")
_data_key = _checked(_DATA_KEY, 253, "Secret data key", "letters, digits, '-', '_' or '.'")


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _hosts(text: str) -> tuple[str, ...]:
    try:
        return certificates.normalize_hosts(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} in {text!r}") from None


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="certgen",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--log-format", choices=log.FORMATS, default="text", help="log line format")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    # Repeated on each subcommand (without a default) so it may follow the command name too.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-format", choices=log.FORMATS, default=argparse.SUPPRESS, help="log line format (default: text)"
    )
    cluster = argparse.ArgumentParser(add_help=False, parents=[common])
    cluster.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig file; default: in-cluster config, else $KUBECONFIG or ~/.kube/config",
    )

    create = _add_command(
        commands,
        "create",
        _create,
        [cluster],
        "create or renew the CA and serving certificate in Secrets",
        """\
Keep a private CA and a serving certificate for --host in two Secrets:
  --secret-name     kubernetes.io/tls with tls.crt, tls.key and ca.crt (the CA
                    bundle); this is what the webhook pod mounts
  --ca-secret-name  Opaque with ca.crt and ca.key, the CA signing key, kept
                    apart so the webhook pod never holds it
Nothing is written when both are still valid. The serving certificate is
re-issued (same CA) when it expires within --renew-before, when the --host
names changed, or when it is missing or malformed. The CA is re-issued only
when it is missing, malformed or itself within --renew-before of expiry; the
previous CA then stays in the bundle for one --renew-before period.""",
    )
    create.add_argument("--host", required=True, type=_hosts, metavar="HOSTS", help=_HOST_HELP)
    create.add_argument(
        "--namespace", required=True, type=_namespace, metavar="NAMESPACE", help="namespace of both Secrets"
    )
    create.add_argument("--secret-name", required=True, type=_object_name, metavar="NAME", help="serving Secret")
    create.add_argument(
        "--ca-secret-name",
        type=_object_name,
        metavar="NAME",
        help="Secret holding the CA key (default: <secret-name>-ca)",
    )
    create.add_argument(
        "--cert-name", default="tls.crt", type=_data_key, metavar="KEY", help="data key of the serving certificate"
    )
    create.add_argument(
        "--key-name", default="tls.key", type=_data_key, metavar="KEY", help="data key of the serving key"
    )
    create.add_argument(
        "--ca-name", default=resources.CA_CERT_KEY, type=_data_key, metavar="KEY", help="data key of the CA bundle"
    )
    _add_pki_arguments(create)

    patch = _add_command(
        commands,
        "patch",
        _patch,
        [cluster],
        "write the CA bundle into the webhook configuration(s)",
        """\
Read the CA bundle from the serving Secret (--ca-name, falling back to
kube-webhook-certgen's "ca" key) and write it as clientConfig.caBundle into
every webhook of the admissionregistration.k8s.io/v1 configuration(s) named
--webhook-name; with --patch-failure-policy also set failurePolicy. Nothing is
written when every webhook already matches. A configuration that does not
exist yet is waited for with backoff, up to --timeout.""",
    )
    patch.add_argument(
        "--webhook-name", required=True, type=_object_name, metavar="NAME", help="name of the webhook configuration(s)"
    )
    patch.add_argument(
        "--namespace", required=True, type=_namespace, metavar="NAMESPACE", help="namespace of the serving Secret"
    )
    patch.add_argument(
        "--secret-name", required=True, type=_object_name, metavar="NAME", help="serving Secret holding the CA bundle"
    )
    patch.add_argument(
        "--ca-name", default=resources.CA_CERT_KEY, type=_data_key, metavar="KEY", help="data key of the CA bundle"
    )
    patch.add_argument(
        "--patch-mutating",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        metavar="BOOL",
        help="patch the MutatingWebhookConfiguration",
    )
    patch.add_argument(
        "--patch-validating",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        metavar="BOOL",
        help="patch the ValidatingWebhookConfiguration",
    )
    patch.add_argument(
        "--patch-failure-policy",
        choices=resources.POLICIES,
        help="also set failurePolicy on every webhook (default: leave it)",
    )
    patch.add_argument(
        "--timeout",
        type=_duration,
        metavar="DURATION",
        default="60s",
        help="how long to wait for a configuration that does not exist yet",
    )

    flip = _add_command(
        commands,
        "failure-policy",
        _failure_policy,
        [cluster],
        "set failurePolicy of every webhook to Fail or Ignore",
        """\
Emergency switch: set failurePolicy on every webhook of the configuration and
report each webhook's old -> new policy (a missing policy counts as Fail, the
API default). caBundle is left alone and nothing is written when every webhook
already has the policy. The API server never sends webhook-configuration
writes to webhooks, so this works while the webhook is down.""",
    )
    flip.add_argument("policy", choices=resources.POLICIES, help="the failurePolicy to set")
    flip.add_argument(
        "--webhook-name", required=True, type=_object_name, metavar="NAME", help="name of the webhook configuration"
    )
    flip.add_argument(
        "--kind",
        choices=("mutating", "validating"),
        default="mutating",
        help="which configuration kind to change",
    )

    local = _add_command(
        commands,
        "local",
        _local,
        [common],
        "write the same PKI to files for a local run",
        """\
Keep ca.crt (the CA bundle), ca.key, tls.crt and tls.key in --out-dir, with
the same renewal rules as create; keys are written with mode 0600 and files
are only rewritten when they change.""",
    )
    local.add_argument("--out-dir", default=".local-tls", metavar="DIR", help="directory for the files")
    local.add_argument("--host", default="localhost,127.0.0.1", type=_hosts, metavar="HOSTS", help=_HOST_HELP)
    _add_pki_arguments(local)
    return parser


def _add_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    run: Callable[[argparse.Namespace], None],
    parents: list[argparse.ArgumentParser],
    summary: str,
    description: str,
) -> argparse.ArgumentParser:
    command = commands.add_parser(
        name,
        parents=parents,
        help=summary,
        description=description,
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
    )
    command.set_defaults(run=run, command_parser=command)
    return command


def _add_pki_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = pki.Policy()
    parser.add_argument(
        "--key-type",
        choices=[key_type.value for key_type in certificates.KeyType],
        default=defaults.key_type.value,
        help="key algorithm of new keys",
    )
    for flag, default, meaning in (
        ("--ca-validity", defaults.ca_validity, "lifetime of a new CA"),
        ("--cert-validity", defaults.cert_validity, "lifetime of a new serving certificate"),
        (
            "--renew-before",
            defaults.renew_before,
            "renew a certificate (or CA) this long before it expires; also the CA overlap period",
        ),
    ):
        parser.add_argument(flag, type=_duration, metavar="DURATION", default=format_duration(default), help=meaning)


def _policy(args: argparse.Namespace) -> pki.Policy:
    try:
        return pki.Policy(
            key_type=certificates.KeyType(args.key_type),
            ca_validity=args.ca_validity,
            cert_validity=args.cert_validity,
            renew_before=args.renew_before,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _create(args: argparse.Namespace) -> None:
    policy = _policy(args)
    layout = resources.SecretLayout(
        namespace=args.namespace,
        name=args.secret_name,
        ca_secret_name=args.ca_secret_name or f"{args.secret_name}-ca",
        cert_key=args.cert_name,
        key_key=args.key_name,
        bundle_key=args.ca_name,
    )
    if layout.ca_secret_name == layout.name:
        raise UsageError("--ca-secret-name must differ from --secret-name")
    if len({layout.cert_key, layout.key_key, layout.bundle_key}) < 3:
        raise UsageError("--cert-name, --key-name and --ca-name must be different keys")
    with resources.connect(args.kubeconfig) as api:
        resources.ensure_secrets(api, layout, args.host, policy)


def _patch(args: argparse.Namespace) -> None:
    kinds = [
        kind
        for kind, wanted in ((resources.MUTATING, args.patch_mutating), (resources.VALIDATING, args.patch_validating))
        if wanted
    ]
    if not kinds:
        raise UsageError("nothing to patch: --patch-mutating and --patch-validating are both false")
    with resources.connect(args.kubeconfig) as api:
        bundle = resources.read_ca_bundle(api, args.namespace, args.secret_name, args.ca_name)
        wait_until = time.monotonic() + args.timeout.total_seconds()
        for kind in kinds:
            resources.update_webhooks(
                api,
                kind,
                args.webhook_name,
                ca_bundle=bundle,
                failure_policy=args.patch_failure_policy,
                wait_until=wait_until,
            )


def _failure_policy(args: argparse.Namespace) -> None:
    kind = resources.MUTATING if args.kind == "mutating" else resources.VALIDATING
    with resources.connect(args.kubeconfig) as api:
        resources.update_webhooks(api, kind, args.webhook_name, failure_policy=args.policy)


def _local(args: argparse.Namespace) -> None:
    local.write_local(args.out_dir, args.host, policy=_policy(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Run certgen; return the exit code instead of exiting, so tests can call it in-process."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    log.configure(args.log_format)
    try:
        args.run(args)
    except UsageError as exc:
        args.command_parser.print_usage(sys.stderr)
        print(f"{args.command_parser.prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (resources.KubeError, ApiError) as exc:
        log.error(str(exc))
        return EXIT_FAILED
    except OSError as exc:
        log.error(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":  # python -m certgen.cli, as python -m certgen
    raise SystemExit(main())
