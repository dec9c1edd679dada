"""keras_selfattn.convert on models built from Keras's own attention layers.

keras-hub models, and saving and loading converted models in a fresh
process (Keras's and keras-hub's in one process): tests/test_convert_hub.py.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

import keras_selfattn
from keras_selfattn import ConversionReport, convert
from keras_selfattn.convert import Entry
from keras_selfattn.layers import grouped_query_attention, multi_head_attention
from tests.helpers import assert_close, needs_keras, plain_attributes, to_numpy

KERAS_MHA = "keras.layers.MultiHeadAttention"
ALREADY = "already computes through keras_selfattn's kernel"


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the layers' calls of the kernel, by layer class name."""
    calls = []
    for module in (multi_head_attention, grouped_query_attention):
        original = module.scaled_dot_product_attention

        def spy(*args, _original=original, _module=module.__name__, **kwargs):
            calls.append(_module.rsplit(".", 1)[-1])
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, "scaled_dot_product_attention", spy)
    return calls


class Block(keras.layers.Layer):
    """A layer that holds a Keras attention layer (as keras-hub's blocks do)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.attention = keras.layers.MultiHeadAttention(2, 4, name="attention")
        self.dense = keras.layers.Dense(8)

    def call(self, x):
        return self.dense(x + self.attention(x, x, use_causal_mask=True))


class Stack(keras.Model):
    """A subclassed model: a list of blocks and a bare attention layer."""

    def __init__(self):
        super().__init__()
        self.blocks = [Block(name=f"block_{i}") for i in range(2)]
        self.cross = keras.layers.MultiHeadAttention(1, 8, name="cross")

    def call(self, x):
        for block in self.blocks:
            x = block(x)
        return self.cross(x, x)


def _functional():
    inputs = keras.Input(shape=(5, 8))
    x = keras.layers.MultiHeadAttention(2, 4, name="mha")(inputs, inputs)
    inner_inputs = keras.Input(shape=(5, 8))
    inner = keras.Model(inner_inputs, Block(name="block")(inner_inputs), name="inner")
    return keras.Model(inputs, inner(x), name="outer")


def _sequential():
    return keras.Sequential(
        [keras.Input(shape=(5, 8)), Block(name="block_a"), Block(name="block_b")]
    )


MODELS = {
    "functional-nested": (_functional, ["mha", "inner/block/attention"]),
    "sequential": (_sequential, ["block_a/attention", "block_b/attention"]),
    "subclassed": (
        Stack,
        ["block_0/attention", "block_1/attention", "cross"],
    ),
}


def _data(batch=2):
    return np.random.default_rng(0).normal(size=(batch, 5, 8)).astype("float32")


def _attention(model):
    return [
        layer
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.MultiHeadAttention)
    ]


@pytest.mark.parametrize("kind", list(MODELS), ids=list(MODELS))
def test_converts_every_attention_layer_keeping_weights_and_outputs(kind, kernel_calls):
    build, paths = MODELS[kind]
    model = build()
    x = _data()
    before = to_numpy(model(x))
    weights = [id(w) for w in model.weights]
    assert kernel_calls == []  # Keras's own attention ran

    report = convert(model)

    assert [e.path for e in report.converted] == paths
    assert {(e.layer_class, e.reason) for e in report.converted} == {
        (KERAS_MHA, "now keras_selfattn.MultiHeadAttention")
    }
    assert report.left_alone == ()
    assert all(
        type(layer) is keras_selfattn.MultiHeadAttention for layer in _attention(model)
    )
    assert [id(w) for w in model.weights] == weights
    after = model(x)
    assert kernel_calls == ["multi_head_attention"] * len(paths)
    assert_close(after, before)


def test_an_unbuilt_model_converts_and_builds_as_ours(kernel_calls):
    model = Stack()
    report = convert(model)
    assert len(report.converted) == 3
    assert not any(layer.built for layer in _attention(model))
    x = _data()
    model(x)  # builds our layers
    assert all(layer.built for layer in _attention(model))
    reference = Stack()  # Keras's layers, with the same weights
    reference(x)
    reference.set_weights(model.get_weights())
    kernel_calls.clear()
    assert_close(model(x), reference(x))
    assert kernel_calls == ["multi_head_attention"] * 3
    # Our build ran (Keras's Layer.__new__ had bound Keras's to the
    # instance): the projections hand masks on, and shapes are checked.
    for layer in _attention(model):
        assert layer._query_dense.supports_masking
    unbuilt = keras.layers.MultiHeadAttention(2, 4)
    convert(unbuilt)
    with pytest.raises(ValueError, match="argument `value`, expected the rank"):
        unbuilt(np.zeros((2, 5, 8), "float32"), np.zeros((2, 3, 6, 8), "float32"))


@pytest.mark.parametrize(
    "model",
    [None, "bert", keras.layers.MultiHeadAttention],
    ids=["none", "string", "class"],
)
def test_a_model_that_is_not_a_keras_layer_is_a_value_error(model):
    with pytest.raises(ValueError, match=r"argument `model`, expected a Keras model"):
        convert(model)


def test_predict_traces_the_converted_layers_again(kernel_calls):
    """`convert` resets the compiled functions, as `model.quantize` does."""
    model = _functional()
    x = _data()
    before = model.predict(x, verbose=0)
    assert kernel_calls == []
    convert(model)
    after = model.predict(x, verbose=0)
    assert kernel_calls  # traced (or run eagerly) through the kernel
    assert_close(after, before)


def test_converting_twice_changes_nothing(kernel_calls):
    model = _functional()
    x = _data()
    first = convert(model)
    out = to_numpy(model(x))
    classes = [type(layer) for layer in _attention(model)]
    second = convert(model)
    assert second.converted == ()
    assert second.left_alone == tuple(
        Entry(e.path, "keras_selfattn.MultiHeadAttention", ALREADY)
        for e in first.converted
    )
    assert [type(layer) for layer in _attention(model)] == classes
    np.testing.assert_array_equal(to_numpy(model(x)), out)


class Talking(keras.layers.MultiHeadAttention):
    """A custom attention layer: its own `_compute_attention`."""

    def _compute_attention(self, query, key, value, *args, **kwargs):
        output, scores = super()._compute_attention(query, key, value, *args, **kwargs)
        return output * 2.0, scores


class Configured(keras.layers.MultiHeadAttention):
    """A subclass that changes no computation, only what it saves."""

    def get_config(self):
        return {**super().get_config(), "note": "mine"}


@pytest.mark.backend_independent
def test_leaves_custom_subclasses_and_our_layers_alone_with_the_reason():
    inputs = keras.Input(shape=(5, 8))
    x = Talking(2, 4, name="talking")(inputs, inputs)
    x = Configured(2, 4, name="configured")(x, x)
    x = keras_selfattn.MultiHeadAttention(2, 4, name="ours")(x, x)
    x = keras.layers.MultiHeadAttention(2, 4, name="keras")(x, x)
    model = keras.Model(inputs, x)
    report = convert(model)
    assert isinstance(report, ConversionReport)
    assert report.converted == (
        Entry("keras", KERAS_MHA, "now keras_selfattn.MultiHeadAttention"),
    )
    end = ": converting it would replace its class and drop its behaviour"
    assert report.left_alone == (
        Entry(
            "talking",
            "tests.test_convert.Talking",
            f"a subclass of {KERAS_MHA} that overrides `_compute_attention`{end}",
        ),
        Entry(
            "configured",
            "tests.test_convert.Configured",
            f"a subclass of {KERAS_MHA} that adds to it{end}",
        ),
        Entry("ours", "keras_selfattn.MultiHeadAttention", ALREADY),
    )
    assert type(model.get_layer("talking")) is Talking
    assert type(model.get_layer("configured")) is Configured
    assert str(report).splitlines()[:3] == [
        "converted 1, left alone 3",
        f"converted: keras ({KERAS_MHA})",
        "    now keras_selfattn.MultiHeadAttention",
    ]


def test_chunk_size_takes_the_chunked_path(chunked_calls):
    model = _functional()
    x = _data()
    before = to_numpy(model(x))
    convert(model, chunk_size=2)
    assert [layer.chunk_size for layer in _attention(model)] == [2, 2]
    after = model(x)
    assert chunked_calls == [2, 2]
    assert_close(after, before)


@pytest.mark.backend_independent
def test_a_layer_that_cannot_take_chunk_size_raises_before_any_change():
    inputs = keras.Input(shape=(5, 8))
    x = keras.layers.MultiHeadAttention(2, 4, name="first")(inputs, inputs)
    x = keras.layers.MultiHeadAttention(2, 4, dropout=0.1, name="dropping")(x, x)
    model = keras.Model(inputs, x)
    with pytest.raises(ValueError) as error:
        convert(model, chunk_size=4)
    assert str(error.value) == (
        f"Cannot convert `dropping` ({KERAS_MHA}): The chunked path "
        "(`chunk_size`) does not support dropout on the attention weights. Set "
        "`dropout=0.0` or `chunk_size=None`. Received: chunk_size=4, dropout=0.1"
    )
    assert all(
        type(layer) is keras.layers.MultiHeadAttention for layer in _attention(model)
    )
    assert len(convert(model).converted) == 2  # without chunk_size it converts


CONFIGS = {
    "defaults": {},
    "value-dim-axes-window": {
        "value_dim": 3,
        "attention_axes": (1,),
        "use_bias": False,
        "sliding_window": 2,
    },
}


@pytest.mark.parametrize("built", [False, True], ids=["unbuilt", "built"])
@pytest.mark.parametrize("options", list(CONFIGS.values()), ids=list(CONFIGS))
def test_a_converted_layer_is_the_layer_our_constructor_makes(built, options):
    """What makes re-classing safe: the converted layer has exactly the
    attributes of ours built from the same config, with the same values."""
    from tests.helpers import for_this_keras

    options = for_this_keras(options)
    keras_layer = keras.layers.MultiHeadAttention(2, 4, name="a", **options)
    ours = keras_selfattn.MultiHeadAttention.from_config(keras_layer.get_config())
    x = _data()
    if built:
        # Scores: Keras's explicit path (its fused JAX path rejects
        # value_dim != key_dim).
        # Both alike (Keras 3.7 keeps the flag as state).
        keras_layer(x, x, return_attention_scores=True)
        ours(x, x, return_attention_scores=True)
    convert(keras_layer)
    assert set(vars(keras_layer)) == set(vars(ours))
    assert plain_attributes(keras_layer) == plain_attributes(ours)
    assert keras_layer._call_signature == ours._call_signature
    if built:
        projections = [d.supports_masking for d in keras_layer._projections()]
        assert projections == [d.supports_masking for d in ours._projections()]
    assert keras_layer.get_config() == ours.get_config()


@needs_keras("3.15", "keras.layers.GroupQueryAttention with use_gate, sliding_window")
def test_converts_group_query_attention(kernel_calls):
    inputs = keras.Input(shape=(5, 8))
    x = keras.layers.GroupQueryAttention(4, 4, 2, name="gqa")(inputs, inputs)
    model = keras.Model(inputs, x)
    x = _data()
    before = to_numpy(model(x))
    ours = keras_selfattn.GroupQueryAttention.from_config(
        model.get_layer("gqa").get_config()
    )
    ours(x, x)
    report = convert(model)
    assert report.converted == (
        Entry(
            "gqa",
            "keras.layers.GroupQueryAttention",
            "now keras_selfattn.GroupQueryAttention",
        ),
    )
    layer = model.get_layer("gqa")
    assert type(layer) is keras_selfattn.GroupQueryAttention
    assert set(vars(layer)) == set(vars(ours))
    assert plain_attributes(layer) == plain_attributes(ours)
    kernel_calls.clear()
    assert_close(model(x), before)
    assert kernel_calls == ["grouped_query_attention"]


def test_numpy_numbers_that_keras_takes_convert_and_clone():
    # Keras's layer takes `dropout=np.float32(0.1)`; ours refused it, so the
    # converted model failed in `clone_model` (which rebuilds from the config).
    inputs = keras.Input(shape=(4, 8))
    layer = keras.layers.MultiHeadAttention(2, 4, dropout=np.float32(0.1))
    model = keras.Model(inputs, layer(inputs, inputs))
    assert convert(model).converted
    x = np.random.default_rng(0).normal(size=(2, 4, 8)).astype("float32")
    clone = keras.models.clone_model(model)
    clone.set_weights(model.get_weights())
    assert_close(clone(x), model(x), atol=1e-6)
    assert isinstance(clone.layers[1], keras_selfattn.MultiHeadAttention)
    ours = keras_selfattn.SelfAttention(
        4, dropout=np.float32(0.1), scale=np.float32(0.5)
    )
    assert ours.get_config()["scale"] == 0.5


def _one_mha(**options):
    inputs = keras.Input(shape=(4, 8))
    layer = keras.layers.MultiHeadAttention(2, 4, name="mha", **options)
    return keras.Model(inputs, layer(inputs, inputs)), layer


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "options, message",
    [
        ({"seed": 2**40}, "`seed`, expected an integer in the range"),
        ({"dropout": 1.0}, r"`dropout`, expected a float in the range \[0, 1\)"),
    ],
    ids=["seed-beyond-our-range", "dropout-one"],
)
def test_a_layer_our_class_would_refuse_raises_before_any_change(options, message):
    # Keras takes these; ours does not, so the converted model could not be
    # loaded or cloned (both make the layer again from its configuration),
    # and with dropout 1.0 not even called.
    model, layer = _one_mha(**options)
    with pytest.raises(
        ValueError, match=f"^Cannot convert `mha` \\({KERAS_MHA}\\): .*{message}"
    ):
        convert(model)
    assert type(layer) is keras.layers.MultiHeadAttention


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "chunk_size", [0, -3, "abc", 2.5], ids=["zero", "negative", "string", "float"]
)
def test_chunk_size_is_checked_even_where_nothing_converts(chunk_size):
    inputs = keras.Input(shape=(4, 8))
    model = keras.Model(inputs, keras.layers.Dense(8)(inputs))
    with pytest.raises(ValueError, match="`chunk_size`, expected a positive integer"):
        convert(model, chunk_size=chunk_size)


def test_converting_again_with_a_chunk_size_sets_it_on_our_layers(chunked_calls):
    # A model converted earlier, or loaded as ours: `chunk_size` used to be
    # dropped without a word for layers that were already ours.
    model, layer = _one_mha()
    x = np.random.default_rng(0).normal(size=(2, 4, 8)).astype("float32")
    before = to_numpy(model.predict(x, verbose=0))
    assert convert(model).converted and layer.chunk_size is None
    report = convert(model, chunk_size=2)
    assert report.converted == (
        Entry(
            "mha",
            "keras_selfattn.MultiHeadAttention",
            "already computes through keras_selfattn's kernel; chunk_size None -> 2",
        ),
    )
    assert layer.chunk_size == 2 and report.left_alone == ()
    assert_close(model.predict(x, verbose=0), before)  # traced again: chunked
    assert chunked_calls == [2]
    assert convert(model, chunk_size=2).converted == ()  # the same: left alone
    # Without a chunk_size, a layer already ours keeps its own.
    assert convert(model).converted == () and layer.chunk_size == 2


@pytest.mark.backend_independent
def test_another_attention_of_its_own_code_is_reported_left_alone():
    inputs = keras.Input(shape=(4, 8))
    x = keras.layers.Attention(name="luong")([inputs, inputs])
    report = convert(keras.Model(inputs, x))
    assert report.converted == ()
    assert [(e.path, e.layer_class) for e in report.left_alone] == [
        ("luong", "keras.src.layers.attention.attention.Attention")
    ]
    assert report.left_alone[0].reason.startswith(
        "an attention of its own code, not a subclass of a class `convert` knows"
    )


@needs_keras("3.15", "keras.layers.GroupQueryAttention")
def test_numpy_integers_that_keras_takes_convert_and_clone():
    # Keras's GroupQueryAttention takes `num_query_heads=np.int64(4)`; ours
    # refused it, so the converted model failed in `clone_model`.
    inputs = keras.Input(shape=(4, 8))
    layer = keras.layers.GroupQueryAttention(4, np.int64(4), np.int64(2))
    model = keras.Model(inputs, layer(inputs, inputs))
    assert convert(model).converted
    clone = keras.models.clone_model(model)
    assert isinstance(clone.layers[1], keras_selfattn.GroupQueryAttention)
    block = keras_selfattn.TransformerEncoder(
        np.int64(8), np.int64(2), layer_norm_epsilon=np.float32(1e-5)
    )
    assert block.get_config()["num_heads"] == 2
    # It builds and runs: Keras's attention layer inside takes Python ints.
    assert tuple(block(np.zeros((1, 3, 4), "float32")).shape) == (1, 3, 4)
    ours = keras_selfattn.MultiHeadAttention(np.int64(2), np.int64(4))
    x = np.zeros((1, 3, 8), "float32")
    assert tuple(ours(x, x).shape) == (1, 3, 8)


class _Penalty(keras.regularizers.Regularizer):
    """A regularizer without `get_config` (Keras's base raises
    `NotImplementedError`): the layer's own config fails."""

    def __call__(self, weights):
        return 0.01 * keras.ops.sum(weights**2)


class _NoConfig(keras.constraints.Constraint):
    """A constraint without `get_config`: the layer's own config fails."""

    def __call__(self, weights):
        return weights

    def get_config(self):
        raise NotImplementedError("no config")


@pytest.mark.backend_independent
def test_layers_whose_config_does_not_serialise_still_convert():
    # `convert` checks a layer's configuration by our constructor's checks
    # alone; a trial construction from the config refused these (and drew
    # from Python's random generator: the next layer's weights changed).
    import random

    inputs = keras.Input(shape=(4, 8))
    x = keras.layers.MultiHeadAttention(2, 4, kernel_regularizer=_Penalty())(
        inputs, inputs
    )
    x = keras.layers.MultiHeadAttention(2, 4, bias_constraint=_NoConfig())(x, x)
    model = keras.Model(inputs, x)
    state = random.getstate()
    report = convert(model)
    assert len(report.converted) == 2 and report.left_alone == ()
    assert random.getstate() == state


class WrapperAttention(keras.layers.Layer):
    """A layer named like an attention that holds a Keras one (as keras-hub's
    `DINOV2Attention` does)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.attention = keras.layers.MultiHeadAttention(2, 4, name="inner")

    def call(self, x):
        return self.attention(x, x)


@pytest.mark.backend_independent
def test_a_layer_that_holds_an_attention_convert_knows_is_not_reported():
    inputs = keras.Input(shape=(4, 8))
    model = keras.Model(inputs, WrapperAttention(name="wrapper")(inputs))
    report = convert(model)
    assert [e.path for e in report.converted] == ["wrapper/inner"]
    assert report.left_alone == ()
