"""Our keras-hub drop-ins against keras-hub's layers, weight for weight.

Each test builds keras-hub's layer and ours, copies keras-hub's weights into
ours with `set_weights` (the same weights in the same order), and compares
the outputs at real positions (ours outputs zeros at padded ones).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub")

import keras_selfattn  # noqa: E402
from tests.helpers import assert_close, to_numpy  # noqa: E402

# Once, on TensorFlow, for CI's time (about 25 s a backend; they pass on JAX
# and PyTorch too). The kernel's backends are tested in tests/test_attention*.
pytestmark = pytest.mark.tensorflow_only

BATCH, SEQ, HIDDEN = 2, 5, 8
# The second sequence is padded after 3 tokens.
PADDING = np.array([[True] * SEQ, [True] * 3 + [False] * (SEQ - 3)])


def _inputs(rng, *shape):
    return rng.standard_normal(shape or (BATCH, SEQ, HIDDEN)).astype("float32")


def _copied(theirs, ours, *build_shapes):
    theirs.build(*build_shapes)
    ours.build(*build_shapes)
    assert [tuple(w.shape) for w in ours.weights] == [
        tuple(w.shape) for w in theirs.weights
    ]
    ours.set_weights(theirs.get_weights())
    return theirs, ours


@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_ln", "pre_ln"])
@pytest.mark.parametrize(
    "masking", ["none", "padding_mask", "keras_mask", "attention_mask"]
)
def test_encoder_matches_keras_hub_with_its_weights(rng, normalize_first, masking):
    options = dict(intermediate_dim=6, num_heads=2, normalize_first=normalize_first)
    theirs, ours = _copied(
        keras_hub.layers.TransformerEncoder(**options),
        keras_selfattn.TransformerEncoder(**options),
        (BATCH, SEQ, HIDDEN),
    )
    x = _inputs(rng)
    real = np.ones((BATCH, SEQ), bool)
    kwargs = {}
    if masking == "padding_mask":
        kwargs["padding_mask"], real = PADDING, PADDING
    elif masking == "attention_mask":
        kwargs["attention_mask"] = np.tril(np.ones((BATCH, SEQ, SEQ), bool))
    if masking == "keras_mask":
        # An implicit mask, as Embedding(mask_zero=True) gives.
        embedded = keras.layers.Masking(0.0)
        x[~PADDING] = 0.0
        x = embedded(x)
        real = PADDING
    # Ours first: keras-hub's call drops the Keras mask from its input.
    mine = to_numpy(ours(x, **kwargs))
    np.testing.assert_allclose(
        mine[real], to_numpy(theirs(x, **kwargs))[real], atol=1e-5
    )
    # The padded positions output zeros (keras-hub's do not).
    assert not np.any(mine[~real])


def test_cached_attention_matches_keras_hub_with_its_weights(rng):
    layer_options = dict(num_heads=2, key_dim=4)
    shape = (BATCH, SEQ, HIDDEN)
    theirs, ours = _copied(
        keras_hub.layers.CachedMultiHeadAttention(**layer_options),
        keras_selfattn.CachedMultiHeadAttention(**layer_options),
        shape,
        shape,
    )
    x = _inputs(rng)
    causal = np.tril(np.ones((SEQ, SEQ), bool))
    cache = np.zeros((BATCH, 2, SEQ, 2, 4), "float32")
    for kwargs in (
        {},
        {"attention_mask": causal},
        {"attention_mask": causal, "cache": cache, "cache_update_index": 0},
    ):
        mine = ours(x, x, return_attention_scores=True, **kwargs)
        reference = theirs(x, x, return_attention_scores=True, **kwargs)
        assert len(mine) == len(reference)
        for a, b in zip(mine, reference, strict=True):
            assert_close(a, b)


@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_ln", "pre_ln"])
@pytest.mark.parametrize("cross", [False, True], ids=["decoder_only", "cross"])
def test_decoder_matches_keras_hub_with_its_weights(rng, normalize_first, cross):
    options = dict(intermediate_dim=6, num_heads=2, normalize_first=normalize_first)
    shapes = [(BATCH, SEQ, HIDDEN)] + ([(BATCH, SEQ + 1, 4)] if cross else [])
    theirs, ours = _copied(
        keras_hub.layers.TransformerDecoder(**options),
        keras_selfattn.TransformerDecoder(**options),
        *shapes,
    )
    x = _inputs(rng)
    sequences = [x] + ([_inputs(rng, BATCH, SEQ + 1, 4)] if cross else [])
    encoder_padding = np.array([[True] * (SEQ + 1), [True] * 2 + [False] * (SEQ - 1)])
    for kwargs, real in [
        ({}, np.ones((BATCH, SEQ), bool)),
        ({"decoder_padding_mask": PADDING}, PADDING),
        ({"use_causal_mask": False}, np.ones((BATCH, SEQ), bool)),
        *(
            [({"encoder_padding_mask": encoder_padding}, np.ones((BATCH, SEQ), bool))]
            * cross
        ),
    ]:
        mine = to_numpy(ours(*sequences, **kwargs))
        np.testing.assert_allclose(
            mine[real], to_numpy(theirs(*sequences, **kwargs))[real], atol=1e-5
        )
        assert not np.any(mine[~real])  # padded positions output zeros
    # Decoding token by token with the caches gives the same as keras-hub.
    encoder = sequences[1] if cross else None
    for a, b in zip(
        _decode_two_steps(ours, x, encoder),
        _decode_two_steps(theirs, x, encoder),
        strict=True,
    ):
        assert_close(a, b)


def _decode_two_steps(layer, x, encoder):
    """The outputs and caches of decoding `x`'s first two tokens."""
    caches = {"self_attention_cache": np.zeros((BATCH, 2, SEQ, 2, 4), "float32")}
    sequences = [x[:, :1]]
    if encoder is not None:
        sequences.append(encoder)
        caches["cross_attention_cache"] = np.zeros(
            (BATCH, 2, encoder.shape[1], 2, 4), "float32"
        )
    first = layer(
        *sequences,
        self_attention_cache_update_index=0,
        cross_attention_cache_update_index=0 if encoder is not None else None,
        **caches,
    )
    caches = dict(zip(caches, first[1:], strict=True))
    sequences[0] = x[:, 1:2]
    second = layer(*sequences, self_attention_cache_update_index=1, **caches)
    return (*first, *second)


def test_the_drop_ins_compute_through_our_kernel(rng, monkeypatch, chunked_calls):
    from keras_selfattn.layers import multi_head_attention

    calls = []
    kernel = multi_head_attention.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(tuple(args[0].shape))
        return kernel(*args, **kwargs)

    monkeypatch.setattr(multi_head_attention, "scaled_dot_product_attention", spy)
    x = _inputs(rng)
    decoder = keras_selfattn.TransformerDecoder(intermediate_dim=6, num_heads=2)
    decoder(x, _inputs(rng, BATCH, SEQ + 1, 4))
    assert calls == [(BATCH, SEQ, 2, 4)] * 2  # self- and cross-attention
    # The kernel's options reach it through the cache: the chunked path.
    layer = keras_selfattn.CachedMultiHeadAttention(
        num_heads=2, key_dim=4, chunk_size=2
    )
    cache = np.zeros((BATCH, 2, SEQ, 2, 4), "float32")
    layer(x, x, cache=cache, cache_update_index=0)
    assert chunked_calls == [2]


def test_keras_hubs_own_config_gives_keras_hubs_weight_order(rng):
    # keras-hub's config has no `weights_order` either, nor `attention_dropout`
    # (ours only): read as a 0.1 config, its weights failed to set.
    x = rng.normal(size=(1, 3, 16)).astype("float32")
    hub = keras_hub.layers.TransformerEncoder(16, num_heads=2)
    hub(x)
    ours = keras_selfattn.TransformerEncoder.from_config(hub.get_config())
    ours(x)
    ours.set_weights(hub.get_weights())
    np.testing.assert_allclose(to_numpy(ours(x)), to_numpy(hub(x)), atol=1e-5)


def test_token_and_position_embedding_takes_keras_hub_tables_reversed():
    # docs/layers.md: the same tables as keras-hub's layer, listed the other
    # way round (ours holds the position table itself). With mask_zero=False,
    # id 0 is a token like any other, as in keras-hub's default.
    ids = np.array([[0, 1, 2, 3], [4, 3, 2, 0]], dtype="int32")
    theirs = keras_hub.layers.TokenAndPositionEmbedding(5, 6, 3)
    ours = keras_selfattn.TokenAndPositionEmbedding(5, 6, 3, mask_zero=False)
    theirs(ids), ours(ids)
    shapes = [tuple(w.shape) for w in theirs.weights]
    assert [tuple(w.shape) for w in ours.weights] == shapes[::-1] == [(6, 3), (5, 3)]
    ours.set_weights(theirs.get_weights()[::-1])
    np.testing.assert_array_equal(to_numpy(ours(ids)), to_numpy(theirs(ids)))
