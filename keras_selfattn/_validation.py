"""Eager argument checks shared by the kernel and the layers.

Every message is in Keras's voice: it names the argument, what was expected
and what was received.
"""

from __future__ import annotations

import math
from typing import Any


def invalid(argument: str, expected: str, received: Any) -> ValueError:
    """Returns the package's `ValueError` for one bad argument."""
    return ValueError(
        f"Received an invalid value for argument `{argument}`, expected "
        f"{expected}. Received: {argument}={received!r}"
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_positive_int(argument: str, value: Any, allow_none=False) -> None:
    if allow_none and value is None:
        return
    if not _is_int(value) or value <= 0:
        expected = "a positive integer" + (" or `None`" if allow_none else "")
        raise invalid(argument, expected, value)


def check_rate(argument: str, value: Any) -> None:
    """A dropout rate: a float in [0, 1)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0.0 <= value < 1.0
    ):
        raise invalid(argument, "a float in the range [0, 1)", value)


def check_scale(value: Any) -> None:
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value < math.inf
    ):
        raise invalid("scale", "a positive, finite float or `None`", value)


def check_rank(argument: str, shape, rank: int, layout: str) -> None:
    """Checks that a tensor's `shape` has `rank` dimensions."""
    if len(shape) != rank:
        raise invalid(
            argument,
            f"a {rank}-D tensor of shape {layout}",
            f"<tensor of shape {tuple(shape)}>",
        )


def check_chunk_size(chunk_size: Any, dropout: float) -> None:
    """A positive int or None; the chunked path has no dropout on the weights."""
    check_positive_int("chunk_size", chunk_size, allow_none=True)
    if chunk_size is not None and dropout > 0.0:
        raise ValueError(
            "The chunked path (`chunk_size`) does not support dropout on the "
            "attention weights. Set `dropout=0.0` or `chunk_size=None`. "
            f"Received: chunk_size={chunk_size}, dropout={dropout}"
        )
