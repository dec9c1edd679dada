"""What the drop-ins for Keras's attention layers share (not public).

`MultiHeadAttention` and `GroupQueryAttention` subclass Keras's layers and
compute through this package's kernel. `KernelAttention` holds what both add
to Keras's class: the kernel's options (`flash_attention`, `scale`,
`chunk_size`), their `build`, the masks handed on by the projections, the call's mask
checks, Keras's error for scores under flash attention, and their config.
"""

from __future__ import annotations

import functools
import math

import keras

from keras_selfattn._validation import check_paths
from keras_selfattn.attention import check_mask_shape
from keras_selfattn.layers._common import (
    boolean_mask,
    check_built_features,
    check_keras_mask,
    dtype_recording_quantized,
    rederive_call_attributes,
    take_own_policies,
)

# The projections Keras's attention layers build (`_gate_dense` with a gate).
_PROJECTIONS = ("_query_dense", "_key_dense", "_value_dense", "_gate_dense")


class KernelAttention:
    """A mixin for a subclass of one of Keras's attention layers.

    List it before Keras's class (`class Ours(KernelAttention, Keras's)`).
    """

    # Attributes our `__init__` sets that an older Keras's may not, with the
    # defaults `_adopt` gives them there.
    _ADOPT_DEFAULTS: tuple[tuple[str, object], ...] = ()

    def _set_kernel_options(
        self, flash_attention, scale: float | None, chunk_size, head_dim: int
    ) -> float:
        """Keeps the kernel's options; returns the logits' scale."""
        # Keras reads `flash_attention or is_flash_attention_enabled()`, which
        # turns an explicit False into "let the backend decide".
        if flash_attention is None:
            flash_attention = keras.config.is_flash_attention_enabled()
        self._flash_attention = flash_attention
        self._scale = scale
        self._chunk_size = chunk_size
        return scale if scale is not None else 1.0 / math.sqrt(float(head_dim))

    @classmethod
    def _adopt(cls, layer: keras.layers.Layer, chunk_size: int | None = None) -> None:
        """Makes `layer`, an instance of the Keras class that `cls` extends,
        an instance of `cls`, in place (`keras_selfattn.convert`'s one step).

        Why this is safe: `cls` subclasses `type(layer)` (or, for keras-hub's
        `CachedMultiHeadAttention`, a class with the same constructor, call
        and attributes), so every attribute Keras's `__init__` and `build`
        set is already there with the value ours would give it: the same
        weights (the same variable objects), sub-layers and hooks. Ours adds
        only what this method sets, as our `__init__` and `build` would:

        - `_flash_attention` is kept: Keras's value (`flash_attention or
          keras.config.is_flash_attention_enabled()`) is what it computes
          with; ours reads it the same way.
        - `_scale = None`: Keras's scale, `1 / sqrt(key_dim)`, already in
          `_inverse_sqrt_key_dim` (`_inverse_sqrt_head_dim` in grouped-query
          attention), which ours scales by.
        - `_chunk_size = chunk_size`, checked as our constructor checks it.
        - Built layers hand masks on through their projections, as our
          `build` makes them; an unbuilt one will build as ours does (its
          shape checks, then Keras's build, then the masks handed on).
        - `_sliding_window` and `_use_gate` where an older Keras lacks them
          (at their defaults, as our `__init__` sets them).
        - What `keras.layers.Layer.__init__` reads from the class's `call`
          (its signature, whether it takes `training` ...) is read again,
          and the `_return_attention_scores` that Keras's call keeps as
          state is a fresh layer's (False).

        Raises:
            ValueError: `chunk_size` is not a positive integer, or the layer's
                dropout or flash attention forbids the chunked path.
        """
        cls._check_adoptable(layer, chunk_size)
        layer.__class__ = cls
        layer._scale = None
        layer._chunk_size = chunk_size
        for name, default in cls._ADOPT_DEFAULTS:
            if not hasattr(layer, name):
                setattr(layer, name, default)
        rederive_call_attributes(layer)
        # Keras's call keeps this flag as state for its `_compute_attention`
        # (Keras 3.7's MultiHeadAttention too); ours pass it as an argument
        # or set it in each call: a fresh layer's value.
        if "_return_attention_scores" in vars(layer):
            layer._return_attention_scores = False
        if layer.built:
            layer._hand_on_masks()
        elif "build" in vars(layer):
            _build_as_ours(layer)

    @staticmethod
    def _check_adoptable(layer: keras.layers.Layer, chunk_size: int | None) -> None:
        """Raises `_adopt`'s `ValueError` for `layer`, changing nothing."""
        # Keras's MultiHeadAttention keeps `_dropout`, its GroupQueryAttention
        # `dropout`.
        dropout = getattr(layer, "_dropout", getattr(layer, "dropout", 0.0))
        check_paths(chunk_size, layer._flash_attention, dropout)

    @property
    def scale(self) -> float | None:
        """The `scale` argument (`None`: `1 / sqrt` of the key size per head)."""
        return self._scale

    @property
    def chunk_size(self) -> int | None:
        """The `chunk_size` argument."""
        return self._chunk_size

    def build(self, query_shape, value_shape, key_shape=None):
        """Keras's `build` between the class's shape checks
        (`_check_build_shapes`) and the masks handed on."""
        self._check_build_shapes(query_shape, value_shape, key_shape)
        super().build(query_shape, value_shape, key_shape)
        self._hand_on_masks()

    def _hand_on_masks(self) -> None:
        """After Keras's `build`: the masks are applied in `call`, so the
        projections hand them on without warning that they would drop them;
        and a loaded quantized layer's projections take their own policies
        (`take_own_policies`)."""
        for name in _PROJECTIONS:
            if getattr(self, name, None) is not None:
                getattr(self, name).supports_masking = True
        take_own_policies(self._projections())

    def _check_scores_allowed(self, return_attention_scores) -> None:
        """Raises Keras's error for attention scores under flash attention."""
        if return_attention_scores and self._flash_attention:
            raise ValueError(
                "Returning attention scores is not supported when flash "
                "attention is enabled. Please disable flash attention to access"
                " attention scores. Received: "
                f"flash_attention={self._flash_attention}"
            )

    @staticmethod
    def _call_masks(query, value, key, query_mask, value_mask, key_mask):
        """Keras's masks of a call as booleans (`boolean_mask`), each checked
        to have its input's leading shape: `(query_mask, value_mask,
        key_mask)`, None where not given."""
        masks = []
        for name, mask, tensor in (
            ("query_mask", query_mask, query),
            ("value_mask", value_mask, value),
            ("key_mask", key_mask, key),
        ):
            mask = boolean_mask(name, mask, f"a real {name[:-5]} position")
            if mask is not None:
                check_keras_mask(name, mask, tensor)
            masks.append(mask)
        return tuple(masks)

    def _check_built_features(self, query_shape, value_shape, key_shape) -> None:
        """Once built, the query, value and key have the feature sizes the
        projections were built for (`check_built_features`)."""
        built = (self.get_build_config() or {}).get("shapes_dict", {})
        key_built_as = "value_shape" if built.get("key_shape") is None else "key_shape"
        for name, shape, built_as in (
            ("query", query_shape, "query_shape"),
            ("value", value_shape, "value_shape"),
            ("key", key_shape, key_built_as),
        ):
            if shape is not None:
                check_built_features(self, name, shape, built_as)

    def _check_attention_mask(self, attention_mask, query, key) -> None:
        """The kernel's check of a call's `attention_mask`, under that name,
        for projected `(batch, seq, heads, dim)` query and key."""
        if attention_mask is not None:
            q, k = query.shape, key.shape
            check_mask_shape(
                attention_mask.shape, q[0], q[2], q[1], k[1], name="attention_mask"
            )

    def _projections(self) -> list[keras.layers.Layer]:
        """The projection layers built (the gate only with `use_gate`)."""
        names = (*_PROJECTIONS, "_output_dense")
        return [getattr(self, n) for n in names if getattr(self, n, None)]

    def _kernel_config(self) -> dict:
        """The kernel's options, for `get_config`; and the dtype, where the
        projections were quantized (Keras's own layers forget that they
        were, and then fail to load)."""
        config = {
            "flash_attention": self._flash_attention,
            "scale": self._scale,
            "chunk_size": self._chunk_size,
        }
        dtype = dtype_recording_quantized(self, self._projections())
        if dtype is not None:
            config["dtype"] = dtype
        return config


def _build_as_ours(layer: keras.layers.Layer) -> None:
    """Makes an unbuilt adopted `layer` build as its new class does.

    Keras's `Layer.__new__` gave the instance a `build` of its own: a
    wrapper of the old class's `build` that also records the build config,
    sets `built` and locks the state. Ours adds shape checks before and the
    masks handed on after; so the wrapper stays, and runs between them.
    """
    keras_build = vars(layer)["build"]

    @functools.wraps(keras_build)
    def build(*args, **kwargs):
        layer._check_build_shapes(*args, **kwargs)
        keras_build(*args, **kwargs)
        layer._hand_on_masks()

    layer.build = build


def check_value_and_key_shapes(value_shape, key_shape) -> None:
    """Keras's rule, in its wording (which users match)."""
    if tuple(value_shape[1:-1]) != tuple(key_shape[1:-1]):
        raise ValueError(
            "All dimensions of `value` and `key`, except the last one, "
            f"must be equal. Received: value_shape={tuple(value_shape)} and "
            f"key_shape={tuple(key_shape)}"
        )
