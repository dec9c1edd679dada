"""TransformerEncoder: self-attention and feed-forward, each with a residual."""

from __future__ import annotations

import keras

from keras_selfattn._validation import check_floating, check_one_of, check_rank
from keras_selfattn.layers._block import TransformerBlock
from keras_selfattn.layers._common import (
    boolean_mask,
    check_built_features,
    check_keras_mask,
    keras_mask_of,
    zero_padded,
)
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention

# The attention layers a block can be built on (same constructor and weights).
_ATTENTION_LAYERS = {
    "keras_selfattn": MultiHeadAttention,
    "keras": keras.layers.MultiHeadAttention,
}

# The sub-layers under their names before keras-hub's (version 0.1 of this
# package), kept as read-only properties: Keras's saving walks attributes in
# `dir()` order, public names first, so `.keras` files saved by 0.1 (whose
# weights are stored under these names) still load, and new files use them
# too.
_OLD_NAMES = {
    "attention_layer": "_self_attention_layer",
    "attention_norm": "_self_attention_layer_norm",
    "attention_dropout_layer": "_self_attention_dropout",
    "feedforward_norm": "_feedforward_layer_norm",
    "intermediate_dense": "_feedforward_intermediate_dense",
    "output_dense": "_feedforward_output_dense",
    "feedforward_dropout_layer": "_feedforward_dropout",
}


# 0.1's order of the sub-layers.
_OLD_ORDER = (
    "_self_attention_layer",
    "_self_attention_layer_norm",
    "_self_attention_dropout",
    "_feedforward_intermediate_dense",
    "_feedforward_output_dense",
    "_feedforward_layer_norm",
    "_feedforward_dropout",
)


def _old_name(new_name: str) -> property:
    def get(self):
        return getattr(self, new_name, None)

    get.__doc__ = f"The sub-layer `{new_name}` (its name before 0.2), once built."
    return property(get)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class TransformerEncoder(TransformerBlock):
    """One Transformer encoder block, a drop-in for keras-hub's.

    Shapes: `(batch, seq, hidden_dim)` in, `(batch, seq, hidden_dim)` out;
    with `return_attention_scores=True`, also the self-attention weights
    `(batch, num_heads, seq, seq)`.

    The block (Vaswani et al., 2017) is multi-head self-attention
    (`keras_selfattn.MultiHeadAttention`, `key_dim = hidden_dim // num_heads`)
    followed by a position-wise feed-forward network
    `Dense(intermediate_dim, activation) -> Dense(hidden_dim)`. Each part has
    dropout on its output, a residual connection and a layer normalisation,
    after the residual (`normalize_first=False`, the original Transformer and
    BERT) or before the part (`normalize_first=True`, "pre-LN", GPT-2).

    It is a drop-in for `keras_hub.layers.TransformerEncoder`: the same
    constructor (keras-hub's arguments, defaults and order; this package's
    extras after them), the same call, the same sub-layers under keras-hub's
    attribute and layer names (`_self_attention_layer`,
    `_self_attention_layer_norm`, `_self_attention_dropout`,
    `_feedforward_layer_norm`, `_feedforward_intermediate_dense`,
    `_feedforward_output_dense`, `_feedforward_dropout`), built in its
    order, so `get_weights()` and `set_weights()` line up with keras-hub's
    layer, and keras-hub's own test file passes on it. The outputs equal
    keras-hub's at every real position; they differ at padded positions,
    which output zeros here (keras-hub outputs whatever its block computes
    there). The sub-layers are also reachable under this package's 0.1
    names (`attention_layer`, `attention_norm`, `intermediate_dense`, ...),
    which keep models saved by 0.1 loading.

    Masking: padding comes from `padding_mask` or, without one, from the
    input's Keras mask (from `TokenAndPositionEmbedding`,
    `Embedding(mask_zero=True)` or `Masking`): an explicit `padding_mask`
    wins over the Keras mask, as in keras-hub; `attention_mask` and
    `use_causal_mask` combine with it. A padded key gets exactly zero
    attention weight and travels to the kernel as a key mask (no
    `(seq, seq)` tensor is built from it); padded positions output zeros,
    so changing padded tokens never changes the outputs at real positions;
    the input's Keras mask is handed on.

    Args:
        intermediate_dim: Positive integer, the hidden size of the
            feed-forward network.
        num_heads: Positive integer dividing the input's `hidden_dim`.
        dropout: Float in `[0, 1)`, dropout rate on the outputs of the
            attention and feed-forward parts (and, unless
            `attention_dropout` says otherwise, on the attention weights,
            as in keras-hub). Defaults to `0.0`.
        activation: Activation of the feed-forward network.
            Defaults to `"relu"`.
        layer_norm_epsilon: Float, the epsilon of the layer normalisations.
            Defaults to `1e-5`.
        kernel_initializer: Initializer for the dense kernels.
            Defaults to `"glorot_uniform"`.
        bias_initializer: Initializer for the dense biases.
            Defaults to `"zeros"`.
        normalize_first: Boolean, pre-LN if True, post-LN if False.
            Defaults to `False`.
        attention_dropout: Optional float in `[0, 1)`, dropout rate on the
            attention weights. Defaults to `None`, meaning `dropout` (as
            keras-hub does).
        seed: Optional integer seed for the dropouts, from 0 to 2**31 - 1
            (the seeds every backend takes). Defaults to `None`.
        attention: String, the attention layer of the block:
            `"keras_selfattn"` (`keras_selfattn.MultiHeadAttention`) or
            `"keras"` (`keras.layers.MultiHeadAttention`, to compare the two
            in the same model; its padded positions are still zeroed on the
            way out). Both have the same weights. Defaults to
            `"keras_selfattn"`.
        **kwargs: Base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, seq, hidden_dim)`.
        padding_mask: Optional boolean tensor `(batch, seq)`, True at real
            tokens. Replaces the input's Keras mask when given.
            Defaults to `None`.
        attention_mask: Optional boolean tensor `(batch, seq, seq)`, True
            where a query may attend to a key. Defaults to `None`.
        training: Python boolean, whether dropout is active.
        return_attention_scores: Boolean. If True, return
            `(outputs, scores)`. Defaults to `False`.
        mask: Optional boolean tensor `(batch, seq)`, the input's Keras
            mask; Keras passes it in from an upstream masking layer.
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
    >>> block = TransformerEncoder(intermediate_dim=8, num_heads=2)
    >>> x = np.random.rand(2, 3, 4).astype("float32")
    >>> padding = np.array([[True, True, False], [True, True, True]])
    >>> outputs = block(x, padding_mask=padding)
    >>> bool(np.all(keras.ops.convert_to_numpy(outputs)[0, 2] == 0))  # padding
    True
    """

    def __init__(
        self,
        intermediate_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        activation="relu",
        layer_norm_epsilon: float = 1e-5,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        normalize_first: bool = False,
        attention_dropout: float | None = None,
        seed: int | None = None,
        attention: str = "keras_selfattn",
        **kwargs,
    ):
        check_one_of("attention", attention, tuple(_ATTENTION_LAYERS))
        super().__init__(
            intermediate_dim,
            num_heads,
            dropout=dropout,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            normalize_first=normalize_first,
            attention_dropout=attention_dropout,
            seed=seed,
            **kwargs,
        )
        self.attention = attention
        self._weights_order = "keras_hub"

    def build(self, inputs_shape):
        hidden_dim = self._hidden_dim(
            "inputs", inputs_shape, "(batch, seq, hidden_dim)", "the input's"
        )
        # Created in keras-hub's order: an unseeded initializer or dropout
        # draws its seed when it is made, so the order fixes the start.
        layers = {
            "_self_attention_layer": _ATTENTION_LAYERS[self.attention](
                num_heads=self.num_heads,
                key_dim=hidden_dim // self.num_heads,
                dropout=self._attention_rate(),
                seed=self._seed(0),
                dtype=self.dtype_policy,
                name="self_attention_layer",
                **self._initializers(),
            ),
            "_self_attention_layer_norm": self._layer_norm("self_attention"),
            "_self_attention_dropout": self._dropout("self_attention", 1),
            "_feedforward_layer_norm": self._layer_norm("feedforward"),
        }
        (
            layers["_feedforward_intermediate_dense"],
            layers["_feedforward_output_dense"],
        ) = self._feedforward_denses(hidden_dim)
        layers["_feedforward_dropout"] = self._dropout("feedforward", 2)
        # Keras tracks sub-layers in the order they are set, and that is the
        # order of the weights (and of an optimizer's slots): keras-hub's, or
        # 0.1's for a layer loaded from a 0.1 file.
        order = _OLD_ORDER if self._weights_order == "0.1" else list(layers)
        for name in order:
            setattr(self, name, layers[name])
        self._self_attention_layer.build(inputs_shape, inputs_shape)
        self._self_attention_layer_norm.build(inputs_shape)
        self._build_feedforward(inputs_shape)

    def _check_call(self, inputs, padding_mask, attention_mask, mask) -> None:
        check_rank("inputs", inputs.shape, 3, "(batch, seq, hidden_dim)")
        check_floating("inputs", inputs)
        check_built_features(self, "inputs", inputs.shape)
        for name, given in (("padding_mask", padding_mask), ("mask", mask)):
            if given is not None:
                check_keras_mask(name, given, inputs)
        if attention_mask is not None:
            check_rank("attention_mask", attention_mask.shape, 3, "(batch, seq, seq)")

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        mask=None,
        use_causal_mask=False,
    ):
        padding_mask = boolean_mask("padding_mask", padding_mask, "a real token")
        attention_mask = boolean_mask("attention_mask", attention_mask, "may attend")
        self._check_call(inputs, padding_mask, attention_mask, mask)
        # keras-hub's rule: an explicit padding mask wins over the Keras mask
        # (which Keras passes as `mask` only when `inputs` is the one tensor).
        if mask is None and padding_mask is None:
            mask = keras_mask_of(inputs)
        if padding_mask is None:
            padding = boolean_mask("mask", mask, "a real token")
        else:
            padding = padding_mask
        inputs = zero_padded(inputs, padding)  # Padding may hold NaN or inf.

        # Self-attention part, then the feed-forward part.
        def attend(x):
            return self._self_attention_layer(
                x,
                x,
                query_mask=padding,
                value_mask=padding,
                attention_mask=attention_mask,
                training=training,
                return_attention_scores=return_attention_scores,
                use_causal_mask=use_causal_mask,
            )

        norm, dropout = self._self_attention_layer_norm, self._self_attention_dropout
        result = self._residual(inputs, attend, norm, dropout, training)
        x, scores = result if return_attention_scores else (result, None)
        x = self._feedforward(x, training)
        x = zero_padded(x, padding)
        if return_attention_scores:
            return x, scores
        return x

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def compute_output_spec(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        mask=None,
        use_causal_mask=False,
    ):
        self._check_call(inputs, padding_mask, attention_mask, mask)
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        batch, seq = inputs.shape[:2]
        scores = keras.KerasTensor(
            (batch, self.num_heads, seq, seq), dtype=self.compute_dtype
        )
        return output, scores

    def get_config(self):
        config = {"attention": self.attention, "weights_order": self._weights_order}
        return {**super().get_config(), **config}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        # A config of ours without the key was saved by 0.1, whose weights
        # (and an optimizer's slots for them) are in 0.1's order; keras-hub's
        # own config (no `attention_dropout`, which only ours has) has its
        # weights in keras-hub's order.
        old = "attention_dropout" in config
        weights_order = config.pop("weights_order", "0.1" if old else "keras_hub")
        check_one_of("weights_order", weights_order, ("keras_hub", "0.1"))
        layer = cls(**config)
        layer._weights_order = weights_order
        return layer


for _old, _new in _OLD_NAMES.items():
    setattr(TransformerEncoder, _old, _old_name(_new))
del _old, _new
