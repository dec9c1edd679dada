"""Attention side by side: keras_selfattn against keras.layers.MultiHeadAttention.

One training step (forward and backward with a `tf.GradientTape`, under
`tf.function`) at batch 8 and model dim 512, for three layers:

- `keras_selfattn.SelfAttention(512, num_heads=8)` ("SelfAttention"),
- `keras_selfattn.MultiHeadAttention(8, 64)` ("MHA (ours)"),
- `keras.layers.MultiHeadAttention(8, 64)` ("Keras MHA"), the baseline.

What it measures, per sequence length n:

- the median step time in ms, the three layers alternating in one process,
  and the ratios ours/Keras;
- the achieved GFLOP/s (model FLOPs: projections, Q·Kᵀ and P·V, forward
  plus backward = 3x forward; the chunked path's recomputation is not
  counted), against the machine's `tf.matmul` float32 rate measured in the
  same run (4096 x 4096 x 4096);
- the peak RSS of a training step, each layer and n in a fresh process,
  beside that process's after-import RSS (the baseline);
- the longest sequence each layer can train at batch 1 within 16 GB, by
  doubling from 1024 (`--search-start`, `--search-factor`).

Shapes: `--heads` (key_dim = dim / heads), `--mask padded` (each sequence of
a random length from n/4 to n, as Keras masks), `--image` (inputs of
(batch, n, n, dim): attention over all n² positions of a feature map, the
default `attention_axes`; `MultiHeadAttention` only).

A configuration predicted not to fit in memory is skipped and reported as
such; a child process that passes the limit anyway is stopped by a watchdog.

    python benchmarks/attention.py                # everything (long: ~1 h on 2 cores)
    python benchmarks/attention.py --quick        # a small check (3.5 min*)
    python benchmarks/attention.py --lengths 128,512 --no-search
    python benchmarks/attention.py --sweep --lengths 512,1024,2048,4096,8192 --steps 3

(*) 3 min 36 s wall on a 2-core Intel Xeon, 2026-12-04, load average 1 at
start (`/usr/bin/time`).

Timing thresholds never go into tests; this script is where speed is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# `from benchmarks._memory import ...` from any working folder.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _environment
from benchmarks._memory import status_kib, watchdog

IMPLS = {
    "selfattention": "SelfAttention",
    "mha": "MHA (ours)",
    "keras": "Keras MHA",
}
GB = 1e9
# Set from the command line in `main` (heads, and whether n is an image side).
_HEADS, _IMAGE = 8, False


# --------------------------------------------------------------------- child


def _make_step(impl: str, batch: int, n: int, dim: int, shape: argparse.Namespace):
    """One training step of `impl` on (batch, n, dim) inputs, or on
    (batch, n, n, dim) images with `shape.image`; with `shape.mask ==
    "padded"` each sequence has a random length from n/4 to n (seeded)."""
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_selfattn

    heads = shape.heads
    if shape.image:
        if impl == "selfattention":
            raise ValueError("SelfAttention takes sequences, not images")
        x = tf.random.normal((batch, n, n, dim))
    else:
        x = tf.random.normal((batch, n, dim))
    mask = None
    if shape.mask == "padded":
        lengths = np.random.default_rng(0).integers(n // 4, n + 1, size=batch)
        mask = tf.constant(np.arange(n)[None, :] < lengths[:, None])
    if impl == "selfattention":
        layer = keras_selfattn.SelfAttention(dim, num_heads=heads)
        layer.build(x.shape)

        def call():
            return layer(x, mask=mask, training=True)

    else:
        cls = (
            keras.layers.MultiHeadAttention
            if impl == "keras"
            else keras_selfattn.MultiHeadAttention
        )
        layer = cls(heads, dim // heads)
        layer.build(x.shape, x.shape)

        def call():
            return layer(x, x, query_mask=mask, value_mask=mask, training=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(call()))
        return loss, tape.gradient(loss, layer.trainable_weights)

    def run():
        loss, grads = step()
        loss.numpy()
        return grads

    return run


def _child_matmul() -> dict:
    import numpy as np
    import tensorflow as tf

    size = 4096
    a = tf.random.normal((size, size))
    b = tf.random.normal((size, size))
    matmul = tf.function(lambda: tf.matmul(a, b))
    matmul().numpy()
    times = []
    for _ in range(9):
        start = time.perf_counter()
        matmul().numpy()
        times.append(time.perf_counter() - start)
    flops = 2 * size**3
    return {
        "gflops": flops / min(times) / 1e9,
        "median_gflops": flops / float(np.median(times)) / 1e9,
    }


def _child_time(impls: list[str], batch: int, n: int, dim: int, steps: int, shape):
    runs = {impl: _make_step(impl, batch, n, dim, shape) for impl in impls}
    for impl in impls:  # Trace and warm up.
        runs[impl]()
    times = {impl: [] for impl in impls}
    cpu = {impl: [] for impl in impls}
    for _ in range(steps):
        for impl in impls:  # Alternating, so that load changes hit all alike.
            start, start_cpu = time.perf_counter(), time.process_time()
            runs[impl]()
            times[impl].append(time.perf_counter() - start)
            cpu[impl].append(time.process_time() - start_cpu)
    return {"times_s": times, "cpu_s": cpu}


def _child_memory(impl: str, batch: int, n: int, dim: int, steps: int, shape):
    baseline = status_kib("VmHWM") * 1024  # After the imports (done at top).
    run = _make_step(impl, batch, n, dim, shape)
    start = time.perf_counter()
    for _ in range(steps):
        run()
    seconds = (time.perf_counter() - start) / steps
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"baseline_bytes": baseline, "peak_bytes": peak, "step_s": seconds}


def child_main(args) -> None:
    import keras  # noqa: F401  (imports done before the baseline is read)
    import tensorflow as tf  # noqa: F401

    import keras_selfattn  # noqa: F401

    if args.limit_gb:
        watchdog(args.limit_gb * GB)
    if args.child == "matmul":
        result = _child_matmul()
    elif args.child == "time":
        result = _child_time(
            args.impls.split(","), args.batch, args.n, args.dim, args.steps, args
        )
    else:
        result = _child_memory(
            args.impls, args.batch, args.n, args.dim, args.steps, args
        )
    print(json.dumps(result), flush=True)


# -------------------------------------------------------------------- parent


_SHAPE_ARGS: list[str] = []  # --heads/--mask/--image, passed to every child


def _spawn(args: list[str], timeout: float | None = None) -> dict:
    command = [sys.executable, os.path.abspath(__file__), *args, *_SHAPE_ARGS]
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
    return json.loads(lines[-1])


def flops_per_step(batch: int, n: int, dim: int) -> float:
    """Model FLOPs of one training step (3x the forward pass); `n` positions."""
    width = dim
    projections = 2 * batch * n * dim * width * 3 + 2 * batch * n * width * dim
    attention = 2 * batch * n * n * width * 2
    return 3.0 * (projections + attention)


def predicted_bytes(impl: str, batch: int, n: int, dim: int) -> float:
    """A rough peak-memory model, used only to skip what cannot fit.

    Linear part: activations, projections and their gradients (about 40
    tensors of (batch, n, dim) float32). Quadratic part: Keras keeps about
    five (batch, heads, n, n) float32 tensors when training (measured: 5.2 GB
    RSS at batch 8, n = 2048); ours, the footprint of the path that
    `plan_attention` chooses under the current memory budget (its measured
    bytes per element).
    """
    from keras_selfattn import attention

    n = n * n if _IMAGE else n  # positions
    linear = 40 * batch * n * dim * 4
    if impl == "keras":
        return linear + 5 * batch * _HEADS * n * n * 4
    plan = our_plan(batch, n, dim)
    if plan.path != "chunked":
        return linear + plan.footprint
    block = batch * _HEADS * n * plan.chunk_size
    return linear + block * attention.CHUNK_BYTES_PER_ELEMENT


def our_plan(batch: int, positions: int, dim: int):
    """The path our kernel takes for self-attention over `positions`."""
    import keras

    from keras_selfattn import attention

    return attention.plan_attention(
        batch=batch,
        heads=_HEADS,
        q_len=positions,
        k_len=positions,
        dim=dim // _HEADS,
        value_dim=dim // _HEADS,
        backend=keras.backend.backend(),
        memory_budget=attention.memory_budget(),
    )


def _path_words(plan) -> str:
    if plan.path == "chunked":
        return f"chunked ({plan.chunk_size})"
    return plan.path


def _mem_available() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return float("inf")


def _fmt(value, spec=".0f", missing="—"):
    return missing if value is None else format(value, spec)


def _ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def run_benchmark(args) -> dict:
    impls = args.impls.split(",")
    lengths = [int(n) for n in args.lengths.split(",")]
    limit = args.limit_gb * GB
    started = _environment.now()
    print(f"# Attention benchmark\n\nStarted: {started}\n")
    print(f"Machine: {_environment.machine()}\n")
    print(f"Versions: {_environment.versions()}\n")
    command = shlex.join(["python", "benchmarks/attention.py", *sys.argv[1:]])
    print(f"Command: `{command}`\n", flush=True)
    results = {
        "started": started,
        "command": command,
        "machine": _environment.machine(),
        "versions": _environment.versions(),
    }

    first = _spawn(["--child", "matmul"])
    matmul = first.get("gflops")
    results["matmul_gflops"] = matmul
    results["matmul_runs"] = [first]
    print(f"tf.matmul float32 (4096^3): {first}\n", flush=True)

    # ---- Step time and throughput, alternating in one process per n.
    def steps_for(n):  # Long sequences take minutes per step on a small CPU.
        return args.steps if n <= args.long_from else min(args.steps, args.long_steps)

    timing = {}
    for n in [] if args.no_timing else lengths:
        fits, skipped = [], {}
        budget = min(limit, 0.8 * _mem_available())
        for impl in impls:
            need = predicted_bytes(impl, args.batch, n, args.dim)
            if need > budget:
                skipped[impl] = f"predicted {need / GB:.1f} GB > {budget / GB:.1f} GB"
            else:
                fits.append(impl)
        out = {"skipped": skipped, "median_ms": {}}
        if fits:
            result = _spawn(
                [
                    "--child", "time", "--impls", ",".join(fits),
                    "--batch", str(args.batch), "--n", str(n),
                    "--dim", str(args.dim), "--steps", str(steps_for(n)),
                    "--limit-gb", str(budget / GB),
                ]
            )  # fmt: skip
            if "times_s" in result:
                for impl, times in result["times_s"].items():
                    out["median_ms"][impl] = 1e3 * statistics.median(times)
                out["cpu_ms"] = {
                    impl: 1e3 * statistics.median(times)
                    for impl, times in result["cpu_s"].items()
                }
                out["times_s"] = result["times_s"]
            else:
                for impl in fits:
                    skipped[impl] = result.get("error", "over the memory limit")
        timing[n] = out
        print(f"n={n}: {json.dumps(out['median_ms'])} skipped={skipped}", flush=True)
    results["timing"] = timing

    # ---- Peak RSS, one fresh process per layer and n.
    memory = {}
    if not args.no_memory:
        for n in [] if args.no_timing else lengths:
            memory[n] = {}
            for impl in impls:
                budget = min(limit, 0.8 * _mem_available())
                need = predicted_bytes(impl, args.batch, n, args.dim)
                if need > budget:
                    why = f"predicted {need / GB:.1f} GB > {budget / GB:.1f} GB"
                    memory[n][impl] = {"skipped": why}
                    continue
                memory[n][impl] = _spawn(
                    [
                        "--child", "memory", "--impls", impl,
                        "--batch", str(args.batch), "--n", str(n),
                        "--dim", str(args.dim), "--steps", "1",
                        "--limit-gb", str(budget / GB),
                    ]
                )  # fmt: skip
                print(f"memory n={n} {impl}: {memory[n][impl]}", flush=True)
    results["memory"] = memory

    # ---- Longest trainable sequence at batch 1 within the limit.
    search = {}
    if not args.no_search:
        for impl in args.search_impls.split(",") if args.search_impls else impls:
            longest, peak, reason = None, None, None
            n = args.search_start
            while True:
                if n > args.search_max:
                    reason = f"search capped at n={args.search_max} (--search-max)"
                    break
                budget = min(limit, 0.9 * _mem_available())
                need = predicted_bytes(impl, 1, n, args.dim)
                if need > budget:
                    reason = (
                        f"n={n} predicted {need / GB:.1f} GB > {budget / GB:.1f} GB"
                    )
                    break
                result = _spawn(
                    [
                        "--child", "memory", "--impls", impl, "--batch", "1",
                        "--n", str(n), "--dim", str(args.dim), "--steps", "1",
                        "--limit-gb", str(budget / GB),
                    ]
                )  # fmt: skip
                print(f"search {impl} n={n}: {result}", flush=True)
                if "peak_bytes" not in result or result["peak_bytes"] > limit:
                    reason = f"n={n}: " + (
                        "over the limit" if result.get("over_limit") else
                        result.get("error", "over the limit")
                    )  # fmt: skip
                    break
                longest, peak = n, result["peak_bytes"]
                n = int(n * args.search_factor)
            search[impl] = {"longest": longest, "peak_bytes": peak, "stop": reason}
    results["search"] = search
    if not args.no_timing:
        last = _spawn(["--child", "matmul"])
        results["matmul_runs"].append(last)
        rates = [r["gflops"] for r in results["matmul_runs"] if "gflops" in r]
        results["matmul_gflops"] = max(rates) if rates else None
        print(f"tf.matmul float32 again at the end: {last}", flush=True)
    print()
    print(markdown(results, args, impls, lengths))
    return results


def run_sweep(args) -> dict:
    """Ours (`--sweep-impl`) against Keras by n at each `--sweep-batches`.

    Per row (batch, n): `--sweep-repeats` fresh timing processes, each with
    the two layers alternating for `--steps` steps (the row's time is the
    median over repeats of each process's median), and one fresh memory
    process per layer (peak RSS); Keras is reported as "did not fit" where
    its predicted peak passes `--limit-gb`, and ours is then timed in
    `--sweep-solo-repeats` processes of `--sweep-solo-steps` steps (there is
    no ratio to take). Ratios are
    ours / Keras; the path is the one `plan_attention` chose for ours.
    """
    ours = args.sweep_impl
    limit = args.limit_gb * GB
    command = shlex.join(["python", "benchmarks/attention.py", *sys.argv[1:]])
    print(f"# Attention sweep\n\nStarted: {_environment.now()}\n")
    print(f"Machine: {_environment.machine()}\n")
    print(f"Versions: {_environment.versions()}\n")
    print(f"Command: `{command}`\n", flush=True)
    matmul = _spawn(["--child", "matmul"])
    print(f"tf.matmul float32 4096^3 at the start: {matmul}", flush=True)
    rows = []
    for batch in (int(b) for b in args.sweep_batches.split(",")):
        for n in (int(n) for n in args.lengths.split(",")):
            budget = min(limit, 0.8 * _mem_available())
            fits = [
                impl
                for impl in (ours, "keras")
                if predicted_bytes(impl, batch, n, args.dim) <= budget
            ]
            plan = our_plan(batch, n * n if args.image else n, args.dim)
            row = {"batch": batch, "n": n, "path": _path_words(plan)}
            row.update(ms={}, peak_gb={}, baseline_gb={})
            medians = {impl: [] for impl in fits}
            row["keras_fits"] = "keras" in fits
            repeats, steps = (
                (args.sweep_repeats, args.steps)
                if row["keras_fits"]
                else (args.sweep_solo_repeats, args.sweep_solo_steps)
            )
            for _ in range(repeats if fits else 0):
                result = _spawn(
                    [
                        "--child", "time", "--impls", ",".join(fits),
                        "--batch", str(batch), "--n", str(n), "--dim", str(args.dim),
                        "--steps", str(steps), "--limit-gb", str(budget / GB),
                    ]
                )  # fmt: skip
                if "error" in result:
                    row.setdefault("errors", []).append(result["error"])
                for impl, times in result.get("times_s", {}).items():
                    medians[impl].append(statistics.median(times))
            row["repeats"], row["steps"] = (repeats, steps) if fits else (0, 0)
            for impl in fits:
                if medians[impl]:
                    row["ms"][impl] = 1e3 * statistics.median(medians[impl])
                peak = _spawn(
                    [
                        "--child", "memory", "--impls", impl, "--batch", str(batch),
                        "--n", str(n), "--dim", str(args.dim), "--steps", "1",
                        "--limit-gb", str(budget / GB),
                    ]
                )  # fmt: skip
                if "peak_bytes" in peak:
                    row["peak_gb"][impl] = peak["peak_bytes"] / GB
                    row["baseline_gb"][impl] = peak["baseline_bytes"] / GB
            rows.append(row)
            print(json.dumps(row), flush=True)
    matmul_end = _spawn(["--child", "matmul"])
    print(f"tf.matmul float32 4096^3 at the end: {matmul_end}", flush=True)
    print("\n" + sweep_markdown(rows, ours, args))
    return {"command": command, "matmul": [matmul, matmul_end], "rows": rows}


def sweep_markdown(rows: list[dict], ours: str, args) -> str:
    """The sweep's table: one row per (batch, n)."""
    header = (
        f"| batch | n | path (ours) | {IMPLS[ours]} ms | Keras ms | time ratio "
        "| peak GB: ours, Keras | memory ratio (above baseline) |"
    )
    lines = [
        f"{_shape_words(args)}; width {args.dim}, {args.heads} heads; forward + "
        f"backward under `tf.function`; time: median over processes of each "
        f"one's median of {args.steps} alternating steps; peak RSS of a fresh "
        "process per layer. Ratios are ours / Keras.",
        "",
        header,
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ms, peaks, base = row["ms"], row["peak_gb"], row["baseline_gb"]
        keras_ms = ms.get("keras")
        above = {impl: peaks[impl] - base[impl] for impl in peaks}
        lines.append(
            f"| {row['batch']} | {row['n']} | {row['path']} | {_fmt(ms.get(ours))} | "
            f"{_fmt(keras_ms) if row['keras_fits'] else 'did not fit'} | "
            f"{_fmt(_ratio(ms.get(ours), keras_ms), '.2f')} | "
            f"{_fmt(peaks.get(ours), '.2f')}, {_fmt(peaks.get('keras'), '.2f')} | "
            f"{_fmt(_ratio(above.get(ours), above.get('keras')), '.2f')} |"
        )
    return "\n".join(lines)


def _shape_words(args) -> str:
    if args.image:
        return "inputs (batch, n, n, dim) images, attention over all n² positions"
    if args.mask == "padded":
        return "padding masks (random lengths n/4 to n)"
    return "no mask"


def markdown(results: dict, args, impls: list[str], lengths: list[int]) -> str:
    matmul = results.get("matmul_gflops")
    ours = [i for i in impls if i != "keras"]
    with_keras = "keras" in impls
    lines = []
    if results.get("timing"):
        lines += [
            f"Step time (median of {args.steps} steps, {args.long_steps} above "
            f"n={args.long_from}; wall ms), batch {args.batch}, "
            f"model dim {args.dim}, {args.heads} heads, {_shape_words(args)}, "
            "forward + backward under `tf.function`; "
            "throughput in model GFLOP/s and % of `tf.matmul` "
            f"({_fmt(matmul, '.0f')} GFLOP/s, best of the runs):",
            "",
        ]
        header = ["n"] + [f"{IMPLS[i]} ms" for i in impls]
        header += [f"{IMPLS[i]} / Keras" for i in ours if with_keras]
        header += [f"{IMPLS[i]} GFLOP/s (%)" for i in impls]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for n in lengths:
            ms = results["timing"].get(n, {}).get("median_ms", {})
            row = [str(n)] + [_fmt(ms[i]) if i in ms else "skipped" for i in impls]
            if with_keras:
                row += [_fmt(_ratio(ms.get(i), ms.get("keras")), ".2f") for i in ours]
            for i in impls:
                if i in ms and matmul:
                    positions = n * n if args.image else n
                    flops = flops_per_step(args.batch, positions, args.dim)
                    rate = flops / ms[i] * 1e3 / 1e9
                    row.append(f"{rate:.0f} ({100 * rate / matmul:.0f}%)")
                else:
                    row.append("—")
            lines.append("| " + " | ".join(row) + " |")
        lines += [
            "",
            "Fastest of the same steps (min, wall ms; the step least disturbed "
            "by other processes' load):",
            "",
        ]
        header = ["n"] + [f"{IMPLS[i]} min ms" for i in impls]
        header += [f"{IMPLS[i]} / Keras" for i in ours if with_keras]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for n in lengths:
            times = results["timing"].get(n, {}).get("times_s", {})
            ms = {i: 1e3 * min(t) for i, t in times.items()}
            row = [str(n)] + [_fmt(ms[i]) if i in ms else "skipped" for i in impls]
            if with_keras:
                row += [_fmt(_ratio(ms.get(i), ms.get("keras")), ".2f") for i in ours]
            lines.append("| " + " | ".join(row) + " |")
        skipped = [
            f"- n={n}, {IMPLS[i]}: {why}"
            for n in lengths
            for i, why in results["timing"].get(n, {}).get("skipped", {}).items()
        ]
        if skipped:
            lines += ["", "Skipped:", *skipped]

    if results.get("memory"):
        lines += [
            "",
            "Peak RSS of a training step (GB), fresh process per cell; in "
            "brackets the after-import baseline; ratio = (peak - baseline) "
            "ours / Keras:",
            "",
        ]
        header = ["n"] + [IMPLS[i] for i in impls]
        header += [f"{IMPLS[i]} / Keras" for i in ours if with_keras]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for n in lengths:
            cells = results["memory"].get(n, {})
            row = [str(n)]
            above = {}
            for i in impls:
                c = cells.get(i, {})
                if "peak_bytes" in c:
                    above[i] = c["peak_bytes"] - c["baseline_bytes"]
                    row.append(
                        f"{c['peak_bytes'] / GB:.2f} ({c['baseline_bytes'] / GB:.2f})"
                    )
                else:
                    row.append(
                        "skipped: " + c.get("skipped", c.get("error", "over limit"))
                    )
            if with_keras:
                row += [
                    _fmt(_ratio(above.get(i), above.get("keras")), ".2f") for i in ours
                ]
            lines.append("| " + " | ".join(row) + " |")

    if results.get("search"):
        lines += [
            "",
            f"Longest {'image side' if args.image else 'sequence'} trainable at "
            f"batch 1 within {args.limit_gb:g} GB ({_shape_words(args)}; "
            f"from {args.search_start}, times {args.search_factor:g} each step):",
            "",
            "| layer | longest n | peak RSS at that n (GB) | stopped because |",
            "|---|---|---|---|",
        ]
        for i, found in results["search"].items():
            peak = found.get("peak_bytes")
            lines.append(
                f"| {IMPLS[i]} | {_fmt(found.get('longest'), 'd', 'none')} | "
                f"{_fmt(peak and peak / GB, '.2f')} | {found.get('stop')} |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n=128,256; 3 steps")
    parser.add_argument("--lengths", default="128,512,2048,8192")
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per layer")
    parser.add_argument("--long-steps", type=int, default=3)
    parser.add_argument(
        "--long-from", type=int, default=4096, help="n above which --long-steps"
    )
    parser.add_argument("--limit-gb", type=float, default=16.0)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--no-search", action="store_true")
    parser.add_argument("--search-max", type=int, default=65536)
    parser.add_argument("--search-impls", help="layers to search; default --impls")
    parser.add_argument(
        "--no-timing", action="store_true", help="skip step times and memory"
    )
    parser.add_argument("--heads", type=int, default=8, help="key_dim = dim / heads")
    parser.add_argument("--mask", choices=["none", "padded"], default="none")
    parser.add_argument(
        "--image", action="store_true", help="n is the side of (n, n) images"
    )
    parser.add_argument("--search-start", type=int, default=1024)
    parser.add_argument("--search-factor", type=float, default=2.0)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--sweep", action="store_true", help="ours vs Keras by n and batch (issue 20)"
    )
    parser.add_argument("--sweep-batches", default="8,2")
    parser.add_argument("--sweep-repeats", type=int, default=3)
    parser.add_argument(
        "--sweep-solo-repeats",
        type=int,
        default=1,
        help="timing processes of a row where Keras does not fit",
    )
    parser.add_argument(
        "--sweep-solo-steps",
        type=int,
        default=1,
        help="timed steps per process of a row where Keras does not fit",
    )
    parser.add_argument("--sweep-impl", default="mha", choices=["mha", "selfattention"])
    parser.add_argument("--child", choices=["matmul", "time", "memory"])
    parser.add_argument("--n", type=int)
    args = parser.parse_args(argv)
    global _HEADS, _IMAGE
    _HEADS, _IMAGE = args.heads, args.image
    _SHAPE_ARGS[:] = ["--heads", str(args.heads), "--mask", args.mask]
    _SHAPE_ARGS.extend(["--image"] if args.image else [])
    if args.child:
        child_main(args)
        return 0
    if args.image:  # SelfAttention takes sequences (its child would fail for all)
        if args.impls == parser.get_default("impls"):
            args.impls = "mha,keras"
        asked = args.impls.split(",") + (args.search_impls or "").split(",")
        if "selfattention" in asked or args.sweep_impl == "selfattention":
            parser.error("--image: SelfAttention takes sequences, not images")
    if args.quick:
        args.lengths, args.steps = "128,256", 3
        args.search_max = min(args.search_max, 2048)
    results = run_sweep(args) if args.sweep else run_benchmark(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
