"""tf.distribute support of the demo: strategies, the chief, who writes what."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keras_selfattn.imdb import distribute

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
    assert distribute.is_chief(strategy) is chief


def test_single_process_is_chief_and_writes_in_place(tmp_path):
    assert distribute.is_chief(None)
    assert distribute.write_path(tmp_path / "m.keras", None) == tmp_path / "m.keras"


def test_other_workers_write_to_a_private_folder_they_discard(tmp_path):
    strategy = _FakeStrategy("worker", 1, _TWO_WORKERS)
    path = distribute.write_path(tmp_path / "m.keras", strategy)
    assert path != tmp_path / "m.keras" and path.name == "m.keras"
    path.write_text("x")
    distribute.discard(path, strategy)
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
    ],
    ids=["missing", "not_json", "no_workers_key", "empty_workers", "unknown_task"],
)
def test_multiworker_needs_a_valid_tf_config(monkeypatch, tf_config, message):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(distribute.DistributeError, match=message):
        distribute.make_strategy("multiworker")


def test_unknown_kind_and_misplaced_devices():
    with pytest.raises(distribute.DistributeError, match="unknown --distribute"):
        distribute.make_strategy("parameter-server")
    with pytest.raises(distribute.DistributeError, match="--devices needs"):
        distribute.make_strategy("none", ["/cpu:0"])
    assert distribute.make_strategy("none") is None
    assert distribute.num_replicas(None) == 1


def test_backup_of_other_workers_goes_to_a_private_folder(tmp_path):
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    strategy = _FakeStrategy("worker", 1, _TWO_WORKERS)
    backup = distribute.ChiefBackupAndRestore(str(tmp_path / "backup"), strategy)
    backup.set_model(model)
    backup.on_epoch_end(0)
    private = Path(backup._private_dir)
    assert (private / "latest.weights.h5").is_file()
    assert not (tmp_path / "backup" / "latest.weights.h5").exists()
    # It restores from the chief's folder, not from its own.
    assert backup._weights_path == str(tmp_path / "backup" / "latest.weights.h5")
    backup.on_train_end()
    assert not private.exists()
