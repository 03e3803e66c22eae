"""Benchmarks that print figures: ``python -m bench`` (see README "Performance")."""
