"""convert: the attention layers of a model you already have, on the kernel.

`convert(model)` finds every `keras.layers.MultiHeadAttention`,
`keras.layers.GroupQueryAttention` and keras-hub `CachedMultiHeadAttention`
(and keras-hub `TransformerDecoder` block) inside a model and makes it an
instance of this package's drop-in for its class, in place, keeping its
weights. keras-hub is never imported here: its classes are recognised only
when keras-hub is already loaded.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Iterator
from typing import NamedTuple

import keras

from keras_selfattn._validation import check_positive_int, invalid
from keras_selfattn.layers import grouped_query_attention as _gqa
from keras_selfattn.layers._kernel_attention import KernelAttention
from keras_selfattn.layers.decoder import TransformerDecoder
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention

__all__ = ["ConversionReport", "convert"]

# keras-hub's cached attention and decoder block, looked up in `sys.modules` only.
_HUB_MODULES = "keras_hub.src.layers.modeling."
_HUB_CACHED_MODULE = _HUB_MODULES + "cached_multi_head_attention"
_HUB_DECODER_MODULE = _HUB_MODULES + "transformer_decoder"
_HUB_ENCODER_MODULE = _HUB_MODULES + "transformer_encoder"

_ALREADY_OURS_BLOCK = "already keras_selfattn's block (causality as a flag)"

# A subclass that overrides one of these computes differently from its base.
_BEHAVIOUR = (
    "call",
    "_compute_attention",
    "_masked_softmax",
    "_compute_attention_mask",
    "_compute_self_attention_mask",
    "build",
)


class Entry(NamedTuple):
    """One attention layer in a `ConversionReport`.

    `path`: the layer's place in the model, its name and those of the layers
    holding it (`"transformer_layer_0/self_attention"`). `layer_class`: its
    class before `convert`. `reason`: what `convert` did and why.
    """

    path: str
    layer_class: str
    reason: str


@dataclasses.dataclass(frozen=True)
class ConversionReport:
    """What `keras_selfattn.convert` converted and what it left alone.

    `str(report)` lists both, each entry with its reason on the line below.

    Attributes:
        converted: The layers now computing through the kernel, a tuple of
            `Entry(path, layer_class, reason)` in the order the layers sit
            in the model.
        left_alone: The attention layers left as they were, with the
            reason, in the same form.

    Example:

    >>> inputs = keras.Input(shape=(4, 8))
    >>> attention = keras.layers.MultiHeadAttention(2, 4, name="attention")
    >>> model = keras.Model(inputs, attention(inputs, inputs))
    >>> report = convert(model)
    >>> [entry.path for entry in report.converted], report.left_alone
    (['attention'], ())
    """

    converted: tuple[Entry, ...]
    left_alone: tuple[Entry, ...]

    def __str__(self) -> str:
        lines = [f"converted {len(self.converted)}, left alone {len(self.left_alone)}"]
        for title, entries in (
            ("converted", self.converted),
            ("left alone", self.left_alone),
        ):
            for entry in entries:
                lines.append(f"{title}: {entry.path} ({entry.layer_class})")
                lines.append(f"    {entry.reason}")
        return "\n".join(lines)


def convert(
    model: keras.layers.Layer, chunk_size: int | None = None
) -> ConversionReport:
    """Makes a model's Keras and keras-hub attention compute through the kernel.

    Every `keras.layers.MultiHeadAttention`, `keras.layers.GroupQueryAttention`
    and keras-hub `CachedMultiHeadAttention` inside `model` (a functional,
    Sequential or subclassed model, or any layer, at any depth: attention
    held inside keras-hub's `TransformerEncoder` and `TransformerDecoder`
    blocks too) becomes, in place, an instance of this package's drop-in for
    its class (`keras_selfattn.MultiHeadAttention`,
    `keras_selfattn.GroupQueryAttention`,
    `keras_selfattn.CachedMultiHeadAttention`), as `model.quantize` works in
    place. Its weights stay the same variable objects, its configuration and
    sub-layers stay; from then on its attention is
    `keras_selfattn.scaled_dot_product_attention`, with the differences from
    Keras that those layers document (a query with no key to attend to
    outputs zeros; the softmax in float32). keras-hub's `TransformerDecoder`
    blocks become `keras_selfattn.TransformerDecoder` too (same weights and
    sub-layers), which gives the kernel causality as a flag where keras-hub
    builds a `(batch, T, T)` int32 mask: on the chunked path a converted
    decoder-only model (GPT-2, say) keeps its memory linear in `T`. The
    compiled functions of `model` and of the models inside it are reset, so
    that their next `fit`, `predict` or `generate` traces the converted
    layers; a model that holds `model` keeps its own until they are reset
    too, so convert the model you call (a keras-hub task such as
    `GPT2CausalLM`, not only its backbone). Attention layers that exist
    convert in built and unbuilt models alike; a layer that makes its
    attention in `build` (keras-hub's blocks) must be built first.

    Layers are left alone, each with the reason in the report: a subclass of
    these classes other than the ones above (a custom attention layer: its
    own `call` or `_compute_attention` would be dropped), any other layer
    whose class name ends in `Attention` and that holds none of these (an
    attention of its own code: keras-hub's `LlamaAttention`,
    `GemmaAttention`, ..., or Keras's `Attention`), a layer that is already
    this package's, `GroupQueryAttention` where the installed Keras is
    older than 3.15, a keras-hub encoder or decoder block that is not built
    yet, and a decoder block whose attention layers cannot become ours (or
    whose heads do not divide its hidden size). Converting twice changes
    nothing; converting
    again with another `chunk_size` sets it on the attention layers that are
    already ours (reported as converted, with the change). A layer whose
    configuration our class would refuse (and so could not load or clone
    after conversion: say a seed beyond 2**31 - 1) raises a `ValueError`
    naming it, before any layer is changed.

    Saving: the attention layers that are nodes of a converted functional
    model, or layers of a Sequential model, save as our classes and load
    back, `chunk_size` and all. Attention held inside another layer (a
    keras-hub block, a layer of your own) is rebuilt by that layer from its
    own configuration when loaded, so it is that layer's class again (our
    `TransformerDecoder` builds ours, without the `chunk_size`): call
    `convert` again after `keras.saving.load_model` (or `from_preset`), with
    the same `chunk_size`.

    Args:
        model: A Keras model or layer. It need not be built.
        chunk_size: Optional positive integer, the `chunk_size` of every
            converted layer, and of every `MultiHeadAttention`,
            `GroupQueryAttention` and `CachedMultiHeadAttention` that is
            already ours (`SelfAttention` takes it in its constructor
            only): attention over blocks of `chunk_size` keys, in memory
            linear in the sequence length (see
            `keras_selfattn.MultiHeadAttention`). That path has no dropout:
            a layer with `dropout > 0` or `flash_attention=True` then raises
            a `ValueError`, before any layer is changed. Defaults to `None`,
            which lets the kernel choose for the layers it converts
            (`keras_selfattn.attention.plan_attention`: the plain path while
            it fits the memory budget, the chunked one beyond) and leaves
            the `chunk_size` of layers that are already ours as it is.

    Returns:
        A `ConversionReport`: the layers converted and the attention layers
        left alone, each with the reason.

    Example:

    >>> inputs = keras.Input(shape=(4, 8))
    >>> attention = keras.layers.MultiHeadAttention(2, 4, name="attention")
    >>> model = keras.Model(inputs, attention(inputs, inputs))
    >>> x = np.random.default_rng(0).normal(size=(1, 4, 8))
    >>> before = model.predict(x, verbose=0)
    >>> print(convert(model))
    converted 1, left alone 0
    converted: attention (keras.layers.MultiHeadAttention)
        now keras_selfattn.MultiHeadAttention
    >>> isinstance(attention, MultiHeadAttention)
    True
    >>> bool(np.allclose(model.predict(x, verbose=0), before, atol=1e-5))
    True
    >>> print(convert(model))
    converted 0, left alone 1
    left alone: attention (keras_selfattn.MultiHeadAttention)
        already computes through keras_selfattn's kernel
    """
    if not isinstance(model, keras.layers.Layer):
        raise invalid(
            "model",
            "a Keras model or layer (an instance, such as `keras.Model(...)`)",
            model,
        )
    check_positive_int("chunk_size", chunk_size, allow_none=True)
    drop_ins = _drop_ins()
    plan, rechunk, converted, left_alone = [], [], [], []
    for path, layer in _convertible_layers(model, drop_ins):
        name = _public_name(type(layer))
        target = drop_ins.get(type(layer))
        if isinstance(target, type) and _is_block(target):
            target = _why_not_block(layer, drop_ins) or target
        rechunks = (
            isinstance(layer, KernelAttention)
            and chunk_size is not None
            and layer.chunk_size != chunk_size
        )
        try:
            if isinstance(target, type):
                target._check_adoptable(layer, chunk_size)
                _check_config(layer, target)
            elif rechunks:
                type(layer)._check_adoptable(layer, chunk_size)
        except ValueError as error:
            raise ValueError(f"Cannot convert `{path}` ({name}): {error}") from None
        if isinstance(target, type):
            plan.append((layer, target))
            converted.append(Entry(path, name, f"now {_public_name(target)}"))
        elif rechunks:
            rechunk.append(layer)
            converted.append(
                Entry(
                    path,
                    name,
                    "already computes through keras_selfattn's kernel; chunk_size "
                    f"{layer.chunk_size} -> {chunk_size}",
                )
            )
        else:
            left_alone.append(Entry(path, name, target or _why_not(layer, drop_ins)))
    for layer, target in plan:
        target._adopt(layer, chunk_size)
    for layer in rechunk:
        layer._chunk_size = chunk_size
    if plan or rechunk:
        _reset_compiled_functions(model)
    return ConversionReport(tuple(converted), tuple(left_alone))


def _check_config(layer, target) -> None:
    """Our constructor's checks on `layer`'s configuration: what `convert`
    makes must load and clone (both make it again from its configuration),
    so a value that Keras or keras-hub takes and ours refuses is refused
    here, before anything changes. Constructs nothing (so no random seed is
    drawn and no layer name taken)."""
    try:
        config = layer.get_config()
    except Exception:  # any error of the layer's own serialisation
        # Keras could not save or clone this layer either (a regularizer with
        # no `get_config`, say): there is no configuration to keep loadable.
        return
    target._check_arguments(**config)


def _drop_ins() -> dict[type, type | str]:
    """Keras's (and keras-hub's) classes -> our drop-in, or why there is none."""
    drop_ins: dict[type, type | str] = {
        keras.layers.MultiHeadAttention: MultiHeadAttention
    }
    keras_gqa = getattr(keras.layers, "GroupQueryAttention", None)
    if keras_gqa is not None:
        drop_ins[keras_gqa] = (
            _gqa.GroupQueryAttention
            if _gqa.ON_THIS_KERAS
            else f"keras_selfattn.GroupQueryAttention needs Keras {_gqa.KERAS_NEEDED} "
            f"or newer; the installed Keras is {keras.__version__}"
        )
    hub = sys.modules.get(_HUB_CACHED_MODULE)
    if hub is not None:
        from keras_selfattn.layers.cached_attention import CachedMultiHeadAttention

        drop_ins[hub.CachedMultiHeadAttention] = CachedMultiHeadAttention
    drop_ins[TransformerDecoder] = _ALREADY_OURS_BLOCK
    hub = sys.modules.get(_HUB_DECODER_MODULE)
    if hub is not None:
        drop_ins[hub.TransformerDecoder] = TransformerDecoder
    return drop_ins


def _is_block(target: type) -> bool:
    return not issubclass(target, KernelAttention)


# What our decoder block's call gives its attention layers: keras-hub's
# cache arguments, and beyond keras-hub's, the Keras masks and causal flag.
_BLOCK_CALL_ARGUMENTS = (
    "cache",
    "cache_update_index",
    "query_mask",
    "value_mask",
    "use_causal_mask",
)


def _why_not_block(block, drop_ins) -> str | None:
    """Why a keras-hub decoder block cannot become ours, or None: it must be
    built (Keras keeps the `build` of the class it was made as), and its
    attention layers must compute through the kernel too and take what our
    block's call gives them (the cache, Keras masks, the causal flag)."""
    if not block.built:
        return _NOT_BUILT
    hidden = (block._decoder_sequence_shape or (None,))[-1]
    if hidden is not None and hidden % block.num_heads:
        return (
            f"its hidden size ({hidden}) is not a multiple of its "
            f"{block.num_heads} heads, which {_public_name(TransformerDecoder)} "
            "requires"
        )
    for name in ("_self_attention_layer", "_cross_attention_layer"):
        attention = getattr(block, name, None)
        if attention is None:
            continue
        if isinstance(attention, KernelAttention):
            takes = inspect.signature(attention.call).parameters
            missing = [arg for arg in _BLOCK_CALL_ARGUMENTS if arg not in takes]
            if not missing:
                continue
            return (
                f"its attention layer `{attention.name}` "
                f"({_public_name(type(attention))}) does not take "
                f"{', '.join(f'`{arg}`' for arg in missing)}, which our block "
                "passes it"
            )
        if isinstance(drop_ins.get(type(attention)), type):
            continue
        return (
            f"its attention layer `{attention.name}` "
            f"({_public_name(type(attention))}) cannot become ours, and our "
            "block would call it with arguments it does not take"
        )
    return None


_NOT_BUILT = (
    "not built yet (its attention layers do not exist): call `convert` once "
    "the model is built (keras-hub's models are built when made)"
)


def _reported(layer, kinds) -> bool:
    """Whether the report names `layer`: a layer `convert` knows (the
    attention layers, the decoder blocks), another attention (a class name
    ending in `Attention`, not ours, that holds no layer `convert` knows:
    keras-hub's `DINOV2Attention` wraps a Keras `MultiHeadAttention`, which
    is converted and named), or an unbuilt keras-hub encoder."""
    cls = type(layer)
    if isinstance(layer, kinds):
        return True
    if cls.__name__.endswith("Attention") and not cls.__module__.startswith(
        "keras_selfattn."
    ):
        inside = layer._flatten_layers(include_self=False, recursive=True)
        return not any(isinstance(child, kinds) for child in inside)
    return cls.__module__ == _HUB_ENCODER_MODULE and not layer.built


def _convertible_layers(model, drop_ins) -> Iterator[tuple[str, keras.layers.Layer]]:
    """(path, layer) of every layer in `model` that the report names
    (`_reported`), each once, depth first in the order the layers were
    added."""
    kinds = tuple(drop_ins)
    seen = {id(model)}
    if _reported(model, kinds):
        yield model.name, model

    def walk(prefix, parent):
        for child in parent._flatten_layers(include_self=False, recursive=False):
            if id(child) in seen:
                continue
            seen.add(id(child))
            path = f"{prefix}/{child.name}" if prefix else child.name
            if _reported(child, kinds):
                yield path, child
            yield from walk(path, child)

    yield from walk("", model)


def _why_not(layer, drop_ins) -> str:
    if isinstance(layer, KernelAttention):
        return "already computes through keras_selfattn's kernel"
    if isinstance(layer, TransformerDecoder):
        return _ALREADY_OURS_BLOCK
    if type(layer).__module__ == _HUB_ENCODER_MODULE:
        return _NOT_BUILT
    base = next((cls for cls in type(layer).__mro__ if cls in drop_ins), None)
    if base is None:
        return (
            "an attention of its own code, not a subclass of a class `convert` "
            "knows (Keras's MultiHeadAttention and GroupQueryAttention, "
            "keras-hub's CachedMultiHeadAttention and TransformerDecoder): it "
            "computes as it did"
        )
    overridden = [
        name
        for name in _BEHAVIOUR
        if getattr(type(layer), name, None) is not getattr(base, name, None)
    ]
    what = (
        "overrides " + ", ".join(f"`{name}`" for name in overridden)
        if overridden
        else "adds to it"
    )
    return (
        f"a subclass of {_public_name(base)} that {what}: converting it would "
        "replace its class and drop its behaviour"
    )


def _public_name(cls: type) -> str:
    if cls is keras.layers.MultiHeadAttention:
        return "keras.layers.MultiHeadAttention"
    if cls is getattr(keras.layers, "GroupQueryAttention", None):
        return "keras.layers.GroupQueryAttention"
    if cls.__module__.startswith("keras_selfattn."):
        return f"keras_selfattn.{cls.__qualname__}"
    if cls.__module__ in (_HUB_CACHED_MODULE, _HUB_DECODER_MODULE, _HUB_ENCODER_MODULE):
        return f"keras_hub.layers.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _reset_compiled_functions(model) -> None:
    """As `model.quantize` does: the next call traces the converted layers
    (keras-hub's `generate` keeps its compiled function too)."""
    for layer in model._flatten_layers(include_self=True):
        if isinstance(layer, keras.Model):
            layer.train_function = None
            layer.test_function = None
            layer.predict_function = None
            if hasattr(layer, "generate_function"):
                layer.generate_function = None
