"""`keras-selfattn export`: a SavedModel that reads raw text without this package."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from keras_selfattn.imdb import cli, export
from keras_selfattn.imdb.model import label_of, load, readable
from tests.helpers import DEMO_V0_1, needs_demo_v0_1
from tests.imdb.serving import NEGATIVE, POSITIVE, run_python

pytestmark = pytest.mark.tensorflow_only

TEXTS = [
    POSITIVE,
    NEGATIVE,
    "GREAT!<br /><br />loved it",  # tags, capitals, punctuation: standardized
    "a review with words the model never saw: zebra quokka",
    " ".join(["boring"] * 50),  # longer than max_len: clipped
    "\u00c9 \u00e9\u2026",  # folded to ASCII ("e e ..."): it has words
    "",  # the last three have no word the model reads: no verdict
    "   ",
    "@@@ ###",
]
UNREADABLE = 3

# Run in a fresh process that must not import keras_selfattn: importing it
# raises, so the SavedModel has to stand on TensorFlow alone.
FRESH = """
import json, sys
sys.modules["keras_selfattn"] = None  # `import keras_selfattn` now fails
import keras, tensorflow as tf
directory, texts = sys.argv[1], json.loads(sys.argv[2])
signature = tf.saved_model.load(directory).signatures["serving_default"]
out = signature(tf.constant(texts))  # as the issue calls it
layer = keras.layers.TFSMLayer(directory, call_endpoint="serving_default")
via_layer = layer(tf.constant(texts))
print(json.dumps({
    "inputs": {k: [v.dtype.name, v.shape.as_list()]
               for k, v in signature.structured_input_signature[1].items()},
    "probability": out["probability"].numpy().tolist(),
    "label": [v.decode() for v in out["label"].numpy()],
    "readable": out["readable"].numpy().tolist(),
    "layer_probability": via_layer["probability"].numpy().tolist(),
    "layer_label": [v.decode() for v in via_layer["label"].numpy()],
    "ours": sorted(m for m in sys.modules if m and m.startswith("keras_selfattn.")),
}))
"""


@pytest.fixture(scope="module")
def exported(tiny_model, tmp_path_factory):
    directory = tmp_path_factory.mktemp("export") / "imdb" / "1"
    assert cli.main(["export", str(tiny_model), str(directory)]) == 0
    return directory


def test_export_writes_a_saved_model(exported, capsys):
    assert (exported / "saved_model.pb").is_file()
    assert (exported / "variables").is_dir()


def test_saved_model_in_a_fresh_process_matches_the_keras_model(
    tiny_model, exported, subprocess_env
):
    expected = load(tiny_model).predict(np.array(TEXTS, dtype=object), verbose=0)
    expected = expected[:, 0]
    args = ["-c", FRESH, str(exported), json.dumps(TEXTS)]
    result = run_python(args, subprocess_env)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["inputs"] == {"texts": ["string", [None]]}
    np.testing.assert_allclose(got["probability"], expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["layer_probability"], expected, rtol=0, atol=1e-6)
    labels = [label_of(p) for p in expected[:-UNREADABLE]] + [""] * UNREADABLE
    assert got["label"] == got["layer_label"] == labels
    assert got["readable"] == readable(TEXTS)
    assert got["readable"] == [True] * (len(TEXTS) - UNREADABLE) + [False] * 3
    assert labels[:2] == ["positive", "negative"]  # the tiny model learned
    assert got["ours"] == []


def test_bytes_that_are_not_utf8_get_no_verdict(tiny_model):
    # The standardization keeps invalid bytes as a word: a TF Serving caller
    # got a probability and a label for them (the CLI and server refuse
    # such text before the model).
    import tensorflow as tf

    serving = export.serving_model(load(tiny_model))
    out = serving(tf.constant([b"\xff\xfe", b"great \xff", b"great", "caf\u00e9"]))
    assert out["readable"].numpy().tolist() == [False, False, True, True]
    assert out["label"].numpy().tolist()[:2] == [b"", b""]


@needs_demo_v0_1
def test_the_export_reads_with_its_models_own_standardization(tmp_path):
    import tensorflow as tf

    # A 0.1 model drops accented letters: "\u00c9 \u00e9" has no word for it.
    model = load(DEMO_V0_1)
    serving = export.serving_model(model)
    config = serving.get_layer("readable").get_config()
    assert config["standardize"]["config"] == "keras_selfattn>standardize"
    directory = tmp_path / "old" / "1"
    assert cli.main(["export", str(DEMO_V0_1), str(directory)]) == 0
    signature = tf.saved_model.load(str(directory)).signatures["serving_default"]
    out = signature(tf.constant(["\u00c9 \u00e9", "great"]))
    assert out["readable"].numpy().tolist() == [False, True]
    assert out["label"].numpy()[0] == b""


def test_export_refuses_a_folder_that_is_not_empty(tiny_model, exported, capsys):
    assert cli.main(["export", str(tiny_model), str(exported)]) == 2
    err = capsys.readouterr().err.strip()
    assert "already exists" in err and len(err.splitlines()) == 1


def test_export_to_a_folder_that_cannot_be_made_is_one_line(
    tiny_model, tmp_path, capsys
):
    (tmp_path / "file.txt").write_text("a file, not a folder")
    args = ["export", str(tiny_model), str(tmp_path / "file.txt" / "1")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot write" in err and len(err.splitlines()) == 1, err


def test_a_folder_that_cannot_be_listed_is_one_line(
    tiny_model, tmp_path, capsys, monkeypatch
):
    # As root every folder can be listed: `iterdir` stands in for one that
    # cannot (it was a PermissionError traceback, exit 1).
    folder = tmp_path / "locked"
    folder.mkdir()
    real = Path.iterdir

    def iterdir(path):
        if path == folder:
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    assert cli.main(["export", str(tiny_model), str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"cannot read {folder}: Permission denied" in err
    assert len(err.splitlines()) == 1, err


def test_a_tensorflow_write_error_is_an_export_error(tiny_model, tmp_path, monkeypatch):
    # TensorFlow's file errors (no permission, a full disk) are no OSError.
    import keras
    import tensorflow as tf

    from keras_selfattn.imdb import export as imdb_export

    def refuse(*args, **kwargs):
        raise tf.errors.PermissionDeniedError(None, None, "out/variables; denied")

    model = load(tiny_model)
    monkeypatch.setattr(keras.Model, "export", refuse)
    with pytest.raises(
        imdb_export.ExportError, match=r"^cannot write .*out: out/variables; denied$"
    ):
        imdb_export.export(model, tmp_path / "out")


def test_a_model_that_is_not_the_demos_is_refused_before_writing(tmp_path):
    import keras

    from keras_selfattn.imdb import export as imdb_export

    inputs = keras.Input((3,))
    other = keras.Model(inputs, keras.layers.Dense(1)(inputs), name="other")
    with pytest.raises(
        ValueError,
        match=r"expected the demo's model: raw strings `\(batch,\)` in, "
        r"probabilities `\(batch, 1\)` out. Received: model='other' with inputs "
        r"and outputs \(dtype, shape\) \[\('float32', \(None, 3\)\), "
        r"\('float32', \(None, 1\)\)\]",
    ):
        imdb_export.export(other, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_of_a_missing_model_is_one_line(tmp_path, capsys):
    args = ["export", str(tmp_path / "none.keras"), str(tmp_path / "out")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "model file not found" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
