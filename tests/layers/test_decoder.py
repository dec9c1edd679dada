"""TransformerDecoder: argument checks, keras-hub's config, masks (its math
and caches are tested against keras-hub in test_keras_hub_parity.py)."""

from __future__ import annotations

import numpy as np
import pytest

from keras_selfattn import TransformerDecoder
from tests.helpers import (
    BLOCK_BAD_ARGUMENTS,
    assert_quantized_model_round_trips,
    model_around,
    to_numpy,
)


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "kwargs, argument", BLOCK_BAD_ARGUMENTS.values(), ids=BLOCK_BAD_ARGUMENTS.keys()
)
def test_bad_arguments(kwargs, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        TransformerDecoder(**{"intermediate_dim": 8, "num_heads": 2, **kwargs})


def test_bad_inputs():
    x = np.zeros((1, 4, 8), "float32")
    with pytest.raises(ValueError, match="`num_heads`"):
        TransformerDecoder(8, num_heads=3)(x)
    with pytest.raises(ValueError, match="`decoder_padding_mask`"):
        TransformerDecoder(8, num_heads=2)(x, decoder_padding_mask=np.ones((1, 3)))
    with pytest.raises(ValueError, match="`encoder_attention_mask`"):
        TransformerDecoder(8, num_heads=2)(
            x, x, encoder_attention_mask=np.ones((4, 4), bool)
        )
    # Was refused as the cross-attention's projected `key`, (3, 4, 2, 4).
    with pytest.raises(
        ValueError,
        match=r"argument `encoder_sequence`, expected the same batch size as "
        r"`decoder_sequence` \(1\)\. Received: encoder_sequence='<tensor of "
        r"shape \(3, 4, 8\)>'",
    ):
        TransformerDecoder(8, num_heads=2)(x, np.zeros((3, 4, 8), "float32"))
    # Token ids where vectors belong crashed in the backend (as keras-hub's
    # layer does): TensorFlow's InvalidArgumentError, PyTorch's RuntimeError.
    ids = np.ones((1, 4, 8), "int32")
    for argument, call in (
        ("decoder_sequence", (ids,)),
        ("decoder_sequence", (ids, x)),
        ("encoder_sequence", (x, ids)),
    ):
        with pytest.raises(
            ValueError,
            match=rf"argument `{argument}`, expected a floating-point tensor\. "
            rf"Received: {argument}='<tensor of dtype int32>'",
        ):
            TransformerDecoder(8, num_heads=2)(*call)


@pytest.mark.parametrize(
    "call, message",
    [
        pytest.param(
            {"decoder_attention_mask": np.ones((1, 3, 4), bool)},
            r"`decoder_attention_mask`, expected .* = \(1, 4, 4\).*\(1, 3, 4\)",
            id="decoder",
        ),
        pytest.param(
            {"encoder_sequence": np.zeros((1, 6, 8), "float32"),
             "encoder_attention_mask": np.ones((1, 4, 5), bool)},
            r"`encoder_attention_mask`, expected .* = \(1, 4, 6\)",
            id="encoder",
        ),
        pytest.param(
            {"decoder_attention_mask": np.ones((1, 4, 4), bool),
             "self_attention_cache": np.zeros((1, 2, 7, 2, 4), "float32"),
             "self_attention_cache_update_index": 0},
            r"`decoder_attention_mask`, expected .* = \(1, 4, 7\)",
            id="decoder_with_cache",
        ),
    ],
)  # fmt: skip
def test_an_attention_mask_of_the_wrong_lengths_is_named(call, message):
    # It was named `attention_mask`, the inner layer's argument.
    x = np.zeros((1, 4, 8), "float32")
    with pytest.raises(ValueError, match=message):
        TransformerDecoder(8, num_heads=2)(x, **call)


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "encoder_shape, weights",
    [(None, 16), ((None, 6, 4), 26)],
    ids=["decoder_only", "cross"],
)
def test_keras_hubs_config_shapes_build_the_layer_at_once(encoder_shape, weights):
    layer = TransformerDecoder.from_config(
        {
            **TransformerDecoder(8, num_heads=2).get_config(),
            "decoder_sequence_shape": (None, 4, 8),
            "encoder_sequence_shape": encoder_shape,
        }
    )
    assert layer.built and len(layer.weights) == weights
    assert (layer._cross_attention_layer is None) == (encoder_shape is None)
    assert layer.get_config()["decoder_sequence_shape"] == (None, 4, 8)


def test_padded_positions_output_zeros_and_their_content_is_ignored(rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    padding = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=bool)
    layer = TransformerDecoder(8, num_heads=2)
    out = to_numpy(layer(x, decoder_padding_mask=padding))
    np.testing.assert_array_equal(out[~padding], 0.0)
    # Padding content changes nothing at real positions.
    changed = x.copy()
    changed[~padding] = 100.0
    np.testing.assert_allclose(
        to_numpy(layer(changed, decoder_padding_mask=padding))[padding],
        out[padding],
        atol=1e-5,
    )


def test_a_symbolic_call_with_a_cache_gives_the_output_alone_as_keras_hubs():
    # keras-hub code feeds it on; the eager call gives (outputs, cache).
    import keras

    x, cache = keras.Input((1, 4)), keras.Input((2, 5, 2, 2))
    out = TransformerDecoder(8, num_heads=2)(
        x, self_attention_cache=cache, self_attention_cache_update_index=2
    )
    model = keras.Model([x, cache], keras.layers.Dense(3)(out))
    got = model([np.ones((2, 1, 4), "float32"), np.zeros((2, 2, 5, 2, 2), "float32")])
    assert tuple(got.shape) == (2, 1, 3)


@pytest.mark.parametrize("kind", ["functional", "sequential"])
@pytest.mark.parametrize("mode", ["int8", "float8"])
def test_quantized_model_saves_and_loads(rng, tmp_path, mode, kind):
    # keras-hub's block cannot do this outside a keras-hub backbone: its
    # config forgets that the sub-layers were quantized, and loading fails.
    model = model_around(TransformerDecoder(16, num_heads=2), kind)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    assert_quantized_model_round_trips(model, x, tmp_path / "quantized.keras", mode)
