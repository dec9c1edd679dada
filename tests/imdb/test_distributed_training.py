"""`keras-selfattn train --distribute`: mirrored training on two logical CPUs,
in a fresh process (TensorFlow fixes its devices once per process), and
multiworker, which stops before training with its upstream-blocked reason."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from keras_selfattn.imdb import cli
from tests.helpers import write_acl

pytestmark = [pytest.mark.tensorflow_only, pytest.mark.distributed]

TINY = [
    "--epochs", "3", "--batch-size", "8", "--max-len", "16",
    "--vocab-size", "200", "--bigram-vocab-size", "200", "--embed-dim", "16",
    "--intermediate-dim", "16", "--learning-rate", "0.01",
]  # fmt: skip

# Runs the command line, recording the loss of each epoch to $LOSSES.
_DRIVER = textwrap.dedent(
    """
    import json, os, sys
    import tensorflow as tf
    if os.environ.get("LOGICAL_CPUS"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        n = int(os.environ["LOGICAL_CPUS"])
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * n
        )
    import keras
    from keras_selfattn.imdb import cli

    class Losses(keras.callbacks.Callback):
        losses = []
        def on_epoch_end(self, epoch, logs=None):
            self.losses.append(float(logs["loss"]))

    code = cli.main(sys.argv[1:], callbacks=[Losses()])
    with open(os.environ["LOSSES"], "w") as f:
        json.dump(Losses.losses, f)
    sys.exit(code)
    """
)

_PREDICT = textwrap.dedent(
    """
    import sys, numpy as np, keras
    import keras_selfattn
    model = keras.models.load_model(sys.argv[1])
    texts = np.array(["I loved it, superb", "awful, I hated it"], dtype=object)
    print("PROBABILITIES", *model.predict(texts, verbose=0)[:, 0])
    """
)


def _run_driver(args, env, tmp_path, name, **extra_env):
    losses = tmp_path / f"{name}.losses.json"
    env = dict(env, LOSSES=str(losses), KERAS_SELFATTN_QUIET="1", **extra_env)
    return subprocess.Popen(
        [sys.executable, "-c", _DRIVER, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ), losses


def _probabilities(model_path: Path, env) -> np.ndarray:
    """Loads the model in a fresh, single-device process and predicts."""
    result = subprocess.run(
        [sys.executable, "-c", _PREDICT, str(model_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    line = [x for x in result.stdout.splitlines() if x.startswith("PROBABILITIES")]
    return np.array([float(p) for p in line[-1].split()[1:]])


@pytest.mark.slow
def test_mirrored_on_two_logical_cpus(tmp_path, subprocess_env):
    data = write_acl(tmp_path / "acl", n_train=160, n_test=32)
    out = tmp_path / "mirrored.keras"
    args = ["train", "--data", str(data), *TINY, "--out", str(out)]
    args += ["--distribute", "mirrored", "--devices", "/cpu:0,/cpu:1"]
    process, losses = _run_driver(args, subprocess_env, tmp_path, "m", LOGICAL_CPUS="2")
    output = process.communicate(timeout=240)[0]
    assert process.returncode == 0, output
    assert "replicas: 2, per-replica batch: 8, global batch: 16" in output
    assert "test accuracy:" in output.splitlines()[-1]
    losses = json.loads(losses.read_text())
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    probabilities = _probabilities(out, subprocess_env)
    assert probabilities.shape == (2,) and np.all(
        (probabilities > 0) & (probabilities < 1)
    )


def test_multiworker_stops_with_the_upstream_reason(tmp_path, monkeypatch, capsys):
    # Keras 3's fit() cannot train under MultiWorkerMirroredStrategy
    # (tensorflow/tensorflow#72388); the command says so in one line, before
    # it creates a strategy or reads any data.
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    tf_config = {"cluster": cluster, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    args = ["train", "--distribute", "multiworker", "--out", str(tmp_path / "m.keras")]
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "72388" in err
    assert "--distribute mirrored" in err
