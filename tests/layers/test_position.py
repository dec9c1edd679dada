"""TokenAndPositionEmbedding: shapes, the padding mask, config, saving."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_selfattn import TokenAndPositionEmbedding
from tests.helpers import (
    assert_close,
    assert_quantized_model_round_trips,
    needs_keras,
    to_numpy,
)

IDS = np.array([[5, 8, 2, 0, 0], [1, 2, 3, 4, 9]], dtype="int32")


def test_output_is_token_plus_position_embedding():
    layer = TokenAndPositionEmbedding(10, sequence_length=5, embedding_dim=4)
    out = to_numpy(layer(IDS))
    assert out.shape == (2, 5, 4)
    tokens = to_numpy(layer.token_embedding.embeddings)
    positions = to_numpy(layer.position_embeddings)
    expected = tokens[IDS[1]] + positions
    np.testing.assert_allclose(out[1], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        out[0, :3], tokens[IDS[0, :3]] + positions[:3], atol=1e-6
    )


def test_mask_zero_false_keeps_every_position():
    layer = TokenAndPositionEmbedding(10, 5, 4, mask_zero=False)
    assert layer.compute_mask(IDS) is None
    assert np.all(np.abs(to_numpy(layer(IDS))[0, 3:]).sum(-1) > 0)


def test_shorter_sequences_use_the_first_positions():
    layer = TokenAndPositionEmbedding(10, 8, 4)
    out = to_numpy(layer(IDS))
    assert out.shape == (2, 5, 4)
    positions = to_numpy(layer.position_embeddings)[:5]
    tokens = to_numpy(layer.token_embedding.embeddings)
    np.testing.assert_allclose(out[1], tokens[IDS[1]] + positions, atol=1e-6)


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"vocabulary_size": 0}, "vocabulary_size"),
        ({"sequence_length": -1}, "sequence_length"),
        ({"embedding_dim": 2.5}, "embedding_dim"),
        ({"mask_zero": "no"}, "mask_zero"),
    ],
)
def test_bad_arguments(kwargs, argument):
    args = {"vocabulary_size": 10, "sequence_length": 5, "embedding_dim": 4}
    args.update(kwargs)
    with pytest.raises(ValueError, match=f"`{argument}`"):
        TokenAndPositionEmbedding(**args)


def test_too_long_or_wrong_rank_input():
    layer = TokenAndPositionEmbedding(10, 3, 4)
    with pytest.raises(ValueError, match="sequence_length=3"):
        layer(IDS)
    with pytest.raises(ValueError, match="`inputs`"):
        TokenAndPositionEmbedding(10, 5, 4)(np.zeros((2, 5, 1), "int32"))
    # A `keras.Input` longer than the table built a model that failed only
    # at `predict` (a probe, 2026-12-07); an unknown length stays allowed.
    with pytest.raises(ValueError, match=r"sequence_length=3.*with 5 tokens"):
        TokenAndPositionEmbedding(10, 3, 4)(keras.Input((5,), dtype="int32"))
    assert TokenAndPositionEmbedding(10, 3, 4)(keras.Input((None,))).shape[-1] == 4


def test_a_text_with_no_token():
    layer = TokenAndPositionEmbedding(10, 5, 4)
    empty = np.zeros((1, 0), "int32")
    assert tuple(layer(empty).shape) == (1, 0, 4)
    assert tuple(layer.compute_mask(empty).shape) == (1, 0)


@pytest.mark.parametrize(
    "ids, received",
    [
        pytest.param([[3, 10, 0]], "1 ids outside it, from 10 to 10", id="too_large"),
        pytest.param([[3, -1, 0]], "1 ids outside it, from -1 to -1", id="negative"),
        pytest.param([[-4, 2], [12, 0]], "2 ids outside it, from -4 to 12", id="both"),
    ],
)
def test_ids_outside_the_vocabulary_raise_eagerly(ids, received):
    # Keras's Embedding alone would take -1 as the last row on every backend,
    # and 10 as NaN on JAX.
    layer = TokenAndPositionEmbedding(10, 5, 4)
    with pytest.raises(ValueError, match=r"ids in \[0, vocabulary_size=10\)") as err:
        layer(np.array(ids, "int32"))
    assert received in str(err.value)


def test_float_ids_are_ids_where_whole_and_refused_where_not():
    # Keras's Embedding casts them: 2.7 was id 2, silently.
    layer = TokenAndPositionEmbedding(10, 5, 4)
    whole = np.array([[3.0, 7.0, 0.0]], "float32")
    assert_close(layer(whole), layer(whole.astype("int32")), atol=0)
    for ids, received in (
        ([[3.0, 2.7, 0.0]], "1 ids outside it or not whole, from 2.7 to 2.7"),
        (
            [[np.nan, 1.0, 12.0]],
            "2 ids outside it or not whole, from 12.0 to 12.0, 1 of them NaN",
        ),
        ([[np.nan, 1.0, 0.0]], "1 ids outside it or not whole, 1 of them NaN"),
    ):
        with pytest.raises(ValueError, match=r"integer ids in \[0, vocab") as err:
            layer(np.array(ids, "float32"))
        assert received in str(err.value)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_float_ids_keep_their_value_in_mixed_precision(policy):
    # The layer's autocast turned float32 id 257.0 into bfloat16's 256.0
    # (and 2049.0 into float16's 2048.0): another word, silently.
    layer = TokenAndPositionEmbedding(3000, 3, 4, dtype=policy)
    ids = np.array([[257, 2049, 0]])
    got = layer(ids.astype("float32"))
    assert keras.backend.standardize_dtype(got.dtype) == policy.split("_")[1]
    assert_close(got, layer(ids.astype("int32")), atol=0)


def test_ids_outside_the_vocabulary_in_a_compiled_predict():
    layer = TokenAndPositionEmbedding(10, 5, 4)
    inputs = keras.Input((None,), dtype="int32")
    model = keras.Model(inputs, layer(inputs))
    ids = np.array([[3, 10, -1, 0], [1, 2, 9, 0]], "int32")
    backend = keras.backend.backend()
    if backend == "torch":  # PyTorch predicts eagerly: our error
        with pytest.raises(ValueError, match="2 ids outside it, from -1 to 10"):
            model.predict(ids, verbose=0)
        return
    if backend == "tensorflow":  # its CPU kernel raises, for -1 too
        import tensorflow as tf

        with pytest.raises(tf.errors.InvalidArgumentError, match="not in \\[0, 10\\)"):
            model.predict(ids, verbose=0)
        with pytest.raises(tf.errors.InvalidArgumentError, match="not in \\[0, 10\\)"):
            model.predict(np.array([[3, -1]], "int32"), verbose=0)
        return
    # JAX's jit: nothing can raise; NaN there, not a row counted from the end.
    out = model.predict(ids, verbose=0, batch_size=2)
    assert np.isnan(out[0, 1:3]).all()
    assert np.isfinite(out[0, [0, 3]]).all() and np.isfinite(out[1]).all()
    tokens = to_numpy(layer.token_embedding.embeddings)
    positions = to_numpy(layer.position_embeddings)
    np.testing.assert_allclose(out[1, :3], tokens[[1, 2, 9]] + positions[:3], atol=1e-6)


def test_numpy_integers_are_integers():
    # Keras's Embedding refused them, naming `input_dim` and `output_dim`.
    layer = TokenAndPositionEmbedding(np.int64(10), np.int64(5), np.int64(4))
    config = layer.get_config()
    assert type(config["vocabulary_size"]) is int
    assert type(config["embedding_dim"]) is int
    assert to_numpy(layer(np.array([[1, 2, 0]]))).shape == (1, 3, 4)


@pytest.mark.parametrize(
    "mode",
    ["int8", pytest.param("int4", marks=needs_keras("3.11", 'quantize("int4")'))],
)
def test_quantized_model_saves_and_loads(rng, tmp_path, mode):
    # The config forgot that the token embedding was quantized (keras-hub's
    # layer does too): "Layer 'token_embedding' expected 1 variables, but
    # received 2 variables during loading" (a probe, 2026-12-07).
    ids = keras.Input((5,), dtype="int32")
    x = TokenAndPositionEmbedding(10, 5, 16)(ids)
    model = keras.Model(ids, keras.layers.Dense(2)(x))
    feed = rng.integers(0, 10, size=(2, 5)).astype("int32")
    feed[0, 3:] = 0
    assert_quantized_model_round_trips(model, feed, tmp_path / "quantized.keras", mode)
