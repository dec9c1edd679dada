"""calibration: temperature fitting, the calibration error, a calibrated model
that saves and loads, and the reliability diagram."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from keras_selfattn.imdb import calibration
from keras_selfattn.imdb import model as imdb_model
from tests.helpers import png_size

TEXTS = [
    "a great film , i loved it .",
    "boring and far too long .",
    "superb acting , a moving story .",
    "the worst movie i have seen .",
] * 6
LABELS = [1, 0, 1, 0] * 6


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.5], ids=str)
def test_fit_temperature_recovers_a_known_temperature(temperature):
    # Labels drawn from sigmoid(z): calibrated logits. A model that reports
    # z * T is over- (T > 1) or under-confident (T < 1) by exactly T.
    rng = np.random.default_rng(0)
    z = rng.normal(scale=3.0, size=40_000)
    labels = (rng.random(z.shape) < _sigmoid(z)).astype(int)
    fitted = calibration.fit_temperature(z * temperature, labels)
    assert fitted == pytest.approx(temperature, rel=0.04)


@pytest.mark.parametrize(
    "logits, labels, bounds, message",
    [
        ([0.1, 0.2], [1], (0.05, 50.0), "`labels`, expected a non-empty 1-D .* 2 of"),
        ([], [], (0.05, 50.0), "`logits`, expected a non-empty 1-D"),
        ([[0.1], [0.2]], [1, 0], (0.05, 50.0), r"of shape \(2, 1\)"),
        ([0.1, np.nan], [1, 0], (0.05, 50.0), "finite numbers. .*nan at index 1"),
        ([0.1, 0.2], [1, -1], (0.05, 50.0), "0 or 1. Received: the value -1 at"),
        ([0.1, 0.2], [1, 0], (10.0, 0.1), "`bounds`, expected `\\(low, high\\)`"),
        ([0.1, 0.2], [1, 0], (0.0, 10.0), "`bounds`"),
        ([0.1, 0.2], [1, 0], "low", "`bounds`"),
    ],
    ids=[
        "lengths", "empty", "column", "nan", "labels-plus-minus-one",
        "bounds-reversed", "bounds-from-zero", "bounds-not-a-pair",
    ],
)  # fmt: skip
def test_fit_temperature_rejects_bad_input(logits, labels, bounds, message):
    with pytest.raises(ValueError, match=message):
        calibration.fit_temperature(logits, labels, bounds)


def test_expected_calibration_error_by_hand():
    # Four predictions in the 0.8-0.867 bin (confidence 0.8 each, 3 right):
    # |0.75 - 0.8| = 0.05; two in the top bin (confidence 1.0, 1 right):
    # |0.5 - 1.0| = 0.5. ECE = (4 * 0.05 + 2 * 0.5) / 6 = 0.2.
    p = np.array([0.8, 0.8, 0.2, 0.2, 1.0, 0.0])
    labels = np.array([1, 1, 0, 1, 1, 1])
    assert calibration.expected_calibration_error(p, labels) == pytest.approx(0.2)


P, Y = [0.9, 0.8, 0.3, 0.2], [1, 1, 0, 1]


@pytest.mark.parametrize(
    "probabilities, labels, bins, message",
    [
        (P, [[1], [1], [0], [1]], 15, r"`labels`.*Received: labels of shape \(4, 1\)"),
        (P, [1], 15, "`labels`.*4 of them"),
        ([[p] for p in P], Y, 15, "`probabilities`.*shape \\(4, 1\\)"),
        ([5.0, -4.0, 3.0, 0.5], Y, 15, "in \\[0, 1\\]. Received: the value 5.0 at"),
        ([np.nan, 0.9, 0.1, 0.5], Y, 15, "the value nan at index 0"),
        (P, [1, 1, 0, 2], 15, "0 or 1. Received: the value 2 at index 3"),
        ([], [], 15, "`probabilities`, expected a non-empty"),
        (P, Y, 0, "`bins`, expected a positive integer"),
    ],
    ids=[
        "labels-column", "labels-too-few", "probabilities-column", "logits",
        "nan", "label-two", "empty", "no-bins",
    ],
)  # fmt: skip
def test_expected_calibration_error_rejects_bad_input(
    probabilities, labels, bins, message
):
    # Each of these gave a number (0.30 for the column of labels, 3.33 for
    # logits, NaN rows dropped) or crashed deep inside NumPy.
    with pytest.raises(ValueError, match=message):
        calibration.expected_calibration_error(probabilities, labels, bins)
    assert calibration.expected_calibration_error(P, Y) == pytest.approx(0.25)


def test_calibrated_probabilities_have_a_small_error():
    rng = np.random.default_rng(1)
    p = rng.random(50_000)
    labels = (rng.random(p.shape) < p).astype(int)
    assert calibration.expected_calibration_error(p, labels) < 0.01
    overconfident = _sigmoid(4 * np.log(p / (1 - p)))
    assert calibration.expected_calibration_error(overconfident, labels) > 0.1


def test_reliability_diagram_is_a_png(tmp_path):
    rng = np.random.default_rng(2)
    p = rng.random(500)
    labels = (rng.random(500) < p).astype(int)
    path = calibration.reliability_diagram(p, labels, tmp_path / "r.png", title="t")
    width, height = png_size(path)
    assert width > 300 and height > 300


def test_reliability_diagram_writes_the_path_it_is_given(tmp_path):
    # matplotlib would add ".png" to a name without a suffix.
    path = calibration.reliability_diagram([0.2, 0.9], [0, 1], tmp_path / "plot")
    assert path == tmp_path / "plot"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot"]
    assert png_size(path)[0] > 300


@pytest.fixture(scope="module")
def tiny_model():
    import keras

    model = imdb_model.build_model(
        TEXTS, vocab_size=40, bigram_vocab_size=40, max_len=16, embed_dim=8,
        num_heads=2, intermediate_dim=8,
    )  # fmt: skip
    # Large random classifier weights: an over-confident model.
    classifier = model.get_layer(imdb_model.CLASSIFIER)
    classifier.kernel.assign(keras.random.normal(classifier.kernel.shape, seed=3) * 9)
    # Its bias moves the median logit to 0: two texts on each side.
    logits = imdb_model.logits(model, TEXTS[:4])
    bias = np.asarray(classifier.bias) - np.median(logits)
    classifier.bias.assign(bias.astype(classifier.bias.dtype))
    return model


def _overconfident_labels(logits):
    """Labels on the logits' side for five of the six copies of each text,
    on the other for the sixth: a model right 5 times in 6 whose logits say
    far more. The temperature that fits lies inside the search's bounds."""
    labels = (np.asarray(logits) > 0).astype(int)
    labels[:4] = 1 - labels[:4]  # the first copy of each of the 4 texts
    return labels


@pytest.mark.tensorflow_only
def test_calibrate_folds_the_temperature_into_the_classifier(tiny_model, tmp_path):
    before = imdb_model.logits(tiny_model, TEXTS)
    labels = _overconfident_labels(before)
    temperature = calibration.calibrate(tiny_model, TEXTS, labels)
    # An interior optimum, the one `fit_temperature` finds on these logits.
    low, high = 0.05, 50.0
    assert low * 1.01 < temperature < high / 1.01
    assert temperature == pytest.approx(calibration.fit_temperature(before, labels))
    after = imdb_model.logits(tiny_model, TEXTS)
    np.testing.assert_allclose(after, before / temperature, rtol=1e-5, atol=1e-6)
    # The same side of 0.5 for every text: accuracy cannot change.
    np.testing.assert_array_equal(after > 0, before > 0)
    probabilities = imdb_model.predict(tiny_model, TEXTS)
    np.testing.assert_allclose(probabilities, _sigmoid(after), atol=1e-6)
    assert math.isfinite(temperature) and temperature > 0


@pytest.mark.tensorflow_only
@pytest.mark.parametrize(
    "count, labels_of",
    [(8, _overconfident_labels), (24, lambda z: (np.asarray(z) > 0).astype(int))],
    ids=["too-few-of-a-class", "all-on-their-side"],
)
def test_calibrate_leaves_the_model_alone_with_nothing_to_fit(
    tiny_model, count, labels_of
):
    # 8 texts: 4 or fewer of a class, under `min_per_class=10`. Labels on
    # the logits' side for all 24: the NLL falls all the way to T = 0, and a
    # fit would stop at its bound and multiply the logits by 20.
    before = imdb_model.logits(tiny_model, TEXTS)
    labels = labels_of(before)[:count]
    assert calibration.calibrate(tiny_model, TEXTS[:count], labels) == 1.0
    np.testing.assert_array_equal(imdb_model.logits(tiny_model, TEXTS), before)


@pytest.mark.tensorflow_only
def test_calibrate_rejects_labels_that_are_not_one_per_text(tiny_model):
    with pytest.raises(ValueError, match=r"`labels`.*24 of them"):
        calibration.calibrate(tiny_model, TEXTS, LABELS[:5])


@pytest.mark.tensorflow_only
def test_calibrated_model_loads_in_a_fresh_process(
    tiny_model, tmp_path, subprocess_env
):
    calibration.calibrate(tiny_model, TEXTS, LABELS)
    path = tmp_path / "calibrated.keras"
    tiny_model.save(path)
    expected = imdb_model.predict(tiny_model, TEXTS[:4])
    code = (
        "import json, sys, numpy as np, keras, keras_selfattn\n"
        "model = keras.models.load_model(sys.argv[1])\n"
        "texts = np.array(json.loads(sys.argv[2]), dtype=object)\n"
        "print(json.dumps(model.predict(texts, verbose=0)[:, 0].tolist()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path), json.dumps(TEXTS[:4])],
        capture_output=True, text=True, env=subprocess_env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
