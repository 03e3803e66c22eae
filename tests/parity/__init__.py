"""The differential suite: HAMi's own webhook and this one answer the same AdmissionReviews (docs/rules.md#parity-with-hamis-code)."""
