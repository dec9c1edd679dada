"""`layout_map` and the layers under `keras.distribution` (JAX).

The map is checked by path; it depends on no backend, so these tests run
once, in the TensorFlow pass. The distributed runs are JAX programs in fresh
processes (JAX fixes its devices once per process), whatever the backend of
the test run: model parallelism over two virtual CPU devices
(`--xla_force_host_platform_device_count=2`) against one device, and data
parallelism across two processes that train with `fit` against one process
that trains on the whole global batch.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest

from keras_selfattn import layout_map
from keras_selfattn.layers.grouped_query_attention import KERAS_NEEDED
from tests.helpers import free_ports, needs_keras, port_is_free, release

pytestmark = pytest.mark.backend_independent

# Largest difference of the sharded and the one-device results, relative to the
# largest |value| of the one-device result (float32 sums in another order).
TOLERANCE = 1e-5


def _mesh(axis_names=("batch", "model")):
    return keras.distribution.DeviceMesh(
        (1, 2), list(axis_names), devices=["cpu:0", "cpu:1"]
    )


@pytest.mark.parametrize(
    "path, axes",
    [
        ("encoder_0/self_attention_layer/query/kernel", (None, "model", None)),
        ("mha/value/bias", ("model", None)),
        ("mha/attention_output/kernel", ("model", None, None)),
        ("mha/attention_output/bias", None),
        ("self_attention/qkv_kernel", (None, "model")),
        ("self_attention/qkv_bias", ("model",)),
        ("self_attention/output_kernel", ("model", None)),
        ("self_attention/output_bias", None),
        ("pooling/key_kernel", (None, "model")),
        ("pooling/query", None),
        ("encoder_0/feedforward_intermediate_dense/kernel", (None, "model")),
        ("encoder_0/feedforward_intermediate_dense/bias", ("model",)),
        ("encoder_0/feedforward_output_dense/kernel", ("model", None)),
        ("encoder_0/feedforward_output_dense/bias", None),
        ("embedding/token_embedding/embeddings", None),
        ("classifier/kernel", None),
    ],
)
def test_layout_map_shards_by_heads(path, axes):
    layout = layout_map(_mesh())[path]
    assert (None if layout is None else layout.axes) == axes


def test_layout_map_takes_the_model_axis_by_name():
    layouts = layout_map(_mesh(("data", "heads")), model_axis="heads")
    assert layouts["a/query/kernel"].axes == (None, "heads", None)
    assert layouts["a/query/kernel"].device_mesh.axis_names == ["data", "heads"]


def test_layout_map_argument_errors():
    with pytest.raises(ValueError, match="argument `device_mesh`"):
        layout_map(("batch", "model"))
    with pytest.raises(
        ValueError, match=r"argument `model_axis`.*Received: model_axis='heads'"
    ):
        layout_map(_mesh(), model_axis="heads")


# ---------------------------------------------------------------------------
# JAX, in fresh processes

# Each layer once on one device and once under ModelParallel with the same
# (seeded) weights: the largest differences of outputs and of gradients (of
# the weights and the input), each relative to the largest |value| of the
# one-device output or gradients, and how each weight is laid out.
_MODEL_PARALLEL = textwrap.dedent(
    """
    import json
    import sys
    import jax
    import numpy as np
    import keras
    import keras_selfattn

    def build(name):
        x = keras.Input((6, 16))
        if name == "SelfAttention":
            y = keras_selfattn.SelfAttention(16, num_heads=4)(x)
        elif name == "MultiHeadAttention":
            y = keras_selfattn.MultiHeadAttention(4, 4)(x, x)
        elif name == "GroupQueryAttention":
            y = keras_selfattn.GroupQueryAttention(4, 4, 2)(x, x)
        elif name == "MultiQueryAttention":  # one key-value head
            y = keras_selfattn.GroupQueryAttention(4, 4, 1, name="mqa")(x, x)
        elif name == "AttentionPooling":
            y = keras_selfattn.AttentionPooling(num_heads=2)(x)
        else:
            y = keras_selfattn.TransformerEncoder(32, num_heads=4)(x)
        return keras.Model(x, y)

    def output_and_grads(model, x, upstream):
        trainable = [v.value for v in model.trainable_variables]
        fixed = [v.value for v in model.non_trainable_variables]

        def loss(trainable, x):
            y, _ = model.stateless_call(trainable, fixed, x)
            return (y * upstream).sum(), y

        run = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))
        (_, y), (grads, x_grad) = run(trainable, x)
        return [np.asarray(a) for a in (y, x_grad, *grads)]

    # max |got - expected| over the arrays, relative to the largest |expected|
    # of them all (one scale: a key bias's gradient is zero).
    def largest_difference(got, expected):
        difference = max(np.abs(a - b).max() for a, b in zip(got, expected))
        return float(difference / max(np.abs(b).max() for b in expected))

    names = json.loads(sys.argv[1])
    keras.utils.set_random_seed(0)  # the same weights in every run
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 6, 16)).astype("float32")
    one_device = {}
    for name in names:
        model = build(name)
        upstream = rng.normal(size=model.output.shape[1:]).astype("float32")
        one_device[name] = (model.get_weights(), upstream,
                            output_and_grads(model, x, upstream))

    mesh = keras.distribution.DeviceMesh(
        (1, 2), ["batch", "model"], devices=jax.devices())
    layouts = keras_selfattn.layout_map(mesh)
    for part in ("key", "value"):  # one key-value head: replicated (the docs)
        layouts[f"mqa/{part}/kernel"] = (None, None, None)
        layouts[f"mqa/{part}/bias"] = (None, None)
    keras.distribution.set_distribution(keras.distribution.ModelParallel(
        layout_map=layouts, batch_dim_name="batch"))
    report = {"devices": len(jax.devices())}
    for name in names:
        weights, upstream, expected = one_device[name]
        model = build(name)
        model.set_weights(weights)
        got = output_and_grads(model, x, upstream)
        report[name] = {
            "output": largest_difference(got[:1], expected[:1]),
            "gradients": largest_difference(got[1:], expected[1:]),
            "layouts": {
                v.path.split("/", 1)[1]: [
                    str(v.value.sharding.spec),
                    sorted({tuple(s.data.shape) for s in v.value.addressable_shards}),
                ]
                for v in model.trainable_variables
            },
        }
    print("REPORT", json.dumps(report))
    """
)

# One of two processes of a data-parallel `fit`; prints a digest of the
# weights it ends with.
_DATA_PARALLEL = textwrap.dedent(
    """
    import json, sys
    import keras
    import numpy as np
    if sys.argv[1] != "one":  # else one process, no distribution
        keras.distribution.initialize(
            job_addresses=sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
    import jax
    import tensorflow as tf
    import keras_selfattn
    if sys.argv[1] != "one":
        keras.distribution.set_distribution(
            keras.distribution.DataParallel(devices=jax.devices()))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8, 16)).astype("float32")
    y = (x[:, :, 0].mean(axis=1, keepdims=True) > 0).astype("float32")
    keras.utils.set_random_seed(1)
    model = keras.Sequential([
        keras.Input((8, 16)),
        keras_selfattn.SelfAttention(16, num_heads=2),
        keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dense(1, activation="sigmoid"),
    ])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    history = model.fit(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=3, verbose=0)
    weights = np.concatenate([np.ravel(w) for w in model.get_weights()])
    print("REPORT", json.dumps({
        "devices": len(jax.devices()),
        "local_devices": len(jax.local_devices()),
        "losses": history.history["loss"],
        "weights": weights.tolist(),
    }))
    """
)

LIMIT = 150


def _jax_env(subprocess_env, xla_flags: str = "") -> dict:
    """The JAX processes' environment: XLA keeps the suite's flags (its cheap
    compiles, tests/conftest.py) and adds `xla_flags`."""
    flags = f"{subprocess_env.get('XLA_FLAGS', '')} {xla_flags}".strip()
    return dict(subprocess_env, KERAS_BACKEND="jax", XLA_FLAGS=flags)


def _report(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("REPORT ")]
    assert lines, output[-3000:]
    return json.loads(lines[-1][len("REPORT ") :])


# The layers of `_MODEL_PARALLEL`; grouped-query attention only on a Keras
# that has the layer ours subclasses (not the floor lane's).
LAYERS = ["SelfAttention", "MultiHeadAttention", "AttentionPooling"]
LAYERS += ["TransformerEncoder"]
GQA_ON_THIS_KERAS = release(keras.__version__) >= release(KERAS_NEEDED)
if GQA_ON_THIS_KERAS:
    LAYERS += ["GroupQueryAttention", "MultiQueryAttention"]


@pytest.mark.slow
@pytest.mark.distributed
def test_model_parallel_matches_one_device(subprocess_env):
    env = _jax_env(subprocess_env, "--xla_force_host_platform_device_count=2")
    result = subprocess.run(
        [sys.executable, "-c", _MODEL_PARALLEL, json.dumps(LAYERS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=LIMIT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = _report(result.stdout)
    assert report.pop("devices") == 2
    assert sorted(report) == sorted(LAYERS)
    for name, found in report.items():
        assert found["output"] < TOLERANCE, (name, found)
        assert found["gradients"] < TOLERANCE, (name, found)
    shards = {name: found["layouts"] for name, found in report.items()}
    # Each device holds half of every split kernel (4 heads: 2 on each), and
    # all of every other weight.
    assert shards["MultiHeadAttention"]["query/kernel"][1] == [[16, 2, 4]]
    assert shards["MultiHeadAttention"]["attention_output/kernel"][1] == [[2, 4, 16]]
    assert shards["SelfAttention"]["qkv_kernel"][1] == [[16, 24]]
    assert shards["SelfAttention"]["output_kernel"][1] == [[8, 16]]
    assert shards["AttentionPooling"]["key_kernel"][1] == [[16, 8]]
    encoder = shards["TransformerEncoder"]
    assert encoder["self_attention_layer/value/kernel"][1] == [[16, 2, 4]]
    assert encoder["feedforward_intermediate_dense/kernel"][1] == [[16, 16]]
    assert encoder["feedforward_output_dense/kernel"][1] == [[16, 16]]
    assert encoder["self_attention_layer_norm/gamma"][1] == [[16]]  # replicated
    if not GQA_ON_THIS_KERAS:
        return
    # Grouped-query: the query heads and the 2 key-value heads split in two.
    gqa = shards["GroupQueryAttention"]
    assert gqa["query/kernel"][1] == [[16, 2, 4]]
    assert gqa["key/kernel"][1] == gqa["value/kernel"][1] == [[16, 1, 4]]
    assert gqa["attention_output/kernel"][1] == [[2, 4, 16]]
    # One key-value head: its projections replicated by their exact paths.
    mqa = shards["MultiQueryAttention"]
    assert mqa["query/kernel"][1] == [[16, 2, 4]]
    replicated = ["P(None, None, None)", [[16, 1, 4]]]
    assert mqa["key/kernel"] == mqa["value/kernel"] == replicated


PORT_TRIES = 3


def _data_parallel_outputs(env: dict, folder) -> list[str]:
    """The outputs of `_DATA_PARALLEL`'s two processes and of the one.

    The coordinator's port is found free here and bound by process 0, so
    another process can take it in between: then process 0 dies (JAX's
    coordinator crashes, without a message) while the port stays taken, and
    all three start again on a fresh port (`PORT_TRIES` times).
    """
    for attempt in range(PORT_TRIES):
        (port,) = free_ports(1)
        logs = [folder / f"{attempt}.{i}.log" for i in range(3)]
        with contextlib.ExitStack() as stack:
            processes = []
            for log, arguments in zip(
                logs, ([f"127.0.0.1:{port}", "0"], [f"127.0.0.1:{port}", "1"],
                       ["one", "0"]), strict=True
            ):  # fmt: skip
                output = stack.enter_context(open(log, "w"))
                process = subprocess.Popen(
                    [sys.executable, "-c", _DATA_PARALLEL, *arguments],
                    env=env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
                stack.callback(process.wait)
                stack.callback(process.kill)
                processes.append(process)
            coordinator = processes[0]
            deadline = time.monotonic() + LIMIT
            while coordinator.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            if coordinator.returncode not in (0, None) and not port_is_free(port):
                continue  # its port was taken: all three again
            for process, log in zip(processes, logs, strict=True):
                try:
                    process.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pytest.fail(f"ran past {LIMIT} s:\n{log.read_text()[-3000:]}")
                assert process.returncode == 0, log.read_text()[-3000:]
            return [log.read_text() for log in logs]
    pytest.fail(f"no free coordinator port in {PORT_TRIES} tries")


@pytest.mark.slow
@pytest.mark.distributed
@needs_keras("3.10", "older Keras calls jax.spmd_mode, which this JAX lacks")
def test_data_parallel_fit_on_two_processes_equals_one_process_on_the_global_batch(
    subprocess_env, tmp_path
):
    # Each process trains on its half of every global batch of 16: only
    # gradients averaged across the processes give the weights of one process
    # that sees the whole batch (two unsynchronised runs would not).
    outputs = _data_parallel_outputs(_jax_env(subprocess_env), tmp_path)
    first, second, one = (_report(output) for output in outputs)
    assert first["devices"] == 2 and first["local_devices"] == 1
    assert one["devices"] == 1
    assert first["weights"] == second["weights"]
    np.testing.assert_allclose(first["weights"], one["weights"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(first["losses"], one["losses"], rtol=1e-5)
    assert first["losses"][-1] < first["losses"][0], first["losses"]
