"""The kernel: golden numbers, NumPy parity, masks, precision, errors."""

from __future__ import annotations

import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn import masked_softmax, scaled_dot_product_attention
from tests.helpers import (
    BACKEND,
    assert_padding_ignored,
    gradients,
    output_and_grads,
    to_numpy,
)
from tests.reference import reference_attention


def _random(rng, *shape, dtype="float32"):
    return rng.normal(size=shape).astype(dtype)


# ---------------------------------------------------------------- golden numbers


def test_golden_two_tokens_by_hand():
    # Q = K = I (2x2), d_k = 2, so the logits are I / sqrt(2):
    # row 0: softmax([0.70711, 0]) = [e^0.70711, 1] / (e^0.70711 + 1)
    #      = [2.02811, 1] / 3.02811 = [0.66976, 0.33024]
    # output row 0 = 0.66976 * [1, 2] + 0.33024 * [3, 4] = [1.66048, 2.66048]
    # row 1 is the mirror image: weights [0.33024, 0.66976] -> [2.33952, 3.33952]
    q = np.eye(2, dtype="float32")[None]
    v = np.array([[[1.0, 2.0], [3.0, 4.0]]], dtype="float32")
    out, weights = scaled_dot_product_attention(q, q, v, return_scores=True)
    np.testing.assert_allclose(
        to_numpy(weights)[0, 0], [[0.66976, 0.33024], [0.33024, 0.66976]], atol=1e-5
    )
    np.testing.assert_allclose(
        to_numpy(out)[0], [[1.66048, 2.66048], [2.33952, 3.33952]], atol=1e-5
    )


def test_golden_causal_first_row_sees_only_itself():
    # With causal masking, row 0 has one visible key: weight 1, output v[0].
    # Row 1 is as above: [0.33024, 0.66976].
    q = np.eye(2, dtype="float32")[None]
    v = np.array([[[1.0, 2.0], [3.0, 4.0]]], dtype="float32")
    out, weights = scaled_dot_product_attention(
        q, q, v, causal=True, return_scores=True
    )
    np.testing.assert_allclose(
        to_numpy(weights)[0, 0], [[1.0, 0.0], [0.33024, 0.66976]], atol=1e-5
    )
    np.testing.assert_allclose(to_numpy(out)[0, 0], [1.0, 2.0], atol=1e-6)


def test_scale_is_inverse_sqrt_of_key_size_per_head(rng):
    # 4 heads of 8: d_k = 8, not the model width 32 and not the length 6.
    q, k, v = (_random(rng, 2, 6, 4, 8) for _ in range(3))
    _, weights = scaled_dot_product_attention(q, k, v, return_scores=True)
    logits = np.einsum("bqhd,bkhd->bhqk", q.astype("float64"), k)
    for wrong_scale in (1 / np.sqrt(32), 1 / np.sqrt(6), 1 / 8.0, 1.0):
        wrong = np.exp(logits * wrong_scale)
        wrong /= wrong.sum(-1, keepdims=True)
        assert not np.allclose(to_numpy(weights), wrong, atol=1e-4)
    right = np.exp(logits / np.sqrt(8))
    right /= right.sum(-1, keepdims=True)
    np.testing.assert_allclose(to_numpy(weights), right, atol=1e-5)


def test_scale_is_applied_before_the_softmax(rng):
    q, k, v = (_random(rng, 1, 5, 4) for _ in range(3))
    _, weights = scaled_dot_product_attention(q, k, v, scale=0.1, return_scores=True)
    # Rows of the weights sum to one, which scaling after a softmax breaks.
    np.testing.assert_allclose(to_numpy(weights).sum(-1), 1.0, atol=1e-6)
    _, expected = reference_attention(q, k, v, scale=0.1)
    np.testing.assert_allclose(to_numpy(weights), expected, atol=1e-6)


# ------------------------------------------------------------- NumPy reference

_SHAPES = {
    "3d_one_head": ((2, 5, 8), (2, 5, 8), (2, 5, 8)),
    "4d_heads": ((2, 5, 3, 8), (2, 5, 3, 8), (2, 5, 3, 8)),
    "cross_longer_keys": ((2, 4, 2, 8), (2, 9, 2, 8), (2, 9, 2, 8)),
    "cross_shorter_keys": ((2, 7, 2, 8), (2, 3, 2, 8), (2, 3, 2, 8)),
    "value_dim_differs": ((2, 5, 2, 8), (2, 6, 2, 8), (2, 6, 2, 5)),
}

_OPTIONS = {
    "plain": {},
    "causal": {"causal": True},
    "window_2": {"sliding_window": 2},
    "causal_window_3": {"causal": True, "sliding_window": 3},
    "scale_0.3": {"scale": 0.3},
}


@pytest.mark.parametrize("shapes", _SHAPES.values(), ids=_SHAPES.keys())
@pytest.mark.parametrize("options", _OPTIONS.values(), ids=_OPTIONS.keys())
def test_matches_numpy_reference(rng, shapes, options):
    q, k, v = (_random(rng, *s) for s in shapes)
    out, weights = scaled_dot_product_attention(q, k, v, return_scores=True, **options)
    ref_out, ref_weights = reference_attention(q, k, v, **options)
    assert tuple(out.shape) == ref_out.shape
    np.testing.assert_allclose(to_numpy(out), ref_out, atol=1e-5)
    np.testing.assert_allclose(to_numpy(weights), ref_weights, atol=1e-6)


@pytest.mark.parametrize("options", _OPTIONS.values(), ids=_OPTIONS.keys())
def test_fast_path_matches_plain_path(rng, options):
    # On JAX and PyTorch `flash_attention=None` dispatches to the backend's
    # fused kernel; on TensorFlow both calls take the plain path.
    q, k, v = (_random(rng, 2, 6, 2, 8) for _ in range(3))
    mask = rng.random((2, 6, 6)) > 0.3
    mask[0, 1] = False  # a row with no key at all
    fast = scaled_dot_product_attention(q, k, v, mask, **options)
    plain = scaled_dot_product_attention(
        q, k, v, mask, flash_attention=False, **options
    )
    ref, _ = reference_attention(q, k, v, mask, **options)
    np.testing.assert_allclose(to_numpy(fast), ref, atol=1e-5)
    np.testing.assert_allclose(to_numpy(plain), ref, atol=1e-5)
    np.testing.assert_array_equal(to_numpy(fast)[0, 1], 0.0)


_OFFSET_CASES = {
    "causal-default_path-int": ({"causal": True}, {}, "int"),
    "causal-chunked-tensor": ({"causal": True}, {"chunk_size": 2}, "tensor"),
    "window_2-plain-int": ({"sliding_window": 2}, {"flash_attention": False}, "int"),
    "window_2-chunked-int": ({"sliding_window": 2}, {"chunk_size": 2}, "int"),
    "causal_window_3-default_path-tensor": (
        {"causal": True, "sliding_window": 3},
        {},
        "tensor",
    ),
}


@pytest.mark.parametrize(
    "rules, path, offset_as", _OFFSET_CASES.values(), ids=_OFFSET_CASES.keys()
)
def test_query_offset_gives_the_last_rows_of_the_full_rule(rng, rules, path, offset_as):
    # 3 queries at key positions 4, 5, 6 of 7 (decoding from a cache): the
    # rows 4..6 of the 7 x 7 rule, in the outputs and in every gradient.
    q = _random(rng, 2, 3, 2, 4)
    k, v = _random(rng, 2, 7, 2, 4), _random(rng, 2, 7, 2, 4)
    offset = 4 if offset_as == "int" else ops.convert_to_tensor(4, "int32")
    # With a user mask and padding too (the last key of sequence 1).
    user = rng.random((2, 3, 7)) > 0.2
    padding = np.ones((2, 7), bool)
    padding[1, 6] = False
    visible = user & padding[:, None, :]
    ref, _ = reference_attention(q, k, v, visible, query_offset=4, **rules)
    # Not a rule that is never read: from position 0 the rows differ.
    assert np.abs(reference_attention(q, k, v, visible, **rules)[0] - ref).max() > 1e-3
    full = np.ones((7, 7), bool)
    i, j = np.arange(7)[:, None], np.arange(7)[None, :]
    if rules.get("causal"):
        full &= j <= i
    if "sliding_window" in rules:
        full &= np.abs(i - j) < rules["sliding_window"]
    upstream = _random(rng, 2, 3, 2, 4)

    def with_offset(q, k, v):
        return scaled_dot_product_attention(
            q, k, v, user, padding_mask=padding, query_offset=offset, **rules, **path
        )

    def with_rows(q, k, v):
        return scaled_dot_product_attention(
            q, k, v, user & full[4:], padding_mask=padding, **path
        )

    out, grads = output_and_grads(with_offset, [q, k, v], upstream)
    np.testing.assert_allclose(out, ref, atol=1e-5)
    _, expected = output_and_grads(with_rows, [q, k, v], upstream)
    for got, want in zip(grads, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


# ------------------------------------------------------------------------ masks

_MASK_SHAPES = {
    "b_q_k": (2, 5, 6),
    "b_h_q_k": (2, 3, 5, 6),
    "b_1_1_k": (2, 1, 1, 6),
    "q_k": (5, 6),
    "b_1_q_k": (2, 1, 5, 6),
}


@pytest.mark.parametrize("mask_shape", _MASK_SHAPES.values(), ids=_MASK_SHAPES.keys())
def test_mask_shapes_broadcast_like_the_reference(rng, mask_shape):
    q = _random(rng, 2, 5, 3, 4)
    k, v = _random(rng, 2, 6, 3, 4), _random(rng, 2, 6, 3, 4)
    mask = rng.random(mask_shape) > 0.4
    out, weights = scaled_dot_product_attention(q, k, v, mask, return_scores=True)
    ref_out, ref_weights = reference_attention(q, k, v, mask)
    np.testing.assert_allclose(to_numpy(out), ref_out, atol=1e-5)
    np.testing.assert_allclose(to_numpy(weights), ref_weights, atol=1e-6)


def test_masked_keys_get_exactly_zero_weight(rng):
    q, k, v = (_random(rng, 2, 6, 4) for _ in range(3))
    mask = np.ones((2, 6, 6), dtype=bool)
    mask[:, :, 4:] = False
    _, weights = scaled_dot_product_attention(q, k, v, mask, return_scores=True)
    assert np.all(to_numpy(weights)[..., 4:] == 0.0)
    np.testing.assert_allclose(to_numpy(weights).sum(-1), 1.0, atol=1e-6)


def test_masked_keys_do_not_influence_the_output(rng):
    q, k, v = (_random(rng, 2, 6, 4) for _ in range(3))
    mask = np.ones((2, 6, 6), dtype=bool)
    mask[:, :, 4:] = False
    k2, v2 = k.copy(), v.copy()
    k2[:, 4:] = 1e4
    v2[:, 4:] = -1e4
    a = scaled_dot_product_attention(q, k, v, mask)
    b = scaled_dot_product_attention(q, k2, v2, mask)
    np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


@pytest.mark.parametrize("flash", [None, False], ids=["default_path", "plain_path"])
def test_fully_masked_rows_are_zero_not_nan(rng, flash):
    q, k, v = (_random(rng, 2, 4, 2, 8) for _ in range(3))
    mask = np.ones((2, 4, 4), dtype=bool)
    mask[0, 2] = False
    mask[1] = False
    out = to_numpy(scaled_dot_product_attention(q, k, v, mask, flash_attention=flash))
    assert np.all(np.isfinite(out))
    np.testing.assert_array_equal(out[0, 2], 0.0)
    np.testing.assert_array_equal(out[1], 0.0)
    _, weights = scaled_dot_product_attention(q, k, v, mask, return_scores=True)
    np.testing.assert_array_equal(to_numpy(weights)[1], 0.0)
    np.testing.assert_array_equal(to_numpy(weights)[0, :, 2], 0.0)


_KEY_MASK_OPTIONS = {
    "alone": {},
    "causal": {"causal": True},
    "window_2": {"sliding_window": 2},
    "with_mask": {"mask": "random"},
}


@pytest.mark.parametrize(
    "options", _KEY_MASK_OPTIONS.values(), ids=_KEY_MASK_OPTIONS.keys()
)
@pytest.mark.parametrize("flash", [None, False], ids=["default_path", "plain_path"])
def test_padding_mask_is_padding(rng, options, flash):
    # Sequence 0 is all padding; the others have 1..6 real keys.
    q, k, v = (
        _random(rng, 3, 5, 2, 4),
        _random(rng, 3, 6, 2, 4),
        _random(rng, 3, 6, 2, 4),
    )
    padding_mask = np.arange(6)[None, :] < np.array([0, 2, 6])[:, None]
    options = dict(options)
    if options.get("mask") == "random":
        options["mask"] = rng.random((3, 5, 6)) > 0.3
    full = padding_mask[:, None, None, :]
    if "mask" in options:
        full = full & options["mask"][:, None]
    ref_kwargs = {key: value for key, value in options.items() if key != "mask"}
    ref_out, ref_weights = reference_attention(q, k, v, full, **ref_kwargs)
    out = scaled_dot_product_attention(
        q, k, v, padding_mask=padding_mask, flash_attention=flash, **options
    )
    np.testing.assert_allclose(to_numpy(out), ref_out, atol=1e-5)
    _, weights = scaled_dot_product_attention(
        q, k, v, padding_mask=padding_mask, return_scores=True, **options
    )
    weights = to_numpy(weights)
    np.testing.assert_allclose(weights, ref_weights, atol=1e-6)
    np.testing.assert_array_equal(weights[~np.broadcast_to(full, weights.shape)], 0.0)
    np.testing.assert_array_equal(to_numpy(out)[0], 0.0)  # no real key at all
    # Whatever sits at padded keys changes nothing.
    k2, v2 = k.copy(), v.copy()
    k2[~padding_mask], v2[~padding_mask] = 1e4, -1e4
    moved = scaled_dot_product_attention(
        q, k2, v2, padding_mask=padding_mask, flash_attention=flash, **options
    )
    np.testing.assert_allclose(to_numpy(moved), to_numpy(out), atol=1e-6)


def test_padding_mask_gradients_are_finite_and_zero_for_all_padding(rng):
    q, k, v = (_random(rng, 2, 4, 4) for _ in range(3))
    padding_mask = np.array([[False] * 4, [True, True, False, False]])

    def loss(q, k, v):
        out = scaled_dot_product_attention(q, k, v, padding_mask=padding_mask)
        return ops.sum(out**2)

    d_q, d_k, d_v = gradients(loss, q, k, v)
    for grad in (d_q, d_k, d_v):
        assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(d_q[0], 0.0)
    np.testing.assert_array_equal(d_k[1, 2:], 0.0)  # padded keys: no gradient
    np.testing.assert_array_equal(d_v[1, 2:], 0.0)


# The plain and fused paths (the chunked path: tests/test_attention_chunked.py).
_NAN_PADDING_PATHS = {
    "default": dict(),  # fused on JAX and PyTorch, plain on TensorFlow
    "plain": dict(flash_attention=False),
    "plain-causal-window": dict(flash_attention=False, causal=True, sliding_window=2),
    "default-causal": dict(causal=True),
    "plain-scores": dict(flash_attention=False, return_scores=True),
}


@pytest.mark.parametrize(
    "options", _NAN_PADDING_PATHS.values(), ids=_NAN_PADDING_PATHS.keys()
)
def test_nan_and_inf_padding_change_no_real_output_nor_gradient(rng, options):
    assert_padding_ignored(scaled_dot_product_attention, rng, **options)


# Keys hidden from every query by `mask` or by the position rules (a cache's
# unused slots), on each path; the last key is hidden in each case.
_ONLY_QUERY_0_SEES_KEY_3 = np.array(  # (q_len, k_len)
    [[True, True, True, True]] + [[True, True, True, False]] * 3
)
_HIDDEN_KEY_CASES = {
    "mask": dict(mask=np.array([True, True, True, False])[None, None, None]),
    "mask-chunked": dict(
        mask=np.array([True, True, True, False])[None, None, None], chunk_size=2
    ),
    "mask-default": dict(  # (batch, q_len, k_len); fused on JAX and PyTorch
        mask=np.broadcast_to(np.array([True, True, True, False]), (2, 4, 4))
    ),
    "decoding-causal": dict(q_len=1, causal=True, query_offset=2),
    "decoding-causal-chunked": dict(q_len=1, causal=True, query_offset=2, chunk_size=2),
    "decoding-window": dict(q_len=1, sliding_window=2, query_offset=1),
    # The mask lets only query 0 see the last key, which the rule hides from
    # it: hidden by the two together, by neither alone.
    "mask-and-causal": dict(mask=_ONLY_QUERY_0_SEES_KEY_3, causal=True),
    "mask-and-causal-chunked": dict(
        mask=_ONLY_QUERY_0_SEES_KEY_3, causal=True, chunk_size=2
    ),
    "mask-and-causal-plain": dict(
        mask=_ONLY_QUERY_0_SEES_KEY_3, causal=True, flash_attention=False
    ),
    "mask-and-window": dict(mask=_ONLY_QUERY_0_SEES_KEY_3, sliding_window=2),
    "mask-and-window-chunked": dict(
        mask=_ONLY_QUERY_0_SEES_KEY_3, sliding_window=2, chunk_size=2
    ),
}


@pytest.mark.parametrize(
    "case", _HIDDEN_KEY_CASES.values(), ids=_HIDDEN_KEY_CASES.keys()
)
def test_nan_at_a_key_no_query_sees_changes_nothing(rng, case):
    # 0 x NaN is NaN: a weight of zero alone let such a key turn every output
    # into NaN (the padding mask zeroed its keys; these rules did not).
    options = dict(case)
    q_len = options.pop("q_len", 4)
    q = _random(rng, 2, q_len, 2, 4)
    k, v = (_random(rng, 2, 4, 2, 4) for _ in "kv")
    poisoned_k, poisoned_v = k.copy(), v.copy()
    poisoned_k[:, -1], poisoned_v[:, -1] = np.inf, np.nan

    def run(k, v):
        return output_and_grads(
            lambda q, k, v: scaled_dot_product_attention(q, k, v, **options),
            (q, k, v),
            np.ones((2, q_len, 2, 4), "float32"),
        )

    want, want_grads = run(k, v)
    got, got_grads = run(poisoned_k, poisoned_v)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, atol=1e-6)
    for grad, reference in zip(got_grads, want_grads, strict=True):
        assert np.all(np.isfinite(grad))
        np.testing.assert_allclose(grad[:, :-1], reference[:, :-1], atol=1e-5)


def test_one_key_gets_all_the_weight_without_a_warning(rng):
    # Keras's softmax warns that one entry "will always return the value 1":
    # a one-word review printed it, from the server and from explain.
    q = _random(rng, 1, 1, 2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, weights = scaled_dot_product_attention(
            q, q, q, return_scores=True, flash_attention=False
        )
    np.testing.assert_array_equal(to_numpy(weights), 1.0)
    np.testing.assert_allclose(to_numpy(out), q, rtol=1e-6)


# A key a query sees, with a NaN key vector (its logits NaN), on each path.
_SEEN_NAN_KEY_CASES = {
    "causal-plain": dict(causal=True, flash_attention=False),
    "causal-default": dict(causal=True),  # fused on JAX and PyTorch
    "causal-scores": dict(causal=True, return_scores=True),
    "causal-chunked": dict(causal=True, chunk_size=2),
    "window-plain": dict(sliding_window=2, flash_attention=False),
    "mask-plain": dict(mask=np.tril(np.ones((5, 5), bool)), flash_attention=False),
}


@pytest.mark.parametrize(
    "options", _SEEN_NAN_KEY_CASES.values(), ids=_SEEN_NAN_KEY_CASES.keys()
)
def test_a_nan_at_a_key_a_query_sees_makes_that_query_nan(rng, options):
    # Its row's maximum logit is NaN: the plain and chunked paths read that
    # as "no key", and gave those rows zeros (a finite wrong answer) while
    # the rows that cannot see the key came out NaN (0 x NaN).
    q, k, v = (_random(rng, 1, 5, 2, 4) for _ in "qkv")
    k[:, 3] = np.nan
    out = scaled_dot_product_attention(q, k, v, **options)
    out = to_numpy(out[0] if options.get("return_scores") else out)
    sees = [3, 4] if "mask" in options or options.get("causal") else [2, 3, 4]
    assert np.isnan(out[0, sees]).all()


@pytest.mark.backend_independent
@pytest.mark.parametrize("shape", [(2, 1, 6), (3, 6), (2, 5)], ids=str)
def test_padding_mask_of_wrong_shape_raises(rng, shape):
    q = _random(rng, 2, 6, 4)
    with pytest.raises(ValueError, match=r"`padding_mask`.*\(batch, k_len\)"):
        scaled_dot_product_attention(q, q, q, padding_mask=np.ones(shape, bool))


def test_window_larger_than_sequence_is_full_attention(rng):
    q, k, v = (_random(rng, 1, 5, 4) for _ in range(3))
    a = scaled_dot_product_attention(q, k, v, sliding_window=99)
    b = scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(to_numpy(a), to_numpy(b), atol=1e-6)


def test_window_of_one_attends_to_self_only(rng):
    q, k, v = (_random(rng, 1, 5, 4) for _ in range(3))
    out = scaled_dot_product_attention(q, k, v, sliding_window=1)
    np.testing.assert_allclose(to_numpy(out), v, atol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_integer_and_0_1_float_masks_are_read_as_boolean(rng, dtype):
    q, k, v = (_random(rng, 1, 4, 4) for _ in range(3))
    mask = (rng.random((1, 4, 4)) > 0.3).astype(dtype)
    a = scaled_dot_product_attention(q, k, v, mask)
    b = scaled_dot_product_attention(q, k, v, mask.astype(bool))
    np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


def test_an_additive_mask_is_refused_not_read_inverted(rng):
    # 0 where allowed and -inf where not: read as booleans, it would let each
    # query see exactly the keys it should not.
    q = _random(rng, 1, 2, 4)
    additive = np.array([[0.0, -np.inf], [0.0, 0.0]], "float32")
    with pytest.raises(ValueError, match=r"`mask`.*additive mask of 0 and -inf"):
        scaled_dot_product_attention(q, q, q, additive)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param([0.0, 0.0, -np.inf], id="additive"),
        pytest.param([1, 0.5, 1], id="half"),
    ],
)
def test_a_padding_mask_or_softmax_mask_of_other_values_is_refused(rng, values):
    # They were cast to bool: the additive padding mask put all the weight
    # on the padded keys, and masked_softmax gave [0, 0, 1] for [1, 2, 3].
    q = _random(rng, 1, 3, 4)
    padding = np.array([values], "float32")
    with pytest.raises(ValueError, match=r"`padding_mask`.*would read inverted"):
        scaled_dot_product_attention(q, q, q, padding_mask=padding)
    logits = np.array([[1.0, 2.0, 3.0]], "float32")
    with pytest.raises(ValueError, match=r"`mask`.*would read inverted"):
        masked_softmax(logits, np.array([values], "float32"))
    # 0 / 1 values still read as booleans.
    ones = np.array([[1.0, 1.0, 0.0]], "float32")
    np.testing.assert_array_equal(
        to_numpy(scaled_dot_product_attention(q, q, q, padding_mask=ones)),
        to_numpy(scaled_dot_product_attention(q, q, q, padding_mask=ones > 0)),
    )


# --------------------------------------------------------------- gradients


def test_gradients_are_finite_with_fully_masked_rows(rng):
    q, k, v = (_random(rng, 1, 4, 4) for _ in range(3))
    mask = np.ones((1, 4, 4), dtype=bool)
    mask[0, 1] = False

    def loss(q, k, v):
        out = scaled_dot_product_attention(q, k, v, mask, flash_attention=False)
        return ops.sum(out**2)

    grads = gradients(loss, q, k, v)
    for grad in grads:
        assert np.all(np.isfinite(grad))
    # Row 1 attends to nothing, so its query gets no gradient.
    np.testing.assert_array_equal(grads[0][0, 1], 0.0)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="Keras computes 64-bit dtypes in 32 bits on JAX and PyTorch "
    "(keras.backend.result_type('float64', 'float64') is float32 there)",
)
@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"flash_attention": False}, id="plain"),
        pytest.param({"chunk_size": 3}, id="chunked"),
    ],
)
def test_float64_inputs_are_computed_in_float64(rng, options):
    # They were computed in float32: errors of 1e-6 where float64 gives 1e-15.
    q = rng.normal(size=(2, 7, 4, 8)) * 3
    k, v = (rng.normal(size=(2, 7, 2, 8)) * 3 for _ in range(2))
    mask = rng.random((2, 7, 7)) > 0.2
    padding = np.arange(7) < np.array([[5], [7]])
    got = scaled_dot_product_attention(
        q, k, v, mask, padding_mask=padding, causal=True, **options
    )
    expected, _ = reference_attention(q, k, v, mask & padding[:, None], causal=True)
    assert keras.backend.standardize_dtype(got.dtype) == "float64"
    np.testing.assert_allclose(to_numpy(got), expected, rtol=0, atol=1e-12)
    logits = rng.normal(size=(3, 5)) * 30
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(
        to_numpy(masked_softmax(logits)),
        weights / weights.sum(-1, keepdims=True),
        rtol=0,
        atol=1e-15,
    )


def test_gradients_match_numpy_finite_differences(rng):
    q, k, v = (_random(rng, 1, 3, 2).astype("float64") for _ in range(3))

    def loss(q, k, v):
        return ops.sum(scaled_dot_product_attention(q, k, v, causal=True) ** 2)

    grads = gradients(loss, q, k, v)
    eps = 1e-6
    for index, array in enumerate((q, k, v)):
        numeric = np.zeros_like(array)
        for pos in np.ndindex(array.shape):
            args = [q.copy(), k.copy(), v.copy()]
            args[index][pos] += eps
            up = (reference_attention(*args, causal=True)[0] ** 2).sum()
            args[index][pos] -= 2 * eps
            down = (reference_attention(*args, causal=True)[0] ** 2).sum()
            numeric[pos] = (up - down) / (2 * eps)
        np.testing.assert_allclose(grads[index], numeric, atol=1e-5)


# ---------------------------------------------------------------- precision


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_logits_that_overflow_float16(rng, dtype):
    # The scaled logits |q·k| / 4 pass float16's 65504. Q·Kᵀ runs in
    # float32, so the result stays finite and matches the float32 reference.
    q = _random(rng, 2, 6, 2, 16) * 150
    k = _random(rng, 2, 6, 2, 16) * 150
    v = _random(rng, 2, 6, 2, 16)
    assert np.abs(np.einsum("bqhd,bkhd->bhqk", q, k)).max() / 4 > 65504
    cast = [ops.cast(t, dtype) for t in (q, k, v)]
    out, _ = scaled_dot_product_attention(*cast, return_scores=True)
    assert keras.backend.standardize_dtype(out.dtype) == dtype
    out = to_numpy(ops.cast(out, "float32"))
    assert np.all(np.isfinite(out))
    # The reference sees the same rounded inputs.
    rounded = [to_numpy(ops.cast(t, "float32")) for t in cast]
    ref, _ = reference_attention(*rounded)
    tolerance = 1e-2 if dtype == "float16" else 5e-2
    np.testing.assert_allclose(out, ref, atol=tolerance * np.abs(ref).max())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_fully_masked_rows_are_zero(rng, dtype):
    q, k, v = (ops.cast(_random(rng, 1, 4, 8), dtype) for _ in range(3))
    mask = np.ones((1, 4, 4), dtype=bool)
    mask[0, 0] = False
    out = to_numpy(ops.cast(scaled_dot_product_attention(q, k, v, mask), "float32"))
    assert np.all(np.isfinite(out))
    np.testing.assert_array_equal(out[0, 0], 0.0)


# ----------------------------------------------------------------- dropout


def test_dropout_is_off_outside_training(rng):
    q, k, v = (_random(rng, 1, 5, 4) for _ in range(3))
    a = scaled_dot_product_attention(q, k, v, dropout=0.5, seed=1)
    b = scaled_dot_product_attention(q, k, v)
    np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


def test_dropout_drops_weights_and_rescales_the_rest(rng):
    # With V = I the output rows are the (dropped) weights themselves.
    length = 64
    q, k = _random(rng, 1, length, 4), _random(rng, 1, length, 4)
    v = np.eye(length, dtype="float32")[None]
    _, weights = scaled_dot_product_attention(q, k, v, return_scores=True)
    dropped = to_numpy(
        scaled_dot_product_attention(q, k, v, dropout=0.25, training=True, seed=7)
    )
    weights = to_numpy(weights)[0, 0]
    kept = dropped[0] != 0
    assert 0.70 < kept.mean() < 0.80
    np.testing.assert_allclose(dropped[0][kept], weights[kept] / 0.75, rtol=1e-5)
    again = to_numpy(
        scaled_dot_product_attention(q, k, v, dropout=0.25, training=True, seed=7)
    )
    np.testing.assert_array_equal(dropped, again)
    # A NumPy seed is the same seed (Keras's random ops refused it).
    numpy_seed = to_numpy(
        scaled_dot_product_attention(
            q, k, v, dropout=0.25, training=True, seed=np.int64(7)
        )
    )
    np.testing.assert_array_equal(dropped, numpy_seed)


# --------------------------------------------------------------- symbolic use


def test_symbolic_inputs_with_unknown_batch_and_length():
    q = keras.Input((None, 2, 8))
    v = keras.Input((None, 2, 6))
    out, weights = scaled_dot_product_attention(
        q, q, v, causal=True, return_scores=True
    )
    assert tuple(out.shape) == (None, None, 2, 6)
    assert tuple(weights.shape) == (None, 2, None, None)


_KERNEL_OPTIONS = dict(causal=True, query_offset=1, return_scores=True, scale=0.3)


def _kernel_model(rng, rank: int):
    """A functional model of the kernel alone on rank-`rank` inputs, and
    inputs for it: (model, arrays)."""
    heads = () if rank == 3 else (2,)
    q = _random(rng, 2, 5, *heads, 4)
    v = _random(rng, 2, 6, *heads, 3)
    mask = rng.random((2, 5, 6)) > 0.3
    padding = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
    inputs = [
        keras.Input((5, *heads, 4)),
        keras.Input((6, *heads, 4)),
        keras.Input((6, *heads, 3)),
        keras.Input((5, 6), dtype="bool"),
        keras.Input((6,), dtype="bool"),
    ]
    out, weights = scaled_dot_product_attention(
        *inputs[:3], inputs[3], padding_mask=inputs[4], **_KERNEL_OPTIONS
    )
    model = keras.Model(inputs, [out, weights])
    return model, [q, v[..., :1].repeat(4, -1), v, mask, padding]


@pytest.mark.parametrize("rank", [3, 4], ids=["three_d", "four_d"])
def test_a_functional_model_of_the_kernel_runs_it(rng, rank):
    # Called on keras.Input, the kernel gave a model that built and then
    # raised NotImplementedError when run: its node had no `call`.
    model, arrays = _kernel_model(rng, rank)
    got = model.predict(arrays, verbose=0)
    want = scaled_dot_product_attention(
        *arrays[:3], arrays[3], padding_mask=arrays[4], **_KERNEL_OPTIONS
    )
    for a, b, spec in zip(got, want, model.outputs, strict=True):
        np.testing.assert_allclose(a, to_numpy(b), rtol=1e-6, atol=1e-7)
        shape = zip(spec.shape, a.shape, strict=True)
        assert a.shape == tuple(known or got for known, got in shape)


# Loads each (model, inputs, outputs) triple of paths it is given; one
# process for all, as a Python process with its backend takes seconds to start.
_LOAD_AND_PREDICT = """
import sys, numpy as np, keras
import keras_selfattn  # registers the kernel's operation; nothing else
for model_path, inputs_path, outputs_path in zip(*[iter(sys.argv[1:])] * 3):
    arrays = dict(np.load(inputs_path))
    model = keras.models.load_model(model_path)
    got = model.predict([arrays[f"a{i}"] for i in range(5)], verbose=0)
    np.savez(outputs_path, *got)
"""


def test_functional_models_of_the_kernel_load_in_a_fresh_process(
    rng, tmp_path, subprocess_env
):
    # Saved, and loaded in a fresh process with the options kept.
    expected, paths = {}, []
    for rank in (3, 4):
        model, arrays = _kernel_model(rng, rank)
        expected[rank] = model.predict(arrays, verbose=0)
        model_path = tmp_path / f"kernel{rank}.keras"
        inputs_path = tmp_path / f"in{rank}.npz"
        model.save(model_path)
        np.savez(inputs_path, **{f"a{i}": a for i, a in enumerate(arrays)})
        paths += [model_path, inputs_path, tmp_path / f"out{rank}.npz"]
    subprocess.run(
        [sys.executable, "-c", _LOAD_AND_PREDICT, *map(str, paths)],
        check=True, env=subprocess_env, timeout=300,
    )  # fmt: skip
    for rank, got in expected.items():
        loaded = np.load(tmp_path / f"out{rank}.npz")
        assert len(loaded.files) == len(got) == 2
        for i, a in enumerate(got):
            np.testing.assert_array_equal(loaded[f"arr_{i}"], a, err_msg=f"rank {rank}")


# ------------------------------------------------------------------- errors

_BAD_CALLS = {
    "scale_zero": ({"scale": 0.0}, "`scale`"),
    "scale_negative": ({"scale": -1.0}, "`scale`"),
    "scale_inf": ({"scale": float("inf")}, "`scale`"),
    "window_zero": ({"sliding_window": 0}, "`sliding_window`"),
    "window_float": ({"sliding_window": 2.5}, "`sliding_window`"),
    "dropout_one": ({"dropout": 1.0}, "`dropout`"),
    "dropout_negative": ({"dropout": -0.1}, "`dropout`"),
    "offset_negative": ({"causal": True, "query_offset": -1}, "`query_offset`"),
    "offset_float": ({"causal": True, "query_offset": 1.5}, "`query_offset`"),
    "offset_bool": ({"causal": True, "query_offset": True}, "`query_offset`"),
    "offset_vector": (
        {"causal": True, "query_offset": np.array([1, 2])},
        "`query_offset`",
    ),
    "offset_float_array": (
        {"causal": True, "query_offset": np.array(1.0)},
        "`query_offset`",
    ),
    "offset_negative_numpy": (
        {"causal": True, "query_offset": np.int64(-1)},
        "`query_offset`",
    ),
    # A truthy string would turn on what the caller meant to turn off.
    "causal_string": ({"causal": "no"}, "`causal`"),
    "return_scores_int": ({"return_scores": 1}, "`return_scores`"),
    "flash_string": ({"flash_attention": "no"}, "`flash_attention`"),
    "training_string": ({"dropout": 0.5, "training": "no"}, "`training`"),
    "seed_negative": ({"seed": -1}, "`seed`"),
    "seed_too_large": ({"seed": 2**31}, "`seed`"),
    "seed_float": ({"seed": 1.5}, "`seed`"),
    # Positions are int32: these overflowed into wrong answers or crashes.
    "offset_past_int32": ({"causal": True, "query_offset": 2**31}, "`query_offset`"),
    "window_past_int32": ({"sliding_window": 2**31}, "`sliding_window`"),
    # The last of the 3 queries at 2**31 + 1: it wrapped, every key hid, zeros.
    "last_query_past_int32": (
        {"causal": True, "query_offset": 2**31 - 1},
        r"`query_offset`, expected at most 2\*\*31 - q_len = 2147483645",
    ),
}


@pytest.mark.parametrize("path", ["plain", "chunked"])
def test_the_largest_query_offset_sees_every_key(rng, path):
    q, k, v = (_random(rng, 1, 3, 4) for _ in range(3))
    options = {"chunk_size": 2} if path == "chunked" else {"flash_attention": False}
    last = scaled_dot_product_attention(
        q, k, v, causal=True, query_offset=np.int64(2**31 - 3), **options
    )
    expected = scaled_dot_product_attention(q, k, v, flash_attention=False)
    np.testing.assert_allclose(to_numpy(last), to_numpy(expected), rtol=1e-6)


@pytest.mark.backend_independent
@pytest.mark.parametrize("kwargs, name", _BAD_CALLS.values(), ids=_BAD_CALLS.keys())
def test_bad_options_raise_value_error_naming_the_argument(rng, kwargs, name):
    q = _random(rng, 1, 3, 4)
    with pytest.raises(ValueError, match=name):
        scaled_dot_product_attention(q, q, q, **kwargs)


_BAD_SHAPES = {
    "rank_2": (((3, 4), (3, 4), (3, 4)), "`query`"),
    "rank_5": (((1, 3, 1, 1, 4),) * 3, "`query`"),
    "key_rank_differs": (((1, 3, 4), (1, 3, 1, 4), (1, 3, 4)), "`key`"),
    "key_dim_differs": (((1, 3, 4), (1, 3, 5), (1, 3, 4)), "`key`"),
    "value_length_differs": (((1, 3, 4), (1, 3, 4), (1, 2, 4)), "`value`"),
    "heads_differ": (((1, 3, 2, 4), (1, 3, 3, 4), (1, 3, 3, 4)), "`key`"),
    "no_kv_heads": (((1, 3, 2, 4), (1, 3, 0, 4), (1, 3, 0, 4)), "`key`"),
    "no_query_heads": (((1, 3, 0, 4), (1, 3, 1, 4), (1, 3, 1, 4)), "`query`"),
    "dim_zero": (((1, 3, 2, 0), (1, 3, 2, 0), (1, 3, 2, 4)), "`query`"),
}


@pytest.mark.backend_independent
@pytest.mark.parametrize("shapes, name", _BAD_SHAPES.values(), ids=_BAD_SHAPES.keys())
def test_bad_shapes_raise_value_error_naming_the_argument(shapes, name):
    tensors = [np.zeros(s, "float32") for s in shapes]
    with pytest.raises(ValueError, match=name):
        scaled_dot_product_attention(*tensors)


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "mask_shape",
    [(2, 5, 7), (2, 4, 5, 6), (3, 5, 6), (6,), (1, 1, 2, 5, 6)],
    ids=["k_len_wrong", "heads_wrong", "batch_wrong", "rank_1", "rank_5"],
)
def test_mask_of_wrong_shape_raises(mask_shape):
    q = np.zeros((2, 5, 3, 4), "float32")
    k = np.zeros((2, 6, 3, 4), "float32")
    with pytest.raises(ValueError, match="`mask`"):
        scaled_dot_product_attention(q, k, k, np.ones(mask_shape, bool))


def test_integer_inputs_raise_value_error():
    ids = np.ones((1, 3, 4), "int32")
    with pytest.raises(ValueError, match=r"`query`.*floating-point"):
        scaled_dot_product_attention(ids, ids, ids)


# ----------------------------------------------------------- masked_softmax


def test_masked_softmax_matches_numpy_and_zeroes_rows_with_no_key(rng):
    logits = rng.normal(size=(2, 3, 4)).astype("float32") * 5
    mask = rng.random((2, 1, 4)) > 0.4
    mask[1, 0] = False  # a row that may see nothing
    weights = to_numpy(masked_softmax(logits, mask))
    exp = np.where(mask, np.exp(logits - logits.max(-1, keepdims=True)), 0.0)
    sums = exp.sum(-1, keepdims=True)
    expected = np.divide(exp, sums, out=np.zeros_like(exp), where=sums > 0)
    np.testing.assert_allclose(weights, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(weights[1], 0.0)
    half = to_numpy(masked_softmax(logits.astype("float16") * 1000, mask))
    assert half.dtype == np.float16 and np.isfinite(half).all()


_BAD_SOFTMAX = {
    "integer_logits": ((np.array([[1, 2]]), None), r"`logits`.*floating-point"),
    "mask_too_long": (
        (np.zeros((2, 3), "float32"), np.ones((4,), bool)),
        r"`mask`, expected a boolean tensor broadcastable to the logits' "
        r"shape \(2, 3\)",
    ),
    "mask_of_higher_rank": (
        (np.zeros((2, 3), "float32"), np.ones((1, 2, 3), bool)),
        r"`mask`",
    ),
    # These failed deep inside the backend's reduction.
    "axis_out_of_range": (
        (np.zeros((2, 3), "float32"), None, 2),
        r"`axis`, expected an int or a tuple of distinct ints, each an axis of "
        r"the 2-D logits \(from -2 to 1\)\. Received: axis=2",
    ),
    "axis_a_string": ((np.zeros((2, 3), "float32"), None, "a"), r"`axis`"),
    "axis_repeated": ((np.zeros((2, 3), "float32"), None, (1, -1)), r"`axis`"),
}


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "args, message", _BAD_SOFTMAX.values(), ids=_BAD_SOFTMAX.keys()
)
def test_masked_softmax_bad_input_is_a_value_error(args, message):
    # Integer logits came back as integer weights (all 0); a mask that does
    # not broadcast failed deep inside each backend.
    with pytest.raises(ValueError, match=message):
        masked_softmax(*args)


# ------------------------------------------- regressions found in review


@pytest.mark.parametrize("chunk_size", [None, 1], ids=["plain", "chunk1"])
def test_padding_mask_with_as_many_sequences_as_heads_and_one_key(rng, chunk_size):
    # A (batch, 1, 1, 1) bias once went along the heads axis on TensorFlow
    # (Keras's `add` took it for a bias of size batch == heads).
    q = _random(rng, 2, 3, 2, 4)
    k = _random(rng, 2, 1, 2, 4)
    v = np.ones((2, 1, 2, 4), "float32")
    padding_mask = np.array([[True], [False]])
    mask = np.ones((2, 3, 1), bool)
    out = scaled_dot_product_attention(
        q, k, v, mask, padding_mask=padding_mask, chunk_size=chunk_size
    )
    got = to_numpy(out)[:, 0, :, 0]
    # One visible key: weight 1 up to float32 rounding (Keras 3.15.1's softmax
    # gives 1 - 6e-8); the padded sequence gets exact zeros.
    np.testing.assert_allclose(got[0], [1, 1], rtol=1e-6)
    np.testing.assert_array_equal(got[1], [0, 0])


def test_no_key_at_all_gives_zeros_on_every_path(rng):
    q = _random(rng, 2, 3, 2, 4)
    empty = np.zeros((2, 0, 2, 4), "float32")
    for chunk_size in (None, 4):
        out = scaled_dot_product_attention(q, empty, empty, chunk_size=chunk_size)
        np.testing.assert_array_equal(to_numpy(out), 0.0)


_EMPTY = {  # query shape, key (and value) shape, options
    "no_key_mask": ((1, 4, 1, 8), (1, 0, 1, 8), {"mask": np.ones((1, 4, 0), bool)}),
    "no_key_causal": ((1, 4, 1, 8), (1, 0, 1, 8), {"causal": True}),
    "no_key_window_chunked": (
        (1, 4, 1, 8),
        (1, 0, 1, 8),
        {"sliding_window": 2, "chunk_size": 2},
    ),
    "no_key_mask_scores": (
        (1, 4, 1, 8),
        (1, 0, 1, 8),
        {"mask": np.ones((1, 4, 0), bool), "return_scores": True},
    ),
    "no_batch_causal": ((0, 4, 1, 8), (0, 4, 1, 8), {"causal": True}),
    "no_batch_mask_chunked": (
        (0, 4, 1, 8),
        (0, 4, 1, 8),
        {"mask": np.ones((0, 4, 4), bool), "chunk_size": 2},
    ),
    "no_query_causal_plain": (
        (1, 0, 1, 8),
        (1, 4, 1, 8),
        {"causal": True, "flash_attention": False},
    ),
    "no_query_causal_chunked": (
        (1, 0, 1, 8),
        (1, 4, 1, 8),
        {"causal": True, "chunk_size": 2},
    ),
    "no_key_grouped": ((2, 4, 4, 8), (2, 0, 2, 8), {"causal": True}),
    "no_query_no_key_grouped": ((2, 0, 4, 8), (2, 0, 2, 8), {}),
    "no_query_scores": ((2, 0, 2, 8), (2, 3, 2, 8), {"return_scores": True}),
    "no_batch_padding_one_head": (
        (0, 4, 1, 8),
        (0, 5, 1, 8),
        {"padding_mask": np.ones((0, 5), bool)},
    ),
    "no_batch_padding_chunked": (
        (0, 4, 1, 8),
        (0, 5, 1, 8),
        {"padding_mask": np.ones((0, 5), bool), "chunk_size": 2},
    ),
}


def _cpu_only() -> bool:
    """Whether the backend computes on a CPU (no GPU to run flash on)."""
    if BACKEND == "jax":
        import jax

        return jax.devices()[0].platform == "cpu"
    if BACKEND == "torch":
        import torch

        return not torch.cuda.is_available()
    return True


@pytest.mark.skipif(
    BACKEND == "tensorflow" or not _cpu_only(),
    reason="JAX's and PyTorch's fused kernels, on a CPU (TensorFlow has none: "
    "refused in the plan, tested above)",
)
def test_flash_attention_the_backend_refuses_is_a_value_error():
    # JAX said "cuDNN is not detected", PyTorch "Flash attention is not
    # supported with the provided inputs": a RuntimeError from deep in the
    # backend, where the docstrings promise a ValueError (a probe, 2026-12-07).
    q = np.ones((1, 4, 2, 8), "float32")
    with pytest.raises(
        ValueError,
        match=r"`flash_attention=True` cannot be honoured: the backend's fused "
        r"kernel refused it here \(.+\)\. Set `flash_attention=None`",
    ):
        scaled_dot_product_attention(q, q, q, flash_attention=True)


@pytest.mark.parametrize("shape", [(0, 4, 2, 8), (1, 0, 2, 8)], ids=["batch", "query"])
def test_what_cannot_be_honoured_is_refused_with_no_query_too(shape):
    # Empty inputs return early: they skipped the refusal.
    q, k = np.ones(shape, "float32"), np.ones((shape[0], 4, 2, 8), "float32")
    with pytest.raises(ValueError, match=r"`flash_attention=True` cannot be honoured"):
        scaled_dot_product_attention(q, k, k, flash_attention=True, return_scores=True)


@pytest.mark.parametrize("case", _EMPTY.values(), ids=_EMPTY.keys())
def test_empty_inputs_with_masks_give_zeros_and_zero_gradients(case):
    # Each crashed inside a backend ("Cannot compute the max of an empty
    # tensor") before the kernel took the row maximum of nothing as no key.
    q_shape, k_shape, options = case
    q, k = np.ones(q_shape, "float32"), np.ones(k_shape, "float32")
    out = scaled_dot_product_attention(q, k, k, **options)
    if options.get("return_scores"):
        out, scores = out
        assert to_numpy(scores).shape == (
            *q_shape[:1],
            q_shape[2],
            q_shape[1],
            k_shape[1],
        )
        options = {**options, "return_scores": False}
    assert to_numpy(out).shape == q_shape
    np.testing.assert_array_equal(to_numpy(out), 0.0)
    grads = gradients(
        lambda *t: ops.sum(scaled_dot_product_attention(*t, **options)), q, k, k
    )
    assert [g.shape for g in grads] == [q_shape, k_shape, k_shape]
    for g in grads:
        np.testing.assert_array_equal(g, 0.0)


def test_masked_softmax_of_no_entry_is_empty():
    empty = np.zeros((2, 3, 0), "float32")
    assert to_numpy(masked_softmax(empty, np.ones((2, 3, 0), bool))).shape == (2, 3, 0)
    assert to_numpy(masked_softmax(np.zeros((0, 3), "float32"))).shape == (0, 3)


def test_float16_floatx_does_not_turn_the_mask_into_infinities(rng):
    q, k, v = (_random(rng, 2, 4, 2, 8) for _ in range(3))
    padding_mask = np.array([[True] * 4, [True, False, False, False]])
    try:
        keras.config.set_floatx("float16")
        out = scaled_dot_product_attention(q, k, v, padding_mask=padding_mask)
    finally:
        keras.config.set_floatx("float32")
    assert np.all(np.isfinite(to_numpy(out)))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_default_path_excludes_a_padded_key_with_a_huge_logit(dtype):
    # On a CPU the fused kernels compute half precision in half precision,
    # where the mask's bias can lose to a large logit: the default path
    # keeps float32 there.
    q = np.full((1, 1, 1, 8), 30.0, "float32")
    k = np.concatenate([np.zeros((1, 1, 1, 8)), np.full((1, 1, 1, 8), 30.0)], 1)
    v = np.concatenate([np.ones((1, 1, 1, 8)), np.full((1, 1, 1, 8), 100.0)], 1)
    cast = [ops.cast(np.asarray(t, "float32"), dtype) for t in (q, k, v)]
    out = scaled_dot_product_attention(*cast, padding_mask=np.array([[True, False]]))
    np.testing.assert_allclose(to_numpy(ops.cast(out, "float32")), 1.0)
