"""GroupQueryAttention: parity with keras.layers.GroupQueryAttention, and the
kernel's grouped key and value heads (never repeated on the plain and chunked
paths)."""

from __future__ import annotations

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras.src.backend import get_keras_mask

from keras_selfattn import GroupQueryAttention, _backend, scaled_dot_product_attention
from keras_selfattn.layers.grouped_query_attention import KERAS_NEEDED
from tests.helpers import (
    BACKEND,
    assert_close,
    assert_quantized_model_round_trips,
    needs_keras,
    output_and_grads,
    paired_with_keras,
    to_numpy,
    traced_shapes,
)
from tests.reference import reference_attention

pytestmark = needs_keras(KERAS_NEEDED, "our layer mirrors its constructor")


def _pair(q, v, **kwargs):
    """Keras's layer and ours with the same weights, both built on (q, v)."""
    return paired_with_keras(
        keras.layers.GroupQueryAttention(**kwargs), GroupQueryAttention(**kwargs), q, v
    )


_HEADS = {"head_dim": 4, "num_query_heads": 4, "num_key_value_heads": 2}
_CONFIGS = {
    "gqa": _HEADS,
    "mqa": {**_HEADS, "num_key_value_heads": 1},
    "mha": {**_HEADS, "num_key_value_heads": 4},
    "six_of_two": {"head_dim": 3, "num_query_heads": 6, "num_key_value_heads": 2},
    "no_bias": {**_HEADS, "use_bias": False},
    "gate": {**_HEADS, "use_gate": True},
    "sliding_window": {**_HEADS, "sliding_window": 2},
}
_CALLS = {
    "no_mask": {},
    "attention_mask": {"attention_mask": "random"},
    "causal": {"use_causal_mask": True},
    "causal_and_mask": {"use_causal_mask": True, "attention_mask": "random"},
}
# Every config with the richest call, and every call with the default config,
# as self- and cross-attention.
_PARITY = [
    (config, "causal_and_mask", cross) for config in _CONFIGS for cross in (False, True)
] + [
    ("gqa", call, cross)
    for call in _CALLS
    if call != "causal_and_mask"
    for cross in (False, True)
]


def _visible_mask(rng, q_len, k_len):
    """A random mask in which every query keeps a visible key (itself and key
    0), also under a causal window: fully-masked rows are where we differ."""
    mask = rng.random((2, q_len, k_len)) > 0.3
    diagonal = np.arange(min(q_len, k_len))
    mask[:, diagonal, diagonal] = True
    mask[..., 0] = True
    return mask


@pytest.mark.parametrize(
    "config, call, cross",
    [(_CONFIGS[c], _CALLS[k], x) for c, k, x in _PARITY],
    ids=[f"{c}-{k}-{'cross' if x else 'self'}" for c, k, x in _PARITY],
)
def test_parity_with_keras(rng, config, call, cross):
    q = rng.normal(size=(2, 5, 8)).astype("float32")
    v = rng.normal(size=(2, 7, 8)).astype("float32") if cross else q
    theirs, ours = _pair(q, v, **config)
    call = dict(call)
    if call.get("attention_mask") == "random":
        call["attention_mask"] = _visible_mask(rng, q.shape[1], v.shape[1])
    assert_close(ours(q, v, **call), theirs(q, v, **call))
    a, a_scores = theirs(q, v, return_attention_scores=True, **call)
    b, b_scores = ours(q, v, return_attention_scores=True, **call)
    assert_close(b, a)
    assert_close(b_scores, a_scores)


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_parity_with_keras_dropout_in_training(rng, cross):
    # The same seed gives the same dropout mask on the attention weights:
    # ours draws it from the seed generator of Keras's dropout layer.
    q = rng.normal(size=(2, 5, 8)).astype("float32")
    v = rng.normal(size=(2, 7, 8)).astype("float32") if cross else q
    theirs, ours = _pair(q, v, **_HEADS, dropout=0.5, seed=3)
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
    theirs = keras.layers.GroupQueryAttention(**_HEADS)
    ours = GroupQueryAttention(**_HEADS)
    theirs(q, v, k)
    ours(q, v, k)
    ours.set_weights(theirs.get_weights())
    assert_close(ours(q, v, k), theirs(q, v, k))


# Keras's own layer warns that its projections drop the Keras mask; ours
# does not (the masks are applied in `call`).
@pytest.mark.filterwarnings("ignore:Layer '(query|key|value)' .* mask:UserWarning")
def test_parity_with_keras_masks_at_real_positions(rng):
    # Keras masks from Embedding(mask_zero=True). Keras gives padded queries a
    # softmax over large negative numbers; we give zeros. Real positions agree.
    tokens = rng.integers(1, 30, size=(3, 6))
    tokens[0, 3:] = 0
    tokens[2, 1:] = 0
    embedding = keras.layers.Embedding(30, 8, mask_zero=True)
    x = embedding(tokens)
    theirs, ours = _pair(x, x, **_HEADS)
    for kwargs in ({}, {"use_causal_mask": True}):
        a, a_scores = theirs(x, x, return_attention_scores=True, **kwargs)
        b, b_scores = ours(x, x, return_attention_scores=True, **kwargs)
        real = tokens != 0
        assert_close(b, a, where=real)
        assert_close(b_scores, a_scores, where=real[:, None, :].repeat(4, 1))
        np.testing.assert_array_equal(to_numpy(b)[~real], 0.0)
        np.testing.assert_array_equal(
            to_numpy(b_scores).transpose(0, 2, 1, 3)[~real], 0.0
        )
        np.testing.assert_array_equal(to_numpy(get_keras_mask(b)), real)


def test_chunked_path_equals_plain_path(rng, chunked_calls):
    tokens = rng.integers(1, 30, size=(2, 11))
    tokens[0, 7:] = 0
    x = keras.layers.Embedding(30, 8, mask_zero=True)(tokens)
    plain = GroupQueryAttention(**_HEADS, sliding_window=4)
    chunked = GroupQueryAttention(**_HEADS, sliding_window=4, chunk_size=4)
    plain(x, x)
    chunked(x, x)
    chunked.set_weights(plain.get_weights())
    assert chunked_calls == [4]  # Only the layer with a chunk_size chunks.
    for kwargs in ({}, {"use_causal_mask": True}):
        assert_close(chunked(x, x, **kwargs), plain(x, x, **kwargs))
    assert chunked_calls == [4] * 3


# Shapes chosen so that every axis has its own size: batch 2, q_len 11,
# k_len 13, 6 query heads sharing 2 kv heads (groups of 3), dim 5, value
# dim 7.
_Q, _K, _H, _KV, _D, _DV = 11, 13, 6, 2, 5, 7


def _grouped_inputs(rng):
    q = rng.normal(size=(2, _Q, _H, _D)).astype("float32")
    k = rng.normal(size=(2, _K, _KV, _D)).astype("float32")
    v = rng.normal(size=(2, _K, _KV, _DV)).astype("float32")
    return q, k, v


@pytest.mark.parametrize("chunk_size", [None, 4], ids=["plain", "chunked"])
@pytest.mark.parametrize(
    "options",
    [{}, {"causal": True, "sliding_window": 3}, {"mask": "random"}],
    ids=["none", "causal_window", "mask"],
)
def test_kernel_grouped_heads_match_the_reference(rng, chunk_size, options):
    # Output and gradients: the kv heads' gradients sum over their groups.
    q, k, v = _grouped_inputs(rng)
    options = dict(options)
    if options.get("mask") == "random":
        options["mask"] = rng.random((2, _H, _Q, _K)) > 0.4
    upstream = rng.normal(size=(2, _Q, _H, _DV)).astype("float32")

    def ours(q, k, v):
        return scaled_dot_product_attention(
            q, k, v, chunk_size=chunk_size, flash_attention=False, **options
        )

    def repeated(q, k, v):
        groups = _H // _KV
        k, v = (keras.ops.repeat(t, groups, axis=2) for t in (k, v))
        return scaled_dot_product_attention(
            q, k, v, chunk_size=chunk_size, flash_attention=False, **options
        )

    out, grads = output_and_grads(ours, (q, k, v), upstream)
    ref, _ = reference_attention(q, k, v, **options)
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=0)
    _, ref_grads = output_and_grads(repeated, (q, k, v), upstream)
    for got, want in zip(grads, ref_grads, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_kernel_grouped_scores(rng):
    q, k, v = _grouped_inputs(rng)
    out, scores = scaled_dot_product_attention(q, k, v, return_scores=True)
    ref, ref_scores = reference_attention(q, k, v)
    assert tuple(scores.shape) == (2, _H, _Q, _K)
    np.testing.assert_allclose(to_numpy(out), ref, atol=1e-5, rtol=0)
    np.testing.assert_allclose(to_numpy(scores), ref_scores, atol=1e-5, rtol=0)


def test_fused_kernel_gets_grouped_heads_where_it_takes_them(rng, monkeypatch):
    # JAX's fused kernel takes the kv heads as they are; PyTorch's gets them
    # repeated (Keras's backend would repeat them itself); TensorFlow has none.
    seen = []
    original = keras.ops.dot_product_attention

    def spy(query, key, value, **kwargs):
        seen.append(int(key.shape[2]))
        return original(query, key, value, **kwargs)

    monkeypatch.setattr(keras.ops, "dot_product_attention", spy)
    q, k, v = _grouped_inputs(rng)
    v = v[..., :_D]  # The fused kernels need value_dim == dim.
    out = scaled_dot_product_attention(q, k, v, causal=True)
    ref, _ = reference_attention(q, k, v, causal=True)
    np.testing.assert_allclose(to_numpy(out), ref, atol=1e-5, rtol=0)
    expected = {"jax": [_KV], "torch": [_H], "tensorflow": []}[BACKEND]
    assert seen == expected
    assert _backend.fused_takes_grouped_heads() == (BACKEND == "jax")


def _repeated_kv_shapes(shapes):
    """The traced shapes that look like a repeated key or value: a key axis
    (k_len, or the chunked path's blocks of 4, padded to 16), all `_H` query
    heads and a head size (`_D` or `_DV`) in one tensor."""
    key_axes, sizes = {_K, 4, 16}, {_D, _DV}
    return [
        s
        for s in shapes
        if _H in s and key_axes & set(s) and sizes & set(s) and _Q not in s
    ]


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("chunk_size", [None, 4], ids=["plain", "chunked"])
def test_kernel_never_repeats_the_kv_heads(rng, chunk_size):
    q, k, v = _grouped_inputs(rng)

    def grouped(q, k, v):
        return scaled_dot_product_attention(q, k, v, chunk_size=chunk_size)

    assert not _repeated_kv_shapes(traced_shapes(grouped, q, k, v))

    # The detector sees a repeated copy where one is built.
    def repeated(q, k, v):
        k, v = (keras.ops.repeat(t, _H // _KV, axis=2) for t in (k, v))
        return scaled_dot_product_attention(q, k, v, chunk_size=chunk_size)

    assert _repeated_kv_shapes(traced_shapes(repeated, q, k, v))


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("chunk_size", [None, 4], ids=["plain", "chunked"])
def test_layer_never_repeats_the_kv_heads(rng, chunk_size):
    # Keras's own layer repeats them (`ops.repeat`): the detector sees that.
    heads = {"head_dim": _D, "num_query_heads": _H, "num_key_value_heads": _KV}
    q = rng.normal(size=(2, _Q, 8)).astype("float32")
    v = rng.normal(size=(2, _K, 8)).astype("float32")
    ours = GroupQueryAttention(**heads, chunk_size=chunk_size)
    theirs = keras.layers.GroupQueryAttention(**heads)
    for layer in (ours, theirs):
        layer(q, v)
    assert not _repeated_kv_shapes(traced_shapes(lambda q, v: ours(q, v), q, v))
    assert _repeated_kv_shapes(traced_shapes(lambda q, v: theirs(q, v), q, v))


def test_long_sequences_take_the_chunked_path(memory_budget, chunked_calls):
    import keras_selfattn.attention as attention

    # One byte per element of the (1, 4 heads, 20, 20) weights: too few.
    memory_budget(4 * 20 * 20)
    x = np.random.default_rng(0).normal(size=(1, 20, 8)).astype("float32")
    layer = GroupQueryAttention(**_HEADS, flash_attention=False)
    out = layer(x, x, use_causal_mask=True)
    assert chunked_calls == [attention.CHUNK_SIZES[-1]]
    _, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    assert len(chunked_calls) == 1  # Scores need the plain path.
    assert tuple(scores.shape) == (1, 4, 20, 20)
    assert tuple(out.shape) == (1, 20, 8)


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({**_HEADS, "num_key_value_heads": 3}, "`num_key_value_heads`"),
        ({**_HEADS, "num_query_heads": 0}, "`num_query_heads`"),
        ({**_HEADS, "head_dim": 0}, "`head_dim`"),
        ({**_HEADS, "dropout": 1.5}, "`dropout`"),
        ({**_HEADS, "sliding_window": 0}, "sliding_window"),
        ({**_HEADS, "scale": 0}, "`scale`"),
        ({**_HEADS, "chunk_size": 4, "dropout": 0.1}, "chunk_size"),
        ({**_HEADS, "use_bias": "no"}, "`use_bias`"),
        ({**_HEADS, "flash_attention": "no"}, "`flash_attention`"),
        ({**_HEADS, "seed": "1"}, "`seed`"),
    ],
    ids=[
        "groups",
        "heads",
        "head_dim",
        "dropout",
        "window",
        "scale",
        "chunk",
        "use_bias_string",
        "flash_string",
        "seed_string",
    ],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GroupQueryAttention(**kwargs)


def test_an_attention_mask_that_does_not_fit_is_named():
    x = np.zeros((2, 5, 8), "float32")
    layer = GroupQueryAttention(**_HEADS)
    with pytest.raises(
        ValueError,
        match=r"argument `attention_mask`, expected .* = \(2, 4, 5, 5\), or of shape "
        r"\(batch, q_len, k_len\)\. Received: attention_mask='<tensor of shape "
        r"\(2, 5, 3\)>'",
    ):
        layer(x, x, attention_mask=np.ones((2, 5, 3), bool))


@pytest.mark.backend_independent
def test_kernel_rejects_heads_that_do_not_group(rng):
    q, k, v = _grouped_inputs(rng)
    with pytest.raises(ValueError, match=r"`key`.*divides `query`'s \(6\)"):
        scaled_dot_product_attention(q, np.concatenate([k] * 2, 2)[:, :, :4], v)
    with pytest.raises(ValueError, match=r"`value`.*same number of heads as `key`"):
        scaled_dot_product_attention(q, k, np.concatenate([v] * 3, 2))


def test_config_round_trip_and_saving(tmp_path, rng):
    layer = GroupQueryAttention(**_HEADS, scale=0.3, chunk_size=4, sliding_window=3)
    restored = GroupQueryAttention.from_config(layer.get_config())
    assert (restored.scale, restored.chunk_size, restored.sliding_window) == (
        0.3,
        4,
        3,
    )
    q = keras.Input((6, 8))
    model = keras.Model(q, layer(q, q, use_causal_mask=True))
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    model.save(tmp_path / "gqa.keras")
    loaded = keras.saving.load_model(tmp_path / "gqa.keras")
    assert isinstance(loaded.layers[-1], GroupQueryAttention)
    assert_close(loaded(x), model(x))


@pytest.mark.backend_independent
def test_import_works_where_keras_has_no_grouped_query_attention(subprocess_env):
    # Keras before 3.15 has no GroupQueryAttention with this constructor:
    # `import keras_selfattn` still works; making the layer says what to do.
    code = (
        "import keras\n"
        "del keras.layers.GroupQueryAttention\n"
        "import keras_selfattn\n"
        "try:\n"
        "    keras_selfattn.GroupQueryAttention(4, 4, 2)\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    env = {**subprocess_env, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    assert "Keras 3.15 or newer" in result.stdout
    assert keras.__version__ in result.stdout


@pytest.mark.parametrize("mode", ["int8", "float8"])
def test_quantized_model_saves_and_loads(rng, tmp_path, mode):
    # Keras 3.15's own layer cannot do this: its config forgets that the
    # projections were quantized ("Layer 'key' expected 2 variables, but
    # received 3 variables during loading").
    inputs = keras.Input((5, 8))
    layer = GroupQueryAttention(4, 4, 2)
    model = keras.Model(inputs, layer(inputs, inputs))
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    assert_quantized_model_round_trips(model, x, tmp_path / "quantized.keras", mode)
