"""Resource quantities as the API server decodes them: refused unless well-formed, written back by ``String()``.

kube-apiserver parses every ``resource.Quantity`` in a core/v1 ``ResourceList`` (Pod limits and requests,
ResourceQuota hard) when it decodes an object, rounds it up to milli precision (``SetDefaults_ResourceList``)
and writes it back: ``4000`` becomes ``4k``, ``0.5`` ``500m``, ``1024Mi`` ``1Gi``, ``100u`` ``1m``, while a text
``ParseQuantity`` finds already canonical is kept as written (``1.``, ``+1``, ``1500e0``). Webhooks see that
form, and so does every reader. This mirrors ``k8s.io/apimachinery/pkg/api/resource`` without the int64 caps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext

PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_NUMBER = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
_BINARY_SUFFIX = {exponent: suffix for suffix, exponent in _BINARY.items()}
MILLI = -3  # SetDefaults_ResourceList rounds every value up to this scale


class QuantityError(ValueError):
    """The text is not a quantity; the message is the decoder's."""

    def __init__(self) -> None:
        super().__init__(f"quantities must match the regular expression '{PATTERN}'")


@dataclass(frozen=True)
class _Parsed:
    value: Decimal
    format: str  # binary | decimal | exponent
    kept: bool  # ParseQuantity's fast path found the text canonical and cached it


def _parse(text: str) -> _Parsed:
    match = _NUMBER.match(text)
    if match is None or not (match.group(2) or match.group(3)):
        raise QuantityError()
    whole, fraction, suffix = match.group(2), match.group(3) or "", text[match.end() :]
    number = Decimal(f"{match.group(1)}{whole or '0'}.{fraction or '0'}")
    if suffix in _BINARY:
        exponent, fmt = _BINARY[suffix], "binary"
        value = number * (2**exponent)
    elif suffix in _DECIMAL or re.fullmatch(r"[eE][+-]?[0-9]+", suffix):
        exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
        fmt = "decimal" if suffix in _DECIMAL else "exponent"
        value = number.scaleb(exponent)
    else:
        raise QuantityError()
    digits = whole + fraction
    if fmt == "binary":
        kept = not fraction and 15 - len(whole) - int(exponent * 3 / 10) - 1 >= 0 and int(whole) & 7 != 0
    else:
        scale = exponent - len(fraction)
        kept = (
            len(digits) <= 18 and MILLI <= scale and scale % 3 == 0 and not digits.endswith("000") and digits[0] != "0"
        )
    return _Parsed(value, fmt, kept)


def canonical(text: str) -> str:
    """A ResourceList value as the API server stores it; QuantityError if it does not parse."""
    parsed = _parse(text)
    if parsed.kept:
        return text
    value, fmt = parsed.value, parsed.format
    with localcontext() as context:
        context.prec = 200
        if value.as_tuple().exponent < MILLI:  # type: ignore[operator]
            value = value.quantize(Decimal(1).scaleb(MILLI), rounding=ROUND_CEILING if value >= 0 else ROUND_FLOOR)
        if fmt == "binary" and (abs(value) < 1024 or value != value.to_integral_value()):
            fmt = "decimal"
        if value == 0:
            return "0"
        sign = "-" if value < 0 else ""
        if fmt == "binary":
            amount, exponent = int(abs(value)), 0
            while amount % 1024 == 0 and exponent < 60:
                amount, exponent = amount // 1024, exponent + 10
            return f"{sign}{amount}{_BINARY_SUFFIX.get(exponent, '')}"
        _, digit_tuple, power = abs(value).normalize().as_tuple()
    assert isinstance(power, int)
    shift = power % 3  # down to a multiple of 3, as AsCanonicalBytes does
    mantissa = int("".join(map(str, digit_tuple))) * 10**shift
    power -= shift
    if fmt == "exponent":
        return f"{sign}{mantissa}" + (f"e{power}" if power else "")
    suffix = _DECIMAL_SUFFIX.get(power)
    return f"{sign}{mantissa}{suffix}" if suffix is not None else f"{sign}{mantissa}e{power}"
