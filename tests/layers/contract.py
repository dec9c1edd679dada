"""The contract every layer keeps, written once and run for each layer.

A `LayerCase` says how to build a layer and how to apply it to one
(batch, seq, features) tensor. `tests/layers/test_contract.py` runs the whole
contract over `CASES`; a new layer joins by adding a case.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import keras_selfattn


@dataclasses.dataclass(frozen=True)
class LayerCase:
    """How the contract tests drive one layer.

    Attributes:
        name: Test id.
        make: `make(features) -> layer`, for inputs with `features` channels.
        apply: `apply(layer, x, **call_kwargs)` calls the layer on one tensor.
        output_dim: `output_dim(features)`, the last dim of the output.
        scores: Whether `apply(..., return_attention_scores=True)` returns
            `(output, scores)` with scores `(batch, heads, seq, seq)`.
        sequential: Whether the layer can be used in `keras.Sequential`.
    """

    name: str
    make: Callable[[int], Any]
    apply: Callable[..., Any]
    output_dim: Callable[[int], int]
    scores: bool = True
    sequential: bool = True


def _self_call(layer, x, **kwargs):
    return layer(x, **kwargs)


def _mha_self_call(layer, x, **kwargs):
    return layer(x, x, **kwargs)


CASES = [
    LayerCase(
        name="SelfAttention_1head",
        make=lambda d: keras_selfattn.SelfAttention(8),
        apply=_self_call,
        output_dim=lambda d: 8,
    ),
    LayerCase(
        name="SelfAttention_4heads_window",
        make=lambda d: keras_selfattn.SelfAttention(
            16, num_heads=4, sliding_window=3, causal=True
        ),
        apply=_self_call,
        output_dim=lambda d: 16,
    ),
    LayerCase(
        name="MultiHeadAttention",
        make=lambda d: keras_selfattn.MultiHeadAttention(num_heads=2, key_dim=4),
        apply=_mha_self_call,
        output_dim=lambda d: d,
        sequential=False,
    ),
    LayerCase(
        name="MultiHeadAttention_gate_window",
        make=lambda d: keras_selfattn.MultiHeadAttention(
            num_heads=2, key_dim=4, use_gate=True, sliding_window=2, output_shape=6
        ),
        apply=_mha_self_call,
        output_dim=lambda d: 6,
        sequential=False,
    ),
    LayerCase(
        name="TransformerEncoder",
        make=lambda d: keras_selfattn.TransformerEncoder(
            intermediate_dim=16, num_heads=2
        ),
        apply=_self_call,
        output_dim=lambda d: d,
    ),
]
