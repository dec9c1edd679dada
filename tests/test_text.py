"""The text pieces saved models refer to: standardization, clipping, bigrams."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_selfattn.text import BigramEmbedding, ClipSequence, NgramLogit, standardize


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


@pytest.mark.parametrize("head", [None, 2], ids=["first-tokens", "head-and-tail"])
def test_clip_sequence_in_a_compiled_model_matches_eager(head):
    # `predict` compiles (jit on JAX): a traced length failed there.
    ids = keras.Input((6,), dtype="int32")
    model = keras.Model(ids, ClipSequence(4, head=head)(ids))
    rows = np.array([[1, 2, 3, 0, 0, 0], [4, 5, 6, 7, 8, 9]])
    expected = [[1, 2, 3, 0], [4, 5, 6, 7] if head is None else [4, 5, 8, 9]]
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model(rows)), expected)
    np.testing.assert_array_equal(model.predict(rows, verbose=0), expected)


def test_bigram_embedding_of_a_text_with_no_token():
    layer = BigramEmbedding(10, 3)
    empty = np.zeros((1, 0, 3), "float32")
    out = layer(empty, np.zeros((1, 0), "int32"), mask=np.zeros((1, 0), bool))
    assert tuple(out.shape) == (1, 0, 3)


def test_ngram_logit_counts_each_distinct_id_once():
    layer = NgramLogit([6, 4], kernel_initializer="ones")
    layer.build()
    layer.kernel.assign(np.array([9, 9, 1, 2, 4, 8, 9, 9, 16, 32], dtype="float32"))
    unigrams = np.array([[2, 3, 3, 5, 1, 0], [0, 0, 0, 0, 0, 0]])  # 1: OOV
    bigrams = np.array([[2, 2, 3, 0, 0], [3, 0, 0, 0, 0]])
    out = keras.ops.convert_to_numpy(layer([unigrams, bigrams]))
    # Row 0: ids 2, 3, 5 (1 + 2 + 8) and pairs 2, 3 (16 + 32); row 1: pair 3.
    np.testing.assert_allclose(out, [[59.0], [32.0]])
    # Any padding, any order: the same bag.
    padded = np.pad(unigrams[:, ::-1], [[0, 0], [0, 3]])
    again = keras.ops.convert_to_numpy(layer([padded, bigrams]))
    np.testing.assert_allclose(again, out)


def test_ngram_logit_config_and_checks():
    layer = NgramLogit([5, 7], first_id=1, name="n")
    again = NgramLogit.from_config(layer.get_config())
    assert again.vocabulary_sizes == [5, 7] and again.first_id == 1
    with pytest.raises(ValueError, match="`vocabulary_sizes`"):
        NgramLogit([])
    with pytest.raises(ValueError, match="`vocabulary_sizes`"):
        NgramLogit([4, 0])
    with pytest.raises(ValueError, match="`first_id`"):
        NgramLogit([4], first_id=-1)
    with pytest.raises(ValueError, match="2 id tensors"):
        NgramLogit([4, 4])([np.zeros((1, 3), "int32")])
