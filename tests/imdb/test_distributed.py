"""tf.distribute support of the demo: strategies, the chief, who writes what."""

from __future__ import annotations

import json

import numpy as np
import pytest

from keras_selfattn.imdb import distributed
from tests.helpers import to_numpy

pytestmark = [pytest.mark.tensorflow_only, pytest.mark.distributed]


class _Spec:
    def __init__(self, cluster):
        self._cluster = cluster

    def as_dict(self):
        return self._cluster


class _Resolver:
    def __init__(self, task_type, task_id, cluster):
        self.task_type, self.task_id = task_type, task_id
        self._spec = _Spec(cluster)

    def cluster_spec(self):
        return self._spec


class _FakeStrategy:
    """Stands for a MultiWorkerMirroredStrategy's cluster view."""

    def __init__(self, task_type, task_id, cluster):
        self.cluster_resolver = _Resolver(task_type, task_id, cluster)
        self.num_replicas_in_sync = sum(len(v) for v in cluster.values())


_TWO_WORKERS = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
_CHIEF_AND_WORKER = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}


@pytest.mark.parametrize(
    "task_type, task_id, cluster, chief",
    [
        ("worker", 0, _TWO_WORKERS, True),
        ("worker", 1, _TWO_WORKERS, False),
        ("chief", 0, _CHIEF_AND_WORKER, True),
        ("worker", 0, _CHIEF_AND_WORKER, False),
    ],
    ids=["worker0_is_chief", "worker1", "explicit_chief", "worker0_beside_chief"],
)
def test_who_is_chief(task_type, task_id, cluster, chief):
    strategy = _FakeStrategy(task_type, task_id, cluster)
    assert distributed.is_chief(strategy) is chief


def test_single_process_is_chief_and_writes_in_place(tmp_path):
    assert distributed.is_chief(None)
    assert distributed.write_path(tmp_path / "m.keras", None) == tmp_path / "m.keras"


def test_other_workers_write_to_a_private_folder_they_discard(tmp_path):
    strategy = _FakeStrategy("worker", 1, _TWO_WORKERS)
    path = distributed.write_path(tmp_path / "m.keras", strategy)
    assert path != tmp_path / "m.keras" and path.name == "m.keras"
    path.write_text("x")
    distributed.discard(path, strategy)
    assert not path.parent.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "tf_config, message",
    [
        (None, "needs the TF_CONFIG"),
        ("{not json", "not valid cluster JSON"),
        (json.dumps({"cluster": {}}), "not valid cluster JSON"),
        (
            json.dumps(
                {"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}
            ),
            "must list host:port",
        ),
        (
            json.dumps(
                {"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}}
            ),
            "not in its cluster",
        ),
        *(
            (
                json.dumps(
                    {
                        "cluster": {"worker": ["a:1"]},
                        "task": {"type": "worker", "index": i},
                    }
                ),
                message,
            )
            for i, message in (
                (
                    5,
                    r"task index 5 is not one of its cluster's 1 'worker' "
                    r"tasks \(0 to 0\)",
                ),
                (-1, "task index -1 is not one of"),
                (True, "task.index is True, not an integer"),
            )
        ),
        (
            json.dumps(
                {
                    "cluster": {"worker": ["127.0.0.1:1"]},
                    "task": {"type": ["worker"], "index": 0},
                }
            ),
            r"task.type is \['worker'\], not a string",
        ),
    ],
    ids=[
        "missing",
        "not_json",
        "no_workers_key",
        "empty_workers",
        "unknown_task",
        "index_past_the_workers",
        "negative_index",
        "bool_index",
        "list_type",
    ],
)
def test_multiworker_needs_a_valid_tf_config(monkeypatch, tf_config, message):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(distributed.DistributeError, match=message):
        distributed.make_strategy("multiworker")


def test_unknown_kind_and_misplaced_devices():
    with pytest.raises(distributed.DistributeError, match="unknown --distribute"):
        distributed.make_strategy("parameter-server")
    with pytest.raises(distributed.DistributeError, match="--devices needs"):
        distributed.make_strategy("none", ["/cpu:0"])
    assert distributed.make_strategy("none") is None
    assert distributed.num_replicas(None) == 1


@pytest.mark.parametrize(
    "devices, message",
    [
        (["/cpu:0", "/cpu:9"], "--devices: /cpu:9 is not a device of this machine"),
        (["gpu0"], "--devices: 'gpu0' is not the name of a device of this process"),
        (["/job:worker/cpu:0"], "'/job:worker/cpu:0' is not the name of a device"),
        (["/cpu:0", "/device:CPU:0"], "--devices names /device:CPU:0 twice"),
        (["/task:3/cpu:0"], "'/task:3/cpu:0' is not the name of a device"),
        (["/replica:2/cpu:0"], "'/replica:2/cpu:0' is not the name of a device"),
    ],
    ids=["absent", "malformed", "another_job", "twice", "another_task", "replica"],
)
def test_mirrored_devices_must_be_this_machines(devices, message):
    # MirroredStrategy waited forever for two absent devices, trained on the
    # CPU in place of one, and failed inside TensorFlow on the others.
    with pytest.raises(distributed.DistributeError, match=message):
        distributed.make_strategy("mirrored", devices)
    strategy = distributed.make_strategy("mirrored", ["/cpu:0"])
    assert distributed.num_replicas(strategy) == 1


def _model():
    import keras

    model = keras.Sequential(
        [keras.Input((2,)), keras.layers.Dropout(0.5, seed=1), keras.layers.Dense(1)]
    )
    model.compile(keras.optimizers.Adam(0.1), "mse")
    return model


def _train_one_step(model):
    x = np.ones((4, 2), "float32")
    model.train_on_batch(x, x[:, :1])


def test_checkpoint_restores_weights_optimizer_and_epoch(tmp_path):
    folder = tmp_path / "m.keras.backup"
    model = _model()
    checkpoint = distributed.EpochCheckpoint(folder, model)
    assert checkpoint.restore() == 0  # nothing yet
    _train_one_step(model)
    checkpoint.set_model(model)
    checkpoint.on_epoch_end(2)  # epoch 3 done
    saved = [to_numpy(v) for v in model.variables]

    fresh = _model()
    restored = distributed.EpochCheckpoint(folder, fresh)
    assert restored.restore() == 3
    for a, b in zip(fresh.variables, saved, strict=True):
        np.testing.assert_array_equal(to_numpy(a), b)  # dropout seeds too
    assert int(fresh.optimizer.iterations) == 1
    restored.remove()
    assert not folder.exists()


def test_checkpoint_of_another_model_is_refused(tmp_path):
    import keras

    folder = tmp_path / "backup"
    model = _model()
    distributed.EpochCheckpoint(folder, model).save(1)
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    other.compile("adam", "mse")
    with pytest.raises(distributed.DistributeError, match="is not of this model"):
        distributed.EpochCheckpoint(folder, other).restore()


def test_other_workers_checkpoint_privately_and_restore_the_chiefs(tmp_path):
    folder = tmp_path / "backup"
    chief_model = _model()
    distributed.EpochCheckpoint(folder, chief_model).save(1)
    model = _model()
    model.optimizer.build(model.trainable_variables)
    worker = distributed.EpochCheckpoint(
        folder, model, _FakeStrategy("worker", 1, _TWO_WORKERS)
    )
    assert worker.restore() == 1
    worker.save(2)  # writes beside the chief's folder, then deletes it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup"]
    import tensorflow as tf

    assert tf.train.latest_checkpoint(str(folder)).endswith("ckpt-1")
    worker.remove()  # only the chief removes the checkpoints
    assert folder.is_dir()


def test_a_checkpoint_without_a_record_of_an_option_says_so(tmp_path):
    # A checkpoint of an older version has no "replicas": asking to run the
    # same command again would never resume.
    folder = tmp_path / "backup"
    distributed.EpochCheckpoint(folder, _model(), options={"seed": 1}).save(1)
    newer = distributed.EpochCheckpoint(
        folder, _model(), options={"seed": 1, "replicas": 1}
    )
    with pytest.raises(distributed.DistributeError) as error:
        newer.restore()
    assert str(error.value) == (
        f"the checkpoint in {folder} was written by an older version, which did "
        f"not record replicas; delete {folder} to start over"
    )


def test_a_worker_that_never_saves_leaves_no_folder(tmp_path):
    folder = tmp_path / "backup"
    distributed.EpochCheckpoint(folder, _model()).save(1)
    model = _model()
    model.optimizer.build(model.trainable_variables)
    worker = distributed.EpochCheckpoint(
        folder, model, _FakeStrategy("worker", 1, _TWO_WORKERS)
    )
    assert worker.restore() == 1  # a resume with nothing left to train
    worker.remove()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup"]


def test_an_uncompiled_model_is_refused():
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="expected a compiled model"):
        distributed.EpochCheckpoint("unused", model)


@pytest.mark.parametrize(
    "value, expected",
    [(None, distributed.COLLECTIVE_TIMEOUT), ("12.5", 12.5), ("0", None), ("x", None)],
)
def test_collective_timeout_from_the_environment(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(distributed.COLLECTIVE_TIMEOUT_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(distributed.COLLECTIVE_TIMEOUT_VARIABLE, value)
    if expected is None:
        with pytest.raises(distributed.DistributeError, match="positive number"):
            distributed.collective_timeout()
    else:
        assert distributed.collective_timeout() == expected


def test_a_lost_worker_becomes_one_line_that_says_how_to_resume():
    import tensorflow as tf

    message = (
        "Graph execution error:\n\nDetected at node CollectiveReduceV2 defined at "
        '(most recent call last):\n  File "x.py", line 1, in <module>\n\n'
        "Collective ops is aborted by: The following tasks are unhealthy "
        "(stopped sending heartbeats):\n/job:worker/replica:0/task:1\n"
        "The tasks have crashed.\n\t [[{{node CollectiveReduceV2}}]]"
    )
    lost = tf.errors.UnavailableError(None, None, message)
    with (
        pytest.raises(distributed.WorkerLostError) as caught,
        distributed.stop_on_lost_worker("multiworker"),
    ):
        raise lost
    text = str(caught.value)
    assert "\n" not in text
    assert "(stopped sending heartbeats): /job:worker/replica:0/task:1" in text
    assert "run the same command on every worker again" in text
    # Outside multi-worker training the error is TensorFlow's own.
    with (
        pytest.raises(tf.errors.UnavailableError),
        distributed.stop_on_lost_worker("mirrored"),
    ):
        raise lost


@pytest.mark.parametrize("ngram_logit", [True, False], ids=["ngram_branch", "no_ngram"])
def test_split_halves_compute_the_whole_model(ngram_logit):
    from keras_selfattn.imdb.model import build_model

    texts = ["a fine film , fine acting", "a dull film", "dull"] * 3
    model = build_model(
        texts, vocab_size=20, bigram_vocab_size=20, max_len=3, head_len=1,
        embed_dim=4, num_heads=1, intermediate_dim=4, ngram_logit=ngram_logit,
    )  # fmt: skip
    ngram = [layer for layer in model.layers if layer.name == "ngram_logit"]
    if ngram:  # weights that matter, so that a wrong cut shows
        ngram[0].kernel.assign(np.linspace(-1, 1, ngram[0].kernel.shape[0]))
        classifier = model.get_layer("classifier")
        classifier.kernel.assign(np.ones(classifier.kernel.shape))
    split = distributed.split_preprocessing(model)
    import tensorflow as tf

    batch = tf.constant(texts[:3])
    ids = split.preprocess(batch)
    # The whole review's ids (the n-gram branch reads them unclipped).
    assert to_numpy(ids[0]).shape == (3, 6)
    np.testing.assert_allclose(
        to_numpy(split.trainable(ids)), to_numpy(model(batch)), atol=1e-6
    )


_TEXTS = ["a fine film , fine acting", "a dull film", "dull dull", "great fun"] * 3
_LABELS = [1, 0, 0, 1] * 3


def _tiny(strategy, **options):
    from keras_selfattn.imdb import model as imdb_model

    with strategy.scope():
        model = imdb_model.build_model(
            _TEXTS, vocab_size=30, bigram_vocab_size=30, max_len=8, head_len=None,
            embed_dim=8, num_heads=1, intermediate_dim=8, dropout=0.0, **options,
        )  # fmt: skip
        imdb_model.compile_model(model, 10, learning_rate=1e-12)  # weights stay
    return model


def test_the_loop_logs_the_loss_that_fit_logs():
    # The loss logged (progress bar, History, TensorBoard) includes the
    # pooling's entropy penalty, as `fit`'s does; it left it out.
    import tensorflow as tf

    from keras_selfattn.imdb import model as imdb_model

    batches = imdb_model.ReviewBatches(_TEXTS, _LABELS, 4, seed=1)
    plain = _tiny(tf.distribute.get_strategy(), pooling_entropy=1.0)
    fitted = plain.fit(batches.dataset(range(1)), epochs=1, verbose=0, shuffle=False)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    model = _tiny(strategy, pooling_entropy=1.0)
    assert not model.optimizer.built
    loop = distributed.DistributedLoop(strategy, model)
    assert model.optimizer.built  # built in the strategy's scope
    looped = loop.fit(batches, None, epochs=1, initial_epoch=0, callbacks=[], verbose=0)
    assert looped.history["loss"][0] == pytest.approx(
        fitted.history["loss"][0], rel=1e-4
    )
    assert looped.history["accuracy"] == pytest.approx(fitted.history["accuracy"])


def test_the_loop_needs_one_full_global_batch():
    import tensorflow as tf

    from keras_selfattn.imdb import model as imdb_model

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    loop = distributed.DistributedLoop(strategy, _tiny(strategy))
    batches = imdb_model.ReviewBatches(_TEXTS[:3], _LABELS[:3], 4, seed=1)
    with pytest.raises(ValueError, match="at least one full global batch of 4"):
        loop.fit(batches, None, epochs=1, initial_epoch=0, callbacks=[], verbose=0)
