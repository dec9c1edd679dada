"""keras_selfattn.convert on keras-hub models built from tiny configs.

Nothing is downloaded: the backbones are built from their constructor
arguments (vocabulary 50, 2 layers, hidden 16, 2 heads, sequence 8), with
random weights. keras-hub is in the `test` extra (and `hub`).
"""

from __future__ import annotations

import subprocess
import sys

import keras
import keras_hub
import numpy as np
import pytest

import keras_selfattn
from keras_selfattn import convert
from keras_selfattn.layers import multi_head_attention
from tests.helpers import (
    assert_close,
    plain_attributes,
    query_by_key,
    to_numpy,
    traced_shapes,
)

TINY = {
    "vocabulary_size": 50,
    "num_layers": 2,
    "num_heads": 2,
    "hidden_dim": 16,
    "intermediate_dim": 32,
    "max_sequence_length": 8,
}
HUB_CACHED = "keras_hub.layers.CachedMultiHeadAttention"
HUB_DECODER = "keras_hub.layers.TransformerDecoder"
KERAS_MHA = "keras.layers.MultiHeadAttention"


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts calls of the kernel by our MultiHeadAttention (and its cached
    subclass, which computes through the same `_compute_attention`)."""
    calls = []
    original = multi_head_attention.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(multi_head_attention, "scaled_dot_product_attention", spy)
    return calls


def _inputs(segments=False):
    padding = np.array([[1] * 8, [1] * 5 + [0] * 3], dtype=bool)
    inputs = {
        "token_ids": np.array([[3, 9, 4, 12, 40, 7, 1, 2], [5, 6, 7, 8, 9, 0, 0, 0]]),
        "padding_mask": padding,
    }
    if segments:
        inputs["segment_ids"] = np.array([[0] * 4 + [1] * 4, [0] * 8])
    return inputs


BACKBONES = {
    "bert": (
        lambda: keras_hub.models.BertBackbone(**TINY),
        True,
        "self_attention_layer",
        KERAS_MHA,
        "keras_selfattn.MultiHeadAttention",
    ),
    "gpt2": (
        lambda: keras_hub.models.GPT2Backbone(**TINY),
        False,
        "self_attention",
        HUB_CACHED,
        "keras_selfattn.CachedMultiHeadAttention",
    ),
}
# The blocks that become ours too: keras-hub's decoder (its encoder block
# builds no (T, T) mask, and stays).
BLOCKS = {"bert": None, "gpt2": (HUB_DECODER, "keras_selfattn.TransformerDecoder")}


def _attention(model):
    return [
        layer
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.MultiHeadAttention)
    ]


def _outputs(backbone, inputs):
    out = backbone(inputs)
    if isinstance(out, dict):  # BERT: sequence and pooled outputs
        return {k: to_numpy(v) for k, v in out.items()}
    return {"sequence_output": to_numpy(out)}


@pytest.mark.parametrize("name", list(BACKBONES), ids=list(BACKBONES))
def test_backbone_converts_in_place_with_the_same_outputs(name, kernel_calls):
    build, segments, attention_name, before_class, after_class = BACKBONES[name]
    backbone = build()
    inputs = _inputs(segments)
    before = _outputs(backbone, inputs)
    weights = [id(w) for w in backbone.weights]
    assert kernel_calls == []

    report = convert(backbone)

    expected, reasons = [], {f"now {after_class}"}
    for i in range(2):
        if BLOCKS[name]:
            expected.append((f"transformer_layer_{i}", BLOCKS[name][0]))
            reasons.add(f"now {BLOCKS[name][1]}")
        expected.append((f"transformer_layer_{i}/{attention_name}", before_class))
    assert [(e.path, e.layer_class) for e in report.converted] == expected
    assert {e.reason for e in report.converted} == reasons
    assert report.left_alone == ()
    if BLOCKS[name]:
        blocks = [backbone.get_layer(f"transformer_layer_{i}") for i in range(2)]
        assert all(type(b) is keras_selfattn.TransformerDecoder for b in blocks)
    assert [type(a).__name__ for a in _attention(backbone)] == [
        after_class.rsplit(".", 1)[-1]
    ] * 2
    assert all(
        type(a).__module__.startswith("keras_selfattn.") for a in _attention(backbone)
    )
    assert [id(w) for w in backbone.weights] == weights
    after = _outputs(backbone, inputs)
    assert len(kernel_calls) == 2  # one per block: our kernel ran
    assert after.keys() == before.keys()
    for key in before:
        _assert_same_outputs(name, after[key], before[key], inputs["padding_mask"])
    again = convert(backbone)  # twice: a no-op, every layer already ours
    assert again.converted == ()
    assert [e.path for e in again.left_alone] == [path for path, _ in expected]


def _assert_same_outputs(name, converted, original, padding):
    """The same outputs; at padded positions only where no decoder block was
    converted (ours outputs zeros there, keras-hub's what a padded query
    attended to; GPT-2's last layer norm then maps them to its bias)."""
    if BLOCKS[name] is None or converted.ndim != 3:
        assert_close(converted, original)
        return
    assert_close(converted[padding], original[padding])
    assert np.abs(converted[~padding] - original[~padding]).max() > 1e-3


def test_gpt2_causal_lm_generates_the_same_tokens_with_its_cache(kernel_calls):
    backbone = keras_hub.models.GPT2Backbone(**TINY)
    lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    lm.compile(sampler="greedy")
    prompt = {
        "token_ids": np.array([[5, 6, 7, 0, 0, 0, 0, 0], [11, 0, 0, 0, 0, 0, 0, 0]]),
        "padding_mask": np.array([[1, 1, 1] + [0] * 5, [1] + [0] * 7], dtype=bool),
    }
    before = lm.generate(prompt, stop_token_ids=None)
    assert kernel_calls == []
    report = convert(lm)
    assert len(report.converted) == 4  # 2 blocks, 2 attention layers
    after = lm.generate(prompt, stop_token_ids=None)
    # Traced (or run) through our kernel, on the cache: one query at a time
    # against all 8 cached keys.
    assert (2, 1, 2, 8) in {tuple(shape) for shape in kernel_calls}
    np.testing.assert_array_equal(after["token_ids"], before["token_ids"])
    np.testing.assert_array_equal(after["padding_mask"], before["padding_mask"])
    generated = after["token_ids"][0, 3:]
    assert len(set(generated.tolist())) > 1  # not one token repeated: a real check


_LOAD = """
import sys
import numpy as np
import keras
import keras_selfattn

assert "keras_hub" not in sys.modules, "import keras_selfattn imported keras_hub"
import keras_hub

def attention(model):
    return [type(a).__module__.split(".")[0] + "." + type(a).__name__
            for a in model._flatten_layers()
            if isinstance(a, keras.layers.MultiHeadAttention)]

inputs = dict(np.load(sys.argv[2]))
# A converted Keras functional model: it loads as ours, chunk_size and all.
model = keras.saving.load_model(sys.argv[1] + "/keras.keras")
np.save(sys.argv[1] + "/keras-loaded.npy",
        keras.ops.convert_to_numpy(model(inputs["x"])))
chunks = [a.chunk_size for a in model._flatten_layers()
          if isinstance(a, keras.layers.MultiHeadAttention)]
print("keras", attention(model), chunks)
for name, path in (("bert", sys.argv[1] + "/bert.keras"),
                   ("gpt2", sys.argv[1] + "/gpt2.keras")):
    model = keras.saving.load_model(path)
    loaded = attention(model)
    feed = {k: v for k, v in inputs.items() if k != "x"}
    if name == "gpt2":
        del feed["segment_ids"]
    out = model(feed)
    out = out["sequence_output"] if isinstance(out, dict) else out
    np.save(f"{sys.argv[1]}/{name}-loaded.npy", keras.ops.convert_to_numpy(out))
    keras_selfattn.convert(model)
    out = model(feed)
    out = out["sequence_output"] if isinstance(out, dict) else out
    np.save(f"{sys.argv[1]}/{name}-converted.npy", keras.ops.convert_to_numpy(out))
    print(name, loaded, attention(model))
"""


def _keras_model():
    """A functional model holding a functional model, Keras's layers only."""
    inputs = keras.Input(shape=(5, 8))
    inner = keras.Model(
        inputs, keras.layers.MultiHeadAttention(2, 4)(inputs, inputs), name="inner"
    )
    outputs = keras.layers.MultiHeadAttention(2, 4)(inner(inputs), inputs)
    return keras.Model(inputs, outputs)


# One fresh process for all three models (its start-up is most of the time);
# which classes load does not depend on the backend: the TensorFlow pass only.
@pytest.mark.backend_independent
def test_converted_models_save_and_load_in_a_fresh_process(tmp_path, subprocess_env):
    """A converted Keras model loads as ours. keras-hub backbones rebuild
    their blocks from their own constructor arguments: loaded, their
    attention is keras-hub's (and Keras's) again, with the saved weights;
    `convert` after loading makes it ours, with the same outputs."""
    inputs = _inputs(segments=True)
    inputs["x"] = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    model = _keras_model()
    convert(model, chunk_size=4)
    expected = {"keras": to_numpy(model(inputs["x"]))}
    model.save(tmp_path / "keras.keras")
    for name, (build, segments, *_) in BACKBONES.items():
        model = build()
        convert(model)
        expected[name] = _outputs(model, _inputs(segments))["sequence_output"]
        model.save(tmp_path / f"{name}.keras")
    np.savez(tmp_path / "inputs.npz", **inputs)
    result = subprocess.run(
        [sys.executable, "-c", _LOAD, str(tmp_path), str(tmp_path / "inputs.npz")],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    ours = "keras_selfattn.MultiHeadAttention"
    assert result.stdout.strip().splitlines()[-3:] == [
        f"keras ['{ours}', '{ours}'] [4, 4]",
        "bert ['keras.MultiHeadAttention', 'keras.MultiHeadAttention'] "
        "['keras_selfattn.MultiHeadAttention', 'keras_selfattn.MultiHeadAttention']",
        "gpt2 ['keras_hub.CachedMultiHeadAttention', "
        "'keras_hub.CachedMultiHeadAttention'] "
        "['keras_selfattn.CachedMultiHeadAttention', "
        "'keras_selfattn.CachedMultiHeadAttention']",
    ]
    assert_close(np.load(tmp_path / "keras-loaded.npy"), expected["keras"])
    padding = inputs["padding_mask"]
    for name in BACKBONES:
        loaded = np.load(tmp_path / f"{name}-loaded.npy")  # keras-hub's again
        _assert_same_outputs(name, expected[name], loaded, padding)
        assert_close(np.load(tmp_path / f"{name}-converted.npy"), expected[name])


class Custom(keras_hub.layers.CachedMultiHeadAttention):
    """A custom keras-hub attention layer: its own `call`."""

    def call(self, query, value, **kwargs):
        return super().call(query, value, **kwargs)


def test_a_subclass_of_keras_hubs_cached_attention_is_left_alone():
    layer = Custom(2, 8, name="custom")
    report = convert(layer)
    assert report.converted == ()
    assert [(e.path, e.reason) for e in report.left_alone] == [
        (
            "custom",
            f"a subclass of {HUB_CACHED} that overrides `call`: converting it "
            "would replace its class and drop its behaviour",
        )
    ]
    assert type(layer) is Custom


@pytest.mark.parametrize("built", [False, True], ids=["unbuilt", "built"])
def test_converted_hub_attention_is_the_layer_our_constructor_makes(built):
    """As for Keras's layer (tests/test_convert.py): keras-hub's cached
    attention, converted, has exactly the attributes of ours built from its
    config, with the same values."""
    theirs = keras_hub.layers.CachedMultiHeadAttention(2, 8, name="a")
    ours = keras_selfattn.CachedMultiHeadAttention.from_config(theirs.get_config())
    x = np.zeros((1, 4, 16), "float32")
    if built:
        theirs(x, x)
        ours(x, x)
    _assert_converts_to(theirs, ours)


def _assert_converts_to(theirs, ours):
    """`convert(theirs)` makes it an instance of `type(ours)` with exactly
    the attributes, values, call signature and config of `ours`."""
    convert(theirs)
    assert type(theirs) is type(ours)
    assert set(vars(theirs)) == set(vars(ours))
    assert plain_attributes(theirs) == plain_attributes(ours)
    assert theirs._call_signature == ours._call_signature
    assert theirs.get_config() == ours.get_config()


def test_converted_hub_decoder_is_the_block_our_constructor_makes():
    """keras-hub's decoder block, converted, has exactly the attributes of
    ours built from its config, with the same values, and computes as ours
    does with the same weights."""
    theirs = keras_hub.layers.TransformerDecoder(32, 2, name="d")
    ours = keras_selfattn.TransformerDecoder.from_config(theirs.get_config())
    x = np.zeros((1, 4, 16), "float32")
    theirs(x)
    ours(x)
    _assert_converts_to(theirs, ours)
    ours.set_weights(theirs.get_weights())
    assert_close(to_numpy(theirs(x + 1.0)), to_numpy(ours(x + 1.0)))


def test_an_unbuilt_hub_decoder_is_left_alone_until_it_is_built():
    # Keras keeps the `build` of the class a layer was made as: an unbuilt
    # block, re-classed, would build keras-hub's attention layers.
    block = keras_hub.layers.TransformerDecoder(32, 2, name="d")
    report = convert(block)
    assert report.converted == ()
    assert [(e.path, e.reason) for e in report.left_alone] == [
        (
            "d",
            "not built yet (its attention layers do not exist): call `convert` "
            "once the model is built (keras-hub's models are built when made)",
        )
    ]
    assert type(block) is keras_hub.layers.TransformerDecoder
    x = np.random.default_rng(0).normal(size=(1, 4, 16)).astype("float32")
    before = to_numpy(block(x))
    assert [e.path for e in convert(block).converted] == ["d", "self_attention"]
    assert type(block) is keras_selfattn.TransformerDecoder
    assert_close(to_numpy(block(x)), before)


class CustomDecoder(keras_hub.layers.TransformerDecoder):
    """A custom keras-hub decoder block: its own causal mask."""

    def _compute_self_attention_mask(self, *args, **kwargs):
        return super()._compute_self_attention_mask(*args, **kwargs)


def test_a_custom_decoder_block_or_one_with_custom_attention_is_left_alone():
    block = CustomDecoder(32, 2, name="custom")
    block(np.zeros((1, 4, 16), "float32"))
    report = convert(block)
    assert [(e.path, e.reason) for e in report.left_alone] == [
        (
            "custom",
            f"a subclass of {HUB_DECODER} that overrides "
            "`_compute_self_attention_mask`: converting it would replace its "
            "class and drop its behaviour",
        )
    ]
    assert type(block) is CustomDecoder
    # A block whose attention layer is a custom one stays keras-hub's too
    # (ours would call that layer with arguments it does not take).
    block = keras_hub.layers.TransformerDecoder(32, 2, name="plain")
    block(np.zeros((1, 4, 16), "float32"))
    block._self_attention_layer.__class__ = Custom
    report = convert(block)
    assert report.converted == ()
    assert report.left_alone[0].path == "plain"
    assert report.left_alone[0].reason == (
        f"its attention layer `{block._self_attention_layer.name}` "
        f"({Custom.__module__}.Custom) cannot become ours, and our block would "
        "call it with arguments it does not take"
    )
    assert type(block) is keras_hub.layers.TransformerDecoder
    # Nor one whose attention is ours but holds no cache (our plain
    # MultiHeadAttention): our block passes it the cache arguments.
    block = keras_hub.layers.TransformerDecoder(32, 2, name="uncached")
    block(np.zeros((1, 4, 16), "float32"))
    block._self_attention_layer.__class__ = keras_selfattn.MultiHeadAttention
    report = convert(block)
    assert report.converted == ()
    assert report.left_alone[0].reason == (
        f"its attention layer `{block._self_attention_layer.name}` "
        "(keras_selfattn.MultiHeadAttention) does not take `cache`, "
        "`cache_update_index`, which our block passes it"
    )
    assert type(block) is keras_hub.layers.TransformerDecoder


@pytest.mark.tensorflow_only
def test_a_converted_gpt2_builds_no_sequence_by_sequence_tensor():
    """keras-hub's decoder builds a (batch, T, T) int32 causal mask; converted
    with `chunk_size`, the whole GPT-2, forward and backward, builds no tensor
    with two sequence axes (7 tokens, 9 in blocks of 3: sizes no other axis
    of the tiny config has)."""
    import tensorflow as tf

    backbone = keras_hub.models.GPT2Backbone(**TINY, dropout=0.0)
    ids = np.array([[3, 9, 4, 12, 40, 7, 1], [5, 6, 7, 8, 0, 0, 0]])
    padding = ids != 0

    def shapes(dtype=None):
        def call(ids, padding):
            return backbone({"token_ids": ids, "padding_mask": padding})

        return traced_shapes(
            call, ids, padding, dtype=dtype, variables=backbone.trainable_variables
        )

    # The detector sees keras-hub's mask before.
    assert [2, 7, 7] in query_by_key(shapes(tf.int32), 7, (7,))
    convert(backbone, chunk_size=3)
    assert query_by_key(shapes(), 7, (7, 9)) == []
    assert [2, 7] in shapes(tf.bool)  # the padding, as a key mask


@pytest.mark.parametrize(
    "backbone",
    ["LlamaBackbone", "MistralBackbone", "GemmaBackbone"],
    ids=["llama", "mistral", "gemma"],
)
def test_an_attention_of_its_own_code_is_reported_left_alone(backbone):
    # keras-hub's Llama, Mistral and Gemma compute attention in classes of
    # their own: `convert` cannot make them ours, and used to say nothing.
    options = {
        "vocabulary_size": 50, "num_layers": 1, "num_query_heads": 4,
        "num_key_value_heads": 2, "hidden_dim": 16, "intermediate_dim": 32,
    }  # fmt: skip
    if backbone == "GemmaBackbone":
        options = {**options, "head_dim": 4}
    model = getattr(keras_hub.models, backbone)(**options)
    report = convert(model)
    assert report.converted == ()
    assert len(report.left_alone) == 1, report
    entry = report.left_alone[0]
    assert entry.layer_class.endswith("Attention") and "keras_hub" in entry.layer_class
    assert entry.reason.startswith("an attention of its own code")


def test_an_unbuilt_hub_encoder_is_reported_until_it_is_built():
    # Its attention layer exists only once it is built: it used to be
    # skipped without a word.
    block = keras_hub.layers.TransformerEncoder(32, 2, name="e")
    report = convert(block)
    assert report.converted == ()
    assert [(e.path, e.layer_class, e.reason) for e in report.left_alone] == [
        (
            "e",
            "keras_hub.layers.TransformerEncoder",
            "not built yet (its attention layers do not exist): call `convert` "
            "once the model is built (keras-hub's models are built when made)",
        )
    ]
    block(np.zeros((1, 4, 16), "float32"))
    report = convert(block)
    assert [e.path for e in report.converted] == ["self_attention_layer"]
    assert report.left_alone == ()


def test_a_hub_decoder_our_block_would_refuse_is_left_alone_or_refused():
    x = np.random.default_rng(0).normal(size=(1, 4, 8)).astype("float32")
    # Hidden 8 and 3 heads: keras-hub takes it (heads of size 2), our block
    # does not; its attention converts, the block stays keras-hub's.
    uneven = keras_hub.layers.TransformerDecoder(16, 3, name="d")
    before = to_numpy(uneven(x))
    report = convert(uneven)
    assert [(e.path, e.reason) for e in report.left_alone] == [
        (
            "d",
            "its hidden size (8) is not a multiple of its 3 heads, which "
            "keras_selfattn.TransformerDecoder requires",
        )
    ]
    assert [e.path for e in report.converted] == ["self_attention"]
    assert type(uneven) is keras_hub.layers.TransformerDecoder
    assert_close(to_numpy(uneven(x)), before)
    # `normalize_first=0`: keras-hub takes it, ours asks for a bool; the
    # converted block could not be loaded or cloned.
    falsy = keras_hub.layers.TransformerDecoder(16, 2, normalize_first=0, name="f")
    falsy(x)
    refused = f"^Cannot convert `f` \\({HUB_DECODER}\\): .*`normalize_first`"
    with pytest.raises(ValueError, match=refused + ", expected a boolean"):
        convert(falsy)
    assert type(falsy) is keras_hub.layers.TransformerDecoder
