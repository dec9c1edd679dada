"""`benchmarks/ngram_cv.py`: the cross-validation that chose the n-gram
branch's C scores each text by a fit that did not see it."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import ngram_cv


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "argv, message",
    [
        pytest.param(["--folds", "1"], "--folds: expected at least 2", id="one_fold"),
        pytest.param(
            ["--c", "0.1", "0"], "--c: expected positive, finite", id="zero_c"
        ),
        pytest.param(["--c", "nan"], "--c: expected positive, finite", id="nan_c"),
        pytest.param(["--c", "inf"], "--c: expected positive, finite", id="infinite_c"),
        pytest.param(["--limit", "0"], "--limit: expected a positive", id="no_reviews"),
    ],
)
def test_a_bad_argument_is_a_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        ngram_cv.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def _texts(words, n, seed):
    """`n` texts of two sentences (the last of 5 words), half of them flagged
    as snippets, and random labels; `words(i, label)` makes text i's words.
    (A seed of 0 would draw the labels from the stream the folds are drawn
    from with seed 0: each fold would hold one class.)"""
    labels = np.random.default_rng(seed).integers(0, 2, n)
    texts = [f"{words(i, y)} one two three. {words(i, y)} four five six seven."
             for i, y in enumerate(labels)]  # fmt: skip
    return texts, labels, np.arange(n) % 2 == 1


@pytest.mark.tensorflow_only  # the demo's model makes the vocabularies
def test_each_text_is_scored_by_a_fit_that_did_not_see_it():
    # A word of its own per text and a random label: a fit that saw the
    # text classifies it (NB-LR fits its training texts almost perfectly),
    # one that did not can only guess.
    texts, labels, snippets = _texts(lambda i, y: f"only{i}", 120, seed=11)
    (row,) = ngram_cv.cross_validate(texts, labels, snippets, [1.0], 3, seed=0)
    for name in ("reviews", "snippets", "last sentences", "all"):
        accuracy, _, n = row[name]
        assert n > 0 and accuracy < 0.7, (name, accuracy)
    assert row["fold AUC"][0] < 0.7
    # A word that decides, in every text: the folds learn it.
    texts, labels, snippets = _texts(lambda i, y: ("bad", "good")[y], 120, seed=12)
    (row,) = ngram_cv.cross_validate(texts, labels, snippets, [1.0], 3, seed=0)
    for name in ("reviews", "snippets", "last sentences", "all"):
        assert row[name][:2] == (1.0, 1.0), (name, row[name])
    assert row["fold AUC"] == (1.0, 0.0)
    with pytest.raises(ValueError, match="folds that each hold texts of both"):
        ngram_cv.cross_validate(texts[:3], labels[:3], snippets[:3], [1.0], 3, seed=0)


@pytest.mark.tensorflow_only
def test_the_texts_are_trains_n_gram_texts_and_no_test_text():
    from keras_selfattn.imdb import data
    from keras_selfattn.imdb.train import validation_count

    texts, labels, snippets = ngram_cv.training_texts(400)
    dataset = data.with_rotten_tomatoes(data.load("bundled").limit(400), 400)
    validation = dataset.train_texts[-validation_count(len(dataset.train_texts)) :]
    assert len(texts) == len(labels) and not set(texts) & set(validation)
    assert 0 < snippets.sum() < len(texts)
    rt_test = {data.clean(t) for t in data.load_rotten_tomatoes("test")[0]}
    assert not set(texts) & (rt_test | set(dataset.test_texts))
