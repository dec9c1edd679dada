"""The attention kernel: the one place in the package that does attention math.

Scaling, masks (padding, causal, sliding window), the float32 softmax, dropout
on the weights and the dispatch to backend fast paths all live here. Layers
project their inputs and call `scaled_dot_product_attention`; they never
compute logits or softmax themselves.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from keras_selfattn._validation import check_positive_int, check_rate, check_scale
from keras_selfattn._validation import invalid as _invalid

__all__ = ["scaled_dot_product_attention"]

# Added to logits that may not be attended to. The softmax runs in float32, so
# this constant is a float32 one whatever the compute dtype; it never meets a
# float16 tensor, so it cannot overflow there.
_MASKED_LOGIT = -0.7 * 3.4028235e38

_FUSED_BACKENDS = ("jax", "torch")


def _validate_shapes(query, key, value) -> None:
    q_shape, k_shape, v_shape = (tuple(t.shape) for t in (query, key, value))
    rank = len(q_shape)
    if rank not in (3, 4):
        raise _invalid(
            "query",
            "a 3-D tensor (batch, seq, dim) or a 4-D tensor "
            "(batch, seq, heads, dim)",
            f"<tensor of shape {q_shape}>",
        )
    for name, shape in (("key", k_shape), ("value", v_shape)):
        if len(shape) != rank:
            raise _invalid(
                name,
                f"a {rank}-D tensor like `query` (shape {q_shape})",
                f"<tensor of shape {shape}>",
            )

    def _clash(a, b):
        return a is not None and b is not None and a != b

    if _clash(q_shape[-1], k_shape[-1]):
        raise _invalid(
            "key",
            f"the same last dimension as `query` ({q_shape[-1]}), since "
            "Q·Kᵀ contracts over it",
            f"<tensor of shape {k_shape}>",
        )
    if _clash(k_shape[1], v_shape[1]):
        raise _invalid(
            "value",
            f"the same sequence length as `key` ({k_shape[1]})",
            f"<tensor of shape {v_shape}>",
        )
    if rank == 4:
        for name, shape in (("key", k_shape), ("value", v_shape)):
            if _clash(q_shape[2], shape[2]):
                raise _invalid(
                    name,
                    f"the same number of heads as `query` ({q_shape[2]})",
                    f"<tensor of shape {shape}>",
                )
    for name, shape in (("key", k_shape), ("value", v_shape)):
        if _clash(q_shape[0], shape[0]):
            raise _invalid(
                name,
                f"the same batch size as `query` ({q_shape[0]})",
                f"<tensor of shape {shape}>",
            )


def _normalize_mask(mask, batch, heads, q_len, k_len, squeezed_heads):
    """Returns `mask` as a boolean 4-D tensor broadcastable to (B, H, Tq, Tk)."""
    shape = tuple(mask.shape)
    rank = len(shape)
    expected = (
        "a boolean tensor broadcastable to (batch, heads, q_len, k_len) = "
        f"{(batch, heads, q_len, k_len)}, or of shape (batch, q_len, k_len)"
    )
    if squeezed_heads:
        expected = (
            "a boolean tensor of shape (batch, q_len, k_len) = "
            f"{(batch, q_len, k_len)} or broadcastable to it"
        )
    if rank not in (2, 3, 4):
        raise _invalid("mask", expected, f"<tensor of shape {shape}>")
    if rank == 2:
        full = (None, None) + shape
    elif rank == 3:
        full = (shape[0], None) + shape[1:]
    else:
        full = shape
    for got, want in zip(full, (batch, heads, q_len, k_len)):
        if got is not None and got != 1 and want is not None and got != want:
            raise _invalid("mask", expected, f"<tensor of shape {shape}>")
    if mask.dtype != "bool":
        mask = ops.cast(mask, "bool")
    if rank == 2:
        mask = ops.expand_dims(ops.expand_dims(mask, 0), 0)
    elif rank == 3:
        mask = ops.expand_dims(mask, 1)
    return mask


def _positional_mask(q_len, k_len, causal, sliding_window):
    """The (1, 1, Tq, Tk) mask of causal and sliding-window rules, or None."""
    if not causal and sliding_window is None:
        return None
    rows = ops.expand_dims(ops.arange(q_len, dtype="int32"), 1)
    cols = ops.expand_dims(ops.arange(k_len, dtype="int32"), 0)
    mask = None
    if causal:
        mask = ops.greater_equal(rows, cols)
    if sliding_window is not None:
        window = ops.less(ops.abs(rows - cols), sliding_window)
        mask = window if mask is None else ops.logical_and(mask, window)
    return ops.expand_dims(ops.expand_dims(mask, 0), 0)


def _plain_attention(
    query, key, value, mask, scale, dropout, training, seed, return_scores
):
    """softmax(Q Kᵀ · scale) V with the full (B, H, Tq, Tk) weight matrix."""
    compute_dtype = query.dtype
    # Q·Kᵀ and the softmax run in float32: a float16 Q·Kᵀ overflows as soon
    # as a logit passes 65504, and bfloat16 logits carry only 8 bits.
    if compute_dtype != "float32":
        query = ops.cast(query, "float32")
        key = ops.cast(key, "float32")
    logits = ops.einsum(
        "bqhd,bkhd->bhqk", ops.multiply(query, ops.cast(scale, "float32")), key
    )
    if mask is not None:
        logits = ops.where(mask, logits, _MASKED_LOGIT)
    weights = ops.softmax(logits, axis=-1)
    if mask is not None:
        # Exact zeros for masked keys, and all-zero rows where a query may
        # attend to no key (the softmax above made those rows uniform).
        weights = ops.where(mask, weights, 0.0)
    scores = ops.cast(weights, compute_dtype) if return_scores else None
    if training and dropout > 0.0:
        weights = keras.random.dropout(weights, dropout, seed=seed)
    output = ops.einsum(
        "bhqk,bkhd->bqhd", ops.cast(weights, value.dtype), value
    )
    return output, scores


def _query_has_key(mask):
    """(B, Tq, H, 1) float mask: 1 where a query row may attend to some key."""
    any_key = ops.any(mask, axis=-1)  # (B|1, H|1, Tq)
    return ops.expand_dims(ops.transpose(any_key, (0, 2, 1)), -1)


def _can_use_fused(dropout, training, return_scores, flash_attention) -> bool:
    if flash_attention is False or return_scores:
        return False
    if training and dropout > 0.0:
        return False
    return keras.backend.backend() in _FUSED_BACKENDS


def scaled_dot_product_attention(
    query,
    key,
    value,
    mask=None,
    *,
    scale: float | None = None,
    causal: bool = False,
    sliding_window: int | None = None,
    dropout: float = 0.0,
    training: bool = False,
    seed: int | keras.random.SeedGenerator | None = None,
    return_scores: bool = False,
    flash_attention: bool | None = None,
):
    """Scaled dot-product attention, softmax(Q Kᵀ · scale) V.

    Shapes come first, as in `keras.ops.dot_product_attention`:

    - `query`: `(batch, q_len, heads, dim)`
    - `key`: `(batch, k_len, heads, dim)`
    - `value`: `(batch, k_len, heads, value_dim)`

    A 3-D `(batch, seq, dim)` input is one head and its output comes back 3-D.
    `key` and `value` may be longer or shorter than `query`; `value_dim` may
    differ from `dim`.

    The logits Q Kᵀ are multiplied by `scale` before the softmax; `scale`
    defaults to `1 / sqrt(d_k)`, where `d_k` is `dim`, the size of one key
    vector of one head. Q Kᵀ and the softmax run in float32 whatever the input
    dtype, so float16 and bfloat16 inputs neither overflow nor lose the
    logits' precision; the output comes back in the input dtype.

    Masking: `mask` is boolean, True where a query may attend to a key. The
    causal and sliding-window rules are combined with it (logical and). A
    masked key gets exactly zero weight. A query row that may attend to no key
    at all outputs zeros and has all-zero weights; it is never NaN and never a
    uniform average over padding.

    Args:
        query: Query tensor, `(batch, q_len, heads, dim)` or
            `(batch, q_len, dim)`.
        key: Key tensor, `(batch, k_len, heads, dim)` or `(batch, k_len, dim)`.
        value: Value tensor, `(batch, k_len, heads, value_dim)` or
            `(batch, k_len, value_dim)`.
        mask: Optional boolean tensor, True = may attend, broadcastable to
            `(batch, heads, q_len, k_len)`. A 3-D mask is read as
            `(batch, q_len, k_len)` and shared by all heads. Defaults to
            `None` (every key visible).
        scale: Positive float multiplying the logits before the softmax.
            Defaults to `None`, meaning `1 / sqrt(dim)`.
        causal: Boolean. If True, query `i` sees key `j` only when `j <= i`.
            Defaults to `False`.
        sliding_window: Optional positive integer `w`. Query `i` sees key `j`
            only when `|i - j| < w`; with `causal` as well, when
            `i - w < j <= i`. Defaults to `None` (no window).
        dropout: Float in `[0, 1)`, the rate of dropout on the attention
            weights, applied only when `training` is True. Defaults to `0.0`.
        training: Boolean, whether dropout is active. Defaults to `False`.
        seed: Optional integer or `keras.random.SeedGenerator` for the
            dropout. Layers pass their own `SeedGenerator`. Defaults to `None`.
        return_scores: Boolean. If True, also return the attention weights
            (before dropout). This needs the full weight matrix, so it always
            takes the plain path. Defaults to `False`.
        flash_attention: Optional boolean. `None` lets the kernel call the
            backend's fused kernel (`keras.ops.dot_product_attention` on the
            JAX and PyTorch backends) when the options allow it; `False`
            forbids it. `True` asks for it where the backend has one.
            Defaults to `None`.

    Returns:
        The attention output, `(batch, q_len, heads, value_dim)` (3-D in,
        `(batch, q_len, value_dim)` out), in the dtype of `value`. With
        `return_scores=True`, the tuple `(output, weights)` where `weights`
        is `(batch, heads, q_len, k_len)`.

    Example:

    >>> import numpy as np
    >>> q = np.random.rand(2, 5, 4, 8).astype("float32")
    >>> out, w = scaled_dot_product_attention(q, q, q, causal=True,
    ...                                       return_scores=True)
    >>> tuple(out.shape), tuple(w.shape)
    ((2, 5, 4, 8), (2, 4, 5, 5))
    """
    check_scale(scale)
    check_positive_int("sliding_window", sliding_window, allow_none=True)
    check_rate("dropout", dropout)
    query, key, value = (
        t if isinstance(t, keras.KerasTensor) else ops.convert_to_tensor(t)
        for t in (query, key, value)
    )
    _validate_shapes(query, key, value)

    squeezed = len(query.shape) == 3
    if squeezed:
        query, key, value = (ops.expand_dims(t, 2) for t in (query, key, value))
    batch, q_len, heads, dim = query.shape
    k_len = key.shape[1]
    if scale is None:
        if dim is None:
            raise _invalid(
                "query", "a known last dimension (to compute 1/sqrt(d_k))", dim
            )
        scale = 1.0 / math.sqrt(dim)
    scale = float(scale)

    if mask is not None:
        if not isinstance(mask, keras.KerasTensor):
            mask = ops.convert_to_tensor(mask)
        mask = _normalize_mask(mask, batch, heads, q_len, k_len, squeezed)
    if any(isinstance(t, keras.KerasTensor) for t in (query, key, value, mask)):
        spec = _SymbolicAttention(return_scores, squeezed)
        return spec.symbolic_call(query, key, value)

    positional = _positional_mask(
        ops.shape(query)[1], ops.shape(key)[1], causal, sliding_window
    )
    if positional is not None:
        mask = positional if mask is None else ops.logical_and(mask, positional)

    scores = None
    if _can_use_fused(dropout, training, return_scores, flash_attention):
        # ---- Backend fast path (JAX, PyTorch): the one backend-specific seam.
        output = ops.dot_product_attention(
            query,
            key,
            ops.cast(value, query.dtype),
            mask=mask,
            scale=scale,
            flash_attention=flash_attention,
        )
        if mask is not None:
            # Fused kernels average uniformly over a fully-masked row; the
            # package's rule is zeros.
            output = ops.multiply(
                output, ops.cast(_query_has_key(mask), output.dtype)
            )
    else:
        output, scores = _plain_attention(
            query,
            key,
            value,
            mask,
            scale,
            dropout,
            training,
            seed,
            return_scores,
        )

    if squeezed:
        output = ops.squeeze(output, 2)
    if return_scores:
        return output, scores
    return output


class _SymbolicAttention(keras.Operation):
    """Output shapes of the kernel for symbolic (`keras.Input`) arguments."""

    def __init__(self, return_scores: bool, squeezed: bool):
        super().__init__()
        self.return_scores = return_scores
        self.squeezed = squeezed

    def compute_output_spec(self, query, key, value):
        batch, q_len, heads = query.shape[:3]
        out_shape = (batch, q_len, heads, value.shape[-1])
        if self.squeezed:
            out_shape = (batch, q_len, value.shape[-1])
        output = keras.KerasTensor(out_shape, dtype=value.dtype)
        if not self.return_scores:
            return output
        scores_shape = (batch, heads, q_len, key.shape[1])
        return output, keras.KerasTensor(scores_shape, dtype=query.dtype)
