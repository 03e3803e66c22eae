from __future__ import annotations

import pytest

from app.quantity import QuantityError, exact_int, parse, value


@pytest.mark.parametrize(
    ("raw", "rounded", "whole"),
    [
        pytest.param("500m", 1, None, id="milli"),
        pytest.param("16Gi", 17179869184, 17179869184, id="binary-suffix"),
        pytest.param("16.0Gi", 17179869184, 17179869184, id="fractional-form-of-whole"),
        pytest.param("1e3", 1000, 1000, id="exponent"),
        pytest.param("0.5", 1, None, id="half"),
        pytest.param("1.5", 2, None, id="one-and-a-half"),
        pytest.param(4, 4, 4, id="json-int"),
        pytest.param("-2", -2, -2, id="negative"),
    ],
)
def test_value_and_exact(raw: object, rounded: int, whole: int | None) -> None:
    assert value(raw) == rounded
    assert exact_int(raw) == whole


@pytest.mark.parametrize("raw", ["", "abc", "1Qi", "nan", "Infinity", None, True, [1]])
def test_not_quantities(raw: object) -> None:
    with pytest.raises(QuantityError):
        parse(raw)
