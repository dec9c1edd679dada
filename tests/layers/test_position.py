"""TokenAndPositionEmbedding: shapes, the padding mask, config, saving."""

from __future__ import annotations

import numpy as np
import pytest

from keras_selfattn import TokenAndPositionEmbedding
from tests.helpers import to_numpy

IDS = np.array([[5, 8, 2, 0, 0], [1, 2, 3, 4, 9]], dtype="int32")


def test_output_is_token_plus_position_embedding():
    layer = TokenAndPositionEmbedding(10, sequence_length=5, embedding_dim=4)
    out = to_numpy(layer(IDS))
    assert out.shape == (2, 5, 4)
    tokens = to_numpy(layer.token_embedding.embeddings)
    positions = to_numpy(layer.position_embeddings)
    expected = tokens[IDS[1]] + positions
    np.testing.assert_allclose(out[1], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        out[0, :3], tokens[IDS[0, :3]] + positions[:3], atol=1e-6
    )


def test_mask_zero_false_keeps_every_position():
    layer = TokenAndPositionEmbedding(10, 5, 4, mask_zero=False)
    assert layer.compute_mask(IDS) is None
    assert np.all(np.abs(to_numpy(layer(IDS))[0, 3:]).sum(-1) > 0)


def test_shorter_sequences_use_the_first_positions():
    layer = TokenAndPositionEmbedding(10, 8, 4)
    out = to_numpy(layer(IDS))
    assert out.shape == (2, 5, 4)
    positions = to_numpy(layer.position_embeddings)[:5]
    tokens = to_numpy(layer.token_embedding.embeddings)
    np.testing.assert_allclose(out[1], tokens[IDS[1]] + positions, atol=1e-6)


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"vocabulary_size": 0}, "vocabulary_size"),
        ({"sequence_length": -1}, "sequence_length"),
        ({"embedding_dim": 2.5}, "embedding_dim"),
        ({"mask_zero": "no"}, "mask_zero"),
    ],
)
def test_bad_arguments(kwargs, argument):
    args = {"vocabulary_size": 10, "sequence_length": 5, "embedding_dim": 4}
    args.update(kwargs)
    with pytest.raises(ValueError, match=f"`{argument}`"):
        TokenAndPositionEmbedding(**args)


def test_too_long_or_wrong_rank_input():
    layer = TokenAndPositionEmbedding(10, 3, 4)
    with pytest.raises(ValueError, match="sequence_length=3"):
        layer(IDS)
    with pytest.raises(ValueError, match="`inputs`"):
        TokenAndPositionEmbedding(10, 5, 4)(np.zeros((2, 5, 1), "int32"))


def test_a_text_with_no_token():
    layer = TokenAndPositionEmbedding(10, 5, 4)
    empty = np.zeros((1, 0), "int32")
    assert tuple(layer(empty).shape) == (1, 0, 4)
    assert tuple(layer.compute_mask(empty).shape) == (1, 0)
