"""TransformerEncoder: self-attention and feed-forward, each with a residual."""

from __future__ import annotations

import keras

from keras_selfattn._validation import (
    check_known_last_dim,
    check_positive_int,
    check_rank,
    check_rate,
    invalid,
)
from keras_selfattn.layers._common import (
    check_keras_mask,
    clone_initializer,
    set_weight_options,
    weight_options_config,
    zero_padded,
)
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention

# The attention layers a block can be built on (same constructor and weights).
_ATTENTION_LAYERS = {
    "keras_selfattn": MultiHeadAttention,
    "keras": keras.layers.MultiHeadAttention,
}


@keras.saving.register_keras_serializable(package="keras_selfattn")
class TransformerEncoder(keras.layers.Layer):
    """One Transformer encoder block (Vaswani et al., 2017).

    Shapes: `(batch, seq, hidden_dim)` in, `(batch, seq, hidden_dim)` out;
    with `return_attention_scores=True`, also the self-attention weights
    `(batch, num_heads, seq, seq)`.

    The block is multi-head self-attention
    (`keras_selfattn.MultiHeadAttention`, `key_dim = hidden_dim // num_heads`)
    followed by a position-wise feed-forward network
    `Dense(intermediate_dim, activation) -> Dense(hidden_dim)`. Each part has
    dropout on its output, a residual connection and a layer normalisation,
    after the residual (`normalize_first=False`, the original Transformer) or
    before the part (`normalize_first=True`, "pre-LN").

    Masking: the layer supports Keras masks (from
    `TokenAndPositionEmbedding`, `Embedding(mask_zero=True)` or `Masking`). A
    padded key gets exactly zero attention weight, padded positions output
    zeros, so changing padded tokens never changes the outputs at real
    positions, and the input mask is handed on.

    Args:
        intermediate_dim: Positive integer, the hidden size of the
            feed-forward network.
        num_heads: Positive integer dividing the input's `hidden_dim`.
        dropout: Float in `[0, 1)`, dropout rate on the outputs of the
            attention and feed-forward parts. Defaults to `0.0`.
        attention_dropout: Float in `[0, 1)`, dropout rate on the attention
            weights. Defaults to `0.0`.
        activation: Activation of the feed-forward network.
            Defaults to `"relu"`.
        layer_norm_epsilon: Float, the epsilon of the layer normalisations.
            Defaults to `1e-5`.
        normalize_first: Boolean, pre-LN if True, post-LN if False.
            Defaults to `False`.
        kernel_initializer: Initializer for the dense kernels.
            Defaults to `"glorot_uniform"`.
        bias_initializer: Initializer for the dense biases.
            Defaults to `"zeros"`.
        seed: Optional integer seed for the dropouts. Defaults to `None`.
        attention: String, the attention layer of the block:
            `"keras_selfattn"` (`keras_selfattn.MultiHeadAttention`) or
            `"keras"` (`keras.layers.MultiHeadAttention`, to compare the two
            in the same model; its padded positions are still zeroed on the
            way out). Both have the same weights. Defaults to
            `"keras_selfattn"`.
        **kwargs: Base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, seq, hidden_dim)`.
        mask: Optional boolean tensor `(batch, seq)`, True at real tokens.
            Keras passes it in from an upstream masking layer.
        training: Python boolean, whether dropout is active.
        return_attention_scores: Boolean. If True, return
            `(outputs, scores)`. Defaults to `False`.
        use_causal_mask: Boolean, causal self-attention for this call.
            Defaults to `False`.

    Returns:
        `outputs` of shape `(batch, seq, hidden_dim)`, or the tuple
        `(outputs, scores)` with `scores` of shape
        `(batch, num_heads, seq, seq)`.

    Example:

    >>> ids = keras.Input(shape=(None,), dtype="int32")
    >>> x = TokenAndPositionEmbedding(20000, 256, 64)(ids)
    >>> x = TransformerEncoder(intermediate_dim=128, num_heads=4)(x)
    >>> x = AttentionPooling()(x)
    >>> probability = keras.layers.Dense(1, activation="sigmoid")(x)
    >>> model = keras.Model(ids, probability)
    """

    def __init__(
        self,
        intermediate_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        activation="relu",
        layer_norm_epsilon: float = 1e-5,
        normalize_first: bool = False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        seed: int | None = None,
        attention: str = "keras_selfattn",
        **kwargs,
    ):
        check_positive_int("intermediate_dim", intermediate_dim)
        if attention not in _ATTENTION_LAYERS:
            raise invalid(
                "attention",
                f"one of {', '.join(map(repr, _ATTENTION_LAYERS))}",
                attention,
            )
        check_positive_int("num_heads", num_heads)
        check_rate("dropout", dropout)
        check_rate("attention_dropout", attention_dropout)
        if (
            isinstance(layer_norm_epsilon, bool)
            or not isinstance(layer_norm_epsilon, (int, float))
            or not layer_norm_epsilon > 0
        ):
            raise invalid("layer_norm_epsilon", "a positive float", layer_norm_epsilon)
        super().__init__(**kwargs)
        self.intermediate_dim = intermediate_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        set_weight_options(
            self,
            activation=activation,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
        )
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.seed = seed
        self.attention = attention
        self.supports_masking = True

    def _initializers(self):
        """Fresh initializer instances, so that no two kernels start equal."""
        return {
            "kernel_initializer": clone_initializer(self.kernel_initializer),
            "bias_initializer": clone_initializer(self.bias_initializer),
        }

    def build(self, input_shape):
        check_rank("inputs", input_shape, 3, "(batch, seq, hidden_dim)")
        hidden_dim = input_shape[-1]
        check_known_last_dim("inputs", input_shape, "hidden_dim")
        if hidden_dim % self.num_heads:
            raise invalid(
                "num_heads",
                f"a divisor of the input's hidden_dim ({hidden_dim})",
                self.num_heads,
            )
        policy = self.dtype_policy
        seed = None if self.seed is None else self.seed + 1
        self.attention_layer = _ATTENTION_LAYERS[self.attention](
            num_heads=self.num_heads,
            key_dim=hidden_dim // self.num_heads,
            dropout=self.attention_dropout,
            seed=self.seed,
            dtype=policy,
            name="self_attention",
            **self._initializers(),
        )
        self.attention_layer.build(input_shape, input_shape)
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="attention_norm"
        )
        self.attention_norm.build(input_shape)
        self.attention_dropout_layer = keras.layers.Dropout(
            self.dropout, seed=seed, dtype=policy, name="attention_dropout"
        )
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            dtype=policy,
            name="intermediate_dense",
            **self._initializers(),
        )
        self.intermediate_dense.build(input_shape)
        self.output_dense = keras.layers.Dense(
            hidden_dim, dtype=policy, name="output_dense", **self._initializers()
        )
        self.output_dense.build((*tuple(input_shape[:-1]), self.intermediate_dim))
        self.feedforward_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="feedforward_norm"
        )
        self.feedforward_norm.build(input_shape)
        self.feedforward_dropout_layer = keras.layers.Dropout(
            self.dropout,
            seed=None if seed is None else seed + 1,
            dtype=policy,
            name="feedforward_dropout",
        )

    def call(
        self,
        inputs,
        mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        check_rank("inputs", inputs.shape, 3, "(batch, seq, hidden_dim)")
        if mask is not None:
            check_keras_mask("mask", mask, inputs)
        inputs = zero_padded(inputs, mask)  # Padding may hold NaN or inf.
        # Self-attention part.
        residual = inputs
        x = self.attention_norm(inputs) if self.normalize_first else inputs
        result = self.attention_layer(
            x,
            x,
            query_mask=mask,
            value_mask=mask,
            training=training,
            return_attention_scores=return_attention_scores,
            use_causal_mask=use_causal_mask,
        )
        x, scores = result if return_attention_scores else (result, None)
        x = self.attention_dropout_layer(x, training=training) + residual
        if not self.normalize_first:
            x = self.attention_norm(x)
        # Feed-forward part.
        residual = x
        if self.normalize_first:
            x = self.feedforward_norm(x)
        x = self.output_dense(self.intermediate_dense(x))
        x = self.feedforward_dropout_layer(x, training=training) + residual
        if not self.normalize_first:
            x = self.feedforward_norm(x)
        x = zero_padded(x, mask)
        if return_attention_scores:
            return x, scores
        return x

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(
        self,
        inputs,
        mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        check_rank("inputs", inputs.shape, 3, "(batch, seq, hidden_dim)")
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
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
            "intermediate_dim": self.intermediate_dim,
            "num_heads": self.num_heads,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "normalize_first": self.normalize_first,
            "seed": self.seed,
            "attention": self.attention,
            **weight_options_config(
                self, "activation", "kernel_initializer", "bias_initializer"
            ),
        }
        return {**base_config, **config}
