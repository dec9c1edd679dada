"""Long-context training of a keras-hub GPT-2: Keras's attention vs converted.

A GPT-2-shaped `keras_hub.models.GPT2Backbone` built from a config (4 layers,
hidden 256, 4 heads, intermediate 1024, vocabulary 512, dropout 0; no
download), one training step at batch 1 on TensorFlow (forward, the
language-model loss through the tied embedding, backward, Adam), with
keras-hub's attention (Keras's) and converted
(`keras_selfattn.convert(backbone, chunk_size=...)`, which puts every layer
on the kernel's chunked path whatever the length; without `chunk_size` the
kernel would take it only beyond its memory budget). Each (attention, length) runs in
a fresh process: its peak memory (`ru_maxrss`) beside the after-import
baseline, and the step time, the median of `--steps` after one warm-up
(`--steps 0`: the warm-up step alone, tracing included, for lengths where
one step takes many minutes; `--long-steps` from `--long-from` tokens, by
default 0 from 16,384).
The child checks which path ran (the calls of the kernel's chunked path).
Then the longest trainable context of each within `--limit-gb`: estimated
from the measured memory growth and confirmed by a run at the estimate (15%
shorter after a run over the limit, up to `--confirm-tries` runs; `--confirm`
names the attentions to confirm).

    python benchmarks/long_context.py                   # 2,048, 8,192, 32,768
    python benchmarks/long_context.py --lengths 64 128 --layers 2 --hidden 32 \
        --heads 2 --intermediate 64 --vocabulary 50 --chunk-size 16 \
        --steps 1 --no-longest                          # a check: minutes

A smaller model than the default (as in the check) writes its results to
`long_context_check.json` in the temporary folder unless `--out` is given,
never over the committed `benchmarks/results/long_context.json`.

It prints the machine, the versions and the exact command, and writes
`benchmarks/results/long_context.json` (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# `from benchmarks._memory import ...` from any working folder.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _environment
from benchmarks._memory import status_kib, watchdog

GB = 1e9
IMPLS = ("keras", "converted")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------- child


def child(args) -> dict:
    import resource

    import keras
    import keras_hub
    import numpy as np
    import tensorflow as tf

    import keras_selfattn
    from keras_selfattn import attention

    baseline = status_kib("VmHWM") * 1024  # after the imports
    if args.limit_gb:
        watchdog(args.limit_gb * GB)
    chunks = []
    original = attention._chunked_attention

    def spy(*a, **options):
        chunks.append(options["chunk_size"])
        return original(*a, **options)

    attention._chunked_attention = spy
    n = args.n
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=args.vocabulary,
        num_layers=args.layers,
        num_heads=args.heads,
        hidden_dim=args.hidden,
        intermediate_dim=args.intermediate,
        max_sequence_length=n,
        dropout=0.0,
    )
    converted = 0
    if args.child == "converted":
        converted = len(keras_selfattn.convert(backbone, args.chunk_size).converted)
    optimizer = keras.optimizers.Adam(1e-4)
    variables = backbone.trainable_variables
    ids = tf.constant(np.random.default_rng(0).integers(1, args.vocabulary, (1, n)))
    mask = tf.ones((1, n), dtype=bool)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            hidden = backbone({"token_ids": ids, "padding_mask": mask}, training=True)
            logits = backbone.token_embedding(hidden, reverse=True)
            loss = keras.ops.mean(
                keras.losses.sparse_categorical_crossentropy(
                    ids[:, 1:], logits[:, :-1], from_logits=True
                )
            )
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    start = time.perf_counter()
    float(step())  # warm-up: traces and builds the optimizer
    first = time.perf_counter() - start
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        float(step())
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "baseline_bytes": baseline,
        "peak_bytes": peak,
        # With --steps 0 the first step (tracing included) is the only one.
        "median_step_s": statistics.median(times or [first]),
        "step_s": times,
        "first_step_s": first,
        "converted_layers": converted,
        # Traced once: one entry per attention layer that took the chunked path.
        "chunked_path_blocks": sorted(set(chunks)),
        "chunked_path_layers": len(chunks),
    }


# -------------------------------------------------------------------- parent


def _spawn(impl: str, n: int, args, timeout: float | None) -> dict:
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        impl,
        "--n",
        str(n),
        *_model_args(args),
        f"--steps={args.long_steps if n >= args.long_from else args.steps}",
    ]
    env = {
        **os.environ,
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
    return json.loads(lines[-1])


def _model_args(args) -> list[str]:
    return [
        f"--layers={args.layers}",
        f"--hidden={args.hidden}",
        f"--heads={args.heads}",
        f"--intermediate={args.intermediate}",
        f"--vocabulary={args.vocabulary}",
        f"--chunk-size={args.chunk_size}",
        f"--limit-gb={args.limit_gb}",
    ]


def _versions() -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import keras, keras_hub, tensorflow as tf, keras_selfattn as s; "
            "print(f'TensorFlow {tf.__version__}, Keras {keras.__version__}, "
            "keras-hub {keras_hub.__version__}, keras_selfattn {s.__version__}, "
            "backend {keras.backend.backend()}')",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    return f"Python {platform.python_version()}, " + out.stdout.strip()


def estimate_longest(points: list[tuple[int, float]], limit: float) -> int | None:
    """The length whose peak memory reaches `limit`, from (n, bytes) points:
    a quadratic through three or more, a line through two, rounded down to
    a multiple of 256 (or of 64 below 1024)."""
    import numpy as np

    if len(points) < 2:
        return None
    n, used = (np.array(v, dtype=float) for v in zip(*points, strict=True))
    coeffs = np.polyfit(n, used, 2 if len(points) >= 3 else 1)
    if coeffs[0] < 0 and len(coeffs) == 3:  # noise: fall back to a line
        coeffs = np.polyfit(n, used, 1)
    roots = [r.real for r in np.roots(np.append(coeffs[:-1], coeffs[-1] - limit))]
    best = max((r for r in roots if r > 0), default=None)
    if best is None:
        return None
    step = 256 if best >= 1024 else 64
    return int(best // step * step)


def run(args) -> dict:
    command = shlex.join([sys.executable, *sys.argv])
    results = {
        "started": _environment.now(),
        "command": command,
        "machine": _environment.machine(),
        "versions": _versions(),
        "model": {
            "layers": args.layers,
            "hidden": args.hidden,
            "heads": args.heads,
            "intermediate": args.intermediate,
            "vocabulary": args.vocabulary,
            "batch": 1,
        },
        "chunk_size": args.chunk_size,
        "limit_gb": args.limit_gb,
        "runs": [],
        "longest": {},
    }
    print(
        f"{results['started']}\n$ {command}\n{results['machine']}\n"
        f"{results['versions']}",
        flush=True,
    )
    for n in args.lengths:
        for impl in args.impls:
            result = {"impl": impl, "n": n, **_spawn(impl, n, args, args.timeout)}
            results["runs"].append(result)
            print(_line(result), flush=True)
    if args.longest:
        for impl in args.impls:
            points = [
                (r["n"], r["peak_bytes"])
                for r in results["runs"]
                if r["impl"] == impl and "peak_bytes" in r
            ]
            guess = estimate_longest(points, args.limit_gb * GB)
            entry = {"estimate": guess, "from": [p[0] for p in points]}
            # Confirmed by a run at the estimate; over the limit, 15% shorter,
            # up to --confirm-tries runs.
            entry["confirmations"] = []
            n = guess
            tries = args.confirm_tries if guess and impl in args.confirm else 0
            for _ in range(tries):
                check = {"impl": impl, "n": n, **_spawn(impl, n, args, None)}
                entry["confirmations"].append(check)
                print("longest? " + _line(check), flush=True)
                if "peak_bytes" in check:
                    entry["confirmed"] = n
                    break
                n = int(n * 0.85 // 256 * 256) or 64
            results["longest"][impl] = entry
    results["finished"] = _environment.now()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out}")
    return results


def _line(r: dict) -> str:
    head = f"{r['impl']:>9} n={r['n']:>6}: "
    if "peak_bytes" not in r:
        return head + ("over the limit" if r.get("over_limit") else r.get("error", "?"))
    path = (
        f"chunked path, blocks {r['chunked_path_blocks']}"
        if r["chunked_path_layers"]
        else "no chunked path"
    )
    return head + (
        f"peak {r['peak_bytes'] / GB:.2f} GB (baseline {r['baseline_bytes'] / GB:.2f}),"
        f" step {r['median_step_s']:.3f} s{'' if r['step_s'] else ' (first)'}, {path}"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192, 32768])
    parser.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=1024)
    parser.add_argument("--vocabulary", type=int, default=512)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument(
        "--steps", type=int, default=3, help="timed steps after the warm-up (0: none)"
    )
    parser.add_argument(
        "--long-steps", type=int, default=0, help="--steps from --long-from tokens"
    )
    parser.add_argument("--long-from", type=int, default=16384)
    parser.add_argument("--limit-gb", type=float, default=16.0)
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("--confirm-tries", type=int, default=3)
    parser.add_argument(
        "--confirm",
        nargs="*",
        choices=IMPLS,
        default=list(IMPLS),
        help="the attentions whose estimated longest context a run confirms "
        "(a run at the converted model's estimate can take hours on a CPU)",
    )
    parser.add_argument(
        "--longest", action=argparse.BooleanOptionalAction, default=True
    )
    parser.add_argument(
        "--out",
        help="default: benchmarks/results/long_context.json for the default "
        "model, else long_context_check.json in the temporary folder",
    )
    parser.add_argument("--child", choices=IMPLS, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.out is None:  # a smaller model never replaces the committed figures
        model = ("layers", "hidden", "heads", "intermediate", "vocabulary")
        default = all(getattr(args, k) == parser.get_default(k) for k in model)
        args.out = (
            os.path.join(ROOT, "benchmarks", "results", "long_context.json")
            if default
            else os.path.join(tempfile.gettempdir(), "long_context_check.json")
        )
    if args.child:
        print(json.dumps(child(args)), flush=True)
    else:
        run(args)


if __name__ == "__main__":
    main()
