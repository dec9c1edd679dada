"""MultiHeadAttention: parity with keras.layers.MultiHeadAttention, and where
we deliberately differ."""

from __future__ import annotations

import inspect
import re

import keras
import numpy as np
import pytest

from keras_selfattn import MultiHeadAttention
from keras_selfattn.layers.multi_head_attention import _KERAS_ACCEPTS, _KERAS_SINCE
from tests.helpers import (
    assert_close,
    assert_quantized_model_round_trips,
    for_this_keras,
    needs_keras,
    paired_with_keras,
    release,
    to_numpy,
)


def _pair(rng, q, v, **kwargs):
    """Keras's layer and ours with the same weights, both built on (q, v)."""
    return paired_with_keras(
        keras.layers.MultiHeadAttention(**kwargs), MultiHeadAttention(**kwargs), q, v
    )


_CONFIGS = {
    "defaults": {"num_heads": 2, "key_dim": 4},
    "value_dim": {"num_heads": 3, "key_dim": 4, "value_dim": 6},
    "no_bias": {"num_heads": 2, "key_dim": 4, "use_bias": False},
    "output_shape": {"num_heads": 2, "key_dim": 4, "output_shape": 7},
    "gate": {"num_heads": 2, "key_dim": 4, "use_gate": True},
    "sliding_window": {"num_heads": 2, "key_dim": 4, "sliding_window": 2},
}
# Those the installed Keras's layer takes (the floor lane's lacks some).
_CONFIGS = {name: c for name, c in _CONFIGS.items() if for_this_keras(c) == c}
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
    assert_close(b, a)
    assert_close(b_scores, a_scores)
    # Our path without scores (the backend's fused kernel where it has one).
    assert_close(ours(q, v, **call), a)


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_parity_with_keras_dropout_in_training(rng, cross):
    # The same seed gives the same dropout mask on the attention weights:
    # ours draws it from the seed generator of Keras's dropout layer.
    q = rng.normal(size=(2, 5, 8)).astype("float32")
    v = rng.normal(size=(2, 7, 8)).astype("float32") if cross else q
    theirs, ours = _pair(rng, q, v, num_heads=2, key_dim=4, dropout=0.5, seed=3)
    a, a_scores = theirs(q, v, training=True, return_attention_scores=True)
    b, b_scores = ours(q, v, training=True, return_attention_scores=True)
    assert_close(b, a)
    assert_close(b_scores, a_scores)
    # Dropout really ran: a second draw differs, and inference has none.
    assert not np.allclose(to_numpy(ours(q, v, training=True)), to_numpy(b))
    assert not np.allclose(to_numpy(ours(q, v)), to_numpy(b))


def test_parity_with_separate_key(rng):
    q = rng.normal(size=(2, 5, 8)).astype("float32")
    v = rng.normal(size=(2, 6, 8)).astype("float32")
    k = rng.normal(size=(2, 6, 3)).astype("float32")
    theirs = keras.layers.MultiHeadAttention(2, 4)
    ours = MultiHeadAttention(2, 4)
    theirs(q, v, k)
    ours(q, v, k)
    ours.set_weights(theirs.get_weights())
    assert_close(ours(q, v, k), theirs(q, v, k))


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
    assert_close(ours, theirs, where=real)
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
    assert_close(out, keras_out, where=(0, [0, 2, 3]))


def test_same_weights_in_the_same_order(rng):
    q = rng.normal(size=(1, 3, 8)).astype("float32")
    config = for_this_keras(
        {"num_heads": 2, "key_dim": 4, "value_dim": 3, "use_gate": True}
    )
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
    # An older Keras (the floor lane's) lacks some of Keras 3.15's arguments.
    newer = [
        p for p in ours_init if p[0] in _KERAS_SINCE and p[0] not in _KERAS_ACCEPTS
    ]
    ours_init = [p for p in ours_init if p not in newer]
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


# N-D inputs: (query shape, value shape, attention_axes).
_HIGH_DIM = {
    "image_default_axes": ((2, 3, 4, 8), (2, 3, 4, 8), None),
    "image_rows_only": ((2, 3, 4, 8), (2, 3, 5, 8), 2),
    "image_negative_axis": pytest.param(
        (2, 3, 4, 8),
        (2, 3, 5, 8),
        -2,
        marks=needs_keras("3.12", "Keras's own layer fails on a negative axis"),
    ),
    "5d_two_axes": ((2, 2, 3, 4, 8), (2, 2, 3, 2, 8), (2, 3)),
    "5d_outer_and_inner_axes": ((2, 3, 2, 4, 8), (2, 2, 2, 4, 8), (1, 3)),
}


@pytest.mark.parametrize(
    "query_shape, value_shape, axes", _HIGH_DIM.values(), ids=_HIGH_DIM.keys()
)
def test_high_dim_parity_with_keras(rng, query_shape, value_shape, axes):
    q = rng.normal(size=query_shape).astype("float32")
    v = rng.normal(size=value_shape).astype("float32")
    theirs, ours = _pair(rng, q, v, num_heads=2, key_dim=4, attention_axes=axes)
    a, a_scores = theirs(q, v, return_attention_scores=True)
    b, b_scores = ours(q, v, return_attention_scores=True)
    assert tuple(b_scores.shape) == tuple(a_scores.shape)
    assert_close(b, a)
    assert_close(b_scores, a_scores)
    assert_close(ours(q, v), a)  # the path without scores
    # An attention mask in Keras's layout: the scores without the heads axis.
    n = len(ours._normalized_attention_axes(len(query_shape) + 1))
    heads_axis = len(a_scores.shape) - 2 * n - 1
    mask = rng.random(np.delete(a_scores.shape, heads_axis)) > 0.3
    mask[(..., *([0] * n))] = True  # every query keeps its first key
    assert_close(ours(q, v, attention_mask=mask), theirs(q, v, attention_mask=mask))
    # With the heads axis (Keras takes it; ours crashed in a broadcast), per
    # head and broadcast over all but the heads and the last query and key
    # axes (a rank-6 pattern TensorFlow's BroadcastTo refuses in one step).
    per_head = rng.random(a_scores.shape) > 0.3
    per_head[(..., *([0] * n))] = True
    sparse = [1] * len(a_scores.shape)  # e.g. (1, 2, 1, 4, 1, 4)
    for axis in (heads_axis, heads_axis + n, -1):  # heads, last query, last key
        sparse[axis] = a_scores.shape[axis]
    broadcast = rng.random(sparse) > 0.3
    broadcast[(..., *([0] * n))] = True
    # Keras's layer gets it broadcast already: Keras 3.7's TensorFlow add
    # refuses the same rank-6 pattern.
    full = np.broadcast_to(broadcast, a_scores.shape)
    for heads_mask, keras_mask in ((per_head, per_head), (broadcast, full)):
        assert_close(
            ours(q, v, attention_mask=heads_mask),
            theirs(q, v, attention_mask=keras_mask),
        )


def test_image_attention_is_causal_over_flattened_positions(rng, chunked_calls):
    # (1, 8, 8) image positions: attention over all 64, in blocks of 16 keys,
    # causal in row-major order. The reference is Keras's own layer on the
    # same 64 positions as one sequence, with the same weights.
    x = rng.normal(size=(1, 8, 8, 6)).astype("float32")
    plain = MultiHeadAttention(2, 4)
    chunked = MultiHeadAttention(2, 4, chunk_size=16)
    flat = keras.layers.MultiHeadAttention(2, 4)
    sequence = x.reshape(1, 64, 6)
    plain(x, x)
    chunked(x, x)
    flat(sequence, sequence)
    chunked.set_weights(plain.get_weights())
    flat.set_weights(plain.get_weights())
    chunked_calls.clear()  # the calls that built the layers
    want = to_numpy(flat(sequence, sequence, use_causal_mask=True)).reshape(x.shape)
    got_plain = to_numpy(plain(x, x, use_causal_mask=True))
    assert chunked_calls == []
    got = to_numpy(chunked(x, x, use_causal_mask=True))
    assert chunked_calls == [16]
    np.testing.assert_allclose(got_plain, want, atol=1e-5)
    np.testing.assert_allclose(got, want, atol=1e-5)


class _Cached:
    """What keras-hub's CachedMultiHeadAttention adds to Keras's layer: a
    key/value cache in `call`, attention through `_compute_attention`."""

    def call(self, query, value, attention_mask=None, cache=None, index=None):
        query = self._query_dense(query)
        key, value = self._key_dense(value), self._value_dense(value)
        if cache is not None:
            start = [0, index, 0, 0]
            key = keras.ops.slice_update(cache[:, 0], start, key)
            value = keras.ops.slice_update(cache[:, 1], start, value)
            cache = keras.ops.stack((key, value), axis=1)
        output, _ = self._compute_attention(
            query=query, key=key, value=value, attention_mask=attention_mask
        )
        return self._output_dense(output), cache

    def _compute_attention(self, query, key, value, attention_mask=None, **kwargs):
        self.hook_calls = getattr(self, "hook_calls", 0) + 1
        return super()._compute_attention(query, key, value, attention_mask, **kwargs)


def test_a_cached_decoding_subclass_gives_keras_results(rng):
    classes = {
        "theirs": type("Theirs", (_Cached, keras.layers.MultiHeadAttention), {}),
        "ours": type("Ours", (_Cached, MultiHeadAttention), {}),
    }
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layers = {name: cls(num_heads=2, key_dim=4) for name, cls in classes.items()}
    for layer in layers.values():
        layer.build(x.shape, x.shape)
    layers["ours"].set_weights(layers["theirs"].get_weights())
    outputs = {}
    for name, layer in layers.items():
        cache = keras.ops.zeros((2, 2, 5, 2, 4))
        steps = []
        for i in range(5):  # one token at a time, each seeing keys 0..i
            mask = (np.arange(5) <= i)[None, None, :].repeat(2, axis=0)
            token = x[:, i : i + 1]
            out, cache = layer(token, token, mask, cache=cache, index=i)
            steps.append(to_numpy(out))
        outputs[name] = np.concatenate(steps, axis=1)
        assert layer.hook_calls == 5
    np.testing.assert_allclose(outputs["ours"], outputs["theirs"], atol=1e-5)
    # Decoding step by step equals causal attention over the whole sequence.
    whole = layers["ours"](x, x, np.tril(np.ones((5, 5), bool))[None])
    np.testing.assert_allclose(outputs["ours"], to_numpy(whole[0]), atol=1e-5)


@pytest.mark.parametrize("mode", ["int8", "float8"])
def test_quantized_model_saves_and_loads(rng, tmp_path, mode):
    # Keras 3.15's own layer cannot do this: its config forgets that the
    # projections were quantized, and loading fails.
    inputs = keras.Input((5, 8))
    model = keras.Model(inputs, MultiHeadAttention(2, 4)(inputs, inputs))
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    assert_quantized_model_round_trips(model, x, tmp_path / "quantized.keras", mode)


def test_seed_generator_only_with_dropout():
    q = np.zeros((1, 3, 8), "float32")
    for dropout, expected in ((0.0, 0), (0.2, 1)):
        layer = MultiHeadAttention(2, 4, dropout=dropout)
        layer(q, q)
        generators = [
            v for v in layer.non_trainable_variables if "seed_generator" in v.path
        ]
        assert len(generators) == expected, dropout


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
    # Accepted, then refused by the kernel at every call (int32 positions).
    "window_past_int32": (
        {"num_heads": 2, "key_dim": 4, "sliding_window": 2**31},
        r"`sliding_window`, expected an integer in the range \[1, 2147483647\]",
    ),
    "scale_zero": ({"num_heads": 2, "key_dim": 4, "scale": 0}, "`scale`"),
    "output_shape_bad": ({"num_heads": 2, "key_dim": 4, "output_shape": "x"}, "output"),
    "use_bias_string": ({"num_heads": 2, "key_dim": 4, "use_bias": "no"}, "`use_bias`"),
    "flash_string": (
        {"num_heads": 2, "key_dim": 4, "flash_attention": "no"},
        "`flash_attention`",
    ),
    "seed_negative": ({"num_heads": 2, "key_dim": 4, "seed": -1}, "`seed`"),
}


@pytest.mark.backend_independent
@pytest.mark.parametrize("kwargs, name", _BAD.values(), ids=_BAD.keys())
def test_bad_arguments_raise_value_error(kwargs, name):
    with pytest.raises(ValueError, match=name):
        MultiHeadAttention(**kwargs)


# attention_axes that name no axis between the batch and the features of the
# input: the heads axis (-1, or rank - 1: Keras counts a negative axis from
# the end of the projected (batch, *dims, heads, dim)), the batch, an axis
# past the end, or one axis twice. They crashed in the backend's transpose.
_AXES_OUT_OF_RANGE = {
    "3d-heads-negative": ((2, 6, 8), -1, "each once: 1, or -2"),
    "3d-features": ((2, 6, 8), 2, "each once: 1, or -2"),
    "3d-batch": ((2, 6, 8), 0, "each once: 1, or -2"),
    "3d-past-the-end": ((2, 6, 8), 5, "each once: 1, or -2"),
    "3d-before-the-batch": ((2, 6, 8), -3, "each once: 1, or -2"),
    "4d-heads": ((2, 3, 4, 8), 3, "each once: from 1 to 2, or from -3 to -2"),
    "4d-twice": ((2, 3, 4, 8), (1, -3), "each once: from 1 to 2, or from -3 to -2"),
}


@pytest.mark.parametrize(
    "shape, axes, expected",
    _AXES_OUT_OF_RANGE.values(),
    ids=_AXES_OUT_OF_RANGE.keys(),
)
def test_attention_axes_outside_the_input_are_named(shape, axes, expected):
    x = np.zeros(shape, "float32")
    layer = MultiHeadAttention(2, 4, attention_axes=axes)
    held = (axes,) if isinstance(axes, int) else axes  # as Keras keeps it
    message = (
        rf"argument `attention_axes`, expected .*{re.escape(expected)}.*"
        rf"Received: attention_axes={re.escape(repr(held))}"
    )
    with pytest.raises(ValueError, match=message):
        layer(x, x)
    with pytest.raises(ValueError, match=message):  # symbolic too
        MultiHeadAttention(2, 4, attention_axes=axes)(
            keras.Input(shape[1:]), keras.Input(shape[1:])
        )


def test_an_axis_attention_does_not_run_over_must_match_the_querys():
    # Attention over axis 1 of 4-D inputs: axis 2 is batch-like. A value of
    # another size there was refused as the kernel's `key` of the flattened
    # batch, a shape the caller never made (Keras's layer fails in einsum).
    query, value = np.zeros((2, 3, 4, 6), "float32"), np.zeros((2, 5, 2, 6), "float32")
    message = (
        r"argument `value`, expected the size of `query` \(4\) on axis 2, which "
        r"attention does not run over \(`attention_axes=\(1,\)`\)\. Received: "
        r"value='<tensor of shape \({}, 5, 2, 6\)>'"
    )
    with pytest.raises(ValueError, match=message.format(2)):
        MultiHeadAttention(2, 3, attention_axes=(1,))(query, value)
    with pytest.raises(ValueError, match=message.format(None)):  # symbolic too
        MultiHeadAttention(2, 3, attention_axes=(1,))(
            keras.Input(query.shape[1:]), keras.Input(value.shape[1:])
        )


@pytest.mark.backend_independent
@pytest.mark.parametrize("name", _KERAS_SINCE)
def test_an_argument_newer_than_this_keras_is_refused_naming_the_version(name):
    since, default = _KERAS_SINCE[name]
    value = {"seed": 3, "flash_attention": False, "use_gate": True}.get(name, 2)
    # The table of versions is right for the installed Keras.
    assert (name in _KERAS_ACCEPTS) == (release(keras.__version__) >= release(since))
    MultiHeadAttention(2, 4, **{name: default})  # the default: always fine
    if name in _KERAS_ACCEPTS:
        layer = MultiHeadAttention(2, 4, **{name: value})
        assert layer.get_config()[name] == value
    else:  # the floor lane
        message = f"`{name}` .* needs Keras {since} or newer.*{name}={value!r}"
        with pytest.raises(ValueError, match=message):
            MultiHeadAttention(2, 4, **{name: value})


def test_mismatched_key_and_value_lengths_raise(rng):
    q = rng.normal(size=(1, 3, 8)).astype("float32")
    with pytest.raises(ValueError, match="`key`"):
        MultiHeadAttention(2, 4)(q, q, rng.normal(size=(1, 5, 8)).astype("float32"))


def test_query_mask_with_a_multi_axis_output_shape(rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.ones((2, 5), bool)
    mask[1, 3:] = False
    out = MultiHeadAttention(2, 4, output_shape=(2, 3))(
        x, x, query_mask=mask, value_mask=mask
    )
    assert tuple(out.shape) == (2, 5, 2, 3)
    np.testing.assert_array_equal(to_numpy(out)[1, 3:], 0.0)


def test_high_dim_padded_queries_have_all_zero_weights(rng):
    x = rng.normal(size=(2, 3, 4, 8)).astype("float32")
    mask = np.ones((2, 3, 4), bool)
    mask[0, 2, :] = False
    out, scores = MultiHeadAttention(2, 4)(
        x, x, query_mask=mask, value_mask=mask, return_attention_scores=True
    )
    scores = to_numpy(scores)  # (batch, heads, 3, 4, 3, 4)
    np.testing.assert_array_equal(scores[0, :, 2], 0.0)
    np.testing.assert_array_equal(to_numpy(out)[0, 2], 0.0)
    np.testing.assert_allclose(scores[0, :, 1].sum(axis=(-2, -1)), 1.0, atol=1e-5)


@needs_keras("3.15", "sliding_window")
def test_a_numpy_sliding_window_is_an_integer():
    # Keras's constructors refused it in their own wording.
    from keras_selfattn import GroupQueryAttention

    for layer in (
        MultiHeadAttention(2, 4, sliding_window=np.int64(3)),
        GroupQueryAttention(4, 4, 2, sliding_window=np.int64(2)),
    ):
        assert type(layer.get_config()["sliding_window"]) is int


_BAD_ATTENTION_MASKS = {
    # The kernel's rule, under the layer's name for the argument.
    "key_length": ((2, 5, 8), None, (2, 5, 4), r"= \(2, 2, 5, 5\), or of shape"),
    "one_axis": ((2, 5, 8), None, (5,), r"= \(2, 2, 5, 5\), or of shape"),
    # Several attention axes: Keras's layout (it crashed in a broadcast).
    "axes_layout": (
        (2, 3, 4, 8), (2,), (2, 3, 4, 3),
        r"\(batch, \*other_dims, heads, \*query_attention_dims, "
        r"\*key_attention_dims\) = \(2, 3, 2, 4, 4\)",
    ),
    "axes_rank": ((2, 3, 4, 8), (1, 2), (3, 4), r"= \(2, 2, 3, 4, 3, 4\)"),
}  # fmt: skip


@pytest.mark.parametrize(
    "shape, axes, mask_shape, expected",
    _BAD_ATTENTION_MASKS.values(),
    ids=_BAD_ATTENTION_MASKS.keys(),
)
def test_an_attention_mask_that_does_not_fit_is_named(
    shape, axes, mask_shape, expected
):
    x = np.zeros(shape, "float32")
    layer = MultiHeadAttention(2, 4, attention_axes=axes)
    received = re.escape(f"attention_mask='<tensor of shape {mask_shape}>'")
    with pytest.raises(
        ValueError,
        match=rf"argument `attention_mask`, expected .*{expected}.*\. Received: "
        + received,
    ):
        layer(x, x, attention_mask=np.ones(mask_shape, bool))
    # What fits: the full shape, and its broadcastable forms.
    axes = axes or (len(shape) - 2,)
    full = (*shape[:-1], *(shape[a] for a in axes))
    for fits in (full, (1, *full[1:]), full[-2 * len(axes) :]):
        layer(x, x, attention_mask=np.ones(fits, bool))
