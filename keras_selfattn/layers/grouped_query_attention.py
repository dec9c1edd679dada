"""GroupQueryAttention: keras.layers.GroupQueryAttention on this package's kernel."""

from __future__ import annotations

import inspect

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
    zero_padded_scores,
)
from keras_selfattn.layers._kernel_attention import (
    KernelAttention,
    check_value_and_key_shapes,
)

# The Keras release whose `keras.layers.GroupQueryAttention` has the
# constructor this drop-in mirrors: the layer exists since Keras 3.0.0,
# `flash_attention` and `seed` came in 3.7, `use_gate` in 3.14 and
# `sliding_window` in 3.15.
KERAS_NEEDED = "3.15"
_NEEDED_ARGUMENTS = ("flash_attention", "seed", "use_gate", "sliding_window")


def _keras_base():
    """Keras's layer, or None where the installed Keras lacks it (or lacks
    the constructor arguments this drop-in mirrors)."""
    base = getattr(keras.layers, "GroupQueryAttention", None)
    if base is None:
        return None
    params = inspect.signature(base.__init__).parameters
    if not all(name in params for name in _NEEDED_ARGUMENTS):
        return None
    return base


class _MissingKerasLayer(keras.layers.Layer):
    """Stands in for Keras's layer where the installed Keras has none."""

    def __init__(self, *args, **kwargs):
        raise ImportError(
            "`keras_selfattn.GroupQueryAttention` subclasses "
            "`keras.layers.GroupQueryAttention` as Keras "
            f"{KERAS_NEEDED} or newer defines it (with `use_gate` and "
            "`sliding_window`); the installed Keras is "
            f"{keras.__version__}. Upgrade with "
            f"`pip install 'keras>={KERAS_NEEDED}'`."
        )


_Base = _keras_base() or _MissingKerasLayer
# Whether the installed Keras has the layer this drop-in subclasses.
ON_THIS_KERAS = _Base is not _MissingKerasLayer


@keras.saving.register_keras_serializable(package="keras_selfattn")
class GroupQueryAttention(KernelAttention, _Base):
    """Grouped-query attention, a drop-in for `keras.layers.GroupQueryAttention`.

    Shapes: `query` `(batch, q_len, features)`, `value` and `key`
    `(batch, k_len, features)` in; `(batch, q_len, features)` out. With
    `return_attention_scores=True`, also the weights
    `(batch, num_query_heads, q_len, k_len)`.

    Grouped-query attention (Ainslie et al., 2023) projects `num_query_heads`
    query heads but only `num_key_value_heads` key and value heads; query
    head `h` uses key and value head `h // (num_query_heads //
    num_key_value_heads)`. One key-value head is multi-query attention; as
    many as the query heads is multi-head attention.

    This is a subclass of `keras.layers.GroupQueryAttention` (Keras's class
    `GroupedQueryAttention`): the constructor, the call signature, the
    weights (names, order, shapes) and the subclassing hooks
    (`_compute_attention`, `_compute_attention_mask`, `_masked_softmax`,
    `_query_dense` ... `_output_dense`) are Keras's, and Keras's own test
    file passes on it (see the README). It needs Keras 3.15 or newer. The
    attention itself is `keras_selfattn.scaled_dot_product_attention`, which
    takes the key and value heads as they are: where Keras repeats them to
    the query's heads (`ops.repeat`) before attending, the kernel views the
    queries as `(batch, q_len, num_key_value_heads, groups, head_dim)` and
    contracts each key-value head with its group, on the plain and the
    memory-linear chunked path (long sequences, or `chunk_size`), in
    training too. JAX's fused kernel takes the heads grouped as well;
    PyTorch's gets them repeated. It differs from Keras where Keras is wrong
    or inconsistent:

    - A query that may attend to no key (a padded query, or a mask row that
      is all False) gets all-zero weights and a zero output, on every path.
    - Padded query positions (the query's Keras mask) output zeros.
    - Q·Kᵀ and the softmax run in float32 under float16 and bfloat16.

    Masking: Keras masks on `query`, `value` and `key` are combined with
    `attention_mask`, `use_causal_mask` and `sliding_window`. Padding reaches
    the kernel as a key mask (no `(q_len, k_len)` tensor is built from it);
    a padded key gets exactly zero weight; the output carries the query's
    mask.

    Args:
        head_dim: Positive integer, the size of each attention head.
        num_query_heads: Positive integer, the number of query heads.
        num_key_value_heads: Positive integer, the number of key and value
            heads; it must divide `num_query_heads`.
        dropout: Float in `[0, 1)`, dropout rate on the attention weights.
            Defaults to `0.0`.
        use_bias: Boolean, whether the projections use biases.
            Defaults to `True`.
        sliding_window: Optional positive integer `w`: query `i` attends only
            to keys `j` with `|i - j| < w`. Defaults to `None`.
        flash_attention: Optional boolean. `None` (or Keras's
            `keras.config.enable_flash_attention()`) uses the backend's fused
            kernel when the options allow; `True` insists on it (and forbids
            `dropout` and `return_attention_scores`, as Keras does); `False`
            (or `keras.config.disable_flash_attention()`) never uses it.
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
            (Gated Attention). Defaults to `False`.
        seed: Optional integer seed for the dropout, from 0 to 2**31 - 1
            (the seeds every backend takes). Defaults to `None`.
        scale: Optional positive float multiplying the logits before the
            softmax. Defaults to `None`, meaning `1 / sqrt(head_dim)`.
        chunk_size: Optional positive integer. If set, attention runs over
            blocks of `chunk_size` keys with an online softmax, in memory
            linear in the sequence length (see
            `keras_selfattn.scaled_dot_product_attention`); it cannot be
            combined with `dropout > 0` or `flash_attention=True`. Defaults
            to `None`, which lets the kernel choose.
        **kwargs: Base layer arguments, such as `name` and `dtype`.

    Call arguments:
        query: Query tensor `(batch, q_len, features)`.
        value: Value tensor `(batch, k_len, features)`.
        key: Optional key tensor `(batch, k_len, features)`. Defaults to
            `value`.
        query_mask: Optional boolean `(batch, q_len)`. Keras fills it (and
            `value_mask`, `key_mask`) from the inputs' Keras masks.
        value_mask: Optional boolean `(batch, k_len)`.
        key_mask: Optional boolean `(batch, k_len)`.
        attention_mask: Optional boolean mask `(batch, q_len, k_len)`, True
            where a query may attend to a key (broadcastable to
            `(batch, num_query_heads, q_len, k_len)`).
        return_attention_scores: Boolean. If True, return
            `(output, scores)`. Defaults to `False`.
        training: Python boolean, whether dropout is active.
        use_causal_mask: Boolean. If True, query `i` attends only to keys
            `j <= i`. Defaults to `False`.

    Returns:
        `output` `(batch, q_len, features)`, or the tuple `(output, scores)`.

    Example:

    >>> layer = GroupQueryAttention(
    ...     head_dim=4, num_query_heads=4, num_key_value_heads=2)
    >>> target = keras.Input(shape=[8, 16])
    >>> source = keras.Input(shape=[5, 16])
    >>> output, scores = layer(target, source, return_attention_scores=True)
    >>> tuple(output.shape), tuple(scores.shape)
    ((None, 8, 16), (None, 4, 8, 5))
    """

    def __init__(
        self,
        head_dim: int,
        num_query_heads: int,
        num_key_value_heads: int,
        dropout: float = 0.0,
        use_bias: bool = True,
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
            head_dim=head_dim, num_query_heads=num_query_heads,
            num_key_value_heads=num_key_value_heads, dropout=dropout,
            use_bias=use_bias, sliding_window=sliding_window,
            flash_attention=flash_attention, use_gate=use_gate, seed=seed,
            scale=scale, chunk_size=chunk_size,
        )  # fmt: skip
        # Keras's constructor takes only Python integers (ours NumPy's too).
        sliding_window = None if sliding_window is None else int(sliding_window)
        seed = check_seed(seed)
        super().__init__(
            head_dim=head_dim,
            num_query_heads=num_query_heads,
            num_key_value_heads=num_key_value_heads,
            dropout=dropout,
            use_bias=use_bias,
            sliding_window=sliding_window,
            flash_attention=flash_attention,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            use_gate=use_gate,
            seed=seed,
            **kwargs,
        )
        # Keras's hooks (and subclasses of them) scale by this attribute.
        self._inverse_sqrt_head_dim = self._set_kernel_options(
            flash_attention, scale, chunk_size, head_dim
        )

    @staticmethod
    def _check_arguments(
        *, head_dim, num_query_heads, num_key_value_heads, dropout=0.0,
        use_bias=True, sliding_window=None, flash_attention=None,
        use_gate=False, seed=None, scale=None, chunk_size=None, **_other,
    ) -> None:  # fmt: skip
        """The constructor's checks, on its arguments or a layer's config
        (`keras_selfattn.convert` checks Keras's layers by it, building
        nothing; the other entries of a config are ignored)."""
        check_positive_int("head_dim", head_dim)
        check_positive_int("num_query_heads", num_query_heads)
        check_positive_int("num_key_value_heads", num_key_value_heads)
        if num_query_heads % num_key_value_heads:
            raise invalid(
                "num_key_value_heads",
                "a divisor of `num_query_heads` (each group of query heads "
                f"shares one key and value head; num_query_heads={num_query_heads})",
                num_key_value_heads,
            )
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

    def _check_build_shapes(self, query_shape, value_shape, key_shape=None) -> None:
        key_shape = value_shape if key_shape is None else key_shape
        _check_shapes(query_shape, value_shape, key_shape)
        self._check_built_features(query_shape, value_shape, key_shape)

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        # Keras's checks first (its messages, which its tests match), then
        # ours: the feature sizes built for, in a symbolic call.
        output_shape = super().compute_output_shape(query_shape, value_shape, key_shape)
        self._check_build_shapes(query_shape, value_shape, key_shape)
        return output_shape

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
        attention_mask = boolean_mask("attention_mask", attention_mask, "may attend")
        # Padding may hold NaN or inf: zeroed (a select) before projecting.
        padding = combined_masks(value_mask, key_mask)
        query = zero_padded(query, query_mask)
        key, value = zero_padded(key, padding), zero_padded(value, padding)
        gate = self._gate_dense(query) if self.use_gate else None
        projected_query = self._query_dense(query)
        projected_key = self._key_dense(key)
        projected_value = self._value_dense(value)
        own_hook = (
            type(self)._compute_attention is GroupQueryAttention._compute_attention
        )
        if own_hook:
            # The kv heads go in as they are, padding as a key mask, causal
            # and the window as flags: nothing repeated, no (q_len, k_len)
            # mask built from them.
            output, scores = self._compute_attention(
                projected_query,
                projected_key,
                projected_value,
                attention_mask=attention_mask,
                training=training,
                use_causal_mask=use_causal_mask,
                return_attention_scores=return_attention_scores,
                key_padding_mask=padding,
            )
        else:
            # Keras's hook contract, for a subclass's `_compute_attention`:
            # one merged boolean mask, kv heads repeated to the query's, and
            # the scores flag on the layer.
            self._return_attention_scores = return_attention_scores
            attention_mask = self._compute_attention_mask(
                query,
                value,
                query_mask=query_mask,
                value_mask=value_mask,
                key_mask=key_mask,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask,
            )
            output, scores = self._compute_attention(
                projected_query,
                ops.repeat(projected_key, self.num_repeats, axis=2),
                ops.repeat(projected_value, self.num_repeats, axis=2),
                attention_mask=attention_mask,
                training=training,
            )
        if gate is not None:
            output = ops.multiply(output, gate)
        output = zero_padded(self._output_dense(output), query_mask)
        if return_attention_scores:
            return output, zero_padded_scores(scores, query_mask)
        return output

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        use_causal_mask=False,
        return_attention_scores=None,
        key_padding_mask=None,
    ):
        """Attention of projected `(batch, seq, heads, head_dim)` tensors.

        Keras's override point, with Keras's signature and meaning; `key`
        and `value` may have `num_key_value_heads` heads (as `call` passes
        them to this class's own hook) or be repeated to `num_query_heads`
        (as Keras passes them). Two arguments of ours: `return_attention_scores`
        (`None`, as Keras's callers leave it, reads the layer's
        `_return_attention_scores`) and `key_padding_mask`, the
        `(batch, k_len)` padding mask. Returns `(output, scores)`, the scores
        `None` unless asked for.
        """
        if return_attention_scores is None:
            return_attention_scores = self._return_attention_scores
        self._check_scores_allowed(return_attention_scores)
        self._check_attention_mask(attention_mask, query, key)
        seed = self._dropout_layer.seed_generator if self.dropout > 0 else None
        result = scaled_dot_product_attention(
            query,
            key,
            value,
            attention_mask,
            padding_mask=key_padding_mask,
            scale=self._inverse_sqrt_head_dim,
            causal=bool(use_causal_mask),
            sliding_window=self.sliding_window,
            dropout=self.dropout,
            training=bool(training),
            seed=seed,
            return_scores=bool(return_attention_scores),
            flash_attention=self._flash_attention,
            chunk_size=self._chunk_size,
        )
        if return_attention_scores:
            return result
        return result, None

    def _masked_softmax(self, scores, attention_mask=None):
        """Keras's hook: the kernel's float32 softmax over the key axis."""
        if attention_mask is not None:
            for _ in range(len(scores.shape) - len(attention_mask.shape)):
                attention_mask = ops.expand_dims(attention_mask, -3)
        return masked_softmax(scores, attention_mask, axis=-1)

    def get_config(self):
        base_config = super().get_config()
        config = self._kernel_config()
        return {**base_config, **config}


def _check_shapes(query_shape, value_shape, key_shape) -> None:
    """Keras's rule first (its wording, which users match), then ranks."""
    check_value_and_key_shapes(value_shape, key_shape)
    for name, shape in (("query", query_shape), ("value", value_shape)):
        if len(shape) != 3:
            raise invalid(
                name,
                "a 3-D tensor (batch, seq, features)",
                f"<tensor of shape {tuple(shape)}>",
            )
