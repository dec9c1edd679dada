"""A plain NumPy reference for scaled dot-product attention, in float64."""

from __future__ import annotations

import numpy as np


def reference_attention(
    query,
    key,
    value,
    mask=None,
    scale=None,
    causal=False,
    sliding_window=None,
    query_offset=0,
):
    """softmax(Q Kᵀ · scale) V, written the obvious way.

    Shapes (B, T, H, D) or (B, T, D). `key` and `value` may have fewer heads
    than `query` (grouped-query attention): query head `h` uses their head
    `h // (H // kv_heads)`, here by repeating them as Keras's layer does.
    Returns (output, weights) with weights (B, H, Tq, Tk). Rows that may
    attend to nothing give zeros. Query `i` sits at key position
    `i + query_offset` for the causal and window rules.
    """
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (query, key, value))
    squeezed = q.ndim == 3
    if squeezed:
        q, k, v = q[:, :, None], k[:, :, None], v[:, :, None]
    groups = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    batch, q_len, heads, dim = q.shape
    k_len = k.shape[1]
    scale = 1.0 / np.sqrt(dim) if scale is None else scale
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    allowed = np.ones((batch, heads, q_len, k_len), dtype=bool)
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.ndim == 3:
            mask = mask[:, None]
        allowed &= np.broadcast_to(mask, allowed.shape)
    i = np.arange(q_len)[:, None] + query_offset
    j = np.arange(k_len)[None, :]
    if causal:
        allowed &= j <= i
    if sliding_window is not None:
        allowed &= np.abs(i - j) < sliding_window
    logits = np.where(allowed, logits, -np.inf)
    row_max = np.max(logits, axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    weights = np.exp(logits - row_max)
    total = weights.sum(axis=-1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
    output = np.einsum("bhqk,bkhd->bqhd", weights, v)
    if squeezed:
        output = output[:, :, 0]
    return output, weights
