"""Eager argument checks shared by the kernel and the layers.

Every message is in Keras's voice: it names the argument, what was expected
and what was received.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import keras
import numpy as np


def invalid(argument: str, expected: str, received: Any) -> ValueError:
    """Returns the package's `ValueError` for one bad argument."""
    return ValueError(
        f"Received an invalid value for argument `{argument}`, expected "
        f"{expected}. Received: {argument}={received!r}"
    )


def _is_int(value: Any) -> bool:
    """A Python or NumPy integer (`np.int64(4)` too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    """A Python or NumPy number (`np.float32(0.1)` too, as Keras takes it),
    not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_positive_int(argument: str, value: Any, allow_none=False) -> None:
    if allow_none and value is None:
        return
    if not _is_int(value) or value <= 0:
        expected = "a positive integer" + (" or `None`" if allow_none else "")
        raise invalid(argument, expected, value)


def check_bool(argument: str, value: Any, allow_none=False) -> None:
    """`True` or `False` (a Python or NumPy bool), not a truthy stand-in.

    A string such as `"no"` is truthy: taken as given, it would turn on what
    the caller meant to turn off.
    """
    if allow_none and value is None:
        return
    if not isinstance(value, (bool, np.bool_)):
        raise invalid(
            argument, "a boolean" + (" or `None`" if allow_none else ""), value
        )


# The largest seed that every backend's random generator takes: PyTorch's
# takes a signed 32-bit seed, JAX's an unsigned 32-bit one.
MAX_SEED = 2**31 - 1


def check_seed(value: Any) -> int | None:
    """A dropout seed: `None` or an integer in `[0, MAX_SEED]`. Returns it as
    a Python int (Keras's `SeedGenerator` refuses NumPy's), or None."""
    check_int_in_range("seed", value, 0, MAX_SEED, allow_none=True)
    return None if value is None else int(value)


def check_rate(argument: str, value: Any) -> None:
    """A dropout rate: a float in [0, 1)."""
    if not _is_real(value) or not 0.0 <= value < 1.0:
        raise invalid(argument, "a float in the range [0, 1)", value)


def check_floating(argument: str, tensor) -> None:
    """Checks that `tensor` (or a `KerasTensor`) is a floating-point one."""
    dtype = keras.backend.standardize_dtype(tensor.dtype)
    if "float" not in dtype:
        raise invalid(argument, "a floating-point tensor", f"<tensor of dtype {dtype}>")


def check_same_batch(argument: str, shape, other: str, other_shape) -> None:
    """Checks that two tensors' batch sizes agree, where both are known."""
    batch, other_batch = shape[0], other_shape[0]
    if batch is not None and other_batch is not None and batch != other_batch:
        raise invalid(
            argument,
            f"the same batch size as `{other}` ({other_batch})",
            f"<tensor of shape {tuple(shape)}>",
        )


def check_rank(argument: str, shape, rank: int, layout: str) -> None:
    """Checks that a tensor's `shape` has `rank` dimensions."""
    if len(shape) != rank:
        raise invalid(
            argument,
            f"a {rank}-D tensor of shape {layout}",
            f"<tensor of shape {tuple(shape)}>",
        )


def check_positive_float(argument: str, value: Any, allow_none=False) -> None:
    """A positive, finite number (an int or a float, not a bool)."""
    if allow_none and value is None:
        return
    if not _is_real(value) or not 0 < value < math.inf:
        expected = "a positive, finite float" + (" or `None`" if allow_none else "")
        raise invalid(argument, expected, value)


def check_non_negative_float(argument: str, value: Any) -> None:
    """Zero or a positive, finite number."""
    if not _is_real(value) or not 0 <= value < math.inf:
        raise invalid(argument, "a non-negative, finite float", value)


def check_known_last_dim(argument: str, shape, what: str) -> None:
    """Checks that the last dimension of `shape` is known (not None)."""
    if shape[-1] is None:
        raise invalid(
            argument, f"a known last ({what}) dimension", f"<shape {tuple(shape)}>"
        )


def check_paths(
    chunk_size: Any = None, flash_attention: Any = None, dropout: float = 0.0
) -> None:
    """Checks that the attention paths asked for can be honoured together.

    `chunk_size` asks for the chunked path and `flash_attention=True` for the
    backend's fused kernel: not both. Neither path does dropout on the
    weights. The layers call this in their constructors with their dropout
    rate; the kernel calls it with the rate in effect (0 unless training).
    """
    check_positive_int("chunk_size", chunk_size, allow_none=True)
    if chunk_size is not None and flash_attention:
        raise ValueError(
            "`chunk_size` and `flash_attention=True` ask for two different "
            "attention paths; set only one of them. Received: "
            f"chunk_size={chunk_size}, flash_attention={flash_attention}"
        )
    if dropout > 0.0 and chunk_size is not None:
        raise ValueError(
            "The chunked path (`chunk_size`) does not support dropout on the "
            "attention weights. Set `dropout=0.0` or `chunk_size=None`. "
            f"Received: chunk_size={chunk_size}, dropout={dropout}"
        )
    if dropout > 0.0 and flash_attention:
        raise ValueError(
            "Dropout is not supported when flash attention is enabled. Set "
            "`dropout=0.0` or `flash_attention=None`. Received: "
            f"dropout={dropout}, flash_attention={flash_attention}"
        )


# Positions are int32 in the kernel: the largest query offset and sliding
# window.
MAX_POSITION = 2**31 - 1


def check_sliding_window(value: Any) -> None:
    """`sliding_window`: `None` or an integer in `[1, MAX_POSITION]`.

    The layers check it when constructed, so that a window the kernel would
    refuse at every call is refused at once.
    """
    check_int_in_range("sliding_window", value, 1, MAX_POSITION, allow_none=True)


def check_int_in_range(
    argument: str, value: Any, low: int, high: int | None = None, allow_none=False
) -> None:
    """An integer in `[low, high]`; `high=None` sets no upper bound."""
    if allow_none and value is None:
        return
    if not _is_int(value) or value < low or (high is not None and value > high):
        if high is None:
            expected = f"an integer >= {low}"
        else:
            expected = f"an integer in the range [{low}, {high}]"
        raise invalid(argument, expected + (" or `None`" if allow_none else ""), value)


def check_one_of(argument: str, value: Any, choices: tuple) -> None:
    """One of `choices`, of the same type (so `True` is not `1`)."""
    if not any(type(value) is type(c) and value == c for c in choices):
        raise invalid(argument, f"one of {', '.join(map(repr, choices))}", value)
