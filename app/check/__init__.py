"""``hami-webhook check`` (``kubectl hami check``): whether device Pods really go through the webhook, and if not,
what to fix. ``core`` judges what was read (pure), ``reading`` reads it (the API calls, the dry runs, the TLS
probe), ``command`` is the CLI; the webhook's master publishes ``core.switched_since`` as a gauge.
"""
