"""The n-gram branch: NB ratios, the regression, the fit and the blend."""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest

from keras_selfattn.imdb import model as imdb_model
from keras_selfattn.imdb import ngrams
from keras_selfattn.imdb.model import build_model, compile_model
from keras_selfattn.imdb.train import TrainConfig

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
    # The same as the regression on the ratio-scaled features, by hand:
    # "great" is in 8 positive texts and no negative one, "dull" the other way
    # round (smoothing 1, |p|_1 = |q|_1): r = log 9 for "great", -log 9 for
    # "dull"; "fun" and "film" are in 4 texts of each class: r = 0.
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
    mix = ngrams.blend(model, texts, labels, min_per_class=8)
    # The n-gram score decides these texts; the untrained attention does not.
    assert mix.fitted and mix.ngrams > 0 and mix.ngrams != 1.0
    expected = mix.attention * attention + mix.ngrams * score + mix.bias
    np.testing.assert_allclose(imdb_model.logits(model, texts), expected, atol=1e-4)
    probabilities = imdb_model.predict(model, texts)
    assert imdb_model.accuracy(probabilities, labels) == 1.0


def test_branch_logits_make_the_models_probability():
    texts, labels = _symmetric()
    model = build_model(texts, vocab_size=10, bigram_vocab_size=10, **SMALL)
    ngrams.fit_ngram_branch(model, texts, labels)
    ngrams.blend(model, texts, labels, min_per_class=8)
    attention, score = ngrams.branch_logits(model, texts)
    weight = float(np.asarray(model.get_layer(imdb_model.CLASSIFIER).kernel)[-1, 0])
    probability = model.predict(np.array(texts, dtype=object), verbose=0)[:, 0]
    np.testing.assert_allclose(
        1 / (1 + np.exp(-(attention + weight * score))), probability, atol=1e-5
    )


def test_fit_ngram_branch_equals_scikit_learns_nb_lr_with_bigrams():
    from scipy import sparse
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    words = [
        "good",
        "bad",
        "great",
        "awful",
        "fine",
        "dull",
        "fun",
        "film",
        "plot",
        "cast",
    ]
    texts = [" ".join(rng.choice(words, int(rng.integers(2, 8)))) for _ in range(60)]
    labels = np.array(
        [int(sum(w in t for w in ("good", "great", "fun")) > 1) for t in texts]
    )
    model = build_model(texts, vocab_size=12, bigram_vocab_size=30, **SMALL)
    fit = ngrams.fit_ngram_branch(model, texts, labels, C=0.7)
    assert fit.iterations < fit.max_iter  # converged
    # The same features by hand: both vocabularies side by side, ratio-scaled.
    ngram = model.get_layer(imdb_model.NGRAM)
    sizes = ngram.vocabulary_sizes
    vectorizers = [
        model.get_layer(imdb_model.TEXT_VECTORIZATION),
        model.get_layer(imdb_model.BIGRAM_VECTORIZATION),
    ]
    columns, rows, ratios = [], [], []
    for offset, size, pairs in zip(
        np.cumsum([0, *sizes[:-1]]), sizes, ngrams.presence(vectorizers, sizes, texts),
        strict=True,
    ):  # fmt: skip
        pairs = pairs[pairs[:, 1] >= 2]
        r = ngrams.naive_bayes_ratios(pairs, labels, size)
        r[:2] = 0.0
        rows.append(pairs[:, 0])
        columns.append(pairs[:, 1] + offset)
        ratios.append(r)
    rows, columns, ratios = map(np.concatenate, (rows, columns, ratios))
    x = sparse.csr_matrix((ratios[columns], (rows, columns)), shape=(60, sum(sizes)))
    reference = LogisticRegression(C=0.7, tol=1e-10, max_iter=10_000).fit(x, labels)
    ids = [np.asarray(v(np.array(texts, dtype=object))) for v in vectorizers]
    ours = np.asarray(ngram(ids))[:, 0] + fit.intercept
    np.testing.assert_allclose(ours, reference.decision_function(x), atol=1e-3)
    assert sizes[1] > 2 and np.any(np.asarray(ngram.kernel)[sizes[0] :] != 0)


def test_nb_lr_and_scores_are_the_branch_without_the_model():
    # benchmarks/ngram_cv.py fits and scores folds of texts with these.
    rng = np.random.default_rng(1)
    words = ["good", "bad", "great", "awful", "fine", "dull", "fun", "film"]
    texts = [" ".join(rng.choice(words, int(rng.integers(2, 8)))) for _ in range(40)]
    labels = np.array([int(("good" in t) + ("fun" in t) > ("bad" in t)) for t in texts])
    model = build_model(texts, vocab_size=10, bigram_vocab_size=20, **SMALL)
    fit = ngrams.fit_ngram_branch(model, texts, labels)  # the default C
    layer = model.get_layer(imdb_model.NGRAM)
    sizes = layer.vocabulary_sizes
    vectorizers = ngrams._vectorizers(model)
    pairs = ngrams.presence(vectorizers, sizes, texts)
    assert fit.C == TrainConfig().ngram_c == 0.1
    weights, intercept, iterations, features = ngrams.nb_lr(
        pairs,
        labels,
        sizes,
        layer.first_id,  # its default C: the same
    )
    np.testing.assert_allclose(np.asarray(layer.kernel), weights, rtol=1e-6, atol=1e-7)
    assert (intercept, iterations, features) == (
        fit.intercept,
        fit.iterations,
        fit.features,
    )
    ids = [np.asarray(v(np.array(texts, dtype=object))) for v in vectorizers]
    np.testing.assert_allclose(
        ngrams.scores(pairs, weights, sizes, len(texts)),
        np.asarray(layer(ids))[:, 0],
        atol=1e-5,
    )
    assert np.any(weights[: sizes[0]] != 0) and np.any(weights[sizes[0] :] != 0)


_PAIRS = [np.array([[0, 2], [1, 3]]), np.array([[0, 2]])]


@pytest.mark.parametrize(
    "call, message",
    [
        pytest.param(lambda: ngrams.nb_lr(_PAIRS, [1, 0], [5, 4], -1),
                     "`first_id`, expected an integer >= 0", id="negative_first_id"),
        pytest.param(lambda: ngrams.nb_lr(_PAIRS, [1, 0], [5, 4], 2.5),
                     "`first_id`", id="float_first_id"),
        pytest.param(lambda: ngrams.nb_lr(_PAIRS, [1], [5, 4], 2),
                     "`labels`, expected one label per text of `pairs`, at least 2",
                     id="too_few_labels"),
        pytest.param(lambda: ngrams.nb_lr(_PAIRS, [1, 0], [5], 2),
                     "`pairs`, expected one array per vocabulary, 1 of them",
                     id="pairs_without_a_size"),
        pytest.param(lambda: ngrams.nb_lr(_PAIRS, [1, 0], [5, 2], 0),
                     "each id below its vocabulary's size", id="id_past_its_size"),
        pytest.param(lambda: ngrams.nb_lr([p * 1.0 for p in _PAIRS], [1, 0], [5, 4], 2),
                     "integer arrays", id="float_pairs"),
        pytest.param(lambda: ngrams.scores(_PAIRS, np.zeros(10), [5, 4], 2),
                     "`weights`, expected one weight per id of the vocabularies, "
                     "shape (9,)", id="weights_too_long"),
        pytest.param(lambda: ngrams.scores(_PAIRS, np.zeros(9), [5, 4], 1),
                     "`n`, expected an integer >= 2", id="fewer_texts_than_pairs"),
    ],
)  # fmt: skip
def test_nb_lr_and_scores_reject_bad_input(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_nb_lr_and_scores_take_lists_and_a_vocabulary_with_no_pair():
    pairs = [[[0, 2], [1, 3]], []]  # no text holds a pair of the 2nd vocabulary
    weights, _, _, features = ngrams.nb_lr(pairs, [1, 0], [5, 4], 2, C=1.0)
    assert features == 2 and weights.shape == (9,) and weights[2] > 0 > weights[3]
    np.testing.assert_allclose(
        ngrams.scores(pairs, weights, [5, 4], 2), weights[[2, 3]]
    )


def test_blend_is_the_plain_sum_without_enough_texts_of_a_class():
    texts, labels = _symmetric()
    model = build_model(texts, vocab_size=10, bigram_vocab_size=10, **SMALL)
    fit = ngrams.fit_ngram_branch(model, texts, labels)
    attention, score = ngrams.branch_logits(model, texts)
    positives = labels == 1  # one class only: nothing to fit a mix on
    mix = ngrams.blend(
        model, list(np.array(texts)[positives]), labels[positives],
        intercept=fit.intercept,
    )  # fmt: skip
    assert mix == ngrams.Blend(1.0, 1.0, fit.intercept, fitted=False)
    expected = attention + score + fit.intercept
    np.testing.assert_allclose(imdb_model.logits(model, texts), expected, atol=1e-4)


def test_blend_refuses_a_model_without_the_ngram_branch():
    texts, labels = _symmetric()
    small = {**SMALL, "ngram_logit": False}
    model = build_model(texts, vocab_size=10, bigram_vocab_size=0, **small)
    with pytest.raises(ValueError, match="ngram_logit=True"):
        ngrams.blend(model, texts, labels)
    with pytest.raises(ValueError, match="ngram_logit=True"):
        ngrams.fit_ngram_branch(model, texts, labels)
    keras.backend.clear_session()


def test_blend_mix_is_scikit_learns_on_texts_a_branch_separates():
    # Large logits of held-out texts that the attention branch separates:
    # 30 full Newton steps diverged here (a bias of -2e10, every verdict the
    # same); the penalised regression has a finite optimum, scikit-learn's.
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(4)
    for _ in range(50):
        y = np.repeat([1.0, 0.0], 20)
        attention = np.where(y == 1, 1, -1) * rng.uniform(0.5, 60, 40)
        score = rng.normal(scale=40, size=40) + 10 * (2 * y - 1)
        z = np.stack([attention, score], 1)
        theta = ngrams._logistic_newton(z, y, ridge=0.01)
        reference = LogisticRegression(C=100.0, tol=1e-12, max_iter=100_000)
        reference.fit(z, y)
        expected = np.append(reference.coef_[0], reference.intercept_)
        np.testing.assert_allclose(theta, expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(labels=np.array([1, 1, 0, 0] * 5)), "`labels`.*16 of them"),
        (dict(labels=np.array([1, 1, -1, -1] * 4)), "0 or 1. Received: the value -1"),
        (dict(alpha=0.0), "`alpha`, expected a positive"),
        (dict(C=0.0), "`C`, expected a positive"),
        (dict(max_iter=0), "`max_iter`, expected a positive integer"),
    ],
    ids=["more-labels-than-texts", "labels-plus-minus-one", "alpha-zero", "C-zero",
         "max-iter-zero"],
)  # fmt: skip
def test_fit_ngram_branch_rejects_bad_input(change, message):
    # Each was fitted without a word: extra labels as empty texts, -1 as a
    # label the loss and the gradient read differently, NaN weights for
    # alpha = 0, all-zero weights for C = 0.
    texts, labels = _symmetric()
    model = build_model(texts, vocab_size=10, bigram_vocab_size=0, **SMALL)
    arguments = {"labels": labels, **change}
    with pytest.raises(ValueError, match=message):
        ngrams.fit_ngram_branch(model, texts, **arguments)
    assert np.all(np.asarray(model.get_layer(imdb_model.NGRAM).kernel) == 0.0)


def test_logistic_regression_rejects_rows_without_a_label():
    with pytest.raises(ValueError, match=r"`rows`, expected row indices in \[0, 2\)"):
        ngrams.logistic_regression(
            np.array([0, 2]), np.array([0, 1]), np.ones(2), np.array([1, 0]), 2
        )
