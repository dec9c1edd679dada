"""The n-gram branch: NB ratios, the regression, the fit and the blend."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_selfattn.imdb import model as imdb_model
from keras_selfattn.imdb import ngrams
from keras_selfattn.imdb.model import build_model, compile_model

pytestmark = pytest.mark.tensorflow_only

SMALL = dict(max_len=8, embed_dim=4, num_heads=1, intermediate_dim=4, ngram_logit=True)


def _symmetric():
    """The words "great" and "dull" decide; "fun" and "film" are in both."""
    texts = ["great fun", "great film", "dull fun", "dull film"] * 4
    return texts, np.array([1, 1, 0, 0] * 4)


def test_naive_bayes_ratios_by_hand():
    # Texts 0, 1 positive, text 2 negative; ids 0..2.
    pairs = np.array([[0, 0], [0, 1], [1, 1], [2, 2]])
    ratios = ngrams.naive_bayes_ratios(pairs, np.array([1, 1, 0]), 3)
    p = np.array([1 + 1, 1 + 2, 1 + 0]) / 6
    q = np.array([1 + 0, 1 + 0, 1 + 1]) / 4
    np.testing.assert_allclose(ratios, np.log(p / q))


def test_lbfgs_finds_the_minimum_of_rosenbrock():
    def rosenbrock(x):
        a, b = x
        value = (1 - a) ** 2 + 100 * (b - a * a) ** 2
        grad = np.array([-2 * (1 - a) - 400 * a * (b - a * a), 200 * (b - a * a)])
        return value, grad

    x, iterations = ngrams.minimize_lbfgs(rosenbrock, np.array([-1.2, 1.0]), tol=1e-9)
    np.testing.assert_allclose(x, [1.0, 1.0], atol=1e-5)
    assert 0 < iterations < 200


def test_logistic_regression_is_scikit_learns():
    from scipy import sparse
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = (rng.random((300, 40)) < 0.15) * rng.normal(size=(300, 40))
    y = (x @ rng.normal(size=40) + 0.5 * rng.normal(size=300) > 0).astype(int)
    rows, columns = np.nonzero(x)
    w, b, _ = ngrams.logistic_regression(
        rows, columns, x[rows, columns], y, 40, C=0.5, max_iter=500
    )
    reference = LogisticRegression(C=0.5, tol=1e-10, max_iter=10_000)
    reference.fit(sparse.csr_matrix(x), y)
    np.testing.assert_allclose(w, reference.coef_[0], atol=2e-4)
    assert b == pytest.approx(reference.intercept_[0], abs=2e-4)


def test_training_leaves_the_ngram_branch_at_zero():
    texts, labels = _symmetric()
    model = build_model(texts, vocab_size=10, bigram_vocab_size=10, **SMALL)
    compile_model(model, total_steps=4)
    ngram = model.get_layer(imdb_model.NGRAM)
    classifier = model.get_layer(imdb_model.CLASSIFIER)
    before = np.asarray(classifier.kernel).copy()
    model.fit(np.array(texts, dtype=object), labels, batch_size=4, epochs=1, verbose=0)
    assert np.all(np.asarray(ngram.kernel) == 0.0)
    after = np.asarray(classifier.kernel)
    assert after[-1, 0] == 0.0 and not np.array_equal(after[:-1], before[:-1])


def test_fit_ngram_branch_is_nb_lr():
    texts, labels = _symmetric()
    model = build_model(texts, vocab_size=10, bigram_vocab_size=0, **SMALL)
    fit = ngrams.fit_ngram_branch(model, texts, labels, C=1.0)
    assert fit.texts == 16 and fit.features == 4 and fit.iterations > 0
    vocabulary = model.get_layer(imdb_model.TEXT_VECTORIZATION).get_vocabulary()
    weights = np.asarray(model.get_layer(imdb_model.NGRAM).kernel)
    word = {w: weights[vocabulary.index(w)] for w in ("great", "dull", "fun", "film")}
    assert word["great"] > 0 > word["dull"]
    assert word["great"] == pytest.approx(-word["dull"], rel=1e-4)
    assert word["fun"] == pytest.approx(0.0, abs=1e-6)  # ratio 0: no evidence
    assert word["film"] == pytest.approx(0.0, abs=1e-6)
    # The same as the regression on the ratio-scaled features, by hand: the
    # vocabulary's 4 words each have 8 texts + 1 in p and q (|p|_1 = |q|_1
    # = 20): r = log 9 for "great", -log 9 for "dull", 0 for the others.
    r = np.log(9.0)
    columns = np.where(labels == 1, 0, 1)  # "great" in 8 texts, "dull" in 8
    values = np.where(labels == 1, r, -r)
    v, _, _ = ngrams.logistic_regression(np.arange(16), columns, values, labels, 2)
    assert word["great"] == pytest.approx(r * v[0], rel=1e-4)
    assert word["dull"] == pytest.approx(-r * v[1], rel=1e-4)


def test_blend_folds_the_fitted_mix_into_the_classifier():
    texts, labels = _symmetric()
    model = build_model(texts, vocab_size=10, bigram_vocab_size=10, **SMALL)
    ngrams.fit_ngram_branch(model, texts, labels)
    attention, score = ngrams.branch_logits(model, texts)
    mix = ngrams.blend(model, texts, labels)
    # The n-gram score decides these texts; the untrained attention does not.
    assert mix.ngrams > 0
    expected = mix.attention * attention + mix.ngrams * score + mix.bias
    np.testing.assert_allclose(imdb_model.logits(model, texts), expected, atol=1e-4)
    probabilities = imdb_model.predict(model, texts)
    assert imdb_model.accuracy(probabilities, labels) == 1.0


def test_branch_logits_sum_to_the_models_logit():
    texts, labels = _symmetric()
    model = build_model(texts, vocab_size=10, bigram_vocab_size=10, **SMALL)
    ngrams.fit_ngram_branch(model, texts, labels)
    ngrams.blend(model, texts, labels)
    attention, score = ngrams.branch_logits(model, texts)
    weight = float(np.asarray(model.get_layer(imdb_model.CLASSIFIER).kernel)[-1, 0])
    np.testing.assert_allclose(
        attention + weight * score, imdb_model.logits(model, texts), atol=1e-6
    )
    keras.backend.clear_session()
