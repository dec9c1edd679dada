"""The contract every public layer keeps, written once and run for each layer.

A `LayerCase` says how to build a layer, how to call it on one tensor and
what comes out. `tests/layers/test_contract.py` runs the whole contract over
`CASES`; a new layer joins by adding a case. Every public layer of
`keras_selfattn` has at least one case (a test checks that).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import keras_selfattn
from keras_selfattn.layers.grouped_query_attention import ON_THIS_KERAS
from tests.helpers import for_this_keras

FEATURES = 8  # channels of the (batch, seq, FEATURES) inputs
VOCAB = 20  # token ids of the (batch, seq) inputs are in [0, VOCAB)
MAX_LEN = 16  # sequence_length of the position embedding


@dataclasses.dataclass(frozen=True)
class LayerCase:
    """How the contract tests drive one layer.

    Attributes:
        name: Test id.
        make: `make() -> layer`, for inputs of `FEATURES` channels (or, with
            `ids`, token ids below `VOCAB`).
        apply: `apply(layer, x, **call_kwargs)` calls the layer on one tensor.
        output_dim: The last dimension of the output.
        arguments: A non-default value for every constructor argument (a
            required one: any valid value). The config test constructs the
            layer with each, one at a time.
        ids: Whether the input is token ids `(batch, seq)` (else float
            features `(batch, seq, FEATURES)`).
        pools: Whether the time axis is pooled away: the output is
            `(batch, output_dim)`, and no mask is handed on.
        scores: Whether `apply(..., return_attention_scores=True)` returns
            `(output, scores)`, scores `(batch, heads, q_len, k_len)` (or
            `(batch, heads, seq)` when pooling).
        sequential: Whether the layer can be used in `keras.Sequential`
            (one input tensor, options in the constructor). Otherwise it is
            called as `layer(x, x)` (query and value).
    """

    name: str
    make: Callable[[], Any]
    apply: Callable[..., Any]
    output_dim: int
    arguments: dict[str, Any]
    ids: bool = False
    pools: bool = False
    scores: bool = True
    sequential: bool = True

    @property
    def layer_class(self) -> type:
        return type(self.make())


def _self_call(layer, x, **kwargs):
    return layer(x, **kwargs)


def _mha_self_call(layer, x, **kwargs):
    return layer(x, x, **kwargs)


def _decoder_call(layer, x, mask=None, **kwargs):
    # keras-hub's call names the padding `decoder_padding_mask`.
    return layer(x, decoder_padding_mask=mask, **kwargs)


_INITIALIZER = "ones"
_REGULARIZER = "l2"
_CONSTRAINT = "non_neg"

_SELF_ATTENTION_ARGUMENTS = {
    "units": 8,
    "num_heads": 2,
    "use_bias": False,
    "use_output_projection": True,
    "dropout": 0.1,
    "causal": True,
    "sliding_window": 3,
    "scale": 0.5,
    "seed": 5,
    "chunk_size": 4,
    "kernel_initializer": _INITIALIZER,
    "bias_initializer": _INITIALIZER,
    "kernel_regularizer": _REGULARIZER,
    "bias_regularizer": _REGULARIZER,
    "activity_regularizer": _REGULARIZER,
    "kernel_constraint": _CONSTRAINT,
    "bias_constraint": _CONSTRAINT,
}

_MHA_ARGUMENTS = {
    "num_heads": 2,
    "key_dim": 4,
    "value_dim": 3,
    "dropout": 0.1,
    "use_bias": False,
    "output_shape": 6,
    "attention_axes": 1,
    "sliding_window": 3,
    "flash_attention": False,
    "kernel_initializer": _INITIALIZER,
    "bias_initializer": _INITIALIZER,
    "kernel_regularizer": _REGULARIZER,
    "bias_regularizer": _REGULARIZER,
    "activity_regularizer": _REGULARIZER,
    "kernel_constraint": _CONSTRAINT,
    "bias_constraint": _CONSTRAINT,
    "use_gate": True,
    "seed": 5,
    "scale": 0.5,
    "chunk_size": 4,
}
# The floor lane's Keras lacks some (`use_gate`, `sliding_window`).
_MHA_ARGUMENTS = for_this_keras(_MHA_ARGUMENTS)
# Gated attention with a sliding window, where the installed Keras takes them.
_GATE_WINDOW = {"use_gate": True, "sliding_window": 2}
_GATE_WINDOW_CASES = (
    []
    if for_this_keras(_GATE_WINDOW) != _GATE_WINDOW
    else [
        LayerCase(
            name="MultiHeadAttention_gate_window",
            make=lambda: keras_selfattn.MultiHeadAttention(
                num_heads=2, key_dim=4, output_shape=6, **_GATE_WINDOW
            ),
            apply=_mha_self_call,
            output_dim=6,
            arguments=_MHA_ARGUMENTS,
            sequential=False,
        ),
    ]
)

_GQA_ARGUMENTS = {
    "head_dim": 4,
    "num_query_heads": 4,
    "num_key_value_heads": 2,
    "dropout": 0.1,
    "use_bias": False,
    "sliding_window": 3,
    "flash_attention": False,
    "kernel_initializer": _INITIALIZER,
    "bias_initializer": _INITIALIZER,
    "kernel_regularizer": _REGULARIZER,
    "bias_regularizer": _REGULARIZER,
    "activity_regularizer": _REGULARIZER,
    "kernel_constraint": _CONSTRAINT,
    "bias_constraint": _CONSTRAINT,
    "use_gate": True,
    "seed": 5,
    "scale": 0.5,
    "chunk_size": 4,
}

# Keras's GroupQueryAttention, which ours subclasses, has this constructor
# from Keras 3.15: older Keras (the floor's) has no cases of it.
_GQA_CASES = (
    # One case (CI time): grouped heads with the gate and a window; the
    # parity tests cover one kv head and no options.
    LayerCase(
        name="GroupQueryAttention_gate_window",
        make=lambda: keras_selfattn.GroupQueryAttention(
            head_dim=4,
            num_query_heads=4,
            num_key_value_heads=2,
            use_gate=True,
            sliding_window=2,
        ),
        apply=_mha_self_call,
        output_dim=FEATURES,
        arguments=_GQA_ARGUMENTS,
        sequential=False,
    ),
)
if not ON_THIS_KERAS:
    _GQA_CASES = ()

CASES = [
    LayerCase(
        name="SelfAttention_1head",
        make=lambda: keras_selfattn.SelfAttention(8),
        apply=_self_call,
        output_dim=8,
        arguments=_SELF_ATTENTION_ARGUMENTS,
    ),
    LayerCase(
        name="SelfAttention_4heads_window",
        make=lambda: keras_selfattn.SelfAttention(
            16, num_heads=4, sliding_window=3, causal=True
        ),
        apply=_self_call,
        output_dim=16,
        arguments=_SELF_ATTENTION_ARGUMENTS,
    ),
    LayerCase(
        name="MultiHeadAttention",
        make=lambda: keras_selfattn.MultiHeadAttention(num_heads=2, key_dim=4),
        apply=_mha_self_call,
        output_dim=FEATURES,
        arguments=_MHA_ARGUMENTS,
        sequential=False,
    ),
    *_GATE_WINDOW_CASES,
    *_GQA_CASES,
    LayerCase(
        name="TransformerEncoder",
        make=lambda: keras_selfattn.TransformerEncoder(
            intermediate_dim=16, num_heads=2
        ),
        apply=_self_call,
        output_dim=FEATURES,
        arguments={
            "intermediate_dim": 16,
            "num_heads": 2,
            "dropout": 0.1,
            "attention_dropout": 0.2,
            "activation": "gelu",
            "layer_norm_epsilon": 1e-3,
            "normalize_first": True,
            "kernel_initializer": _INITIALIZER,
            "bias_initializer": _INITIALIZER,
            "seed": 5,
            "attention": "keras",
        },
    ),
    LayerCase(
        name="CachedMultiHeadAttention",
        make=lambda: keras_selfattn.CachedMultiHeadAttention(num_heads=2, key_dim=4),
        apply=_mha_self_call,
        output_dim=FEATURES,
        arguments=_MHA_ARGUMENTS,
        sequential=False,
    ),
    LayerCase(
        name="TransformerDecoder",
        make=lambda: keras_selfattn.TransformerDecoder(
            intermediate_dim=16, num_heads=2
        ),
        apply=_decoder_call,
        output_dim=FEATURES,
        arguments={
            "intermediate_dim": 16,
            "num_heads": 2,
            "dropout": 0.1,
            "activation": "gelu",
            "layer_norm_epsilon": 1e-3,
            "kernel_initializer": _INITIALIZER,
            "bias_initializer": _INITIALIZER,
            "normalize_first": True,
            "attention_dropout": 0.2,
            "seed": 5,
        },
        scores=False,
    ),
    LayerCase(
        name="AttentionPooling_2heads",
        make=lambda: keras_selfattn.AttentionPooling(
            num_heads=2, query_initializer="random_normal"
        ),
        apply=_self_call,
        output_dim=FEATURES,
        arguments={
            "num_heads": 2,
            "key_dim": 3,
            "key_activation": "relu",
            "use_bias": False,
            "dropout": 0.1,
            "scale": 0.5,
            "seed": 5,
            "entropy_penalty": 0.1,
            "kernel_initializer": _INITIALIZER,
            "bias_initializer": _INITIALIZER,
            "query_initializer": _INITIALIZER,
            "kernel_regularizer": _REGULARIZER,
            "bias_regularizer": _REGULARIZER,
            "query_regularizer": _REGULARIZER,
            "kernel_constraint": _CONSTRAINT,
            "bias_constraint": _CONSTRAINT,
        },
        pools=True,
    ),
    LayerCase(
        name="TokenAndPositionEmbedding",
        make=lambda: keras_selfattn.TokenAndPositionEmbedding(VOCAB, MAX_LEN, FEATURES),
        apply=_self_call,
        output_dim=FEATURES,
        arguments={
            "vocabulary_size": VOCAB,
            "sequence_length": MAX_LEN,
            "embedding_dim": FEATURES,
            "mask_zero": False,
            "embeddings_initializer": _INITIALIZER,
            "position_initializer": _INITIALIZER,
        },
        ids=True,
        scores=False,
    ),
]
