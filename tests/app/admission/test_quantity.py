"""The quantity parser: Kubernetes' grammar and rounding (cases from apimachinery's quantity_test.go), hard bounds."""

from __future__ import annotations

import time

import pytest

from app.admission.quantity import INT64_MAX, QuantityError, parse


@pytest.mark.parametrize(
    ("raw", "rounded", "whole"),
    [
        pytest.param("500m", 1, None, id="milli"),
        pytest.param("16Gi", 17179869184, 17179869184, id="binary-suffix"),
        pytest.param("16.0Gi", 17179869184, 17179869184, id="fractional-form-of-whole"),
        pytest.param("1e3", 1000, 1000, id="exponent"),
        pytest.param("1E3", 1000, 1000, id="exponent-capital"),
        pytest.param("1.3E+6", 1300000, 1300000, id="exponent-plus"),
        pytest.param("1e-3", 1, None, id="exponent-minus"),
        pytest.param("0.5e-1", 1, None, id="fraction-exponent"),
        pytest.param("0.5", 1, None, id="half"),
        pytest.param("1.5", 2, None, id="one-and-a-half"),
        pytest.param(".5", 1, None, id="leading-point"),
        pytest.param("5.", 5, 5, id="trailing-point"),
        pytest.param("1.G", 10**9, 10**9, id="point-then-suffix"),
        pytest.param("+1", 1, 1, id="plus"),
        pytest.param("-2", -2, -2, id="negative"),
        pytest.param("-0.5", -1, None, id="negative-rounds-away-from-zero"),
        pytest.param("0", 0, 0, id="zero"),
        pytest.param("-0", 0, 0, id="minus-zero"),
        pytest.param("000", 0, 0, id="zeros"),
        pytest.param("0e999999", 0, 0, id="zero-with-big-exponent"),
        pytest.param("100.035k", 100035, 100035, id="decimal-kilo"),
        pytest.param("9E", 9 * 10**18, 9 * 10**18, id="exa"),
        pytest.param("1E", 10**18, 10**18, id="E-alone-is-exa"),
        pytest.param("3Ei", 3 * 2**60, 3 * 2**60, id="exbi"),
        pytest.param("100.035Ki", 102436, None, id="fractional-binary"),
        pytest.param("0.000000000001Ki", 1, None, id="tiny-binary"),
        pytest.param("3.001n", 1, None, id="nano"),
        pytest.param("0.9n", 1, None, id="below-nano-rounds-up"),
        pytest.param("1.0000000000000000000000000000001", 2, None, id="long-fraction-rounds-up"),
        pytest.param("1" + "0" * 5000 + "e-5000", 1, 1, id="long-digits-small-value"),
        pytest.param("0." + "0" * 5000 + "1", 1, None, id="long-leading-zeros"),
        pytest.param("1e-2147483647", 1, None, id="smallest-exponent"),
        pytest.param("9223372036854775807", INT64_MAX, INT64_MAX, id="int64-max"),
        pytest.param("-9223372036854775807", -INT64_MAX, -INT64_MAX, id="int64-min-plus-one"),
        pytest.param("9223372036854775806.5", INT64_MAX, None, id="rounds-up-to-int64-max"),
        pytest.param("7Ei", 7 * 2**60, 7 * 2**60, id="largest-exbi"),
        pytest.param(".", 0, 0, id="point-is-zero"),
        pytest.param("+", 0, 0, id="sign-is-zero"),
        pytest.param("m", 0, 0, id="suffix-is-zero"),
        pytest.param("Ki", 0, 0, id="binary-suffix-is-zero"),
        pytest.param(4, 4, 4, id="json-int"),
        pytest.param(1.5, 2, None, id="json-float"),
        pytest.param(1e16, 10**16, 10**16, id="json-float-exponent"),
    ],
)
def test_value_and_whole(raw: object, rounded: int, whole: int | None) -> None:
    amount = parse(raw)
    assert amount.value == rounded
    assert amount.whole == whole


@pytest.mark.parametrize(
    "raw",
    [
        "",
        " 1",
        "1 ",
        "1\n",
        "abc",
        "1Qi",
        "1.5.5",
        "1.1.M",
        "1+1.0M",
        "0.1mi",
        "0.1am",
        ".5i",
        "1i",
        "1K",
        "1e",
        "1e+",
        "-3.01e-",
        "1ee3",
        "1e3.5",
        "1Ki1",
        "1e3Ki",
        "0x10",
        "1_000",
        "e-10",
        "١",
        "1٠",
        "１",
        "²",
        "nan",
        "NaN",
        "Infinity",
        "inf",
        float("inf"),
        float("nan"),
        None,
        True,
        [1],
        {"a": 1},
    ],
)
def test_not_quantities(raw: object) -> None:
    with pytest.raises(QuantityError, match="not a valid quantity"):
        parse(raw)


@pytest.mark.parametrize(
    "raw",
    [
        "9223372036854775808",
        "9223372036854775807.5",
        "-9223372036854775808.5",
        "8Ei",
        "9Ei",
        "1e19",
        "10E",
        "12E",
        "1e2147483648",
        "1e-2147483648",
        "1e99999999999999999999",
        "1e1000000",
        "9" * 5000,
        "1" + "0" * 100_000 + ".5",
        2**63,
        2**4000,
        1e300,
    ],
)
def test_out_of_int64_is_refused(raw: object) -> None:
    with pytest.raises(QuantityError, match="out of range"):
        parse(raw)


@pytest.mark.parametrize(
    "raw",
    ["1e999999999", "9" * 1_000_000, "0." + "0" * 1_000_000 + "1", "1" * 1_000_000 + "x", "." + "9" * 1_000_000],
    ids=["huge-exponent", "million-digits", "million-zeros", "million-digits-then-garbage", "million-decimals"],
)
def test_cost_is_bounded_by_length(raw: str) -> None:
    """A megabyte-long quantity is answered in well under a second, whatever it says."""
    started = time.perf_counter()
    try:
        parse(raw)
    except QuantityError as exc:
        assert len(str(exc)) < 300, "the echoed value is cut short"
    assert time.perf_counter() - started < 1.0


def test_error_message_echoes_a_bounded_value() -> None:
    with pytest.raises(QuantityError) as caught:
        parse("x" * 10_000)
    assert str(caught.value) == "not a valid quantity: " + repr("x" * 60) + "... (10000 characters)"
