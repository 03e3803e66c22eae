"""Quota's pure core: amounts, a Pod's demand, limits, the ledger's encoding, the decision, where a namespace
stands. No I/O, no clock, no Kubernetes client: the feed (app/quota/feed/) and the top of app/quota call it."""
