"""Shape and mask bookkeeping shared by the layers (no attention math here)."""

from __future__ import annotations

import inspect
import re

import keras
import numpy as np
from keras import ops

from keras_selfattn import _backend
from keras_selfattn._validation import (
    check_bool,
    check_paths,
    check_positive_float,
    check_positive_int,
    check_rate,
    check_seed,
    check_sliding_window,
    invalid,
)
from keras_selfattn.attention import as_bool_mask


def check_keras_mask(argument: str, mask, inputs) -> None:
    """Checks that a Keras mask fits `inputs` (batch, *dims, features): its
    shape is (batch, *dims)."""
    want = tuple(inputs.shape[:-1])
    shape = tuple(mask.shape)
    fits = len(shape) == len(want) and all(
        got is None or expected is None or got == expected
        for got, expected in zip(shape, want, strict=True)
    )
    if not fits:
        raise invalid(
            argument,
            f"a mask of shape (batch, *dims) matching the input's {want}",
            f"<tensor of shape {shape}>",
        )


def check_built_features(
    layer: keras.layers.Layer, argument: str, shape, built_as: str = "input_shape"
) -> None:
    """Once `layer` is built, a call's `argument` (of `shape`) has the
    feature size, the last dimension, that the layer was built for.

    The size built for is Keras's record of the build (`get_build_config`:
    `built_as` names the build argument). Another size would fail deep in
    the backend (a matmul or a reshape of the projections), or, in a
    symbolic call, only when the model runs.
    """
    config = layer.get_build_config() if layer.built else None
    if not config:
        return
    if "shapes_dict" in config:
        built = config["shapes_dict"].get(built_as)
    else:  # One build argument was given, the first: Keras's `input_shape`.
        first = next(iter(inspect.signature(layer.build).parameters), None)
        built = (
            config.get("input_shape") if built_as in ("input_shape", first) else None
        )
    want = None if built is None else built[-1]
    if want is not None and shape[-1] is not None and shape[-1] != want:
        raise invalid(
            argument,
            f"a last dimension of {want}, the size the layer was built for "
            f"({built_as}={tuple(built)})",
            f"<tensor of shape {tuple(shape)}>",
        )


def boolean_mask(argument: str, mask, true_means: str):
    """A mask that a caller passed, as booleans; `None` stays `None`.

    The kernel's rule (`as_bool_mask`): 0 / 1 values read as False / True,
    any other value is refused where the values are known, eagerly (an
    additive mask, 0 where allowed and -inf where not, would read inverted).
    """
    if mask is None:
        return None
    if not isinstance(mask, keras.KerasTensor):
        mask = ops.convert_to_tensor(mask)
    return as_bool_mask(argument, mask, true_means)


def combined_masks(*masks):
    """The logical and of the given (batch, ...) masks, or None."""
    result = None
    for mask in masks:
        if mask is not None:
            mask = ops.cast(mask, "bool")
            result = mask if result is None else ops.logical_and(result, mask)
    return result


def zero_padded(outputs, query_mask):
    """Zeros `outputs` (B, T, ...) where `query_mask` (B, T) is False.

    A select, not a multiply: a NaN or inf at a padded position becomes 0
    (0 x NaN would be NaN), and no gradient reaches it. The layers apply it
    to their inputs too, so what padding holds reaches neither the outputs
    nor the gradients of the weights.
    """
    if query_mask is None:
        return outputs
    keep = ops.cast(query_mask, "bool")
    for _ in range(len(outputs.shape) - len(keep.shape)):
        keep = ops.expand_dims(keep, -1)
    return ops.where(keep, outputs, ops.zeros((), outputs.dtype))


def embedded_ids(embedding: keras.layers.Embedding, ids, argument: str):
    """`embedding(ids)`, for ids in `[0, embedding.input_dim)` only.

    Keras's `Embedding` takes a negative id as the row counted from the end
    on every backend, and a large one as NaN (JAX), an error (TensorFlow's
    CPU, PyTorch) or the last row (XLA); it truncates a float id that is
    not whole (2.7 as id 2); an int64 id wraps when cast to int32 (on JAX
    without `jax_enable_x64`, JAX wraps it itself when it takes the array,
    before any layer sees it). Here an id outside the range, or a float id
    that is not whole, raises a `ValueError` (naming `argument`) where its
    value can be read, eagerly. In a compiled function TensorFlow's CPU
    kernel raises its `InvalidArgumentError` for it (`_backend.invalid_id`);
    where nothing raises (JAX, XLA, a GPU) its vector is NaN.
    """
    size = embedding.input_dim
    known = ops.logical_and(ops.greater_equal(ids, 0), ops.less(ids, size))
    floats = "float" in keras.backend.standardize_dtype(ids.dtype)
    if floats:
        # Float ids (a `keras.Input` is float32 unless told) are ids where
        # whole: 3.0 is id 3, but 2.7 is no id (a cast would truncate it).
        known = ops.logical_and(known, ops.equal(ids, ops.floor(ids)))
    if _backend.values_known(ids) and not bool(ops.all(known)):
        bad = ops.convert_to_numpy(ids)[~ops.convert_to_numpy(known)]
        which = "outside it or not whole" if floats else "outside it"
        nan = np.isnan(bad) if floats else np.zeros(bad.shape, bool)
        real = bad[~nan]
        parts = [f"from {real.min()!s} to {real.max()!s}"] if real.size else []
        parts += [f"{nan.sum()} of them NaN"] if nan.any() else []
        raise ValueError(
            f"Received an invalid value for argument `{argument}`, expected "
            f"integer ids in [0, vocabulary_size={size}). Received: {argument} "
            f"with {bad.size} ids {which}, {', '.join(parts)}"
        )
    ids = ops.where(known, ops.cast(ids, "int32"), _backend.invalid_id(size))
    return ops.where(ops.expand_dims(known, -1), embedding(ids), float("nan"))


def zero_padded_scores(scores, query_mask):
    """Zeros the rows of padded queries in (B, H, Tq, Tk) attention `scores`.

    The kernel gets padding as a key mask only, so it gives a padded query
    the weights of a real one; a padded position has no attention at all.
    """
    if query_mask is None or scores is None:
        return scores
    # (B, 1, Tq, 1) by expand_dims: `None` indexing is a StridedSlice that
    # LiteRT runs only with TensorFlow's ops at an unknown length.
    keep = ops.expand_dims(ops.expand_dims(ops.cast(query_mask, "bool"), 1), 3)
    return ops.where(keep, scores, ops.zeros((), scores.dtype))


def clone_initializer(initializer: keras.initializers.Initializer):
    """A fresh instance of `initializer`, as Keras gives each sub-layer.

    Unseeded, two sub-layers then start from different values; a seeded
    initializer gives each the same start, as in Keras.
    """
    return initializer.__class__.from_config(initializer.get_config())


# A layer option's kind, from the ending of its name.
_KINDS = (
    ("_initializer", keras.initializers),
    ("_regularizer", keras.regularizers),
    ("_constraint", keras.constraints),
    ("activation", keras.activations),
)


def _kind(name: str):
    for ending, module in _KINDS:
        if name.endswith(ending):
            return module
    raise ValueError(f"{name!r} is not an initializer, regularizer, constraint "
                     "or activation option")  # fmt: skip


def set_weight_options(layer: keras.layers.Layer, **options) -> None:
    """Sets each option (`kernel_initializer="ones"`, ...) as an attribute of
    `layer`, resolved by Keras (`keras.initializers.get`, ...) by its kind."""
    for name, value in options.items():
        setattr(layer, name, _kind(name).get(value))


def weight_options_config(layer: keras.layers.Layer, *names: str) -> dict:
    """The serialized options `names` of `layer`, for its `get_config`."""
    return {name: _kind(name).serialize(getattr(layer, name)) for name in names}


def keras_mask_of(x):
    """The Keras mask attached to tensor `x` (`None` if none), as keras-hub's
    layers read it."""
    try:
        from keras.src.backend import get_keras_mask
    except ImportError:  # pragma: no cover - an older Keras keeps it here
        return getattr(x, "_keras_mask", None)
    return get_keras_mask(x)


def check_attention_options(
    *, use_bias, dropout, sliding_window, scale, flash_attention, chunk_size,
    use_gate, seed,
) -> None:  # fmt: skip
    """The argument checks that `MultiHeadAttention` and
    `GroupQueryAttention` share (Keras's arguments and the kernel's)."""
    check_bool("use_bias", use_bias)
    check_rate("dropout", dropout)
    check_sliding_window(sliding_window)
    check_positive_float("scale", scale, allow_none=True)
    check_bool("flash_attention", flash_attention, allow_none=True)
    check_paths(chunk_size, flash_attention, dropout)
    check_bool("use_gate", use_gate)
    check_seed(seed)


def check_block_arguments(
    intermediate_dim, num_heads, dropout, attention_dropout, layer_norm_epsilon,
    normalize_first, seed,
) -> None:  # fmt: skip
    """The argument checks of the Transformer blocks (keras-hub's arguments)."""
    check_positive_int("intermediate_dim", intermediate_dim)
    check_positive_int("num_heads", num_heads)
    check_rate("dropout", dropout)
    if attention_dropout is not None:
        check_rate("attention_dropout", attention_dropout)
    check_bool("normalize_first", normalize_first)
    check_seed(seed)
    check_positive_float("layer_norm_epsilon", layer_norm_epsilon)


def rederive_call_attributes(layer: keras.layers.Layer) -> None:
    """After `layer.__class__` changed (`keras_selfattn.convert`): what
    `keras.layers.Layer.__init__` derives from `call` (its signature, whether
    it takes `training` ...; Keras 3.7 has fewer of these), derived again
    from the new class's `call`. Only what this Keras set is set."""
    signature = inspect.signature(layer.call)
    params = list(signature.parameters)
    derived = {
        "_call_signature": signature,
        "call_signature_parameters": params,
        "_call_has_training_arg": "training" in params,
        "_call_has_mask_arg": "mask" in params,
    }
    if hasattr(layer, "_call_context_args"):
        derived["_call_has_context_arg"] = {
            arg: arg in params for arg in layer._call_context_args
        }
    for name, value in derived.items():
        if name in vars(layer):
            setattr(layer, name, value)


def dtype_recording_quantized(layer: keras.layers.Layer, sublayers) -> dict | None:
    """`layer`'s serialized dtype policy for its config, with the policies
    of its quantized `sublayers` in a `DTypePolicyMap`; None when none of
    them is quantized (the config's dtype stays).

    After `model.quantize(...)` the sub-layers have quantized policies that
    a config made of constructor arguments does not record: such a layer
    (Keras's `MultiHeadAttention`, keras-hub's blocks outside a keras-hub
    backbone) rebuilds its sub-layers unquantized and fails to load. With the
    map as its dtype, handed down to the sub-layers as they are made, each
    finds its own policy by its path, as keras-hub's backbones do it. The
    keys are patterns of the paths from `layer`'s name on, whatever comes
    before: a model's name leads the paths when it was saved, and not when
    a Sequential or subclassed model builds the layer again on loading.
    """
    policies = layer.dtype_policy
    quantized = [s for s in sublayers if _own_policy(s).quantization_mode]
    if not quantized:
        return None
    if isinstance(policies, keras.dtype_policies.DTypePolicyMap):
        policies = policies.from_config(policies.get_config())  # a copy
    else:
        policies = keras.dtype_policies.DTypePolicyMap(policies)
    for sublayer in quantized:
        below = sublayer.path[len(layer.path) :]
        if not (sublayer.path.startswith(layer.path) and below.startswith("/")):
            below = "/" + sublayer.path  # not under it: its whole path
        key = "(?:.*/)?" + re.escape(layer.name + below)
        if key in policies:  # a map this layer was loaded with
            del policies[key]
        policies[key] = _own_policy(sublayer)
    return keras.dtype_policies.serialize(policies)


def _own_policy(layer: keras.layers.Layer):
    """A layer's own dtype policy: its entry in the map it was made with."""
    policy = layer.dtype_policy
    if isinstance(policy, keras.dtype_policies.DTypePolicyMap):
        return policy[layer.path] if layer.path else policy.default_policy
    return policy


def take_own_policies(sublayers) -> None:
    """Gives each built sub-layer made with a `DTypePolicyMap` its own entry
    as its policy (what `dtype_recording_quantized` wrote for it).

    Keras's quantized `Dense` and `EinsumDense` read
    `self.dtype_policy.quantization_mode` when they save: on a map that is
    the map's default (not quantized), so they stored no scale, and a loaded
    quantized model failed to save again ("Invalid dtype: object"). Their
    variables were made from their own entry, when they were built.
    """
    for sublayer in sublayers:
        policy = sublayer.dtype_policy
        if isinstance(policy, keras.dtype_policies.DTypePolicyMap) and sublayer.built:
            sublayer._dtype_policy = _own_policy(sublayer)
