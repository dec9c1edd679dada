"""MultiHeadAttention: a drop-in replacement for keras.layers.MultiHeadAttention."""

from __future__ import annotations

import string

import keras
from keras import constraints, initializers, ops, regularizers

from keras_selfattn._validation import (
    check_paths,
    check_positive_float,
    check_positive_int,
    check_rank,
    check_rate,
    invalid,
)
from keras_selfattn.attention import scaled_dot_product_attention
from keras_selfattn.layers._common import (
    check_keras_mask,
    clone_initializer,
    padding_mask,
    zero_padded,
)

_LAYOUT = "(batch, seq, features)"


def _projection(num_in: int, num_out: int):
    """Einsum equation and bias axes: (b, t, *in) x (*in, *out) -> (b, t, *out)."""
    letters = iter(string.ascii_lowercase[2:])
    ins = "".join(next(letters) for _ in range(num_in))
    outs = "".join(next(letters) for _ in range(num_out))
    return f"ab{ins},{ins}{outs}->ab{outs}", outs


@keras.saving.register_keras_serializable(package="keras_selfattn")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention, a drop-in for `keras.layers.MultiHeadAttention`.

    Shapes: `query` `(batch, q_len, query_dim)`, `value` and `key`
    `(batch, k_len, dim)` in; `(batch, q_len, output_dim)` out, where
    `output_dim` is `query_dim` unless `output_shape` says otherwise; with
    `return_attention_scores=True`, also the weights
    `(batch, num_heads, q_len, k_len)`.

    The constructor, the call signature and the weights (names, order and
    shapes) are those of `keras.layers.MultiHeadAttention`, so
    `ours.set_weights(theirs.get_weights())` reproduces Keras's results. The
    attention itself is `keras_selfattn.scaled_dot_product_attention`, which
    differs from Keras where Keras is wrong or inconsistent:

    - A query that may attend to no key (a padded query, or a mask row that
      is all False) gets all-zero weights and a zero output, on every path.
      Keras's fused path returns a uniform average over the masked keys, and
      its other path a softmax over large negative numbers.
    - With `return_attention_scores`, the symbolic score shape of
      cross-attention is `(batch, heads, q_len, k_len)`; Keras 3.15 reports
      `q_len` twice.
    - With float16 inputs Q·Kᵀ and the softmax run in float32 and cannot
      overflow; Keras's TensorFlow path computes Q·Kᵀ in float16.

    Only the default `attention_axes` (attention over the sequence axis of
    3-D inputs) is supported; any other value raises `NotImplementedError`.

    Masking: Keras masks on `query`, `value` and `key` are combined with
    `attention_mask`, `use_causal_mask` and `sliding_window`. A padded key
    gets exactly zero weight; a padded query position outputs zeros; the
    output carries the query's mask.

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
            the batch and sequence axes. Defaults to `None`, meaning the
            query's last dimension.
        attention_axes: Must be `None` (the default) or the sequence axis;
            other values raise `NotImplementedError`.
        sliding_window: Optional positive integer `w`: query `i` attends only
            to keys `j` with `|i - j| < w`. Defaults to `None`.
        flash_attention: Optional boolean. `None` uses the backend's fused
            kernel when the options allow; `True` insists on it: it forbids
            `dropout` and `return_attention_scores` (as Keras does) and
            raises a `ValueError` where the kernel cannot use it (see
            `keras_selfattn.scaled_dot_product_attention`); `False` never
            uses it. Defaults to `None`.
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
            (Gated Attention). Defaults to `False`.
        seed: Optional integer seed for the dropout. Defaults to `None`.
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
        query: Query tensor `(batch, q_len, query_dim)`.
        value: Value tensor `(batch, k_len, value_in_dim)`.
        key: Optional key tensor `(batch, k_len, key_in_dim)`. Defaults to
            `value`.
        query_mask: Optional boolean `(batch, q_len)`. Keras fills it (and
            `value_mask`, `key_mask`) from the inputs' Keras masks.
        value_mask: Optional boolean `(batch, k_len)`.
        key_mask: Optional boolean `(batch, k_len)`.
        attention_mask: Optional boolean `(batch, q_len, k_len)` (or
            broadcastable to `(batch, heads, q_len, k_len)`), True where a
            query may attend to a key.
        return_attention_scores: Boolean. If True, return
            `(output, scores)`. Defaults to `False`.
        training: Python boolean, whether dropout is active.
        use_causal_mask: Boolean. If True, query `i` attends only to keys
            `j <= i`. Defaults to `False`.

    Returns:
        `output` `(batch, q_len, output_dim)`, or the tuple
        `(output, scores)` with `scores` `(batch, num_heads, q_len, k_len)`.

    Example:

    >>> layer = MultiHeadAttention(num_heads=2, key_dim=2)
    >>> target = keras.Input(shape=[8, 16])
    >>> source = keras.Input(shape=[4, 16])
    >>> output, scores = layer(target, source, return_attention_scores=True)
    >>> output.shape, scores.shape
    ((None, 8, 16), (None, 2, 8, 4))
    """

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
        check_positive_int("num_heads", num_heads)
        check_positive_int("key_dim", key_dim)
        check_positive_int("value_dim", value_dim, allow_none=True)
        check_rate("dropout", dropout)
        check_positive_int("sliding_window", sliding_window, allow_none=True)
        check_positive_float("scale", scale, allow_none=True)
        check_paths(chunk_size, flash_attention, dropout)
        if isinstance(output_shape, int):
            output_shape = (output_shape,)
        if output_shape is not None:
            try:
                output_shape = tuple(output_shape)
            except TypeError:
                output_shape = None
            if not output_shape or not all(
                isinstance(d, int) and d > 0 for d in output_shape
            ):
                raise invalid(
                    "output_shape",
                    "a positive int or a tuple of positive ints",
                    output_shape,
                )
        if isinstance(attention_axes, int):
            attention_axes = (attention_axes,)
        if attention_axes is not None:
            attention_axes = tuple(attention_axes)
            if attention_axes not in ((1,), (-2,)):
                raise NotImplementedError(
                    "keras_selfattn.MultiHeadAttention attends over the "
                    "sequence axis of 3-D inputs only; `attention_axes` must "
                    f"be None. Received: attention_axes={attention_axes}"
                )
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self._output_shape = output_shape
        self.attention_axes = attention_axes
        self.sliding_window = sliding_window
        self.flash_attention = flash_attention
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        self.use_gate = use_gate
        self.seed = seed
        self.scale = scale
        self.chunk_size = chunk_size
        self.supports_masking = True
        self.seed_generator = keras.random.SeedGenerator(seed)

    @property
    def _value_size(self) -> int:
        return self.value_dim or self.key_dim

    def _dense(self, name, num_in, out_shape, activation=None):
        equation, bias_axes = _projection(num_in, len(out_shape))
        # A fresh initializer per sub-layer, as Keras does: unseeded, two
        # projections start from different values; a seeded initializer
        # gives every projection the same start, as in Keras.
        dense = keras.layers.EinsumDense(
            equation,
            output_shape=(None,) + tuple(out_shape),
            bias_axes=bias_axes if self.use_bias else None,
            activation=activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            kernel_constraint=self.kernel_constraint,
            bias_constraint=self.bias_constraint,
            dtype=self.dtype_policy,
            name=name,
        )
        # The projections see masked inputs; the masks are applied in `call`,
        # and a projection just hands them on (no warning about lost masks).
        dense.supports_masking = True
        return dense

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        for name, shape in (
            ("query", query_shape),
            ("value", value_shape),
            ("key", key_shape),
        ):
            check_rank(name, shape, 3, _LAYOUT)
        if None not in (value_shape[1], key_shape[1]) and (
            value_shape[1] != key_shape[1]
        ):
            raise invalid(
                "key",
                f"the same sequence length as `value` ({value_shape[1]})",
                f"<tensor of shape {tuple(key_shape)}>",
            )
        heads = (self.num_heads, self.key_dim)
        # Created in Keras's order, so get_weights()/set_weights() line up.
        self._query_dense = self._dense("query", 1, heads)
        self._query_dense.build(query_shape)
        self._key_dense = self._dense("key", 1, heads)
        self._key_dense.build(key_shape)
        value_heads = (self.num_heads, self._value_size)
        self._gate_dense = None
        if self.use_gate:
            self._gate_dense = self._dense("gate", 1, value_heads, activation="sigmoid")
            self._gate_dense.build(query_shape)
        self._value_dense = self._dense("value", 1, value_heads)
        self._value_dense.build(value_shape)
        out = self._output_shape or (query_shape[-1],)
        self._output_dense = self._dense("attention_output", 2, out)
        self._output_dense.build(tuple(query_shape[:2]) + value_heads)

    @property
    def query_dense(self):
        return self._query_dense

    @property
    def key_dense(self):
        return self._key_dense

    @property
    def value_dense(self):
        return self._value_dense

    @property
    def output_dense(self):
        return self._output_dense

    def _check_inputs(self, query, value, key):
        for name, tensor in (("query", query), ("value", value), ("key", key)):
            check_rank(name, tensor.shape, 3, _LAYOUT)

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
        if key is None:
            key = value
        self._check_inputs(query, value, key)
        if return_attention_scores and self.flash_attention:
            raise ValueError(
                "Returning attention scores is not supported when flash "
                "attention is enabled. Set `flash_attention=None` or "
                "`return_attention_scores=False`. Received: "
                f"flash_attention={self.flash_attention}"
            )
        for name, mask, tensor in (
            ("query_mask", query_mask, query),
            ("value_mask", value_mask, value),
            ("key_mask", key_mask, key),
        ):
            if mask is not None:
                check_keras_mask(name, mask, tensor)
        keys_mask = value_mask
        if key_mask is not None:
            keys_mask = (
                key_mask
                if keys_mask is None
                else ops.logical_and(
                    ops.cast(keys_mask, "bool"), ops.cast(key_mask, "bool")
                )
            )
        mask = padding_mask(query_mask, keys_mask)
        if attention_mask is not None:
            attention_mask = ops.convert_to_tensor(attention_mask)
            if len(attention_mask.shape) == 3:
                attention_mask = ops.expand_dims(attention_mask, 1)
            attention_mask = ops.cast(attention_mask, "bool")
            mask = (
                attention_mask
                if mask is None
                else ops.logical_and(mask, attention_mask)
            )

        gate = self._gate_dense(query) if self._gate_dense is not None else None
        result = scaled_dot_product_attention(
            self._query_dense(query),
            self._key_dense(key),
            self._value_dense(value),
            mask,
            scale=self.scale,
            causal=use_causal_mask,
            sliding_window=self.sliding_window,
            dropout=self.dropout,
            training=bool(training),
            seed=self.seed_generator,
            return_scores=return_attention_scores,
            flash_attention=self.flash_attention,
            chunk_size=self.chunk_size,
        )
        output, scores = result if return_attention_scores else (result, None)
        if gate is not None:
            output = ops.multiply(output, gate)
        output = zero_padded(self._output_dense(output), query_mask)
        if return_attention_scores:
            return output, scores
        return output

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        if self._output_shape:
            return tuple(query_shape[:-1]) + self._output_shape
        return tuple(query_shape)

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
        self._check_inputs(query, value, key)
        output = keras.KerasTensor(
            self.compute_output_shape(query.shape, value.shape, key.shape),
            dtype=self.compute_dtype,
        )
        if not return_attention_scores:
            return output
        scores = keras.KerasTensor(
            (query.shape[0], self.num_heads, query.shape[1], key.shape[1]),
            dtype=self.compute_dtype,
        )
        return output, scores

    def get_config(self):
        base_config = super().get_config()
        config = {
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "output_shape": self._output_shape,
            "attention_axes": self.attention_axes,
            "sliding_window": self.sliding_window,
            "flash_attention": self.flash_attention,
            "kernel_initializer": initializers.serialize(self.kernel_initializer),
            "bias_initializer": initializers.serialize(self.bias_initializer),
            "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": regularizers.serialize(self.bias_regularizer),
            "activity_regularizer": regularizers.serialize(self.activity_regularizer),
            "kernel_constraint": constraints.serialize(self.kernel_constraint),
            "bias_constraint": constraints.serialize(self.bias_constraint),
            "use_gate": self.use_gate,
            "seed": self.seed,
            "scale": self.scale,
            "chunk_size": self.chunk_size,
        }
        return {**base_config, **config}
