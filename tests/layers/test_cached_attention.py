"""CachedMultiHeadAttention's `use_causal_mask` (an argument keras-hub's layer
lacks): the same outputs as the explicit causal mask keras-hub's decoder
gives it, with and without a cache, on every path (its cache layout and the
rest of its math are tested against keras-hub in test_keras_hub_parity.py)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_selfattn import CachedMultiHeadAttention
from tests.helpers import needs_keras, to_numpy


class _OwnHook(CachedMultiHeadAttention):
    """A subclass with its own `_compute_attention`: it gets one merged mask."""

    def _compute_attention(self, query, key, value, attention_mask=None, **kwargs):
        return super()._compute_attention(query, key, value, attention_mask, **kwargs)


with_both_hooks = pytest.mark.parametrize(
    "cls", [CachedMultiHeadAttention, _OwnHook], ids=["ours", "subclass"]
)


@pytest.mark.parametrize("chunk_size", [None, 2], ids=["default_path", "chunked"])
@with_both_hooks
def test_use_causal_mask_without_a_cache_is_the_lower_triangle(rng, cls, chunk_size):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    padding = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=bool)
    layer = cls(num_heads=2, key_dim=4, chunk_size=chunk_size)
    explicit = np.tril(np.ones((5, 5), bool))[None] & padding[:, None, :]
    expected = to_numpy(layer(x, x, attention_mask=explicit))
    got = to_numpy(layer(x, x, value_mask=padding, use_causal_mask=True))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # Not a mask that is never read: without it the outputs differ.
    unmasked = to_numpy(layer(x, x, value_mask=padding))
    assert np.abs(unmasked - expected).max() > 1e-3


@pytest.mark.parametrize("chunk_size", [None, 2], ids=["default_path", "chunked"])
@with_both_hooks
def test_use_causal_mask_with_a_cache_counts_rows_from_the_update_index(
    rng, cls, chunk_size
):
    x = rng.normal(size=(1, 4, 8)).astype("float32")
    layer = cls(num_heads=2, key_dim=4, chunk_size=chunk_size)
    cache = np.zeros((1, 2, 4, 2, 4), "float32")
    full, cache = layer(x, x, cache=cache, cache_update_index=0, use_causal_mask=True)
    causal = np.tril(np.ones((4, 4), bool))
    expected = to_numpy(layer(x, x, attention_mask=causal))
    np.testing.assert_allclose(to_numpy(full), expected, atol=1e-5)
    # Decoding position 2 alone, from the cache: row 2 of the triangle.
    step, _ = layer(
        x[:, 2:3], x[:, 2:3], cache=cache, cache_update_index=2, use_causal_mask=True
    )
    np.testing.assert_allclose(to_numpy(step), expected[:, 2:3], atol=1e-5)


needs_sliding_window = needs_keras("3.15", "MultiHeadAttention's sliding_window")


@needs_sliding_window
@pytest.mark.parametrize("chunk_size", [None, 2], ids=["default_path", "chunked"])
@pytest.mark.parametrize("causal_as", ["flag", "mask"])
def test_sliding_window_with_a_cache_counts_rows_from_the_update_index(
    rng, causal_as, chunk_size
):
    # Decoding position 4 alone from the cache gives row 4 of the full pass,
    # whether causality comes as the flag or as keras-hub's explicit mask.
    x = rng.normal(size=(1, 6, 8)).astype("float32")
    layer = CachedMultiHeadAttention(
        num_heads=2, key_dim=4, sliding_window=2, chunk_size=chunk_size
    )
    causal = np.tril(np.ones((6, 6), bool))
    expected = to_numpy(layer(x, x, attention_mask=causal))
    cache = np.zeros((1, 2, 6, 2, 4), "float32")
    _, cache = layer(x, x, cache=cache, cache_update_index=0, attention_mask=causal)
    if causal_as == "flag":
        masks = {"use_causal_mask": True}
    else:
        masks = {"attention_mask": causal[None, 4:5]}
    step, _ = layer(x[:, 4:5], x[:, 4:5], cache=cache, cache_update_index=4, **masks)
    np.testing.assert_allclose(to_numpy(step), expected[:, 4:5], atol=1e-5)


@needs_sliding_window
def test_a_subclass_hook_refuses_a_sliding_window_with_a_cache(rng):
    x = rng.normal(size=(1, 3, 8)).astype("float32")
    layer = _OwnHook(num_heads=2, key_dim=4, sliding_window=2)
    cache = np.zeros((1, 2, 3, 2, 4), "float32")
    with pytest.raises(
        ValueError, match=r"cannot decode from a `cache` with `sliding_window`"
    ):
        layer(x, x, cache=cache, cache_update_index=0)


@pytest.mark.parametrize(
    "index",
    [-1, 2, 3, np.int64(3), np.int32(-1)],
    # A NumPy index (a loop over `np.arange`) reaches `call` as a tensor: it
    # was not checked, and the wrong rows were written.
    ids=[
        "negative",
        "past_the_end",
        "at_the_end",
        "numpy_at_the_end",
        "numpy_negative",
    ],
)
def test_an_update_index_that_does_not_fit_the_cache_is_a_value_error(rng, index):
    # Two new entries in a cache of three: JAX and TensorFlow clamped the
    # slice update and wrote the wrong rows, PyTorch failed deep inside.
    x = rng.normal(size=(1, 2, 8)).astype("float32")
    layer = CachedMultiHeadAttention(num_heads=2, key_dim=4)
    cache = np.zeros((1, 2, 3, 2, 4), "float32")
    with pytest.raises(
        ValueError,
        match=r"argument `cache_update_index`, expected an integer from 0 to 1 "
        r"\(the cache holds 3 entries and the call adds 2\)\. "
        rf"Received: cache_update_index={index}\b",
    ):
        layer(x, x, cache=cache, cache_update_index=index)
    _, cache = layer(x, x, cache=cache, cache_update_index=1)  # the last fit
    assert np.all(to_numpy(cache)[0, :, 0] == 0) and np.all(
        to_numpy(cache)[0, :, 1:] != 0
    )


@pytest.mark.parametrize(
    "index",
    [1.0, np.float32(1), True, np.array([1])],
    ids=["float", "numpy_float", "bool", "one_element_array"],
)
def test_an_update_index_that_is_not_an_integer_is_a_value_error(index):
    # A float reached the backend's slice update, which failed deep inside
    # (TensorFlow's XlaDynamicUpdateSlice).
    x = np.zeros((1, 1, 8), "float32")
    layer = CachedMultiHeadAttention(num_heads=2, key_dim=4)
    cache = np.zeros((1, 2, 3, 2, 4), "float32")
    with pytest.raises(
        ValueError,
        match=r"argument `cache_update_index`, expected an integer or a scalar "
        r"integer tensor\. Received",
    ):
        layer(x, x, cache=cache, cache_update_index=index)


def test_a_cache_of_another_dtype_is_a_value_error():
    x = np.zeros((1, 1, 8), "float32")
    layer = CachedMultiHeadAttention(num_heads=2, key_dim=4)
    with pytest.raises(
        ValueError,
        match=r"argument `cache`, expected a tensor of the layer's compute "
        r"dtype, float32 .* Received: cache='<tensor of dtype int32>'",
    ):
        layer(x, x, cache=np.zeros((1, 2, 3, 2, 4), "int32"), cache_update_index=0)


_BAD_CACHES = {
    "heads": ({}, (1, 2, 3, 3, 4)),
    "key_dim": ({}, (1, 2, 3, 2, 5)),
    "not_stacked": ({}, (1, 3, 2, 4)),  # it read the index as out of range
    "batch": ({}, (2, 2, 3, 2, 4)),
    "value_dim": ({"value_dim": 3}, (1, 2, 3, 2, 4)),
}


@pytest.mark.parametrize(
    "kwargs, shape, symbolic",
    [
        pytest.param(kwargs, shape, symbolic, id=f"{name}_{mode}")
        for name, (kwargs, shape) in _BAD_CACHES.items()
        for symbolic, mode in ((False, "eager"), (True, "symbolic"))
        if not (symbolic and name == "batch")  # a symbolic batch is unknown
    ],
)
def test_a_cache_that_does_not_fit_the_layer_is_named(kwargs, shape, symbolic):
    x = np.zeros((1, 2, 8), "float32")
    cache = np.zeros(shape, "float32")
    if symbolic:
        x, cache = keras.Input(x.shape[1:]), keras.Input(shape[1:])
    layer = CachedMultiHeadAttention(num_heads=2, key_dim=4, **kwargs)
    expected = (
        r"value_dim == key_dim \(here value_dim=3, key_dim=4\)"
        if kwargs
        else r"\(batch, 2, max_length, num_heads, key_dim\) = \((1|None), 2, "
        r"max_length, 2, 4\)"
    )
    with pytest.raises(ValueError, match=rf"argument `cache`, expected .*{expected}"):
        layer(x, x, cache=cache, cache_update_index=0)


def test_an_attention_mask_is_checked_against_the_cache_length():
    x = np.zeros((1, 2, 8), "float32")
    layer = CachedMultiHeadAttention(num_heads=2, key_dim=4)
    cache = np.zeros((1, 2, 3, 2, 4), "float32")
    with pytest.raises(
        ValueError, match=r"`attention_mask`, expected .* = \(1, 2, 2, 3\)"
    ):
        layer(x, x, attention_mask=np.ones((1, 2, 2), bool), cache=cache,
              cache_update_index=0)  # fmt: skip
    layer(x, x, attention_mask=np.ones((1, 2, 3), bool), cache=cache,
          cache_update_index=0)  # fmt: skip
