"""`model.export`: models with our layers, on every path, run outside Keras.

One tiny model holds `SelfAttention` and `MultiHeadAttention`, unchunked and
on the chunked path (`chunk_size=4` over 10 tokens: three blocks, the last
one padded), each with and without a padding mask. Unchunked,
`MultiHeadAttention` (`flash_attention=False`) takes the plain path and
`SelfAttention` the backend's choice: the plain path on TensorFlow, the
fused kernel (`keras.ops.dot_product_attention`) on JAX and PyTorch; so
every path is exported. It is exported once per format that the backend's
Keras exports and run where the format runs (onnxruntime, the LiteRT
interpreter, TensorFlow's SavedModel loader); every output must equal
Keras's within 1e-5.

What each backend's Keras exports (`EXPORTS`): TensorFlow all three formats;
JAX ONNX (through jax2onnx, Python 3.11+) and SavedModel (through jax2tf);
PyTorch ONNX (through `torch.onnx`). PyTorch's LiteRT export needs the
`litert-torch` package (not in the test extra: it pins its own LiteRT and
pulls transformers), and its SavedModel export fails in Keras 3.15 for
Keras's own `MultiHeadAttention` too (a `dynamic_shapes` mismatch in
`torch.export`); docs/export.md says so.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_selfattn import (
    AttentionPooling,
    CachedMultiHeadAttention,
    GroupQueryAttention,
    MultiHeadAttention,
    SelfAttention,
    TokenAndPositionEmbedding,
    TransformerDecoder,
    TransformerEncoder,
)
from keras_selfattn.layers.grouped_query_attention import (
    KERAS_NEEDED as GQA_KERAS_NEEDED,
)
from tests.helpers import BACKEND, assert_close, needs_keras, release

EXPORTS = {
    "tensorflow": ("onnx", "litert", "tf_saved_model"),
    "jax": ("onnx", "tf_saved_model"),
    "torch": ("onnx",),
}


def exported_by(export_format: str) -> pytest.MarkDecorator:
    """Skips a test of `export_format` in a backend pass whose Keras cannot
    export it."""
    return pytest.mark.skipif(
        export_format not in EXPORTS[BACKEND],
        reason=f"Keras on {BACKEND} does not export format={export_format!r}",
    )


SEQ, VOCAB, WIDTH, CHUNK = 10, 12, 8, 4
LAYERS = ("SelfAttention", "MultiHeadAttention")
PATHS = {"unchunked": None, "chunked": CHUNK}
MASKS = ("masked", "unmasked")
OUTPUTS = [(layer, path, mask) for layer in LAYERS for path in PATHS for mask in MASKS]
IDS = ["-".join(case) for case in OUTPUTS]
# The floor pass's Keras (3.7) exports `tf_saved_model` only.
needs_onnx_export = needs_keras("3.8", 'model.export(format="onnx")')
needs_litert_export = needs_keras("3.13", 'model.export(format="litert")')
# Keras's JAX ONNX exporter (jax2onnx) came with Keras 3.14.
needs_onnx_export_here = (
    needs_keras("3.14", 'model.export(format="onnx") on JAX')
    if BACKEND == "jax"
    else needs_onnx_export
)


def _model() -> keras.Model:
    """Token ids in; one output per (layer, path, mask) of `OUTPUTS`.

    `masked`: `Embedding(mask_zero=True)`, so id 0 is padding (a Keras mask);
    `unmasked`: the same ids embedded without a mask. `MultiHeadAttention`
    is causal as well, so the chunked path's per-block position rule is
    exported too.
    """
    ids = keras.Input((SEQ,), dtype="int32", name="ids")
    embedded = {
        mask: keras.layers.Embedding(VOCAB, WIDTH, mask_zero=mask == "masked")(ids)
        for mask in MASKS
    }
    outputs = []
    for layer, path, mask in OUTPUTS:
        x = embedded[mask]
        if layer == "SelfAttention":
            attention = SelfAttention(WIDTH, num_heads=2, chunk_size=PATHS[path])
            outputs.append(attention(x))
        else:
            attention = MultiHeadAttention(
                2, 4, chunk_size=PATHS[path], flash_attention=False
            )
            outputs.append(attention(x, x, use_causal_mask=True))
    return keras.Model(ids, outputs)


def _ids() -> np.ndarray:
    """Three sequences: no padding, 6 real tokens, and padding only."""
    ids = np.random.default_rng(7).integers(1, VOCAB, size=(3, SEQ)).astype("int32")
    ids[1, 6:] = 0
    ids[2] = 0
    return ids


@pytest.fixture(scope="module")
def model_and_expected():
    keras.utils.set_random_seed(20)
    model = _model()
    ids = _ids()
    # Called, not `predict`ed: Keras's exporters refuse a model never called,
    # and `predict` does not count on JAX.
    expected = [keras.ops.convert_to_numpy(y) for y in model(ids)]
    # The padded positions output zeros (the fully padded row included), so
    # an exporter that broke masking could not match by accident.
    for (_, _, mask), y in zip(OUTPUTS, expected, strict=True):
        if mask == "masked":
            assert not np.any(y[1, 6:]) and not np.any(y[2])
            assert np.all(np.abs(y[:2, :6]).sum(-1) > 0)
    return model, ids, expected


def _run_exported(export_format: str, path, feeds: dict) -> list:
    """The outputs, as NumPy arrays in the model's order, of the file that
    `model.export(path, format=export_format)` wrote, for `feeds` (the
    model's inputs by name; a single input's name is the file's own, as the
    exporters name an unnamed input differently)."""
    path = str(path)
    if export_format == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [feed.name for feed in session.get_inputs()]
        return session.run(None, _by_name(feeds, names))
    if export_format == "litert":
        from ai_edge_litert import interpreter

        runner = interpreter.Interpreter(model_path=path).get_signature_runner()
        got = runner(**_by_name(feeds, list(runner.get_input_details())))
        # The signature names the outputs `output_0`, `output_1`, ...
        return [got[f"output_{i}"] for i in range(len(got))]
    import tensorflow as tf

    values = list(feeds.values())
    loaded = tf.saved_model.load(path)  # it owns the variables: kept until read
    outputs = loaded.serve(values[0] if len(values) == 1 else values)
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return [np.asarray(y) for y in outputs]


# Each format, on every backend whose Keras exports it.
every_format = pytest.mark.parametrize(
    "export_format",
    [
        pytest.param("onnx", marks=[exported_by("onnx"), needs_onnx_export_here]),
        pytest.param("litert", marks=[exported_by("litert"), needs_litert_export]),
        pytest.param("tf_saved_model", marks=exported_by("tf_saved_model")),
    ],
)


def _exported(model: keras.Model, stem, export_format: str) -> str:
    """The path `model.export` wrote `model` to, in `export_format`, at
    `stem` (with the format's suffix)."""
    suffix = {"litert": ".tflite", "onnx": ".onnx"}.get(export_format, "")
    path = f"{stem}{suffix}"
    model.export(path, format=export_format, verbose=False)
    return path


def _by_name(feeds: dict, names: list) -> dict:
    """`feeds` under the file's input `names` (one input: whatever its name)."""
    if len(feeds) == 1 and len(names) == 1:
        return {names[0]: next(iter(feeds.values()))}
    return feeds


@pytest.fixture(scope="module")
def onnx_outputs(model_and_expected, tmp_path_factory):
    import onnx

    if BACKEND == "jax":
        pytest.importorskip("jax2onnx", reason="jax2onnx needs Python 3.11+")

    model, ids, _ = model_and_expected
    path = tmp_path_factory.mktemp("onnx") / "model.onnx"
    model.export(str(path), format="onnx", verbose=False)
    return onnx.load(str(path)).graph, _run_exported("onnx", path, {"ids": ids})


@exported_by("onnx")
@needs_onnx_export_here
@pytest.mark.skipif(
    BACKEND == "torch",
    reason="torch.jit.trace records the chunked path's Python loop block by block",
)
def test_onnx_has_one_loop_per_chunked_layer(onnx_outputs):
    # The chunked layers export their loop over key blocks as an ONNX Loop
    # (and the unchunked ones none): the file is the long-sequence path
    # itself, not a plain-path fallback. TensorFlow's `tf.while_loop` and
    # JAX's `lax.scan` (never unrolled for an export's symbolic batch).
    graph, _ = onnx_outputs
    loops = [node for node in graph.node if node.op_type == "Loop"]
    chunked = sum(path == "chunked" for _, path, _ in OUTPUTS)
    assert len(loops) == chunked


@exported_by("onnx")
@needs_onnx_export_here
@pytest.mark.parametrize("index", range(len(OUTPUTS)), ids=IDS)
def test_onnx_in_onnxruntime_matches_keras(model_and_expected, onnx_outputs, index):
    _, _, expected = model_and_expected
    _, outputs = onnx_outputs
    assert_close(outputs[index], expected[index], atol=1e-5)


@exported_by("onnx")
@needs_onnx_export_here
def test_onnx_of_an_unknown_length_computes_every_length(tmp_path):
    # Keras's ONNX export on PyTorch traces an unknown length as 1; the
    # kernel's shortcut for one key was traced in and the file gave the sum
    # of the values, not their average, at every other length (0.1 to 0.6
    # off, silently; a review, 2026-12-07). On JAX, jax2onnx failed on a
    # causal mask and a sliding window ("'_DynamicDimSentinel' object has no
    # attribute 'rmax'": its `jnp.arange` of an unknown length; the kernel
    # takes `lax.iota` there since 2026-12-07). A `chunk_size` layer traced
    # at length 1 on PyTorch held one block of one key, and onnxruntime
    # refused every other length ("MatMul ... cannot broadcast on dim 0");
    # `plan_attention` takes the plain path there since 2026-12-07. The
    # blocks did not export from PyTorch at all until 2026-12-07 (Keras's
    # `LayerNormalization`: "onnx::Gather ... is not constant").
    inputs = keras.Input((None, WIDTH))
    mha = MultiHeadAttention(2, 4, flash_attention=False)
    causal_mha = MultiHeadAttention(2, 4, flash_attention=False)
    outputs = [
        mha(inputs, inputs),
        causal_mha(inputs, inputs, use_causal_mask=True),
        SelfAttention(WIDTH, num_heads=2, causal=True)(inputs),
        SelfAttention(WIDTH, num_heads=2, sliding_window=3)(inputs),
        SelfAttention(WIDTH, num_heads=2, causal=True, sliding_window=3)(inputs),
        SelfAttention(WIDTH, num_heads=2, causal=True, chunk_size=4)(inputs),
        TransformerEncoder(16, 2)(inputs),
        TransformerDecoder(16, 2, normalize_first=True)(inputs, inputs),
    ]
    model = keras.Model(inputs, outputs)
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(2, n, WIDTH)).astype("float32") for n in (1, 5, 16)]
    expected = [keras.ops.convert_to_numpy(model(x)) for x in xs]  # called
    path = tmp_path / "model.onnx"
    model.export(str(path), format="onnx", verbose=False)
    names = [
        "mha", "mha_causal", "causal", "sliding_window", "causal_window", "chunked",
        "encoder", "decoder",
    ]  # fmt: skip
    for x, wants in zip(xs, expected, strict=True):
        got = _run_exported("onnx", path, {"x": x})
        assert len(got) == len(wants) == len(names)
        for name, output, want in zip(names, got, wants, strict=True):
            where = f"{name}, length {x.shape[1]}"
            np.testing.assert_allclose(output, want, atol=1e-5, rtol=0, err_msg=where)


@exported_by("litert")
@needs_litert_export
def test_litert_of_an_unknown_length_computes_every_length(tmp_path):
    # TensorFlow's LiteRT converter refused the kernel's squeeze of its
    # merged heads with an unknown length ("'tfl.squeeze' op attribute
    # 'squeeze_dims' failed to satisfy constraint"; a review, 2026-12-07).
    inputs = keras.Input((None, WIDTH))
    outputs = [
        SelfAttention(WIDTH, num_heads=2)(inputs),
        MultiHeadAttention(2, 4, flash_attention=False)(inputs, inputs),
    ]
    if release(keras.__version__) >= release(GQA_KERAS_NEEDED):
        # Fewer key-value heads than query heads (a review reported a
        # `FlexStridedSlice` here that the interpreter cannot run; it was
        # not reproduced: this guards it).
        gqa = GroupQueryAttention(4, num_query_heads=4, num_key_value_heads=2)
        outputs.append(gqa(inputs, inputs))
    model = keras.Model(inputs, outputs)
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(2, n, WIDTH)).astype("float32") for n in (1, 5, 16)]
    expected = [[keras.ops.convert_to_numpy(o) for o in model(x)] for x in xs]
    path = tmp_path / "model.tflite"
    model.export(str(path), format="litert", verbose=False)
    for x, want in zip(xs, expected, strict=True):
        got = _run_exported("litert", path, {"x": x})
        assert len(got) == len(want)
        for output, w in zip(got, want, strict=True):
            assert_close(output, w, atol=1e-5)


@every_format
def test_token_ids_of_an_unknown_length_export(tmp_path, export_format):
    # On JAX, `TokenAndPositionEmbedding` did not export with an unknown
    # length, to ONNX or SavedModel: its length check and its slice of the
    # position table compared JAX's symbolic length with a number ("Symbolic
    # dimension comparison 'dim_0_1' > '32' is inconclusive"; 2026-12-07).
    ids = keras.Input((None,), dtype="int32", name="ids")
    x = TokenAndPositionEmbedding(VOCAB, 32, WIDTH)(ids)  # masks id 0
    outputs = [
        SelfAttention(WIDTH, num_heads=2)(x),
        AttentionPooling(2)(x),
        CachedMultiHeadAttention(2, 4)(x, x),
    ]
    if release(keras.__version__) >= release(GQA_KERAS_NEEDED):
        outputs.append(GroupQueryAttention(4, 4, 2)(x, x))
    model = keras.Model(ids, outputs)
    rng = np.random.default_rng(5)
    feeds = []
    for length in (1, 5, 16):
        feed = rng.integers(1, VOCAB, size=(2, length)).astype("int32")
        feed[1, length // 2 + 1 :] = 0  # padding in the second sequence
        feeds.append(feed)
    expected = [[keras.ops.convert_to_numpy(y) for y in model(f)] for f in feeds]
    path = _exported(model, tmp_path / "ids", export_format)
    for feed, want in zip(feeds, expected, strict=True):
        got = _run_exported(export_format, path, {"ids": feed})
        assert len(got) == len(want)
        for i, (output, w) in enumerate(zip(got, want, strict=True)):
            where = f"output {i}, length {feed.shape[1]}"
            np.testing.assert_allclose(output, w, atol=1e-5, rtol=0, err_msg=where)


@pytest.fixture(scope="module")
def litert_outputs(model_and_expected, tmp_path_factory):
    model, ids, _ = model_and_expected
    path = tmp_path_factory.mktemp("litert") / "model.tflite"
    model.export(str(path), format="litert", verbose=False)
    return _run_exported("litert", path, {"ids": ids})


@exported_by("litert")
@needs_litert_export
@pytest.mark.parametrize("index", range(len(OUTPUTS)), ids=IDS)
def test_litert_in_the_litert_interpreter_matches_keras(
    model_and_expected, litert_outputs, index
):
    _, _, expected = model_and_expected
    assert len(litert_outputs) == len(expected)
    assert_close(litert_outputs[index], expected[index], atol=1e-5)


@pytest.fixture(scope="module")
def saved_model_outputs(model_and_expected, tmp_path_factory):
    model, ids, _ = model_and_expected
    path = tmp_path_factory.mktemp("saved_model") / "model"
    model.export(str(path), format="tf_saved_model", verbose=False)
    return _run_exported("tf_saved_model", path, {"ids": ids})


@exported_by("tf_saved_model")
@pytest.mark.parametrize("index", range(len(OUTPUTS)), ids=IDS)
def test_tf_saved_model_matches_keras(model_and_expected, saved_model_outputs, index):
    _, _, expected = model_and_expected
    assert_close(saved_model_outputs[index], expected[index], atol=1e-5)


CACHE_LEN = 6


class _StepIndex(keras.layers.Layer):
    """The decoding step's cache index, a scalar: the first entry of a
    `(batch, 1)` int32 input (JAX's export gives every input one batch)."""

    def call(self, step):
        return keras.ops.reshape(step[:1, 0], ())


def _decoding_step() -> keras.Model:
    """One decoding step: a token's vector, a cache of `CACHE_LEN` positions
    and the index to write it at; out come a `CachedMultiHeadAttention`'s
    output and updated cache, and a `TransformerDecoder`'s output."""
    x = keras.Input((1, WIDTH), name="x")
    cache = keras.Input((2, CACHE_LEN, 2, WIDTH // 2), name="cache")
    step = keras.Input((1,), dtype="int32", name="step")
    index = _StepIndex()(step)
    attention = CachedMultiHeadAttention(2, WIDTH // 2)
    outputs = list(
        attention(x, x, cache=cache, cache_update_index=index, use_causal_mask=True)
    )
    decoder = TransformerDecoder(16, 2)
    outputs.append(
        decoder(x, self_attention_cache=cache, self_attention_cache_update_index=index)
    )
    return keras.Model([x, cache, step], outputs)


@every_format
def test_a_decoding_step_exports(tmp_path, export_format):
    # The cache update was `keras.ops.slice_update`: on TensorFlow
    # `XlaDynamicUpdateSlice`, which tf2onnx cannot convert (onnxruntime:
    # INVALID_GRAPH, "No Op registered for XlaDynamicUpdateSlice"); on
    # PyTorch `torch.onnx` wrote int32 indices for `ScatterND`, which
    # onnxruntime refuses. `_backend.update_cache` since 2026-12-07.
    model = _decoding_step()
    rng = np.random.default_rng(3)
    feeds = {
        "x": rng.normal(size=(2, 1, WIDTH)).astype("float32"),
        "cache": rng.normal(size=(2, 2, CACHE_LEN, 2, WIDTH // 2)).astype("float32"),
        "step": np.full((2, 1), 3, "int32"),
    }
    expected = [keras.ops.convert_to_numpy(y) for y in model(list(feeds.values()))]
    # The step's keys and values are written at index 3, and only there.
    np.testing.assert_array_equal(
        np.delete(expected[1], 3, axis=2), np.delete(feeds["cache"], 3, axis=2)
    )
    assert not np.allclose(expected[1][:, :, 3], feeds["cache"][:, :, 3])
    path = _exported(model, tmp_path / "step", export_format)
    got = _run_exported(export_format, path, feeds)
    assert len(got) == len(expected)
    for i, (output, want) in enumerate(zip(got, expected, strict=True)):
        np.testing.assert_allclose(
            output, want, atol=1e-5, rtol=0, err_msg=f"output {i}"
        )
