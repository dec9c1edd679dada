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
    python benchmarks/imdb.py --only ours --set crop_rate=0 --keep runs/
    python benchmarks/imdb.py --trust imdb.keras   # can a person trust it?

`--set NAME=VALUE` changes a `TrainConfig` field for the runs (to compare
variants) and `--keep DIR` keeps their models. `--trust MODEL...` trains
nothing: it reports, for each saved model, the held-out accuracy and expected
calibration error (15 bins); the same on short inputs (each held-out review
cut to its last sentence of at least 5 words, with the review's label) and on
the 8,530 Rotten Tomatoes snippets of the bundled file (never used for
training or tuning: an independent check); accuracy by length bucket; and the
faithfulness of the explanations (ERASER's comprehensiveness and sufficiency
on 500 held-out reviews, against deleting random tokens).

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


def _overrides(pairs: list[str]) -> dict:
    """`NAME=VALUE` pairs as TrainConfig fields (values read as Python)."""
    import ast

    options = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        try:
            options[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            options[name] = text
    return options


def run_one(name: str, attention: str, args, index: int) -> dict:
    """One training run of `train(TrainConfig(...))`, in a scratch folder."""
    import keras

    from keras_selfattn.imdb.train import TrainConfig, train

    keras.backend.clear_session()
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(args.keep or folder, f"{attention}-{index}.keras")
        config = TrainConfig(
            limit=args.limit,
            seed=args.seed,
            attention=attention,
            out=out,
            verbose=2,
            **_overrides(args.set),
        )
        result = train(config)
    val = result.history.get("val_accuracy", [float("nan")])[-1]
    print(
        f"[{name}] test accuracy {result.accuracy:.4f}, val accuracy {val:.4f}, "
        f"trained in {result.seconds:.0f} s",
        flush=True,
    )
    return {"name": name, "accuracy": result.accuracy, "seconds": result.seconds}


BUCKETS = ((0, 10), (11, 50), (51, 200), (201, 10**9))


def _bucket_name(low: int, high: int) -> str:
    return (
        f"<= {high}"
        if low == 0
        else f"> {low - 1}"
        if high > 10**8
        else (f"{low}-{high}")
    )


def trust_report(path: str, faithfulness_reviews: int) -> None:
    """Prints accuracy, calibration, short inputs and faithfulness of a model."""
    import numpy as np

    from keras_selfattn.imdb import calibration, data, explain
    from keras_selfattn.imdb.model import load, predict
    from keras_selfattn.text import standardize

    model = load(path)
    dataset = data.load_bundled()
    test_texts, test_labels = dataset.test_texts, np.asarray(dataset.test_labels)
    last = [data.last_sentence(t) for t in test_texts]
    rt_texts, rt_labels = data.load_rotten_tomatoes()
    print(f"\n=== trust report: {path} ===")
    print("command: " + shlex.join([sys.executable, *sys.argv]))
    rows = {}
    for name, texts, labels in (
        ("held-out reviews (5,000)", test_texts, test_labels),
        ("their last sentences (>= 5 words)", last, test_labels),
        ("Rotten Tomatoes snippets (8,530)", rt_texts, rt_labels),
    ):
        p = predict(model, texts)
        correct = (p > 0.5) == (np.asarray(labels) == 1)
        ece = calibration.expected_calibration_error(p, labels)
        lengths = np.array(
            [len(t.split()) for t in standardize(np.array(texts, dtype=object))
             .numpy().astype(str)]
        )  # fmt: skip
        rows[name] = (correct, ece, lengths, p)
        confident = np.mean(np.maximum(p, 1 - p) > 0.99)
        print(f"| {name} | accuracy {correct.mean():.4f} | ECE {ece:.4f} | "
              f"share with confidence > 0.99: {confident:.3f} |")  # fmt: skip
    print("\naccuracy by length (tokens), held-out reviews and last sentences:")
    print("| tokens | reviews (n) | accuracy |\n|---|---|---|")
    for low, high in BUCKETS:
        parts = [rows[n] for n in list(rows)[:2]]
        correct = np.concatenate(
            [c[(lens >= low) & (lens <= high)] for c, _, lens, _ in parts]
        )
        accuracy = f"{correct.mean():.4f}" if len(correct) else "—"
        print(f"| {_bucket_name(low, high)} | {len(correct)} | {accuracy} |")
    sample = [explain.explain(model, t) for t in test_texts[:200]]
    peaks = [explain.relative_weights(e.weights).max() for e in sample]
    entropy = [
        -np.sum(e.weights * np.log(np.maximum(e.weights, 1e-30)))
        / np.log(len(e.weights))
        for e in sample
        if len(e.weights) > 1
    ]
    print(
        "\npooling weights on 200 held-out reviews: the largest is "
        f"{np.median(peaks):.2f}x uniform (median; 90th percentile "
        f"{np.percentile(peaks, 90):.2f}x); entropy / log n = "
        f"{np.median(entropy):.3f} (median; 1 = uniform)"
    )
    if faithfulness_reviews:
        texts = test_texts[:faithfulness_reviews]
        result = explain.faithfulness(model, list(texts))
        print(f"\nfaithfulness on {len(texts)} held-out reviews (drop in the "
              "predicted class's probability):")  # fmt: skip
        print("| explanation | k | comprehensiveness | sufficiency |")
        print("|---|---|---|---|")
        for kind, by_k in result.items():
            for k, m in by_k.items():
                print(f"| {kind} | {k:.0%} | {m['comprehensiveness']:.4f} | "
                      f"{m['sufficiency']:.4f} |")  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--only", choices=["ours", "keras"], default=None)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--keep", metavar="DIR", help="keep the trained models here")
    parser.add_argument("--trust", nargs="+", metavar="MODEL")
    parser.add_argument("--faithfulness-reviews", type=int, default=500)
    args = parser.parse_args(argv)
    if args.trust:
        for path in args.trust:
            trust_report(path, args.faithfulness_reviews)
        return 0

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
        run_one(name, attention, args, index)
        for index in range(max(1, args.repeats))
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
