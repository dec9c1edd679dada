"""Every layer's contract: shapes, models, compilation, masks, saving, precision.

Runs over `tests.layers.contract.CASES`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from tests.conftest import BACKEND
from tests.layers.contract import CASES

FEATURES = 8
SEQ = 6
VOCAB = 20

case_params = pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
_SCORING = [c for c in CASES if c.scores]
scoring_case_params = pytest.mark.parametrize(
    "case", _SCORING, ids=[c.name for c in _SCORING]
)
_SEQUENTIAL = [c for c in CASES if c.sequential]
sequential_case_params = pytest.mark.parametrize(
    "case", _SEQUENTIAL, ids=[c.name for c in _SEQUENTIAL]
)


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _functional(case, seq=None, **call_kwargs):
    inputs = keras.Input((seq, FEATURES))
    layer = case.make(FEATURES)
    outputs = case.apply(layer, inputs, **call_kwargs)
    return keras.Model(inputs, outputs), layer


def _masked_model(case):
    """Token ids -> Embedding(mask_zero) -> layer, returning (output, scores)."""
    tokens = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, FEATURES, mask_zero=True)(tokens)
    layer = case.make(FEATURES)
    outputs = case.apply(layer, x, return_attention_scores=case.scores)
    return keras.Model(tokens, outputs), layer


def _padded_tokens(rng, batch=3, seq=SEQ):
    tokens = rng.integers(1, VOCAB, size=(batch, seq)).astype("int32")
    tokens[0, 4:] = 0
    tokens[1, 2:] = 0
    return tokens


# -------------------------------------------------------------------- shapes


@case_params
def test_symbolic_call_with_unknown_batch_and_length(case):
    model, _ = _functional(case)
    assert tuple(model.output.shape) == (None, None, case.output_dim(FEATURES))


@case_params
def test_compute_output_shape_matches_call(case, rng):
    layer = case.make(FEATURES)
    x = rng.normal(size=(2, SEQ, FEATURES)).astype("float32")
    out = case.apply(layer, x)
    assert tuple(out.shape) == (2, SEQ, case.output_dim(FEATURES))


@scoring_case_params
def test_symbolic_scores_shape(case):
    inputs = keras.Input((None, FEATURES))
    _, scores = case.apply(case.make(FEATURES), inputs, return_attention_scores=True)
    assert len(scores.shape) == 4
    assert scores.shape[0] is None and scores.shape[2:] == (None, None)


# ------------------------------------------------------------------- models


@sequential_case_params
def test_sequential_model(case, rng):
    model = keras.Sequential([keras.Input((SEQ, FEATURES)), case.make(FEATURES)])
    x = rng.normal(size=(2, SEQ, FEATURES)).astype("float32")
    assert model.predict(x, verbose=0).shape == (2, SEQ, case.output_dim(FEATURES))


@pytest.mark.tensorflow_only
@case_params
def test_inside_tf_function(case, rng):
    import tensorflow as tf

    layer = case.make(FEATURES)
    x = rng.normal(size=(2, SEQ, FEATURES)).astype("float32")
    eager = case.apply(layer, x)

    @tf.function(input_signature=[tf.TensorSpec((None, None, FEATURES), tf.float32)])
    def run(t):
        return case.apply(layer, t)

    np.testing.assert_allclose(run(x).numpy(), _np(eager), atol=1e-6)


@pytest.mark.slow
@case_params
def test_fit_with_jit_compile_lowers_the_loss(case, rng):
    # Toy task: predict the mean of the first feature over the sequence.
    x = rng.normal(size=(64, SEQ, FEATURES)).astype("float32")
    y = x[:, :, :1].mean(axis=1)
    inputs = keras.Input((SEQ, FEATURES))
    hidden = case.apply(case.make(FEATURES), inputs, training=None)
    outputs = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(hidden))
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss="mse",
        # torch.compile takes minutes per model on CPU: see the next test.
        jit_compile=BACKEND != "torch",
    )
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
        x = rng.normal(size=(32, SEQ, FEATURES)).astype("float32")
        y = x[:, :, :1].mean(axis=1)
        inputs = keras.Input((SEQ, FEATURES))
        hidden = case.apply(case.make(FEATURES), inputs)
        pooled = keras.layers.GlobalAveragePooling1D()(hidden)
        model = keras.Model(inputs, keras.layers.Dense(1)(pooled))
        model.compile(keras.optimizers.Adam(0.01), loss="mse", jit_compile=True)
        assert model.jit_compile
        history = model.fit(x, y, epochs=6, batch_size=32, verbose=0)
        losses = history.history["loss"]
        assert losses[-1] < 0.5 * losses[0], losses


# -------------------------------------------------------------------- masks


@case_params
def test_keras_mask_is_handed_on(case, rng):
    # Symbolically: the output carries a (batch, seq) mask for the next layer.
    model, layer = _masked_model(case)
    mask = model.outputs[0]._keras_mask
    assert tuple(mask.shape) == (None, None) and mask.dtype == "bool"
    # Concretely: it is the input's padding mask, unchanged.
    tokens = _padded_tokens(rng)
    x = rng.normal(size=(*tokens.shape, FEATURES)).astype("float32")
    handed_on = layer.compute_mask(x, tokens != 0)
    np.testing.assert_array_equal(_np(handed_on), tokens != 0)


@scoring_case_params
def test_padded_keys_get_exactly_zero_weight(case, rng):
    model, _ = _masked_model(case)
    tokens = _padded_tokens(rng)
    _, scores = model(tokens)
    scores = _np(scores)
    np.testing.assert_array_equal(scores[0, :, :, 4:], 0.0)
    np.testing.assert_array_equal(scores[1, :, :, 2:], 0.0)
    # Real queries' weights still sum to one over the real keys.
    np.testing.assert_allclose(scores[1, :, :2].sum(-1), 1.0, atol=1e-5)


@case_params
def test_padded_queries_output_zeros(case, rng):
    model, _ = _masked_model(case)
    out = model(_padded_tokens(rng))
    out = _np(out[0] if case.scores else out)
    np.testing.assert_array_equal(out[0, 4:], 0.0)
    np.testing.assert_array_equal(out[1, 2:], 0.0)
    assert np.all(np.isfinite(out))


@case_params
def test_padding_content_does_not_change_real_positions(case, rng):
    tokens = _padded_tokens(rng)
    x = rng.normal(size=(3, SEQ, FEATURES)).astype("float32")
    mask = tokens != 0
    other = x.copy()
    other[~mask] = rng.normal(size=other[~mask].shape) * 100
    layer = case.make(FEATURES)
    a = _np(case.apply(layer, x, **_mask_kwargs(case, mask)))
    b = _np(case.apply(layer, other, **_mask_kwargs(case, mask)))
    np.testing.assert_allclose(a[mask], b[mask], atol=1e-5)


def _mask_kwargs(case, mask):
    if case.sequential:
        return {"mask": mask}
    return {"query_mask": mask, "value_mask": mask}


@case_params
def test_mask_of_wrong_shape_raises(case, rng):
    x = rng.normal(size=(2, SEQ, FEATURES)).astype("float32")
    bad = np.ones((2, SEQ + 1), dtype=bool)
    with pytest.raises(ValueError, match="mask"):
        case.apply(case.make(FEATURES), x, **_mask_kwargs(case, bad))


@case_params
def test_input_of_wrong_rank_raises(case):
    with pytest.raises(ValueError, match="3-D"):
        case.apply(case.make(FEATURES), np.zeros((2, FEATURES), "float32"))


# ----------------------------------------------------------------- saving


@case_params
def test_get_config_round_trip(case):
    layer = case.make(FEATURES)
    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config
    json.dumps(config)  # serializable as is


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """One saved .keras model per case, with its predictions on fixed input."""
    folder = tmp_path_factory.mktemp("saved")
    rng = np.random.default_rng(3)
    tokens = _padded_tokens(rng)
    np.save(folder / "tokens.npy", tokens)
    expected = {}
    for case in CASES:
        tokens_in = keras.Input((None,), dtype="int32")
        x = keras.layers.Embedding(VOCAB, FEATURES, mask_zero=True)(tokens_in)
        x = case.apply(case.make(FEATURES), x)
        model = keras.Model(tokens_in, x)
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
@scoring_case_params
def test_mixed_precision_is_finite_and_close_to_float32(case, rng, policy):
    # Large inputs give logits in the thousands. The float32 reference gets the
    # same inputs and weights rounded to the half type, so that what is
    # compared is the computation, not the rounding of the inputs.
    half = policy.split("_")[1]

    def rounded(array):
        return _np(keras.ops.cast(keras.ops.cast(array, half), "float32"))

    x = rounded(rng.normal(size=(4, SEQ, FEATURES)) * 30)
    layer32 = case.make(FEATURES)
    case.apply(layer32, x)
    layer32.set_weights([rounded(w) for w in layer32.get_weights()])
    ref, weights = case.apply(layer32, x, return_attention_scores=True)
    ref, weights = _np(ref), _np(weights)
    keras.config.set_dtype_policy(policy)
    layer = case.make(FEATURES)
    case.apply(layer, x)
    layer.set_weights(layer32.get_weights())
    out = case.apply(layer, x)
    assert keras.backend.standardize_dtype(out.dtype) == half
    out = _np(keras.ops.cast(out, "float32"))
    assert np.all(np.isfinite(out))
    # With logits in the thousands, the half-precision projections move each
    # logit by a few units, which may swap two keys whose logits are that
    # close. Compare the positions where every head decides clearly: the
    # runner-up key has under 3e-4 of the top key's weight (a logit gap > 8).
    top2 = np.sort(weights, axis=-1)[..., -2:]
    decisive = np.all(top2[..., 0] < 3e-4 * top2[..., 1], axis=1)  # (B, T)
    assert decisive.mean() > 0.6, "the test input has too many near ties"
    tolerance = 0.02 if half == "float16" else 0.05
    np.testing.assert_allclose(
        out[decisive], ref[decisive], atol=tolerance * np.abs(ref).max()
    )
