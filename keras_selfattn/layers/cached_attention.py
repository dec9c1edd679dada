"""CachedMultiHeadAttention: keras-hub's cached attention on this package's kernel."""

from __future__ import annotations

import keras
from keras import ops

from keras_selfattn import _backend
from keras_selfattn._validation import invalid
from keras_selfattn.attention import positional_mask
from keras_selfattn.layers._common import (
    boolean_mask,
    combined_masks,
    zero_padded,
    zero_padded_scores,
)
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention


@keras.saving.register_keras_serializable(package="keras_selfattn")
class CachedMultiHeadAttention(MultiHeadAttention):
    """Multi-head attention with a key/value cache, for autoregressive decoding.

    Shapes (`B` batch, `T` target length, `S` source length): `query`
    `(B, T, dim)`, `value` and `key` `(B, S*, dim)`, `cache`
    `(B, 2, S, num_heads, key_dim)` (keys at `[:, 0]`, values at `[:, 1]`);
    `(B, T, output_dim)` out, with the scores `(B, num_heads, T, S)` and the
    updated cache beside it when asked for.

    A drop-in for keras-hub's `keras_hub.layers.CachedMultiHeadAttention`
    (its call, cache layout, return tuples and errors are reimplemented
    here, Apache 2.0, credit to the keras-hub authors; keras-hub is not
    imported), on `keras_selfattn.MultiHeadAttention`: the constructor (with
    the kernel's `scale`, `chunk_size`, `flash_attention`), the weights and
    the attention itself (`keras_selfattn.scaled_dot_product_attention`)
    are that layer's. A call runs in one of three modes:

    - No `cache`: plain multi-head attention.
    - `cache` with `cache_update_index=None`: the cached keys and values are
      used, `key` and `value` are ignored.
    - `cache` with `cache_update_index`: the projections of `key` and
      `value` are written into the cache at that index along `S`, and the
      updated cache is used (and returned).

    keras-hub's vLLM paged-attention route (TPU serving) is not reproduced.

    Masking: `attention_mask` masks as in keras-hub. Without a `cache`, the
    inputs' Keras masks (which keras-hub's layer ignores) count too, as in
    `keras_selfattn.MultiHeadAttention`: a padded key gets zero weight (as
    a key mask; no `(T, S)` tensor is built from it) and a padded query
    position outputs zeros. With a `cache` they are not read (they would
    cover the new entries only), as in keras-hub. A query row that may
    attend to no key outputs zeros (keras-hub outputs an average there).
    `use_causal_mask=True` (an argument keras-hub's layer lacks) makes it
    causal: a flag to the kernel, so that no `(T, S)` tensor is built and
    the chunked path keeps memory linear in `S`. With a `cache`, the
    queries sit at `cache_update_index` for the causal rule and for
    `sliding_window` alike (causally, query `i` sees key `j` when
    `j <= cache_update_index + i`: the kernel's `query_offset`); a subclass
    that overrides `_compute_attention` (whose Keras signature has no query
    position) gets a `ValueError` for a `sliding_window` with a `cache`.

    Args:
        num_heads: Positive integer, the number of attention heads.
        key_dim: Positive integer, the size of each head for query and key.
        **kwargs: The other arguments of `keras_selfattn.MultiHeadAttention`,
            with its meanings and defaults: `value_dim` (`None`: `key_dim`),
            `dropout` (`0.0`), `use_bias` (`True`), `output_shape`
            (`None`), `attention_axes` (`None`), `sliding_window` (`None`),
            `flash_attention` (`None`), `kernel_initializer`
            (`"glorot_uniform"`), `bias_initializer` (`"zeros"`),
            `kernel_regularizer`, `bias_regularizer`, `activity_regularizer`,
            `kernel_constraint` and `bias_constraint` (`None`), `use_gate`
            (`False`), `seed` (`None`), `scale` (`None`: `1 / sqrt(key_dim)`)
            and `chunk_size` (`None`); and base layer arguments, such as
            `name` and `dtype`.

    Call arguments:
        query: Query tensor `(B, T, dim)`.
        value: Value tensor `(B, S*, dim)`: `S` long without a cache; with
            a cache, any length that fits at `cache_update_index`.
        key: Optional key tensor `(B, S*, dim)`. Defaults to `value`.
        attention_mask: Optional boolean mask `(B, T, S)`, True where a
            query may attend to a key; missing batch and head axes
            broadcast. Defaults to `None`.
        cache: Optional float tensor `(B, 2, S, num_heads, key_dim)`, the
            keys and values so far. Defaults to `None`.
        cache_update_index: Optional int or int tensor, where along `S` the
            new keys and values go. Only with `cache` (otherwise a
            `ValueError`). Defaults to `None`: the cache is not updated.
        return_attention_scores: Boolean. If True, also return the
            attention weights. Defaults to `False`.
        training: Python boolean, whether dropout is active.
        query_mask: Optional boolean `(B, T)`, the query's Keras mask
            (Keras fills it, and `value_mask`, `key_mask`, from the inputs).
            Read only without a `cache`. Defaults to `None`.
        value_mask: Optional boolean `(B, S)`. Defaults to `None`.
        key_mask: Optional boolean `(B, S)`. Defaults to `None`.
        use_causal_mask: Boolean, causal attention (see Masking); combines
            with `attention_mask`. Defaults to `False` (as keras-hub's layer,
            which takes its causal mask as `attention_mask`).

    Returns:
        `attention_output`, `(attention_output, attention_scores)`,
        `(attention_output, cache)` or
        `(attention_output, attention_scores, cache)`, as keras-hub returns.

    Example:

    >>> layer = CachedMultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = np.random.rand(1, 3, 8).astype("float32")
    >>> cache = np.zeros((1, 2, 3, 2, 4), "float32")
    >>> causal = np.tril(np.ones((3, 3), bool))
    >>> full, cache = layer(x, x, attention_mask=causal, cache=cache,
    ...                     cache_update_index=0)
    >>> step = layer(x[:, 2:], x[:, 2:], attention_mask=causal[2:],
    ...              cache=cache, cache_update_index=2)[0]
    >>> step, full = keras.ops.convert_to_numpy(step), keras.ops.convert_to_numpy(full)
    >>> tuple(cache.shape), bool(np.allclose(step, full[:, 2:], atol=1e-5))
    ((1, 2, 3, 2, 4), True)
    """

    def _check_cache(self, cache, query) -> None:
        """A `cache` holds the keys and values, stacked:
        `(batch, 2, max_length, num_heads, key_dim)`."""
        shape = tuple(cache.shape)
        batch, heads, size = query.shape[0], self._num_heads, self._key_dim
        want = (batch, 2, None, heads, size)
        if len(shape) != 5 or not all(
            a is None or b is None or a == b for a, b in zip(shape, want, strict=True)
        ):
            raise invalid(
                "cache",
                "a tensor of shape (batch, 2, max_length, num_heads, key_dim) "
                f"= ({batch}, 2, max_length, {heads}, {size}): the keys and "
                "the values, stacked",
                f"<tensor of shape {shape}>",
            )
        dtype = keras.backend.standardize_dtype(cache.dtype)
        if dtype != self.compute_dtype:
            raise invalid(
                "cache",
                f"a tensor of the layer's compute dtype, {self.compute_dtype} "
                "(the new keys and values are written into it)",
                f"<tensor of dtype {dtype}>",
            )
        if self._value_dim != size:
            raise invalid(
                "cache",
                "no cache: it stacks keys and values, which needs value_dim == "
                f"key_dim (here value_dim={self._value_dim}, key_dim={size})",
                f"<tensor of shape {shape}>",
            )

    @staticmethod
    def _check_update_index(index, key, cache) -> None:
        """A `cache_update_index` is an integer or a scalar integer tensor
        (a float would reach the backend's slice update, and fail there).
        Where its value is known (a Python or NumPy integer, an eager scalar
        tensor) it must place the new entries inside the cache: backends
        clamp a slice update that does not fit (JAX and TensorFlow), which
        would write the wrong rows silently. A traced index (decoding under
        `jit`) is the caller's to keep in range."""
        dtype = getattr(index, "dtype", None)
        if dtype is not None:
            dtype = keras.backend.standardize_dtype(dtype)
        is_int = isinstance(index, int) and not isinstance(index, bool)
        if not is_int and (
            dtype is None
            or "int" not in dtype
            or tuple(getattr(index, "shape", ())) != ()
        ):
            shape = getattr(index, "shape", None)
            raise invalid(
                "cache_update_index",
                "an integer or a scalar integer tensor",
                index if dtype is None else f"<tensor of dtype {dtype}, shape {shape}>",
            )
        if not is_int:
            # A NumPy integer (`np.arange`'s) reaches `call` as an eager
            # tensor: its value is known, so it is checked too.
            if not _backend.values_known(index):
                return
            index = int(ops.convert_to_numpy(index))
        length, new = cache.shape[2], key.shape[1]
        if None in (length, new):
            expected, bad = "a non-negative integer", index < 0
        else:
            expected = (
                f"an integer from 0 to {length - new} (the cache holds "
                f"{length} entries and the call adds {new})"
            )
            bad = not 0 <= index <= length - new
        if bad:
            raise ValueError(
                "Received an invalid value for argument `cache_update_index`, "
                f"expected {expected}. Received: cache_update_index={index}"
            )

    def call(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        use_causal_mask=False,
    ):
        if key is None:
            key = value
        self._check_build_shapes(query.shape, value.shape, key.shape)
        self._check_scores_allowed(return_attention_scores)
        padding = None
        if cache is None:
            # Keras's masks (which keras-hub's layer ignores); with a cache
            # they would cover the new entries only, and are not read.
            query_mask, value_mask, key_mask = self._call_masks(
                query, value, key, query_mask, value_mask, key_mask
            )
            padding = combined_masks(value_mask, key_mask)
            # Padding may hold NaN or inf: zeroed (a select) before projecting.
            query = zero_padded(query, query_mask)
            key, value = zero_padded(key, padding), zero_padded(value, padding)
        else:
            query_mask = None
        query = self._query_dense(query)
        if cache is not None:
            self._check_cache(cache, query)
            key_cache = cache[:, 0, ...]
            value_cache = cache[:, 1, ...]
            if cache_update_index is None:
                key = key_cache
                value = value_cache
            else:
                self._check_update_index(cache_update_index, key, cache)
                index = cache_update_index
                key = _backend.update_cache(key_cache, self._key_dense(key), index)
                value = _backend.update_cache(
                    value_cache, self._value_dense(value), index
                )
                cache = ops.stack((key, value), axis=1)
        else:
            if cache_update_index is not None:
                raise ValueError(
                    "`cache_update_index` should not be set if `cache` is "
                    f"`None`. Received: cache={cache}, "
                    f"cache_update_index={cache_update_index}"
                )
            key = self._key_dense(key)
            value = self._value_dense(value)

        attention_mask = boolean_mask("attention_mask", attention_mask, "may attend")
        hook = type(self)._compute_attention
        own_hook = hook is MultiHeadAttention._compute_attention
        extra = {}
        # The queries sit at the update index (keras-hub's
        # `compute_causal_mask`), for the causal rule and the sliding window:
        # the kernel's `query_offset`.
        start = 0 if cache_update_index is None else cache_update_index
        if own_hook:
            if use_causal_mask:
                extra["use_causal_mask"] = True  # a flag: no (T, S) tensor
            if cache is not None:
                extra["query_offset"] = start
        elif cache is not None and self._sliding_window is not None:
            # Keras's hook takes no offset: its window would count the
            # queries from 0. Refused rather than answered wrongly.
            raise ValueError(
                "A subclass of `CachedMultiHeadAttention` that overrides "
                "`_compute_attention` cannot decode from a `cache` with "
                "`sliding_window` (the hook has no query position). Received: "
                f"sliding_window={self._sliding_window}, "
                f"{type(self).__name__}._compute_attention overridden"
            )
        elif use_causal_mask:  # Keras's hook contract: one merged mask
            causal = positional_mask(
                ops.shape(query)[1], ops.shape(key)[1], True, None, start
            )
            attention_mask = combined_masks(attention_mask, causal[0])
        if padding is not None:
            if own_hook:
                extra["key_padding_mask"] = padding  # a key mask, no (T, S) tensor
            else:  # Keras's hook contract: one merged mask
                attention_mask = combined_masks(attention_mask, padding[:, None, :])
        attention_output, attention_scores = self._compute_attention(
            query=query,
            key=key,
            value=value,
            attention_mask=attention_mask,
            return_attention_scores=return_attention_scores,
            training=training,
            **extra,
        )
        attention_output = zero_padded(self._output_dense(attention_output), query_mask)
        attention_scores = zero_padded_scores(attention_scores, query_mask)

        if return_attention_scores and cache is not None:
            return attention_output, attention_scores, cache
        if return_attention_scores:
            return attention_output, attention_scores
        if cache is not None:
            return attention_output, cache
        return attention_output

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        use_causal_mask=False,
    ):
        if cache is None:
            return super().compute_output_spec(
                query,
                value,
                key,
                query_mask=query_mask,
                value_mask=value_mask,
                key_mask=key_mask,
                attention_mask=attention_mask,
                return_attention_scores=return_attention_scores,
                training=training,
                use_causal_mask=use_causal_mask,
            )
        self._check_cache(cache, query)
        output = keras.KerasTensor(
            self.compute_output_shape(query.shape, value.shape),
            dtype=self.compute_dtype,
        )
        cache_spec = keras.KerasTensor(cache.shape, dtype=cache.dtype)
        if return_attention_scores:
            scores = keras.KerasTensor(
                (query.shape[0], self._num_heads, query.shape[1], cache.shape[2]),
                dtype=self.compute_dtype,
            )
            return output, scores, cache_spec
        return output, cache_spec
