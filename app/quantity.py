"""Kubernetes resource quantities, parsed with the official client's parser.

HAMi reads quantities two ways: "Value" (rounded up to an integer, so ``500m`` is 1)
and "exact integer" (a whole number, so ``1.5`` and ``500m`` are refused). Both live
here so every vendor agrees on them.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity

INT32_MAX = 2**31 - 1


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


def parse(raw: object) -> Decimal:
    """Parse a quantity as written in a Pod (string, int or float)."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise QuantityError(f"not a quantity: {raw!r}")
    return _parse(raw)


@functools.lru_cache(maxsize=4096, typed=True)
def _parse(raw: str | int | float) -> Decimal:
    """Cached: a review reads each quantity more than once (validation, vendors, quota), and Pods
    repeat the same few values; Decimals are immutable, so sharing one is safe."""
    try:
        number = parse_quantity(raw)
    except (ValueError, ArithmeticError) as exc:
        raise QuantityError(f"not a quantity: {raw!r}") from exc
    if not number.is_finite():
        raise QuantityError(f"not a quantity: {raw!r}")
    return number


def value(raw: object) -> int:
    """HAMi's ``Value()``: the quantity rounded up to an integer."""
    return math.ceil(parse(raw))


def exact_int(raw: object) -> int | None:
    """The quantity as an integer when it is a whole number, else None."""
    number = parse(raw)
    if number != number.to_integral_value():
        return None
    return int(number)
