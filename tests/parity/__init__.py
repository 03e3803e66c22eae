"""The differential suite: HAMi's own webhook and this one answer the same AdmissionReviews.

What it compares and the deviations it accepts: docs/rules.md#parity-with-hamis-code.
"""
