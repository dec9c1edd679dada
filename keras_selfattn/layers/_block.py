"""What keras-hub's two Transformer blocks share: their options and parts.

`TransformerEncoder` and `TransformerDecoder` take keras-hub's constructor
arguments, build their sub-layers from them under keras-hub's names and run
each part (attention, feed-forward) with a residual connection and a layer
normalisation before or after it. This base class holds that once; the
blocks keep their own `build` (keras-hub's sub-layer order is the order of
the weights) and `call`.
"""

from __future__ import annotations

import keras

from keras_selfattn import _backend
from keras_selfattn._validation import (
    MAX_SEED,
    check_known_last_dim,
    check_rank,
    check_seed,
    invalid,
)
from keras_selfattn.layers._common import (
    check_block_arguments,
    clone_initializer,
    dtype_recording_quantized,
    set_weight_options,
    take_own_policies,
    weight_options_config,
)


@keras.saving.register_keras_serializable(package="keras_selfattn")
class ExportableLayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` that exports to ONNX from PyTorch.

    The same layer, weights and math (`_backend.layer_norm`); Keras's own
    hands PyTorch a normalized shape that `torch.onnx` cannot export. Not
    public: the blocks' normalization.
    """

    def call(self, inputs):
        return _backend.layer_norm(self, inputs)


class TransformerBlock(keras.layers.Layer):
    """The base of the Transformer blocks (not public, not registered).

    Args: keras-hub's `TransformerEncoder` / `TransformerDecoder` arguments,
    documented on those classes.
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
        **kwargs,
    ):
        self._check_arguments(
            intermediate_dim=intermediate_dim, num_heads=num_heads,
            dropout=dropout, attention_dropout=attention_dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            normalize_first=normalize_first, seed=seed,
        )  # fmt: skip
        super().__init__(**kwargs)
        # Keras's attention layers take only Python integers (ours NumPy's too).
        self.intermediate_dim = int(intermediate_dim)
        self.num_heads = int(num_heads)
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
        self.seed = check_seed(seed)  # a Python int, as Keras's layers take
        self.supports_masking = True

    @staticmethod
    def _check_arguments(
        *, intermediate_dim, num_heads, dropout=0.0, attention_dropout=None,
        layer_norm_epsilon=1e-5, normalize_first=False, seed=None, **_other,
    ) -> None:  # fmt: skip
        """The constructor's checks, on its arguments or a block's config
        (`keras_selfattn.convert` checks keras-hub's blocks by it, building
        nothing; the other entries of a config are ignored)."""
        check_block_arguments(
            intermediate_dim, num_heads, dropout, attention_dropout,
            layer_norm_epsilon, normalize_first, seed,
        )  # fmt: skip

    # ------------------------------------------------------------ parts

    def _hidden_dim(self, argument: str, shape, layout: str, what: str) -> int:
        """The last dimension of the input `shape`, which the heads divide."""
        check_rank(argument, shape, 3, layout)
        check_known_last_dim(argument, shape, "hidden_dim")
        hidden_dim = shape[-1]
        if hidden_dim % self.num_heads:
            raise invalid(
                "num_heads", f"a divisor of {what} hidden_dim ({hidden_dim})",
                self.num_heads,
            )  # fmt: skip
        return hidden_dim

    def _initializers(self) -> dict:
        """Fresh initializer instances, so that no two kernels start equal."""
        return {
            "kernel_initializer": clone_initializer(self.kernel_initializer),
            "bias_initializer": clone_initializer(self.bias_initializer),
        }

    def _seed(self, offset: int) -> int | None:
        """The seed of the block's `offset`-th random sub-layer (wrapped to
        stay a seed every backend takes)."""
        return None if self.seed is None else (self.seed + offset) % (MAX_SEED + 1)

    def _attention_rate(self) -> float:
        """The dropout rate on the attention weights (keras-hub: `dropout`)."""
        rate = self.attention_dropout
        return self.dropout if rate is None else rate

    def _layer_norm(self, part: str) -> keras.layers.LayerNormalization:
        return ExportableLayerNormalization(
            epsilon=self.layer_norm_epsilon,
            dtype=self.dtype_policy,
            name=f"{part}_layer_norm",
        )

    def _dropout(self, part: str, offset: int) -> keras.layers.Dropout:
        return keras.layers.Dropout(
            self.dropout,
            seed=self._seed(offset),
            dtype=self.dtype_policy,
            name=f"{part}_dropout",
        )

    def _feedforward_denses(self, hidden_dim: int) -> tuple:
        """`Dense(intermediate_dim, activation)` and `Dense(hidden_dim)`."""
        intermediate = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            dtype=self.dtype_policy,
            name="feedforward_intermediate_dense",
            **self._initializers(),
        )
        output = keras.layers.Dense(
            hidden_dim,
            dtype=self.dtype_policy,
            name="feedforward_output_dense",
            **self._initializers(),
        )
        return intermediate, output

    def _build_feedforward(self, shape) -> None:
        self._feedforward_layer_norm.build(shape)
        self._feedforward_intermediate_dense.build(shape)
        inner = (*tuple(shape[:-1]), self.intermediate_dim)
        self._feedforward_output_dense.build(inner)
        # The last of the block's sub-layers is built (both blocks' `build`
        # end here): a loaded quantized block's take their own policies.
        take_own_policies(
            s
            for s in self._flatten_layers(include_self=False)
            if not list(s._flatten_layers(include_self=False))
        )

    def _residual(self, x, part, norm, dropout, training):
        """`part(x)` with dropout, a residual and `norm` (pre- or post-LN).

        `part` returns the part's output, or a tuple whose first item it is
        (the rest, caches or scores, come back as they are)."""
        residual = x
        if self.normalize_first:
            x = norm(x)
        result = part(x)
        x, *rest = result if isinstance(result, (tuple, list)) else (result,)
        x = dropout(x, training=training) + residual
        if not self.normalize_first:
            x = norm(x)
        return (x, *rest) if rest else x

    def _feedforward(self, x, training):
        """The feed-forward part, with its residual and layer norm."""

        def part(x):
            return self._feedforward_output_dense(
                self._feedforward_intermediate_dense(x)
            )

        return self._residual(
            x, part, self._feedforward_layer_norm, self._feedforward_dropout, training
        )

    def get_config(self):
        base_config = super().get_config()
        config = {
            "intermediate_dim": self.intermediate_dim,
            "num_heads": self.num_heads,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "normalize_first": self.normalize_first,
            "attention_dropout": self.attention_dropout,
            "seed": self.seed,
            **weight_options_config(
                self, "activation", "kernel_initializer", "bias_initializer"
            ),
        }
        # keras-hub's block forgets that its sub-layers were quantized.
        sublayers = self._flatten_layers(include_self=False)
        dtype = dtype_recording_quantized(self, sublayers)
        if dtype is not None:
            config["dtype"] = dtype
        return {**base_config, **config}
