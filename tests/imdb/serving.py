"""Helpers of the serving tests: a tiny trained model and a `serve` subprocess."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2

from tests.helpers import write_acl

# Reviews the tiny model reads (its words are those of `write_acl`).
POSITIVE = "The film was great, I loved it. Superb!"
NEGATIVE = "The film was awful and boring, I hated it."
TINY = dict(
    epochs=3, batch_size=8, max_len=32, head_len=None, vocab_size=100,
    bigram_vocab_size=0, embed_dim=16, num_heads=2, intermediate_dim=16,
    dropout=0.0, learning_rate=1e-2, verbose=0,
)  # fmt: skip


def train_tiny(folder: Path) -> Path:
    """Trains a tiny demo model in seconds on easy synthetic reviews."""
    from keras_selfattn.imdb.train import TrainConfig, train

    data = write_acl(folder / "acl", n_train=128, n_test=16)
    out = folder / "tiny.keras"
    train(TrainConfig(data=str(data), out=str(out), **TINY))
    return out


def run_python(args: list[str], env: dict, timeout: float = 300):
    """`python ARGS` in a fresh process; the `CompletedProcess`, output as text."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


# Loads a model with `keras` alone, no custom objects: the demo's pieces are
# registered by `import keras_selfattn`. Prints the probabilities as JSON.
_FRESH_PREDICT = """
import json, sys, numpy as np, keras, keras_selfattn
model = keras.models.load_model(sys.argv[1])
texts = np.array(json.loads(sys.argv[2]), dtype=object)
print(json.dumps(model.predict(texts, verbose=0)[:, 0].tolist()))
"""


def predict_in_fresh_process(model: Path, texts: list[str], env: dict) -> list[float]:
    """The probabilities of `texts` by the `.keras` file, loaded in a new process."""
    result = run_python(["-c", _FRESH_PREDICT, str(model), json.dumps(texts)], env)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# The line `keras-selfattn serve` prints once it listens, with the bound port.
_SERVING = re.compile(r"^serving .* on (http://127\.0\.0\.1:\d+)/ ", re.MULTILINE)


@contextlib.contextmanager
def running_server(
    model: Path, env: dict, log: Path, timeout: float = 180.0
) -> Iterator[str]:
    """Runs `keras-selfattn serve model --port 0` at 127.0.0.1.

    The server binds a port the system picks and prints it: no port is found
    here and handed over, which another process could take first. Yields the
    base URL once `/healthz` answers; the server is always stopped (SIGTERM,
    then SIGKILL) on the way out.
    """
    command = [sys.executable, "-m", "keras_selfattn", "serve", str(model)]
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [*command, "--port", "0"],
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = None
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise AssertionError(f"serve exited: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"serve not up in {timeout} s: {log.read_text()}")
            if url is None and (found := _SERVING.search(log.read_text())):
                url = found.group(1)
            if url is not None:
                with contextlib.suppress(httpx2.TransportError):
                    if httpx2.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
            time.sleep(0.3)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)
