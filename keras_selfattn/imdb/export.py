"""A TensorFlow SavedModel of the IMDB model, for TensorFlow Serving.

`export(model, directory)` writes the model through Keras 3's
`Model.export` (which tracks the `TextVectorization` lookup tables and traces
the text standardization into TensorFlow ops), wrapped so that its
`serving_default` signature reads a batch of raw strings and returns, per
string, the positive-class `probability`, the `label` and whether the text
is `readable`:

    serving_default(texts: string (batch,))
      -> {"probability": float32 (batch,), "label": string (batch,),
          "readable": bool (batch,)}

A text with no word the model reads (empty, blank, or only symbols that the
standardization drops, such as `"@@@"`) gets `readable` False and the label
`""`: its probability is the same constant for every such text, not a
verdict, which is why the commands and the server refuse such texts
(`model.readable`). Bytes that are not UTF-8 get `readable` False and the
label `""` as well; their probability is whatever the model makes of the
bytes, not a verdict either (read `readable` before `probability`).

The directory loads with `tf.saved_model.load` or
`keras.layers.TFSMLayer(directory, call_endpoint="serving_default")` in a
process that has never imported `keras_selfattn`. TensorFlow Serving expects
it inside a numbered version folder: export to `models/imdb/1` and serve
`models/imdb`.
"""

from __future__ import annotations

from pathlib import Path

import keras

# The verdict is the model's (one threshold); `label_of` is handed on here.
from keras_selfattn.imdb.model import (
    NEGATIVE,
    POSITIVE,
    THRESHOLD,
    has_words,
    label_of,
    standardization,
)

__all__ = [
    "INPUT",
    "NEGATIVE",
    "POSITIVE",
    "ExportError",
    "export",
    "label_of",
    "serving_model",
]

INPUT = "texts"  # the name of the signature's input


class ExportError(Exception):
    """An export directory that cannot be written; one line for users."""


class _Readable(keras.layers.Layer):
    """`model.has_words`: whether each raw string keeps a word through the
    model's standardization (`standardize`)."""

    def __init__(self, standardize, **kwargs):
        super().__init__(**kwargs)
        if isinstance(standardize, dict):  # from `get_config`
            standardize = keras.saving.deserialize_keras_object(standardize)
        self._text_standardize = standardize

    def call(self, texts):
        return has_words(texts, self._text_standardize)

    def get_config(self):
        standardize = keras.saving.serialize_keras_object(self._text_standardize)
        return {**super().get_config(), "standardize": standardize}

    def compute_output_spec(self, texts):
        return keras.KerasTensor(texts.shape, dtype="bool")


class _Label(keras.layers.Layer):
    """`model.label_of` on a tensor: `"positive"` where the probability is
    above `model.THRESHOLD`, else `"negative"`; `""` where the text is not
    readable."""

    def call(self, probability, readable):
        import tensorflow as tf  # string tensors: TensorFlow only

        label = tf.where(probability > THRESHOLD, POSITIVE, NEGATIVE)
        return tf.where(readable, label, "")

    def compute_output_spec(self, probability, readable):
        return keras.KerasTensor(probability.shape, dtype="string")


def _check_demo_model(model) -> None:
    """Raises `ValueError` unless `model` reads raw strings `(batch,)` and
    outputs probabilities `(batch, 1)`, as the demo's model does."""
    inputs = getattr(model, "inputs", None) or []
    outputs = getattr(model, "outputs", None) or []
    shapes = [(str(x.dtype), tuple(x.shape)) for x in (*inputs, *outputs)]
    if (
        shapes[:1] != [("string", (None,))]
        or len(inputs) != 1
        or ([shape for _, shape in shapes[1:]] != [(None, 1)])
    ):
        raise ValueError(
            "Received an invalid value for argument `model`, expected the "
            "demo's model: raw strings `(batch,)` in, probabilities "
            f"`(batch, 1)` out. Received: model={getattr(model, 'name', model)!r} "
            f"with inputs and outputs (dtype, shape) {shapes}"
        )


def serving_model(model: keras.Model) -> keras.Model:
    """Wraps the demo model to return a probability and a label per text.

    Args:
        model: A model from `keras_selfattn.imdb.model.build_model`, or one
            loaded from its `.keras` file: raw strings `(batch,)` in,
            probabilities `(batch, 1)` out.

    Returns:
        A `keras.Model` sharing `model`'s layers and weights, from raw strings
        `(batch,)` (input named `"texts"`) to a dict with `"probability"`
        (float32 `(batch,)`), `"label"` (string `(batch,)`: `"positive"`,
        `"negative"`, or `""` for a text that is not readable) and
        `"readable"` (bool `(batch,)`: the text keeps a word through the
        standardization).

    Raises:
        ValueError: `model` does not read raw strings `(batch,)` into
            probabilities `(batch, 1)`.
    """
    _check_demo_model(model)
    texts = keras.Input(shape=(), dtype="string", name=INPUT)
    probability = keras.ops.squeeze(model(texts), axis=-1)
    readable = _Readable(standardization(model), name="readable")(texts)
    label = _Label(name="label")(probability, readable)
    outputs = {"probability": probability, "label": label, "readable": readable}
    return keras.Model(texts, outputs, name="imdb_serving")


def export(model: keras.Model, directory: str | Path) -> Path:
    """Writes `model` as a TensorFlow SavedModel with a raw-text signature.

    Args:
        model: The demo model (see `serving_model`).
        directory: The SavedModel directory to create; it must not exist, or
            be empty. For TensorFlow Serving, a numbered version folder such
            as `models/imdb/1`.

    Returns:
        The directory written.

    Raises:
        ExportError: `directory` is a file or a folder that is not empty, or
            it cannot be listed or made (no such parent, a file in its
            path, no permission).
        ValueError: `model` is not the demo's (see `serving_model`);
            nothing is written.

    Example:

    >>> import os, tempfile
    >>> from keras_selfattn.imdb.model import build_model
    >>> model = build_model(["a great film", "a dull film"], vocab_size=100,
    ...                     bigram_vocab_size=0, max_len=16)
    >>> from keras_selfattn.imdb.export import export
    >>> folder = export(model, os.path.join(tempfile.mkdtemp(), "imdb", "1"))
    >>> (folder / "saved_model.pb").is_file()
    True
    """
    import tensorflow as tf

    directory = Path(directory)
    try:
        taken = directory.is_file() or (directory.is_dir() and any(directory.iterdir()))
    except OSError as error:  # a folder this user cannot list
        raise ExportError(
            f"cannot read {directory}: {error.strerror or error}"
        ) from None
    if taken:
        raise ExportError(
            f"{directory} already exists and is not an empty folder; "
            "remove it or export to a new version folder (models/imdb/2)"
        )
    serving = serving_model(model)  # before any folder is made
    try:
        directory.mkdir(parents=True, exist_ok=True)
        serving.export(str(directory), format="tf_saved_model", verbose=False)
    except OSError as error:
        raise ExportError(
            f"cannot write {directory}: {error.strerror or error}"
        ) from None
    except tf.errors.OpError as error:  # TensorFlow's own file errors
        raise ExportError(f"cannot write {directory}: {error.message}") from None
    return directory
