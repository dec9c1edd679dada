"""Keras's own layer harness (`keras.src.testing.TestCase.run_layer_test`),
the one Keras runs on its layers, on every layer of ours besides
`MultiHeadAttention` (which runs Keras's whole test file:
`test_keras_suite.py`): weights, seed generators and losses counted,
serialization, masking support, a training step and mixed precision."""

from __future__ import annotations

import pytest
from keras.src import testing

import keras_selfattn

# name -> (layer class, init kwargs, input shape, input dtype, output shape,
#          trainable weights, seed generators, losses)
_RUNS = {
    "SelfAttention_1head": (
        keras_selfattn.SelfAttention, {"units": 4}, (2, 5, 3), "float32",
        (2, 5, 4), 2, 0, 0,
    ),
    "SelfAttention_heads_dropout_regularized": (
        keras_selfattn.SelfAttention,
        {"units": 8, "num_heads": 2, "dropout": 0.1, "kernel_regularizer": "l2"},
        (2, 5, 3), "float32", (2, 5, 8), 4, 1, 2,
    ),
    "AttentionPooling": (
        keras_selfattn.AttentionPooling, {"num_heads": 2}, (2, 5, 8), "float32",
        (2, 8), 3, 0, 0,
    ),
    "AttentionPooling_dropout_regularized": (
        keras_selfattn.AttentionPooling,
        {"dropout": 0.1, "query_regularizer": "l2"},
        (2, 5, 8), "float32", (2, 8), 3, 1, 1,
    ),
    "TransformerEncoder": (
        keras_selfattn.TransformerEncoder,
        {"intermediate_dim": 16, "num_heads": 2},
        (2, 5, 8), "float32", (2, 5, 8), 16, 0, 0,
    ),
    "TransformerEncoder_dropout": (
        keras_selfattn.TransformerEncoder,
        {"intermediate_dim": 16, "num_heads": 2, "dropout": 0.1,
         "attention_dropout": 0.1},
        (2, 5, 8), "float32", (2, 5, 8), 16, 3, 0,
    ),
    "TokenAndPositionEmbedding": (
        keras_selfattn.TokenAndPositionEmbedding,
        {"vocabulary_size": 20, "sequence_length": 8, "embedding_dim": 4},
        (2, 5), "int32", (2, 5, 4), 2, 0, 0,
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    "cls, kwargs, shape, dtype, out_shape, weights, seeds, losses",
    _RUNS.values(),
    ids=_RUNS.keys(),
)
def test_keras_layer_harness(
    cls, kwargs, shape, dtype, out_shape, weights, seeds, losses
):
    testing.TestCase().run_layer_test(
        cls,
        init_kwargs=kwargs,
        input_shape=shape,
        input_dtype=dtype,
        expected_output_shape=out_shape,
        expected_num_trainable_weights=weights,
        expected_num_non_trainable_weights=0,
        expected_num_seed_generators=seeds,
        expected_num_losses=losses,
        supports_masking=True,
    )
