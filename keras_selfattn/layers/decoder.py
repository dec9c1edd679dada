"""TransformerDecoder: keras-hub's decoder block on this package's attention."""

from __future__ import annotations

import keras

from keras_selfattn._validation import (
    check_floating,
    check_rank,
    check_same_batch,
    invalid,
)
from keras_selfattn.layers._block import TransformerBlock
from keras_selfattn.layers._common import (
    boolean_mask,
    check_built_features,
    check_keras_mask,
    combined_masks,
    keras_mask_of,
    rederive_call_attributes,
    zero_padded,
)
from keras_selfattn.layers.cached_attention import CachedMultiHeadAttention


def _wrong_inputs(built_with: bool) -> ValueError:
    """keras-hub's error when the number of sequences changes between calls."""
    state = (
        "This layer has been built with cross attention, but you did not "
        "provide encoder_sequence."
        if built_with
        else "This layer has been built without cross attention, but you are "
        "trying to call it with encoder_sequence."
    )
    return ValueError(
        "The number of call arguments to `keras_selfattn.TransformerDecoder` "
        "should not change. Use `layer(decoder_sequence, encoder_sequence)` "
        "to build a layer with cross attention, or `layer(decoder_sequence)` "
        f"to build a layer without. {state}"
    )


@keras.saving.register_keras_serializable(package="keras_selfattn")
class TransformerDecoder(TransformerBlock):
    """One Transformer decoder block, a drop-in for keras-hub's.

    Shapes: `decoder_sequence` `(batch, T, hidden_dim)` and optionally
    `encoder_sequence` `(batch, S, encoder_dim)` in; `(batch, T, hidden_dim)`
    out, with the updated caches beside it when caches are passed.

    The block (Vaswani et al., 2017) is causal self-attention, then (when the
    layer is called with an `encoder_sequence`) cross-attention to the
    encoder's sequence, then a feed-forward network
    `Dense(intermediate_dim, activation) -> Dense(hidden_dim)`; each part has
    dropout on its output, a residual connection and a layer normalisation,
    after the residual (`normalize_first=False`) or before the part
    (`normalize_first=True`, GPT-2). Called with one sequence, the layer has
    no cross-attention (a decoder-only model, GPT-2 style); the number of
    sequences must then stay the same from call to call.

    It is a drop-in for `keras_hub.layers.TransformerDecoder`: the same
    constructor (keras-hub's arguments, defaults and order; this package's
    extras after them), the same call, caches and return tuples, the same
    sub-layers under keras-hub's attribute and layer names
    (`_self_attention_layer`, `_self_attention_layer_norm`,
    `_self_attention_dropout`, `_cross_attention_layer`,
    `_cross_attention_layer_norm`, `_cross_attention_dropout`,
    `_feedforward_intermediate_dense`, `_feedforward_output_dense`,
    `_feedforward_layer_norm`, `_feedforward_dropout`), built in its order,
    so `get_weights()` and `set_weights()` line up with keras-hub's layer,
    and keras-hub's own test file passes on it. The attention layers are
    `keras_selfattn.CachedMultiHeadAttention`, on this package's kernel.
    The outputs equal keras-hub's at every real position; padded decoder
    positions output zeros here. `num_heads` must divide `hidden_dim`
    (keras-hub rounds the head size down).

    Masking: the decoder's padding comes from `decoder_padding_mask` or,
    without one, from `decoder_sequence`'s Keras mask, and the encoder's
    from `encoder_padding_mask` or `encoder_sequence`'s Keras mask (an
    explicit mask wins, as in keras-hub); `decoder_attention_mask` and
    `encoder_attention_mask` combine with them, and `use_causal_mask`
    (on by default) with the self-attention's. A masked key gets exactly zero
    weight, a query that may attend to no key outputs zeros, padded decoder
    positions output zeros, and `decoder_sequence`'s Keras mask is handed
    on. Without a cache, causality and the padding reach the kernel as a flag
    and a key mask: no `(T, T)` tensor is built (keras-hub's block builds a
    `(batch, T, T)` int32 one), so on the chunked path memory stays linear
    in `T`. `keras_selfattn.convert` makes keras-hub's blocks this class.

    Args:
        intermediate_dim: Positive integer, the hidden size of the
            feed-forward network.
        num_heads: Positive integer dividing the decoder's `hidden_dim`.
        dropout: Float in `[0, 1)`, dropout rate on the outputs of the
            attention and feed-forward parts (and, unless
            `attention_dropout` says otherwise, on the attention weights, as
            in keras-hub). Defaults to `0.0`.
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
            attention weights. Defaults to `None`, meaning `dropout`.
        seed: Optional integer seed for the dropouts, from 0 to 2**31 - 1
            (the seeds every backend takes). Defaults to `None`.
        **kwargs: Base layer arguments, such as `name` and `dtype`, and
            keras-hub's `decoder_sequence_shape` and `encoder_sequence_shape`
            (from its configs), which build the layer at once.

    Call arguments:
        decoder_sequence: Tensor `(batch, T, hidden_dim)`.
        encoder_sequence: Optional tensor `(batch, S, encoder_dim)`, for
            cross-attention. Defaults to `None` (no cross-attention).
        decoder_padding_mask: Optional boolean `(batch, T)`, True at real
            decoder tokens. Defaults to `None`.
        decoder_attention_mask: Optional boolean `(batch, T, T)`, True where
            a decoder position may attend to another. Defaults to `None`.
        encoder_padding_mask: Optional boolean `(batch, S)`, True at real
            encoder tokens. Defaults to `None`.
        encoder_attention_mask: Optional boolean `(batch, T, S)`, True where
            a decoder position may attend to an encoder position.
            Defaults to `None`.
        self_attention_cache: Optional float tensor
            `(batch, 2, max_len, num_heads, head_dim)`, the self-attention's
            keys and values so far. Defaults to `None`.
        self_attention_cache_update_index: Optional int or int tensor, where
            the new keys and values go in `self_attention_cache` (usually
            the index of the token being decoded). Defaults to `None`.
        cross_attention_cache: Optional float tensor
            `(batch, 2, S, num_heads, head_dim)`, the cross-attention's keys
            and values. With cross-attention, set it exactly when
            `self_attention_cache` is set. Defaults to `None`.
        cross_attention_cache_update_index: Optional int or int tensor:
            `0` computes the whole cross-attention cache, `None` reuses it.
            Defaults to `None`.
        use_causal_mask: Boolean, causal self-attention (position `i` sees
            positions `j <= i`, counted from
            `self_attention_cache_update_index` with a cache).
            Defaults to `True`.
        training: Python boolean, whether dropout is active.

    Returns:
        `outputs` `(batch, T, hidden_dim)` without a cache;
        `(outputs, self_attention_cache)` with one and no cross-attention;
        `(outputs, self_attention_cache, cross_attention_cache)` with caches
        and cross-attention. On symbolic inputs (a functional model), as
        keras-hub's layer: `outputs` alone, caches or not.

    Example:

    >>> decoder = TransformerDecoder(intermediate_dim=16, num_heads=2)
    >>> tokens = np.random.rand(1, 4, 8).astype("float32")
    >>> tuple(decoder(tokens).shape)
    (1, 4, 8)
    >>> cache = np.zeros((1, 2, 4, 2, 4), "float32")
    >>> outputs, cache = decoder(
    ...     tokens[:, :1], self_attention_cache=cache,
    ...     self_attention_cache_update_index=0)
    >>> outputs = keras.ops.convert_to_numpy(outputs)
    >>> full = keras.ops.convert_to_numpy(decoder(tokens))
    >>> bool(np.allclose(outputs, full[:, :1], atol=1e-5))
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
        **kwargs,
    ):
        decoder_sequence_shape = kwargs.pop("decoder_sequence_shape", None)
        encoder_sequence_shape = kwargs.pop("encoder_sequence_shape", None)
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
        self._decoder_sequence_shape = None
        self._encoder_sequence_shape = None
        if decoder_sequence_shape:
            self.build(decoder_sequence_shape, encoder_sequence_shape)

    @classmethod
    def _check_adoptable(cls, layer: keras.layers.Layer, chunk_size) -> None:
        """Nothing of the block's own forbids `_adopt` (its attention layers
        are checked, and converted, on their own)."""

    @classmethod
    def _adopt(cls, layer: keras.layers.Layer, chunk_size=None) -> None:
        """Makes `layer`, a keras-hub `TransformerDecoder`, an instance of this
        class, in place (`keras_selfattn.convert`'s step for the block).

        Why this is safe: this class takes keras-hub's constructor and call
        and keeps keras-hub's attributes, sub-layers (names, order, weights)
        and math (keras-hub's own test file passes on it), so what keras-hub's
        `__init__` and `build` set is what ours would. Ours adds only
        `attention_dropout = None` (the attention's dropout is `dropout`, as
        in keras-hub) and `seed = None`. Its attention layers must compute
        through the kernel as well (`convert` converts them in the same call,
        and leaves the block alone where it cannot). What changes is the
        causal mask: a flag to the kernel instead of keras-hub's
        `(batch, T, T)` int32 tensor, so memory stays linear in `T`.
        `chunk_size` is the attention layers' own.
        """
        layer.__class__ = cls
        layer.attention_dropout = None
        layer.seed = None
        rederive_call_attributes(layer)

    def _attention(self, head_dim: int, offset: int, name: str, **extra):
        return CachedMultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=head_dim,
            dropout=self._attention_rate(),
            seed=self._seed(offset),
            dtype=self.dtype_policy,
            name=name,
            **extra,
            **self._initializers(),
        )

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        hidden_dim = self._hidden_dim(
            "decoder_sequence",
            decoder_sequence_shape,
            "(batch, T, hidden_dim)",
            "the decoder's",
        )
        if encoder_sequence_shape is not None:
            check_rank(
                "encoder_sequence", encoder_sequence_shape, 3, "(batch, S, features)"
            )
        self._decoder_sequence_shape = decoder_sequence_shape
        self._encoder_sequence_shape = encoder_sequence_shape
        head_dim = hidden_dim // self.num_heads
        # keras-hub's sub-layers, names and order (the order of the weights).
        self._self_attention_layer = self._attention(head_dim, 0, "self_attention")
        self._self_attention_layer.build(decoder_sequence_shape, decoder_sequence_shape)
        self._self_attention_layer_norm = self._layer_norm("self_attention")
        self._self_attention_dropout = self._dropout("self_attention", 1)
        self._self_attention_layer_norm.build(decoder_sequence_shape)
        self._cross_attention_layer = None
        if encoder_sequence_shape:
            self._cross_attention_layer = self._attention(
                head_dim, 2, "cross_attention", value_dim=head_dim
            )
            self._cross_attention_layer.build(
                decoder_sequence_shape, encoder_sequence_shape
            )
            self._cross_attention_layer_norm = self._layer_norm("cross_attention")
            self._cross_attention_dropout = self._dropout("cross_attention", 3)
            self._cross_attention_layer_norm.build(decoder_sequence_shape)
        (
            self._feedforward_intermediate_dense,
            self._feedforward_output_dense,
        ) = self._feedforward_denses(hidden_dim)
        self._feedforward_layer_norm = self._layer_norm("feedforward")
        self._feedforward_dropout = self._dropout("feedforward", 4)
        self._build_feedforward(decoder_sequence_shape)

    # ------------------------------------------------------------- masks

    @staticmethod
    def _padding(sequence, padding_mask, argument: str):
        """The padding, `(batch, length)` booleans or None: an explicit
        padding mask wins over `sequence`'s Keras mask, as in keras-hub."""
        padding = padding_mask
        if padding is None:
            padding = keras_mask_of(sequence)
        if padding is None:
            return None
        padding = boolean_mask(f"{argument}_padding_mask", padding, "a real token")
        if len(padding.shape) != 2:
            raise invalid(
                f"{argument}_padding_mask",
                "a boolean mask of shape (batch, length)",
                f"<tensor of shape {tuple(padding.shape)}>",
            )
        return padding

    @staticmethod
    def _merged_mask(padding, attention_mask, argument: str, shape: tuple):
        """keras-hub's `merge_padding_and_attention_mask`, as booleans: the
        padding as a `(batch, 1, length)` key mask and the attention mask,
        which must broadcast to `shape`, `(batch, target_length,
        source_length)` (None where unknown)."""
        mask = None if padding is None else padding[:, None, :]
        if attention_mask is None:
            return mask
        attention_mask = boolean_mask(
            f"{argument}_attention_mask", attention_mask, "may attend"
        )
        name, layout = (
            f"{argument}_attention_mask",
            "(batch, target_length, source_length)",
        )
        check_rank(name, attention_mask.shape, 3, layout)
        if not all(
            got in (None, 1, want) or want is None
            for got, want in zip(attention_mask.shape, shape, strict=True)
        ):
            raise invalid(
                name,
                f"a boolean tensor of shape {layout} = {tuple(shape)}",
                f"<tensor of shape {tuple(attention_mask.shape)}>",
            )
        return combined_masks(mask, attention_mask)

    # ------------------------------------------------------------- calling

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        decoder_attention_mask=None,
        encoder_padding_mask=None,
        encoder_attention_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        cross_attention_cache_update_index=None,
        use_causal_mask=True,
        training=None,
    ):
        has_cross_attention = self._cross_attention_layer is not None
        if has_cross_attention != (encoder_sequence is not None):
            raise _wrong_inputs(built_with=has_cross_attention)
        if has_cross_attention and (
            (self_attention_cache is None) != (cross_attention_cache is None)
        ):
            raise ValueError(
                "When calling `keras_selfattn.TransformerDecoder` with "
                "cross-attention (with both `encoder_sequence` and "
                "`decoder_sequence`), `self_attention_cache` and "
                "`cross_attention_cache` should both be set or both be `None`. "
                "One cannot be `None` while the other is not. Received: "
                f"self_attention_cache={self_attention_cache}, "
                f"cross_attention_cache={cross_attention_cache}."
            )
        check_rank("decoder_sequence", decoder_sequence.shape, 3, "(batch, T, dim)")
        check_floating("decoder_sequence", decoder_sequence)
        if has_cross_attention:
            check_floating("encoder_sequence", encoder_sequence)
        self._check_built_features(
            decoder_sequence.shape,
            encoder_sequence.shape if has_cross_attention else None,
        )
        if has_cross_attention:
            check_same_batch(
                "encoder_sequence",
                encoder_sequence.shape,
                "decoder_sequence",
                decoder_sequence.shape,
            )
        padding = self._padding(decoder_sequence, decoder_padding_mask, "decoder")
        # Self-attention part. Without a cache the padding goes in as Keras
        # masks (a key mask; explicit, so Keras does not put the Keras mask in
        # instead) and causality as a flag: no (T, T) tensor is built, and
        # the chunked path keeps memory linear in T. With a cache the
        # attention layer counts the causal rows from the update index (the
        # kernel's `query_offset`).
        self_masks = {}
        batch, length = decoder_sequence.shape[:2]
        keys = length if self_attention_cache is None else self_attention_cache.shape[2]
        self_shape = (batch, length, keys)
        if padding is not None and self_attention_cache is None:
            check_keras_mask("decoder_padding_mask", padding, decoder_sequence)
            # Padding may hold NaN or inf: zeroed (a select) up front.
            decoder_sequence = zero_padded(decoder_sequence, padding)
            self_masks = {"query_mask": padding, "value_mask": padding}
            self_mask = self._merged_mask(
                None, decoder_attention_mask, "decoder", self_shape
            )
        else:
            self_mask = self._merged_mask(
                padding, decoder_attention_mask, "decoder", self_shape
            )

        def attend_self(x):
            return self._self_attention_layer(
                query=x,
                value=x,
                attention_mask=self_mask,
                **self_masks,
                cache=self_attention_cache,
                cache_update_index=self_attention_cache_update_index,
                use_causal_mask=bool(use_causal_mask),
                training=training,
            )

        norm, dropout = self._self_attention_layer_norm, self._self_attention_dropout
        x = self._residual(decoder_sequence, attend_self, norm, dropout, training)
        if self_attention_cache is not None:
            x, self_attention_cache = x

        # Cross-attention part.
        if has_cross_attention:
            encoder_padding = self._padding(
                encoder_sequence, encoder_padding_mask, "encoder"
            )
            cross_mask = self._merged_mask(
                encoder_padding,
                encoder_attention_mask,
                "encoder",
                (batch, length, encoder_sequence.shape[1]),
            )
            cross_masks = {}
            if cross_attention_cache is None:
                if encoder_padding is not None:
                    check_keras_mask(
                        "encoder_padding_mask", encoder_padding, encoder_sequence
                    )
                    cross_masks["value_mask"] = encoder_padding
                if padding is not None:
                    cross_masks["query_mask"] = padding

            def attend_encoder(x):
                return self._cross_attention_layer(
                    query=x,
                    value=encoder_sequence,
                    attention_mask=cross_mask,
                    **cross_masks,
                    cache=cross_attention_cache,
                    cache_update_index=cross_attention_cache_update_index,
                    training=training,
                )

            norm = self._cross_attention_layer_norm
            dropout = self._cross_attention_dropout
            x = self._residual(x, attend_encoder, norm, dropout, training)
            if cross_attention_cache is not None:
                x, cross_attention_cache = x

        # Feed-forward part.
        x = self._feedforward(x, training)
        if padding is not None and padding.shape[1] == x.shape[1]:
            x = zero_padded(x, padding)

        if self_attention_cache is not None:
            if has_cross_attention:
                return x, self_attention_cache, cross_attention_cache
            return x, self_attention_cache
        return x

    def _check_built_features(self, decoder_sequence_shape, encoder_sequence_shape):
        """Once built, the sequences have the feature sizes it was built for
        (`check_built_features`)."""
        for name, shape in (
            ("decoder_sequence", decoder_sequence_shape),
            ("encoder_sequence", encoder_sequence_shape),
        ):
            if shape is not None:
                check_built_features(self, name, shape, f"{name}_shape")

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        self._check_built_features(decoder_sequence_shape, encoder_sequence_shape)
        return tuple(decoder_sequence_shape)

    def get_config(self):
        config = {
            # keras-hub's: the layer builds from its config at once.
            "decoder_sequence_shape": self._decoder_sequence_shape,
            "encoder_sequence_shape": self._encoder_sequence_shape,
        }
        return {**super().get_config(), **config}
