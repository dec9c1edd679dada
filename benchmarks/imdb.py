"""IMDB demo: the default model on keras_selfattn vs on keras.layers.MultiHeadAttention.

Trains the default `keras-selfattn train` configuration twice in one run, on
the bundled 20,000 / 5,000 split, through `train(TrainConfig(...))`: once as
shipped (attention through `keras_selfattn.MultiHeadAttention` and the
package's kernel), once with the same architecture, data, seed and schedule
but `attention="keras"` (`keras.layers.MultiHeadAttention` inside the encoder
block). Prints both test accuracies, both training times (as `train` reports
them: model building, adapting, fitting and saving; not evaluation) and the
ratio, with the machine, the versions and the exact command. With
`--repeats N` the two sides alternate N times and the medians are reported
(the machine may be shared: alternating spreads its load over both sides).

    python benchmarks/imdb.py                 # the full comparison (2 trainings)
    python benchmarks/imdb.py --limit 2000    # a quick look
    python benchmarks/imdb.py --only ours     # one side only
    python benchmarks/imdb.py --limit 4000 --repeats 3   # alternating, medians

Accuracy is never asserted in tests; this script is where it is measured.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def run_one(name: str, attention: str, args) -> dict:
    """One training run of `train(TrainConfig(...))`, in a scratch folder."""
    import keras

    from keras_selfattn.imdb.train import TrainConfig, train

    keras.backend.clear_session()
    with tempfile.TemporaryDirectory() as folder:
        config = TrainConfig(
            limit=args.limit,
            seed=args.seed,
            attention=attention,
            out=os.path.join(folder, "imdb.keras"),
            verbose=2,
        )
        result = train(config)
    val = result.history.get("val_accuracy", [float("nan")])[-1]
    print(
        f"[{name}] test accuracy {result.accuracy:.4f}, val accuracy {val:.4f}, "
        f"trained in {result.seconds:.0f} s",
        flush=True,
    )
    return {"name": name, "accuracy": result.accuracy, "seconds": result.seconds}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--only", choices=["ours", "keras"], default=None)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    from keras_selfattn import __version__
    from keras_selfattn.imdb.model import DEFAULTS
    from keras_selfattn.imdb.train import cpu_name, describe_device

    if args.seed is None:
        args.seed = DEFAULTS["seed"]
    sides = [("keras_selfattn", "keras_selfattn"), ("keras MHA", "keras")]
    if args.only == "ours":
        sides = sides[:1]
    elif args.only == "keras":
        sides = sides[1:]
    runs = [
        run_one(name, attention, args)
        for _ in range(max(1, args.repeats))
        for name, attention in sides
    ]
    results = []
    for name, _ in sides:
        mine = [r for r in runs if r["name"] == name]
        results.append(
            {
                "name": name,
                "accuracy": float(np.median([r["accuracy"] for r in mine])),
                "seconds": float(np.median([r["seconds"] for r in mine])),
                "all_seconds": [round(r["seconds"]) for r in mine],
            }
        )

    print()
    print("=== IMDB benchmark ===")
    print("command: " + shlex.join([sys.executable, *sys.argv]))
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores, {platform.platform()}")
    print(f"device: {describe_device()[0]}")
    print(
        f"versions: python {platform.python_version()}, keras {keras.__version__}, "
        f"tensorflow {tf.__version__}, numpy {np.__version__}, "
        f"keras_selfattn {__version__}"
    )
    limit = f", first {args.limit} training reviews" if args.limit else ""
    print(f"data: bundled IMDB reviews{limit}")
    print(f"defaults: {DEFAULTS}")
    median = "median " if args.repeats > 1 else ""
    for r in results:
        print(
            f"{r['name']:>15}: {median}test accuracy {r['accuracy']:.4f}, "
            f"{median}training {r['seconds']:.0f} s (runs: {r['all_seconds']} s)"
        )
    if len(results) == 2:
        ours, theirs = results
        print(
            f"ratio ours/keras: time {ours['seconds'] / theirs['seconds']:.2f}, "
            f"accuracy {ours['accuracy'] - theirs['accuracy']:+.4f} (difference)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
