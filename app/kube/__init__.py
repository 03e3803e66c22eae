"""Kubernetes API access both tools share: the client configuration, the API error, the back-off policy.

The webhook (``app.quota``) and ``certgen`` import these, so one image loads its client one way, reads the
server's Status one way and retries on one policy. Importing the package itself loads nothing heavy.
"""
