"""The kernel's chunked path: parity with the plain path, selection, memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import keras
import numpy as np
import pytest

import keras_selfattn.attention as attention_module
from keras_selfattn import (
    CachedMultiHeadAttention,
    MultiHeadAttention,
    SelfAttention,
    TransformerDecoder,
)
from keras_selfattn import scaled_dot_product_attention as sdpa
from tests.helpers import (
    BACKEND,
    assert_padding_ignored,
    output_and_grads,
    query_by_key,
    to_numpy,
    traced_shapes,
)
from tests.reference import reference_attention

ATOL = 1e-5


def _qkv(rng, batch=2, q_len=13, k_len=13, heads=3, dim=8, value_dim=8, rank=4):
    def make(length, size):
        shape = (batch, length, heads, size) if rank == 4 else (batch, length, size)
        return rng.normal(size=shape).astype("float32")

    return make(q_len, dim), make(k_len, dim), make(k_len, value_dim)


# Each case: shapes for _qkv, kernel options, a mask recipe and chunk sizes.
# Mask recipes are drawn with the case's shapes: "keys" (batch, 1, 1, k_len),
# "full" (batch, heads, q_len, k_len), "3d" (batch, q_len, k_len), "2d"
# (q_len, k_len), "queries" (batch, 1, q_len, 1), each with fully-masked rows;
# "pad" is a `padding_mask` (batch, k_len) with one sequence all padding, and
# "pad+full" that padding_mask with a "full" mask.
CASES = {
    "plain-13-chunk5": (dict(), dict(), None, (5,)),
    "chunk1-and-chunk-larger-than-seq": (dict(), dict(), None, (1, 64)),
    "cross-q7-k11-chunk4": (dict(q_len=7, k_len=11), dict(), None, (4,)),
    "value-dim-5-chunk3": (dict(value_dim=5), dict(), None, (3,)),
    "3d-inputs-chunk4": (dict(rank=3, heads=1), dict(), None, (4,)),
    "causal-chunk3": (dict(), dict(causal=True), None, (3, 13)),
    "causal-cross-q11-k7": (dict(q_len=11, k_len=7), dict(causal=True), None, (2,)),
    "window3-chunk4": (dict(), dict(sliding_window=3), None, (4,)),
    "window2-q13-k5-empty-rows": (
        dict(q_len=13, k_len=5),
        dict(sliding_window=2),
        None,
        (2,),
    ),
    "causal-window4-chunk5": (dict(), dict(causal=True, sliding_window=4), None, (5,)),
    "mask-keys-chunk4": (dict(), dict(), "keys", (4,)),
    "mask-full-per-head-chunk6": (dict(), dict(), "full", (6,)),
    "mask-3d-chunk4": (dict(q_len=9, k_len=10), dict(), "3d", (4,)),
    "mask-2d-chunk3": (dict(), dict(), "2d", (3,)),
    "mask-queries-only-chunk4": (dict(), dict(), "queries", (4,)),
    "mask-3d-inputs-chunk5": (dict(rank=3, heads=1), dict(), "3d", (5,)),
    "padding-chunk4": (dict(), dict(), "pad", (4,)),
    "padding-causal-cross-q7-k11": (
        dict(q_len=7, k_len=11),
        dict(causal=True),
        "pad",
        (3,),
    ),
    "padding-window-3d-inputs": (
        dict(rank=3, heads=1),
        dict(sliding_window=3),
        "pad",
        (5,),
    ),
    "padding-and-full-mask-chunk6": (dict(), dict(), "pad+full", (6,)),
    "mask-causal-window-scale": (
        dict(),
        dict(causal=True, sliding_window=5, scale=0.3),
        "full",
        (4,),
    ),
}


def _masks(rng, recipe, batch, q_len, k_len, heads):
    """The (mask, padding_mask) keyword arguments of a recipe."""
    if recipe is None:
        return {}
    if recipe.startswith("pad"):
        lengths = rng.integers(1, k_len + 1, size=batch)
        lengths[0] = 0  # Every row of batch 0 sees only padding.
        padding_mask = np.arange(k_len)[None, :] < lengths[:, None]
        masks = {"padding_mask": padding_mask}
        if recipe == "pad+full":
            masks["mask"] = _mask(rng, "full", batch, q_len, k_len, heads)
        return masks
    return {"mask": _mask(rng, recipe, batch, q_len, k_len, heads)}


def _mask(rng, recipe, batch, q_len, k_len, heads):
    shapes = {
        "keys": (batch, 1, 1, k_len),
        "full": (batch, heads, q_len, k_len),
        "3d": (batch, q_len, k_len),
        "2d": (q_len, k_len),
        "queries": (batch, 1, q_len, 1),
    }
    mask = rng.random(shapes[recipe]) > 0.3
    if recipe == "keys":
        mask[0] = False  # Every row of batch 0 is fully masked.
        mask[1, ..., 0] = True
    elif recipe == "queries":
        mask[:, :, :2] = False
    else:
        mask[..., 1, :] = False  # Query row 1 may attend to no key.
    return mask


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_chunked_equals_plain_outputs_and_gradients(rng, case):
    shapes, options, recipe, chunk_sizes = case
    q, k, v = _qkv(rng, **shapes)
    upstream = rng.normal(size=q.shape[:-1] + v.shape[-1:]).astype("float32")
    heads = shapes.get("heads", 3) if shapes.get("rank", 4) == 4 else 1
    masks = _masks(rng, recipe, q.shape[0], q.shape[1], k.shape[1], heads)

    def variant(chunk_size):
        def attend(q, k, v):
            if chunk_size is None:
                return sdpa(q, k, v, flash_attention=False, **masks, **options)
            return sdpa(q, k, v, chunk_size=chunk_size, **masks, **options)

        return attend

    # The plain path and every chunk size, each on its own copy of q, k, v,
    # in one function: one trace (and one JAX compilation) per case.
    variants = [variant(None)] + [variant(c) for c in chunk_sizes]

    def everything(*args):
        outs = [f(*args[3 * i : 3 * i + 3]) for i, f in enumerate(variants)]
        return keras.ops.stack(outs)

    upstream = np.stack([upstream] * len(variants))
    outs, grads = output_and_grads(everything, (q, k, v) * len(variants), upstream)
    want, want_grads = outs[0], grads[:3]
    assert np.all(np.isfinite(want))
    for i, chunk_size in enumerate(chunk_sizes, start=1):
        got, got_grads = outs[i], grads[3 * i : 3 * i + 3]
        np.testing.assert_allclose(
            got, want, atol=ATOL, rtol=0, err_msg=f"chunk_size={chunk_size}"
        )
        for name, g, w in zip("qkv", got_grads, want_grads, strict=True):
            assert np.all(np.isfinite(g)), name
            np.testing.assert_allclose(
                g, w, atol=ATOL, rtol=0, err_msg=f"d{name}, chunk_size={chunk_size}"
            )


def test_fully_masked_rows_are_exact_zeros_with_zero_gradients(rng):
    q, k, v = _qkv(rng)
    mask = np.ones((2, 1, 13, 13), bool)
    mask[:, :, 4] = False
    upstream = np.ones(q.shape[:-1] + v.shape[-1:], "float32")

    def chunked(q, k, v):
        return sdpa(q, k, v, mask, chunk_size=4)

    out, (d_q, _, _) = output_and_grads(chunked, (q, k, v), upstream)
    assert np.all(out[:, 4] == 0.0)
    assert np.all(d_q[:, 4] == 0.0)
    assert np.all(np.abs(out[:, 3]) > 0.0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_inputs_stay_finite_with_huge_logits(rng, dtype):
    # Scaled logits past float16's largest value (65504): a chunked path that
    # computed Q·Kᵀ in float16 would give infinities and NaN here.
    q, k, v = _qkv(rng, dim=16, value_dim=16)
    q, k = q * 150.0, k * 150.0
    cast = [keras.ops.cast(t, dtype) for t in (q, k, v)]
    # The reference sees the same rounded inputs, in float64.
    rounded = [to_numpy(keras.ops.cast(t, "float32")) for t in cast]
    logits = np.einsum("bqhd,bkhd->bhqk", rounded[0], rounded[1]) * 0.5
    causal = np.tril(np.ones(logits.shape[-2:], bool))
    assert np.abs(logits[..., causal]).max() > 65504
    got = sdpa(*cast, scale=0.5, causal=True, chunk_size=4)
    assert keras.backend.standardize_dtype(got.dtype) == dtype
    got = to_numpy(keras.ops.cast(got, "float32"))
    assert np.all(np.isfinite(got))
    want, _ = reference_attention(*rounded, scale=0.5, causal=True)
    # The output rounds to the input dtype: relative to the reference's size.
    tolerance = 1e-2 if dtype == "float16" else 5e-2
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance * np.abs(want).max())


@pytest.mark.parametrize(
    "options",
    [dict(chunk_size=2), dict(chunk_size=3, causal=True, sliding_window=2)],
    ids=["chunk2", "chunk3-causal-window"],
)
def test_nan_and_inf_padding_change_no_real_output_nor_gradient(
    rng, options, chunked_calls
):
    assert_padding_ignored(sdpa, rng, **options)
    assert len(chunked_calls) == 3


@pytest.mark.tensorflow_only  # float64 is computed in float64 on TensorFlow
def test_gradients_at_large_logits_are_as_precise_as_the_plain_paths(rng):
    # Logits near 1e3: float32 holds them to about 6e-5, and the backward
    # pass recomputes the weights from them. From their log-sum-exp (until
    # 2026-12-08) the chunked path's query gradient here was 3.0x further
    # from a float64 reference than the plain path's; from the row maximum
    # and the log-sum, kept apart, it is as far.
    q, k, v = _qkv(rng, q_len=64, k_len=64, heads=2, dim=16, value_dim=16)
    q = q * 1000.0
    upstream = rng.normal(size=v.shape)
    inputs = (q, k, v)

    def grads(dtype, **options):
        args = [a.astype(dtype) for a in inputs]
        fn = lambda q, k, v: sdpa(q, k, v, **options)  # noqa: E731
        return output_and_grads(fn, args, upstream.astype(dtype))[1]

    reference = grads("float64")
    plain, chunked = grads("float32"), grads("float32", chunk_size=16)
    for name, want, p, c in zip("qkv", reference, plain, chunked, strict=True):
        plain_error = np.abs(to_numpy(p) - want).max()
        chunked_error = np.abs(to_numpy(c) - want).max()
        assert chunked_error <= 1.2 * plain_error, (name, chunked_error, plain_error)


# ------------------------------------------------------------------ selection


def _footprint(shape):
    """The plain (or fused) path's predicted training bytes for `shape`."""
    batch, length, heads, _ = shape
    per_element = attention_module.TRAINING_BYTES_PER_ELEMENT[BACKEND]
    path = "fused" if BACKEND in ("jax", "torch") else "plain"
    return batch * heads * length * length * per_element[path]


def test_automatic_choice_beyond_the_memory_budget(rng, memory_budget, chunked_calls):
    q, k, v = _qkv(rng)
    memory_budget(_footprint(q.shape))
    sdpa(q, k, v, flash_attention=False, causal=True)
    assert chunked_calls == []
    memory_budget(_footprint(q.shape) - 1)
    out = sdpa(q, k, v, flash_attention=False, causal=True)
    # One block of all 13 keys keeps fewer bytes per element than the plain
    # path's weights, so the fastest block size fits.
    assert chunked_calls == [attention_module.CHUNK_SIZES[0]]
    want = sdpa(q, k, v, flash_attention=False, causal=True, chunk_size=13)
    np.testing.assert_allclose(to_numpy(out), to_numpy(want), atol=ATOL)
    # The full weight matrix, and dropout in training, take the plain path.
    sdpa(q, k, v, flash_attention=False, return_scores=True)
    sdpa(q, k, v, flash_attention=False, dropout=0.5, training=True, seed=1)
    assert chunked_calls == [attention_module.CHUNK_SIZES[0], 13]


def test_automatic_choice_takes_fused_kernels_when_they_fit(
    rng, memory_budget, chunked_calls
):
    q, k, v = _qkv(rng)
    memory_budget(_footprint(q.shape))
    sdpa(q, k, v)
    assert chunked_calls == []
    memory_budget(_footprint(q.shape) - 1)
    sdpa(q, k, v)
    assert chunked_calls == [attention_module.CHUNK_SIZES[0]]


def test_explicit_chunk_size_wins_over_fused_and_scores_use_plain(rng, chunked_calls):
    q, k, v = _qkv(rng)
    sdpa(q, k, v, chunk_size=4)
    assert chunked_calls == [4]
    _, scores = sdpa(q, k, v, chunk_size=4, return_scores=True)
    assert chunked_calls == [4]
    assert tuple(scores.shape) == (2, 3, 13, 13)


# ----------------------------------------------------------------- validation


@pytest.mark.backend_independent
@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"], ids=str)
def test_invalid_chunk_size(rng, bad):
    with pytest.raises(ValueError, match=r"`chunk_size`.*Received: chunk_size="):
        sdpa(*_qkv(rng), chunk_size=bad)
    with pytest.raises(ValueError, match="chunk_size"):
        SelfAttention(8, chunk_size=bad)
    with pytest.raises(ValueError, match="chunk_size"):
        MultiHeadAttention(2, 4, chunk_size=bad)


@pytest.mark.backend_independent
def test_chunk_size_with_flash_attention_true_is_an_error(rng):
    with pytest.raises(ValueError, match="flash_attention"):
        sdpa(*_qkv(rng), chunk_size=4, flash_attention=True)
    with pytest.raises(ValueError, match="flash_attention"):
        MultiHeadAttention(2, 4, chunk_size=4, flash_attention=True)


@pytest.mark.backend_independent
def test_explicit_chunk_size_with_active_dropout_is_an_error(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError, match="dropout"):
        sdpa(q, k, v, chunk_size=4, dropout=0.1, training=True)
    # Inference ignores dropout, so the chunked path is fine there.
    out = sdpa(q, k, v, chunk_size=4, dropout=0.1, training=False)
    want = sdpa(q, k, v, flash_attention=False)
    np.testing.assert_allclose(to_numpy(out), to_numpy(want), atol=ATOL)


# --------------------------------------------------------------------- layers


def test_self_attention_chunk_size_gives_the_same_outputs(rng):
    x = rng.normal(size=(2, 11, 6)).astype("float32")
    mask = np.ones((2, 11), bool)
    mask[1, 7:] = False
    layer = SelfAttention(8, num_heads=2, causal=True, chunk_size=3)
    config = layer.get_config()
    assert config["chunk_size"] == 3
    assert SelfAttention.from_config(config).chunk_size == 3
    assert SelfAttention(8).get_config()["chunk_size"] is None
    # One layer (one set of weights), both paths: the call reads chunk_size.
    chunked = to_numpy(layer(x, mask=mask))
    layer.chunk_size = None
    np.testing.assert_allclose(chunked, to_numpy(layer(x, mask=mask)), atol=ATOL)


def test_multi_head_attention_chunk_size_gives_the_same_outputs(rng):
    query = rng.normal(size=(2, 9, 6)).astype("float32")
    value = rng.normal(size=(2, 7, 5)).astype("float32")
    value_mask = np.ones((2, 7), bool)
    value_mask[0, 4:] = False
    layer = MultiHeadAttention(2, 4, value_dim=3, chunk_size=2)
    config = layer.get_config()
    assert config["chunk_size"] == 2
    assert MultiHeadAttention.from_config(config).chunk_size == 2
    kwargs = dict(value_mask=value_mask, use_causal_mask=True)
    chunked = to_numpy(layer(query, value, **kwargs))
    layer._chunk_size = None
    plain = to_numpy(layer(query, value, **kwargs))
    np.testing.assert_allclose(chunked, plain, atol=ATOL)


# --------------------------------------------------------- graphs (TensorFlow)


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_tf_function_static_and_unknown_lengths(rng, chunked_calls, jit_compile):
    import tensorflow as tf

    q, k, v = _qkv(rng, q_len=10, k_len=12)
    want = to_numpy(sdpa(q, k, v, causal=True, flash_attention=False))

    def grads(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = sdpa(q, k, v, causal=True, chunk_size=5)
            loss = tf.reduce_sum(out)
        return out, tape.gradient(loss, [q, k, v])

    static = tf.function(grads, jit_compile=jit_compile)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known length: no warning
        out, static_grads = static(*map(tf.constant, (q, k, v)))
    np.testing.assert_allclose(to_numpy(out), want, atol=ATOL)
    assert chunked_calls == [5]
    # Unknown lengths (and batch): the chunked path counts its blocks at run
    # time (until 2026-12-07 the kernel took the plain path there).
    spec = tf.TensorSpec((None, None, 3, 8), "float32")
    dynamic = tf.function(grads, input_signature=[spec] * 3, jit_compile=jit_compile)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, dynamic_grads = dynamic(*map(tf.constant, (q, k, v)))
    np.testing.assert_allclose(to_numpy(out), want, atol=ATOL)
    assert chunked_calls == [5, 5]
    for a, b in zip(static_grads, dynamic_grads, strict=True):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=ATOL)


_UNKNOWN_LENGTHS = {
    # (q_len, k_len): a last block that is full, padded, and a single block.
    "full-blocks": (10, 10),
    "padded-last-block": (7, 12),
    "one-short-block": (3, 3),
}


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("lengths", list(_UNKNOWN_LENGTHS), ids=list(_UNKNOWN_LENGTHS))
def test_tf_graph_of_unknown_lengths_keeps_the_chunked_path(
    rng, chunked_calls, lengths
):
    # Keras's TensorFlow `fit`, `evaluate` and `predict` retrace for any
    # length from the second length they meet on (`reduce_retracing`): with
    # the plain path there, a `chunk_size` layer's memory was quadratic.
    import tensorflow as tf

    q_len, k_len = _UNKNOWN_LENGTHS[lengths]
    q, _, _ = _qkv(rng, q_len=q_len, k_len=k_len)
    _, k, v = _qkv(rng, q_len=q_len, k_len=k_len, heads=1)  # grouped: 3 on 1
    mask = _mask(rng, "full", 2, q_len, k_len, 3)
    padding = np.ones((2, k_len), bool)
    padding[1, k_len // 2 :] = False
    options = dict(causal=True, sliding_window=4)
    upstream = rng.normal(size=(2, q_len, 3, 8)).astype("float32")
    want, want_grads = output_and_grads(
        lambda q, k, v: sdpa(
            q, k, v, mask, padding_mask=padding, flash_attention=False, **options
        ),
        (q, k, v),
        upstream,
    )
    specs = [tf.TensorSpec((None, None, heads, 8)) for heads in (3, 1, 1)]

    @tf.function(input_signature=specs)
    def chunked(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = sdpa(q, k, v, mask, padding_mask=padding, chunk_size=4, **options)
            loss = tf.reduce_sum(out * upstream)
        return out, tape.gradient(loss, [q, k, v])

    out, grads = chunked(*map(tf.constant, (q, k, v)))
    assert chunked_calls == [4]
    np.testing.assert_allclose(to_numpy(out), want, atol=ATOL)
    for got, expected in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(to_numpy(got), expected, atol=ATOL)


@pytest.mark.tensorflow_only
def test_keras_fit_at_a_second_length_keeps_the_chunked_path(rng, chunked_calls):
    # Keras's TensorFlow trainer retraces with the length unknown from the
    # second length on; the plain path ran there, with quadratic memory,
    # unsaid (a probe, 2026-12-07).
    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(50, 16)(ids)
    x = SelfAttention(16, num_heads=2, chunk_size=4)(x)
    model = keras.Model(ids, keras.layers.GlobalAveragePooling1D()(x))
    model.compile("sgd", "mse")
    target = np.zeros((4, 16), "float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for length in (16, 24, 32):
            model.fit(rng.integers(0, 50, (4, length)), target, verbose=0)
    # Traced at 16, then once for any length (forward only: the gradient
    # reuses the loop's blocks); never the plain path.
    assert chunked_calls and set(chunked_calls) == {4}
    assert len(chunked_calls) == 2


@pytest.mark.tensorflow_only
def test_tf_function_unknown_batch_with_a_padding_mask(rng, chunked_calls):
    import tensorflow as tf

    q, k, v = _qkv(rng, q_len=10, k_len=12)
    mask = _mask(rng, "full", 2, 10, 12, 3)
    want = to_numpy(sdpa(q, k, v, mask, causal=True, flash_attention=False))
    spec = tf.TensorSpec((None, None, 10, 12), "bool")
    qkv_specs = [
        tf.TensorSpec((None, length, 3, 8), "float32") for length in (10, 12, 12)
    ]

    @tf.function(input_signature=[*qkv_specs, spec])
    def chunked(q, k, v, mask):
        return sdpa(q, k, v, mask, causal=True, chunk_size=5)

    np.testing.assert_allclose(to_numpy(chunked(q, k, v, mask)), want, atol=ATOL)
    assert chunked_calls == [5]


# --------------------------------------------------------------------- memory

_MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import keras_selfattn.attention as attention
    from tests.helpers import output_and_grads

    chunk_size = None if sys.argv[1] == "none" else int(sys.argv[1])
    length = int(sys.argv[2])
    any_length = sys.argv[3] == "any-length"  # a TensorFlow graph of any length
    # "none" means the plain path.
    attention.set_memory_budget(10**15)

    def fn(q, k, v):
        return attention.scaled_dot_product_attention(
            q, k, v, chunk_size=chunk_size, flash_attention=False
        )

    if any_length:
        import tensorflow as tf

        @tf.function(input_signature=[tf.TensorSpec((None, None, 8, 16))] * 3)
        def step(q, k, v):
            with tf.GradientTape() as tape:
                tape.watch([q, k, v])
                loss = tf.reduce_sum(fn(q, k, v))
            return tape.gradient(loss, [q, k, v])

    def run(length):
        rng = np.random.default_rng(0)
        q, k, v = (
            rng.normal(size=(1, length, 8, 16)).astype("float32") for _ in "qkv"
        )
        if any_length:
            step(q, k, v)
        else:
            output_and_grads(fn, (q, k, v), np.ones_like(v))

    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])

    run(64)  # Loads and warms up everything that is not the big run.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # Resets the peak RSS (VmHWM) to the current RSS.
    before = status("VmRSS")
    run(length)
    print(json.dumps({"peak_kib": status("VmHWM") - before}))
    """
)


def _peak_kib(chunk_size, length, env, lengths="one-length"):
    result = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT, str(chunk_size), str(length), lengths],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=str(__import__("pathlib").Path(__file__).resolve().parent.parent),
    )
    return json.loads(result.stdout.strip().splitlines()[-1])["peak_kib"]


@pytest.mark.slow
def test_training_memory_is_far_below_one_weight_matrix(subprocess_env):
    # (1, 8 heads, 4096, 4096) float32 weights are 512 MiB; the plain path
    # needs several such matrices to train. The chunked path (blocks of 256
    # keys: 32 MiB each) must stay under half of one.
    length = 4096
    matrix_kib = 8 * length * length * 4 // 1024
    chunked = _peak_kib(256, length, subprocess_env)
    assert chunked < matrix_kib // 2, (chunked, matrix_kib)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_training_memory_stays_low_in_a_graph_of_any_length(subprocess_env):
    # As Keras's TensorFlow `fit` traces from the second length it meets on:
    # the plain path ran there until 2026-12-07, whatever the `chunk_size`
    # (this script with "none": 2,717 MiB above the warm-up, that day).
    length = 4096
    matrix_kib = 8 * length * length * 4 // 1024
    chunked = _peak_kib(256, length, subprocess_env, "any-length")
    assert chunked < matrix_kib // 2, (chunked, matrix_kib)


# ---------------------------------------------- no (q_len, k_len) from padding


@pytest.mark.tensorflow_only
def test_padding_builds_no_query_by_key_tensor_on_the_chunked_path(rng):
    # Lengths no other dimension shares: 37 queries, 53 keys (56 in blocks of 8).
    q, k, v = _qkv(rng, q_len=37, k_len=53, heads=2, dim=4, value_dim=4)
    padding_mask = np.arange(53)[None, :] < np.array([[20], [53]])
    lengths = (53, 56)

    def with_key_mask(q, k, v, padding_mask):
        return sdpa(q, k, v, padding_mask=padding_mask, causal=True, chunk_size=8)

    assert not query_by_key(
        traced_shapes(with_key_mask, q, k, v, padding_mask), 37, lengths
    )

    # The detector sees such a tensor where one is built: the same padding
    # given as a (batch, 1, q_len, k_len) mask, as the layers once did.
    def with_full_mask(q, k, v, padding_mask):
        mask = padding_mask[:, None, None, :] & keras.ops.ones((37, 1), "bool")
        return sdpa(q, k, v, mask, chunk_size=8)

    assert query_by_key(
        traced_shapes(with_full_mask, q, k, v, padding_mask), 37, lengths
    )


def _masked_layer(kind, chunk_size):
    """A layer of the package on 37 embedded tokens, padding id 0 masked;
    causal where the layer can be."""
    if kind == "SelfAttention":
        attention = SelfAttention(8, num_heads=2, chunk_size=chunk_size)
    elif kind == "MultiHeadAttention":
        attention = MultiHeadAttention(2, 4, chunk_size=chunk_size)
    elif kind == "CachedMultiHeadAttention":
        attention = CachedMultiHeadAttention(2, 4, chunk_size=chunk_size)
    else:  # causal by default; its attention takes the block's chunk size
        attention = TransformerDecoder(16, 2)
        attention.build((None, 37, 8))
        attention._self_attention_layer._chunk_size = chunk_size
    embedding = keras.layers.Embedding(10, 8, mask_zero=True)

    def call(ids):
        x = embedding(ids)
        if kind in ("SelfAttention", "TransformerDecoder"):
            return attention(x)
        return attention(x, x, use_causal_mask=True)

    return call, attention


@pytest.mark.tensorflow_only
@pytest.mark.parametrize(
    "kind",
    [
        "SelfAttention",
        "MultiHeadAttention",
        "CachedMultiHeadAttention",
        "TransformerDecoder",
    ],
)
@pytest.mark.parametrize("chunk_size", [None, 8], ids=["plain", "chunked"])
def test_layers_build_no_query_by_key_mask_from_a_keras_mask(rng, kind, chunk_size):
    # 3 sequences of 37 tokens (40 in blocks of 8), 20 real in the first: the
    # Keras mask travels as a (batch, k_len) padding mask. The chunked path
    # builds no (q_len, k_len) tensor at all; the plain path builds the weights
    # and the causal rule (1, 1, q_len, k_len), but no boolean
    # (batch, ..., q_len, k_len) mask from the padding. The decoder block is
    # causal as a flag too (keras-hub's builds a (batch, T, T) int32 mask).
    import tensorflow as tf

    ids = rng.integers(1, 10, size=(3, 37))
    ids[0, 20:] = 0
    call, layer = _masked_layer(kind, chunk_size)
    call(ids)  # builds the layers
    weights = layer.trainable_variables  # the backward pass is traced too
    if chunk_size:
        shapes = traced_shapes(call, ids, variables=weights)
        assert not query_by_key(shapes, 37, (37, 40))
    else:
        shapes = traced_shapes(call, ids, dtype=tf.bool, variables=weights)
        assert not [s for s in query_by_key(shapes, 37, (37,)) if 3 in s]
    assert [3, 37] in shapes  # the detector saw the Keras mask
