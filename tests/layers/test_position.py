"""TokenAndPositionEmbedding: shapes, the padding mask, config, saving."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn import TokenAndPositionEmbedding

IDS = np.array([[5, 8, 2, 0, 0], [1, 2, 3, 4, 9]], dtype="int32")


def _np(x):
    return keras.ops.convert_to_numpy(x)


def test_output_is_token_plus_position_embedding():
    layer = TokenAndPositionEmbedding(10, sequence_length=5, embedding_dim=4)
    out = _np(layer(IDS))
    assert out.shape == (2, 5, 4)
    tokens = _np(layer.token_embedding.embeddings)
    positions = _np(layer.position_embeddings)
    expected = tokens[IDS[1]] + positions
    np.testing.assert_allclose(out[1], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        out[0, :3], tokens[IDS[0, :3]] + positions[:3], atol=1e-6
    )


def test_padding_outputs_zeros_and_mask_is_handed_on():
    layer = TokenAndPositionEmbedding(10, 5, 4)
    out = _np(layer(IDS))
    np.testing.assert_array_equal(out[0, 3:], 0.0)
    mask = _np(layer.compute_mask(IDS))
    np.testing.assert_array_equal(mask, IDS != 0)


def test_mask_zero_false_keeps_every_position():
    layer = TokenAndPositionEmbedding(10, 5, 4, mask_zero=False)
    assert layer.compute_mask(IDS) is None
    assert np.all(np.abs(_np(layer(IDS))[0, 3:]).sum(-1) > 0)


def test_shorter_sequences_use_the_first_positions():
    layer = TokenAndPositionEmbedding(10, 8, 4)
    out = _np(layer(IDS))
    assert out.shape == (2, 5, 4)
    positions = _np(layer.position_embeddings)[:5]
    tokens = _np(layer.token_embedding.embeddings)
    np.testing.assert_allclose(out[1], tokens[IDS[1]] + positions, atol=1e-6)


def test_symbolic_unknown_batch_and_length_and_mask_reaches_next_layer():
    ids = keras.Input(shape=(None,), dtype="int32")
    x = TokenAndPositionEmbedding(10, 5, 4)(ids)
    assert tuple(x.shape) == (None, None, 4)
    pooled = keras.layers.GlobalAveragePooling1D()(x)
    model = keras.Model(ids, pooled)
    out = _np(model(IDS))
    # GlobalAveragePooling1D honours the mask: the padded zeros are not averaged.
    emb = model.layers[1]
    full = _np(emb(IDS))
    np.testing.assert_allclose(out[0], full[0, :3].mean(0), atol=1e-6)


def test_config_round_trip():
    layer = TokenAndPositionEmbedding(
        10, 5, 4, mask_zero=False, embeddings_initializer="zeros", name="tpe"
    )
    config = layer.get_config()
    clone = TokenAndPositionEmbedding.from_config(config)
    assert clone.get_config() == config
    for key in ("vocabulary_size", "sequence_length", "embedding_dim", "mask_zero"):
        assert getattr(clone, key) == getattr(layer, key)


def test_save_and_load(tmp_path):
    ids = keras.Input(shape=(None,), dtype="int32")
    model = keras.Model(ids, TokenAndPositionEmbedding(10, 5, 4)(ids))
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(_np(loaded(IDS)), _np(model(IDS)), atol=0)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
    keras.config.set_dtype_policy(policy)
    layer = TokenAndPositionEmbedding(10, 5, 4)
    out = layer(IDS)
    assert keras.backend.standardize_dtype(out.dtype) == policy.split("_")[1]
    assert np.all(np.isfinite(_np(ops.cast(out, "float32"))))


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"vocabulary_size": 0}, "vocabulary_size"),
        ({"sequence_length": -1}, "sequence_length"),
        ({"embedding_dim": 2.5}, "embedding_dim"),
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
