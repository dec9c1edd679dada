"""IMDB demo: the default model on keras_selfattn vs on keras.layers.MultiHeadAttention.

Trains the default `keras-selfattn train` configuration twice in one run, on
the bundled 20,000 / 5,000 split: once as shipped (attention through
`keras_selfattn.MultiHeadAttention` and the package's kernel), once with the
same architecture, data, seed and schedule but `keras.layers.MultiHeadAttention`
inside the encoder block. Prints both test accuracies, both training times
(model building, adapting and fitting; not evaluation) and the ratio, with the
machine, the versions and the exact command. With `--repeats N` the two sides
alternate N times and the medians are reported (the machine may be shared:
alternating spreads its load over both sides).

    python benchmarks/imdb.py                 # the full comparison (2 trainings)
    python benchmarks/imdb.py --limit 2000    # a quick look
    python benchmarks/imdb.py --only ours     # one side only
    python benchmarks/imdb.py --limit 4000 --repeats 3   # alternating, medians

Accuracy is never asserted in tests; this script is where it is measured.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shlex
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_one(name, attention, dataset, args) -> dict:
    import keras

    from keras_selfattn.imdb import model as imdb_model

    keras.backend.clear_session()
    texts, labels = dataset.train_texts, dataset.train_labels
    n_val = max(1, round(0.05 * len(texts))) if len(texts) >= 20 else 0
    n_train = len(texts) - n_val
    defaults = imdb_model.DEFAULTS
    start = time.perf_counter()
    model = imdb_model.build_model(
        texts[:n_train],
        seed=args.seed,
        attention=attention,
        **{
            k: defaults[k]
            for k in (
                "vocab_size",
                "bigram_vocab_size",
                "max_len",
                "head_len",
                "embed_dim",
                "num_heads",
                "intermediate_dim",
                "num_layers",
                "dropout",
            )
        },
    )
    epochs, batch_size = defaults["epochs"], defaults["batch_size"]
    imdb_model.compile_model(model, epochs * math.ceil(n_train / batch_size))
    history = model.fit(
        imdb_model.ReviewBatches(
            texts[:n_train], labels[:n_train], batch_size, seed=args.seed
        ),
        validation_data=imdb_model.ReviewBatches(
            texts[n_train:], labels[n_train:], 128, shuffle=False
        )
        if n_val
        else None,
        epochs=epochs,
        verbose=2,
    )
    seconds = time.perf_counter() - start
    accuracy = imdb_model.evaluate(model, dataset.test_texts, dataset.test_labels)
    val = history.history.get("val_accuracy", [float("nan")])[-1]
    print(
        f"[{name}] test accuracy {accuracy:.4f}, val accuracy {val:.4f}, "
        f"trained in {seconds:.0f} s",
        flush=True,
    )
    return {"name": name, "accuracy": accuracy, "seconds": seconds}


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
    from keras_selfattn.imdb import data
    from keras_selfattn.imdb.model import DEFAULTS

    if args.seed is None:
        args.seed = DEFAULTS["seed"]
    dataset = data.load_bundled().limit(args.limit)
    sides = [("keras_selfattn", "keras_selfattn"), ("keras MHA", "keras")]
    if args.only == "ours":
        sides = sides[:1]
    elif args.only == "keras":
        sides = sides[1:]
    runs = [
        run_one(name, attention, dataset, args)
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
    print(f"machine: {_cpu_name()}, {os.cpu_count()} cores, {platform.platform()}")
    gpus = tf.config.list_physical_devices("GPU")
    print(f"device: {'GPU ' + gpus[0].name if gpus else 'CPU'}")
    print(
        f"versions: python {platform.python_version()}, keras {keras.__version__}, "
        f"tensorflow {tf.__version__}, numpy {np.__version__}, "
        f"keras_selfattn {__version__}"
    )
    print(f"data: {dataset.source}")
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
