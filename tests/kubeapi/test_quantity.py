"""Quantities in canonical form, as kube-apiserver writes them (tests/realkube checks the same table on 1.20)."""

from __future__ import annotations

import pytest

from tests.kubeapi.quantity import QuantityError, canonical

# What Quantity.String() makes of each text; tests/realkube/test_apiserver.py sends the non-negative ones
# through a real kube-apiserver.
CANONICAL = {
    "4000": "4k",
    "8000": "8k",
    "1000": "1k",
    "1500": "1500",
    "1.5k": "1500",
    "0.5": "500m",
    "1.5": "1500m",
    ".5": "500m",
    "1.000": "1",
    "0.001": "1m",
    "1000m": "1",
    "1500m": "1500m",
    "100u": "1m",  # rounded up to milli
    "100n": "1m",
    "1.0000000001": "1001m",
    "0": "0",
    "00": "0",
    "0.0": "0",
    "30": "30",
    "100M": "100M",
    "1e3": "1e3",
    "1E3": "1E3",
    "10e2": "1e3",
    "12e6": "12e6",
    "1e-3": "1e-3",
    "5e-1": "500e-3",
    "1024Mi": "1Gi",
    "1536Mi": "1536Mi",
    "0.5Gi": "512Mi",
    "1000Ki": "1000Ki",
    "0.1Ki": "102400m",
    "1023": "1023",
    "2048": "2048",
    # Texts ParseQuantity finds canonical are kept exactly as written.
    "1.": "1.",
    "+1": "+1",
    "1500e0": "1500e0",
    "1e0": "1e0",
    "1Ki": "1Ki",
    "3Ki": "3Ki",
    "-0.5": "-500m",
}
INVALID = ["1x", ".", "", "abc", "1ki", "1e", "1.2.3", "--1", "1 "]


@pytest.mark.parametrize(("text", "expected"), CANONICAL.items())
def test_canonical(text: str, expected: str) -> None:
    assert canonical(text) == expected


@pytest.mark.parametrize("text", INVALID)
def test_invalid(text: str) -> None:
    with pytest.raises(QuantityError, match="quantities must match the regular expression"):
        canonical(text)
