"""The model's n-gram branch as NB-LR, and its blend with the attention branch.

NB-LR (Wang & Manning, 2012, with a logistic regression in place of the
SVM): each text is the set of its distinct words and word pairs; feature `j`
of a text is `r_j` when the text holds n-gram `j` (0 otherwise), with `r` the
Naive-Bayes log-count ratios of the training texts; an L2-regularised
logistic regression reads those features. In the model, `NgramLogit` holds
one weight per n-gram, so the regression's weights `v` go in as `r * v`.

The model trains its attention branch alone (the n-gram branch and its
classifier weight start at zero and stay there: their gradients are zero);
then `fit_ngram_branch` fits NB-LR on the training texts, and `blend` mixes
the two logits by a logistic regression on held-out reviews, which also
calibrates them. That is stacking: the mixing weights are fitted on texts
neither branch was trained on, so neither branch's training fit (NB-LR
classifies its own training texts almost perfectly) decides them.

Only NumPy: the regression is minimised by L-BFGS (`minimize_lbfgs`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import keras
import numpy as np

from keras_selfattn._validation import (
    check_int_in_range,
    check_positive_float,
    check_positive_int,
)
from keras_selfattn.imdb import _checks
from keras_selfattn.imdb import model as imdb_model

__all__ = [
    "Blend",
    "NgramFit",
    "blend",
    "branch_logits",
    "fit_ngram_branch",
    "logistic_regression",
    "minimize_lbfgs",
    "naive_bayes_ratios",
    "nb_lr",
    "presence",
    "scores",
]


def presence(
    vectorizers: Sequence[keras.layers.Layer],
    sizes: Sequence[int],
    texts: np.ndarray,
    batch_size: int = 512,
) -> list[np.ndarray]:
    """Per vocabulary, the `(pairs, 2)` int64 array of the distinct
    `(text, id)` pairs of `texts`, sorted by text."""
    keys = [[] for _ in vectorizers]
    texts = np.asarray(list(texts), dtype=object)
    for start in range(0, len(texts), batch_size):
        batch = texts[start : start + batch_size]
        for key, layer, size in zip(keys, vectorizers, sizes, strict=True):
            ids = np.asarray(layer(batch)).astype("int64")
            rows = np.arange(start, start + len(batch), dtype="int64")[:, None]
            key.append(np.unique(rows * size + ids))
    pairs = []
    for key, size in zip(keys, sizes, strict=True):
        key = np.concatenate(key) if key else np.zeros(0, "int64")
        pairs.append(np.stack([key // size, key % size], 1))
    return pairs


def naive_bayes_ratios(
    pairs: np.ndarray, labels: np.ndarray, size: int, alpha: float = 1.0
) -> np.ndarray:
    """The Naive-Bayes log-count ratios of binarized features.

    `r = log((p / |p|_1) / (q / |q|_1))` with `p = alpha + ` the number of
    positive texts holding each feature and `q` the same for negative ones
    (Wang & Manning, 2012).

    Args:
        pairs: `(pairs, 2)` integer array of distinct `(text, id)` pairs.
        labels: The 0/1 label of each text.
        size: The number of ids.
        alpha: The smoothing count, positive. Defaults to `1.0`.

    Returns:
        A float64 array `(size,)`.
    """
    labels = _checks.labels(labels)
    check_positive_float("alpha", alpha)
    positive = labels[pairs[:, 0]] == 1
    p = alpha + np.bincount(pairs[positive, 1], minlength=size)[:size]
    q = alpha + np.bincount(pairs[~positive, 1], minlength=size)[:size]
    return np.log(p / p.sum()) - np.log(q / q.sum())


def minimize_lbfgs(
    fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
    x0: np.ndarray,
    *,
    max_iter: int = 200,
    tol: float = 1e-5,
    memory: int = 10,
) -> tuple[np.ndarray, int]:
    """Minimises a smooth function by L-BFGS (Nocedal & Wright, algorithm 7.4)
    with a backtracking Armijo line search.

    Args:
        fun: `x -> (f(x), gradient of f at x)`.
        x0: The starting point.
        max_iter: The most iterations. Defaults to `200`.
        tol: Stops when the largest gradient entry is below
            `tol * max(1, |f|)`. Defaults to `1e-5`.
        memory: The number of correction pairs kept. Defaults to `10`.

    Returns:
        `(x, iterations)`. It stops when the gradient meets `tol`, when no
        step along the search direction lowers `f` any more (as close to the
        minimum as float64 gets it), or after `max_iter` iterations:
        `iterations == max_iter` means it stopped there, before either.
    """
    x = np.array(x0, dtype="float64")
    f, g = fun(x)
    steps, changes = [], []
    for iteration in range(1, max_iter + 1):
        if np.max(np.abs(g)) <= tol * max(1.0, abs(f)):
            return x, iteration - 1
        # The two-loop recursion: d = -H g.
        d, alphas = -g, []
        for s, y in reversed(list(zip(steps, changes, strict=True))):
            alpha = s @ d / (y @ s)
            alphas.append(alpha)
            d = d - alpha * y
        if steps:
            d *= steps[-1] @ changes[-1] / (changes[-1] @ changes[-1])
        else:
            d /= max(1.0, np.linalg.norm(d))
        for (s, y), alpha in zip(zip(steps, changes, strict=True), reversed(alphas),
                                 strict=True):  # fmt: skip
            d = d + (alpha - y @ d / (y @ s)) * s
        slope = g @ d
        if slope >= 0:  # not a descent direction: restart from the gradient
            steps, changes, d, slope = [], [], -g, -(g @ g)
        t = 1.0
        while True:
            f_new, g_new = fun(x + t * d)
            if np.isfinite(f_new) and f_new <= f + 1e-4 * t * slope:
                break
            t *= 0.5
            if t < 1e-10:  # no decrease along d: as good as it gets here
                return x, iteration
        s, y = t * d, g_new - g
        x, f, g = x + s, f_new, g_new
        if y @ s > 1e-10 * (s @ s):
            steps.append(s)
            changes.append(y)
            if len(steps) > memory:
                steps.pop(0)
                changes.pop(0)
    return x, max_iter


def logistic_regression(
    rows: np.ndarray,
    columns: np.ndarray,
    values: np.ndarray,
    labels: np.ndarray,
    size: int,
    *,
    C: float = 1.0,  # noqa: N803
    max_iter: int = 200,
) -> tuple[np.ndarray, float, int]:
    """L2-regularised logistic regression on a sparse matrix, by L-BFGS.

    Minimises `C * sum_i log(1 + exp(-s_i z_i)) + |w|^2 / 2` with
    `z_i = sum_j x_ij w_j + b` (the intercept `b` is not penalised) and
    `s_i = 2 y_i - 1` the sign of label `y_i`, as scikit-learn's
    `LogisticRegression(C=C)` does.

    Args:
        rows: The row of each non-zero entry of `x`, in `[0, n)`.
        columns: Its column, in `[0, size)`.
        values: Its value, `x[rows, columns]`.
        labels: The 0/1 label `y_i` of each row `(n,)`.
        size: The number of columns.
        C: The inverse regularization, positive. Defaults to `1.0`.
        max_iter: L-BFGS's most iterations. Defaults to `200`.

    Returns:
        `(w (size,), b, iterations)`.
    """
    labels = _checks.labels(labels).astype("float64")
    check_positive_float("C", C)
    check_positive_int("max_iter", max_iter)
    n = len(labels)
    if len(rows) and not 0 <= np.min(rows) <= np.max(rows) < n:
        raise ValueError(
            "Received an invalid value for argument `rows`, expected row "
            f"indices in [0, {n}), one label per row. Received: rows from "
            f"{np.min(rows)} to {np.max(rows)}"
        )

    def fun(theta):
        w, b = theta[:-1], theta[-1]
        z = np.bincount(rows, values * w[columns], n) + b
        loss = C * np.sum(np.logaddexp(0.0, np.where(labels > 0, -z, z)))
        delta = C * (0.5 * (1.0 + np.tanh(0.5 * z)) - labels)
        grad = np.bincount(columns, values * delta[rows], size) + w
        return loss + 0.5 * (w @ w), np.append(grad, delta.sum())

    theta, iterations = minimize_lbfgs(fun, np.zeros(size + 1), max_iter=max_iter)
    return theta[:-1], float(theta[-1]), iterations


@dataclass(frozen=True)
class NgramFit:
    """What `fit_ngram_branch` fitted.

    Attributes:
        texts: The number of training texts.
        features: The number of distinct n-grams of the model's vocabularies
            that the training texts hold.
        iterations: L-BFGS's iterations.
        max_iter: Its limit: `iterations == max_iter` means it stopped
            there, before its tolerance.
        intercept: The regression's intercept (not part of the model: the
            blend fits its own).
        seconds: The wall time of the fit, vectorising included.
        C: The regression's inverse regularization it was fitted with.
    """

    texts: int
    features: int
    iterations: int
    max_iter: int
    intercept: float
    seconds: float
    C: float


def _check_has_ngram_branch(model: keras.Model) -> None:
    if imdb_model.NGRAM not in {layer.name for layer in model.layers}:
        raise ValueError(
            "Expected a model of `build_model(ngram_logit=True)`, with a layer "
            f"named {imdb_model.NGRAM!r}. Received: model={model.name!r} "
            "without one"
        )


def _vectorizers(model: keras.Model) -> list[keras.layers.Layer]:
    names = {layer.name for layer in model.layers}
    layers = [model.get_layer(imdb_model.TEXT_VECTORIZATION)]
    if imdb_model.BIGRAM_VECTORIZATION in names:
        layers.append(model.get_layer(imdb_model.BIGRAM_VECTORIZATION))
    return layers


def fit_ngram_branch(
    model: keras.Model,
    texts: Sequence[str],
    labels: Sequence[int] | np.ndarray,
    *,
    C: float = imdb_model.DEFAULTS["ngram_c"],  # noqa: N803
    alpha: float = 1.0,
    max_iter: int = 200,
) -> NgramFit:
    """Fits the model's n-gram branch (`NgramLogit`) as NB-LR on `texts`.

    The branch's weights become `r * v`: `r` the Naive-Bayes log-count
    ratios of `texts` (smoothing `alpha`) and `v` the weights of the
    logistic regression on the ratio-scaled binary n-grams
    (`logistic_regression(C=C)`). The classifier's weight of the branch's
    score is left as it is (`blend` sets it).

    Args:
        model: A model from `build_model(ngram_logit=True)`.
        texts: The training texts (never the held-out ones).
        labels: Their 0/1 labels.
        C: The regression's inverse regularization, positive. Defaults to
            `0.1` (`TrainConfig.ngram_c`'s default, chosen by
            cross-validation on the training texts:
            `benchmarks/ngram_cv.py`).
        alpha: The ratios' smoothing count, positive. Defaults to `1.0`.
        max_iter: L-BFGS's most iterations. Defaults to `200`.

    Returns:
        An `NgramFit`.
    """
    start = time.perf_counter()
    _check_has_ngram_branch(model)
    labels = _checks.labels(labels, len(texts))
    check_positive_float("C", C)
    check_positive_float("alpha", alpha)
    check_positive_int("max_iter", max_iter)
    ngram = model.get_layer(imdb_model.NGRAM)
    sizes = ngram.vocabulary_sizes
    pairs = presence(_vectorizers(model), sizes, texts)
    weights, intercept, iterations, features = nb_lr(
        pairs, labels, sizes, ngram.first_id, C=C, alpha=alpha, max_iter=max_iter
    )
    ngram.kernel.assign(weights.astype(ngram.kernel.dtype))
    return NgramFit(
        len(labels),
        features,
        iterations,
        max_iter,
        intercept,
        time.perf_counter() - start,
        float(C),
    )


def nb_lr(
    pairs: Sequence[np.ndarray],
    labels: np.ndarray,
    sizes: Sequence[int],
    first_id: int,
    *,
    C: float = imdb_model.DEFAULTS["ngram_c"],  # noqa: N803
    alpha: float = 1.0,
    max_iter: int = 200,
) -> tuple[np.ndarray, float, int, int]:
    """NB-LR on the distinct n-grams of texts, as `presence` gives them.

    Args:
        pairs: Per vocabulary, the `(pairs, 2)` array of distinct
            `(text, id)` pairs (`presence`); texts are numbered `[0, n)`.
        labels: The 0/1 label of each of the `n` texts.
        sizes: The size of each vocabulary.
        first_id: Ids below it (padding, out-of-vocabulary) count for
            nothing; a non-negative integer.
        C: The regression's inverse regularization, positive. Defaults to
            `0.1`, as `fit_ngram_branch`.
        alpha: The ratios' smoothing count, positive. Defaults to `1.0`.
        max_iter: L-BFGS's most iterations. Defaults to `200`.

    Returns:
        `(weights, intercept, iterations, features)`: one weight per id of
        the vocabularies one after the other (`r * v`, as `NgramLogit`'s
        kernel holds them; a text's score is the sum of the weights of its
        distinct ids, `scores`), the intercept, L-BFGS's iterations and the
        number of distinct n-grams the texts hold.
    """
    pairs = _check_pairs(pairs, sizes)
    check_int_in_range("first_id", first_id, 0)
    labels = _checks.labels(labels)
    last = _last_text(pairs)
    if last >= len(labels):
        raise ValueError(
            "Received an invalid value for argument `labels`, expected one "
            f"label per text of `pairs`, at least {last + 1}. Received: labels "
            f"of length {len(labels)}"
        )
    rows, columns, ratios, offset = [], [], [], 0
    for size, these in zip(sizes, pairs, strict=True):
        these = these[these[:, 1] >= first_id]
        r = naive_bayes_ratios(these, labels, size, alpha)
        r[:first_id] = 0.0
        rows.append(these[:, 0])
        columns.append(these[:, 1] + offset)
        ratios.append(r)
        offset += size
    rows, columns = np.concatenate(rows), np.concatenate(columns)
    ratios = np.concatenate(ratios)
    v, intercept, iterations = logistic_regression(
        rows, columns, ratios[columns], labels, offset, C=C, max_iter=max_iter
    )
    features = int(np.count_nonzero(np.bincount(columns, minlength=offset)))
    return ratios * v, intercept, iterations, features


def _check_pairs(pairs: Sequence[np.ndarray], sizes: Sequence[int]) -> list[np.ndarray]:
    """`pairs` as integer arrays: one `(pairs, 2)` array of `(text, id)` per
    vocabulary (an empty one of any shape: no pair), its ids below that
    vocabulary's size; otherwise a `ValueError`."""
    if len(pairs) != len(sizes):
        raise ValueError(
            "Received an invalid value for argument `pairs`, expected one "
            f"array per vocabulary, {len(sizes)} of them (`sizes`). "
            f"Received: {len(pairs)} arrays"
        )
    checked = []
    for these, size in zip(pairs, sizes, strict=True):
        these = np.asarray(these)
        if these.size == 0:
            these = np.zeros((0, 2), "int64")
        if (
            these.ndim != 2
            or these.shape[1] != 2
            or these.dtype.kind not in "iu"
            or (len(these) and (these.min() < 0 or these[:, 1].max() >= size))
        ):
            raise ValueError(
                "Received an invalid value for argument `pairs`, expected "
                "`(pairs, 2)` integer arrays of non-negative `(text, id)` "
                "pairs, each id below its vocabulary's size. Received: an "
                f"array of shape {these.shape} and dtype {these.dtype} for a "
                f"vocabulary of {size}"
            )
        checked.append(these)
    return checked


def _last_text(pairs: Sequence[np.ndarray]) -> int:
    """The largest text index of checked `pairs`; -1 where they hold none."""
    return max((int(these[:, 0].max()) for these in pairs if len(these)), default=-1)


def scores(
    pairs: Sequence[np.ndarray], weights: np.ndarray, sizes: Sequence[int], n: int
) -> np.ndarray:
    """Each of `n` texts' n-gram score: the sum of `weights` (`nb_lr`'s)
    over its distinct ids; `pairs` as `presence` gives them, `(n,)`."""
    pairs = _check_pairs(pairs, sizes)
    weights = np.asarray(weights)
    if weights.shape != (sum(sizes),):
        raise ValueError(
            "Received an invalid value for argument `weights`, expected one "
            f"weight per id of the vocabularies, shape ({sum(sizes)},). "
            f"Received: weights of shape {weights.shape}"
        )
    check_int_in_range("n", n, _last_text(pairs) + 1)
    total, offset = np.zeros(n), 0
    for size, these in zip(sizes, pairs, strict=True):
        total += np.bincount(these[:, 0], weights[these[:, 1] + offset], n)
        offset += size
    return total


def branch_logits(
    model: keras.Model, texts: Sequence[str], batch_size: int = 128
) -> tuple[np.ndarray, np.ndarray]:
    """The two terms of the classifier's logit, in float64, `(len(texts),)`
    each: the attention branch's (the pooled vector's part, with the bias)
    and the n-gram branch's score (before the classifier's weight of it)."""
    _check_has_ngram_branch(model)
    classifier = model.get_layer(imdb_model.CLASSIFIER)
    features = imdb_model.classifier_inputs(model, texts, batch_size)
    kernel = keras.ops.convert_to_numpy(classifier.kernel).astype("float64")[:, 0]
    bias = float(keras.ops.convert_to_numpy(classifier.bias)[0])
    return features[:, :-1] @ kernel[:-1] + bias, features[:, -1]


@dataclass(frozen=True)
class Blend:
    """The mix `blend` folded into the classifier: the logit is
    `attention * attention_logit + ngrams * ngram_score + bias`.

    Attributes:
        attention: The attention branch's weight.
        ngrams: The n-gram branch's weight.
        bias: Added to the two (the attention branch's own bias included
            in its logit).
        fitted: Whether the mix was fitted on the held-out texts (`False`:
            the plain sum, for too few texts of a class).
    """

    attention: float
    ngrams: float
    bias: float
    fitted: bool = True


def _logistic_newton(
    z: np.ndarray, y: np.ndarray, ridge: float = 0.01, steps: int = 100
) -> np.ndarray:
    """Weights and last the bias of the logistic regression of `y` on the
    columns of `z` (a few features), with the penalty `ridge * |weights|^2 /
    2` (the bias is not penalised): on held-out texts that a branch
    separates, the weights stay finite. Newton's method, each step halved
    until the penalised loss goes down: a full step can overshoot without
    limit where the logits are large and the texts separable."""
    x = np.concatenate([z, np.ones((len(z), 1))], 1)
    penalty = np.full(x.shape[1], float(ridge))
    penalty[-1] = 1e-9
    sign = np.where(y == 1, -1.0, 1.0)

    def loss(theta):
        return np.sum(np.logaddexp(0.0, sign * (x @ theta))) + 0.5 * penalty @ theta**2

    theta = np.zeros(x.shape[1])
    value = loss(theta)
    for _ in range(steps):
        p = 0.5 * (1.0 + np.tanh(0.5 * (x @ theta)))
        gradient = x.T @ (p - y) + penalty * theta
        hessian = (x * (p * (1 - p))[:, None]).T @ x + np.diag(penalty)
        step = np.linalg.solve(hessian, gradient)
        size = 1.0
        while size > 1e-12 and not loss(theta - size * step) < value:
            size *= 0.5
        if size <= 1e-12:  # no step lowers it: the minimum, to float64
            break
        theta = theta - size * step
        value = loss(theta)
    return theta


def blend(
    model: keras.Model,
    texts: Sequence[str],
    labels: Sequence[int] | np.ndarray,
    *,
    intercept: float = 0.0,
    min_per_class: int = 10,
) -> Blend:
    """Mixes the attention and n-gram branches on held-out `texts`, in place.

    A logistic regression of `labels` on the two branches' logits
    (`branch_logits`) gives their weights and a bias, which are folded into
    the classifier: the saved model outputs the calibrated mix. Run it once,
    after `fit_ngram_branch`, on texts neither branch was trained on. With
    fewer than `min_per_class` texts of either class (none at all included)
    there is nothing to fit the mix on: the logit is then the plain sum of
    the attention branch's logit and NB-LR's (its score plus `intercept`).

    Args:
        model: A model from `build_model(ngram_logit=True)`.
        texts: Held-out reviews (never the test split).
        labels: Their 0/1 labels.
        intercept: NB-LR's intercept (`NgramFit.intercept`), for the plain
            sum. Defaults to `0.0`.
        min_per_class: The fewest texts of each class the fit needs.
            Defaults to `10`.

    Returns:
        The `Blend`.
    """
    _check_has_ngram_branch(model)
    labels = _checks.labels(labels, len(texts), allow_empty=True)
    if min(np.sum(labels == 1), np.sum(labels == 0)) >= min_per_class:
        attention, score = branch_logits(model, texts)
        a, b, c = _logistic_newton(np.stack([attention, score], 1), labels)
        mix = Blend(float(a), float(b), float(c))
    else:
        mix = Blend(1.0, 1.0, float(intercept), fitted=False)
    classifier = model.get_layer(imdb_model.CLASSIFIER)
    kernel = keras.ops.convert_to_numpy(classifier.kernel).astype("float64")
    bias = float(keras.ops.convert_to_numpy(classifier.bias)[0])
    kernel[:-1] *= mix.attention
    kernel[-1] = mix.ngrams
    classifier.kernel.assign(kernel.astype(classifier.kernel.dtype))
    new_bias = mix.attention * bias + mix.bias
    classifier.bias.assign(np.array([new_bias], dtype=classifier.bias.dtype))
    return mix
