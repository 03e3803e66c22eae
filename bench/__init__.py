"""Benchmarks that print figures: ``python -m bench`` (see docs/performance.md)."""
