"""Honest probabilities: temperature scaling and the calibration error.

A network trained with cross-entropy is usually over-confident: its 0.99 is
right less often than 99 times in 100. Temperature scaling (Guo et al., 2017,
"On Calibration of Modern Neural Networks") divides the classifier's logit by
one number T, fitted on held-out reviews to minimize their negative
log-likelihood. It never changes which side of 0.5 a probability falls on, so
accuracy stays exactly the same. `calibrate` folds 1/T into the classifier's
kernel and bias, so the saved model (and `predict`, `explain`, a plain
`keras.models.load_model`) gives calibrated probabilities with no extra layer.

`expected_calibration_error` measures the result (15 equal-width bins of
confidence, as Guo et al.), `reliability_diagram` draws it and `evaluate`
gives it with the accuracy on labelled reviews (`keras-selfattn evaluate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import keras
import numpy as np

from keras_selfattn._validation import check_positive_int
from keras_selfattn.imdb import _checks
from keras_selfattn.imdb import model as imdb_model

__all__ = [
    "Evaluation",
    "calibrate",
    "evaluate",
    "expected_calibration_error",
    "fit_temperature",
    "reliability_diagram",
]

BINS = 15


def _nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    """Mean binary cross-entropy of sigmoid(logits / temperature)."""
    z = logits / temperature
    # log(1 + exp(-|z|)) + max(z, 0) - y z, stable for any z.
    return float(np.mean(np.logaddexp(0.0, z) - labels * z))


def fit_temperature(
    logits: Sequence[float] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
    bounds: tuple[float, float] = (0.05, 50.0),
) -> float:
    """The temperature T that minimizes the NLL of sigmoid(logits / T).

    The NLL is smooth and unimodal in log T, so a golden-section search over
    log T finds the minimum to about 1e-6 relative precision. Where the
    minimum lies beyond `bounds`, the nearer bound comes back: logits that
    put every text on its side have their NLL fall all the way to T = 0
    (`calibrate` does not fit those).

    Args:
        logits: The classifier's logits (before the sigmoid), `(n,)`,
            finite; float64 is best.
        labels: The 0/1 labels, `(n,)`.
        bounds: The range searched, `(low, high)` with `0 < low < high`.
            Defaults to `(0.05, 50.0)`.

    Returns:
        The temperature, a positive float (1 means "leave as it is").
    """
    logits = _checks.floats(logits)
    labels = _checks.labels(labels, len(logits)).astype("float64")
    try:
        low, high = (float(b) for b in bounds)
    except (TypeError, ValueError):
        low = high = math.nan
    if not 0.0 < low < high < math.inf:
        raise ValueError(
            "Received an invalid value for argument `bounds`, expected "
            f"`(low, high)` with 0 < low < high. Received: bounds={bounds!r}"
        )
    low, high = math.log(low), math.log(high)
    ratio = (math.sqrt(5.0) - 1.0) / 2.0

    def loss(log_t):
        return _nll(logits, labels, math.exp(log_t))

    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = loss(c), loss(d)
    while b - a > 1e-7:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = loss(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = loss(d)
    return math.exp((a + b) / 2.0)


def _confidence_bins(probabilities, labels, bins: int):
    """Per bin of confidence: (count, mean confidence, accuracy)."""
    check_positive_int("bins", bins)
    p = _checks.floats(probabilities, argument="probabilities", unit_interval=True)
    y = _checks.labels(labels, len(p))
    predicted = (p > imdb_model.THRESHOLD).astype(int)
    confidence = np.where(predicted == 1, p, 1.0 - p)  # in [0.5, 1]
    correct = (predicted == y).astype("float64")
    # Bins of [0, 1] as Guo et al.; a binary confidence fills the upper half.
    index = np.minimum((confidence * bins).astype(int), bins - 1)
    rows = []
    for b in range(bins):
        chosen = index == b
        count = int(chosen.sum())
        if count:
            rows.append((count, confidence[chosen].mean(), correct[chosen].mean()))
        else:
            rows.append((0, (b + 0.5) / bins, float("nan")))
    return rows


def expected_calibration_error(
    probabilities: Sequence[float] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
    bins: int = BINS,
) -> float:
    """The expected calibration error of positive-class probabilities.

    The confidence of a prediction is the probability of the class it
    predicts. Predictions are put in `bins` equal-width bins of confidence;
    ECE is the average, weighted by bin size, of |accuracy - confidence|.

    Args:
        probabilities: Positive-class probabilities in [0, 1], `(n,)`.
        labels: The 0/1 labels, `(n,)`.
        bins: The number of bins. Defaults to `15`.

    Returns:
        The ECE, in [0, 1].

    Raises:
        ValueError: For arrays of other shapes or lengths, a probability
            outside [0, 1] or NaN, a label other than 0 and 1.

    Example:

    Two predictions at a confidence of 0.9, one of them wrong: the bin's
    accuracy is 0.5, so the error is 0.4.

    >>> from keras_selfattn.imdb.calibration import expected_calibration_error
    >>> round(expected_calibration_error([0.9, 0.1], [1, 1]), 6)
    0.4
    """
    rows = _confidence_bins(probabilities, labels, bins)
    total = sum(count for count, _, _ in rows)
    return float(
        sum(count * abs(acc - conf) for count, conf, acc in rows if count) / total
    )


def reliability_diagram(
    probabilities: Sequence[float] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
    path: str | Path,
    *,
    bins: int = BINS,
    title: str = "",
) -> Path:
    """Draws accuracy against confidence per bin, and saves it as a PNG.

    Args:
        probabilities: Positive-class probabilities in [0, 1], `(n,)`.
        labels: The 0/1 labels, `(n,)`.
        path: The PNG file to write.
        bins: The number of bins. Defaults to `15`.
        title: A first title line. Defaults to `""`.

    Returns:
        The path written.
    """
    from matplotlib.figure import Figure

    rows = _confidence_bins(probabilities, labels, bins)
    ece = expected_calibration_error(probabilities, labels, bins)
    fig = Figure(figsize=(5.5, 5.5), dpi=110)
    ax = fig.add_subplot()
    width = 1.0 / bins
    lefts = np.arange(bins) * width
    accuracy = [acc if count else 0.0 for count, _, acc in rows]
    ax.bar(lefts, accuracy, width=width, align="edge", color="#4c72b0",
           edgecolor="white", label="accuracy")  # fmt: skip
    gaps = [(conf - acc) if count else 0.0 for count, conf, acc in rows]
    ax.bar(lefts, gaps, bottom=accuracy, width=width, align="edge",
           color="#dd8452", alpha=0.6, label="gap to confidence")  # fmt: skip
    ax.plot([0, 1], [0, 1], color="gray", linestyle="--", label="perfect")
    for left, (count, _, _) in zip(lefts, rows, strict=True):
        if count:
            ax.text(left + width / 2, 0.02, str(count), rotation=90,
                    ha="center", va="bottom", fontsize=6, color="white")  # fmt: skip
    ax.set_xlim(0.45, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel("confidence (probability of the predicted class)")
    ax.set_ylabel("accuracy")
    heading = f"{title}\n" if title else ""
    ax.set_title(
        f"{heading}{len(np.asarray(labels))} reviews, {bins} bins: ECE {ece:.4f}",
        fontsize=9,
    )
    ax.legend(loc="upper left", fontsize=8)
    path = Path(path)
    fig.savefig(path, format="png", bbox_inches="tight")  # no ".png" added
    return path


def calibrate(
    model: keras.Model,
    texts: Sequence[str],
    labels: Sequence[int] | np.ndarray,
    *,
    min_per_class: int = 10,
) -> float:
    """Fits a temperature on `texts` and folds it into the classifier.

    After this, `model` outputs sigmoid(logit / T) for every input: the
    classifier's kernel and bias are divided by T. Predicted labels do not
    change. With fewer than `min_per_class` texts of either class (none at
    all included), or logits
    that put every text on its side (their NLL falls all the way to T = 0,
    so the fit would only sharpen the model without limit), there is
    nothing to fit: the model is left as it is and 1.0 comes back.

    Args:
        model: A model from `keras_selfattn.imdb.model.build_model`.
        texts: Held-out reviews (never the test split).
        labels: Their 0/1 labels.
        min_per_class: The fewest texts of each class the fit needs.
            Defaults to `10`.

    Returns:
        The temperature T; exactly 1.0 when the model was left as it is.
    """
    labels = _checks.labels(labels, len(texts), allow_empty=True)
    check_positive_int("min_per_class", min_per_class)
    if min(np.sum(labels == 1), np.sum(labels == 0)) < min_per_class:
        return 1.0
    logits = imdb_model.logits(model, texts)
    if np.all((logits > 0) == (labels == 1)):
        return 1.0
    temperature = fit_temperature(logits, labels)
    classifier = model.get_layer(imdb_model.CLASSIFIER)
    for weight in (classifier.kernel, classifier.bias):
        value = keras.ops.convert_to_numpy(weight).astype("float64")
        weight.assign((value / temperature).astype(weight.dtype))
    return temperature


@dataclass(frozen=True)
class Evaluation:
    """How right and how honest a model is on labelled reviews.

    Attributes:
        probabilities: `(n,)` positive-class probabilities.
        labels: `(n,)` their 0/1 labels.
        accuracy: The fraction of verdicts that are the labels
            (`model.accuracy`).
        ece: The expected calibration error (`expected_calibration_error`).
    """

    probabilities: np.ndarray
    labels: np.ndarray
    accuracy: float
    ece: float


def evaluate(
    model: keras.Model,
    texts: Sequence[str],
    labels: Sequence[int] | np.ndarray,
    batch_size: int = 128,
) -> Evaluation:
    """The accuracy and calibration error of `model` on reviews.

    Args:
        model: A model from `keras_selfattn.imdb.model.build_model` (or
            loaded from its file).
        texts: Review strings.
        labels: Their 0/1 labels.
        batch_size: Reviews per prediction batch. Defaults to `128`.

    Returns:
        An `Evaluation`.

    Example:

    >>> from keras_selfattn.imdb.model import build_model
    >>> model = build_model(["a great film", "a dull film"], vocab_size=100,
    ...                     bigram_vocab_size=0, max_len=16)
    >>> from keras_selfattn.imdb.calibration import evaluate
    >>> evaluation = evaluate(model, ["A great film!", "Dull."], [1, 0])
    >>> evaluation.probabilities.shape, 0.0 <= evaluation.ece <= 1.0
    ((2,), True)
    """
    probabilities = imdb_model.predict(model, texts, batch_size)
    labels = np.asarray(labels)
    return Evaluation(
        probabilities,
        labels,
        imdb_model.accuracy(probabilities, labels),
        expected_calibration_error(probabilities, labels),
    )
