"""SelfAttention: the tutorial layer, heads, projections, options, errors."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_selfattn import SelfAttention
from tests.helpers import to_numpy
from tests.reference import reference_attention


def test_tutorial_example_shape(rng):
    x = rng.normal(size=(50, 5, 3)).astype("float32")
    assert tuple(SelfAttention(4)(x).shape) == (50, 5, 4)


def test_one_head_is_the_tutorial_layer(rng):
    # softmax(x Wq (x Wk)ᵀ / sqrt(units)) x Wv, with no output projection.
    x = rng.normal(size=(2, 5, 3)).astype("float32")
    layer = SelfAttention(4, use_bias=False)
    out, scores = layer(x, return_attention_scores=True)
    assert [w.path.split("/")[-1] for w in layer.weights] == ["qkv_kernel"]
    w = to_numpy(layer.qkv_kernel)
    q, k, v = x @ w[:, :4], x @ w[:, 4:8], x @ w[:, 8:]
    ref_out, ref_scores = reference_attention(q, k, v)
    np.testing.assert_allclose(to_numpy(out), ref_out, atol=1e-5)
    np.testing.assert_allclose(to_numpy(scores), ref_scores, atol=1e-6)


def test_heads_split_units_and_scale_by_head_size(rng):
    # 4 heads of 16 // 4 = 4: each head scales by 1 / sqrt(4).
    x = rng.normal(size=(2, 5, 6)).astype("float32")
    layer = SelfAttention(16, num_heads=4)
    out, scores = layer(x, return_attention_scores=True)
    assert tuple(scores.shape) == (2, 4, 5, 5)
    qkv = x @ to_numpy(layer.qkv_kernel) + to_numpy(layer.qkv_bias)
    q, k, v = (part.reshape(2, 5, 4, 4) for part in np.split(qkv, 3, axis=-1))
    heads, ref_scores = reference_attention(q, k, v)
    ref = heads.reshape(2, 5, 16) @ to_numpy(layer.output_kernel) + to_numpy(
        layer.output_bias
    )
    np.testing.assert_allclose(to_numpy(scores), ref_scores, atol=1e-6)
    np.testing.assert_allclose(to_numpy(out), ref, atol=1e-5)


@pytest.mark.parametrize(
    "num_heads, flag, projected",
    [(1, None, False), (4, None, True), (1, True, True), (4, False, False)],
    ids=["1head_default", "4heads_default", "1head_forced", "4heads_disabled"],
)
def test_output_projection_default_and_override(rng, num_heads, flag, projected):
    layer = SelfAttention(8, num_heads=num_heads, use_output_projection=flag)
    layer(rng.normal(size=(1, 3, 5)).astype("float32"))
    names = {w.path.split("/")[-1] for w in layer.weights}
    assert ("output_kernel" in names) is projected
    assert len(layer.weights) == (4 if projected else 2)


def test_causal_constructor_equals_use_causal_mask(rng):
    x = rng.normal(size=(2, 6, 4)).astype("float32")
    causal = SelfAttention(8, num_heads=2, causal=True)
    plain = SelfAttention(8, num_heads=2)
    causal(x)
    plain(x)
    plain.set_weights(causal.get_weights())
    a, scores = causal(x, return_attention_scores=True)
    b = plain(x, use_causal_mask=True)
    np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=1e-6)
    assert np.all(np.triu(to_numpy(scores)[0, 0], k=1) == 0)
    assert not np.allclose(to_numpy(plain(x)), to_numpy(a))


def test_sliding_window_band(rng):
    x = rng.normal(size=(1, 7, 4)).astype("float32")
    _, scores = SelfAttention(4, sliding_window=2)(x, return_attention_scores=True)
    i, j = np.indices((7, 7))
    scores = to_numpy(scores)[0, 0]
    assert np.all(scores[np.abs(i - j) >= 2] == 0)
    assert np.all(scores[np.abs(i - j) < 2] > 0)


def test_custom_scale(rng):
    x = rng.normal(size=(1, 4, 3)).astype("float32")
    layer = SelfAttention(4, use_bias=False, scale=0.05)
    _, scores = layer(x, return_attention_scores=True)
    w = to_numpy(layer.qkv_kernel)
    _, ref = reference_attention(x @ w[:, :4], x @ w[:, 4:8], x @ w[:, 8:], scale=0.05)
    np.testing.assert_allclose(to_numpy(scores), ref, atol=1e-6)


def test_dropout_acts_in_training_only(rng):
    x = rng.normal(size=(2, 8, 4)).astype("float32")
    layer = SelfAttention(8, dropout=0.5, seed=3)
    inference = to_numpy(layer(x))
    np.testing.assert_array_equal(inference, to_numpy(layer(x, training=False)))
    assert not np.allclose(to_numpy(layer(x, training=True)), inference)


def test_regularizers_add_losses(rng):
    layer = SelfAttention(
        4,
        num_heads=2,
        kernel_regularizer="l2",
        bias_regularizer="l2",
        activity_regularizer="l2",
        bias_initializer="ones",
    )
    x = rng.normal(size=(2, 3, 2)).astype("float32")
    out = to_numpy(layer(x))
    # qkv kernel + bias, output kernel + bias (Keras's l2: 0.01 * sum(w**2)),
    # then the activity's, as Keras's own layers compute it for that output
    # (newer Keras averages it over the batch; the floor's, 3.7, sums it).
    weights = [to_numpy(w) for w in layer.weights]
    want = [0.01 * np.sum(w.astype("float64") ** 2) for w in weights]
    keras_activity = keras.layers.Activation("linear", activity_regularizer="l2")
    keras_activity(out)
    want.append(float(to_numpy(keras_activity.losses[0])))
    got = sorted(float(to_numpy(loss)) for loss in layer.losses)
    np.testing.assert_allclose(got, sorted(want), rtol=1e-5)


_BAD = {
    "units_zero": ({"units": 0}, "`units`"),
    "units_float": ({"units": 4.0}, "`units`"),
    "heads_zero": ({"units": 4, "num_heads": 0}, "`num_heads`"),
    "heads_str": ({"units": 4, "num_heads": "2"}, "`num_heads`"),
    "units_not_divisible": ({"units": 10, "num_heads": 4}, "`units`"),
    "dropout_one": ({"units": 4, "dropout": 1.0}, "`dropout`"),
    "window_zero": ({"units": 4, "sliding_window": 0}, "`sliding_window`"),
    "window_bool": ({"units": 4, "sliding_window": True}, "`sliding_window`"),
    "window_past_int32": (
        {"units": 4, "sliding_window": 2**31},
        r"`sliding_window`, expected an integer in the range \[1, 2147483647\]",
    ),
    "scale_negative": ({"units": 4, "scale": -0.5}, "`scale`"),
    "chunk_with_dropout": ({"units": 4, "dropout": 0.1, "chunk_size": 4}, "chunk"),
    "use_bias_string": ({"units": 4, "use_bias": "no"}, "`use_bias`"),
    "projection_string": (
        {"units": 4, "use_output_projection": "no"},
        "`use_output_projection`",
    ),
    "causal_int": ({"units": 4, "causal": 1}, "`causal`"),
    "seed_float": ({"units": 4, "seed": 1.5}, "`seed`"),
    "seed_negative": ({"units": 4, "seed": -1}, "`seed`"),
    "seed_over_32_bits": ({"units": 4, "seed": 2**31}, "`seed`"),
}


@pytest.mark.backend_independent
@pytest.mark.parametrize("kwargs, name", _BAD.values(), ids=_BAD.keys())
def test_bad_arguments_raise_value_error(kwargs, name):
    with pytest.raises(ValueError, match=name) as info:
        SelfAttention(**kwargs)
    assert "Received" in str(info.value)


@pytest.mark.backend_independent
def test_error_message_reads_like_keras():
    with pytest.raises(ValueError) as info:
        SelfAttention(4, num_heads=0)
    assert str(info.value) == (
        "Received an invalid value for argument `num_heads`, expected a "
        "positive integer. Received: num_heads=0"
    )
