"""Namespace device quota (docs/rules.md#d-namespace-quota): demand arithmetic, limits, the Pod/ResourceQuota feed,
the Lease ledger, and LedgerQuota: the admission core's quota port, implemented.

Modules: ``amounts`` (the resource arithmetic), ``demand`` (a Pod's demand per vendor), ``limits`` (ResourceQuota
keys, the fit check), ``ledger`` (the ledger's encoding), ``decision`` (the pure decision); ``feed`` (the Feed:
list + watch, per process), ``stream`` (the list + watch machinery), ``tables`` (what the streams keep),
``lease`` (the ledger Leases' compare-and-swap reads and writes), ``committer`` (the Committer: a process's
tickets decided and written per namespace, grants closed when due), ``ledger_quota`` (LedgerQuota, the real
port: what an admission answers alone, the ticket it queues otherwise), ``contact`` (the API server probe:
unready and shedding connections when it is lost), ``state`` (what a process keeps per namespace), ``seams``
(the ports: feed, ledger, clock), ``startup`` (the port built from settings), ``undecided`` (why quota could
not be decided). The port itself, and QuotaOff, are the admission core's (app/admission/ports.py).
"""

from app.quota.demand import Demand, demands

__all__ = ["Demand", "demands"]
