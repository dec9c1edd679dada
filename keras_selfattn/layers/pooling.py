"""AttentionPooling: a learned, mask-aware attention-weighted average over time."""

from __future__ import annotations

import keras
from keras import ops

from keras_selfattn._validation import (
    check_bool,
    check_floating,
    check_known_last_dim,
    check_non_negative_float,
    check_positive_float,
    check_positive_int,
    check_rank,
    check_rate,
    check_seed,
    invalid,
)
from keras_selfattn.attention import scaled_dot_product_attention
from keras_selfattn.layers._common import (
    check_built_features,
    check_keras_mask,
    set_weight_options,
    weight_options_config,
    zero_padded,
)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class AttentionPooling(keras.layers.Layer):
    """Pools a sequence into one vector with a learned attention query.

    Shapes: `(batch, seq, features)` in, `(batch, features)` out; with
    `return_attention_scores=True`, also the pooling weights
    `(batch, num_heads, seq)`, which sum to 1 over the real positions.

    Each position's vector `x_t` is projected to a key
    `k_t = key_activation(x_t W + b)`, split into `num_heads` heads of
    `key_dim` values. A learned query vector per head attends over the keys
    (`keras_selfattn.scaled_dot_product_attention`, so
    `softmax(q · k_t / sqrt(key_dim))`), and the head's output is the
    weighted average of its `features // num_heads` slice of the inputs. The
    heads are concatenated back to `features` values. The query starts at
    zero, so an untrained layer is a masked mean over time.

    Masking: the layer supports Keras masks. A padded position gets exactly
    zero weight; a sequence with no real position at all pools to zeros. The
    time axis is gone after pooling, so no mask is handed on.

    Args:
        num_heads: Positive integer dividing the number of input features.
            Defaults to `1`.
        key_dim: Optional positive integer, the size of each head's key.
            Defaults to `None`, meaning `features // num_heads`.
        key_activation: Activation of the key projection.
            Defaults to `"tanh"`.
        use_bias: Boolean, whether the key projection adds a bias.
            Defaults to `True`.
        dropout: Float in `[0, 1)`, dropout rate on the pooling weights.
            Defaults to `0.0`.
        scale: Optional positive float multiplying the logits before the
            softmax. Defaults to `None`, meaning `1 / sqrt(key_dim)`.
        seed: Optional integer seed for the dropout, from 0 to 2**31 - 1
            (the seeds every backend takes). Defaults to `None`.
        entropy_penalty: Non-negative float. If positive, the layer adds
            this times the mean entropy (in nats) of its pooling weights to
            its losses while training, so that the pooling prefers a few
            positions where the data allows (with 0 it often stays close to
            a plain average). Defaults to `0.0`.
        kernel_initializer: Initializer for the key projection.
            Defaults to `"glorot_uniform"`.
        bias_initializer: Initializer for its bias. Defaults to `"zeros"`.
        query_initializer: Initializer for the learned query.
            Defaults to `"zeros"` (mean pooling at the start).
        kernel_regularizer: Optional regularizer for the key projection.
            Defaults to `None`.
        bias_regularizer: Optional regularizer for its bias.
            Defaults to `None`.
        query_regularizer: Optional regularizer for the query.
            Defaults to `None`.
        kernel_constraint: Optional constraint for the key projection.
            Defaults to `None`.
        bias_constraint: Optional constraint for its bias.
            Defaults to `None`.
        **kwargs: Base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, seq, features)`.
        mask: Optional boolean tensor `(batch, seq)`, True at real positions.
            Keras passes it in from an upstream masking layer.
        training: Python boolean, whether dropout is active.
        return_attention_scores: Boolean. If True, return
            `(outputs, scores)`. Defaults to `False`.

    Returns:
        `outputs` of shape `(batch, features)`, or the tuple
        `(outputs, scores)` with `scores` of shape `(batch, num_heads, seq)`.

    Example:

    >>> x = np.random.rand(2, 6, 8).astype("float32")
    >>> mask = np.array([[True] * 6, [True] * 3 + [False] * 3])
    >>> pooled, weights = AttentionPooling(num_heads=2)(
    ...     x, mask=mask, return_attention_scores=True)
    >>> tuple(pooled.shape), tuple(weights.shape)
    ((2, 8), (2, 2, 6))
    """

    def __init__(
        self,
        num_heads: int = 1,
        key_dim: int | None = None,
        key_activation="tanh",
        use_bias: bool = True,
        dropout: float = 0.0,
        scale: float | None = None,
        seed: int | None = None,
        entropy_penalty: float = 0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        query_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        query_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        check_positive_int("num_heads", num_heads)
        check_positive_int("key_dim", key_dim, allow_none=True)
        check_bool("use_bias", use_bias)
        check_rate("dropout", dropout)
        check_non_negative_float("entropy_penalty", entropy_penalty)
        check_positive_float("scale", scale, allow_none=True)
        seed = check_seed(seed)  # a Python int: Keras's SeedGenerator's type
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        set_weight_options(
            self,
            key_activation=key_activation,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            query_initializer=query_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            query_regularizer=query_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
        )
        self.use_bias = use_bias
        self.dropout = dropout
        self.scale = scale
        self.seed = seed
        self.entropy_penalty = entropy_penalty
        self.supports_masking = True
        # A seed generator only where there is dropout, as Keras's layers do.
        self.seed_generator = keras.random.SeedGenerator(seed) if dropout else None

    def _head_key_dim(self, features: int) -> int:
        return self.key_dim or features // self.num_heads

    def build(self, input_shape):
        check_rank("inputs", input_shape, 3, "(batch, seq, features)")
        features = input_shape[-1]
        check_known_last_dim("inputs", input_shape, "features")
        if features % self.num_heads:
            raise invalid(
                "num_heads",
                f"a divisor of the number of input features ({features}), so "
                "that each head pools features // num_heads of them",
                self.num_heads,
            )
        key_dim = self._head_key_dim(features)
        self.key_kernel = self.add_weight(
            name="key_kernel",
            shape=(features, self.num_heads * key_dim),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.key_bias = None
        if self.use_bias:
            self.key_bias = self.add_weight(
                name="key_bias",
                shape=(self.num_heads * key_dim,),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )
        self.query = self.add_weight(
            name="query",
            shape=(self.num_heads, key_dim),
            initializer=self.query_initializer,
            regularizer=self.query_regularizer,
        )

    def call(self, inputs, mask=None, training=None, return_attention_scores=False):
        check_rank("inputs", inputs.shape, 3, "(batch, seq, features)")
        check_floating("inputs", inputs)
        check_built_features(self, "inputs", inputs.shape)
        if mask is not None:
            check_keras_mask("mask", mask, inputs)
        inputs = zero_padded(inputs, mask)  # Padding may hold NaN or inf.
        features = inputs.shape[-1]
        key_dim = self._head_key_dim(features)
        batch_seq = ops.shape(inputs)[:2]
        keys = ops.matmul(inputs, self.key_kernel)
        if self.key_bias is not None:
            keys = ops.add(keys, self.key_bias)
        keys = self.key_activation(keys)
        keys = ops.reshape(keys, (*batch_seq, self.num_heads, key_dim))
        values = ops.reshape(
            inputs, (*batch_seq, self.num_heads, features // self.num_heads)
        )
        penalize = bool(training) and self.entropy_penalty > 0
        with_scores = bool(return_attention_scores or penalize)
        query = ops.cast(self.query, keys.dtype)
        query = ops.broadcast_to(
            ops.reshape(query, (1, 1, self.num_heads, key_dim)),
            (batch_seq[0], 1, self.num_heads, key_dim),
        )
        result = scaled_dot_product_attention(
            query,
            keys,
            values,
            padding_mask=mask,
            scale=self.scale,
            dropout=self.dropout,
            training=bool(training),
            seed=self.seed_generator,
            return_scores=with_scores,
        )
        output, scores = result if with_scores else (result, None)
        if penalize:
            weights = ops.cast(scores, "float32")
            logs = ops.log(ops.maximum(weights, 1e-30))
            entropy = -ops.sum(ops.multiply(weights, logs), axis=-1)
            # Averaged over the rows that pool something (an all-padding
            # sequence has no weights, and no entropy to lower).
            rows = ops.cast(ops.greater(ops.sum(weights, axis=-1), 0.5), "float32")
            mean = ops.sum(entropy) / ops.maximum(ops.sum(rows), 1.0)
            self.add_loss(self.entropy_penalty * mean)
        output = ops.reshape(output, (batch_seq[0], features))
        if return_attention_scores:
            return output, ops.squeeze(scores, 2)
        return output

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def compute_output_spec(
        self, inputs, mask=None, training=None, return_attention_scores=False
    ):
        check_rank("inputs", inputs.shape, 3, "(batch, seq, features)")
        check_built_features(self, "inputs", inputs.shape)
        output = keras.KerasTensor(
            self.compute_output_shape(inputs.shape), dtype=self.compute_dtype
        )
        if not return_attention_scores:
            return output
        batch, seq = inputs.shape[:2]
        scores = keras.KerasTensor(
            (batch, self.num_heads, seq), dtype=self.compute_dtype
        )
        return output, scores

    def get_config(self):
        base_config = super().get_config()
        config = {
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "use_bias": self.use_bias,
            "dropout": self.dropout,
            "scale": self.scale,
            "seed": self.seed,
            "entropy_penalty": self.entropy_penalty,
            **weight_options_config(
                self,
                "key_activation",
                "kernel_initializer",
                "bias_initializer",
                "query_initializer",
                "kernel_regularizer",
                "bias_regularizer",
                "query_regularizer",
                "kernel_constraint",
                "bias_constraint",
            ),
        }
        return {**base_config, **config}
