"""TransformerEncoder: the block's math, masks, scores, config, saving."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import keras_selfattn
from keras_selfattn import TransformerEncoder
from tests.helpers import (
    BLOCK_BAD_ARGUMENTS,
    assert_quantized_model_round_trips,
    model_around,
    to_numpy,
)


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
    wq, bq = (to_numpy(w) for w in mha.query_dense.weights)
    wk, bk = (to_numpy(w) for w in mha.key_dense.weights)
    wv, bv = (to_numpy(w) for w in mha.value_dense.weights)
    wo, bo = (to_numpy(w) for w in mha.output_dense.weights)
    g1, b1 = (to_numpy(w) for w in layer.attention_norm.weights)
    g2, b2 = (to_numpy(w) for w in layer.feedforward_norm.weights)
    w1, c1 = (to_numpy(w) for w in layer.intermediate_dense.weights)
    w2, c2 = (to_numpy(w) for w in layer.output_dense.weights)

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
    np.testing.assert_allclose(to_numpy(out), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(to_numpy(scores), w, rtol=1e-4, atol=1e-5)


def test_same_as_block_on_keras_multi_head_attention(rng):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    ours = TransformerEncoder(16, num_heads=2)
    theirs = TransformerEncoder(16, num_heads=2, attention="keras")
    ours.build(x.shape)
    theirs.build(x.shape)
    assert type(theirs.attention_layer) is keras.layers.MultiHeadAttention
    assert type(ours.attention_layer) is keras_selfattn.MultiHeadAttention
    theirs.set_weights(ours.get_weights())
    np.testing.assert_allclose(
        to_numpy(ours(x)), to_numpy(theirs(x)), rtol=1e-5, atol=1e-5
    )


def test_masks(rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    layer = TransformerEncoder(16, num_heads=2)
    out, scores = layer(x, mask=mask, return_attention_scores=True)
    out, scores = to_numpy(out), to_numpy(scores)
    np.testing.assert_array_equal(scores[0, :, :, 3:], 0.0)  # padded keys
    np.testing.assert_array_equal(scores[0, :, 3:, :], 0.0)  # padded queries
    np.testing.assert_array_equal(out[0, 3:], 0.0)
    changed = x.copy()
    changed[0, 3:] = 100.0
    np.testing.assert_allclose(
        to_numpy(layer(changed, mask=mask))[0, :3], out[0, :3], rtol=1e-5, atol=1e-5
    )
    # The real positions equal the same review without padding.
    alone = to_numpy(layer(x[:1, :3]))
    np.testing.assert_allclose(alone[0], out[0, :3], rtol=1e-5, atol=1e-5)


def test_causal(rng):
    x = rng.normal(size=(1, 4, 8)).astype("float32")
    layer = TransformerEncoder(16, num_heads=2)
    _, scores = layer(x, use_causal_mask=True, return_attention_scores=True)
    scores = to_numpy(scores)
    assert np.all(scores[..., np.triu_indices(4, 1)[0], np.triu_indices(4, 1)[1]] == 0)


def test_dropout_only_in_training(rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = TransformerEncoder(16, num_heads=2, dropout=0.5, seed=1)
    np.testing.assert_allclose(to_numpy(layer(x)), to_numpy(layer(x)), atol=0)
    assert not np.allclose(to_numpy(layer(x, training=True)), to_numpy(layer(x)))


def test_the_largest_seed_gives_every_sub_layer_a_seed_this_backend_takes(rng):
    # The block offsets its seed for each dropout sub-layer; PyTorch's
    # generator takes no seed above 2**31 - 1, so the offsets wrap around.
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = TransformerEncoder(16, num_heads=2, dropout=0.5, seed=2**31 - 1)
    out = to_numpy(layer(x, training=True))
    assert np.all(np.isfinite(out))
    assert not np.allclose(out, to_numpy(layer(x)))


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "kwargs, argument",
    [*BLOCK_BAD_ARGUMENTS.values(), ({"attention": ["keras"]}, "attention")],
    ids=[*BLOCK_BAD_ARGUMENTS.keys(), "attention_list"],
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
    with pytest.raises(ValueError, match="`padding_mask`"):
        TransformerEncoder(16, num_heads=2)(
            np.zeros((1, 4, 8), "float32"), padding_mask=np.ones((1, 3), bool)
        )
    with pytest.raises(ValueError, match="`attention_mask`"):
        TransformerEncoder(16, num_heads=2)(
            np.zeros((1, 4, 8), "float32"), attention_mask=np.ones((4, 4), bool)
        )
    # Token ids where vectors belong crashed in the backend (as keras-hub's
    # layer does): TensorFlow's InvalidArgumentError, PyTorch's RuntimeError.
    with pytest.raises(
        ValueError,
        match=r"argument `inputs`, expected a floating-point tensor\. Received: "
        r"inputs='<tensor of dtype int32>'",
    ):
        TransformerEncoder(16, num_heads=2)(np.ones((2, 4, 8), "int32"))


def test_padding_mask_wins_over_the_keras_mask_and_attention_mask_joins_it(rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    keras_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    padding = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=bool)
    causal = np.tril(np.ones((2, 5, 5), bool))
    layer = TransformerEncoder(16, num_heads=2)
    _, scores = layer(x, padding, mask=keras_mask, return_attention_scores=True)
    keys_seen = to_numpy(scores).sum(axis=(1, 2)) > 0  # (batch, keys)
    np.testing.assert_array_equal(keys_seen, padding)
    _, scores = layer(
        x, attention_mask=causal, mask=keras_mask, return_attention_scores=True
    )
    expected = causal & keras_mask[:, None, :] & keras_mask[:, :, None]
    np.testing.assert_array_equal(to_numpy(scores)[:, 0] > 0, expected)


@pytest.mark.parametrize(
    "attention_dropout, weights_dropout, seeds",
    [(None, 0.1, 3), (0.0, 0.0, 2), (0.2, 0.2, 3)],
    ids=["same_as_dropout", "none", "own_rate"],
)
def test_attention_dropout_defaults_to_dropout_as_in_keras_hub(
    attention_dropout, weights_dropout, seeds
):
    layer = TransformerEncoder(
        16, num_heads=2, dropout=0.1, attention_dropout=attention_dropout
    )
    layer.build((1, 4, 8))
    assert layer._self_attention_layer._dropout == weights_dropout
    assert len(layer.non_trainable_variables) == seeds  # the dropouts' seeds


# Where each weight of the block lives, in the order of `weights`.
_KERAS_HUB_ORDER = [
    *["self_attention_layer"] * 8,
    *["self_attention_layer_norm"] * 2,
    *["feedforward_layer_norm"] * 2,
    *["feedforward_intermediate_dense"] * 2,
    *["feedforward_output_dense"] * 2,
]
_V0_1_ORDER = [
    *_KERAS_HUB_ORDER[:10],
    *_KERAS_HUB_ORDER[12:],
    *_KERAS_HUB_ORDER[10:12],
]


@pytest.mark.backend_independent
def test_weights_in_keras_hubs_order_and_in_0_1s_for_a_0_1_config():
    layer = TransformerEncoder(16, num_heads=2)
    layer.build((1, 4, 8))
    assert [w.path.split("/")[1] for w in layer.weights] == _KERAS_HUB_ORDER
    # A config saved by 0.1 has no "weights_order": its weights, and an
    # optimizer's slots for them, were saved in 0.1's order.
    config = layer.get_config()
    assert config.pop("weights_order") == "keras_hub"
    old = TransformerEncoder.from_config(config)
    old.build((1, 4, 8))
    assert [w.path.split("/")[1] for w in old.weights] == _V0_1_ORDER
    assert old.get_config()["weights_order"] == "0.1"
    with pytest.raises(ValueError, match="`weights_order`"):
        TransformerEncoder.from_config({**config, "weights_order": "1.0"})


@pytest.mark.backend_independent
def test_0_1_attribute_names_are_keras_hubs_sub_layers():
    layer = TransformerEncoder(16, num_heads=2)
    assert layer.attention_layer is None  # not built yet
    layer.build((1, 4, 8))
    for old, new in [
        ("attention_layer", "_self_attention_layer"),
        ("attention_norm", "_self_attention_layer_norm"),
        ("attention_dropout_layer", "_self_attention_dropout"),
        ("feedforward_norm", "_feedforward_layer_norm"),
        ("intermediate_dense", "_feedforward_intermediate_dense"),
        ("output_dense", "_feedforward_output_dense"),
        ("feedforward_dropout_layer", "_feedforward_dropout"),
    ]:
        assert getattr(layer, old) is getattr(layer, new), old


@pytest.mark.parametrize("weights_order", ["keras_hub", "0.1"])
def test_a_compiled_model_saves_and_loads_with_its_optimizer_state(
    rng, tmp_path, weights_order
):
    config = TransformerEncoder(16, num_heads=2, name="encoder").get_config()
    if weights_order == "0.1":
        del config["weights_order"]  # as a 0.1 file has it
    model = keras.Sequential(
        [keras.Input((4, 8)), TransformerEncoder.from_config(config)]
    )
    model.compile(optimizer="adam", loss="mse")
    # Optimizer slots as training leaves them: a value of its own in each.
    model.optimizer.build(model.trainable_variables)
    for variable in model.optimizer.variables:
        variable.assign(rng.normal(size=variable.shape).astype(variable.dtype))
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    assert loaded.layers[0].get_config()["weights_order"] == weights_order
    np.testing.assert_allclose(to_numpy(loaded(x)), to_numpy(model(x)), atol=1e-6)
    for ours, saved in zip(
        loaded.optimizer.variables, model.optimizer.variables, strict=True
    ):
        np.testing.assert_array_equal(to_numpy(ours), to_numpy(saved))


@pytest.mark.parametrize("kind", ["functional", "sequential"])
@pytest.mark.parametrize("mode", ["int8", "float8"])
def test_quantized_model_saves_and_loads(rng, tmp_path, mode, kind):
    # keras-hub's block cannot do this outside a keras-hub backbone: its
    # config forgets that the sub-layers were quantized, and loading fails.
    model = model_around(TransformerEncoder(16, num_heads=2), kind)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    assert_quantized_model_round_trips(model, x, tmp_path / "quantized.keras", mode)
