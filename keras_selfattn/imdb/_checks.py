"""Checks of the arrays that the demo's functions take: texts, labels,
probabilities and logits.

A wrong array (labels of shape `(n, 1)`, logits passed as probabilities,
labels of -1 and 1, a NaN) would otherwise broadcast or cast its way to a
wrong figure without a word. Each message names the argument, what was
expected and what was received, as `keras_selfattn._validation`'s do.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _received(argument: str, values: np.ndarray, detail: str) -> ValueError:
    return ValueError(
        f"Received an invalid value for argument `{argument}`, expected "
        f"{detail}. Received: {argument} of shape {values.shape}"
    )


def _one_dim(
    argument: str,
    values: Any,
    length: int | None,
    what: str,
    allow_empty: bool = False,
) -> np.ndarray:
    values = np.asarray(values)
    expected = f"a {'' if allow_empty else 'non-empty '}1-D array of {what}"
    if length is not None:
        expected += f", {length} of them (one per text)"
    empty = values.size == 0 and not allow_empty
    if values.ndim != 1 or empty or length not in (None, values.size):
        raise _received(argument, values, expected)
    return values


def _first_bad(values: np.ndarray, bad: np.ndarray) -> str:
    index = int(np.flatnonzero(bad)[0])
    value = values[index]
    value = value.item() if isinstance(value, np.generic) else value
    return f"the value {value!r} at index {index}"


def texts(values: Any, argument: str = "texts") -> list[str]:
    """`values` as a list of strings (empty allowed); otherwise a
    `ValueError` naming `argument`. One string is refused, not read as its
    characters."""
    if isinstance(values, (str, bytes)):
        raise ValueError(
            f"Received an invalid value for argument `{argument}`, expected a "
            "list of review strings (for one review, a list of one). Received: "
            f"{argument}={_short(values)}"
        )
    try:
        values = list(values)
    except TypeError:
        raise ValueError(
            f"Received an invalid value for argument `{argument}`, expected a "
            f"list of review strings. Received: {argument}={_short(values)}"
        ) from None
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(
                f"Received an invalid value for argument `{argument}`, expected "
                f"review strings. Received: {_short(value)} (of type "
                f"{type(value).__name__}) at index {index}"
            )
    return values


def _short(value: Any) -> str:
    """`repr(value)`, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def labels(
    values: Any,
    length: int | None = None,
    argument: str = "labels",
    allow_empty: bool = False,
):
    """`values` as a 1-D int array of 0/1 labels (bools too), `length` long
    when given, not empty unless `allow_empty`; otherwise a `ValueError`
    naming `argument`."""
    values = _one_dim(argument, values, length, "0/1 labels", allow_empty)
    if values.dtype == bool:
        return values.astype("int64")
    try:
        bad = ~np.isin(values, (0, 1))
    except TypeError:  # strings or objects
        bad = np.ones(values.shape, bool)
    if bad.any():
        raise ValueError(
            f"Received an invalid value for argument `{argument}`, expected "
            f"labels that are 0 or 1. Received: {_first_bad(values, bad)}"
        )
    return values.astype("int64")


def floats(
    values: Any,
    length: int | None = None,
    argument: str = "logits",
    unit_interval: bool = False,
) -> np.ndarray:
    """`values` as a 1-D float64 array of finite numbers (in [0, 1] with
    `unit_interval`), `length` long when given; otherwise a `ValueError`
    naming `argument`."""
    what = "probabilities in [0, 1]" if unit_interval else "finite numbers"
    values = _one_dim(argument, values, length, what)
    try:
        values = values.astype("float64")
    except (TypeError, ValueError):
        raise _received(argument, values, f"a 1-D array of {what}") from None
    bad = ~np.isfinite(values)
    if unit_interval:
        bad |= (values < 0.0) | (values > 1.0)
    if bad.any():
        raise ValueError(
            f"Received an invalid value for argument `{argument}`, expected "
            f"{what}. Received: {_first_bad(values, bad)}"
        )
    return values
