"""MultiHeadAttention: keras.layers.MultiHeadAttention on this package's kernel."""

from __future__ import annotations

import inspect
import math

import keras
from keras import ops

from keras_selfattn._validation import (
    check_positive_int,
    check_seed,
    invalid,
)
from keras_selfattn.attention import masked_softmax, scaled_dot_product_attention
from keras_selfattn.layers._common import (
    boolean_mask,
    check_attention_options,
    combined_masks,
    zero_padded,
)
from keras_selfattn.layers._kernel_attention import (
    KernelAttention,
    check_value_and_key_shapes,
)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class MultiHeadAttention(KernelAttention, keras.layers.MultiHeadAttention):
    """Multi-head attention, a drop-in for `keras.layers.MultiHeadAttention`.

    Shapes: `query` `(batch, *query_dims, query_features)`, `value` and `key`
    `(batch, *key_dims, features)` in (any rank of 3 or more);
    `(batch, *query_dims, output_dim)` out, where `output_dim` is
    `query_features` unless `output_shape` says otherwise. With
    `return_attention_scores=True`, also the weights: for 3-D inputs
    `(batch, num_heads, q_len, k_len)`; in general
    `(batch, *other_dims, num_heads, *query_attention_dims,
    *key_attention_dims)`, as Keras lays them out.

    This is a subclass of `keras.layers.MultiHeadAttention`: the constructor,
    the call signature, the weights (names, order, shapes), `attention_axes`,
    LoRA (`layer.query_dense.enable_lora(rank)`), quantization
    (`model.quantize("int8")` or `"float8"`), dtype policy maps and the subclassing
    hooks (`_compute_attention`, `_masked_softmax`, `_sliding_window`,
    `_output_shape`, `query_dense` ... `output_dense`) are Keras's, and
    Keras's own test file passes on it (see the README). The attention
    itself is `keras_selfattn.scaled_dot_product_attention`: the axes named
    by `attention_axes` are flattened into one sequence (other axes join the
    batch), so the kernel's memory-linear chunked path serves images and
    other N-D inputs too. It differs from Keras where Keras is wrong or
    inconsistent:

    - A query that may attend to no key (a padded query, or a mask row that
      is all False) gets all-zero weights and a zero output, on every path.
      Keras's fused path returns a uniform average over the masked keys, and
      its other path a softmax over large negative numbers.
    - Padded query positions (the query's Keras mask) output zeros; Keras
      outputs the projection of an average there.
    - With `return_attention_scores`, the symbolic score shape of
      cross-attention is `(batch, heads, q_len, k_len)`; Keras 3.15 reports
      `q_len` twice.
    - Q·Kᵀ and the softmax run in float32 under float16 and bfloat16 and
      cannot overflow; Keras's TensorFlow path computes Q·Kᵀ in float16.
    - With several attention axes, `use_causal_mask` is causal over the
      flattened (row-major) positions.

    Masking: Keras masks on `query`, `value` and `key` are combined with
    `attention_mask`, `use_causal_mask` and `sliding_window`. Padding reaches
    the kernel as a key mask (no `(q_len, k_len)` tensor is built from it);
    a padded key gets exactly zero weight; a padded query position outputs
    zeros; the output carries the query's mask.

    Args:
        num_heads: Positive integer, the number of attention heads.
        key_dim: Positive integer, the size of each head for query and key.
        value_dim: Optional positive integer, the size of each head for
            value. Defaults to `None`, meaning `key_dim`.
        dropout: Float in `[0, 1)`, dropout rate on the attention weights.
            Defaults to `0.0`.
        use_bias: Boolean, whether the projections use biases.
            Defaults to `True`.
        output_shape: Optional int or tuple, the shape of the output besides
            the batch and query axes. Defaults to `None`, meaning the
            query's last dimension.
        attention_axes: Optional int or tuple of ints, the axes attention
            runs over, between the batch and the features of the inputs.
            Negative values count as in Keras, from the end of the projected
            `(batch, *dims, heads, dim)`: `-2` is the last axis before the
            features (`-1`, the heads, is refused). Defaults to `None`:
            every axis between the batch and the features.
        sliding_window: Optional positive integer `w`: query `i` attends only
            to keys `j` with `|i - j| < w`. Needs Keras 3.15 or newer (an
            older Keras raises a `ValueError`). Defaults to `None`.
        flash_attention: Optional boolean. `None` (or Keras's
            `keras.config.enable_flash_attention()`) uses the backend's fused
            kernel when the options allow; `True` insists on it: it forbids
            `dropout` and `return_attention_scores` (as Keras does) and
            raises a `ValueError` where the kernel cannot use it (see
            `keras_selfattn.scaled_dot_product_attention`); `False` (or
            `keras.config.disable_flash_attention()`) never uses it.
            Defaults to `None`.
        kernel_initializer: Initializer for the dense kernels.
            Defaults to `"glorot_uniform"`.
        bias_initializer: Initializer for the dense biases.
            Defaults to `"zeros"`.
        kernel_regularizer: Optional regularizer for the dense kernels.
            Defaults to `None`.
        bias_regularizer: Optional regularizer for the dense biases.
            Defaults to `None`.
        activity_regularizer: Optional regularizer for the output.
            Defaults to `None`.
        kernel_constraint: Optional constraint for the dense kernels.
            Defaults to `None`.
        bias_constraint: Optional constraint for the dense biases.
            Defaults to `None`.
        use_gate: Boolean. If True, a sigmoid gate projected from the query
            multiplies the attention output before the output projection
            (Gated Attention). Needs Keras 3.14 or newer (an older Keras
            raises a `ValueError`). Defaults to `False`.
        seed: Optional integer seed for the dropout, from 0 to 2**31 - 1
            (the seeds every backend takes). Defaults to `None`.
        scale: Optional positive float multiplying the logits before the
            softmax. Defaults to `None`, meaning `1 / sqrt(key_dim)`.
        chunk_size: Optional positive integer. If set, attention runs over
            blocks of `chunk_size` keys with an online softmax, in memory
            linear in the sequence length (training too; see
            `keras_selfattn.scaled_dot_product_attention`). That path has
            no dropout: `chunk_size` with `dropout > 0`, or with
            `flash_attention=True`, raises a `ValueError` here, in the
            constructor. Defaults to `None`, which lets the kernel choose:
            the chunked path for long sequences, the plain one otherwise.
        **kwargs: Base layer arguments, such as `name` and `dtype`.

    Call arguments:
        query: Query tensor `(batch, *query_dims, query_features)`.
        value: Value tensor `(batch, *key_dims, features)`.
        key: Optional key tensor `(batch, *key_dims, key_features)`.
            Defaults to `value`.
        query_mask: Optional boolean `(batch, *query_dims)`. Keras fills it
            (and `value_mask`, `key_mask`) from the inputs' Keras masks.
        value_mask: Optional boolean `(batch, *key_dims)`.
        key_mask: Optional boolean `(batch, *key_dims)`.
        attention_mask: Optional boolean mask, True where a query may attend
            to a key: `(batch, q_len, k_len)` for 3-D inputs (or
            broadcastable to `(batch, heads, q_len, k_len)`); for N-D inputs
            the layout of the scores without the heads axis.
        return_attention_scores: Boolean. If True, return
            `(output, scores)`. Defaults to `False`.
        training: Python boolean, whether dropout is active.
        use_causal_mask: Boolean. If True, query `i` attends only to keys
            `j <= i`. Defaults to `False`.

    Returns:
        `output` `(batch, *query_dims, output_dim)`, or the tuple
        `(output, scores)`.

    Example:

    >>> layer = MultiHeadAttention(num_heads=2, key_dim=2)
    >>> target = keras.Input(shape=[8, 16])
    >>> source = keras.Input(shape=[4, 16])
    >>> output, scores = layer(target, source, return_attention_scores=True)
    >>> tuple(output.shape), tuple(scores.shape)
    ((None, 8, 16), (None, 2, 8, 4))
    >>> images = np.random.rand(1, 5, 6, 3).astype("float32")
    >>> tuple(MultiHeadAttention(2, 4)(images, images).shape)
    (1, 5, 6, 3)
    """

    # A Keras older than `sliding_window` (3.15) and `use_gate` (3.14)
    # leaves them unset; our `__init__` sets them (see `_adopt`).
    _ADOPT_DEFAULTS = (("_sliding_window", None), ("_use_gate", False))

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        value_dim: int | None = None,
        dropout: float = 0.0,
        use_bias: bool = True,
        output_shape=None,
        attention_axes=None,
        sliding_window: int | None = None,
        flash_attention: bool | None = None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        use_gate: bool = False,
        seed: int | None = None,
        scale: float | None = None,
        chunk_size: int | None = None,
        **kwargs,
    ):
        self._check_arguments(
            num_heads=num_heads, key_dim=key_dim, value_dim=value_dim,
            dropout=dropout, use_bias=use_bias, output_shape=output_shape,
            attention_axes=attention_axes, sliding_window=sliding_window,
            flash_attention=flash_attention, use_gate=use_gate, seed=seed,
            scale=scale, chunk_size=chunk_size,
        )  # fmt: skip
        # Keras's constructor takes only Python integers (ours NumPy's too).
        num_heads, key_dim = int(num_heads), int(key_dim)
        seed = check_seed(seed)
        value_dim = None if value_dim is None else int(value_dim)
        sliding_window = None if sliding_window is None else int(sliding_window)
        newer = _for_this_keras(
            sliding_window=sliding_window,
            flash_attention=flash_attention,
            use_gate=use_gate,
            seed=seed,
        )
        super().__init__(
            num_heads=num_heads,
            key_dim=key_dim,
            value_dim=value_dim,
            dropout=dropout,
            use_bias=use_bias,
            output_shape=output_shape,
            attention_axes=attention_axes,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **newer,
            **kwargs,
        )
        # What a Keras older than the argument leaves unset (at its default).
        self._sliding_window = sliding_window
        self._use_gate = use_gate
        # Keras's hooks (and subclasses of them) scale by this attribute.
        self._inverse_sqrt_key_dim = self._set_kernel_options(
            flash_attention, scale, chunk_size, key_dim
        )

    @staticmethod
    def _check_arguments(
        *, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True,
        output_shape=None, attention_axes=None, sliding_window=None,
        flash_attention=None, use_gate=False, seed=None, scale=None,
        chunk_size=None, **_other,
    ) -> None:  # fmt: skip
        """The constructor's checks, on its arguments or a layer's config
        (`keras_selfattn.convert` checks Keras's layers by it, building
        nothing; the other entries of a config are ignored)."""
        check_positive_int("num_heads", num_heads)
        check_positive_int("key_dim", key_dim)
        check_positive_int("value_dim", value_dim, allow_none=True)
        check_attention_options(
            use_bias=use_bias,
            dropout=dropout,
            sliding_window=sliding_window,
            scale=scale,
            flash_attention=flash_attention,
            chunk_size=chunk_size,
            use_gate=use_gate,
            seed=seed,
        )
        _check_output_shape(output_shape)
        _check_attention_axes(attention_axes)

    # ------------------------------------------------------------ building

    def _check_build_shapes(self, query_shape, value_shape, key_shape=None) -> None:
        key_shape = value_shape if key_shape is None else key_shape
        _check_shapes(query_shape, value_shape, key_shape)
        _check_attention_axes_fit(self._attention_axes, len(query_shape))
        # The axes attention does not run over are batch-like: the same size
        # in `value` (and so `key`, checked above) as in `query`; else the
        # flattened batches differ, and the kernel's refusal named shapes the
        # caller never made.
        axes = self._normalized_attention_axes(len(query_shape) + 1)
        for axis in range(1, len(query_shape) - 1):
            size, wanted = value_shape[axis], query_shape[axis]
            if axis in axes or None in (size, wanted) or size == wanted:
                continue
            raise invalid(
                "value",
                f"the size of `query` ({wanted}) on axis {axis}, which attention "
                f"does not run over (`attention_axes={self._attention_axes}`)",
                f"<tensor of shape {tuple(value_shape)}>",
            )
        self._check_built_features(query_shape, value_shape, key_shape)

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        self._check_build_shapes(query_shape, value_shape, key_shape)
        key_shape = value_shape if key_shape is None else key_shape
        return super().compute_output_shape(query_shape, value_shape, key_shape)

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
    ):
        key = value if key is None else key
        output = keras.KerasTensor(
            self.compute_output_shape(query.shape, value.shape, key.shape),
            dtype=self.compute_dtype,
        )
        if not return_attention_scores:
            return output
        axes = self._normalized_attention_axes(len(query.shape) + 1)
        others = [a for a in range(1, len(query.shape) - 1) if a not in axes]
        scores_shape = (
            query.shape[0],
            *(query.shape[a] for a in others),
            self._num_heads,
            *(query.shape[a] for a in axes),
            *(key.shape[a] for a in axes),
        )
        return output, keras.KerasTensor(scores_shape, dtype=self.compute_dtype)

    def _normalized_attention_axes(self, rank: int) -> tuple[int, ...]:
        """Attention axes of projected tensors of `rank` (B, *dims, N, H)."""
        if self._attention_axes is None:
            return tuple(range(1, rank - 2))
        return tuple(a if a >= 0 else rank - 1 + a for a in self._attention_axes)

    # ------------------------------------------------------------- calling

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
    ):
        key = value if key is None else key
        self._check_build_shapes(query.shape, value.shape, key.shape)
        self._check_scores_allowed(return_attention_scores)
        query_mask, value_mask, key_mask = self._call_masks(
            query, value, key, query_mask, value_mask, key_mask
        )
        padding = combined_masks(value_mask, key_mask)
        attention_mask = boolean_mask("attention_mask", attention_mask, "may attend")
        own_hook = (
            type(self)._compute_attention is MultiHeadAttention._compute_attention
        )
        extra = {}
        if own_hook:
            # Padding travels as a key mask; causal and the window as flags:
            # the kernel builds no (q_len, k_len) mask from them.
            extra["key_padding_mask"] = padding
            if use_causal_mask:
                extra["use_causal_mask"] = True
        else:
            # Keras's hook contract: one merged boolean mask (a subclass's
            # `_compute_attention` may not know the flags).
            attention_mask = self._compute_attention_mask(
                query,
                value,
                value_mask=padding,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask,
            )

        # Padding may hold NaN or inf: zeroed (a select) before projecting.
        query = zero_padded(query, query_mask)
        key, value = zero_padded(key, padding), zero_padded(value, padding)
        gate = self._gate_dense(query) if self._use_gate else None
        attention_output, scores = self._compute_attention(
            self._query_dense(query),
            self._key_dense(key),
            self._value_dense(value),
            attention_mask,
            training,
            return_attention_scores,
            **extra,
        )
        if gate is not None:
            attention_output = ops.multiply(attention_output, gate)
        output = zero_padded(self._output_dense(attention_output), query_mask)
        if return_attention_scores:
            if query_mask is not None and scores is not None:
                rank = len(query.shape) + 1  # projected: (B, *dims, heads, dim)
                flat = _Flattening(rank, self._normalized_attention_axes(rank))
                keep = flat.query_mask_for_scores(query_mask)
                scores = ops.where(keep, scores, ops.zeros((), scores.dtype))
            return output, scores
        return output

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
        key_padding_mask=None,
        query_offset=0,
    ):
        """Attention of projected `(batch, *dims, heads, dim)` tensors.

        Keras's override point, with Keras's signature and meaning, plus two
        arguments that only this class's own hook is given: `key_padding_mask`,
        the `(batch, *key_dims)` padding mask that `call` passes, and
        `query_offset`, the kernel's position of the first query for the
        causal rule (a cache's update index). Returns `(output, scores)`, the
        scores `None` unless `return_attention_scores`.
        """
        self._check_scores_allowed(return_attention_scores)
        rank = len(query.shape)
        axes = self._normalized_attention_axes(rank)
        flat = _Flattening(rank, axes)
        q, k, v = (flat.to_sequences(t) for t in (query, key, value))
        mask = None
        if attention_mask is not None:
            if flat.identity:
                self._check_attention_mask(attention_mask, query, key)
            else:
                flat.check_mask(attention_mask, query, key, self._num_heads)
            # The hook's own check: a subclass may call it with its own mask.
            attention_mask = boolean_mask(
                "attention_mask", attention_mask, "may attend"
            )
            mask = flat.mask_to_sequences(attention_mask, query, key, self._num_heads)
        if key_padding_mask is not None:
            key_padding_mask = flat.padding_to_sequences(key_padding_mask)
        seed = self._dropout_layer.seed_generator if self._dropout > 0 else None
        result = scaled_dot_product_attention(
            q,
            k,
            v,
            mask,
            padding_mask=key_padding_mask,
            scale=self._inverse_sqrt_key_dim,
            causal=bool(use_causal_mask),
            sliding_window=self._sliding_window,
            dropout=self._dropout,
            training=bool(training),
            seed=seed,
            return_scores=bool(return_attention_scores),
            flash_attention=self._flash_attention,
            chunk_size=self._chunk_size,
            query_offset=query_offset,
        )
        output, scores = result if return_attention_scores else (result, None)
        output = flat.from_sequences(output, query)
        if scores is not None:
            scores = flat.scores_from_sequences(scores, query, key)
        return output, scores

    def _masked_softmax(self, attention_scores, attention_mask=None):
        """Keras's hook: the kernel's float32 softmax over the key axes."""
        key_axes = len(self._normalized_attention_axes(len(attention_scores.shape)))
        rank = len(attention_scores.shape)
        if attention_mask is not None:
            expand_at = -key_axes * 2 - 1
            for _ in range(rank - len(attention_mask.shape)):
                attention_mask = ops.expand_dims(attention_mask, expand_at)
        return masked_softmax(
            attention_scores, attention_mask, axis=tuple(range(rank - key_axes, rank))
        )

    def get_config(self):
        base_config = super().get_config()
        config = self._kernel_config()
        return {**base_config, **config}


class _Flattening:
    """Moves attention axes into one sequence axis and back.

    Projected tensors are `(batch, *dims, heads, size)`. The axes that
    attention runs over are flattened, in order, into one sequence; the
    other `dims` join the batch. The default of 3-D inputs (one axis, no
    other) is a no-op.
    """

    def __init__(self, rank: int, axes: tuple[int, ...]):
        self.rank = rank
        self.axes = axes
        self.others = tuple(a for a in range(1, rank - 2) if a not in axes)
        self.perm = (0, *self.others, *axes, rank - 2, rank - 1)
        self.identity = rank == 4 and axes == (1,)

    def _shape(self, x, axes):
        return tuple(ops.shape(x)[a] for a in axes)

    def to_sequences(self, x):
        if self.identity:
            return x
        if self.perm != tuple(range(self.rank)):
            x = ops.transpose(x, self.perm)
        length = math.prod(
            x.shape[a] for a in range(1 + len(self.others), self.rank - 2)
        )
        return ops.reshape(x, (-1, length, *x.shape[-2:]))

    def padding_to_sequences(self, mask):
        """A `(batch, *key_dims)` padding mask -> `(batch', k_len)`."""
        if self.identity:
            return mask
        return self.to_sequences(mask[..., None, None])[..., 0, 0]

    def from_sequences(self, out, like):
        """`(batch', seq, heads, size)` back to `like`'s layout."""
        if self.identity:
            return out
        lead = self._shape(like, (0, *self.others, *self.axes))
        out = ops.reshape(out, (*lead, *out.shape[-2:]))
        if self.perm != tuple(range(self.rank)):
            inverse = tuple(self.perm.index(i) for i in range(self.rank))
            out = ops.transpose(out, inverse)
        return out

    def scores_from_sequences(self, scores, query, key):
        """`(batch', heads, q_len, k_len)` -> Keras's score layout."""
        if self.identity:
            return scores
        lead = self._shape(query, (0, *self.others))
        q_dims = self._shape(query, self.axes)
        k_dims = self._shape(key, self.axes)
        return ops.reshape(scores, (*lead, scores.shape[1], *q_dims, *k_dims))

    def query_mask_for_scores(self, mask):
        """A `(batch, *query_dims)` mask -> broadcastable to Keras's scores
        `(batch, *other_dims, heads, *query_attention_dims, *key_...)`."""
        perm = (0, *self.others, *self.axes)
        if perm != tuple(range(len(perm))):
            mask = ops.transpose(mask, perm)
        mask = ops.expand_dims(mask, 1 + len(self.others))  # the heads axis
        for _ in self.axes:
            mask = ops.expand_dims(mask, -1)  # the key axes
        return mask

    def check_mask(self, mask, query, key, heads) -> None:
        """Raises a `ValueError` naming `attention_mask` for a `mask` that
        does not fit Keras's layout of the scores, `(batch, *other_dims,
        heads, *query_attention_dims, *key_attention_dims)`: its last
        `2 * len(axes)` axes are the attention axes, and the axes before
        them, if any, the first of `(batch, *other_dims, heads)` (Keras
        inserts the missing ones before the attention axes)."""
        n = 2 * len(self.axes)
        lead = (query.shape[0], *(query.shape[a] for a in self.others), heads)
        tail = tuple(t.shape[a] for t in (query, key) for a in self.axes)
        shape = tuple(mask.shape)
        fits = n <= len(shape) <= len(lead) + n and all(
            a in (1, None) or b is None or a == b
            for a, b in zip(shape, (*lead[: len(shape) - n], *tail), strict=True)
        )
        if not fits:
            raise invalid(
                "attention_mask",
                "a boolean tensor broadcastable to (batch, *other_dims, heads, "
                f"*query_attention_dims, *key_attention_dims) = {(*lead, *tail)}, "
                "its leading axes optional",
                f"<tensor of shape {shape}>",
            )

    def mask_to_sequences(self, mask, query, key, heads):
        """An attention mask in Keras's layout (the scores', leading axes
        optional) -> the kernel's (batch', 1 or heads, Tq, Tk)."""
        if self.identity:
            return mask
        n = len(self.axes)
        scores_rank = 2 + len(self.others) + 2 * n  # with the heads axis
        while len(mask.shape) < scores_rank:  # as Keras's `_masked_softmax`
            mask = ops.expand_dims(mask, -2 * n - 1)
        mask_heads = 1 if mask.shape[-2 * n - 1] == 1 else heads
        full = (
            *self._shape(query, (0, *self.others)),
            mask_heads,
            *self._shape(query, self.axes),
            *self._shape(key, self.axes),
        )
        # One axis at a time: TensorFlow's BroadcastTo refuses some rank-6
        # patterns at once ("not supported yet"), such as (1, 2, 1, 4, 1, 4)
        # to (2, 2, 3, 4, 3, 4).
        for axis, size in enumerate(full):
            if not isinstance(size, int) or mask.shape[axis] != size:
                shape = list(ops.shape(mask))
                shape[axis] = size
                mask = ops.broadcast_to(mask, shape)
        q_len = math.prod(query.shape[a] for a in self.axes)
        k_len = math.prod(key.shape[a] for a in self.axes)
        return ops.reshape(mask, (-1, mask_heads, q_len, k_len))


# The Keras release that first takes each of these constructor arguments of
# `keras.layers.MultiHeadAttention`, and the argument's default. On an older
# Keras (down to the floor in setup.cfg) they are not passed on, and asking
# for anything but the default raises.
_KERAS_SINCE = {
    "seed": ("3.4", None),
    "flash_attention": ("3.7", None),
    "use_gate": ("3.14", False),
    "sliding_window": ("3.15", None),
}
_KERAS_ACCEPTS = frozenset(
    inspect.signature(keras.layers.MultiHeadAttention.__init__).parameters
)


def _for_this_keras(**arguments) -> dict:
    """The `arguments` that the installed Keras's constructor accepts.

    Raises:
        ValueError: An argument this Keras lacks, set to other than its
            default.
    """
    accepted = {}
    for name, value in arguments.items():
        since, default = _KERAS_SINCE[name]
        if name in _KERAS_ACCEPTS:
            accepted[name] = value
        elif value != default:
            raise ValueError(
                f"Argument `{name}` of `MultiHeadAttention` needs Keras {since} "
                f"or newer; the installed Keras is {keras.__version__}. "
                f"Received: {name}={value!r}"
            )
    return accepted


def _check_output_shape(output_shape) -> None:
    shape = (output_shape,) if isinstance(output_shape, int) else output_shape
    if shape is None:
        return
    try:
        dims = tuple(shape)
    except TypeError:
        dims = ()
    if not dims or not all(
        isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims
    ):
        raise ValueError(
            "Invalid `output_shape`: expected a positive int or a tuple of "
            f"positive ints. Received: output_shape={output_shape!r}"
        )


def _check_attention_axes(attention_axes) -> None:
    axes = (attention_axes,) if isinstance(attention_axes, int) else attention_axes
    if axes is None:
        return
    if (
        not isinstance(axes, (list, tuple))
        or not axes
        or not all(isinstance(a, int) and not isinstance(a, bool) for a in axes)
        or len(set(axes)) != len(axes)
    ):
        raise invalid(
            "attention_axes",
            "an int or a non-empty tuple of distinct ints",
            attention_axes,
        )


def _check_attention_axes_fit(attention_axes, rank: int) -> None:
    """Each axis lies between the batch and the features of an input of
    `rank`, once: 1 to rank - 2, or (as Keras counts a negative axis, from
    the end of the projected `(batch, *dims, heads, dim)`) 1 - rank to -2."""
    if attention_axes is None:
        return
    axes = (attention_axes,) if isinstance(attention_axes, int) else attention_axes
    places = [a if a >= 0 else rank + a for a in axes]
    if all(1 <= p <= rank - 2 for p in places) and len(set(places)) == len(places):
        return
    last = rank - 2
    positive = "1" if last == 1 else f"from 1 to {last}"
    negative = "-2" if last == 1 else f"from {1 - rank} to -2"
    raise invalid(
        "attention_axes",
        f"axes between the batch and the features of the rank-{rank} inputs, "
        f"each once: {positive}, or {negative} (negative axes count from the "
        "end of the projected (batch, *dims, heads, dim), as in Keras; -1 is "
        "the heads axis)",
        attention_axes,
    )


def _check_shapes(query_shape, value_shape, key_shape) -> None:
    """Keras's rule first (its wording, which users match), then ranks."""
    check_value_and_key_shapes(value_shape, key_shape)
    for name, shape in (("query", query_shape), ("value", value_shape)):
        if len(shape) < 3:
            raise invalid(
                name,
                "a tensor of rank 3 or more, (batch, *dims, features) "
                "(a 3-D tensor (batch, seq, features), for example)",
                f"<tensor of shape {tuple(shape)}>",
            )
    if len(query_shape) != len(value_shape):
        raise invalid(
            "value",
            f"the rank of `query` ({len(query_shape)})",
            f"<tensor of shape {tuple(value_shape)}>",
        )
    if query_shape[-1] is None or value_shape[-1] is None:
        raise invalid(
            "query",
            "known last (features) dimensions of `query` and `value`",
            f"<shapes {tuple(query_shape)} and {tuple(value_shape)}>",
        )
