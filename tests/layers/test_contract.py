"""Every layer's contract: shapes, models, compilation, masks, config, saving,
precision. Runs over `tests.layers.contract.CASES`."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

import keras_selfattn
from keras_selfattn.layers.grouped_query_attention import ON_THIS_KERAS
from tests.helpers import BACKEND, for_this_keras, output_and_grads, to_numpy
from tests.layers.contract import CASES, FEATURES, VOCAB

SEQ = 6


def _params(cases):
    return pytest.mark.parametrize("case", cases, ids=[c.name for c in cases])


all_cases = _params(CASES)
scoring_cases = _params([c for c in CASES if c.scores])
sequential_cases = _params([c for c in CASES if c.sequential])
sequence_cases = _params([c for c in CASES if not c.pools])
feature_cases = _params([c for c in CASES if not c.ids])


def _expected_shape(case, batch, seq):
    if case.pools:
        return (batch, case.output_dim)
    return (batch, seq, case.output_dim)


def _input(case, seq=None):
    if case.ids:
        return keras.Input((seq,), dtype="int32")
    return keras.Input((seq, FEATURES))


def _data(case, rng, batch=2, seq=SEQ):
    if case.ids:
        return rng.integers(1, VOCAB, size=(batch, seq)).astype("int32")
    return rng.normal(size=(batch, seq, FEATURES)).astype("float32")


def _padded_tokens(rng, batch=3, seq=SEQ):
    tokens = rng.integers(1, VOCAB, size=(batch, seq)).astype("int32")
    tokens[0, 4:] = 0
    tokens[1, 2:] = 0
    return tokens


def _masked_model(case, **call_kwargs):
    """Token ids -> (Embedding(mask_zero) ->) the layer: the Keras mask flows in."""
    tokens = keras.Input((None,), dtype="int32")
    x = tokens
    if not case.ids:
        x = keras.layers.Embedding(VOCAB, FEATURES, mask_zero=True)(x)
    layer = case.make()
    return keras.Model(tokens, case.apply(layer, x, **call_kwargs)), layer


# -------------------------------------------------------------------- shapes


@all_cases
def test_symbolic_call_with_unknown_batch_and_length(case):
    inputs = _input(case)
    outputs = case.apply(case.make(), inputs)
    assert tuple(outputs.shape) == _expected_shape(case, None, None)


@all_cases
def test_compute_output_shape_matches_call(case, rng):
    layer = case.make()
    x = _data(case, rng)
    out = case.apply(layer, x)
    assert tuple(out.shape) == _expected_shape(case, 2, SEQ)
    shapes = (x.shape,) if case.sequential else (x.shape, x.shape)
    assert tuple(layer.compute_output_shape(*shapes)) == tuple(out.shape)


@scoring_cases
def test_symbolic_scores_shape(case):
    _, scores = case.apply(case.make(), _input(case), return_attention_scores=True)
    rank = 3 if case.pools else 4
    assert len(scores.shape) == rank
    assert scores.shape[0] is None and set(scores.shape[2:]) == {None}


# ------------------------------------------------------------------- models


@sequential_cases
def test_sequential_model(case, rng):
    model = keras.Sequential([_input(case, seq=SEQ), case.make()])
    x = _data(case, rng)
    assert model.predict(x, verbose=0).shape == _expected_shape(case, 2, SEQ)


@all_cases
def test_summary_of_a_subclassed_model_holding_the_layer(case, rng):
    class Holder(keras.Model):
        def __init__(self):
            super().__init__()
            self.inner = case.make()

        def call(self, x):
            return case.apply(self.inner, x)

    model = Holder()
    model(_data(case, rng))
    lines = []
    model.summary(print_fn=lambda line, **kwargs: lines.append(line))
    assert model.inner.name in "\n".join(lines)


@pytest.mark.tensorflow_only
@all_cases
def test_inside_tf_function(case, rng):
    import tensorflow as tf

    layer = case.make()
    x = _data(case, rng)
    eager = case.apply(layer, x)
    spec = tf.TensorSpec((None,) * (x.ndim - 1) + x.shape[-1:], x.dtype)
    if case.ids:
        spec = tf.TensorSpec((None, None), x.dtype)

    @tf.function(input_signature=[spec])
    def run(t):
        return case.apply(layer, t)

    np.testing.assert_allclose(run(x).numpy(), to_numpy(eager), atol=1e-6)


def _fit_task(case, rng, n):
    """Inputs and a learnable target: the mean of the first feature over time
    (or the share of token ids below VOCAB / 2)."""
    x = _data(case, rng, batch=n)
    if case.ids:
        return x, (x < VOCAB // 2).mean(axis=1, keepdims=True).astype("float32")
    return x, x[:, :, :1].mean(axis=1)


def _fit_model(case):
    inputs = _input(case, seq=SEQ)
    hidden = case.apply(case.make(), inputs)
    if not case.pools:
        hidden = keras.layers.GlobalAveragePooling1D()(hidden)
    return keras.Model(inputs, keras.layers.Dense(1)(hidden))


@pytest.mark.slow
@all_cases
def test_fit_with_jit_compile_lowers_the_loss(case, rng):
    x, y = _fit_task(case, rng, 64)
    model = _fit_model(case)
    model.compile(
        optimizer=keras.optimizers.Adam(0.03),
        loss="mse",
        # torch.compile takes minutes per model on CPU: see the next test.
        jit_compile=BACKEND != "torch",
    )
    # Keras turns jit_compile off, quietly, for a layer without XLA support.
    assert model.jit_compile == (BACKEND != "torch")
    history = model.fit(x, y, epochs=8, batch_size=16, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses


if BACKEND == "torch":
    # jit_compile=True on the PyTorch backend is torch.compile, which takes
    # minutes per model on CPU: one layer stands for all there. On the other
    # backends the test above compiles every case.

    @pytest.mark.slow
    def test_torch_compile_fit_lowers_the_loss(rng):
        case = CASES[0]
        x, y = _fit_task(case, rng, 32)
        model = _fit_model(case)
        model.compile(keras.optimizers.Adam(0.01), loss="mse", jit_compile=True)
        assert model.jit_compile
        history = model.fit(x, y, epochs=6, batch_size=32, verbose=0)
        losses = history.history["loss"]
        assert losses[-1] < 0.5 * losses[0], losses


# -------------------------------------------------------------------- masks


class _MaskProbe(keras.layers.Layer):
    """Outputs the Keras mask it receives as floats (-1 where there is none)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        shape = keras.ops.shape(inputs)[:2]
        if mask is None:
            return keras.ops.full(shape, -1.0)
        return keras.ops.cast(mask, "float32")

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:2])


@all_cases
def test_keras_mask_is_handed_on(case, rng):
    model, _ = _masked_model(case)
    probe = keras.Model(model.input, _MaskProbe()(model.output))
    tokens = _padded_tokens(rng)
    received = to_numpy(probe(tokens))
    if case.pools:  # The time axis is gone: no mask goes on.
        np.testing.assert_array_equal(received, -1.0)
    else:  # Exactly the input's padding mask.
        np.testing.assert_array_equal(received, (tokens != 0).astype("float32"))


@scoring_cases
def test_padded_keys_get_exactly_zero_weight(case, rng):
    model, _ = _masked_model(case, return_attention_scores=True)
    _, scores = model(_padded_tokens(rng))
    scores = to_numpy(scores)
    np.testing.assert_array_equal(scores[0, ..., 4:], 0.0)
    np.testing.assert_array_equal(scores[1, ..., 2:], 0.0)
    # Real queries' weights still sum to one over the real keys.
    real_queries = scores[1, :, :2] if scores.ndim == 4 else scores[1]
    np.testing.assert_allclose(real_queries.sum(-1), 1.0, atol=1e-5)


@sequence_cases
def test_padded_positions_output_zeros(case, rng):
    model, _ = _masked_model(case)
    out = to_numpy(model(_padded_tokens(rng)))
    np.testing.assert_array_equal(out[0, 4:], 0.0)
    np.testing.assert_array_equal(out[1, 2:], 0.0)
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize(
    "shape", [(2, 0), (0, SEQ)], ids=["empty_sequence", "empty_batch"]
)
@all_cases
def test_empty_sequence_or_batch_with_a_keras_mask(case, shape):
    # An empty sequence (or batch) through a Keras mask crashed inside the
    # backends: the maximum of an empty tensor, an empty grouped matmul.
    model, _ = _masked_model(case)
    out = to_numpy(model(np.zeros(shape, "int32")))
    assert out.shape == _expected_shape(case, *shape)
    assert np.all(np.isfinite(out))
    if not case.pools:
        return
    # A pooled empty sequence is what a fully padded one pools to.
    padded = to_numpy(model(np.zeros((shape[0], 3), "int32")))
    np.testing.assert_allclose(out, padded, atol=1e-6)


def _mask_kwargs(case, mask):
    if case.sequential:
        return {"mask": mask}
    return {"query_mask": mask, "value_mask": mask}


class _KerasMask(keras.layers.Layer):
    """Passes `x` on with `mask` as its Keras mask, whatever `x` holds."""

    def call(self, inputs):
        return inputs[0]

    def compute_mask(self, inputs, mask=None):
        return keras.ops.cast(inputs[1], "bool")

    def compute_output_shape(self, input_shape):
        return input_shape[0]


def _with_keras_mask(case, layer):
    """(features, padding mask) -> the layer, the mask given as a Keras mask."""
    x = keras.Input((SEQ, FEATURES))
    mask = keras.Input((SEQ,), dtype="bool")
    return keras.Model([x, mask], case.apply(layer, _KerasMask()([x, mask])))


# What padding holds: large finite values, or NaN and inf (a float16
# overflow upstream, uninitialised padding), which only a select keeps out.
_FILLS = ("large", "nan_inf")


def _padded_features(rng, fill):
    """(features, the same with other padding, padding mask)."""
    mask = _padded_tokens(rng) != 0
    mask[2, :2] = False  # padding first too, which causal queries see
    x = rng.normal(size=(*mask.shape, FEATURES)).astype("float32")
    other = x.copy()
    if fill == "large":
        other[~mask] = rng.normal(size=other[~mask].shape) * 100
    else:
        other[~mask] = rng.choice([np.nan, np.inf, -np.inf], other[~mask].shape)
    return x, other, mask


@feature_cases
@pytest.mark.parametrize("fill", _FILLS)
@pytest.mark.parametrize("given", ["as_argument", "as_keras_mask"])
def test_padding_content_does_not_change_real_positions(case, given, fill, rng):
    # TokenAndPositionEmbedding is not a case: it makes the mask from the
    # padding id, so its padded positions hold nothing else.
    x, other, mask = _padded_features(rng, fill)
    layer = case.make()
    if given == "as_argument":
        a = to_numpy(case.apply(layer, x, **_mask_kwargs(case, mask)))
        b = to_numpy(case.apply(layer, other, **_mask_kwargs(case, mask)))
    else:
        model = _with_keras_mask(case, layer)
        a, b = to_numpy(model([x, mask])), to_numpy(model([other, mask]))
    real = slice(None) if case.pools else mask
    np.testing.assert_allclose(a[real], b[real], atol=1e-5)
    assert np.all(np.isfinite(b))
    if not case.pools:
        np.testing.assert_array_equal(b[~mask], 0.0)
    if fill == "large":
        assert not np.allclose(a, to_numpy(case.apply(layer, other)), atol=1e-3)


@feature_cases
def test_nan_and_inf_padding_leave_input_gradients_finite_and_unchanged(case, rng):
    x, other, mask = _padded_features(rng, "nan_inf")
    layer = case.make()
    kwargs = _mask_kwargs(case, mask)
    case.apply(layer, x, **kwargs)  # Builds the layer outside any trace.
    upstream = rng.normal(size=to_numpy(case.apply(layer, x, **kwargs)).shape)
    upstream = upstream.astype("float32")

    def fn(inputs):
        return case.apply(layer, inputs, **kwargs)

    _, (want,) = output_and_grads(fn, (x,), upstream)
    _, (got,) = output_and_grads(fn, (other,), upstream)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got[mask], want[mask], atol=1e-5)
    np.testing.assert_array_equal(got[~mask], 0.0)


@feature_cases
def test_mask_of_wrong_shape_raises(case, rng):
    x = _data(case, rng)
    bad = np.ones((2, SEQ + 1), dtype=bool)
    with pytest.raises(ValueError, match="mask"):
        case.apply(case.make(), x, **_mask_kwargs(case, bad))


@feature_cases
def test_a_0_1_or_additive_padding_mask_is_read_or_refused(case, rng):
    # The layers cast masks to bool once: an additive mask (0 where real,
    # -inf where padded) then let every query see only the padding.
    x, _, mask = _padded_features(rng, "large")
    layer = case.make()
    want = to_numpy(case.apply(layer, x, **_mask_kwargs(case, mask)))
    for dtype in ("int32", "float32"):
        kwargs = _mask_kwargs(case, mask.astype(dtype))
        np.testing.assert_array_equal(to_numpy(case.apply(layer, x, **kwargs)), want)
    additive = np.where(mask, 0.0, -np.inf).astype("float32")
    with pytest.raises(ValueError, match=r"mask`.*would read inverted"):
        case.apply(layer, x, **_mask_kwargs(case, additive))


def _attention_mask_argument(case) -> str | None:
    """The call argument of a (batch, q_len, k_len) mask, if the layer has one."""
    names = inspect.signature(case.layer_class.call).parameters
    found = [n for n in ("attention_mask", "decoder_attention_mask") if n in names]
    return found[0] if found else None


@_params([c for c in CASES if _attention_mask_argument(c)])
def test_a_0_1_or_additive_attention_mask_is_read_or_refused(case, rng):
    name = _attention_mask_argument(case)
    x = _data(case, rng)
    causal = np.tril(np.ones((2, SEQ, SEQ), bool))
    layer = case.make()
    want = to_numpy(case.apply(layer, x, **{name: causal}))
    got = to_numpy(case.apply(layer, x, **{name: causal.astype("float32")}))
    np.testing.assert_array_equal(got, want)
    additive = np.where(causal, 0.0, -np.inf).astype("float32")
    with pytest.raises(ValueError, match=rf"`{name}`.*would read inverted"):
        case.apply(layer, x, **{name: additive})


@feature_cases
@pytest.mark.parametrize("call", ["eager", "symbolic"])
def test_a_call_on_other_features_than_built_is_named(case, call, rng):
    # It failed deep in the backend (a matmul or reshape of the projections),
    # or, called symbolically, only when the model ran.
    layer = case.make()
    case.apply(layer, _data(case, rng))  # built for FEATURES
    x = keras.Input((SEQ, FEATURES + 1))
    if call == "eager":
        x = rng.normal(size=(2, SEQ, FEATURES + 1)).astype("float32")
    with pytest.raises(
        ValueError,
        match=rf"expected a last dimension of {FEATURES}, the size the layer "
        rf"was built for \(\w+_shape=\((2|None), {SEQ}, {FEATURES}\)\)",
    ):
        case.apply(layer, x)


@all_cases
def test_input_of_wrong_rank_raises(case):
    if case.ids:
        bad, expected = np.zeros((2, SEQ, 1), "int32"), "2-D"
    else:
        bad, expected = np.zeros((2, FEATURES), "float32"), "3-D"
    with pytest.raises(ValueError, match=expected):
        case.apply(case.make(), bad)


# ----------------------------------------------------------------- config


def _constructor_arguments(cls):
    parameters = inspect.signature(cls.__init__).parameters.values()
    return [p for p in parameters if p.name not in ("self", "kwargs")]


@pytest.mark.backend_independent
@all_cases
def test_every_constructor_argument_round_trips_through_get_config(case):
    cls = case.layer_class
    arguments = _constructor_arguments(cls)
    # The floor's Keras lacks some (CachedMultiHeadAttention has its constructor).
    if issubclass(cls, keras_selfattn.MultiHeadAttention):
        takes = for_this_keras(dict.fromkeys(p.name for p in arguments))
        arguments = [p for p in arguments if p.name in takes]
    assert {p.name for p in arguments} == set(case.arguments), (
        "the case must give a value for every constructor argument"
    )
    required = {
        p.name: case.arguments[p.name] for p in arguments if p.default is p.empty
    }
    default_config = cls(**required).get_config()
    for p in arguments:
        layer = cls(**{**required, p.name: case.arguments[p.name]})
        config = layer.get_config()
        if p.default is p.empty:
            assert config[p.name] == case.arguments[p.name], p.name
        else:  # A non-default value shows in the config: it is kept.
            assert config[p.name] != default_config[p.name], p.name
        clone = cls.from_config(config)
        assert clone.get_config() == config, p.name
        json.dumps(config)  # serializable as is


seeded_cases = _params([c for c in CASES if "seed" in c.arguments])


@seeded_cases
def test_a_numpy_seed_seeds_the_dropout(case, rng):
    # Accepted by our checks, it then met Keras's SeedGenerator, which takes
    # Python integers only ("Argument `seed` must be an integer").
    cls = case.layer_class
    required = {
        p.name: case.arguments[p.name]
        for p in _constructor_arguments(cls)
        if p.default is p.empty
    }
    dropout = {"dropout": case.arguments["dropout"]}
    x = _data(case, rng)
    outputs = []
    for seed in (np.int64(5), 5):
        keras.utils.set_random_seed(0)
        layer = cls(**required, **dropout, seed=seed)
        assert type(layer.get_config()["seed"]) is int
        outputs.append(to_numpy(case.apply(layer, x, training=True)))
    np.testing.assert_array_equal(*outputs)


@pytest.mark.backend_independent
@all_cases
def test_no_attribute_shadows_a_keras_layer_attribute(case, rng):
    layer = case.make()
    case.apply(layer, _data(case, rng))  # built: sub-layers and weights exist
    # Layer's own attributes, and those Keras's tooling reads off any layer
    # when present (`Model.summary()` prints `layer.output_shape`).
    base_attributes = set(dir(keras.layers.Layer)) | {"input_shape", "output_shape"}
    plain = set(vars(keras.layers.Layer()))
    shadowing = {
        name
        for name in set(vars(layer)) - plain
        if name in base_attributes and not name.startswith("__")
    }
    assert not shadowing, f"attributes shadowing keras.layers.Layer: {shadowing}"


@pytest.mark.backend_independent
def test_every_public_layer_has_a_contract_case():
    public = {
        name
        for name in keras_selfattn.__all__
        if isinstance(getattr(keras_selfattn, name), type)
        and issubclass(getattr(keras_selfattn, name), keras.layers.Layer)
    }
    if not ON_THIS_KERAS:  # an older Keras than our GroupQueryAttention needs
        public.remove("GroupQueryAttention")
    assert public == {case.layer_class.__name__ for case in CASES}


# ----------------------------------------------------------------- saving


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """One saved .keras model per case, with its predictions on fixed input."""
    folder = tmp_path_factory.mktemp("saved")
    tokens = _padded_tokens(np.random.default_rng(3))
    np.save(folder / "tokens.npy", tokens)
    expected = {}
    for case in CASES:
        model, _ = _masked_model(case)
        model.save(folder / f"{case.name}.keras")
        expected[case.name] = model.predict(tokens, verbose=0)
    return folder, expected


def test_save_and_load_in_fresh_process_without_custom_objects(
    saved_models, subprocess_env
):
    folder, expected = saved_models
    script = textwrap.dedent(
        f"""
        import sys, numpy as np, keras
        import keras_selfattn  # registers the layers; nothing else
        folder = {str(folder)!r}
        tokens = np.load(folder + "/tokens.npy")
        for name in sys.argv[1:]:
            model = keras.models.load_model(folder + "/" + name + ".keras")
            np.save(folder + "/" + name + ".out.npy", model.predict(tokens, verbose=0))
        """
    )
    names = [case.name for case in CASES]
    subprocess.run(
        [sys.executable, "-c", script, *names],
        check=True,
        env=subprocess_env,
        timeout=300,
    )
    for name in names:
        np.testing.assert_array_equal(
            np.load(folder / f"{name}.out.npy"), expected[name], err_msg=name
        )


# --------------------------------------------------------- mixed precision


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@all_cases
def test_mixed_precision_is_finite_and_close_to_float32(case, rng, policy):
    # Large inputs give logits in the thousands. The float32 reference gets the
    # same inputs and weights rounded to the half type, so that what is
    # compared is the computation, not the rounding of the inputs.
    half = policy.split("_")[1]

    def rounded(array):
        return to_numpy(keras.ops.cast(keras.ops.cast(array, half), "float32"))

    x = _data(case, rng, batch=4)
    if not case.ids:
        x = rounded(x * 30)
    layer32 = case.make()
    case.apply(layer32, x)
    layer32.set_weights([rounded(w) for w in layer32.get_weights()])
    keras.config.set_dtype_policy(policy)
    layer = case.make()
    case.apply(layer, x)
    layer.set_weights(layer32.get_weights())
    out = case.apply(layer, x)
    assert keras.backend.standardize_dtype(out.dtype) == half
    out = to_numpy(keras.ops.cast(out, "float32"))
    assert np.all(np.isfinite(out))
    keras.config.set_dtype_policy("float32")
    tolerance = 0.02 if half == "float16" else 0.05
    if not case.scores:
        ref = to_numpy(case.apply(layer32, x))
        np.testing.assert_allclose(out, ref, atol=tolerance * np.abs(ref).max())
        return
    ref, weights = case.apply(layer32, x, return_attention_scores=True)
    ref, weights = to_numpy(ref), to_numpy(weights)
    # With logits in the thousands, the half-precision projections move each
    # logit by a few units, which may swap two keys whose logits are that
    # close. Compare the positions where every head decides clearly (the
    # runner-up key has under 3e-4 of the top key's weight: a logit gap > 8),
    # or where no head concentrates (top weight < 0.3 over 6 keys: moderate
    # logits, which rounding moves only slightly).
    top2 = np.sort(weights, axis=-1)[..., -2:]
    stable = (top2[..., 0] < 3e-4 * top2[..., 1]) | (top2[..., 1] < 0.3)
    compared = np.all(stable, axis=1)  # (batch, seq), or (batch,) when pooling
    assert compared.mean() > 0.6, "the test input has too many near ties"
    np.testing.assert_allclose(
        out[compared], ref[compared], atol=tolerance * np.abs(ref).max()
    )
