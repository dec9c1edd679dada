"""The text pieces saved models refer to: standardization, clipping, bigrams."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_selfattn.text import BigramEmbedding, ClipSequence, standardize


@pytest.mark.tensorflow_only  # tf.strings
def test_standardize_strips_breaks_and_keeps_punctuation():
    out = standardize(np.array(['Great film!!<br />It\'s "GOOD"... #1'], dtype=object))
    assert out.numpy()[0].decode().split() == [
        "great", "film", "!", "!", "it's", '"', "good", '"', ".", ".", ".", "1",
    ]  # fmt: skip


def test_clip_sequence():
    ids = np.arange(12).reshape(2, 6)
    out = keras.ops.convert_to_numpy(ClipSequence(4)(ids))
    np.testing.assert_array_equal(out, ids[:, :4])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(ClipSequence(9)(ids)), ids)
    with pytest.raises(ValueError, match="`max_length`"):
        ClipSequence(0)


def test_bigram_embedding_is_shifted_masked_and_hands_the_mask_on():
    layer = BigramEmbedding(10, 3, embeddings_initializer="random_normal")
    tokens = np.ones((2, 4, 3), "float32")
    bigrams = np.array([[5, 6, 7], [8, 0, 0]])
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
    out = keras.ops.convert_to_numpy(layer(tokens, bigrams, mask=mask))
    table = keras.ops.convert_to_numpy(layer.embedding.embeddings)
    np.testing.assert_allclose(out[0, 0], 1 + table[0])  # no bigram ends at 0
    np.testing.assert_allclose(out[0, 1:], 1 + table[[5, 6, 7]], rtol=1e-6)
    np.testing.assert_allclose(out[1, 1], 1 + table[8], rtol=1e-6)
    np.testing.assert_allclose(out[1, 2:], 1.0)  # padded: nothing added
    assert layer.compute_mask(tokens, mask) is mask
    clone = BigramEmbedding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


def test_clip_sequence_keeps_head_and_tail_of_long_rows():
    ids = np.array([[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 0, 0, 0, 0, 0]])
    out = keras.ops.convert_to_numpy(ClipSequence(5, head=2)(ids))
    np.testing.assert_array_equal(out, [[1, 2, 6, 7, 8], [1, 2, 3, 0, 0]])
    with pytest.raises(ValueError, match="`head`"):
        ClipSequence(5, head=6)
    assert ClipSequence.from_config(ClipSequence(5, head=2).get_config()).head == 2


def test_bigram_embedding_of_a_text_with_no_token():
    layer = BigramEmbedding(10, 3)
    empty = np.zeros((1, 0, 3), "float32")
    out = layer(empty, np.zeros((1, 0), "int32"), mask=np.zeros((1, 0), bool))
    assert tuple(out.shape) == (1, 0, 3)
