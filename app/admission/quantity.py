"""Kubernetes resource quantities: the one parser, with Kubernetes' grammar and hard bounds.

The grammar is ``resource.Quantity``'s (k8s.io/apimachinery, quantity.go and suffix.go),
ASCII only: a sign, digits with an optional decimal point (``5.`` and ``.5`` included),
then one suffix: binary ``Ki``..``Ei``, decimal ``n u m k M G T P E``, or an exponent
``e``/``E`` with a signed integer. Like Kubernetes, a value is kept to the nano and a finer
one is rounded away from zero, so every quantity is a whole number of nanos.

Unlike Kubernetes, anything ``Quantity.Value()`` cannot return (magnitude beyond int64)
is refused, and is found out from the length of the digits and the exponent before any
arithmetic: the cost of a quantity is proportional to its length whatever it says.
(Kubernetes silently caps ``9Ei`` at 2^63-1 and wraps exponents outside int32; both are
refused here.)

HAMi reads quantities two ways, both kept here so every vendor agrees: ``value``
(rounded up away from zero, so ``500m`` is 1) and ``whole`` (the integer when there is
no fraction, so ``1.5`` and ``500m`` are not whole and ``16Gi`` is 17179869184).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from app.untrusted import shown

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
NANO = 10**9
MAX_NANOS = INT64_MAX * NANO

_QUANTITY = re.compile(r"([+-]?)([0-9]*+)(?:\.([0-9]*+))?+([eEinumkKMGTP]*+[+-]?+[0-9]*+)")
_EXPONENT = re.compile(r"[+-]?+[0-9]++")
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_KEPT_DECIMALS = 70
"""Digits finer than 10^-70 only say "a little more": with a factor of at most 2^60 and a
result kept to 10^-9, truncating there and rounding up can never change the answer."""


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity, or one no int64 can hold."""


@dataclass(frozen=True, order=True)
class Quantity:
    """An exact amount in nanos (10^-9), within ±(2^63-1) units."""

    nanos: int

    @property
    def value(self) -> int:
        """Kubernetes' ``Value()``: rounded up to an integer, away from zero (``500m`` is 1, ``-0.5`` is -1)."""
        whole, rest = divmod(abs(self.nanos), NANO)
        whole += bool(rest)
        return whole if self.nanos >= 0 else -whole

    @property
    def whole(self) -> int | None:
        """The integer when there is no fraction (``16Gi``, ``1e3``, ``2.0``), else None."""
        whole, rest = divmod(self.nanos, NANO)
        return None if rest else whole

    def __str__(self) -> str:
        whole, rest = divmod(abs(self.nanos), NANO)
        text = f"{whole}.{rest:09d}".rstrip("0").rstrip(".")
        return f"-{text}" if self.nanos < 0 else text


def parse(raw: object) -> Quantity:
    """Parse a quantity as written in a Pod: a string, or a JSON number."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise QuantityError(f"not a valid quantity: expected a string or a number, got {type(raw).__name__}")
    if isinstance(raw, int):
        if abs(raw) > INT64_MAX:
            raise QuantityError(_out_of_range(raw))
        return Quantity(raw * NANO)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise QuantityError(f"not a valid quantity: {shown(raw)}")
        return _parse_text(repr(raw), raw)
    if len(raw) <= _CACHED_LENGTH:
        return _parse_short(raw)
    return _parse_text(raw, raw)


_CACHED_LENGTH = 32
"""Longer than any sensible quantity; a hostile long string is parsed each time and never kept."""


@functools.lru_cache(maxsize=4096)
def _parse_short(text: str) -> Quantity:
    """Cached: a review reads each quantity several times (validation, vendors, quota) and Pods repeat a few
    values. Bounded to 4096 strings of at most 32 characters; refusals raise and are not cached."""
    return _parse_text(text, text)


def _parse_text(text: str, raw: object) -> Quantity:
    match = _QUANTITY.fullmatch(text)
    if not text or match is None:
        raise QuantityError(f"not a valid quantity: {shown(raw)}")
    sign, integer, fraction, suffix = match.groups(default="")
    binary = suffix in _BINARY_SUFFIXES
    exponent = _BINARY_SUFFIXES[suffix] if binary else _decimal_exponent(suffix, raw)
    if not integer and not fraction:
        # Kubernetes reads a number with no digits ("", "+", ".", "m", "Ki") as 0, except where
        # its slow path needs a digit: a decimal scale below nano ("e-10").
        if not binary and exponent < -9:
            raise QuantityError(f"not a valid quantity: {shown(raw)}")
        return Quantity(0)
    nanos = _magnitude(integer + fraction, (0 if binary else exponent) - len(fraction), exponent if binary else 0, raw)
    return Quantity(-nanos if sign == "-" else nanos)


def _decimal_exponent(suffix: str, raw: object) -> int:
    """The power of ten a decimal suffix stands for; ``e``/``E`` takes a signed integer that must fit int32."""
    if suffix in _DECIMAL_SUFFIXES:
        return _DECIMAL_SUFFIXES[suffix]
    digits = suffix[1:]
    if suffix[:1] not in ("e", "E") or not _EXPONENT.fullmatch(digits):
        raise QuantityError(f"not a valid quantity: {shown(raw)}")
    significant = digits.lstrip("+-").lstrip("0")
    if len(significant) > 10 or abs(exponent := int(digits)) > INT32_MAX:
        raise QuantityError(_out_of_range(raw))
    return exponent


def _magnitude(digits: str, power10: int, power2: int, raw: object) -> int:
    """``digits`` x 10^power10 x 2^power2 in nanos, rounded up; refused beyond int64 before any big arithmetic."""
    significant = digits.lstrip("0")
    trimmed = significant.rstrip("0")
    if not trimmed:
        return 0
    power10 += len(significant) - len(trimmed)
    order = len(trimmed) + power10  # the amount is below 10^order x 2^power2 and at least 10^(order-1)
    if order - 1 >= 19:
        raise QuantityError(_out_of_range(raw))
    if order + 19 < -9:  # below 10^-9 even times 2^60: one nano, as Kubernetes rounds it
        return 1
    finer = False
    if power10 < -_KEPT_DECIMALS:
        cut = -_KEPT_DECIMALS - power10
        trimmed, finer, power10 = trimmed[:-cut], True, -_KEPT_DECIMALS
    scaled = int(trimmed or "0") << power2
    if power10 + 9 >= 0:
        nanos = scaled * 10 ** (power10 + 9)
    else:
        nanos, rest = divmod(scaled, 10 ** -(power10 + 9))
        nanos += bool(rest or finer)
    if nanos > MAX_NANOS:
        raise QuantityError(_out_of_range(raw))
    return nanos


def _out_of_range(raw: object) -> str:
    return f"out of range: {shown(raw)} is beyond ±{INT64_MAX}, the most a Kubernetes quantity's Value() can hold"
