"""``hami-webhook`` (also ``python -m app``): serve over TLS, run locally with a throwaway PKI, preview a Pod offline,
write the admission policies, look at quota and at the devices Nodes register, check an install. ``kubectl-hami``,
the kubectl plugin, is ``plugin`` below.

Exit codes: 0 ok (review: every Pod admitted; check: device Pods go through the webhook), 1 failure (review: a Pod
refused, by the policy or by the API server; check: they do not), 2 usage or configuration error (review: an
unreadable file or configuration, nothing that creates Pods, or an invalid Pod, which the webhook answers with a
400 denial; check: an unknown namespace).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.check.command import add_check_command
from app.inventory.command import add_nodes_command
from app.preview.workloads import TEMPLATES
from app.quota.command import add_quota_command

if TYPE_CHECKING:  # each command imports what it runs: --help, --version and `quota` stay quick to start
    from app.admission.fits import InventoryPort
    from app.preview.documents import DocumentReview
    from app.settings import Settings

LOCAL_HOSTS = ("localhost", "127.0.0.1")


def main(argv: Sequence[str] | None = None, prog: str = "hami-webhook") -> int:
    parser = _parser(prog)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said with the subcommand's usage, not the top level's
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return int(args.run(args))


class _Version(argparse.Action):
    """``--version``: the installed package's version, looked up only when asked (importlib.metadata is slow)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("hami-webhook")
        except PackageNotFoundError:  # run from a checkout that was never installed
            found = "unknown (not installed)"
        print(f"{parser.prog} {found}")
        parser.exit()


def _parser(prog: str = "hami-webhook") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="serve POST /webhook over HTTPS with gunicorn (HAMI_* env vars)",
        description="Run gunicorn with the webhook's settings: the same as "
        "`gunicorn -c gunicorn.conf.py wsgi:app`. Configure with HAMI_* variables.",
    )
    serve.set_defaults(run=_serve)

    local = commands.add_parser(
        "local",
        help="serve on 127.0.0.1 with a self-signed CA made on the spot",
        description="Generate (or reuse) a local CA and serving certificate for "
        "localhost and 127.0.0.1, print a ready curl command, and serve.",
    )
    local.add_argument(
        "--dir", default=".local-tls", help="where the PKI and the sample review go (default %(default)s)"
    )
    local.add_argument("--bind", default="127.0.0.1:9443", help="address to listen on (default %(default)s)")
    local.set_defaults(run=_local)

    preview = commands.add_parser(
        "review",
        help="show what the API server and the webhook would do to Pods and workloads, offline",
        description="Review every Pod in a YAML or JSON file, and every Pod a workload in it would create "
        f"({', '.join(TEMPLATES)}; also inside a List), as the API server would send them (schedulerName and "
        "requests defaulted), "
        "say whether the webhook configuration sends them to the webhook at all, and print each decision to "
        "stderr and the patched objects (or the JSON Patch) to stdout. Exit 0 every Pod admitted, 1 one is "
        "refused, 2 bad input (unreadable file or configuration, nothing that creates Pods, an invalid Pod).",
    )
    preview.add_argument(
        "file", nargs="*", help="manifests (YAML or JSON, several documents allowed, kubectl's List too); - reads stdin"
    )
    preview.add_argument(
        "-f", "--filename", action="append", default=[], metavar="FILE", help="the same as FILE, as kubectl takes it"
    )
    preview.add_argument(
        "--config",
        help="HAMi device config YAML, or the ConfigMap holding it (default: HAMI_DEVICE_CONFIG or the chart's)",
    )
    preview.add_argument(
        "--webhook-config",
        metavar="FILE",
        help="the MutatingWebhookConfiguration as rendered for your cluster (default: the one the manifests apply)",
    )
    preview.add_argument("-n", "--namespace", default="default", help="namespace when the manifest names none")
    preview.add_argument(
        "--as-new",
        action="store_true",
        help="review live Pods (kubectl get -o yaml) as new: drop status, spec.nodeName, uid, resourceVersion...",
    )
    printed = preview.add_mutually_exclusive_group()
    printed.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json", "name"),
        help="the patched objects as one List (yaml, json) or their names (default: one YAML document each)",
    )
    printed.add_argument("--patch", action="store_true", help="print the JSON Patch instead of the patched objects")
    against = preview.add_mutually_exclusive_group()
    against.add_argument(
        "--cluster",
        action="store_true",
        help="check whether any Node could hold each device container, against the devices the live cluster's "
        "Nodes register (your kubeconfig; RBAC: list nodes)",
    )
    against.add_argument(
        "--inventory",
        metavar="FILE",
        help="the same, against the Nodes of FILE (kubectl get nodes -o json), offline",
    )
    preview.add_argument("--context", help="with --cluster: the kubeconfig context to use")
    preview.add_argument("--kubeconfig", help="with --cluster: the kubeconfig file (default: $KUBECONFIG)")
    preview.set_defaults(run=_review)

    policies = commands.add_parser(
        "policies",
        help="write the admission policies kube-apiserver runs beside the webhook, from your device config",
        description="Write the ValidatingAdmissionPolicies (allocation guard, routed, reviewed), the "
        "MutatingAdmissionPolicy floor and the webhook's matchConditions from the device config, the HAMI_* "
        "settings and the webhook configuration's scope: what an overlay with its own device config or "
        'settings applies (docs/operations.md, "Admission policies").',
    )
    policies.add_argument(
        "--config",
        help="HAMi device config YAML, or the ConfigMap holding it (default: HAMI_DEVICE_CONFIG or the chart's)",
    )
    policies.add_argument(
        "--webhook-config",
        metavar="FILE",
        help="the MutatingWebhookConfiguration as rendered for your cluster (default: the one the manifests apply)",
    )
    policies.add_argument(
        "--hami-component",
        metavar="NAMESPACE:NAME",
        action="append",
        help="a ServiceAccount allowed to write HAMi's allocation annotations without the guard's check (that "
        "the authorizer lets it patch Nodes); repeat for each (default: none, the check finds HAMi's components)",
    )
    policies.add_argument("--out", metavar="DIR", help="write one file per policy there (default: all to stdout)")
    policies.set_defaults(run=_policies)
    generate = commands.add_parser(
        "generate",
        help="rewrite every generated manifest of this checkout from the code (for developers)",
        description="Rewrite the shipped admission policies, the webhooks' matchConditions in manifests/ and "
        "docs/annotations.md's tables from the code, the chart's device config and the settings' defaults (never "
        "the environment), as after adding a vendor (docs/development.md). With --check write nothing and exit 1 "
        "naming each stale file.",
    )
    generate.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is stale")
    generate.set_defaults(run=_generate)
    add_quota_command(commands, _settings)
    add_check_command(commands, _default_scheduler)
    add_nodes_command(commands, lambda args: _settings(args).devices)
    for command in commands.choices.values():
        command.set_defaults(parser=command)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from app import create_app
    from app.serving.master import WebhookServer

    WebhookServer(create_app).run()
    return 0


def _local(args: argparse.Namespace) -> int:
    from certgen.local import write_local

    files = write_local(args.dir, LOCAL_HOSTS)
    sample = Path(args.dir) / "sample-review.json"
    sample.write_text(json.dumps(sample_review(), indent=2) + "\n")
    host, _, port = args.bind.rpartition(":")
    url = f"https://{'localhost' if host in ('127.0.0.1', '0.0.0.0', '') else host}:{port}/webhook"
    print(f"hami-webhook: serving {url} with a local CA ({files.ca_cert})", file=sys.stderr)
    print("try:", file=sys.stderr)
    print(
        f"  curl --cacert {files.ca_cert} -H 'Content-Type: application/json' --data @{sample} {url}", file=sys.stderr
    )
    os.environ.setdefault("HAMI_METRICS_BIND", "127.0.0.1:9090")  # local: metrics on loopback only
    os.environ.update(
        HAMI_WEBHOOK_BIND=args.bind, HAMI_WEBHOOK_TLS_CERT=str(files.cert), HAMI_WEBHOOK_TLS_KEY=str(files.key)
    )
    return _serve(args)


def sample_review() -> dict[str, Any]:
    """An AdmissionReview for a one-GPU Pod, as kube-apiserver would send it."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cuda-sample", "namespace": "default"},
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "resources": {"limits": limits, "requests": dict(limits)},
                }
            ],
        },
    }
    from app.preview.documents import admission_review

    return admission_review(pod, uid="705ab4f5-6393-11e8-b7cc-42010a800002")


def _settings(args: argparse.Namespace) -> Settings:
    """The settings from the environment, with ``--config`` as HAMI_DEVICE_CONFIG; SettingsError names the bad one."""
    from app.settings import Settings

    env = dict(os.environ)
    if args.config:
        env["HAMI_DEVICE_CONFIG"] = args.config
    return Settings.from_env(env)


def _default_scheduler() -> str:
    """HAMI_SCHEDULER_NAME's default: what the webhook routes to when its Deployment sets none."""
    from app.settings import KNOBS

    return str(next(knob.default for knob in KNOBS if knob.env == "HAMI_SCHEDULER_NAME"))


def _review(args: argparse.Namespace) -> int:
    from app.preview.documents import INVALID, Options, namespace_labels, preview
    from app.preview.scope import ScopeError, load_scope
    from app.settings import SettingsError
    from app.untrusted import UntrustedError

    try:
        settings = _settings(args)
    except SettingsError as exc:
        print(f"hami-webhook: invalid setting: {exc}", file=sys.stderr)
        return INVALID
    try:
        scope = load_scope(args.webhook_config)
    except ScopeError as exc:
        print(f"hami-webhook: invalid webhook configuration: {exc}", file=sys.stderr)
        return INVALID
    files = [*args.file, *args.filename]
    if not files:
        args.parser.error("give the manifests: -f FILE (- reads standard input)")
    documents: list[Any] = []
    for path in files:
        try:
            documents += read_documents(path)
        except (OSError, UntrustedError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            print(f"hami-webhook: cannot read {_shown(path)}: {reason}", file=sys.stderr)
            return INVALID
    for warning in settings.config_warnings:
        print(f"hami-webhook: warning: device config {warning}", file=sys.stderr)
    if scope.unevaluated:
        print(f"hami-webhook: note: {scope.unevaluated}", file=sys.stderr)
    inventory = _inventory(args, settings)
    if inventory is None:
        return INVALID
    options = Options(args.namespace, namespace_labels(documents), args.as_new, inventory)
    reviews = preview(documents, settings, scope, options)
    for document in reviews:
        for entry in document.entries:
            print(entry.line, file=sys.stderr)
            for note in entry.notes:
                print(note, file=sys.stderr)
    reviewed = [document for document in reviews if document.reviewed]
    if not reviewed:
        said = " and ".join(_shown(path) for path in files)
        print(
            f"hami-webhook: {said} {'hold' if len(files) > 1 else 'holds'} no Pod and no workload that creates Pods",
            file=sys.stderr,
        )
        return INVALID
    print(_printed(reviewed, args), end="")
    return max(document.outcome for document in reviews)


def _inventory(args: argparse.Namespace, settings: Settings) -> InventoryPort | None:
    """The inventory ``review`` checks against: the cluster's, a file's, or none; None after saying why it failed."""
    from app.admission.fits import NO_INVENTORY

    if not args.cluster and not args.inventory:
        return NO_INVENTORY
    from app.inventory.command import from_items, read_cluster, read_file
    from app.kube.errors import describe

    try:
        items = read_file(args.inventory) if args.inventory else read_cluster(args.kubeconfig, args.context)
    except Exception as exc:  # the API's refusal, an unreadable kubeconfig or file
        where = _shown(args.inventory) if args.inventory else "the cluster's Nodes"
        print(f"hami-webhook: cannot read {where}: {describe(exc)}", file=sys.stderr)
        return None
    loaded = from_items(items, settings.devices)
    if loaded.current() is None:
        print("hami-webhook: note: no Node registers a device: nothing is checked against them", file=sys.stderr)
    return loaded


def read_documents(path: str) -> list[Any]:
    """The documents of one manifest file (``-``: standard input), read within the size an admission may have."""
    from app.untrusted import MAX_YAML_BYTES, yaml_documents

    if path == "-":
        data = sys.stdin.buffer.read(MAX_YAML_BYTES + 1)
    else:
        with open(path, "rb") as file:
            data = file.read(MAX_YAML_BYTES + 1)
    return [d for d in yaml_documents(data) if d is not None]


def _shown(path: str) -> str:
    return "standard input" if path == "-" else path


def _printed(reviewed: list[DocumentReview], args: argparse.Namespace) -> str:
    """The patched objects as -o asks (default: one YAML document each, as the files had them), or the patch."""
    from app.kube.printing import as_list, dump, object_name

    if args.patch:
        return json.dumps(_patches(reviewed), indent=2) + "\n"
    patched = [document.patched for document in reviewed]
    if args.output == "name":
        return "".join(object_name(obj) + "\n" for obj in patched)
    if args.output:
        return dump(as_list(patched), args.output)
    return "".join("---\n" + dump(obj, "yaml") for obj in patched)


def _policies(args: argparse.Namespace) -> int:
    from app.preview.documents import INVALID
    from app.preview.policies import Inputs, PolicyError, render
    from app.preview.scope import ScopeError, load_scope
    from app.settings import SettingsError

    components = args.hami_component or []
    wrong = [c for c in components if len(c.split(":")) != 2 or not all(c.split(":"))]
    if wrong:
        print(f"hami-webhook: --hami-component {wrong[0]!r}: expected NAMESPACE:NAME", file=sys.stderr)
        return INVALID
    try:
        settings = _settings(args)
        scope = load_scope(args.webhook_config)
    except (SettingsError, ScopeError) as exc:
        print(f"hami-webhook: {exc}", file=sys.stderr)
        return INVALID
    try:
        files = render(Inputs(settings, scope.webhook, components))
    except PolicyError as exc:
        print(f"hami-webhook: {exc}", file=sys.stderr)
        return INVALID
    if not args.out:
        print("---\n".join(files.values()), end="")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text)
        print(f"hami-webhook: wrote {out / name}", file=sys.stderr)
    return 0


def _generate(args: argparse.Namespace) -> int:
    from app.preview.generated import ROOT, GeneratedError, expected, stale, write
    from app.preview.policies import Inputs, render
    from app.preview.scope import load_scope
    from app.settings import Settings

    try:
        files = expected(ROOT, render(Inputs(Settings.from_env({}), load_scope().webhook)))
    except GeneratedError as exc:
        print(f"hami-webhook: {exc}", file=sys.stderr)
        return 2
    changed = stale(ROOT, files) if args.check else write(ROOT, files)
    for path in changed:
        print(f"hami-webhook: {'stale' if args.check else 'wrote'} {path}", file=sys.stderr)
    return 1 if args.check and changed else 0


def _patches(reviewed: list[DocumentReview]) -> Any:
    """One document's patch as it is; several as one object keyed by document, so each is labelled."""
    if len(reviewed) == 1:
        return reviewed[0].patch
    keyed: dict[str, Any] = {}
    for index, document in enumerate(reviewed, 1):
        key = document.label if document.label not in keyed else f"{document.label} ({index})"
        keyed[key] = document.patch
    return keyed


PLUGIN_COMMANDS = ("check", "quota", "review", "nodes")
PLUGIN_USAGE = """Usage: kubectl hami COMMAND [flags]

Commands:
  check    say whether device Pods really go through hami-webhook, and what to fix (-n NS, -o json)
  quota    show each quota'd namespace's device quota: limit, used, held, free (-n NS | -A [-l SELECTOR])
  review   show what the API server and hami-webhook would do to the Pods and workloads of -f FILE, offline
  nodes    show the devices each Node registers for HAMi, per vendor and card type

Flags:
  --version   print the version and exit

Use "kubectl hami COMMAND --help" for a command's flags.
"""


def plugin(argv: Sequence[str] | None = None) -> int:
    """``kubectl-hami``: on PATH, ``kubectl hami quota|review|nodes ...`` runs the ``hami-webhook`` command of that name
    (kubectl finds plugins by their ``kubectl-`` name and passes every argument after ``hami`` through). As
    kubectl does: a usage error exits 1, with the command's usage."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(PLUGIN_USAGE, end="")
        return 0
    if args[0] not in (*PLUGIN_COMMANDS, "--version"):
        print(f'error: unknown command "{args[0]}" for "kubectl hami"', file=sys.stderr)
        print('Run "kubectl hami --help" for usage.', file=sys.stderr)
        return 1
    try:
        return main(args, prog="kubectl hami")
    except SystemExit as exc:  # argparse: --help exits 0, a usage error 2, which kubectl spells 1
        code = exc.code if isinstance(exc.code, int) else 1
        return 1 if code == 2 else code


if __name__ == "__main__":
    raise SystemExit(main())
