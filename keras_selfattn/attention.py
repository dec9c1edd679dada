"""The attention kernel: the one place in the package that does attention math.

Scaling, masks (padding, causal, sliding window), the float32 softmax, dropout
on the weights, the memory-efficient chunked path (online softmax over key
blocks, recomputing backward) and the choice between the paths all live here.
Layers project their inputs and call `scaled_dot_product_attention`; they
never compute logits or softmax themselves. Backend-specific code (the fused
kernels, the block loop, XLA fusion) lives in one place, the backend seam
`keras_selfattn._backend`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import os
import warnings
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_selfattn import _backend
from keras_selfattn._validation import (
    MAX_POSITION,
    check_bool,
    check_floating,
    check_int_in_range,
    check_one_of,
    check_paths,
    check_positive_float,
    check_positive_int,
    check_rate,
    check_same_batch,
    check_seed,
    check_sliding_window,
)
from keras_selfattn._validation import invalid as _invalid

__all__ = [
    "AttentionPlan",
    "masked_softmax",
    "memory_budget",
    "plan_attention",
    "scaled_dot_product_attention",
    "set_memory_budget",
]

# The logit of a key that may not be attended to (or added to it, for a padded
# key). The softmax runs in float32 (float64 for float64 inputs), and this
# constant only ever meets such tensors: `_constant` makes it a tensor of that
# dtype, whatever `keras.config.floatx()` says (a Python float would follow
# floatx, and overflow in float16). exp(_MASKED_LOGIT - m) is exactly 0 in
# float32 and float64 for any real logit m, and twice the constant is still
# finite, so nothing becomes -inf or NaN.
_MASKED_LOGIT = -0.3 * 3.4028235e38
_MAX_POSITION = MAX_POSITION  # positions are int32

# A tensor of the running backend, a NumPy array or a `keras.KerasTensor`:
# what `keras.ops` functions take.
TensorLike = Any


def _wide(dtype) -> str:
    """The dtype the logits and the softmax run in for inputs of `dtype`:
    float32, or float64 for float64 inputs (never narrower than them)."""
    return (
        "float64" if keras.backend.standardize_dtype(dtype) == "float64" else "float32"
    )


def _constant(value: float, dtype: str = "float32"):
    """A scalar tensor of `dtype`, float32 by default (not a floatx one)."""
    return ops.full((), value, dtype=dtype)


def _padding_bias(padding_mask, dtype: str = "float32"):
    """(B, Tk) padding mask -> (B, Tk) of `dtype`: 0 at real keys, the masked
    logit at padded ones (added to the logits: one fused pass)."""
    padded = ops.cast(ops.logical_not(padding_mask), dtype)
    return ops.multiply(padded, _constant(_MASKED_LOGIT, dtype))


def _row_max(logits, axis=-1):
    """`ops.max(logits, axis, keepdims=True)` of masked logits, where an empty
    tensor (no key, no query or no batch) gives the masked logit: a row with
    no key, not the backends' "Cannot compute the max of an empty tensor".
    A shape not known in full is traced, where the backends do not check."""
    shape = tuple(logits.shape)
    if 0 not in shape or None in shape:
        return ops.max(logits, axis=axis, keepdims=True)
    axes = {a % len(shape) for a in ((axis,) if isinstance(axis, int) else axis)}
    reduced = tuple(1 if i in axes else d for i, d in enumerate(shape))
    return ops.full(reduced, _MASKED_LOGIT, dtype=logits.dtype)


def _sees_a_key(row_max):
    """Whether a row of masked logits, by its maximum, has an allowed key: a
    row with none has only masked logits, whose maximum is far below this.
    A NaN maximum (a NaN logit at a key the row sees) counts as a key, so
    the row comes out NaN, as the math gives, not zeros."""
    limit = _constant(
        0.5 * _MASKED_LOGIT, keras.backend.standardize_dtype(row_max.dtype)
    )
    return ops.logical_not(ops.less_equal(row_max, limit))


def _validate_shapes(query, key, value) -> None:
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        check_floating(name, tensor)
    q_shape, k_shape, v_shape = (tuple(t.shape) for t in (query, key, value))
    rank = len(q_shape)
    if rank not in (3, 4):
        raise _invalid(
            "query",
            "a 3-D tensor (batch, seq, dim) or a 4-D tensor (batch, seq, heads, dim)",
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

    if q_shape[-1] == 0:  # the default scale is 1 / sqrt(dim)
        raise _invalid(
            "query",
            "a last dimension (dim, the size of one key vector) of at least 1",
            f"<tensor of shape {q_shape}>",
        )
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
        heads, kv_heads = q_shape[2], k_shape[2]
        if heads == 0:
            raise _invalid("query", "at least one head", f"<tensor of shape {q_shape}>")
        if heads is None or not kv_heads or heads % kv_heads:
            raise _invalid(
                "key",
                f"a known number of heads that divides `query`'s ({heads}): "
                "each group of query heads shares one key and value head",
                f"<tensor of shape {k_shape}>",
            )
        if _clash(kv_heads, v_shape[2]):
            raise _invalid(
                "value",
                f"the same number of heads as `key` ({kv_heads})",
                f"<tensor of shape {v_shape}>",
            )
    for name, shape in (("key", k_shape), ("value", v_shape)):
        check_same_batch(name, shape, "query", q_shape)


def _broadcasts(shape: tuple, target: tuple) -> bool:
    """Whether a tensor of `shape` broadcasts to `target`, dimensions aligned
    from the right (None: unknown, taken as fitting)."""
    return len(shape) <= len(target) and all(
        a in (1, None) or b is None or a == b
        for a, b in zip(reversed(shape), reversed(target), strict=False)
    )


def check_mask_shape(
    shape, batch, heads, q_len, k_len, squeezed_heads=False, name="mask"
) -> None:
    """Raises the kernel's `ValueError` for a mask of `shape` that does not
    fit (batch, heads, q_len, k_len); `name` is the argument the caller gave
    it as (a layer's `attention_mask`)."""
    shape = tuple(shape)
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
        raise _invalid(name, expected, f"<tensor of shape {shape}>")
    if rank == 2:
        full = (None, None, *shape)
    elif rank == 3:
        full = (shape[0], None, *shape[1:])
    else:
        full = shape
    if not _broadcasts(full, (batch, heads, q_len, k_len)):
        raise _invalid(name, expected, f"<tensor of shape {shape}>")


def _normalize_mask(mask, batch, heads, q_len, k_len, squeezed_heads):
    """Returns `mask` as a boolean 4-D tensor broadcastable to (B, H, Tq, Tk)."""
    check_mask_shape(mask.shape, batch, heads, q_len, k_len, squeezed_heads)
    rank = len(mask.shape)
    mask = as_bool_mask("mask", mask, "may attend")
    if rank == 2:
        mask = ops.expand_dims(ops.expand_dims(mask, 0), 0)
    elif rank == 3:
        mask = ops.expand_dims(mask, 1)
    return mask


def as_bool_mask(name: str, mask, true_means: str):
    """`mask` as booleans. 0 / 1 values read as False / True; any other value
    is refused where the values are known (eagerly): an additive mask (0
    where allowed, -inf where not) would read inverted. The layers read
    every mask they are given through it."""
    if mask.dtype == "bool":
        return mask
    if _backend.values_known(mask):
        values = ops.convert_to_numpy(mask)
        if not np.isin(values, (0, 1)).all():
            raise _invalid(
                name,
                f"a boolean tensor (True: {true_means}), or 0 / 1 values "
                "(an additive mask of 0 and -inf would read inverted)",
                f"<tensor of dtype {mask.dtype} holding "
                f"{np.unique(values)[:4].tolist()}...>",
            )
    return ops.cast(mask, "bool")


def _check_padding_mask(padding_mask, batch, k_len) -> None:
    shape = tuple(padding_mask.shape)
    ok = len(shape) == 2 and all(
        got is None or want is None or got == want
        for got, want in zip(shape, (batch, k_len), strict=True)
    )
    if not ok:
        raise _invalid(
            "padding_mask",
            f"a boolean tensor of shape (batch, k_len) = {(batch, k_len)}",
            f"<tensor of shape {shape}>",
        )


def _position_rule(rows, cols, causal, sliding_window):
    """Where query `rows` may see key `cols` by position (causal: j <= i;
    window: |i - j| < w), broadcast from their shapes; None if no rule."""
    rule = None
    if causal:
        rule = ops.greater_equal(rows, cols)
    if sliding_window is not None:
        window = ops.less(ops.abs(rows - cols), sliding_window)
        rule = window if rule is None else ops.logical_and(rule, window)
    return rule


def positional_mask(q_len, k_len, causal, sliding_window, query_offset=0):
    """The (1, 1, Tq, Tk) mask of causal and sliding-window rules, or None.

    Query `i` sits at key position `i + query_offset` (an int or int scalar
    tensor: the first query's position, as a cache's update index gives it).
    """
    if not causal and sliding_window is None:
        return None
    rows = _backend.positions(q_len)
    if not _is_zero(query_offset):
        rows = ops.add(rows, ops.cast(query_offset, "int32"))
    rows = ops.expand_dims(rows, 1)
    cols = ops.expand_dims(_backend.positions(k_len), 0)
    mask = _position_rule(rows, cols, causal, sliding_window)
    return ops.expand_dims(ops.expand_dims(mask, 0), 0)


def _check_query_offset(query_offset) -> None:
    """A non-negative integer (Python or NumPy), or an integer tensor of
    rank 0 (its value is not read: it may be traced)."""
    expected = (
        "a non-negative integer below 2**31 (positions are int32) or an "
        "integer scalar tensor"
    )
    value = query_offset
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        value = value.item()  # NumPy scalars and 0-d arrays: their Python value
    is_int = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if is_int and 0 <= value <= _MAX_POSITION:
        return
    try:
        rank = len(value.shape)
    except (AttributeError, TypeError, ValueError):  # no shape, unknown rank
        rank = None
    dtype = str(getattr(value, "dtype", ""))
    if is_int or isinstance(value, bool) or rank != 0 or "int" not in dtype:
        raise _invalid("query_offset", expected, query_offset)


def _check_last_position(query_offset, q_len) -> None:
    """The last query's position, `query_offset + q_len - 1`, must fit in
    int32 too (it wrapped to a negative position: every key hidden, zeros
    out). Checked for an integer offset (a tensor's value is not read: it
    may be traced, and reading it would cost a decoding step a sync)."""
    offset = query_offset
    if type(offset).__module__ == "numpy" and getattr(offset, "shape", None) == ():
        offset = offset.item()
    if q_len is None or not isinstance(offset, numbers.Integral):
        return
    if offset + q_len - 1 > _MAX_POSITION:
        raise _invalid(
            "query_offset",
            f"at most 2**31 - q_len = {_MAX_POSITION - q_len + 1} for "
            f"q_len={q_len} (the last query's position is int32)",
            query_offset,
        )


def _seen_keys(query, key, mask, causal, sliding_window, query_offset):
    """`(batch or 1, k_len)` bool: False at keys that `mask` and the position
    rules hide from every query; None where every key may be seen.

    A full mask, varying over queries and keys (`(..., Tq, Tk)`, as large
    as the rules' `(Tq, Tk)` mask), is combined with the rules first: exact,
    so a key that only the two together hide (the mask shows it only to
    queries that `causal` hides it from) is hidden too. Any other mask and
    the rules are taken over the queries apart (the keys the mask lets some
    query see, and those the rules let some query see), in linear memory:
    exact for a mask over keys only (`(..., 1, Tk)`); with a mask over
    queries only (`(..., Tq, 1)`), a key that the rules show only to
    queries the mask hides counts as seen (never the reverse).
    """
    rules = causal or sliding_window is not None
    full = mask is not None and mask.shape[2] != 1 and mask.shape[3] != 1
    if full and rules:  # (a None dimension, unknown, may be full)
        positions = positional_mask(
            ops.shape(query)[1], ops.shape(key)[1], causal, sliding_window, query_offset
        )
        return ops.any(ops.logical_and(mask, positions), axis=(1, 2))
    seen = None
    if mask is not None:  # (B or 1, H or 1, Tq or 1, Tk or 1)
        seen = ops.any(mask, axis=(1, 2))
    q_len, k_len = (
        _backend.comparable_dim(query.shape[1]),
        _backend.comparable_dim(key.shape[1]),
    )
    sees_all = (  # the last query sees every key by position
        _is_zero(query_offset) and q_len is not None and k_len is not None
    ) and q_len >= k_len
    if rules and not sees_all:
        cols = _backend.positions(ops.shape(key)[1])
        first = ops.cast(query_offset, "int32")
        last = ops.add(first, ops.cast(ops.shape(query)[1], "int32") - 1)
        rule = ops.less_equal(cols, last) if causal else None
        if sliding_window is not None:  # |i - j| < w for some i in [first, last]
            # Differences, not sums with w: first - w and last + w may
            # overflow int32 for a window as large as _MAX_POSITION.
            window = ops.logical_and(
                ops.less(ops.subtract(first, cols), sliding_window),
                ops.less(ops.subtract(cols, last), sliding_window),
            )
            rule = window if rule is None else ops.logical_and(rule, window)
        rule = ops.expand_dims(rule, 0)
        seen = rule if seen is None else ops.logical_and(seen, rule)
    return seen


def _is_zero(offset) -> bool:
    """Whether `offset` is the Python int 0 (a tensor never is)."""
    return isinstance(offset, int) and offset == 0


def _split_heads(x, axis, groups):
    """Splits the heads axis `axis` of `x` into (heads // groups, groups)."""
    if groups == 1:
        return ops.expand_dims(x, axis + 1)
    shape = list(ops.shape(x))  # Dynamic where unknown.
    shape[axis : axis + 1] = [x.shape[axis] // groups, groups]
    return ops.reshape(x, shape)  # no -1: an empty batch would not infer it


def _merge_heads(x, axis):
    """Merges the axes `axis` and `axis + 1` of `x` (kv heads, groups) into
    one heads axis: query head `h` is kv head `h // groups`, group `h % groups`."""
    groups = x.shape[axis + 1]
    # A reshape for one group too, not a squeeze: TensorFlow's LiteRT
    # converter refuses the squeeze of a tensor of unknown length.
    shape = list(ops.shape(x))
    shape[axis : axis + 2] = [x.shape[axis] * groups]
    return ops.reshape(x, shape)


def _plain_attention(
    query,
    key,
    value,
    *,
    mask,
    padding_mask,
    scale: float,
    dropout: float = 0.0,
    training: bool = False,
    seed=None,
    return_scores: bool = False,
):
    """softmax(Q Kᵀ · scale) V with the full (B, H, Tq, Tk) weight matrix.

    With grouped heads (`key` and `value` have `kv_heads` heads) the queries
    are viewed as (B, Tq, kv_heads, groups, D) and both products contract with
    the kv heads as they are: no repeated copy of them is built.

    One masked pass before the softmax: padded keys get `_MASKED_LOGIT` added
    (`padding_mask`, (B, Tk)), other masked pairs are replaced by it (`mask`,
    broadcastable to (B, H, Tq, Tk)). In a row with at least one allowed key
    the float32 softmax then gives the masked keys exactly zero. Rows with no
    allowed key are fixed afterwards, on the output and the scores only.
    """
    compute_dtype = query.dtype
    # Q·Kᵀ and the softmax run in float32 (float64 for float64): a float16
    # Q·Kᵀ overflows as soon as a logit passes 65504, and bfloat16 logits
    # carry only 8 bits.
    wide = _wide(compute_dtype)
    if compute_dtype != wide:
        query = ops.cast(query, wide)
        key = ops.cast(key, wide)
    groups = query.shape[2] // key.shape[2]
    query = ops.multiply(query, _constant(scale, wide))
    if groups == 1:
        # 4-D products where there are no groups: TensorFlow's einsum of
        # the 5-D ones is slow in a graph of unknown length (the products
        # and softmax, trained, n = 512: 104 ms against 54 ms, 2026-12-08;
        # docs/performance.md, "Unknown lengths").
        logits = ops.einsum("bqhd,bkhd->bhqk", query, key)
    else:
        query = _split_heads(query, 2, groups)
        logits = _merge_heads(ops.einsum("bqhgd,bkhd->bhgqk", query, key), 1)
    if padding_mask is not None:
        # The bias first: Keras's TensorFlow `add` takes a second argument that
        # squeezes to one axis for a bias of the first one's axis 1 or last
        # axis, which a (B, 1, 1, 1) bias is when B == heads (one key).
        bias = _padding_bias(padding_mask, wide)
        logits = ops.add(_with_axes(bias, (1, 2)), logits)
    if mask is not None:
        logits = ops.where(mask, logits, _constant(_MASKED_LOGIT, wide))
    if logits.shape[-1] == 1:
        # One key: Keras warns that the softmax is always 1, which is what a
        # row with one allowed key gets. It stays a softmax, not a shortcut
        # on the length: a trace at length 1 (Keras's ONNX export on
        # PyTorch traces unknown lengths as 1) must compute for any length.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "You are using a softmax over axis")
            weights = ops.softmax(logits, axis=-1)
    else:
        weights = ops.softmax(logits, axis=-1)
    # (B|1, H|1, Tq|1, 1): 1 where a row may attend to some key. A row with
    # none came out of the softmax uniform; it must be zeros.
    has_key = None
    if mask is not None:
        has_key = _sees_a_key(_row_max(logits))
    elif padding_mask is not None:
        has_key = _with_axes(ops.any(padding_mask, axis=-1), (1, 2, 3))
    scores = None
    if return_scores:
        scores = weights if has_key is None else ops.where(has_key, weights, 0.0)
        scores = ops.cast(scores, compute_dtype)
    if training and dropout > 0.0:
        weights = keras.random.dropout(weights, dropout, seed=seed)
    weights = ops.cast(weights, value.dtype)
    if groups == 1:
        output = ops.einsum("bhqk,bkhd->bqhd", weights, value)
    else:
        weights = _split_heads(weights, 1, groups)
        output = _merge_heads(ops.einsum("bhgqk,bkhd->bqhgd", weights, value), 2)
    if has_key is not None:
        has_key = ops.transpose(has_key, (0, 2, 1, 3))  # (B|1, Tq|1, H|1, 1)
        output = ops.where(has_key, output, ops.zeros((), output.dtype))
    return output, scores


def _check_axis(axis, rank: int) -> None:
    """`masked_softmax`'s `axis`: an int or a tuple of distinct ints, each an
    axis of a tensor of `rank` (negative ones counted from the end)."""
    axes = axis if isinstance(axis, tuple) else (axis,)
    ok = (
        len(axes) > 0
        and all(isinstance(a, int) and not isinstance(a, bool) for a in axes)
        and all(-rank <= a < rank for a in axes)
        and len({a % rank for a in axes}) == len(axes)
    )
    if not ok:
        raise _invalid(
            "axis",
            f"an int or a tuple of distinct ints, each an axis of the {rank}-D "
            f"logits (from {-rank} to {rank - 1})",
            axis,
        )


def masked_softmax(
    logits: TensorLike,
    mask: TensorLike | None = None,
    axis: int | tuple[int, ...] = -1,
) -> TensorLike:
    """The kernel's softmax on its own, for code that computes its logits.

    Runs in float32 (float64 for float64 logits) and comes back in the dtype
    of `logits`. Where `mask` is False the weight is exactly 0; a row with
    no allowed entry is all zeros (never NaN, never uniform).
    `keras_selfattn.MultiHeadAttention._masked_softmax`, the hook that
    subclasses of Keras's layer call, uses it.

    Args:
        logits: A tensor of attention logits, e.g. `(batch, heads, q, k)`.
        mask: Optional boolean tensor broadcastable to `logits`; True = may
            attend. 0 / 1 values read as False / True; other values (an
            additive mask of 0 and -inf) are refused where known. Defaults
            to `None` (every entry allowed).
        axis: The axis (an int or a tuple of ints) the weights sum to 1
            over. Defaults to `-1`.

    Returns:
        The weights, shaped and typed as `logits`.

    Example:

    >>> logits = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], dtype="float32")
    >>> mask = np.array([[True, True, False], [False, False, False]])
    >>> np.round(keras.ops.convert_to_numpy(masked_softmax(logits, mask)), 4)
    array([[0.2689, 0.7311, 0.    ],
           [0.    , 0.    , 0.    ]], dtype=float32)
    """
    if not isinstance(logits, keras.KerasTensor):
        logits = ops.convert_to_tensor(logits)
    dtype = keras.backend.standardize_dtype(logits.dtype)
    if "float" not in dtype:  # integer weights would all round to 0 or 1
        raise _invalid(
            "logits", "a floating-point tensor", f"<tensor of dtype {dtype}>"
        )
    _check_axis(axis, len(logits.shape))
    wide = _wide(dtype)
    logits = ops.cast(logits, wide)
    if mask is not None:
        if not isinstance(mask, keras.KerasTensor):
            mask = ops.convert_to_tensor(mask)
        if not _broadcasts(tuple(mask.shape), tuple(logits.shape)):
            raise _invalid(
                "mask",
                f"a boolean tensor broadcastable to the logits' shape "
                f"{tuple(logits.shape)}",
                f"<tensor of shape {tuple(mask.shape)}>",
            )
        mask = as_bool_mask("mask", mask, "may attend")
        logits = ops.where(mask, logits, _constant(_MASKED_LOGIT, wide))
    row_max = _row_max(logits, axis)
    weights = ops.exp(ops.subtract(logits, row_max))
    weights = ops.divide(weights, ops.sum(weights, axis=axis, keepdims=True))
    if mask is not None:
        weights = ops.multiply(weights, ops.cast(_sees_a_key(row_max), wide))
    return ops.cast(weights, dtype)


# ---------------------------------------------------------------------------
# The memory-efficient chunked path.
#
# Keys and values are cut into blocks of `chunk_size`; a loop over the blocks
# keeps, for every query, a running maximum `m` of its logits, the running sum
# `l` of exp(logit - m) and the running weighted sum of values (the online
# softmax of Rabe & Staats, 2021, and FlashAttention). Only one
# (batch, heads, q_len, chunk_size) block of logits exists at a time, so memory
# grows linearly with the sequence length. The backward pass does not keep the
# blocks either: a custom gradient recomputes each block's weights from the
# saved row maximum and log of the row sum (their sum is FlashAttention-2's
# log-sum-exp, kept in two parts for precision), so training is linear too.


def _mask_block(s, bias, keep):
    """The masked logits of one key block (as `_plain_attention` masks)."""
    if bias is not None:
        s = ops.add(bias, s)  # the bias first: see `_plain_attention`
    if keep is not None:
        dtype = keras.backend.standardize_dtype(s.dtype)
        s = ops.where(keep, s, _constant(_MASKED_LOGIT, dtype))
    return s


def _online_softmax_block(s, bias, keep, running_max, running_sum):
    """One key block of the online softmax: (p, max, correction, sum)."""
    s = _mask_block(s, bias, keep)
    new_max = ops.maximum(running_max, _row_max(s))
    p = ops.exp(ops.subtract(s, new_max))
    correction = ops.exp(ops.subtract(running_max, new_max))
    running_sum = ops.add(
        ops.multiply(running_sum, correction), ops.sum(p, axis=-1, keepdims=True)
    )
    return p, new_max, correction, running_sum


def _block_logits(q, k_block):
    """Q·Kᵀ of one key block: (B, Hkv, G, Tq, D) x (B, Hkv, size, D) ->
    (B, Hkv, G, Tq, size), the kv heads broadcast over their groups.

    A `matmul`, where an `einsum` would compute the same: the forward
    loop is what `model.export(format="onnx")` converts, and tf2onnx's
    einsum optimizer tries every order of an einsum's six letters (20 s
    per layer on 2 CPU cores), a `MatMul` it takes as it is.
    """
    return ops.matmul(q, ops.swapaxes(ops.expand_dims(k_block, 2), -1, -2))


def _block_weights(s, bias, keep, row_max, log_sum):
    """The softmax weights of one key block, recomputed from the forward
    pass's row maximum and log of the row sum: `exp((s - max) - log sum)`.
    Their sum, the log-sum-exp, would round away a large maximum's low bits
    (at logits near 1e3 by about 6e-5), and with them the weights' and the
    gradients' precision; `s - max` keeps them, as the plain path's softmax
    does."""
    s = _mask_block(s, bias, keep)
    return ops.exp(ops.subtract(ops.subtract(s, row_max), log_sum))


def _block_logit_grads(p, d_p, delta):
    """dL/dlogits of one key block: p * (dL/dp - rowsum(dO * O))."""
    return ops.multiply(p, ops.subtract(d_p, delta))


def _chunked_attention(
    query,
    key,
    value,
    *,
    mask,
    padding_mask,
    scale: float,
    causal: bool,
    sliding_window: int | None,
    chunk_size: int,
    query_offset=0,
):
    """The attention output, computed over blocks of `chunk_size` keys.

    Shapes as `_plain_attention` (4-D, `(batch, seq, heads, dim)`), with
    static `q_len` and `k_len`, or unknown ones in a TensorFlow graph (the
    number of blocks is then a tensor, and the last block is always
    padded); `mask` is the normalized user mask (4-D,
    broadcastable) or None, `padding_mask` the (B, Tk) padding mask or None. The
    padding mask and the padding of the last block become a per-key bias,
    cut into blocks; the causal and sliding-window rules are applied per
    block, from indices (query `i` at key position `i + query_offset`). So
    no (q_len, k_len) tensor is ever built, and none from padding at all.
    Everything runs in float32 (float64 for a float64 query) and the output
    comes back in the dtype of `value`.

    The queries are held as (B, kv_heads, groups, Tq, D), so that grouped
    `key` and `value` heads (fewer than the query's) are contracted as they
    are, never repeated; without groups the `groups` axis has size 1.
    """
    # Python integers where known (a PyTorch tracer's 0-d lengths become
    # constants of the trace, as the plan chose for them), else None.
    q_len, k_len = (_backend.comparable_dim(t.shape[1]) for t in (query, key))
    q_len, k_len = (None if n is None else int(n) for n in (q_len, k_len))
    heads, dim, value_dim = query.shape[2], query.shape[3], value.shape[3]
    kv_heads = key.shape[2]
    groups = heads // kv_heads
    if k_len is not None:
        size = min(chunk_size, k_len)
        num_blocks = -(-k_len // size)
        padding = num_blocks * size - k_len
    else:
        # An unknown length (a TensorFlow graph traced for any length): the
        # blocks' count and the last block's padding are tensors.
        k_len = ops.cast(ops.shape(key)[1], "int32")
        size = chunk_size
        num_blocks = ops.floor_divide(ops.add(k_len, size - 1), size)
        padding = ops.subtract(ops.multiply(num_blocks, size), k_len)
    if q_len is None:
        q_len = ops.shape(query)[1]
    pads = not isinstance(padding, int) or padding > 0

    wide = _wide(query.dtype)

    def blocks(x):
        """(B, Tk, Hkv, D) -> (num_blocks, B, Hkv, size, D), float32 (or 64)."""
        x = ops.cast(x, wide)
        if pads:
            x = ops.pad(x, ((0, 0), (0, padding), (0, 0), (0, 0)))
        x = ops.reshape(x, (-1, num_blocks, size, *x.shape[2:]))
        return ops.transpose(x, (1, 0, 3, 2, 4))

    q = ops.multiply(ops.cast(query, wide), _constant(scale, wide))
    q = ops.transpose(_split_heads(q, 2, groups), (0, 2, 3, 1, 4))
    k_blocks, v_blocks = blocks(key), blocks(value)
    # Where each block's keys start, counted from the first query's position:
    # the rules depend on i - j only, so the offset shifts the blocks' starts
    # and the rows stay 0..q_len-1.
    block_starts = ops.multiply(_backend.positions(num_blocks), size)
    if not _is_zero(query_offset):
        block_starts = ops.subtract(block_starts, ops.cast(query_offset, "int32"))
    batch = _backend.comparable_dim(query.shape[0])
    known = all(isinstance(n, int) for n in (batch, q_len, k_len))
    work = batch * heads * q_len * k_len if known else None

    # The user mask is cut into key blocks too, unless it broadcasts over keys.
    mask_blocks = constant_mask = None
    if mask is not None:
        # (B|1, H|1, Tq, Tk|1) -> (B|1, kv_heads|1, groups|1, Tq, Tk|1).
        if mask.shape[1] == 1:
            mask = ops.expand_dims(mask, 2)
        else:
            mask = _split_heads(mask, 1, groups)
        if mask.shape[-1] == 1:
            constant_mask = mask
        else:
            m = mask
            if pads:
                m = ops.pad(m, ((0, 0),) * 4 + ((0, padding),), constant_values=False)
            lead = tuple(ops.shape(m)[:4])  # Dynamic where unknown.
            m = ops.reshape(m, (*lead, num_blocks, size))
            mask_blocks = ops.transpose(m, (4, 0, 1, 2, 3, 5))
    # Padded keys, and the columns that pad the last block, get a bias.
    bias_blocks = None
    if padding_mask is not None or pads:
        real = (
            padding_mask if padding_mask is not None else ops.ones((1, k_len), "bool")
        )
        if pads:
            real = ops.pad(real, ((0, 0), (0, padding)), constant_values=False)
        bias = _padding_bias(real, wide)
        lead = ops.shape(bias)[0]  # Dynamic where unknown.
        bias = ops.reshape(bias, (lead, num_blocks, 1, 1, 1, size))
        bias_blocks = ops.transpose(bias, (1, 0, 2, 3, 4, 5))
    positional = causal or sliding_window is not None

    def allowed(start, mask_block, constant_mask):
        """(…, Tq, size) boolean mask of the key block at `start`, or None."""
        result = mask_block if mask_block is not None else constant_mask
        if positional:
            rows = ops.expand_dims(_backend.positions(q_len), 1)
            offsets = ops.expand_dims(_backend.positions(size), 0)
            cols = ops.add(start, offsets)
            rule = _position_rule(rows, cols, causal, sliding_window)
            rule = _with_axes(rule, (0, 1, 2))
            result = rule if result is None else ops.logical_and(result, rule)
        return result

    names = ["k", "v", "start"]
    xs = [k_blocks, v_blocks, block_starts]
    for name, blocks_of in (("bias", bias_blocks), ("mask", mask_blocks)):
        if blocks_of is not None:
            names.append(name)
            xs.append(blocks_of)

    # The loops read no tensor from this scope: the blocks' other tensors
    # (`xs[2:]`) and `constant_mask` travel as arguments of `attend`, as
    # `extras`. jax2tf (JAX's SavedModel export) cannot differentiate a
    # custom gradient that closes over traced values.
    extras = (*xs[2:], *(() if constant_mask is None else (constant_mask,)))

    def unpack_extras(extras):
        """(the blocks' other tensors, constant_mask or None) of `extras`."""
        if constant_mask is None:
            return extras, None
        return extras[:-1], extras[-1]

    def unpack(x):
        """A block's (k, v, start, bias or None, mask or None)."""
        parts = dict(zip(names, x, strict=True))
        return (
            parts["k"],
            parts["v"],
            parts["start"],
            parts.get("bias"),
            parts.get("mask"),
        )

    def forward(q, k_blocks, v_blocks, extras):
        others, constant_mask = unpack_extras(extras)

        def step(carry, x):
            running_max, running_sum, acc = carry
            k_block, v_block, start, bias, mask_block = unpack(x)
            s = _block_logits(q, k_block)
            keep = allowed(start, mask_block, constant_mask)
            p, new_max, correction, running_sum = _backend.xla_fused(
                _online_softmax_block
            )(s, bias, keep, running_max, running_sum)
            pv = ops.matmul(p, ops.expand_dims(v_block, 2))
            acc = ops.add(ops.multiply(acc, correction), pv)
            return (new_max, running_sum, acc), ()

        column = ops.zeros_like(q[..., :1])
        init = (
            ops.add(column, _constant(_MASKED_LOGIT, wide)),
            column,
            ops.multiply(column, ops.zeros((value_dim,), wide)),
        )
        (running_max, running_sum, acc), _ = _backend.scan_blocks(
            step, init, (k_blocks, v_blocks, *others), (), work
        )
        # A row whose maximum is still the mask constant saw no allowed key:
        # zeros out, and a maximum so large that every recomputed weight of
        # that row is exactly zero in the backward pass.
        seen = _sees_a_key(running_max)
        out = ops.where(seen, ops.divide(acc, running_sum), 0.0)
        row_max = ops.where(seen, running_max, _constant(-_MASKED_LOGIT, wide))
        log_sum = ops.where(seen, ops.log(running_sum), 0.0)
        return out, (row_max, log_sum)

    def backward(q, k_blocks, v_blocks, extras, out, stats, d_out):
        others, constant_mask = unpack_extras(extras)
        delta = ops.sum(ops.multiply(d_out, out), axis=-1, keepdims=True)

        def step(carry, x):
            (d_q,) = carry
            k_block, v_block, start, bias, mask_block = unpack(x)
            s = ops.einsum("bhgqd,bhkd->bhgqk", q, k_block)
            keep = allowed(start, mask_block, constant_mask)
            p = _backend.xla_fused(_block_weights)(s, bias, keep, *stats)
            # The kv heads' gradients sum over their groups of query heads.
            d_v = ops.einsum("bhgqk,bhgqd->bhkd", p, d_out)
            d_p = ops.einsum("bhgqd,bhkd->bhgqk", d_out, v_block)
            d_s = _backend.xla_fused(_block_logit_grads)(p, d_p, delta)
            d_q = ops.add(d_q, ops.einsum("bhgqk,bhkd->bhgqd", d_s, k_block))
            d_k = ops.einsum("bhgqk,bhgqd->bhkd", d_s, q)
            return (d_q,), (d_k, d_v)

        specs = (
            ((None, kv_heads, size, dim), wide),
            ((None, kv_heads, size, value_dim), wide),
        )
        (d_q,), (d_k, d_v) = _backend.scan_blocks(
            step, (ops.zeros_like(q),), (k_blocks, v_blocks, *others), specs, work
        )
        return d_q, d_k, d_v

    @ops.custom_gradient
    def attend(q, k_blocks, v_blocks, *extras):
        # stop_gradient: an eager TensorFlow tape would otherwise record the
        # forward loop and keep every block of weights alive until backprop.
        q, k_blocks, v_blocks = (ops.stop_gradient(t) for t in (q, k_blocks, v_blocks))
        out, stats = forward(q, k_blocks, v_blocks, extras)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            d_qkv = backward(q, k_blocks, v_blocks, extras, out, stats, upstream)
            return (*d_qkv, *(None for _ in extras))  # masks, starts: none

        return out, grad

    if _backend.may_need_gradient(q, k_blocks, v_blocks):
        output = attend(q, k_blocks, v_blocks, *extras)
    else:
        output, _ = forward(q, k_blocks, v_blocks, extras)
    output = _merge_heads(ops.transpose(output, (0, 3, 1, 2, 4)), 2)
    return ops.cast(output, value.dtype)


def _with_axes(x, axes: tuple):
    """`x` with new axes of size 1 at `axes` (ascending), by `expand_dims`.

    Indexing with `None` (`x[:, None, None, :]`) is a `StridedSlice` with a
    new-axis mask in a TensorFlow graph, which the LiteRT converter keeps as
    a TensorFlow op (`FlexStridedSlice`) where the length is unknown, and
    the LiteRT interpreter cannot run it.
    """
    for axis in axes:
        x = ops.expand_dims(x, axis)
    return x


def _query_has_key(mask):
    """(B, Tq, H, 1) boolean: True where a query row may attend to some key."""
    any_key = ops.any(mask, axis=-1)  # (B|1, H|1, Tq)
    return ops.expand_dims(ops.transpose(any_key, (0, 2, 1)), -1)


# ---------------------------------------------------------------------------
# The choice of path: one pure function, `plan_attention`, whose docstring
# states the rules. Its constants, and how they were measured:

# Peak training memory (forward and backward of one call, under the
# backend's gradient machinery) per element of the (batch, heads, q_len,
# k_len) weight matrix, in bytes, by backend and path. Measured with
# `python benchmarks/footprint.py weights`: the peak resident set (VmHWM,
# after a warm-up step and a reset of the peak) of fresh processes, batch 1,
# 8 heads, dim 16, float32, at n = 1024 and 2048; the figure is the slope
# between the two lengths (the linear parts cancel), rounded up, the larger
# of unmasked and padded. TensorFlow under `tf.function` (as `fit` runs it;
# an eager `GradientTape` keeps more: 20.6), JAX under `jax.jit`, PyTorch
# eager. Measured figures in docs/performance.md ("Choosing the path").
# PyTorch's fused kernel measured 0.4 on the CPU (a memory-efficient
# kernel); its constant stays at the plain path's until a GPU is measured.
TRAINING_BYTES_PER_ELEMENT = {
    "tensorflow": {"plain": 13, "fused": 13},
    "jax": {"plain": 21, "fused": 21},  # 17 until 2026-12-08 (JAX 0.10.2: 20.4)
    "torch": {"plain": 13, "fused": 13},
}
# Any other backend (no gradient machinery measured): the largest above.
_DEFAULT_BYTES_PER_ELEMENT = 21

# The block sizes of the automatic chunked path, fastest first: on a quiet
# 2-core CPU (TensorFlow, fwd+bwd under tf.function, n = 8192, batch 1, dim
# 512, 8 heads; docs/performance.md) blocks of 512 keys took 1.09x Keras's
# step time, 1024 1.08x (for twice the memory) and 256 1.13x; at n = 2048
# 512 was 5% faster than 256. (`python benchmarks/footprint.py speed` on a
# busy machine, load 11, found the opposite, 64 fastest: to be rerun quiet.)
# And the chunked path's training memory per element of one (batch, heads,
# q_len, block) block of weights (`python benchmarks/footprint.py blocks`:
# the slope between blocks of 128 and 1024 keys at n = 4096, 7.5, rounded up).
CHUNK_SIZES = (512, 256, 128)
CHUNK_BYTES_PER_ELEMENT = 8

# The environment variable that sets the memory budget, in bytes.
MEMORY_BUDGET_ENV = "KERAS_SELFATTN_MEMORY_BUDGET"
# The share of the device's free memory (the accelerator's, else the host's
# available memory) that the default budget lets the weights take.
BUDGET_FRACTION = 0.5

_logger = logging.getLogger("keras_selfattn")
_budget = {"set": None, "default": None}


@dataclasses.dataclass(frozen=True)
class AttentionPlan:
    """The path `scaled_dot_product_attention` takes, as `plan_attention` chose.

    Attributes:
        path: `"plain"` (the full weight matrix), `"fused"` (the backend's
            fused kernel, `keras.ops.dot_product_attention`) or `"chunked"`
            (blocks of keys, linear memory).
        chunk_size: The number of keys per block on the chunked path; `None`
            on the others.
        footprint: The predicted training memory of the plain (or fused)
            path in bytes, what was compared with the budget; `None` where
            the rules decided without it.

    Example:

    >>> plan = AttentionPlan("chunked", chunk_size=256)
    >>> plan.path, plan.chunk_size
    ('chunked', 256)
    """

    path: str
    chunk_size: int | None = None
    footprint: int | None = None


def set_memory_budget(budget: int | None) -> None:
    """Sets the memory budget that the kernel's choice of path compares with.

    The budget is the memory, in bytes, that the weight matrices of one
    attention call may take in training (forward and backward) before the
    kernel switches to the chunked path; see `plan_attention` for the rules.
    It overrides the environment variable `KERAS_SELFATTN_MEMORY_BUDGET`
    (bytes, read once) and the default, half of the device's free memory
    (the accelerator's where the backend computes on one, else the host's
    available memory), measured once per process and logged at debug level
    on the `keras_selfattn` logger. A layer's `chunk_size` still overrides
    the budget.

    Args:
        budget: A positive integer (bytes), or `None` to return to the
            environment variable or the default.

    Example:

    >>> set_memory_budget(8 * 2**30)  # 8 GiB
    >>> memory_budget()
    8589934592
    >>> set_memory_budget(None)
    """
    if budget is not None:
        check_positive_int("budget", budget)
    _budget["set"] = budget


def memory_budget() -> int:
    """The memory budget in bytes that the kernel's choice of path uses now.

    The one given to `set_memory_budget`, else the environment variable
    `KERAS_SELFATTN_MEMORY_BUDGET`, else half of the device's free memory,
    measured once per process.

    Returns:
        The budget, a positive integer number of bytes.

    Example:

    >>> set_memory_budget(2**30)
    >>> memory_budget()
    1073741824
    >>> set_memory_budget(None)
    """
    if _budget["set"] is not None:
        return _budget["set"]
    if _budget["default"] is None:
        raw = os.environ.get(MEMORY_BUDGET_ENV)
        if raw:
            try:
                value = int(float(raw))
            except (ValueError, OverflowError):  # "abc"; "inf" and "1e400"
                value = 0
            if value <= 0:
                raise _invalid(MEMORY_BUDGET_ENV, "a positive number of bytes", raw)
            source = f"${MEMORY_BUDGET_ENV}"
        else:
            where, free = _backend.free_memory()
            value = max(1, int(free * BUDGET_FRACTION))
            source = f"{BUDGET_FRACTION:g} of the {where}'s free {free} bytes"
        _budget["default"] = value
        _logger.debug("Attention memory budget: %d bytes (%s)", value, source)
    return _budget["default"]


def _fused_refusal(backend, dim, value_dim, return_scores, half_on_cpu):
    """Why the fused kernel cannot be used, or None."""
    if backend not in _backend.FUSED_BACKENDS:
        return f"the {backend} backend has no fused kernel"
    if return_scores:
        return "a fused kernel does not return the attention weights"
    if value_dim != dim:
        # jax.nn.dot_product_attention needs value_dim == dim.
        return "a fused kernel needs the value's last dimension to equal the key's"
    if half_on_cpu:
        return "half precision on a CPU"
    return None


def plan_attention(
    *,
    batch: int | None,
    heads: int,
    q_len: int | None,
    k_len: int | None,
    dim: int | None,
    value_dim: int | None,
    backend: str,
    memory_budget: int,
    half_on_cpu: bool = False,
    mask: bool = False,
    padding_mask: bool = False,
    causal: bool = False,
    sliding_window: int | None = None,
    dropout: float = 0.0,
    return_scores: bool = False,
    chunk_size: int | None = None,
    flash_attention: bool | None = None,
) -> AttentionPlan:
    """Chooses the path of one attention call: the one place the rules live.

    A pure function of the shapes, the options, the backend's name and a
    memory budget; it builds no tensor. `scaled_dot_product_attention` calls
    it with its arguments and `memory_budget()`. The rules, in order:

    1. Flash attention insisted on (`flash_attention=True`): the fused
       kernel, or a `ValueError` where it cannot be honoured (a backend
       without one: TensorFlow; `return_scores`; `value_dim != dim`).
    2. The plain path where only the full matrix will do:
       `return_scores=True` (it returns that matrix). With an unknown
       (`None`, as in a graph traced for any length) `q_len` or `k_len`:
       on TensorFlow with an explicit `chunk_size`, the chunked path (its
       loop counts the blocks at run time; Keras's TensorFlow `fit`
       traces for any length from the second length it meets on);
       otherwise the plain path, or the fused kernel where it may be used
       (as in rule 5). The same where nothing can be cut into blocks: an
       empty `q_len` or `k_len`.
    3. An explicit `chunk_size`: the chunked path with that block size (also
       where a fused kernel exists; dropout in training with it is an error),
       except where the key length is a traced value (neither a number nor
       `None`: PyTorch's tracer hands lengths on as 0-d tensors) that fits
       in one block: the fused kernel where it may be used (as in rule 5),
       else the plain path. Their graphs compute any length, where the
       chunked path's would hold blocks of the traced length alone
       (`torch.onnx` traces a model of unknown length at length 1).
    4. Dropout in training (`dropout > 0`, the rate in effect): the plain
       path, the only one that does it.
    5. Otherwise the fastest path that fits the budget. The training
       footprint of the full weight matrices, `batch * heads * q_len * k_len`
       elements times the measured bytes per element of the backend and
       path (`TRAINING_BYTES_PER_ELEMENT`; an unknown batch counts as 1), is
       compared with `memory_budget`. If it fits: the backend's fused kernel
       where there is one and it may be used (`flash_attention` not
       `False`, `value_dim == dim`, and float32 inputs or an accelerator,
       whose fused kernels accumulate in float32), else the plain path. If
       it does not fit: the chunked path, with the fastest block size of
       `CHUNK_SIZES` whose blocks fit the budget (the smallest if none do),
       except where a traced key length fits in one such block (as in
       rule 3, for the same reason): the path that fits, above.

    The masks (`mask`, `padding_mask`), `causal` and `sliding_window` are
    taken by every path and change no choice.

    Args:
        batch: The batch size, or `None` where unknown.
        heads: The number of query heads (1 for 3-D inputs).
        q_len: The query length, or `None` where unknown.
        k_len: The key length, or `None` where unknown.
        dim: The size of one query and key vector of one head.
        value_dim: The size of one value vector of one head.
        backend: The Keras backend's name (`keras.backend.backend()`).
        memory_budget: Bytes the weight matrices may take in training.
        half_on_cpu: Whether the inputs are float16 or bfloat16 on a CPU,
            where a fused kernel would not compute in float32. Defaults to
            `False`.
        mask: Whether a boolean `mask` is given. Defaults to `False`.
        padding_mask: Whether a `padding_mask` is given. Defaults to `False`.
        causal: Whether the causal rule applies. Defaults to `False`.
        sliding_window: The sliding window, or `None`. Defaults to `None`.
        dropout: The dropout rate in effect (0 unless training). Defaults to
            `0.0`.
        return_scores: Whether the weights are returned. Defaults to `False`.
        chunk_size: The block size asked for, or `None`. Defaults to `None`.
        flash_attention: As `scaled_dot_product_attention` takes it.
            Defaults to `None`.

    Returns:
        An `AttentionPlan`.

    Example:

    >>> plan_attention(batch=8, heads=8, q_len=4096, k_len=4096, dim=64,
    ...                value_dim=64, backend="tensorflow",
    ...                memory_budget=2**30)
    AttentionPlan(path='chunked', chunk_size=512, footprint=...)
    """
    _check_plan_arguments(locals())
    del mask, padding_mask, causal, sliding_window  # Every path takes them.
    refusal = _fused_refusal(backend, dim, value_dim, return_scores, half_on_cpu)
    if flash_attention:
        if refusal is not None and refusal != "half precision on a CPU":
            raise ValueError(
                f"`flash_attention=True` cannot be honoured: {refusal}. Set "
                "`flash_attention=None` to let the kernel choose. Received: "
                f"backend={backend!r}, dim={dim}, value_dim={value_dim}, "
                f"return_scores={return_scores}"
            )
        return AttentionPlan("fused")
    fused = flash_attention is None and refusal is None and dropout == 0.0
    path = "fused" if fused else "plain"
    if return_scores:
        return AttentionPlan("plain")
    unknown = q_len is None or k_len is None
    if unknown and chunk_size is not None and backend == "tensorflow":
        return AttentionPlan("chunked", chunk_size)
    if unknown or q_len == 0 or k_len == 0:
        return AttentionPlan(path)
    if chunk_size is not None:
        if not isinstance(k_len, numbers.Number) and k_len <= chunk_size:
            return AttentionPlan(path)
        return AttentionPlan("chunked", chunk_size)
    if dropout > 0.0:
        return AttentionPlan("plain")
    per_element = TRAINING_BYTES_PER_ELEMENT.get(backend, {}).get(
        path, _DEFAULT_BYTES_PER_ELEMENT
    )
    rows = (batch or 1) * heads * q_len
    footprint = rows * k_len * per_element
    if footprint <= memory_budget:
        return AttentionPlan(path, footprint=footprint)
    for size in CHUNK_SIZES:
        if rows * min(size, k_len) * CHUNK_BYTES_PER_ELEMENT <= memory_budget:
            break
    if not isinstance(k_len, numbers.Number) and k_len <= size:
        return AttentionPlan(path, footprint=footprint)  # a traced length
    return AttentionPlan("chunked", size, footprint)


# The backends Keras 3 runs on (`keras.backend.backend()`).
_KERAS_BACKENDS = ("tensorflow", "jax", "torch", "numpy", "openvino")


def _check_plan_arguments(arguments: dict) -> None:
    """`plan_attention`'s checks: it is public, and a plan for a negative
    length or a budget of -5 would be no plan. A dimension that is neither
    a number nor a string is a traced one, which the kernel passes on
    (PyTorch's `SymInt` in `torch.export`, a 0-d tensor while `torch.onnx`
    traces): it is left to the trace."""
    for name in ("batch", "q_len", "k_len", "dim", "value_dim", "heads"):
        value = arguments[name]
        if name == "heads" and isinstance(value, (numbers.Number, str, type(None))):
            check_positive_int(name, value)
        elif value is None or isinstance(value, (numbers.Number, str)):
            check_int_in_range(name, value, 0, allow_none=True)
    check_one_of("backend", arguments["backend"], _KERAS_BACKENDS)
    check_positive_int("memory_budget", arguments["memory_budget"])
    for name in ("half_on_cpu", "mask", "padding_mask", "causal", "return_scores"):
        check_bool(name, arguments[name])
    check_sliding_window(arguments["sliding_window"])
    check_rate("dropout", arguments["dropout"])
    check_bool("flash_attention", arguments["flash_attention"], allow_none=True)
    check_paths(
        arguments["chunk_size"], arguments["flash_attention"], arguments["dropout"]
    )


def _plan(query, key, value, mask, padding_mask, options) -> AttentionPlan:
    """`plan_attention` for the kernel's 4-D arguments (and the warning of
    an explicit `chunk_size` that an unknown length leaves unused)."""
    batch, q_len, heads, dim = (_backend.comparable_dim(d) for d in query.shape)
    k_len = _backend.comparable_dim(key.shape[1])
    rate = options["dropout"] if options["training"] else 0.0
    chunk_size = options["chunk_size"]
    plan = plan_attention(
        batch=batch,
        heads=heads,
        q_len=q_len,
        k_len=k_len,
        dim=dim,
        value_dim=_backend.comparable_dim(value.shape[-1]),
        backend=keras.backend.backend(),
        memory_budget=memory_budget(),
        half_on_cpu=not _backend.fused_keeps_float32(query),
        mask=mask is not None,
        padding_mask=padding_mask is not None,
        causal=options["causal"],
        sliding_window=options["sliding_window"],
        dropout=rate,
        return_scores=options["return_scores"],
        chunk_size=options["chunk_size"],
        flash_attention=options["flash_attention"],
    )
    unused = chunk_size is not None and not options["return_scores"]
    if unused and plan.path != "chunked" and None in (q_len, k_len):
        warnings.warn(
            f"`chunk_size={chunk_size}` is not used in this call: its sequence "
            "length is unknown (a function traced for any length, as "
            "`jax.export` traces one), and the chunked path needs a known one "
            "there. The plain path runs instead, with memory quadratic in the "
            "length. To keep the chunked path, give the sequence axis a length.",
            UserWarning,
            stacklevel=2,
        )
    return plan


def _no_query(query, key, value, squeezed, return_scores):
    """The empty output (and scores) of an empty batch or query length.

    Built without the paths: TensorFlow's oneDNN batch matmul refuses some
    empty operands. Each input's sum, times 0, is added to the empty output,
    so that gradients reach the inputs as zeros (not as unconnected `None`);
    the sums never reach a number, as there is none.
    """
    batch, q_len, heads, _ = query.shape
    shape = (batch, q_len, heads, value.shape[-1])
    output = ops.zeros(shape, value.dtype)
    for t in (query, key, value):
        output = ops.add(output, ops.cast(ops.multiply(ops.sum(t), 0), value.dtype))
    output = ops.squeeze(output, 2) if squeezed else output
    if not return_scores:
        return output
    scores = ops.zeros((batch, heads, q_len, key.shape[1]), query.dtype)
    return output, scores


def scaled_dot_product_attention(
    query: TensorLike,
    key: TensorLike,
    value: TensorLike,
    mask: TensorLike | None = None,
    *,
    padding_mask: TensorLike | None = None,
    scale: float | None = None,
    causal: bool = False,
    sliding_window: int | None = None,
    dropout: float = 0.0,
    training: bool = False,
    seed: int | keras.random.SeedGenerator | None = None,
    return_scores: bool = False,
    flash_attention: bool | None = None,
    chunk_size: int | None = None,
    query_offset: int | TensorLike = 0,
) -> TensorLike | tuple[TensorLike, TensorLike]:
    """Scaled dot-product attention, softmax(Q Kᵀ · scale) V.

    Shapes come first, as in `keras.ops.dot_product_attention`:

    - `query`: `(batch, q_len, heads, dim)`
    - `key`: `(batch, k_len, heads, dim)`
    - `value`: `(batch, k_len, heads, value_dim)`

    A 3-D `(batch, seq, dim)` input is one head and its output comes back 3-D.
    `key` and `value` may be longer or shorter than `query`; `value_dim` may
    differ from `dim`. They may also have fewer heads than `query`
    (grouped-query attention): `kv_heads`, a divisor of `heads`, with query
    head `h` using kv head `h // (heads // kv_heads)`, as
    `keras.layers.GroupQueryAttention` repeats them. The kernel never builds
    that repeated copy on its plain and chunked paths: it views the queries
    as `(batch, q_len, kv_heads, groups, dim)`.

    The logits Q Kᵀ are multiplied by `scale` before the softmax; `scale`
    defaults to `1 / sqrt(d_k)`, where `d_k` is `dim`, the size of one key
    vector of one head. Q Kᵀ and the softmax run in float32 for float32 and
    narrower inputs, so float16 and bfloat16 inputs neither overflow nor lose
    the logits' precision, and in float64 for float64 inputs (exact to
    float64 rounding on TensorFlow; on JAX and PyTorch Keras computes 64-bit
    dtypes in 32 bits); the output comes back in the input dtype. (The
    backend's fused kernel is used for half-precision inputs only on an
    accelerator, whose kernels accumulate in float32; on a CPU the kernel
    takes its own float32 paths.)

    Masking: `mask` is boolean, True where a query may attend to a key;
    `padding_mask` is a padding mask, True at the real keys of each sequence. The
    causal and sliding-window rules are combined with both (logical and). A
    masked key gets exactly zero weight. A query row that may attend to no key
    at all outputs zeros and has all-zero weights; it is never NaN and never a
    uniform average over padding. Prefer `padding_mask` for padding: it stays a
    `(batch, k_len)` vector (a bias added to the logits), where the same
    padding given as `mask` is a full `(batch, 1, q_len, k_len)` comparison.
    Padded keys are ignored whatever they hold: NaN or inf in a padded key
    or value changes no output (a select zeros them, never a multiply); so
    is a key that `mask`, `causal` and `sliding_window` together hide from
    every query (with a mask over queries only, `(..., q_len, 1)`: a key
    that the mask or the rules alone hide). A NaN in a real key makes every
    query that sees it NaN, and reaches the other queries too (0 x NaN in the
    weighted sum of values).
    Padded *queries* are the caller's to zero, with a select as well (the
    layers do), or a NaN in one reaches the gradients of every key.

    Paths: the plain path builds the full `(batch, heads, q_len, k_len)`
    weight matrix, so its memory grows with the square of the sequence
    length. The chunked path cuts the keys into blocks of `chunk_size` and
    keeps a running maximum and sum per query (an online softmax, as in
    FlashAttention); its backward pass recomputes each block's weights from
    the saved row maximum and log-sum instead of storing them. Its memory
    grows linearly with the sequence length, in training too, and its
    results equal the plain path's within float32 rounding (the tests allow
    1e-5). In a
    TensorFlow graph traced for any length (Keras's `fit`, `evaluate` and
    `predict` trace one from the second length they meet on) an explicit
    `chunk_size` keeps it, its loop counting the blocks at run time; the
    automatic choice needs the lengths (rule 5 of `plan_attention`), and
    where JAX traces a symbolic length (`jax.export`) the plain path runs,
    with a `UserWarning` for an explicit `chunk_size`. The fused
    path is the backend's `keras.ops.dot_product_attention` (JAX, PyTorch).
    Which one a call takes is decided by `plan_attention`, whose docstring
    states the rules, against the memory budget (`memory_budget`,
    `set_memory_budget`).

    Args:
        query: Query tensor, `(batch, q_len, heads, dim)` or
            `(batch, q_len, dim)`.
        key: Key tensor, `(batch, k_len, kv_heads, dim)` or
            `(batch, k_len, dim)`; `kv_heads` divides `heads` (equal to it
            for multi-head attention).
        value: Value tensor, `(batch, k_len, kv_heads, value_dim)` or
            `(batch, k_len, value_dim)`.
        mask: Optional boolean tensor, True = may attend, broadcastable to
            `(batch, heads, q_len, k_len)`. A 3-D mask is read as
            `(batch, q_len, k_len)` and shared by all heads. An integer or
            float mask is read as booleans and must hold 0 and 1 only (an
            additive mask of 0 and -inf is refused where its values are
            known). A key that the mask, `causal` and `sliding_window`
            together hide from every query is ignored whatever it holds, as
            padding is.
            Defaults to `None` (every key visible).
        padding_mask: Optional boolean tensor `(batch, k_len)`, True at real
            keys, False at padding (a Keras mask, as `Embedding(mask_zero=True)`
            makes it), or 0 / 1 values (other values are refused where
            known). Defaults to `None` (no padding).
        scale: Positive float multiplying the logits before the softmax.
            Defaults to `None`, meaning `1 / sqrt(dim)`.
        causal: Boolean. If True, query `i` sees key `j` only when `j <= i`
            (`i` counted from `query_offset`). Defaults to `False`.
        sliding_window: Optional positive integer `w`. Query `i` sees key `j`
            only when `|i - j| < w`; with `causal` as well, when
            `i - w < j <= i` (`i` counted from `query_offset`). Defaults to
            `None` (no window).
        dropout: Float in `[0, 1)`, the rate of dropout on the attention
            weights, applied only when `training` is True. Defaults to `0.0`.
        training: Boolean (or `None`, as `False`), whether dropout is
            active. Defaults to `False`.
        seed: Optional integer in `[0, 2**31 - 1]` (the seeds every backend
            takes) or `keras.random.SeedGenerator` for the dropout. Layers
            pass their own `SeedGenerator`. Defaults to `None`.
        return_scores: Boolean. If True, also return the attention weights
            (before dropout), which only the plain path has. Defaults to
            `False`.
        flash_attention: Optional boolean. `None` lets the kernel choose
            (`plan_attention`); `False` forbids the backend's fused kernel;
            `True` insists on it and passes `flash_attention=True` on: a
            `ValueError` where the fused kernel cannot be used, and the
            backend raises where no flash kernel fits (on a CPU, say). It
            cannot be combined with `chunk_size`, nor with dropout while
            training (as in Keras). Defaults to `None`.
        chunk_size: Optional positive integer, the number of keys per block
            of the chunked path; asking for it takes that path (see
            `plan_attention`). Defaults to `None` (the kernel chooses).
        query_offset: Non-negative integer, or an integer scalar tensor (a
            cache's update index while decoding), the key position of the
            first query for `causal` and `sliding_window`: query `i` sits at
            position `i + query_offset`, so causally it sees key `j` when
            `j <= i + query_offset`. Defaults to `0`.

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
    check_positive_float("scale", scale, allow_none=True)
    check_bool("causal", causal)
    check_sliding_window(sliding_window)
    check_rate("dropout", dropout)
    check_bool("training", training, allow_none=True)
    if not isinstance(seed, keras.random.SeedGenerator):
        seed = check_seed(seed)  # a Python int: Keras's random ops' type
    check_bool("return_scores", return_scores)
    check_bool("flash_attention", flash_attention, allow_none=True)
    check_paths(chunk_size, flash_attention, dropout if training else 0.0)
    _check_query_offset(query_offset)
    query, key, value = (
        t if isinstance(t, keras.KerasTensor) else ops.convert_to_tensor(t)
        for t in (query, key, value)
    )
    _validate_shapes(query, key, value)

    squeezed = len(query.shape) == 3
    if squeezed:
        query, key, value = (ops.expand_dims(t, 2) for t in (query, key, value))
    batch, q_len, heads, dim = (_backend.comparable_dim(d) for d in query.shape)
    k_len = _backend.comparable_dim(key.shape[1])
    _check_last_position(query_offset, q_len)
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
    if padding_mask is not None:
        if not isinstance(padding_mask, keras.KerasTensor):
            padding_mask = ops.convert_to_tensor(padding_mask)
        _check_padding_mask(padding_mask, batch, k_len)
        padding_mask = as_bool_mask("padding_mask", padding_mask, "a real key")
    options = {
        "scale": scale,
        "causal": causal,
        "sliding_window": sliding_window,
        "dropout": dropout,
        "training": training,
        "return_scores": return_scores,
        "chunk_size": chunk_size,
        "flash_attention": flash_attention,
    }
    symbolic = (query, key, value, mask, padding_mask, query_offset)
    if any(isinstance(t, keras.KerasTensor) for t in symbolic):
        # A node of a functional model, which runs this function on the
        # tensors when the model runs; the refusals of the plan come then.
        operation = _SymbolicAttention(squeezed, seed, **options)
        return operation.symbolic_call(
            query, key, value, mask, padding_mask, query_offset
        )
    plan = _plan(query, key, value, mask, padding_mask, options)
    # After the plan, which refuses what cannot be honoured, even with no query.
    if 0 in (batch, q_len):  # None (a traced length) is not 0
        return _no_query(query, key, value, squeezed, return_scores)

    # Padding is ignored whatever it holds, and so is a key that `mask`,
    # `causal` and `sliding_window` together hide from every query (a
    # cache's unused slots): a select (never a multiply, as 0 x NaN is NaN)
    # zeros such keys and values before any path sees them. Padded queries
    # are the caller's (the layers zero their inputs and outputs the same
    # way).
    seen = _seen_keys(query, key, mask, causal, sliding_window, query_offset)
    if padding_mask is not None:
        seen = padding_mask if seen is None else ops.logical_and(padding_mask, seen)
    if seen is not None:
        real = _with_axes(seen, (2, 3))
        key, value = (ops.where(real, t, ops.zeros((), t.dtype)) for t in (key, value))

    scores = None
    if plan.path == "chunked":
        output = _chunked_attention(
            query,
            key,
            value,
            mask=mask,
            padding_mask=padding_mask,
            scale=scale,
            causal=causal,
            sliding_window=sliding_window,
            chunk_size=plan.chunk_size,
            query_offset=query_offset,
        )
    else:
        positional = positional_mask(
            ops.shape(query)[1],
            ops.shape(key)[1],
            causal,
            sliding_window,
            query_offset,
        )
        if positional is not None:
            mask = positional if mask is None else ops.logical_and(mask, positional)
        if plan.path == "fused":
            if padding_mask is not None:
                keys = _with_axes(padding_mask, (1, 2))
                mask = keys if mask is None else ops.logical_and(mask, keys)
            output = _backend.fused_attention(
                query, key, value, mask, scale, flash_attention
            )
            if mask is not None:
                # Fused kernels average uniformly over a fully-masked row;
                # the package's rule is zeros.
                output = ops.where(
                    _query_has_key(mask), output, ops.zeros((), output.dtype)
                )
        else:
            output, scores = _plain_attention(
                query,
                key,
                value,
                mask=mask,
                padding_mask=padding_mask,
                scale=scale,
                dropout=dropout,
                training=training,
                seed=seed,
                return_scores=return_scores,
            )

    if squeezed:
        output = ops.squeeze(output, 2)
    if return_scores:
        return output, scores
    return output


@keras.saving.register_keras_serializable(
    package="keras_selfattn", name="scaled_dot_product_attention"
)
class _SymbolicAttention(keras.Operation):
    """The kernel called on symbolic (`keras.Input`) arguments: a node of a
    functional model that runs `scaled_dot_product_attention` with the same
    options on the tensors when the model runs, and that a `.keras` file
    saves, as Keras's own `ops.dot_product_attention` is one.

    It gets the 4-D query, key and value and the normalized masks (the
    squeezing of 3-D inputs is undone on the way out).
    """

    def __init__(self, squeezed: bool = False, seed=None, name=None, **options):
        super().__init__(name=name)
        self.squeezed = squeezed
        self.seed = seed
        self.options = options

    def get_config(self) -> dict:
        seed = self.seed
        if isinstance(seed, keras.random.SeedGenerator):
            seed = keras.saving.serialize_keras_object(seed)
        return {
            "name": self.name,
            "squeezed": self.squeezed,
            "seed": seed,
            **self.options,
        }

    @classmethod
    def from_config(cls, config: dict):
        config = dict(config)
        if isinstance(config.get("seed"), dict):
            config["seed"] = keras.saving.deserialize_keras_object(config["seed"])
        return cls(**config)

    def call(self, query, key, value, mask, padding_mask, query_offset):
        result = scaled_dot_product_attention(
            query,
            key,
            value,
            mask,
            padding_mask=padding_mask,
            query_offset=query_offset,
            seed=self.seed,
            **self.options,
        )
        if not self.squeezed:
            return result
        if self.options["return_scores"]:
            return ops.squeeze(result[0], 2), result[1]
        return ops.squeeze(result, 2)

    def compute_output_spec(self, query, key, value, *masks_and_offset):
        batch, q_len, heads = query.shape[:3]
        out_shape = (batch, q_len, heads, value.shape[-1])
        if self.squeezed:
            out_shape = (batch, q_len, value.shape[-1])
        output = keras.KerasTensor(out_shape, dtype=value.dtype)
        if not self.options["return_scores"]:
            return output
        scores_shape = (batch, heads, q_len, key.shape[1])
        return output, keras.KerasTensor(scores_shape, dtype=query.dtype)
