"""The offline commands: `hami-webhook review` (manifests in, what the API server and the webhook would do out)
and `hami-webhook policies` (what the API server runs beside the webhook, written from the same lists)."""
