"""Side-by-side attention training steps on a GPU through JAX or PyTorch.

    KERAS_BACKEND=jax python benchmarks/gpu.py [--lengths 512,2048,8192]
    KERAS_BACKEND=torch python benchmarks/gpu.py --dtype bfloat16

For each sequence length it runs, each in a fresh process, a training step
(forward, backward, SGD update via `model.train_on_batch`) of
`keras_selfattn.MultiHeadAttention(8, 64)`, `keras_selfattn.SelfAttention(512,
num_heads=8)` and `keras.layers.MultiHeadAttention(8, 64)` at batch 8 and
model width 512, and prints the median step time, the peak device memory and
the ratios ours / Keras as a markdown table. With `--repeats R` (default 3)
each length runs R rounds of one process per implementation, the order
rotated each round (alternating), and a row gives the median of the
processes' median step times and the largest peak; `--repeats 1` is a
quick single pass in a fixed order. With the table it prints the command,
the machine and the versions (with the GPU's name).
Timing thresholds never go into tests; this script only reports.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# `from benchmarks import _environment` from any working folder.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _environment

IMPLEMENTATIONS = ("keras_mha", "ours_mha", "ours_self")


def _layer(name: str):
    import keras

    import keras_selfattn

    if name == "keras_mha":
        return keras.layers.MultiHeadAttention(8, 64), True
    if name == "ours_mha":
        return keras_selfattn.MultiHeadAttention(8, 64), True
    return keras_selfattn.SelfAttention(512, num_heads=8), False


def _peak_bytes() -> int:
    import keras

    if keras.backend.backend() == "torch":
        import torch

        if not torch.cuda.is_available():
            return 0
        return int(torch.cuda.max_memory_allocated())
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return int(stats.get("peak_bytes_in_use", 0))


def _measure(name: str, length: int, batch: int, dtype: str, steps: int) -> dict:
    """One configuration, in this process: median step ms and peak bytes."""
    import keras
    import numpy as np

    if dtype != "float32":
        keras.config.set_dtype_policy(f"mixed_{dtype}")
    layer, two_inputs = _layer(name)
    inputs = keras.Input((length, 512))
    outputs = layer(inputs, inputs) if two_inputs else layer(inputs)
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.SGD(1e-3), loss="mse", jit_compile="auto")
    x = np.random.default_rng(0).normal(size=(batch, length, 512)).astype("float32")
    times = []
    for step in range(steps + 2):
        start = time.perf_counter()
        loss = model.train_on_batch(x, x)
        float(loss)  # waits for the device
        if step >= 2:
            times.append((time.perf_counter() - start) * 1e3)
    return {"ms": statistics.median(times), "peak": _peak_bytes()}


def _child(args) -> None:
    try:
        result = _measure(args.child, args.length, args.batch, args.dtype, args.steps)
    except Exception as error:  # out of memory, most likely
        result = {"error": f"{type(error).__name__}: {str(error).splitlines()[0]}"}
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="512,2048,8192")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds of processes per length"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return

    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    rows = []
    for length in (int(n) for n in args.lengths.split(",")):
        runs = {name: [] for name in IMPLEMENTATIONS}
        for round_ in range(args.repeats):
            shift = round_ % len(IMPLEMENTATIONS)  # rotated: alternating
            for name in IMPLEMENTATIONS[shift:] + IMPLEMENTATIONS[:shift]:
                runs[name].append(_run_child(name, length, args))
        rows.append((length, {name: _summary(r) for name, r in runs.items()}))
    # Printed after the children: asking the backend for its device would
    # start it in this process (JAX would take most of the GPU's memory).
    print(_environment.header())
    print(f"dtype: {args.dtype}")
    _print_table(rows)


def _summary(results: list[dict]) -> dict:
    """One implementation's row from its processes: the median of their
    median step times and the largest peak, or the first error."""
    errors = [r for r in results if "error" in r]
    if errors:
        return errors[0]
    return {
        "ms": statistics.median(r["ms"] for r in results),
        "peak": max(r["peak"] for r in results),
    }


def _run_child(name: str, length: int, args) -> dict:
    """One implementation at one length, in a fresh process."""
    command = [
        sys.executable, __file__, "--child", name, "--length", str(length),
        "--batch", str(args.batch), "--dtype", args.dtype, "--steps", str(args.steps),
    ]  # fmt: skip
    output = subprocess.run(command, capture_output=True, text=True, timeout=900)
    line = [x for x in output.stdout.splitlines() if x.startswith("RESULT ")]
    return json.loads(line[-1][7:]) if line else {"error": "crashed"}


def _print_table(rows) -> None:
    def cell(result):
        if "error" in result:
            return "failed", "failed"
        return f"{result['ms']:.2f}", f"{result['peak'] / 2**30:.2f}"

    print("\n| n | impl | step ms | peak GiB | ms ratio ours/Keras | memory ratio |")
    print("|---|---|---|---|---|---|")
    for length, results in rows:
        base = results["keras_mha"]
        for name in IMPLEMENTATIONS:
            ms, peak = cell(results[name])
            ratio = memory = "-"
            if (
                name != "keras_mha"
                and "error" not in base
                and "error" not in results[name]
            ):
                ratio = f"{results[name]['ms'] / base['ms']:.2f}"
                if base["peak"] and results[name]["peak"]:  # else no statistics
                    memory = f"{results[name]['peak'] / base['peak']:.2f}"
            print(f"| {length} | {name} | {ms} | {peak} | {ratio} | {memory} |")
        for name, result in results.items():
            if "error" in result:
                print(f"<!-- n={length} {name}: {result['error']} -->")


if __name__ == "__main__":
    main()
