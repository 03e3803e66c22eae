"""certgen: the CA, serving certificate and caBundle wiring for hami-webhook.

`certgen.pki` decides what to keep and what to issue, `certgen.certificates` issues and reads certificates
(neither touches Kubernetes), `certgen.local` keeps them as files, `certgen.resources` keeps them in Secrets and
webhook configurations, `certgen.cli` is the command line.
"""
