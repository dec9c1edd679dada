"""Shape and mask bookkeeping shared by the layers (no attention math here)."""

from __future__ import annotations

import keras
from keras import ops

from keras_selfattn._validation import invalid


def check_keras_mask(argument: str, mask, inputs) -> None:
    """Checks that a Keras mask is (batch, seq) for `inputs` (batch, seq, d)."""
    expected = f"a (batch, seq) mask matching the input's {tuple(inputs.shape[:2])}"
    shape = tuple(mask.shape)
    if len(shape) != 2:
        raise invalid(argument, expected, f"<tensor of shape {shape}>")
    for got, want in zip(shape, inputs.shape[:2], strict=True):
        if got is not None and want is not None and got != want:
            raise invalid(argument, expected, f"<tensor of shape {shape}>")


def padding_mask(query_mask, key_mask):
    """(B, Tq) and (B, Tk) Keras masks -> (B, 1, Tq, Tk) attention mask.

    Either may be None. Returns None when both are.
    """
    mask = None
    if query_mask is not None:
        mask = ops.cast(query_mask, "bool")[:, None, :, None]
    if key_mask is not None:
        keys = ops.cast(key_mask, "bool")[:, None, None, :]
        mask = keys if mask is None else ops.logical_and(mask, keys)
    return mask


def zero_padded(outputs, query_mask):
    """Zeros the (B, T, ...) `outputs` at positions where `query_mask` is False."""
    if query_mask is None:
        return outputs
    keep = ops.cast(query_mask, outputs.dtype)
    return ops.multiply(outputs, ops.expand_dims(keep, -1))


def clone_initializer(initializer: keras.initializers.Initializer):
    """A fresh instance of `initializer`, as Keras gives each sub-layer.

    Unseeded, two sub-layers then start from different values; a seeded
    initializer gives each the same start, as in Keras.
    """
    return initializer.__class__.from_config(initializer.get_config())
