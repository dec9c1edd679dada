"""TransformerEncoder: the block's math, masks, scores, config, saving."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn import TransformerEncoder


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


@pytest.mark.parametrize("normalize_first", [False, True])
def test_matches_reference_block(rng, normalize_first):
    """Post-LN and pre-LN blocks against NumPy, from the layer's own weights."""
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = TransformerEncoder(16, num_heads=2, normalize_first=normalize_first)
    out, scores = layer(x, return_attention_scores=True)
    mha = layer.attention_layer
    wq, bq = (_np(w) for w in mha.query_dense.weights)
    wk, bk = (_np(w) for w in mha.key_dense.weights)
    wv, bv = (_np(w) for w in mha.value_dense.weights)
    wo, bo = (_np(w) for w in mha.output_dense.weights)
    g1, b1 = (_np(w) for w in layer.attention_norm.weights)
    g2, b2 = (_np(w) for w in layer.feedforward_norm.weights)
    w1, c1 = (_np(w) for w in layer.intermediate_dense.weights)
    w2, c2 = (_np(w) for w in layer.output_dense.weights)

    def attention(h):
        q = np.einsum("btd,dhk->bthk", h, wq) + bq
        k = np.einsum("btd,dhk->bthk", h, wk) + bk
        v = np.einsum("btd,dhk->bthk", h, wv) + bv
        logits = np.einsum("bqhk,bthk->bhqt", q, k) / np.sqrt(4)
        w = np.exp(logits - logits.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        o = np.einsum("bhqt,bthk->bqhk", w, v)
        return np.einsum("bqhk,hkd->bqd", o, wo) + bo, w

    def ffn(h):
        return np.maximum(h @ w1 + c1, 0) @ w2 + c2

    if normalize_first:
        a, w = attention(_layer_norm(x, g1, b1))
        h = x + a
        ref = h + ffn(_layer_norm(h, g2, b2))
    else:
        a, w = attention(x)
        h = _layer_norm(x + a, g1, b1)
        ref = _layer_norm(h + ffn(h), g2, b2)
    np.testing.assert_allclose(_np(out), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_np(scores), w, rtol=1e-4, atol=1e-5)


def test_same_as_block_on_keras_multi_head_attention(rng):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    ours = TransformerEncoder(16, num_heads=2)
    theirs = TransformerEncoder(16, num_heads=2, attention="keras")
    ours.build(x.shape)
    theirs.build(x.shape)
    assert isinstance(theirs.attention_layer, keras.layers.MultiHeadAttention)
    assert not isinstance(ours.attention_layer, keras.layers.MultiHeadAttention)
    theirs.set_weights(ours.get_weights())
    np.testing.assert_allclose(_np(ours(x)), _np(theirs(x)), rtol=1e-5, atol=1e-5)


def test_masks(rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    layer = TransformerEncoder(16, num_heads=2)
    out, scores = layer(x, mask=mask, return_attention_scores=True)
    out, scores = _np(out), _np(scores)
    np.testing.assert_array_equal(scores[0, :, :, 3:], 0.0)  # padded keys
    np.testing.assert_array_equal(scores[0, :, 3:, :], 0.0)  # padded queries
    np.testing.assert_array_equal(out[0, 3:], 0.0)
    changed = x.copy()
    changed[0, 3:] = 100.0
    np.testing.assert_allclose(
        _np(layer(changed, mask=mask))[0, :3], out[0, :3], rtol=1e-5, atol=1e-5
    )
    # The real positions equal the same review without padding.
    alone = _np(layer(x[:1, :3]))
    np.testing.assert_allclose(alone[0], out[0, :3], rtol=1e-5, atol=1e-5)


def test_keras_mask_in_functional_model_and_handed_on():
    ids = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(20, 8, mask_zero=True)(ids)
    encoder = TransformerEncoder(16, num_heads=2)
    y, scores = encoder(x, return_attention_scores=True)
    assert tuple(y.shape) == (None, None, 8)
    assert tuple(scores.shape) == (None, 2, None, None)
    z = keras.layers.GlobalAveragePooling1D()(y)
    model = keras.Model(ids, [y, z])
    data = np.array([[3, 4, 0, 0], [1, 2, 3, 4]], dtype="int32")
    out, pooled = (_np(t) for t in model(data))
    np.testing.assert_array_equal(out[0, 2:], 0.0)
    # GlobalAveragePooling1D got the handed-on mask: it averages real tokens only.
    np.testing.assert_allclose(pooled[0], out[0, :2].mean(0), rtol=1e-5, atol=1e-6)


def test_sequential_fit_loss_falls(rng):
    x = rng.integers(1, 20, size=(64, 8)).astype("int32")
    y = (x[:, 0] > 10).astype("float32")
    model = keras.Sequential(
        [
            keras.Input(shape=(8,), dtype="int32"),
            keras.layers.Embedding(20, 8, mask_zero=True),
            TransformerEncoder(16, num_heads=2, dropout=0.1, seed=3),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy")
    history = model.fit(x, y, epochs=6, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_causal(rng):
    x = rng.normal(size=(1, 4, 8)).astype("float32")
    layer = TransformerEncoder(16, num_heads=2)
    _, scores = layer(x, use_causal_mask=True, return_attention_scores=True)
    scores = _np(scores)
    assert np.all(scores[..., np.triu_indices(4, 1)[0], np.triu_indices(4, 1)[1]] == 0)


def test_dropout_only_in_training(rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = TransformerEncoder(16, num_heads=2, dropout=0.5, seed=1)
    np.testing.assert_allclose(_np(layer(x)), _np(layer(x)), atol=0)
    assert not np.allclose(_np(layer(x, training=True)), _np(layer(x)))


def test_config_round_trip():
    layer = TransformerEncoder(
        32,
        num_heads=4,
        dropout=0.1,
        attention_dropout=0.2,
        activation="gelu",
        normalize_first=True,
        seed=7,
        name="enc",
    )
    config = layer.get_config()
    clone = TransformerEncoder.from_config(config)
    assert clone.get_config() == config
    assert clone.intermediate_dim == 32 and clone.normalize_first is True


def test_save_and_load(tmp_path, rng):
    inputs = keras.Input(shape=(None, 8))
    model = keras.Model(inputs, TransformerEncoder(16, num_heads=2)(inputs))
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(_np(loaded(x)), _np(model(x)), atol=0)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy, rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    ref = TransformerEncoder(16, num_heads=2)
    ref_out = _np(ref(x))
    keras.config.set_dtype_policy(policy)
    layer = TransformerEncoder(16, num_heads=2)
    layer.build(x.shape)
    layer.set_weights(ref.get_weights())
    out = _np(ops.cast(layer(x), "float32"))
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, ref_out, atol=0.1, rtol=0.05)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"intermediate_dim": 0}, "intermediate_dim"),
        ({"num_heads": 0}, "num_heads"),
        ({"dropout": -0.1}, "dropout"),
        ({"attention_dropout": 1.0}, "attention_dropout"),
        ({"layer_norm_epsilon": 0}, "layer_norm_epsilon"),
    ],
)
def test_bad_arguments(kwargs, argument):
    args = {"intermediate_dim": 16, "num_heads": 2}
    args.update(kwargs)
    with pytest.raises(ValueError, match=f"`{argument}`"):
        TransformerEncoder(**args)


def test_bad_inputs():
    with pytest.raises(ValueError, match="`num_heads`"):
        TransformerEncoder(16, num_heads=3)(np.zeros((1, 2, 8), "float32"))
    with pytest.raises(ValueError, match="`inputs`"):
        TransformerEncoder(16, num_heads=2)(np.zeros((2, 8), "float32"))
    with pytest.raises(ValueError, match="`mask`"):
        TransformerEncoder(16, num_heads=2)(
            np.zeros((1, 4, 8), "float32"), mask=np.ones((1, 3), bool)
        )
