"""The offline `hami-webhook review`: manifests in, what the API server and the webhook would do out."""
