"""Distributed training of the IMDB demo: strategies, the chief, checkpoints,
the input of token ids and the training loop, all in this one module.

`keras-selfattn train --distribute mirrored` trains on all local GPUs (or the
devices given with `--devices`) with `tf.distribute.MirroredStrategy`;
`--distribute multiworker` trains on the machines listed in the standard
`TF_CONFIG` environment variable with
`tf.distribute.MultiWorkerMirroredStrategy`. Both train with this module's own
loop, `DistributedLoop` (Keras 3's `fit` fails under the multi-worker
strategy, tensorflow/tensorflow#72388, keras-team/keras#20585, and one loop
for both strategies keeps them the same code). The batch size given on the
command line is per replica; the global batch is that times the number of
replicas.

In multi-worker training every worker runs the same program and every worker
saves (saving may involve collective operations), but only the chief writes
to the real paths: the others write to private temporary folders, which they
delete. Checkpoints follow the same rule: the chief's checkpoint folder is the
one every worker restores from, so on several machines it must be on a shared
filesystem (or copied to the same path on each).

A worker that dies (killed, or its machine lost) stops the others: a
collective operation that waits for it fails, at the latest after
`COLLECTIVE_TIMEOUT` seconds, and they stop with a `WorkerLostError` that says
how to resume.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import keras
import numpy as np

from keras_selfattn.imdb import model as imdb_model
from keras_selfattn.imdb._errors import first_line

KINDS = ("none", "mirrored", "multiworker")

# How long a collective operation (an all-reduce of the gradients, say) waits
# for the other workers before it fails, in seconds; the environment variable
# of that name overrides it. Long enough for a slow worker to catch up (the
# first one waits while the others load the data), short enough that a lost
# worker stops the others within minutes even where TensorFlow does not
# notice the loss sooner (it usually does, within seconds).
COLLECTIVE_TIMEOUT = 300.0
COLLECTIVE_TIMEOUT_VARIABLE = "KERAS_SELFATTN_COLLECTIVE_TIMEOUT"


class DistributeError(Exception):
    """A user-facing configuration error (printed as one line)."""


class WorkerLostError(DistributeError):
    """Another worker stopped answering during multi-worker training."""


def collective_timeout() -> float:
    """`COLLECTIVE_TIMEOUT`, or the seconds in its environment variable."""
    text = os.environ.get(COLLECTIVE_TIMEOUT_VARIABLE)
    if text is None:
        return COLLECTIVE_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < math.inf:
        raise DistributeError(
            f"{COLLECTIVE_TIMEOUT_VARIABLE} must be a positive number of "
            f"seconds, got {text!r}"
        )
    return seconds


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
        index = config["task"]["index"]
        if not isinstance(task_type, str):
            raise TypeError(f"task.type is {task_type!r}, not a string")
        if isinstance(index, bool):  # int(True) is 1
            raise TypeError(f"task.index is {index!r}, not an integer")
        index = int(index)
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
    tasks = config["cluster"][task_type]
    if isinstance(tasks, list) and not 0 <= index < len(tasks):
        raise DistributeError(
            f"TF_CONFIG's task index {index} is not one of its cluster's "
            f"{len(tasks)} {task_type!r} tasks (0 to {len(tasks) - 1})"
        )
    return config


def make_strategy(kind: str, devices: Sequence[str] | None = None):
    """The `tf.distribute.Strategy` for `--distribute KIND`, or None for none.

    Args:
        kind: One of `"none"`, `"mirrored"` or `"multiworker"`.
        devices: For `"mirrored"`, the devices to mirror on, e.g.
            `["/gpu:0", "/gpu:1"]`. Defaults to all local GPUs (or the CPU).

    Returns:
        `None`, a `MirroredStrategy`, or a `MultiWorkerMirroredStrategy` on
        the cluster of `TF_CONFIG` whose collective operations give up after
        `COLLECTIVE_TIMEOUT` seconds. The multi-worker strategy must be
        made before TensorFlow runs anything else: it starts this worker's
        server and waits until every worker of the cluster has started.

    Raises:
        DistributeError: An unknown kind, `devices` without `"mirrored"` or
            naming a device this process does not have (or one twice), or no
            valid `TF_CONFIG` for `"multiworker"`.
    """
    import tensorflow as tf

    if kind == "none":
        if devices:
            raise DistributeError("--devices needs --distribute mirrored")
        return None
    if kind == "mirrored":
        return tf.distribute.MirroredStrategy(
            devices=_local_devices(devices) if devices else None
        )
    if kind == "multiworker":
        if devices:
            raise DistributeError(
                "--devices is for --distribute mirrored; each worker of "
                "multiworker uses its local GPUs (or CPU)"
            )
        _tf_config()
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=collective_timeout()
        )
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    raise DistributeError(
        f"unknown --distribute {kind!r}: expected one of {', '.join(KINDS)}"
    )


def _local_devices(devices: Sequence[str]) -> list[str]:
    """`devices`, checked: names of this process's devices, each named once.

    `MirroredStrategy` would wait forever for two devices that do not exist,
    and train on the CPU in place of one.
    """
    import tensorflow as tf

    have = {}
    for device in tf.config.list_logical_devices():
        spec = tf.DeviceSpec.from_string(device.name)
        have[(spec.device_type, spec.device_index)] = device.name
    seen = set()
    for name in devices:
        try:
            spec = tf.DeviceSpec.from_string(name)
        except (ValueError, TypeError, AttributeError):
            spec = None
        local = spec is not None and (
            spec.job in (None, "localhost")
            and spec.replica in (None, 0)
            and spec.task in (None, 0)
        )
        if not local or spec.device_type is None:
            raise DistributeError(
                f"--devices: {name!r} is not the name of a device of this "
                "process, such as /gpu:0 or /cpu:0"
            )
        key = (spec.device_type.upper(), spec.device_index or 0)
        if key not in have:
            raise DistributeError(
                f"--devices: {name} is not a device of this machine (it has "
                f"{', '.join(sorted(have.values()))})"
            )
        if key in seen:
            raise DistributeError(f"--devices names {have[key]} twice")
        seen.add(key)
    return list(devices)


# The lines of a TensorFlow error that say where it happened, not what.
_WHERE = ("Graph execution error", "Detected at node", "File ", "[[")


@contextlib.contextmanager
def stop_on_lost_worker(kind: str):
    """Turns the errors of a multi-worker run that lost a worker into one
    `WorkerLostError`, which says how to resume.

    A worker that dies makes the collective operations of the others fail:
    at once where TensorFlow notices the lost connection, at the latest after
    `collective_timeout()` seconds.

    Args:
        kind: The `--distribute` kind; only `"multiworker"` turns errors.
    """
    import tensorflow as tf

    lost = (
        tf.errors.UnavailableError,
        tf.errors.DeadlineExceededError,
        tf.errors.CancelledError,
        tf.errors.AbortedError,
    )
    try:
        yield
    except lost as error:
        if kind != "multiworker":
            raise
        reason = first_line(error, skip=_WHERE, typed=True)[:300]
        raise WorkerLostError(
            f"a worker was lost ({reason}); run the same command on every "
            "worker again to resume after the last finished epoch"
        ) from None


def num_replicas(strategy) -> int:
    return 1 if strategy is None else int(strategy.num_replicas_in_sync)


class Plan(NamedTuple):
    """How a run's training reviews are batched.

    Attributes:
        replicas: The replicas training together (1 on one device).
        global_batch: Reviews per training step, over all replicas.
        steps_per_epoch: Training steps per epoch.
        description: A line saying how the run is distributed, or `None` on
            one device.
    """

    replicas: int
    global_batch: int
    steps_per_epoch: int
    description: str | None


def plan(strategy, batch_size: int, n_train: int) -> Plan:
    """Batches `n_train` reviews, `batch_size` per replica of `strategy`.

    On one device the last batch of an epoch may be short; under a strategy
    every step takes a full global batch.

    Args:
        strategy: The `tf.distribute.Strategy`, or `None` for one device.
        batch_size: Reviews per replica and step.
        n_train: The training reviews.

    Returns:
        A `Plan`.

    Raises:
        DistributeError: The reviews do not fill one global batch.
    """
    replicas = num_replicas(strategy)
    global_batch = batch_size * replicas
    if strategy is None:
        return Plan(1, global_batch, math.ceil(n_train / global_batch), None)
    steps = n_train // global_batch  # full global batches only
    if not steps:
        raise DistributeError(
            f"{n_train} training reviews do not fill one global batch of "
            f"{global_batch}; use a smaller --batch-size or more reviews"
        )
    description = (
        f"({worker_label(strategy)}); replicas: {replicas}, per-replica batch: "
        f"{batch_size}, global batch: {global_batch}"
    )
    return Plan(replicas, global_batch, steps, description)


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


def save(model: keras.Model, path: str | os.PathLike, strategy) -> None:
    """Saves `model` to `path` on the chief; every worker saves (saving may
    involve collective operations), the others to a place they delete."""
    written = write_path(path, strategy)
    model.save(written)
    discard(written, strategy)


def _built_optimizer(model: keras.Model, strategy):
    """`model`'s optimizer, built (in `strategy`'s scope) if it is not yet,
    so that its variables exist before they are restored or updated."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        raise ValueError(
            "Received an invalid value for argument `model`, expected a "
            f"compiled model (with an optimizer). Received: model={model.name!r}, "
            "not compiled"
        )
    if not optimizer.built:
        scope = contextlib.nullcontext() if strategy is None else strategy.scope()
        with scope:
            optimizer.build(model.trainable_variables)
    return optimizer


class EpochCheckpoint(keras.callbacks.Callback):
    """Checkpoints of a model's variables, its optimizer's and the epoch.

    `restore` brings back the latest checkpoint in `folder`, the chief's,
    on every worker; at the end of each epoch every worker saves, but only
    the chief writes to `folder` (`tf.train.CheckpointManager`, the last
    checkpoint kept); the others write to a private folder beside it and
    delete it. Outside multi-worker training this process is the chief.

    The model's variables include the states of its dropout seed
    generators; the optimizer's include its step count, which drives the
    learning-rate schedule.

    With `options`, the chief also writes them (as JSON, in
    `OPTIONS_FILE`) beside its checkpoint, and `restore` refuses a
    checkpoint made with other options: resuming would pair its weights with
    another run's vocabulary, data, seed or schedule.

    Args:
        folder: The chief's checkpoint folder.
        model: A compiled model (else a `ValueError`); its optimizer is built
            here if it is not yet, so that its variables exist to be
            restored.
        strategy: The `tf.distribute.Strategy` training runs under, or
            `None`. Defaults to `None`.
        options: The training options the checkpoints must match, as a dict
            that JSON can write, or `None` (not checked). Defaults to `None`.
    """

    OPTIONS_FILE = "options.json"

    def __init__(
        self,
        folder: str | os.PathLike,
        model: keras.Model,
        strategy=None,
        options: dict | None = None,
    ):
        import tensorflow as tf

        super().__init__()
        self.folder = Path(folder)
        self.strategy = strategy
        self.options = None if options is None else json.loads(json.dumps(options))
        optimizer = _built_optimizer(model, strategy)
        self._epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._checkpoint = tf.train.Checkpoint(
            model=list(model.variables),
            optimizer=list(optimizer.variables),
            epoch=self._epoch,
        )
        self._manager = None  # made by the first `save`

    def restore(self) -> int:
        """Restores the latest checkpoint of the chief's folder, if any.

        Returns:
            The number of epochs it had finished, `0` without a checkpoint.

        Raises:
            DistributeError: The checkpoint is not of this model.
        """
        import tensorflow as tf

        latest = tf.train.latest_checkpoint(str(self.folder))
        if latest is None:
            return 0
        self._check_options()
        try:
            self._checkpoint.restore(latest).assert_consumed()
        except (AssertionError, ValueError, tf.errors.OpError) as error:
            raise DistributeError(
                f"the checkpoint {latest} is not of this model "
                f"({first_line(error)}); delete {self.folder} to start over"
            ) from None
        return int(self._epoch.numpy())

    def _check_options(self) -> None:
        """Raises `DistributeError` if the checkpoint's options are not ours."""
        if self.options is None:
            return
        path = self.folder / self.OPTIONS_FILE
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            saved = None
        if not isinstance(saved, dict):
            raise DistributeError(
                f"the checkpoint in {self.folder} has no readable record of "
                f"the options it was trained with ({path}); delete "
                f"{self.folder} to start over"
            )
        missing = [name for name in self.options if name not in saved]
        if missing:
            raise DistributeError(
                f"the checkpoint in {self.folder} was written by an older "
                f"version, which did not record {', '.join(missing)}; delete "
                f"{self.folder} to start over"
            )
        differ = [
            f"{name}={saved.get(name)!r}, not {value!r}"
            for name, value in self.options.items()
            if saved.get(name) != value
        ]
        if differ:
            raise DistributeError(
                f"the checkpoint in {self.folder} was trained with other "
                f"options ({'; '.join(differ)}); run the same command again "
                f"to resume, or delete {self.folder} to start over"
            )

    def save(self, epochs_done: int) -> None:
        """Saves the variables as they are after `epochs_done` epochs."""
        if self.options is not None and is_chief(self.strategy):
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / self.OPTIONS_FILE).write_text(json.dumps(self.options))
        self._epoch.assign(epochs_done)
        # A worker that is not the chief writes to a private folder (made
        # here, not before: a worker that never saves leaves none behind).
        writes = write_path(self.folder, self.strategy)
        if self._manager is None:
            import tensorflow as tf

            self._manager = tf.train.CheckpointManager(
                self._checkpoint, str(writes), max_to_keep=1
            )
        self._manager.save(checkpoint_number=epochs_done)
        discard(writes, self.strategy)

    def on_epoch_end(self, epoch, logs=None):
        self.save(epoch + 1)

    def remove(self) -> None:
        """Deletes the chief's checkpoints when training is done; on the
        other workers it does nothing."""
        if is_chief(self.strategy):
            shutil.rmtree(self.folder, ignore_errors=True)


# ---------------------------------------------------------------------------
# Input under a strategy

# The layers of the IMDB model (`keras_selfattn.imdb.model.build_model`) whose
# outputs are the token ids: everything before them is string preprocessing.
# The vectorizers' (not the clips'): the n-gram branch reads the whole review.
_ID_LAYERS = (imdb_model.TEXT_VECTORIZATION, imdb_model.BIGRAM_VECTORIZATION)


class Split(NamedTuple):
    """The IMDB model cut where strings have become token ids.

    Both halves share the layers (and so the weights) of the whole model,
    which is what gets saved: it still takes raw strings.
    """

    preprocess: keras.Model
    trainable: keras.Model


def split_preprocessing(model: keras.Model) -> Split:
    """Cuts `model` after its text preprocessing; call in `strategy.scope()`.

    Under a `tf.distribute` strategy the replicas take numeric tensors, and
    a string lookup belongs in the input pipeline anyway. So training feeds
    the trainable half with token ids made by the preprocessing half in
    `tf.data` (`id_dataset`), and the saved model stays the whole, raw-text
    one.

    Args:
        model: A model from `keras_selfattn.imdb.model.build_model`.

    Returns:
        A `Split`.

    Raises:
        ValueError: `model` is not the IMDB model.
    """
    names = [n for n in _ID_LAYERS if n in {layer.name for layer in model.layers}]
    if not names:
        raise ValueError(
            "Expected the IMDB model of keras_selfattn.imdb.model.build_model, "
            f"with a layer named {_ID_LAYERS[0]!r}. Received: model={model.name!r}"
        )
    ids = [model.get_layer(name).output for name in names]
    trainable = keras.Model(ids, model.outputs, name=f"{model.name}_ids")
    return Split(keras.Model(model.inputs, ids, name="preprocess"), trainable)


def id_dataset(split: Split, reviews):
    """Turns a `tf.data` pipeline of (texts, labels) batches into one of
    (token ids, labels), for `strategy.experimental_distribute_dataset`.

    Every worker reads the same batches and keeps its share of each
    (`AutoShardPolicy.DATA`), so a short batch is shared too and every
    review is counted once.

    Args:
        split: From `split_preprocessing`.
        reviews: A `tf.data.Dataset` of global batches `(texts, labels)`.

    Returns:
        The `tf.data.Dataset` of `(ids, labels)`.
    """
    import tensorflow as tf

    def to_ids(texts, labels):
        ids = split.preprocess(texts)
        return (tuple(ids) if isinstance(ids, (list, tuple)) else ids), labels

    dataset = reviews.map(to_ids).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    return dataset.with_options(options)


def fingerprint(model: keras.Model) -> float:
    """The sum of |w| over all weights: equal on workers that agree."""
    return float(sum(np.abs(w).astype("float64").sum() for w in model.get_weights()))


# ---------------------------------------------------------------------------
# The training loop


class DistributedLoop:
    """The demo's training loop under a `tf.distribute` strategy.

    It serves `MirroredStrategy` and `MultiWorkerMirroredStrategy` (under
    which Keras 3's `fit` fails, tensorflow/tensorflow#72388) and trains as
    `fit` does on one device. Each step runs on every replica
    (`strategy.run`): the loss of the replica's share of the global batch,
    summed and divided by the global batch; its gradients; and the update of
    the model's optimizer (made in `strategy.scope()`), which sums the
    replicas' gradients. Only the token-id half of the model
    (`split_preprocessing(model).trainable`) runs in the step; the input
    pipeline makes the ids (`id_dataset`).

    Args:
        strategy: The strategy; the model was built in its scope.
        model: The whole, compiled model (its optimizer trains; it is built
            here, in the strategy's scope, if it is not yet).

    Raises:
        ValueError: `model` is not compiled.
    """

    def __init__(self, strategy, model: keras.Model):
        self.strategy, self.model = strategy, model
        _built_optimizer(model, strategy)
        with strategy.scope():
            self.split = split_preprocessing(model)
        self._evaluate_step = self._step(self._evaluate_replica)
        self._evaluation_data = {}

    def _step(self, replica_fn):
        """A `tf.function` running `replica_fn` on the next batch of every
        replica and summing its results over all replicas of all workers."""
        import tensorflow as tf

        @tf.function
        def step(iterator):
            results = self.strategy.run(replica_fn, args=next(iterator))
            return [self.strategy.reduce("SUM", r, axis=None) for r in results]

        return step

    def _distributed(self, reviews):
        return self.strategy.experimental_distribute_dataset(
            id_dataset(self.split, reviews)
        )

    @staticmethod
    def _sums(labels, probabilities):
        """The summed loss, the correct answers and the reviews of a batch."""
        import tensorflow as tf

        per_review = keras.losses.binary_crossentropy(labels[:, None], probabilities)
        predicted = tf.cast(probabilities[:, 0] > imdb_model.THRESHOLD, labels.dtype)
        correct = tf.reduce_sum(tf.cast(tf.equal(predicted, labels), tf.float32))
        count = tf.cast(tf.size(labels), tf.float32)
        return tf.reduce_sum(tf.cast(per_review, tf.float32)), correct, count

    def _evaluate_replica(self, ids, labels):
        return self._sums(labels, self.split.trainable(ids, training=False))

    def _train_replica(self, global_batch: int):
        import tensorflow as tf

        network, optimizer = self.split.trainable, self.model.optimizer
        replicas = self.strategy.num_replicas_in_sync

        def train(ids, labels):
            with tf.GradientTape() as tape:
                probabilities = network(ids, training=True)
                loss_sum, correct, count = self._sums(labels, probabilities)
                loss = loss_sum / global_batch
                if network.losses:  # regularisation: once over all replicas
                    penalty = tf.cast(tf.add_n(network.losses), tf.float32)
                    loss += penalty / replicas
                    # Logged as `fit` logs it: the mean loss plus the penalty.
                    loss_sum += penalty * count
                scaled = optimizer.scale_loss(loss)
            gradients = tape.gradient(scaled, network.trainable_variables)
            optimizer.apply_gradients(
                zip(gradients, network.trainable_variables, strict=True)
            )
            return loss_sum, correct, count

        return train

    @staticmethod
    def _logs(totals: np.ndarray) -> dict[str, float]:
        loss_sum, correct, count = totals
        return {"loss": loss_sum / count, "accuracy": correct / count}

    def evaluate(self, batches: imdb_model.ReviewBatches) -> dict[str, float]:
        """Loss and accuracy on `batches`, computed by all workers together.

        Every review is counted once: the workers share each batch, a short
        one included, and the counts are summed over all of them.

        Returns:
            `{"loss": ..., "accuracy": ...}`.
        """
        if id(batches) not in self._evaluation_data:
            self._evaluation_data[id(batches)] = self._distributed(batches.dataset())
        iterator = iter(self._evaluation_data[id(batches)])
        totals = np.zeros(3)
        for _ in range(len(batches)):
            totals += [float(x) for x in self._evaluate_step(iterator)]
        if totals[2] != len(batches.reviews):
            raise DistributeError(
                f"distributed evaluation counted {totals[2]:.0f} of "
                f"{len(batches.reviews)} reviews"
            )
        return self._logs(totals)

    def fit(
        self,
        train_batches: imdb_model.ReviewBatches,
        val_batches: imdb_model.ReviewBatches | None,
        *,
        epochs: int,
        initial_epoch: int,
        callbacks: list,
        verbose: str | int,
    ) -> keras.callbacks.History:
        """Trains as `fit` would; the callbacks get what `fit` gives them.

        The chief shows Keras's progress bar; each epoch's logs hold the
        training and validation loss and accuracy.

        Returns:
            The `History` of the epochs it ran.
        """
        global_batch = train_batches.batch_size
        steps = len(train_batches.reviews) // global_batch  # full batches only
        if not steps:
            raise ValueError(
                "Received an invalid value for argument `train_batches`, "
                f"expected at least one full global batch of {global_batch} "
                f"reviews. Received: train_batches with "
                f"{len(train_batches.reviews)} reviews"
            )
        train_step = self._step(self._train_replica(global_batch))
        history = keras.callbacks.History()
        chief = is_chief(self.strategy)
        callback_list = keras.callbacks.CallbackList(
            [*callbacks, history],
            add_progbar=chief and verbose != 0,
            model=self.model,
            verbose=verbose if chief else 0,
            epochs=epochs,
            steps=steps,
        )
        self.model.stop_training = False
        logs = {}
        reviews = train_batches.dataset(
            range(initial_epoch, epochs), full_batches_only=True
        )
        iterator = iter(self._distributed(reviews))
        callback_list.on_train_begin()
        for epoch in range(initial_epoch, epochs):
            callback_list.on_epoch_begin(epoch)
            totals = np.zeros(3)
            for step in range(steps):
                callback_list.on_train_batch_begin(step)
                totals += [float(x) for x in train_step(iterator)]
                callback_list.on_train_batch_end(step, self._logs(totals))
            logs = self._logs(totals)
            if val_batches is not None:
                val = self.evaluate(val_batches)
                logs.update({f"val_{k}": v for k, v in val.items()})
            callback_list.on_epoch_end(epoch, logs)
            if self.model.stop_training:
                break
        callback_list.on_train_end(logs)
        return history
