"""tf.distribute for the IMDB demo: strategies, the chief, and who writes what.

`keras-selfattn train --distribute mirrored` trains on all local GPUs (or the
devices given with `--devices`) with `tf.distribute.MirroredStrategy`. The
batch size given on the command line is per replica; the global batch is that
times the number of replicas.

`--distribute multiworker` (`tf.distribute.MultiWorkerMirroredStrategy`, the
cluster read from the standard `TF_CONFIG` environment variable) is blocked
upstream: Keras 3's `fit` fails under that strategy
(tensorflow/tensorflow#72388), so it checks `TF_CONFIG` and then stops with a
one-line error. The rules below are written for it and tested on their own.

In multi-worker training every worker runs the same program and every worker
saves (saving may involve collective operations), but only the chief writes
to the real paths: the others write to private temporary folders, which they
delete. Backups for resuming follow the same rule: the chief's backup folder
is the one every worker restores from, so on several machines it must be on a
shared filesystem (or copied to the same path on each).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import keras
import numpy as np

from keras_selfattn.imdb import model as imdb_model

KINDS = ("none", "mirrored", "multiworker")


class DistributeError(Exception):
    """A user-facing configuration error (printed as one line)."""


def _tf_config() -> dict:
    """The parsed `TF_CONFIG`, checked for a cluster with workers and a task."""
    text = os.environ.get("TF_CONFIG")
    if not text:
        raise DistributeError(
            "--distribute multiworker needs the TF_CONFIG environment variable "
            "(see the README's 'Scaling out' section)"
        )
    try:
        config = json.loads(text)
        workers = config["cluster"]["worker"]
        task_type = config["task"]["type"]
        int(config["task"]["index"])
    except (ValueError, KeyError, TypeError) as error:
        raise DistributeError(
            f"TF_CONFIG is not valid cluster JSON ({type(error).__name__}: {error}); "
            'expected {"cluster": {"worker": ["host:port", ...]}, '
            '"task": {"type": "worker", "index": 0}}'
        ) from None
    if not isinstance(workers, list) or not workers:
        raise DistributeError("TF_CONFIG's cluster.worker must list host:port pairs")
    if task_type not in config["cluster"]:
        raise DistributeError(
            f"TF_CONFIG's task type {task_type!r} is not in its cluster"
        )
    return config


def make_strategy(kind: str, devices: Sequence[str] | None = None):
    """The `tf.distribute.Strategy` for `--distribute KIND`, or None for none.

    `"multiworker"` checks `TF_CONFIG`, then raises `DistributeError`: Keras
    3's `fit` cannot train under `MultiWorkerMirroredStrategy` today
    (tensorflow/tensorflow#72388). The chief and backup rules below are
    ready for it.

    Args:
        kind: One of `"none"`, `"mirrored"` or `"multiworker"`.
        devices: For `"mirrored"`, the devices to mirror on, e.g.
            `["/gpu:0", "/gpu:1"]`. Defaults to all local GPUs (or the CPU).
    """
    import tensorflow as tf

    if kind == "none":
        if devices:
            raise DistributeError("--devices needs --distribute mirrored")
        return None
    if kind == "mirrored":
        return tf.distribute.MirroredStrategy(
            devices=list(devices) if devices else None
        )
    if kind == "multiworker":
        if devices:
            raise DistributeError(
                "--devices is for --distribute mirrored; each worker of "
                "multiworker uses its local GPUs (or CPU)"
            )
        _tf_config()
        raise DistributeError(
            f"multi-worker training is blocked upstream: Keras {keras.__version__}'s "
            "fit() fails under MultiWorkerMirroredStrategy (it averages each "
            "worker's scalar metrics along an axis they do not have; "
            "tensorflow/tensorflow#72388). Use --distribute mirrored on one machine"
        )
    raise DistributeError(
        f"unknown --distribute {kind!r}: expected one of {', '.join(KINDS)}"
    )


def num_replicas(strategy) -> int:
    return 1 if strategy is None else int(strategy.num_replicas_in_sync)


def _task(strategy) -> tuple[str | None, int | None, dict]:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return None, None, {}
    return resolver.task_type, resolver.task_id, resolver.cluster_spec().as_dict()


def is_chief(strategy) -> bool:
    """Whether this process writes the real files (always, outside multi-worker)."""
    task_type, task_id, cluster = _task(strategy)
    if not cluster:
        return True
    if task_type == "chief":
        return True
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


def worker_label(strategy) -> str:
    task_type, task_id, cluster = _task(strategy)
    return f"{task_type}:{task_id}" if cluster else "single process"


def write_path(path: str | os.PathLike, strategy) -> Path:
    """Where this process writes `path`: itself on the chief, else a private
    temporary place beside it that `discard` removes."""
    path = Path(path)
    if is_chief(strategy):
        return path
    task_type, task_id, _ = _task(strategy)
    folder = path.parent / f".{path.name}.{task_type}{task_id}.tmp"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / path.name


def discard(path: Path, strategy) -> None:
    """Removes what a non-chief worker wrote through `write_path`."""
    if not is_chief(strategy):
        shutil.rmtree(path.parent, ignore_errors=True)


class ChiefBackupAndRestore(keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore` that follows the multi-worker rules.

    Every worker restores from `backup_dir` (the chief's backup); only the
    chief writes there. Other workers write their backups to a private folder
    inside it and delete that folder when training ends. Outside multi-worker
    training this is plain `BackupAndRestore`.

    Args:
        backup_dir: String, the folder of the chief's backup.
        strategy: The `tf.distribute.Strategy` training runs under, or None.
    """

    def __init__(self, backup_dir: str, strategy=None):
        super().__init__(backup_dir)
        self.strategy = strategy
        self._chief = is_chief(strategy)
        self._restore_paths = (self._weights_path, self._training_metadata_path)
        if not self._chief:
            private = write_path(Path(backup_dir) / "worker", strategy).parent
            self._private_dir = str(private)

    def _save_model(self):
        if self._chief:
            return super()._save_model()
        chief = (self.backup_dir, *self._restore_paths)
        self.backup_dir = self._private_dir
        self._weights_path = os.path.join(self._private_dir, "latest.weights.h5")
        self._training_metadata_path = os.path.join(
            self._private_dir, "training_metadata.json"
        )
        try:
            super()._save_model()
        finally:
            self.backup_dir, self._weights_path, self._training_metadata_path = chief

    def on_train_end(self, logs=None):
        if self._chief:
            super().on_train_end(logs)
        else:
            shutil.rmtree(self._private_dir, ignore_errors=True)


# ---------------------------------------------------------------------------
# Training under a strategy

# The layers of the IMDB model (`keras_selfattn.imdb.model.build_model`) whose
# outputs are the token ids: everything before them is string preprocessing.
_ID_LAYERS = (imdb_model.CLIP, imdb_model.BIGRAM_CLIP)


class Split(NamedTuple):
    """The IMDB model cut where strings have become token ids.

    Both halves share the layers (and so the weights) of the whole model,
    which is what gets saved: it still takes raw strings.
    """

    preprocess: keras.Model
    trainable: keras.Model


def split_preprocessing(model: keras.Model) -> Split:
    """Cuts `model` after its text preprocessing; call in `strategy.scope()`.

    Under a `tf.distribute` strategy, Keras cannot take string batches in
    `fit` (it averages a first batch across replicas to build the model), and
    a string lookup belongs in the input pipeline anyway. So training feeds
    the trainable half with token ids made by the preprocessing half in
    `tf.data`, and the saved model stays the whole, raw-text one.
    """
    names = [n for n in _ID_LAYERS if n in {layer.name for layer in model.layers}]
    if not names:
        raise ValueError(
            "Expected the IMDB model of keras_selfattn.imdb.model.build_model, "
            f"with a layer named {_ID_LAYERS[0]!r}. Received: model={model.name!r}"
        )
    ids = [model.get_layer(name).output for name in names]
    trainable = keras.Model(ids, model.outputs, name=f"{model.name}_ids")
    trainable.compile(optimizer=model.optimizer, loss=model.loss, metrics=["accuracy"])
    return Split(keras.Model(model.inputs, ids, name="preprocess"), trainable)


def eval_batch_size(n: int, replicas: int, wanted: int = 128) -> int:
    """A batch size for evaluating `n` reviews whose first batch splits evenly
    over the replicas (Keras builds the model from a first batch averaged
    across replicas, which fails on uneven shares)."""
    if n < replicas:
        raise DistributeError(
            f"{n} reviews cannot be shared by {replicas} replicas; "
            "evaluate on more reviews or on fewer devices"
        )
    size = min(wanted, n)
    return size - size % replicas


def _id_dataset(split: Split, batches, full_batches_only: bool = False):
    """A tf.data pipeline of (token ids, labels) from a `ReviewBatches`.

    With `full_batches_only` (training), the few short batches are skipped,
    so every step splits evenly over the replicas.
    """
    import tensorflow as tf

    def generate():
        for index in range(len(batches)):
            texts, labels = batches[index]
            if not full_batches_only or len(labels) == batches.batch_size:
                yield texts, labels
        batches.on_epoch_end()

    dataset = tf.data.Dataset.from_generator(
        generate,
        output_signature=(
            tf.TensorSpec((None,), tf.string),
            tf.TensorSpec((None,), tf.float32),
        ),
    )

    def to_ids(texts, labels):
        ids = split.preprocess(texts)
        return (tuple(ids) if isinstance(ids, (list, tuple)) else ids), labels

    dataset = dataset.map(to_ids).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    # Every worker reads the same seeded batches and keeps its share of each.
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    return dataset.with_options(options)


def fit(
    split: Split, train_batches, val_batches, epochs, callbacks, verbose
) -> keras.callbacks.History:
    """`fit` of the trainable half on token ids (see `split_preprocessing`)."""
    return split.trainable.fit(
        _id_dataset(split, train_batches, full_batches_only=True),
        validation_data=None
        if val_batches is None
        else _id_dataset(split, val_batches),
        epochs=epochs,
        callbacks=list(callbacks),
        verbose=verbose,
    )


def accuracy(split: Split, batches) -> float:
    """Test accuracy, computed by all workers together."""
    result = split.trainable.evaluate(
        _id_dataset(split, batches), return_dict=True, verbose=0
    )
    return float(result["accuracy"])


def fingerprint(model: keras.Model) -> float:
    """The sum of |w| over all weights: equal on workers that agree."""
    return float(sum(np.abs(w).astype("float64").sum() for w in model.get_weights()))
