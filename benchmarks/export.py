"""Exported attention at run time: peak memory of the ONNX file in onnxruntime.

A model of one `keras_selfattn.SelfAttention(64, num_heads=4)` over
`(1, n, 64)` inputs is exported with `model.export(format="onnx")` on the
TensorFlow backend, once per arm and length n, and run by onnxruntime in a
fresh process that imports onnxruntime and NumPy only. Arms:

- `plain`: the plain path, which builds the (heads, n, n) weights (with an
  unlimited memory budget, so that the kernel's choice by memory,
  `plan_attention`, keeps it plain at any length on any machine);
- `chunked`: `chunk_size=256`, the chunked path as the package exports it
  (its loop over key blocks becomes one ONNX `Loop`);
- `unrolled`: the same chunked path with its loop unrolled at trace time
  (a Python loop over the blocks, the alternative to the `Loop`; the
  benchmark swaps it in, the package never builds it).

Printed per row: the ONNX file's size, the seconds of the export and of
onnxruntime's session creation, the median of 3 runs, and the run process's
peak RSS beside its after-import peak (the baseline). Both are the kernel's
high-water mark `VmHWM` of `/proc/self/status`: `ru_maxrss` would not do
here, since Linux carries it over `exec` from the parent, which imported
TensorFlow.

    python benchmarks/export.py                       # n = 1024, 2048, 4000
    python benchmarks/export.py --lengths 512 --arms plain,chunked

Timing thresholds never go into tests; this script is where it is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# `from benchmarks import _environment` from any working folder.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _environment

ARMS = ("plain", "chunked", "unrolled")
WIDTH, HEADS, CHUNK = 64, 4, 256
MIB = 1 << 20


def _unrolled_scan_blocks(step, carry, xs, ys_specs, work=None):
    """`_backend.scan_blocks` as a Python loop: one copy of `step` per block."""
    from keras import ops

    outputs = []
    for i in range(int(xs[0].shape[0])):
        carry, ys = step(carry, tuple(x[i] for x in xs))
        outputs.append(ys)
    ys = tuple(ops.stack(list(y), axis=0) for y in zip(*outputs, strict=True))
    return carry, ys


def _child_export(arm: str, n: int, path: str) -> dict:
    import keras
    import numpy as np

    import keras_selfattn
    from keras_selfattn import _backend

    if arm == "unrolled":
        _backend.scan_blocks = _unrolled_scan_blocks
    keras.utils.set_random_seed(0)
    inputs = keras.Input((n, WIDTH))
    chunk_size = None if arm == "plain" else CHUNK
    if arm == "plain":  # the plain path whatever the machine's free memory
        keras_selfattn.set_memory_budget(2**62)
        path_plan = keras_selfattn.plan_attention(
            batch=1, heads=HEADS, q_len=n, k_len=n, dim=WIDTH // HEADS,
            value_dim=WIDTH // HEADS, backend=keras.backend.backend(),
            memory_budget=keras_selfattn.memory_budget(),
        )  # fmt: skip
        if path_plan.path != "plain":
            raise RuntimeError(f"the plain arm would take {path_plan}")
    layer = keras_selfattn.SelfAttention(WIDTH, num_heads=HEADS, chunk_size=chunk_size)
    model = keras.Model(inputs, layer(inputs))
    model(np.zeros((1, n, WIDTH), "float32"))  # export needs a called model
    start = time.perf_counter()
    model.export(path, format="onnx", verbose=False)
    return {"export_s": time.perf_counter() - start}


def _peak_rss() -> int:
    """This process's peak RSS in bytes (`VmHWM`)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _child_run(path: str, n: int) -> dict:
    import numpy as np
    import onnxruntime as ort

    baseline = _peak_rss()
    start = time.perf_counter()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    load_s = time.perf_counter() - start
    (feed,) = session.get_inputs()
    x = np.random.default_rng(0).normal(size=(1, n, WIDTH)).astype("float32")
    times = []
    for _ in range(4):  # The first run warms up; the median of the other 3.
        start = time.perf_counter()
        session.run(None, {feed.name: x})
        times.append(time.perf_counter() - start)
    peak = _peak_rss()
    return {
        "load_s": load_s,
        "run_s": statistics.median(times[1:]),
        "peak_mib": peak / MIB,
        "baseline_mib": baseline / MIB,
    }


def _spawn(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _environment_lines() -> str:
    """The machine and the versions, with the exporters' own."""
    import onnxruntime
    import tf2onnx

    return (
        f"date: {_environment.now()}\n"
        f"machine: {_environment.machine()}\n"
        f"versions: {_environment.versions()}, tf2onnx {tf2onnx.__version__}, "
        f"onnxruntime {onnxruntime.__version__}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,2048,4000")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        if kind == "export":
            result = _child_export(rest[0], int(rest[1]), rest[2])
        else:
            result = _child_run(rest[0], int(rest[1]))
        print(json.dumps(result))
        return 0

    arms = args.arms.split(",")
    lengths = [int(n) for n in args.lengths.split(",")]
    print(_environment_lines())
    print("command: python " + shlex.join(["benchmarks/export.py", *sys.argv[1:]]))
    print(
        f"SelfAttention({WIDTH}, num_heads={HEADS}), input (1, n, {WIDTH}); "
        f"chunk_size={CHUNK} for the chunked arms"
    )
    print()
    print(
        "| n | arm | ONNX file MiB | export s | session s | run s "
        "| peak RSS MiB | after-import MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for n in lengths:
            for arm in arms:
                path = os.path.join(folder, f"{arm}-{n}.onnx")
                row = _spawn("export", arm, str(n), path)
                if "error" not in row:
                    row.update(_spawn("run", path, str(n)))
                if "error" in row:
                    print(f"| {n} | {arm} | failed: {row['error']} |")
                    continue
                size = os.path.getsize(path) / MIB
                print(
                    f"| {n} | {arm} | {size:.2f} | {row['export_s']:.1f} "
                    f"| {row['load_s']:.2f} | {row['run_s']:.3f} "
                    f"| {row['peak_mib']:.0f} | {row['baseline_mib']:.0f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
