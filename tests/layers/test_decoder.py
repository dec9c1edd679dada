"""TransformerDecoder: argument checks, keras-hub's config, masks (its math
and caches are tested against keras-hub in test_keras_hub_parity.py)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_selfattn import TransformerDecoder
from tests.helpers import BLOCK_BAD_ARGUMENTS, to_numpy


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


@pytest.mark.parametrize("cross", [False, True], ids=["decoder_only", "cross"])
def test_a_functional_decoding_step_outputs_the_updated_caches(rng, cross):
    # keras-hub's decoder gives one symbolic output even with caches, so no
    # functional model of a decoding step can return them.
    x = rng.normal(size=(2, 1, 4)).astype("float32")
    inputs = {"x": x, "self_cache": rng.normal(size=(2, 2, 5, 2, 2))}
    if cross:
        inputs["encoder"] = rng.normal(size=(2, 3, 4))
        inputs["cross_cache"] = np.zeros((2, 2, 3, 2, 2))
    inputs = {k: v.astype("float32") for k, v in inputs.items()}
    layer = TransformerDecoder(8, num_heads=2)

    def step(t):
        return layer(
            t["x"],
            t.get("encoder"),
            self_attention_cache=t["self_cache"],
            self_attention_cache_update_index=2,
            cross_attention_cache=t.get("cross_cache"),
            cross_attention_cache_update_index=0 if cross else None,
        )

    symbolic = {k: keras.Input(v.shape[1:], name=k) for k, v in inputs.items()}
    model = keras.Model(symbolic, step(symbolic))
    expected = step(inputs)
    assert len(model.outputs) == len(expected) == (3 if cross else 2)
    for got, want in zip(model(inputs), expected, strict=True):
        np.testing.assert_allclose(to_numpy(got), to_numpy(want), atol=1e-6)
    with pytest.raises(ValueError, match="`cross_attention_cache` should both"):
        if cross:
            step({**symbolic, "cross_cache": None})
        else:  # the same check, the other way round
            TransformerDecoder(8, num_heads=2)(
                symbolic["x"], keras.Input((3, 4)), self_attention_cache=None,
                cross_attention_cache=keras.Input((2, 3, 2, 2)),
            )  # fmt: skip
