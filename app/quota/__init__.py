"""Namespace device quota (docs/rules.md#d-namespace-quota): demand arithmetic, limits, the Pod/ResourceQuota feed,
the Lease ledger and the port the review asks through.

Modules: ``amounts`` (the resource arithmetic), ``demand`` (a Pod's demand per vendor), ``limits`` (ResourceQuota
keys, the fit check), ``ledger`` (the ledger's encoding), ``decision`` (the pure decision); ``feed`` (the Feed:
list + watch, per process), ``stream`` (the list + watch machinery), ``tables`` (what the streams keep),
``lease`` (the ledger Leases' compare-and-swap reads and writes), ``committer`` (the Committer: a process's
tickets decided and written per namespace, grants closed when due), ``ledger_quota`` (LedgerQuota, the real
port: what an admission answers alone, the ticket it queues otherwise), ``contact`` (the API server probe:
unready and shedding connections when it is lost), ``state`` (what a process keeps per namespace), ``seams``
(the ports: feed, ledger, clock), ``startup`` (the port built from settings), ``port`` (the seam, the
refusal messages, and QuotaOff).
"""

from app.quota.demand import Demand, demands
from app.quota.port import FITS, QUOTA_REASON, QuotaOff, QuotaPort, QuotaUnavailable, Verdict

__all__ = ["FITS", "QUOTA_REASON", "Demand", "QuotaOff", "QuotaPort", "QuotaUnavailable", "Verdict", "demands"]
