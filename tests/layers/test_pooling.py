"""AttentionPooling: the kernel's weights, masks, heads, config, saving."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn import AttentionPooling


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _reference(layer, x, mask):
    """Plain NumPy attention pooling with the layer's weights."""
    kernel = _np(layer.key_kernel)
    bias = _np(layer.key_bias)
    query = _np(layer.query)
    heads, key_dim = query.shape
    b, t, d = x.shape
    keys = np.tanh(x @ kernel + bias).reshape(b, t, heads, key_dim)
    logits = np.einsum("bthk,hk->bht", keys, query) / np.sqrt(key_dim)
    logits = np.where(mask[:, None, :], logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights = weights / weights.sum(-1, keepdims=True)
    values = x.reshape(b, t, heads, d // heads)
    out = np.einsum("bht,bthv->bhv", weights, values).reshape(b, d)
    return out, weights


@pytest.mark.parametrize("num_heads", [1, 2])
def test_matches_reference_with_mask(rng, num_heads):
    x = rng.normal(size=(3, 6, 8)).astype("float32")
    mask = np.array([[1] * 6, [1] * 4 + [0] * 2, [1] + [0] * 5], dtype=bool)
    layer = AttentionPooling(num_heads=num_heads, query_initializer="random_normal")
    out, weights = layer(x, mask=mask, return_attention_scores=True)
    ref_out, ref_weights = _reference(layer, x, mask)
    np.testing.assert_allclose(_np(out), ref_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(weights), ref_weights, rtol=1e-5, atol=1e-6)
    assert _np(weights).shape == (3, num_heads, 6)


def test_padded_positions_get_exactly_zero_weight_and_do_not_matter(rng):
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    layer = AttentionPooling(query_initializer="random_normal")
    out, weights = layer(x, mask=mask, return_attention_scores=True)
    weights = _np(weights)
    np.testing.assert_array_equal(weights[0, :, 3:], 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    changed = x.copy()
    changed[0, 3:] = 1e4
    np.testing.assert_allclose(
        _np(layer(changed, mask=mask))[0], _np(out)[0], rtol=1e-6, atol=1e-6
    )


def test_untrained_layer_is_masked_mean(rng):
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    out = _np(AttentionPooling()(x, mask=mask))
    np.testing.assert_allclose(out[0], x[0, :2].mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[1], x[1].mean(0), rtol=1e-5, atol=1e-6)


def test_fully_masked_sequence_pools_to_zeros(rng):
    x = rng.normal(size=(2, 4, 4)).astype("float32")
    mask = np.array([[0, 0, 0, 0], [1, 1, 0, 0]], dtype=bool)
    out, weights = AttentionPooling()(x, mask=mask, return_attention_scores=True)
    np.testing.assert_array_equal(_np(out)[0], 0.0)
    np.testing.assert_array_equal(_np(weights)[0], 0.0)
    assert np.all(np.isfinite(_np(out)))


def test_keras_mask_from_embedding_and_no_mask_handed_on():
    ids = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(20, 8, mask_zero=True)(ids)
    pooled, weights = AttentionPooling(num_heads=2)(x, return_attention_scores=True)
    assert tuple(pooled.shape) == (None, 8)
    assert tuple(weights.shape) == (None, 2, None)
    model = keras.Model(ids, weights)
    out = _np(model(np.array([[3, 4, 0, 0], [1, 2, 3, 4]], dtype="int32")))
    np.testing.assert_array_equal(out[0, :, 2:], 0.0)
    assert AttentionPooling().compute_mask(np.zeros((1, 2, 4)), np.ones((1, 2))) is None


def test_sequential_and_fit_loss_falls(rng):
    x = rng.integers(1, 20, size=(64, 10)).astype("int32")
    x[:, 7:] = 0
    y = (np.sum(x == 3, axis=1) > 0).astype("float32")
    model = keras.Sequential(
        [
            keras.Input(shape=(None,), dtype="int32"),
            keras.layers.Embedding(20, 8, mask_zero=True),
            AttentionPooling(),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="binary_crossentropy")
    history = model.fit(x, y, epochs=5, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_compute_output_shape_and_spec():
    layer = AttentionPooling(num_heads=2)
    assert layer.compute_output_shape((None, 7, 8)) == (None, 8)
    inputs = keras.KerasTensor((None, None, 8))
    out, scores = layer.compute_output_spec(inputs, return_attention_scores=True)
    assert tuple(out.shape) == (None, 8)
    assert tuple(scores.shape) == (None, 2, None)


def test_config_round_trip():
    layer = AttentionPooling(
        num_heads=2, key_dim=3, key_activation="relu", dropout=0.2, seed=4, name="p"
    )
    config = layer.get_config()
    clone = AttentionPooling.from_config(config)
    assert clone.get_config() == config
    assert clone.num_heads == 2 and clone.key_dim == 3 and clone.dropout == 0.2


def test_save_and_load(tmp_path, rng):
    inputs = keras.Input(shape=(None, 8))
    model = keras.Model(
        inputs, AttentionPooling(num_heads=2, query_initializer="ones")(inputs)
    )
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(_np(loaded(x)), _np(model(x)), atol=0)


def test_dropout_only_in_training(rng):
    x = rng.normal(size=(2, 6, 4)).astype("float32")
    layer = AttentionPooling(dropout=0.5, seed=1)
    np.testing.assert_allclose(_np(layer(x)), _np(layer(x)), atol=0)
    assert not np.allclose(_np(layer(x, training=True)), _np(layer(x)))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_close_to_float32(policy, rng):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    init = keras.initializers.Constant(0.5)
    ref = AttentionPooling(query_initializer=init)
    ref_out = _np(ref(x))
    keras.config.set_dtype_policy(policy)
    layer = AttentionPooling(query_initializer=init)
    layer.build(x.shape)
    layer.set_weights(ref.get_weights())
    out = _np(ops.cast(layer(x), "float32"))
    np.testing.assert_allclose(out, ref_out, atol=0.05, rtol=0.05)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_logits_in_the_thousands_stay_finite(policy, rng):
    keras.config.set_dtype_policy(policy)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer = AttentionPooling(query_initializer=keras.initializers.Constant(3000.0))
    out, weights = layer(x, return_attention_scores=True)
    out = _np(ops.cast(out, "float32"))
    weights = _np(ops.cast(weights, "float32"))
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(weights))
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=0.02)
    # A weighted average stays inside the range of the averaged values.
    assert np.all(out <= x.max(axis=1) + 0.02) and np.all(out >= x.min(axis=1) - 0.02)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"num_heads": 0}, "num_heads"),
        ({"num_heads": 1.5}, "num_heads"),
        ({"key_dim": 0}, "key_dim"),
        ({"dropout": 1.0}, "dropout"),
        ({"scale": 0.0}, "scale"),
    ],
)
def test_bad_arguments(kwargs, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        AttentionPooling(**kwargs)


def test_bad_inputs():
    with pytest.raises(ValueError, match="`num_heads`"):
        AttentionPooling(num_heads=3)(np.zeros((1, 2, 8), "float32"))
    with pytest.raises(ValueError, match="`inputs`"):
        AttentionPooling()(np.zeros((2, 8), "float32"))
    with pytest.raises(ValueError, match="`mask`"):
        AttentionPooling()(np.zeros((1, 4, 8), "float32"), mask=np.ones((1, 3), bool))
