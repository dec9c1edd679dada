"""`keras-selfattn train` under tf.distribute and across restarts, for real.

Every distributed run is a fresh process of the command line (TensorFlow fixes
its devices and its cluster once per process): mirrored training on two
logical CPUs; two multi-worker processes on 127.0.0.1, each with its own
`TF_CONFIG`; a worker killed with SIGKILL after epoch 1, which stops the other
with one line (within the collective timeout the test sets), and both resumed
in fresh processes. A single process killed in epoch 2 is resumed in the
test's own process, from what it left on disk, and ends with exactly the
weights of an uninterrupted run. Each process has a time limit and is killed
when a test ends, passed or failed. Workers whose ports were taken before they
bound them start again on fresh ports.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from keras_selfattn.imdb import cli
from keras_selfattn.imdb.model import load
from tests.helpers import free_ports, tensorboard_scalars, to_numpy, write_acl

pytestmark = [pytest.mark.tensorflow_only, pytest.mark.distributed]

TINY = [
    "--batch-size", "8", "--max-len", "16", "--vocab-size", "200",
    "--bigram-vocab-size", "200", "--embed-dim", "16", "--intermediate-dim", "16",
    "--learning-rate", "0.01",
]  # fmt: skip

# Seconds a training process may take; a worker's error after a lost peer.
LIMIT = 180
LOST_WORKER_LIMIT = 60
# The collective timeout of the lost-worker run (KERAS_SELFATTN_COLLECTIVE_TIMEOUT):
# the code promises the error within it, where TensorFlow does not notice the
# loss sooner, which leaves the rest of LOST_WORKER_LIMIT to stop the process.
# Long enough for one worker to wait for the other at the first all-reduce.
LOST_WORKER_TIMEOUT = 30

# Runs the command line, recording each epoch's loss to $LOSSES. With
# KILL_AFTER_EPOCH=N it kills itself (SIGKILL) after epoch N, and with
# KILL_AT=E:B after batch B of epoch E (from 0), first writing the time to
# $KILL_STAMP.
_DRIVER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    import tensorflow as tf
    if os.environ.get("LOGICAL_CPUS"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        n = int(os.environ["LOGICAL_CPUS"])
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * n
        )
    import keras
    from keras_selfattn.imdb import cli

    def die():
        with open(os.environ["KILL_STAMP"], "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)

    class Record(keras.callbacks.Callback):
        losses, epoch = [], 0
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
        def on_train_batch_end(self, batch, logs=None):
            if os.environ.get("KILL_AT") == f"{self.epoch}:{batch}":
                die()
        def on_epoch_end(self, epoch, logs=None):
            self.losses.append(float(logs["loss"]))
            if os.environ.get("KILL_AFTER_EPOCH") == str(epoch + 1):
                die()

    code = cli.main(sys.argv[1:], callbacks=[Record()])
    with open(os.environ["LOSSES"], "w") as f:
        json.dump(Record.losses, f)
    sys.exit(code)
    """
)


class _Run:
    """One process of the driver, its output in a file."""

    def __init__(self, tmp_path: Path, name: str, args, env, **extra_env):
        self.name = name
        self.log = tmp_path / f"{name}.log"
        self.losses = tmp_path / f"{name}.losses.json"
        self.stamp = tmp_path / f"{name}.killed"
        env = dict(
            env,
            LOSSES=str(self.losses),
            KILL_STAMP=str(self.stamp),
            KERAS_SELFATTN_QUIET="1",
            PYTHONUNBUFFERED="1",  # its log is read while it runs
            **extra_env,
        )
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _DRIVER, *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )

    def wait(self, limit: float = LIMIT) -> int:
        try:
            return self.process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail(f"{self.name} ran past {limit} s:\n{self.output()[-3000:]}")

    def output(self) -> str:
        return self.log.read_text()

    def lines(self) -> list[str]:
        """Its lines without TensorFlow's own log lines."""
        return [
            line
            for line in self.output().splitlines()
            if line.strip() and not re.match(r"^[IWEF]\d{4} |^WARNING: All log", line)
        ]

    def fingerprint(self) -> str:
        found = [
            line for line in self.lines() if line.startswith("weights fingerprint:")
        ]
        assert found, self.output()[-3000:]
        return found[-1]


@contextlib.contextmanager
def _runs():
    """Collects `_Run`s and kills those still running when the block ends."""
    started: list[_Run] = []
    try:
        yield started
    finally:
        for run in started:
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait()


def _tf_configs(n: int) -> list[str]:
    workers = [f"127.0.0.1:{port}" for port in free_ports(n)]
    return [
        json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
        )
        for i in range(n)
    ]


# What a worker prints (and exits) when its port was taken after `free_ports`
# found it; and what each prints once the cluster stands (every port bound).
_PORT_TAKEN = "Could not start gRPC server"
_CLUSTER_UP = "distribute: multiworker ("
PORT_TRIES = 3


def _cluster_stands(workers: list[_Run]) -> bool:
    """Waits until every worker has joined the cluster: False if one could
    not bind its port; True once all joined, or one stopped for another
    reason, which the caller's checks report."""
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline:
        if all(_CLUSTER_UP in run.output() for run in workers):
            return True
        for run in workers:
            if run.process.poll() is not None:
                return _PORT_TAKEN not in run.output()
        time.sleep(0.2)
    return True


def _start_workers(
    runs, tmp_path, name, args, env, worker1_env=None, **both_env
) -> list[_Run]:
    """Starts worker 0 (the chief) and worker 1 of a new two-worker cluster.

    TF_CONFIG names the ports before the workers start, so a port found free
    can be taken by another process before its worker binds it: then both
    are stopped and started again on fresh ports (`PORT_TRIES` times).
    """
    for _ in range(PORT_TRIES):
        workers = []
        for i, tf_config in enumerate(_tf_configs(2)):
            extra = dict(both_env, **(worker1_env or {})) if i == 1 else both_env
            run = _Run(tmp_path, f"{name}{i}", args, env, TF_CONFIG=tf_config, **extra)
            workers.append(run)
            runs.append(run)
        if _cluster_stands(workers):
            return workers
        for run in workers:
            run.process.kill()
            run.process.wait()
    pytest.fail(f"no cluster in {PORT_TRIES} tries: ports taken each time")


def _assert_predicts_raw_strings(model_path: Path) -> None:
    """Loaded here (one device, no strategy), the model tells two reviews
    apart from their raw strings."""
    texts = np.array(["I loved it, superb", "awful, I hated it"], dtype=object)
    positive, negative = load(model_path).predict(texts, verbose=0)[:, 0]
    assert positive > 0.5 > negative, (positive, negative)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_acl(tmp_path_factory.mktemp("acl"), n_train=160, n_test=33)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory, data, subprocess_env):
    """Two workers trained 2 epochs, uninterrupted: (folder, worker runs)."""
    folder = tmp_path_factory.mktemp("two_workers")
    args = ["train", "--data", str(data), *TINY, "--epochs", "2"]
    args += ["--distribute", "multiworker", "--out", str(folder / "m.keras")]
    with _runs() as runs:
        workers = _start_workers(runs, folder, "worker", args, subprocess_env)
        for run in workers:
            assert run.wait() == 0, run.output()[-3000:]
    return folder, workers


@pytest.mark.slow
def test_mirrored_on_two_logical_cpus(tmp_path, data, subprocess_env):
    out = tmp_path / "mirrored.keras"
    args = ["train", "--data", str(data), *TINY, "--epochs", "2", "--out", str(out)]
    args += ["--distribute", "mirrored", "--devices", "/cpu:0,/cpu:1"]
    args += ["--tensorboard", str(tmp_path / "logs")]
    with _runs() as runs:
        runs.append(_Run(tmp_path, "m", args, subprocess_env, LOGICAL_CPUS="2"))
        assert runs[0].wait() == 0, runs[0].output()[-3000:]
    lines = runs[0].lines()
    assert "replicas: 2, per-replica batch: 8, global batch: 16" in lines[2]
    assert lines[-1].startswith("test accuracy: ")
    losses = json.loads(runs[0].losses.read_text())
    assert len(losses) == 2 and losses[-1] < losses[0], losses
    _assert_predicts_raw_strings(out)
    # The loop calls Keras's TensorBoard callback as `fit` does: per epoch.
    scalars = tensorboard_scalars(tmp_path / "logs")
    for tag in ("epoch_loss", "epoch_accuracy", "epoch_learning_rate"):
        assert scalars["train"].get(tag) == 2, scalars
    for tag in ("epoch_loss", "epoch_accuracy"):
        assert scalars["validation"].get(tag) == 2, scalars


@pytest.mark.slow
def test_two_workers_train_one_model(two_workers):
    folder, (chief, worker) = two_workers
    for run, label in ((chief, "worker:0"), (worker, "worker:1")):
        lines = run.lines()
        assert f"distribute: multiworker ({label}); replicas: 2" in "\n".join(lines)
        assert re.fullmatch(r"test accuracy: \d\.\d{4}", lines[-1]), lines
    # The same weights and losses on both; the losses fall.
    assert chief.fingerprint() == worker.fingerprint()
    losses = json.loads(chief.losses.read_text())
    assert losses == json.loads(worker.losses.read_text())
    assert len(losses) == 2 and losses[1] < losses[0], losses
    # The chief shows fit's progress and logs; the other worker shows none.
    chief_text = "\n".join(chief.lines())
    for word in ("Epoch 2/2", "loss:", "accuracy:", "val_loss:", "val_accuracy:"):
        assert word in chief_text
    assert "Epoch 1/2" not in "\n".join(worker.lines())
    # Only the chief's model file is left: no checkpoints, no private folders.
    assert sorted(p.name for p in folder.iterdir() if "keras" in p.name) == ["m.keras"]
    _assert_predicts_raw_strings(folder / "m.keras")


@pytest.mark.slow
def test_killed_worker_stops_the_other_and_both_resume(
    tmp_path, data, two_workers, subprocess_env
):
    args = ["train", "--data", str(data), *TINY, "--epochs", "2"]
    args += ["--distribute", "multiworker", "--out", str(tmp_path / "m.keras")]
    with _runs() as runs:
        chief, worker = _start_workers(
            runs, tmp_path, "first", args, subprocess_env,
            worker1_env={"KILL_AFTER_EPOCH": "1"},
            KERAS_SELFATTN_COLLECTIVE_TIMEOUT=str(LOST_WORKER_TIMEOUT),
        )  # fmt: skip
        assert worker.wait() == -9  # SIGKILL, after its epoch 1
        killed_at = float(worker.stamp.read_text())
        code = chief.wait(LOST_WORKER_LIMIT)
        seconds = time.time() - killed_at
    assert code == 2, chief.output()[-3000:]
    error = chief.lines()[-1]
    assert error.startswith("keras-selfattn: error: a worker was lost"), error
    assert "run the same command on every worker again" in error
    print(f"SIGKILL to the other worker's error: {seconds:.1f} s")
    assert (tmp_path / "m.keras.backup" / "checkpoint").is_file()

    with _runs() as runs:
        resumed = _start_workers(runs, tmp_path, "again", args, subprocess_env)
        for run in resumed:
            assert run.wait() == 0, run.output()[-3000:]
    for run in resumed:
        text = "\n".join(run.lines())
        assert "resuming after epoch 1" in text
        assert "Epoch 1/2" not in text
    # Resumed, they end where the uninterrupted workers ended.
    assert resumed[0].fingerprint() == resumed[1].fingerprint()
    assert resumed[0].fingerprint() == two_workers[1][0].fingerprint()


@pytest.mark.slow
def test_single_process_killed_in_epoch_2_resumes_to_the_same_weights(
    tmp_path, data, subprocess_env, capsys
):
    args = ["train", "--data", str(data), *TINY, "--epochs", "2"]
    cut_args = [*args, "--out", str(tmp_path / "cut.keras")]
    with _runs() as runs:
        runs.append(_Run(tmp_path, "cut", cut_args, subprocess_env, KILL_AT="1:3"))
        # The uninterrupted run, here, while the other one runs and dies.
        assert cli.main([*args, "--out", str(tmp_path / "whole.keras")]) == 0
        whole = capsys.readouterr().out.strip().splitlines()
        assert runs[0].wait() == -9, runs[0].output()[-3000:]
    assert not (tmp_path / "cut.keras").exists()
    # Resumed here too, from what the killed process left on disk: a fresh
    # process resuming is the multi-worker test's (one TensorFlow start less).
    assert cli.main(cut_args) == 0
    resumed = capsys.readouterr().out.strip().splitlines()
    assert "resuming after epoch 1" in "\n".join(resumed)
    assert "Epoch 1/2" not in "\n".join(resumed)
    assert resumed[-1] == whole[-1]  # test accuracy: 0.XXXX
    expected = load(tmp_path / "whole.keras")
    got = load(tmp_path / "cut.keras")
    for a, b in zip(got.weights, expected.weights, strict=True):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b), err_msg=a.path)
