"""MultiHeadAttention: parity with keras.layers.MultiHeadAttention, and where
we deliberately differ."""

from __future__ import annotations

import inspect

import keras
import numpy as np
import pytest

from keras_selfattn import MultiHeadAttention
from tests.helpers import to_numpy


def _pair(rng, q, v, **kwargs):
    """Keras's layer and ours with the same weights, both built on (q, v)."""
    theirs = keras.layers.MultiHeadAttention(**kwargs)
    ours = MultiHeadAttention(**kwargs)
    # Built through Keras's explicit path: its fused JAX path rejects
    # value_dim != key_dim.
    theirs(q, v, return_attention_scores=True)
    ours(q, v)
    ours.set_weights(theirs.get_weights())
    return theirs, ours


def _assert_close(ours, theirs, where=None):
    ours, theirs = to_numpy(ours), to_numpy(theirs)
    if where is not None:
        ours, theirs = ours[where], theirs[where]
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)


_CONFIGS = {
    "defaults": {"num_heads": 2, "key_dim": 4},
    "value_dim": {"num_heads": 3, "key_dim": 4, "value_dim": 6},
    "no_bias": {"num_heads": 2, "key_dim": 4, "use_bias": False},
    "output_shape": {"num_heads": 2, "key_dim": 4, "output_shape": 7},
    "gate": {"num_heads": 2, "key_dim": 4, "use_gate": True},
    "sliding_window": {"num_heads": 2, "key_dim": 4, "sliding_window": 2},
}
_CALLS = {
    "no_mask": {},
    "attention_mask": {"attention_mask": "random"},
    "causal": {"use_causal_mask": True},
    "causal_and_mask": {"use_causal_mask": True, "attention_mask": "random"},
}


# Every config with the richest call, and every call with the default config,
# as self- and cross-attention: each option is checked, without the product.
_PARITY = [
    (config, "causal_and_mask", cross) for config in _CONFIGS for cross in (False, True)
] + [
    ("defaults", call, cross)
    for call in _CALLS
    if call != "causal_and_mask"
    for cross in (False, True)
]


@pytest.mark.parametrize(
    "config, call, cross",
    [(_CONFIGS[c], _CALLS[k], x) for c, k, x in _PARITY],
    ids=[f"{c}-{k}-{'cross' if x else 'self'}" for c, k, x in _PARITY],
)
def test_parity_with_keras(rng, config, call, cross):
    q = rng.normal(size=(2, 5, 8)).astype("float32")
    v = rng.normal(size=(2, 7, 8)).astype("float32") if cross else q
    theirs, ours = _pair(rng, q, v, **config)
    call = dict(call)
    if call.get("attention_mask") == "random":
        mask = rng.random((2, q.shape[1], v.shape[1])) > 0.3
        # Every query keeps a visible key (itself, and key 0), also under a
        # causal window: fully-masked rows are where we differ from Keras.
        diagonal = np.arange(min(mask.shape[1:]))
        mask[:, diagonal, diagonal] = True
        mask[..., 0] = True
        call["attention_mask"] = mask
    a, a_scores = theirs(q, v, return_attention_scores=True, **call)
    b, b_scores = ours(q, v, return_attention_scores=True, **call)
    _assert_close(b, a)
    _assert_close(b_scores, a_scores)
    # Our path without scores (the backend's fused kernel where it has one).
    _assert_close(ours(q, v, **call), a)


def test_parity_with_separate_key(rng):
    q = rng.normal(size=(2, 5, 8)).astype("float32")
    v = rng.normal(size=(2, 6, 8)).astype("float32")
    k = rng.normal(size=(2, 6, 3)).astype("float32")
    theirs = keras.layers.MultiHeadAttention(2, 4)
    ours = MultiHeadAttention(2, 4)
    theirs(q, v, k)
    ours(q, v, k)
    ours.set_weights(theirs.get_weights())
    _assert_close(ours(q, v, k), theirs(q, v, k))


def test_parity_with_keras_masks_at_real_positions(rng):
    # Keras masks from Embedding(mask_zero=True). Keras gives padded queries a
    # softmax over large negative numbers; we give zeros. Real positions agree.
    tokens = rng.integers(1, 30, size=(3, 6))
    tokens[0, 3:] = 0
    tokens[2, 1:] = 0
    outputs = {}
    for name, cls in (("theirs", keras.layers.MultiHeadAttention), ("ours", None)):
        keras.utils.set_random_seed(5)
        inputs = keras.Input((None,), dtype="int32")
        x = keras.layers.Embedding(30, 8, mask_zero=True)(inputs)
        layer = (cls or MultiHeadAttention)(num_heads=2, key_dim=4)
        outputs[name] = keras.Model(inputs, layer(x, x))
    outputs["ours"].set_weights(outputs["theirs"].get_weights())
    theirs = to_numpy(outputs["theirs"](tokens))
    ours = to_numpy(outputs["ours"](tokens))
    real = tokens != 0
    _assert_close(ours, theirs, where=real)
    np.testing.assert_array_equal(ours[~real], 0.0)


def test_fully_masked_query_rows_are_zero_where_keras_averages(rng):
    q = rng.normal(size=(1, 4, 8)).astype("float32")
    theirs, ours = _pair(rng, q, q, num_heads=2, key_dim=4, use_bias=False)
    mask = np.ones((1, 4, 4), dtype=bool)
    mask[0, 1] = False
    out, scores = ours(q, q, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_array_equal(to_numpy(scores)[0, :, 1], 0.0)
    np.testing.assert_array_equal(to_numpy(out)[0, 1], 0.0)
    # Keras's path without scores averages the values for that row instead.
    keras_out = theirs(q, q, attention_mask=mask)
    assert np.abs(to_numpy(keras_out)[0, 1]).max() > 1e-3
    _assert_close(out, keras_out, where=(0, [0, 2, 3]))


def test_same_weights_in_the_same_order(rng):
    q = rng.normal(size=(1, 3, 8)).astype("float32")
    config = {"num_heads": 2, "key_dim": 4, "value_dim": 3, "use_gate": True}
    theirs, ours = _pair(rng, q, q, **config)
    assert [w.path.split("/", 1)[1] for w in ours.weights] == [
        w.path.split("/", 1)[1] for w in theirs.weights
    ]
    assert [tuple(w.shape) for w in ours.weights] == [
        tuple(w.shape) for w in theirs.weights
    ]


@pytest.mark.backend_independent
def test_same_constructor_and_call_signature():
    def params(fn, drop=()):
        return [
            (p.name, p.default)
            for p in inspect.signature(fn).parameters.values()
            if p.name not in drop
        ]

    keras_init = params(keras.layers.MultiHeadAttention.__init__, ("kwargs",))
    ours_init = params(MultiHeadAttention.__init__, ("kwargs",))
    assert ours_init[: len(keras_init)] == keras_init
    # Our extra keyword arguments come after Keras's, all defaulting to None.
    extras = dict(ours_init[len(keras_init) :])
    assert "scale" in extras and set(extras) <= {"scale", "chunk_size"}
    assert set(extras.values()) == {None}
    assert params(MultiHeadAttention.call) == params(
        keras.layers.MultiHeadAttention.call
    )


def test_symbolic_cross_attention_scores_shape():
    query = keras.Input((8, 16))
    value = keras.Input((4, 16))
    out, scores = MultiHeadAttention(2, 2)(query, value, return_attention_scores=True)
    assert tuple(out.shape) == (None, 8, 16)
    assert tuple(scores.shape) == (None, 2, 8, 4)


def test_scale_argument(rng):
    q = rng.normal(size=(1, 4, 8)).astype("float32")
    default = MultiHeadAttention(2, 4)
    scaled = MultiHeadAttention(2, 4, scale=0.5)  # sqrt(4) = 2: 1/2 is default
    default(q, q)
    scaled(q, q)
    scaled.set_weights(default.get_weights())
    np.testing.assert_allclose(
        to_numpy(scaled(q, q)), to_numpy(default(q, q)), atol=1e-6
    )
    other = MultiHeadAttention(2, 4, scale=2.0)
    other(q, q)
    other.set_weights(default.get_weights())
    assert not np.allclose(to_numpy(other(q, q)), to_numpy(default(q, q)))


@pytest.mark.backend_independent
def test_attention_axes_other_than_sequence_not_implemented():
    with pytest.raises(NotImplementedError, match="attention_axes"):
        MultiHeadAttention(2, 4, attention_axes=(1, 2))
    assert MultiHeadAttention(2, 4, attention_axes=1).attention_axes == (1,)


def test_flash_attention_forbids_dropout_and_scores(rng):
    with pytest.raises(ValueError, match=r"[Dd]ropout"):
        MultiHeadAttention(2, 4, dropout=0.1, flash_attention=True)
    q = rng.normal(size=(1, 3, 8)).astype("float32")
    with pytest.raises(ValueError, match="scores"):
        MultiHeadAttention(2, 4, flash_attention=True)(
            q, q, return_attention_scores=True
        )


_BAD = {
    "heads_zero": ({"num_heads": 0, "key_dim": 4}, "`num_heads`"),
    "heads_float": ({"num_heads": 2.0, "key_dim": 4}, "`num_heads`"),
    "key_dim_zero": ({"num_heads": 2, "key_dim": 0}, "`key_dim`"),
    "value_dim_negative": (
        {"num_heads": 2, "key_dim": 4, "value_dim": -1},
        "value_dim",
    ),
    "dropout_high": ({"num_heads": 2, "key_dim": 4, "dropout": 1.5}, "`dropout`"),
    "window_zero": ({"num_heads": 2, "key_dim": 4, "sliding_window": 0}, "window"),
    "scale_zero": ({"num_heads": 2, "key_dim": 4, "scale": 0}, "`scale`"),
    "output_shape_bad": ({"num_heads": 2, "key_dim": 4, "output_shape": "x"}, "output"),
}


@pytest.mark.backend_independent
@pytest.mark.parametrize("kwargs, name", _BAD.values(), ids=_BAD.keys())
def test_bad_arguments_raise_value_error(kwargs, name):
    with pytest.raises(ValueError, match=name):
        MultiHeadAttention(**kwargs)


def test_mismatched_key_and_value_lengths_raise(rng):
    q = rng.normal(size=(1, 3, 8)).astype("float32")
    with pytest.raises(ValueError, match="`key`"):
        MultiHeadAttention(2, 4)(q, q, rng.normal(size=(1, 5, 8)).astype("float32"))
