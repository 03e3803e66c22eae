"""``hami-webhook nodes`` (``kubectl hami nodes``): the devices each Node registers, per vendor and card type, as
the webhook's inventory reads them; and the inventories ``review`` checks against: the live cluster's (``--cluster``)
or a file's (``--inventory``: ``kubectl get nodes -o json``). Reads only, with the caller's kubeconfig (RBAC: list
nodes). The Kubernetes client loads only when the cluster is read."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from app.admission.fits import Fitting, Inventory, Registered, fitting
from app.inventory.store import Store
from app.kube.flags import add_kubeconfig_flags

FAILED = 1
HEADER = ("NODE", "VENDOR", "TYPE", "DEVICES", "HEALTHY", "MEMORY", "CORES", "SPLIT", "MODE", "NUMA")


class Loaded:
    """An InventoryPort over a Store filled once (the commands'): what the webhook's would hold for those Nodes."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def current(self) -> Inventory | None:
        return self.store.current()

    def status(self) -> dict[str, Any]:
        return {"inventory": "loaded once"}


def from_items(items: list[dict[str, Any]], vendors: Sequence[object]) -> Loaded:
    store = Store(fitting(vendors))
    store.listed(None, items, "")
    return Loaded(store)


def read_cluster(kubeconfig: str | None, context: str | None) -> list[dict[str, Any]]:
    """Every Node's metadata (PartialObjectMetadata, paged), with the caller's kubeconfig. Raises on failure."""
    import orjson
    from kubernetes import client

    from app.inventory.startup import LIST_ACCEPT
    from app.kube.config import load_configuration

    configuration = load_configuration(kubeconfig, context)
    with client.ApiClient(configuration) as api:
        nodes = client.CoreV1Api(api)
        items: list[dict[str, Any]] = []
        cont = None
        while True:
            response: Any = nodes.list_node(
                limit=500, _continue=cont, _headers={"Accept": LIST_ACCEPT}, _preload_content=False,
                _request_timeout=(5, 60),
            )  # fmt: skip
            page = orjson.loads(response.data)
            items += page.get("items") or []
            cont = page["metadata"].get("continue")
            if not cont:
                return items


def read_file(path: str) -> list[dict[str, Any]]:
    """The Nodes of ``kubectl get nodes -o json|yaml`` saved in ``path`` (a List or NodeList, or Nodes one by one)."""
    from app.untrusted import MAX_YAML_BYTES, yaml_documents

    with open(path, "rb") as file:
        documents = yaml_documents(file.read(MAX_YAML_BYTES + 1))
    items: list[dict[str, Any]] = []
    for document in documents:
        if isinstance(document, dict) and isinstance(document.get("items"), list):
            items += [item for item in document["items"] if isinstance(item, dict)]
        elif isinstance(document, dict) and document.get("kind") == "Node":
            items.append(document)
    return items


def rows(items: Iterable[dict[str, Any]], vendors: Sequence[Fitting]) -> list[tuple[str, ...]]:
    """One row per Node, vendor and card type: how many devices, how many healthy, the largest memory and cores,
    the split count, the modes and the NUMA nodes; an annotation HAMi cannot read gets a row saying so."""
    found: list[tuple[str, ...]] = []
    for item in sorted(items, key=lambda i: str((i.get("metadata") or {}).get("name") or "")):
        meta = item.get("metadata") or {}
        name, annotations = str(meta.get("name") or ""), meta.get("annotations") or {}
        for vendor in vendors:
            raw = annotations.get(vendor.register_annotation)
            if not isinstance(raw, str):
                continue
            try:
                shape = [device for device, _ in vendor.decode(raw, name)]
            except ValueError as exc:
                found.append((name, vendor.key, f"<unreadable: {exc}>", "0", "0", "", "", "", "", ""))
                continue
            for card in sorted({d.type for d in shape}):
                found.append((name, vendor.key, card or "<none>", *_summary([d for d in shape if d.type == card])))
    return found


def _summary(devices: list[Registered]) -> tuple[str, ...]:
    def listed(values: Iterable[object]) -> str:
        return ",".join(str(v) for v in sorted(set(values), key=str))

    return (
        str(len(devices)),
        str(sum(d.health for d in devices)),
        f"{max(d.memory for d in devices)}Mi",
        str(max(d.cores for d in devices)),
        listed(d.count for d in devices),
        listed(d.mode or "-" for d in devices),
        listed(d.numa for d in devices),
    )


def add_nodes_command(commands: Any, devices: Callable[[argparse.Namespace], Sequence[object]]) -> None:
    """Register ``nodes`` on the CLI's subcommands; ``devices`` reads the device backends for the parsed arguments."""
    nodes = commands.add_parser(
        "nodes",
        help="show the devices each Node registers for HAMi, per vendor and card type (reads only)",
        description="Print, per Node, vendor and card type, the devices HAMi's device plugins register (the "
        "register annotations HAMi's scheduler reads): how many, how many healthy, the largest memory and cores, "
        "the split count, the modes and NUMA nodes. What the webhook's fits-nowhere check compares a Pod with. "
        "Reads the Nodes' metadata with your kubeconfig (RBAC: list nodes), or a file of "
        "`kubectl get nodes -o json`. Exit 0 printed (or nothing found), 1 error.",
    )
    nodes.add_argument("-f", "--filename", metavar="FILE", help="read the Nodes from FILE instead of the cluster")
    nodes.add_argument("--no-headers", action="store_true", help="print the table without its header line")
    add_kubeconfig_flags(nodes)
    nodes.add_argument(
        "--config", help="HAMi device config YAML, or its ConfigMap (default: HAMI_DEVICE_CONFIG or the chart's)"
    )
    nodes.set_defaults(run=lambda args: run(args, devices))


def run(args: argparse.Namespace, devices: Callable[[argparse.Namespace], Sequence[object]]) -> int:
    from app.kube.errors import describe
    from app.kube.printing import nothing_found, table

    try:
        items = read_file(args.filename) if args.filename else read_cluster(args.kubeconfig, args.context)
    except Exception as exc:  # the API's refusal, an unreadable kubeconfig or file: said in one line
        print(f"error: {describe(exc)}", file=sys.stderr)
        return FAILED
    found = rows(items, fitting(devices(args)))
    if not found:
        print(nothing_found(None), file=sys.stderr)
        return 0
    print(table(HEADER, found, headers=not args.no_headers), end="")
    return 0
