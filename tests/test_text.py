"""The text pieces saved models refer to: standardization, clipping, bigrams."""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest

from keras_selfattn import TokenAndPositionEmbedding
from keras_selfattn.text import (
    BigramEmbedding,
    ClipSequence,
    NgramLogit,
    standardize,
    standardize_v2,
)
from tests.helpers import assert_close


@pytest.mark.tensorflow_only  # tf.strings
def test_standardize_strips_breaks_and_keeps_punctuation():
    out = standardize(np.array(['Great film!!<br />It\'s "GOOD"... #1'], dtype=object))
    assert out.numpy()[0].decode().split() == [
        "great", "film", "!", "!", "it's", '"', "good", '"', ".", ".", ".", "1",
    ]  # fmt: skip
    # Every ASCII apostrophe stays with its word; a curly one is a space.
    quoted = standardize(np.array(["'Hello' it\u2019s caf\u00e9"], dtype=object))
    assert quoted.numpy()[0].decode().split() == ["'hello'", "it", "s", "caf"]


def _words(function, texts):
    out = function(np.array(texts, dtype=object)).numpy()
    return [text.decode().split() for text in out]


@pytest.mark.tensorflow_only  # tf.strings
@pytest.mark.parametrize(
    "text, expected",
    [
        ("It\u2019s \u2018fine\u2019", "it's 'fine'"),  # a phone's apostrophes
        ("didn\u00b4t, didn`t, didn\u0092t", "didn't , didn't , didn't"),
        ("a\u02bcb \u201bc\u2032 \u201ad\u0091", "a'b 'c' 'd'"),
        ("`kiss' me", "'kiss' me"),  # ASCII, but with a backtick
        ("\u201cGood\u201d \u00abbon\u00bb", '" good " " bon "'),
        ("\u201ea\u201f \u2039b\u203a \u0093c\u0094 d\u2033", '" a " " b " " c " d "'),
        ("long\u2014too long\u2013ok\u0096", "long - too long - ok -"),
        ("\u22123 \u2010a\u0097", "- 3 - a -"),
        ("Wait\u2026 what\u0085", "wait . . . what . . ."),
        ("CLICH\u00c9 clich\u00e9d na\u00efve", "cliche cliched naive"),
        ("cliche\u0301d Cafe\u0301", "cliched cafe"),  # combining accents
        ("\u00c6on \u0152uvre Stra\u00dfe \u0141\u00f3dz", "aeon oeuvre strasse lodz"),
        ("\u0424\u0438\u043b\u044c\u043c \u7535\u5f71 3\u00d72", "3 2"),  # others
        ("GREAT!<br />It's fine", "great ! it's fine"),  # as `standardize`
    ],
    ids=[
        "curly_apostrophes", "apostrophe_lookalikes", "more_apostrophes",
        "backtick_only", "quotes", "more_quotes", "dashes", "more_dashes",
        "ellipsis", "accents", "combining_accents", "ligatures_and_strokes",
        "other_scripts", "plain_ascii",
    ],
)  # fmt: skip
def test_standardize_v2_folds_typography_and_accents(text, expected):
    assert _words(standardize_v2, [text]) == [expected.split()]


@pytest.mark.tensorflow_only  # tf.strings
def test_standardize_v2_folds_every_latin_letter_and_keeps_shapes():
    letters = [chr(c) for c in range(0xC0, 0x180) if chr(c).isalpha()]
    for letter, words in zip(letters, _words(standardize_v2, letters), strict=True):
        assert len(words) == 1 and words[0].isascii() and words[0].isalpha(), letter
    # Any shape; a batch that mixes texts to fold and texts to leave.
    grid = np.array([["Caf\u00e9", "plain"], ["", "\u00c7a va"]], dtype=object)
    out = standardize_v2(grid).numpy()
    assert out.shape == (2, 2)
    words = [[t.decode() for t in row] for row in out]
    assert words == [["cafe", "plain"], ["", "ca va"]]
    assert standardize_v2(np.array("Na\u00efve", dtype=object)).numpy() == b"naive"
    assert standardize_v2(np.array([], dtype=object)).numpy().shape == (0,)
    import tensorflow as tf

    ragged = standardize_v2(tf.ragged.constant([["a\u2019b"], ["x", "Y\u00e9"]]))
    assert ragged.to_list() == [[b"a'b"], [b"x", b"ye"]]


@pytest.mark.tensorflow_only  # tf.strings
def test_standardize_v2_is_standardize_on_text_it_does_not_fold():
    texts = ['Great film!!<br />It\'s "GOOD"... #1', "a\tb\nc", "@@@", ""]
    assert _words(standardize_v2, texts) == _words(standardize, texts)


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
    np.testing.assert_array_equal(out[1, 2:], 0.0)  # padded: zeros, as every layer
    assert layer.compute_mask(tokens, mask) is mask
    clone = BigramEmbedding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


def _int64_ids():
    """Where int64 ids reach a layer: JAX makes them int32 (wrapped) when it
    takes the array unless its 64-bit mode is on, so they run in that mode
    there."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.enable_x64(True)
    return contextlib.nullcontext()


def test_bigram_embedding_reads_the_keras_mask_of_its_inputs():
    # With two tensor arguments Keras passes the mask of `inputs` only as
    # `inputs_mask`: the padded positions got the vector of bigram id 0.
    ids = keras.Input((None,), dtype="int32")
    bigrams = keras.Input((None,), dtype="int32")
    tokens = TokenAndPositionEmbedding(20, 8, 4)(ids)  # zeros, masked at id 0
    layer = BigramEmbedding(10, 4, embeddings_initializer="ones")
    model = keras.Model([ids, bigrams], layer(tokens, bigrams))
    rows = [np.array([[3, 4, 5, 0, 0]]), np.array([[2, 3, 0, 0]])]
    got = model.predict(rows, verbose=0)
    np.testing.assert_array_equal(got[0, 3:], 0.0)  # padded: nothing added
    assert np.all(np.abs(got[0, :3]) > 0)
    eager = keras.ops.convert_to_numpy(
        layer(TokenAndPositionEmbedding(20, 8, 4)(rows[0]), rows[1])
    )
    np.testing.assert_array_equal(eager[0, 3:], 0.0)


def test_bigram_embedding_zeros_padding_whatever_the_inputs_hold():
    # Only the added bigram vector was zeroed: NaN in the inputs' padding
    # came out as NaN.
    inputs = np.ones((1, 4, 3), "float32")
    inputs[0, 2:] = [[np.nan, np.inf, 5.0], [-np.inf, 7.0, np.nan]]
    mask = np.array([[True, True, False, False]])
    layer = BigramEmbedding(10, 3, embeddings_initializer="ones")
    got = keras.ops.convert_to_numpy(layer(inputs, np.array([[2, 3, 4]]), mask=mask))
    np.testing.assert_array_equal(got[0, 2:], 0.0)
    np.testing.assert_array_equal(got[0, :2], 2.0)  # ones plus a ones vector


@pytest.mark.parametrize(
    "bigram_ids, received",
    [
        pytest.param([[10, 2]], "1 ids outside it, from 10 to 10", id="too_large"),
        pytest.param([[-1, 2]], "1 ids outside it, from -1 to -1", id="negative"),
        pytest.param([[2**32 + 3, 2]], f"from {2**32 + 3} to", id="past_int32"),
    ],
)
def test_bigram_ids_outside_the_vocabulary_raise(bigram_ids, received):
    # Keras's Embedding took -1 as the last row, int64 ids wrapped, and JAX
    # gave NaN for 10.
    layer = BigramEmbedding(10, 2)
    expected = r"`bigram_ids`, expected integer ids in \[0, vocabulary_size=10\)"
    with _int64_ids(), pytest.raises(ValueError, match=expected) as error:
        layer(np.ones((1, 3, 2), "float32"), np.array(bigram_ids, "int64"))
    assert received in str(error.value)
    with pytest.raises(ValueError, match="`bigram_ids`"):
        layer(np.ones((1, 3, 2), "float32"), np.zeros((1, 2, 1), "int32"))


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_bigram_ids_keep_their_value_in_mixed_precision(policy):
    # The layer's autocast turned float32 id 257.0 into bfloat16's 256.0
    # (and 2049.0 into float16's 2048.0): another pair, silently.
    layer = BigramEmbedding(
        3000, 2, embeddings_initializer="random_normal", dtype=policy
    )
    tokens = np.ones((1, 3, 2), "float32")
    ids = np.array([[257, 2049]])
    got = layer(tokens, ids.astype("float32"))
    assert keras.backend.standardize_dtype(got.dtype) == policy.split("_")[1]
    assert_close(got, layer(tokens, ids.astype("int32")), atol=0)
    table = keras.ops.convert_to_numpy(layer.embedding.embeddings)
    assert_close(got[0], 1 + table[[0, 257, 2049]], atol=0.02)  # pairs 257, 2049


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_ngram_logit_float_ids_are_ids_where_whole(policy):
    # Autocast turned float id 257.0 into bfloat16's 256.0 and 2049.0 into
    # 2048.0 (other n-grams), and 2.7 was cast to id 2. One weight per id,
    # each a power of two (exact in every dtype): a sum names its ids.
    layer = NgramLogit([3000], dtype=policy)
    layer.build()
    kernel = np.zeros(3000, "float32")
    kernel[[257, 2049, 5, 4, 2]] = [1, 8, 64, 512, 4096]
    layer.kernel.assign(kernel)
    ids = np.array([[257, 2049, 0], [5, 0, 0]])
    got = keras.ops.convert_to_numpy(layer(ids.astype("float32")))
    assert keras.backend.standardize_dtype(layer(ids).dtype) == policy.split("_")[-1]
    np.testing.assert_array_equal(got[:, 0], [1 + 8, 64])
    np.testing.assert_array_equal(got, keras.ops.convert_to_numpy(layer(ids)))
    odd = np.array([[2.7, np.nan, 4.0]], "float32")  # only 4.0 is an id
    assert float(keras.ops.convert_to_numpy(layer(odd))[0, 0]) == 512


def test_numpy_integers_are_integers():
    assert ClipSequence(np.int64(5), head=np.int64(2)).get_config()["head"] == 2
    # Keras's Embedding refused them, naming `input_dim`.
    bigrams = BigramEmbedding(np.int64(7), np.int64(4))
    assert type(bigrams.get_config()["vocabulary_size"]) is int
    layer = NgramLogit([np.int64(5)], first_id=np.int64(1))
    assert layer.get_config()["first_id"] == 1
    assert type(layer.get_config()["vocabulary_sizes"][0]) is int


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


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="jax.export")
def test_clip_sequence_exports_with_a_symbolic_length_on_jax():
    # `model.export` on JAX traces an unknown length as a symbolic one,
    # which `min(seq, max_length)` cannot compare.
    import jax
    from jax import export

    layer = ClipSequence(4, head=1)
    spec = jax.ShapeDtypeStruct(export.symbolic_shape("batch, length"), "int32")
    exported = export.export(jax.jit(layer))(spec)
    ids = np.array([[5, 6, 7, 8, 9, 0], [5, 6, 0, 0, 0, 0]], "int32")
    np.testing.assert_array_equal(exported.call(ids), [[5, 7, 8, 9], [5, 6, 0, 0]])
    np.testing.assert_array_equal(exported.call(ids[:, :3]), [[5, 6, 7], [5, 6, 0]])


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


def test_ngram_logit_takes_a_tuple_and_ignores_ids_past_its_vocabulary():
    a, b = keras.Input((5,), dtype="int32"), keras.Input((4,), dtype="int32")
    assert tuple(NgramLogit([6, 4])((a, b)).shape) == (None, 1)
    layer = NgramLogit([5], kernel_initializer="ones")
    ids = np.array([[2, 7, -4]], "int64")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer([ids])), [[1.0]])
    # 2**32 + 3 is no id of the vocabulary (it wrapped to 3 when cast).
    with _int64_ids():
        ids = np.array([[2, 2**32 + 3]], "int64")
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer([ids])), [[1.0]])


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
