"""SelfAttention: attention of a sequence over itself, from one input tensor."""

from __future__ import annotations

import keras
from keras import ops, regularizers

from keras_selfattn._validation import (
    check_bool,
    check_known_last_dim,
    check_paths,
    check_positive_float,
    check_positive_int,
    check_rank,
    check_rate,
    check_seed,
    check_sliding_window,
    invalid,
)
from keras_selfattn.attention import scaled_dot_product_attention
from keras_selfattn.layers._common import (
    check_built_features,
    check_keras_mask,
    set_weight_options,
    weight_options_config,
    zero_padded,
    zero_padded_scores,
)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class SelfAttention(keras.layers.Layer):
    """Self-attention over one input tensor, with one or more heads.

    Shapes: `(batch, seq, features)` in, `(batch, seq, units)` out; with
    `return_attention_scores=True`, also the weights
    `(batch, num_heads, seq, seq)`.

    One fused projection maps each input vector to its query, key and value,
    `units` values each, split into `num_heads` heads of size
    `d_k = units // num_heads`. Each head computes
    `softmax(Q Kᵀ / sqrt(d_k)) V` (see
    `keras_selfattn.scaled_dot_product_attention`), and the heads are
    concatenated back to `units` values. With one head this is the layer of the
    self-attention tutorials (no output projection); with several heads it is
    the Transformer's, followed by a `units x units` output projection.

    Because it takes a single tensor and its options live in the constructor,
    it fits in `keras.Sequential`.

    Masking: the layer supports Keras masks (from `Embedding(mask_zero=True)`
    or `Masking`). A padded key gets exactly zero weight from every query; a
    padded query position outputs zeros; the input mask is handed on unchanged.

    Args:
        units: Positive integer, the size of the query, key, value and output
            vectors (all heads together).
        num_heads: Positive integer dividing `units`. Defaults to `1`.
        use_bias: Boolean, whether the projections add a bias.
            Defaults to `True`.
        use_output_projection: Optional boolean, whether a `units x units`
            projection follows the concatenated heads. Defaults to `None`,
            meaning `num_heads > 1`.
        dropout: Float in `[0, 1)`, dropout rate on the attention weights.
            Defaults to `0.0`.
        causal: Boolean. If True, position `i` attends only to positions
            `j <= i`. Defaults to `False`.
        sliding_window: Optional positive integer `w`; position `i` attends
            only to positions `j` with `|i - j| < w`. Defaults to `None`.
        scale: Optional positive float multiplying the logits before the
            softmax. Defaults to `None`, meaning `1 / sqrt(units // num_heads)`.
        seed: Optional integer seed for the dropout, from 0 to 2**31 - 1
            (the seeds every backend takes). Defaults to `None`.
        chunk_size: Optional positive integer. If set, attention runs over
            blocks of `chunk_size` keys with an online softmax, in memory
            linear in the sequence length (training too; see
            `keras_selfattn.scaled_dot_product_attention`). That path has
            no dropout: `chunk_size` with `dropout > 0` raises a
            `ValueError` here, in the constructor. Defaults to `None`,
            which lets the kernel choose: the chunked path for long
            sequences, the plain one otherwise.
        kernel_initializer: Initializer for the projection kernels.
            Defaults to `"glorot_uniform"`.
        bias_initializer: Initializer for the biases. Defaults to `"zeros"`.
        kernel_regularizer: Optional regularizer for the kernels.
            Defaults to `None`.
        bias_regularizer: Optional regularizer for the biases.
            Defaults to `None`.
        activity_regularizer: Optional regularizer for the output.
            Defaults to `None`.
        kernel_constraint: Optional constraint for the kernels.
            Defaults to `None`.
        bias_constraint: Optional constraint for the biases.
            Defaults to `None`.
        **kwargs: Base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, seq, features)`.
        mask: Optional boolean tensor `(batch, seq)`, True at real tokens.
            Keras passes it in from an upstream masking layer.
        training: Python boolean, whether dropout is active.
        return_attention_scores: Boolean. If True, return
            `(outputs, scores)`. Defaults to `False`.
        use_causal_mask: Boolean, causal masking for this call, in addition
            to the constructor's `causal`. Defaults to `False`.

    Returns:
        `outputs` of shape `(batch, seq, units)`, or the tuple
        `(outputs, scores)` with `scores` of shape
        `(batch, num_heads, seq, seq)`.

    Example:

    >>> x = np.random.rand(50, 5, 3).astype("float32")
    >>> tuple(SelfAttention(4)(x).shape)
    (50, 5, 4)
    >>> model = keras.Sequential([
    ...     keras.layers.Embedding(1000, 32, mask_zero=True),
    ...     SelfAttention(32, num_heads=4, causal=True),
    ...     keras.layers.GlobalAveragePooling1D(),
    ...     keras.layers.Dense(1, activation="sigmoid"),
    ... ])
    """

    def __init__(
        self,
        units: int,
        num_heads: int = 1,
        use_bias: bool = True,
        use_output_projection: bool | None = None,
        dropout: float = 0.0,
        causal: bool = False,
        sliding_window: int | None = None,
        scale: float | None = None,
        seed: int | None = None,
        chunk_size: int | None = None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        check_positive_int("units", units)
        check_positive_int("num_heads", num_heads)
        if units % num_heads:
            raise invalid(
                "units",
                f"a multiple of `num_heads` ({num_heads}), so that each head "
                "gets units // num_heads dimensions",
                units,
            )
        check_bool("use_bias", use_bias)
        check_bool("use_output_projection", use_output_projection, allow_none=True)
        check_rate("dropout", dropout)
        check_bool("causal", causal)
        check_sliding_window(sliding_window)
        check_positive_float("scale", scale, allow_none=True)
        seed = check_seed(seed)  # a Python int: Keras's SeedGenerator's type
        check_paths(chunk_size, dropout=dropout)
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.units = units
        self.num_heads = num_heads
        self.use_bias = use_bias
        self.use_output_projection = use_output_projection
        self.dropout = dropout
        self.causal = causal
        self.sliding_window = sliding_window
        self.scale = scale
        self.seed = seed
        self.chunk_size = chunk_size
        set_weight_options(
            self,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
        )
        self.supports_masking = True
        # A seed generator only where there is dropout, as Keras's layers do.
        self.seed_generator = keras.random.SeedGenerator(seed) if dropout else None

    @property
    def head_dim(self) -> int:
        """`d_k`, the size of one head's query and key vectors."""
        return self.units // self.num_heads

    @property
    def _projects_output(self) -> bool:
        if self.use_output_projection is None:
            return self.num_heads > 1
        return bool(self.use_output_projection)

    def _add_dense_weights(self, name, in_dim, out_dim):
        kernel = self.add_weight(
            name=f"{name}_kernel",
            shape=(in_dim, out_dim),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        bias = None
        if self.use_bias:
            bias = self.add_weight(
                name=f"{name}_bias",
                shape=(out_dim,),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )
        return kernel, bias

    def build(self, input_shape):
        check_rank("inputs", input_shape, 3, "(batch, seq, features)")
        check_known_last_dim("inputs", input_shape, "features")
        # One fused kernel: columns [0:units] make Q, [units:2u] K, [2u:3u] V.
        self.qkv_kernel, self.qkv_bias = self._add_dense_weights(
            "qkv", input_shape[-1], 3 * self.units
        )
        self.output_kernel = self.output_bias = None
        if self._projects_output:
            self.output_kernel, self.output_bias = self._add_dense_weights(
                "output", self.units, self.units
            )

    @staticmethod
    def _dense(x, kernel, bias):
        y = ops.matmul(x, kernel)
        return y if bias is None else ops.add(y, bias)

    def call(
        self,
        inputs,
        mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        check_rank("inputs", inputs.shape, 3, "(batch, seq, features)")
        check_built_features(self, "inputs", inputs.shape)
        if mask is not None:
            check_keras_mask("mask", mask, inputs)
        inputs = zero_padded(inputs, mask)  # Padding may hold NaN or inf.
        qkv = self._dense(inputs, self.qkv_kernel, self.qkv_bias)
        heads = ops.shape(qkv)[:2] + (self.num_heads, self.head_dim)
        query, key, value = (
            ops.reshape(part, heads) for part in ops.split(qkv, 3, axis=-1)
        )
        result = scaled_dot_product_attention(
            query,
            key,
            value,
            padding_mask=mask,
            scale=self.scale,
            causal=bool(self.causal or use_causal_mask),
            sliding_window=self.sliding_window,
            dropout=self.dropout,
            training=bool(training),
            seed=self.seed_generator,
            return_scores=bool(return_attention_scores),
            chunk_size=self.chunk_size,
        )
        output, scores = result if return_attention_scores else (result, None)
        output = ops.reshape(output, ops.shape(output)[:2] + (self.units,))
        if self.output_kernel is not None:
            output = self._dense(output, self.output_kernel, self.output_bias)
        output = zero_padded(output, mask)
        if return_attention_scores:
            return output, zero_padded_scores(scores, mask)
        return output

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def compute_output_spec(
        self,
        inputs,
        mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
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
            (batch, self.num_heads, seq, seq), dtype=self.compute_dtype
        )
        return output, scores

    def get_config(self):
        base_config = super().get_config()
        config = {
            "units": self.units,
            "num_heads": self.num_heads,
            "use_bias": self.use_bias,
            "use_output_projection": self.use_output_projection,
            "dropout": self.dropout,
            "causal": self.causal,
            "sliding_window": self.sliding_window,
            "scale": self.scale,
            "seed": self.seed,
            "chunk_size": self.chunk_size,
            "activity_regularizer": regularizers.serialize(self.activity_regularizer),
            **weight_options_config(
                self,
                "kernel_initializer",
                "bias_initializer",
                "kernel_regularizer",
                "bias_regularizer",
                "kernel_constraint",
                "bias_constraint",
            ),
        }
        return {**base_config, **config}
