"""AttentionPooling: the kernel's weights, masks, heads, config, saving."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn import AttentionPooling
from tests.helpers import to_numpy


def _reference(layer, x, mask):
    """Plain NumPy attention pooling with the layer's weights."""
    kernel = to_numpy(layer.key_kernel)
    bias = to_numpy(layer.key_bias)
    query = to_numpy(layer.query)
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
    np.testing.assert_allclose(to_numpy(out), ref_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_numpy(weights), ref_weights, rtol=1e-5, atol=1e-6)
    assert to_numpy(weights).shape == (3, num_heads, 6)


def test_padded_positions_get_exactly_zero_weight_and_do_not_matter(rng):
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    layer = AttentionPooling(query_initializer="random_normal")
    out, weights = layer(x, mask=mask, return_attention_scores=True)
    weights = to_numpy(weights)
    np.testing.assert_array_equal(weights[0, :, 3:], 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    changed = x.copy()
    changed[0, 3:] = 1e4
    np.testing.assert_allclose(
        to_numpy(layer(changed, mask=mask))[0], to_numpy(out)[0], rtol=1e-6, atol=1e-6
    )


def test_untrained_layer_is_masked_mean(rng):
    x = rng.normal(size=(2, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    out = to_numpy(AttentionPooling()(x, mask=mask))
    np.testing.assert_allclose(out[0], x[0, :2].mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[1], x[1].mean(0), rtol=1e-5, atol=1e-6)


def test_fully_masked_sequence_pools_to_zeros(rng):
    x = rng.normal(size=(2, 4, 4)).astype("float32")
    mask = np.array([[0, 0, 0, 0], [1, 1, 0, 0]], dtype=bool)
    out, weights = AttentionPooling()(x, mask=mask, return_attention_scores=True)
    np.testing.assert_array_equal(to_numpy(out)[0], 0.0)
    np.testing.assert_array_equal(to_numpy(weights)[0], 0.0)
    assert np.all(np.isfinite(to_numpy(out)))


def test_dropout_only_in_training(rng):
    x = rng.normal(size=(2, 6, 4)).astype("float32")
    layer = AttentionPooling(dropout=0.5, seed=1)
    np.testing.assert_allclose(to_numpy(layer(x)), to_numpy(layer(x)), atol=0)
    assert not np.allclose(to_numpy(layer(x, training=True)), to_numpy(layer(x)))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_logits_in_the_thousands_stay_finite(policy, rng):
    keras.config.set_dtype_policy(policy)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer = AttentionPooling(query_initializer=keras.initializers.Constant(3000.0))
    out, weights = layer(x, return_attention_scores=True)
    out = to_numpy(ops.cast(out, "float32"))
    weights = to_numpy(ops.cast(weights, "float32"))
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(weights))
    # A float64 reference from the same variables. Logits in the thousands
    # overflow exp() in any float type unless the softmax subtracts the row
    # maximum; half precision only rounds the inputs, keys and output.
    kernel, bias, query = (to_numpy(ops.cast(w, "float64")) for w in layer.weights)
    keys = np.tanh(x @ kernel + bias)  # the default key_activation
    logits = np.einsum("btd,d->bt", keys, query[0]) / np.sqrt(keys.shape[-1])
    assert np.abs(logits).max() > 1000
    want_weights = np.exp(logits - logits.max(-1, keepdims=True))
    want_weights /= want_weights.sum(-1, keepdims=True)
    # Where the best two keys' logits are closer than the keys' rounding
    # (bfloat16: 8 bits, about 0.4% of the largest logit) either may win.
    top2 = np.sort(logits, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 0.01 * np.abs(logits).max()
    assert clear.any()
    np.testing.assert_allclose(weights[clear, 0], want_weights[clear], atol=0.02)
    want = np.einsum("bt,btd->bd", want_weights, x)
    np.testing.assert_allclose(out[clear], want[clear], atol=0.05)
    # Elsewhere it is still a weighted average of the values.
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=0.02)
    assert np.all(out <= x.max(axis=1) + 0.02) and np.all(out >= x.min(axis=1) - 0.02)


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"num_heads": 0}, "num_heads"),
        ({"num_heads": 1.5}, "num_heads"),
        ({"key_dim": 0}, "key_dim"),
        ({"dropout": 1.0}, "dropout"),
        ({"scale": 0.0}, "scale"),
        ({"entropy_penalty": -0.1}, "entropy_penalty"),
        ({"use_bias": "no"}, "use_bias"),
        ({"seed": 1.5}, "seed"),
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
    # Integer inputs were refused under the kernel's name for them, `value`.
    with pytest.raises(
        ValueError,
        match=r"argument `inputs`, expected a floating-point tensor\. Received: "
        r"inputs='<tensor of dtype int32>'",
    ):
        AttentionPooling(2)(np.ones((2, 4, 8), "int32"))


def test_entropy_penalty_is_a_training_loss(rng):
    # The query starts at zero: uniform weights over the n real positions,
    # whose entropy is log(n). Sequence 0 has 6 real positions, sequence 1
    # has 3; sequence 2 has none, and does not count in the average.
    x = rng.normal(size=(3, 6, 4)).astype("float32")
    mask = np.array([[True] * 6, [True] * 3 + [False] * 3, [False] * 6])
    layer = AttentionPooling(entropy_penalty=0.5)
    layer(x, mask=mask)
    assert layer.losses == []  # not in inference
    layer(x, mask=mask, training=True)
    (loss,) = layer.losses
    expected = 0.5 * (np.log(6) + np.log(3)) / 2
    np.testing.assert_allclose(to_numpy(loss), expected, rtol=1e-5)
