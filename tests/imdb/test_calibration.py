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


def test_fit_temperature_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="`logits`"):
        calibration.fit_temperature([0.1, 0.2], [1])


def test_expected_calibration_error_by_hand():
    # Four predictions in the 0.8-0.867 bin (confidence 0.8 each, 3 right):
    # |0.75 - 0.8| = 0.05; two in the top bin (confidence 1.0, 1 right):
    # |0.5 - 1.0| = 0.5. ECE = (4 * 0.05 + 2 * 0.5) / 6 = 0.2.
    p = np.array([0.8, 0.8, 0.2, 0.2, 1.0, 0.0])
    labels = np.array([1, 1, 0, 1, 1, 1])
    assert calibration.expected_calibration_error(p, labels) == pytest.approx(0.2)


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
    return model


@pytest.mark.tensorflow_only
def test_calibrate_folds_the_temperature_into_the_classifier(tiny_model, tmp_path):
    before = imdb_model.logits(tiny_model, TEXTS)
    temperature = calibration.calibrate(tiny_model, TEXTS, LABELS)
    after = imdb_model.logits(tiny_model, TEXTS)
    np.testing.assert_allclose(after, before / temperature, rtol=1e-5, atol=1e-6)
    # The same side of 0.5 for every text: accuracy cannot change.
    np.testing.assert_array_equal(after > 0, before > 0)
    probabilities = imdb_model.predict(tiny_model, TEXTS)
    np.testing.assert_allclose(probabilities, _sigmoid(after), atol=1e-6)
    assert math.isfinite(temperature) and temperature > 0


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
