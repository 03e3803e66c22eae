"""certgen: the CA, serving certificate and caBundle wiring for hami-webhook.

`certgen.pki` makes certificates (no Kubernetes), `certgen.resources` keeps them in
Secrets and webhook configurations, `certgen.cli` is the command line.
"""
