"""The demo model and its text pieces: standardization, clipping, bigrams, masks,
the attention switch, evaluation, and loading a saved model."""

from __future__ import annotations

import shutil

import keras
import numpy as np
import pytest

from keras_selfattn.imdb import model as imdb_model
from keras_selfattn.imdb.model import ReviewBatches, build_model
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.text import standardize, standardize_v2
from tests.helpers import DEMO_V0_1, needs_demo_v0_1
from tests.imdb.serving import NEGATIVE, POSITIVE, predict_in_fresh_process

pytestmark = pytest.mark.tensorflow_only

TEXTS = [
    "A great movie!<br /><br />I loved it, really.",
    "Not good. Not good at all; boring & too long",
    "the acting was superb",
    "worst film ever!!",
] * 5


@pytest.mark.parametrize("bigrams", [0, 50])
def test_prediction_does_not_depend_on_batch_padding(bigrams):
    model = build_model(
        TEXTS,
        vocab_size=50,
        bigram_vocab_size=bigrams,
        max_len=16,
        embed_dim=8,
        num_heads=2,
        intermediate_dim=8,
    )
    short = np.array(["great movie"], dtype=object)
    with_long = np.array(["great movie", "boring " * 40], dtype=object)
    alone = model.predict(short, verbose=0)[0, 0]
    padded = model.predict(with_long, verbose=0)[0, 0]
    np.testing.assert_allclose(alone, padded, rtol=1e-5)


def test_vocabulary_comes_from_training_texts_only():
    model = build_model(TEXTS, vocab_size=100, max_len=8, embed_dim=8, num_heads=2)
    vocabulary = model.get_layer(imdb_model.TEXT_VECTORIZATION).get_vocabulary()
    assert "loved" in vocabulary and "!" in vocabulary
    assert "<br" not in " ".join(vocabulary)
    assert "zebra" not in vocabulary


def test_a_new_model_reads_a_phones_apostrophes_and_accents_as_ascii():
    model = build_model(
        TEXTS + ["a cliche , it's fine"],
        vocab_size=60,
        bigram_vocab_size=60,
        max_len=16,
        embed_dim=8,
        num_heads=2,
        seed=1,
    )
    assert imdb_model.standardization(model) is standardize_v2
    assert imdb_model.standardization() is standardize_v2
    typed = ["A clich\u00e9\u2026 It\u2019s fine", "a cliche... it's fine"]
    texts = np.array(typed, dtype=object)
    ids = keras.ops.convert_to_numpy(
        model.get_layer(imdb_model.TEXT_VECTORIZATION)(texts)
    )
    np.testing.assert_array_equal(ids[0], ids[1])
    assert 1 not in ids  # no out-of-vocabulary token
    probabilities = model.predict(texts, verbose=0)[:, 0]
    assert probabilities[0] == probabilities[1]
    assert imdb_model.readable(["\u00c9 \u00e9", "@@@"], model) == [True, False]


@needs_demo_v0_1
def test_a_model_saved_by_0_1_keeps_its_standardization():
    model = imdb_model.load(DEMO_V0_1)
    assert imdb_model.standardization(model) is standardize
    # It drops letters outside a to z: a text of accented letters alone
    # has no word for it, and one for a model built today.
    assert imdb_model.readable(["\u00c9 \u00e9"], model) == [False]
    # Without a model: whether any demo model reads a word. "<b\u0155>"
    # has one ("b") for this model only: a model of today reads a <br> tag.
    assert imdb_model.readable(["\u00c9 \u00e9", "<b\u0155>", "@"]) == [
        True,
        True,
        False,
    ]
    assert imdb_model.readable(["<b\u0155>"], model) == [True]


def test_review_batches_group_by_length_and_cover_everything():
    texts = [" ".join(["w"] * n) for n in range(1, 101)]
    labels = np.arange(100) % 2
    batches = ReviewBatches(texts, labels, 10, seed=0)
    assert len(batches) == 10
    seen = np.concatenate(batches.batch_indices())
    assert sorted(seen.tolist()) == list(range(100))
    ordered = ReviewBatches(texts, labels, 10, shuffle=False)
    x, y = ordered[0]
    assert [len(t.split()) for t in x.numpy().astype(str)] == list(range(1, 11))
    np.testing.assert_array_equal(y, labels[:10])


def test_bigrams_line_up_with_clipped_tokens():
    text = " ".join(f"w{i}" for i in range(30))
    model = build_model(
        [text] * 3,
        vocab_size=100,
        bigram_vocab_size=100,
        max_len=10,
        head_len=4,
        embed_dim=8,
        num_heads=2,
    )
    texts = np.array([text], dtype=object)
    words = model.get_layer(imdb_model.TEXT_VECTORIZATION).get_vocabulary()
    pairs = model.get_layer(imdb_model.BIGRAM_VECTORIZATION).get_vocabulary()
    ids = keras.ops.convert_to_numpy(
        model.get_layer(imdb_model.CLIP)(
            model.get_layer(imdb_model.TEXT_VECTORIZATION)(texts)
        )
    )[0]
    bigram_ids = keras.ops.convert_to_numpy(
        model.get_layer(imdb_model.BIGRAM_CLIP)(
            model.get_layer(imdb_model.BIGRAM_VECTORIZATION)(texts)
        )
    )[0]
    tokens = [words[i] for i in ids]
    assert tokens == ["w0", "w1", "w2", "w3", "w24", "w25", "w26", "w27", "w28", "w29"]
    # BigramEmbedding puts bigram_ids[p - 1] at position p: the pair ending there.
    for p in range(1, 10):
        expected = "w23 w24" if p == 4 else f"{tokens[p - 1]} {tokens[p]}"
        assert pairs[bigram_ids[p - 1]] == expected


@pytest.mark.parametrize(
    "attention, layer_class",
    [
        ("keras_selfattn", MultiHeadAttention),
        ("keras", keras.layers.MultiHeadAttention),
    ],
)
def test_attention_picks_the_encoders_attention_layer(attention, layer_class):
    model = build_model(
        TEXTS, vocab_size=50, max_len=8, embed_dim=8, num_heads=2, attention=attention
    )
    encoder = model.get_layer(f"{imdb_model.ENCODER}_0")
    assert type(encoder._self_attention_layer) is layer_class
    assert model.predict(np.array(TEXTS[:2], dtype=object), verbose=0).shape == (2, 1)


class _SaysGreat:
    """A stand-in model: positive exactly when a review contains "great"."""

    def predict(self, batches, verbose=0):
        texts = [t for i in range(len(batches)) for t in batches[i][0].numpy()]
        return np.array([[float(b"great" in t)] for t in texts])


def test_evaluate_matches_the_labels_in_their_own_order():
    # Longest first, so batching by length reorders them.
    texts = [
        f"{'so ' * (12 - n)}{'great' if n % 3 else 'dull'} movie" for n in range(12)
    ]
    labels = np.array([1 if n % 3 else 0 for n in range(12)])
    labels[[0, 1, 5]] = 1 - labels[[0, 1, 5]]  # three wrong answers
    accuracy = imdb_model.evaluate(_SaysGreat(), texts, labels, batch_size=5)
    assert accuracy == pytest.approx(9 / 12)


def test_review_batches_keep_the_reviews_and_batch_the_epochs_crops():
    reviews = [
        f"Review {i} starts here. It goes on. And on. It ends." for i in range(20)
    ]
    batches = ReviewBatches(reviews, np.arange(20) % 2, 5, seed=1, crop_rate=1.0)
    assert list(batches.reviews) == reviews  # as given, in every epoch
    first = list(batches.epoch_texts)
    assert all(crop in review for crop, review in zip(first, reviews, strict=True))
    assert first != reviews  # every review cropped to one to three sentences
    texts, _ = batches[0]
    assert {t.decode() for t in texts.numpy()} <= set(first)
    batches.set_epoch(1)
    assert list(batches.reviews) == reviews and list(batches.epoch_texts) != first
    batches.set_epoch(0)
    assert list(batches.epoch_texts) == first  # epoch e's crops depend on e only


_BAD_CALLS = {
    # One string was read as its characters: 9 probabilities for "good film".
    "one-string": (
        lambda m: imdb_model.predict(m, "good film"),
        r"argument `texts`, expected a list of review strings \(for one review, "
        r"a list of one\)\. Received: texts='good film'",
    ),
    "a-number-among-the-texts": (
        lambda m: imdb_model.logits(m, ["good", 1]),
        r"expected review strings\. Received: 1 \(of type int\) at index 1",
    ),
    "batch-size-zero": (
        lambda m: imdb_model.predict(m, ["good"], batch_size=0),
        r"argument `batch_size`, expected a positive integer\. Received: "
        r"batch_size=0",
    ),
    # Broadcast by NumPy, these gave an accuracy of 0.0 and 1.0.
    "fewer-labels-than-texts": (
        lambda m: imdb_model.evaluate(m, ["good", "bad"], [1]),
        r"argument `labels`, expected a non-empty 1-D array of 0/1 labels, 2 of "
        r"them \(one per text\)\. Received: labels of shape \(1,\)",
    ),
    "a-label-of-two": (
        lambda m: imdb_model.evaluate(m, ["good", "bad"], [2, 0]),
        r"expected labels that are 0 or 1\. Received: the value 2 at index 0",
    ),
}


@pytest.mark.parametrize("case", list(_BAD_CALLS), ids=list(_BAD_CALLS))
def test_predict_and_evaluate_refuse_what_they_would_misread(tiny_model, case):
    call, message = _BAD_CALLS[case]
    model = imdb_model.load(tiny_model)
    with pytest.raises(ValueError, match=message):
        call(model)


def test_no_text_has_no_prediction(tiny_model):
    model = imdb_model.load(tiny_model)
    probabilities = imdb_model.predict(model, [])
    assert probabilities.shape == (0,) and probabilities.dtype == np.float32
    assert imdb_model.logits(model, []).shape == (0,)


def test_the_verdict_is_above_the_threshold():
    assert imdb_model.label_of(0.5) == imdb_model.NEGATIVE
    assert imdb_model.label_of(0.5000001) == imdb_model.POSITIVE
    probabilities = np.array([0.9, 0.5, 0.2, 0.7])
    assert imdb_model.accuracy(probabilities, [1, 1, 0, 0]) == 0.5


def test_a_saved_model_loads_in_a_fresh_process_without_custom_objects(
    tiny_model, subprocess_env
):
    texts = [POSITIVE, NEGATIVE, "GREAT!<br /><br />a review of unseen words"]
    expected = imdb_model.predict(imdb_model.load(tiny_model), texts)
    got = predict_in_fresh_process(tiny_model, texts, subprocess_env)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", ["missing", "corrupt"])
def test_load_names_a_missing_or_corrupt_file(tmp_path, case):
    path = tmp_path / f"{case}.keras"
    if case == "corrupt":
        path.write_bytes(b"not a zip file at all")
    with pytest.raises(imdb_model.ModelFileError) as error:
        imdb_model.load(path)
    message = str(error.value)
    if case == "missing":
        assert message == f"model file not found: {path}"
    else:  # Keras itself would say "File not found" of this existing file
        assert message == (
            f"cannot load model {path}: not a .keras file (a zip archive)"
        )


@pytest.mark.parametrize("suffix", [".h5", ".zip"], ids=["h5", "zip"])
def test_load_names_a_keras_archive_under_another_name(tiny_model, tmp_path, suffix):
    # Keras goes by the name: as .h5 h5py said "file signature not found",
    # as .zip Keras listed the formats it supports.
    path = tmp_path / f"model{suffix}"
    shutil.copy(tiny_model, path)
    with pytest.raises(imdb_model.ModelFileError) as error:
        imdb_model.load(path)
    assert str(error.value) == (
        f"cannot load model {path}: a .keras archive under another name; "
        "Keras reads it only as a .keras file (rename it)"
    )
