"""The n-gram branch's regularization C, chosen by cross-validation on the
training texts only.

The default model's n-gram branch is NB-LR (`keras_selfattn.imdb.ngrams`) on
the model's own vocabularies of words and word pairs. This script takes the
training texts exactly as `keras-selfattn train` does (the bundled 20,000
reviews and the 6,836 Rotten Tomatoes training snippets, in one hash order,
less the last 5% that validate the blend), builds the model's vocabularies
from all of them (no labels, no training), splits them into `--folds` folds
at random (seeded) and, for each C, fits NB-LR on all folds but one and
scores the one left out. It prints, per C, the out-of-fold accuracy and ROC
AUC on the reviews, on the snippets and on the reviews' last sentences (of
at least 5 words, with their review's label, scored by the fit that did not
see the review; a review of one sentence has none here, where `imdb.py
--trust` scores it whole), the AUC of all texts pooled, and the AUC of each
fold's texts by its own fit: their mean (with its standard error over the
folds) chooses C. The blend rescales the branch's score, so a measure of
ranking decides, not of scale, and of one fit at a time. No test text
(held-out reviews, the Rotten Tomatoes test split) is used.

    python benchmarks/ngram_cv.py                    # C = 0.03 ... 1, 5 folds
    python benchmarks/ngram_cv.py --c 0.1 1 --folds 3
    python benchmarks/ngram_cv.py --limit 2000       # a quick look

scikit-learn (the `bench` extra) computes the AUC.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

# The values of C compared by default: NB-LR's usual 1, and below it.
DEFAULT_CS = (0.03, 0.05, 0.1, 0.2, 0.3, 1.0)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--c", type=float, nargs="+", default=list(DEFAULT_CS),
                        help="the values of C to compare")  # fmt: skip
    parser.add_argument("--folds", type=int, default=5, help="folds, at least 2")
    parser.add_argument("--limit", type=int, default=None,
                        help="the first N training reviews only (and N/20000 "
                        "of the snippets), as `train --limit`")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the folds")
    args = parser.parse_args(argv)
    if args.folds < 2:
        parser.error(f"argument --folds: expected at least 2, received {args.folds}")
    if not all(math.isfinite(c) and c > 0 for c in args.c):
        parser.error(
            f"argument --c: expected positive, finite values, received {args.c}"
        )
    if args.limit is not None and args.limit < 1:
        parser.error(
            f"argument --limit: expected a positive integer, received {args.limit}"
        )
    return args


def training_texts(limit: int | None) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The texts `keras-selfattn train` fits its n-gram branch on, their
    labels, and which of them are Rotten Tomatoes snippets."""
    from keras_selfattn.imdb import data
    from keras_selfattn.imdb.train import validation_count

    dataset = data.with_rotten_tomatoes(data.load("bundled").limit(limit), limit)
    texts, labels = list(dataset.train_texts), np.asarray(dataset.train_labels)
    n_train = len(texts) - validation_count(len(texts))
    snippets = {data.clean(t) for t in data.load_rotten_tomatoes("train")[0]}
    texts, labels = texts[:n_train], labels[:n_train]
    return texts, labels, np.array([t in snippets for t in texts])


def cross_validate(texts, labels, is_snippet, cs, folds: int, seed: int) -> list[dict]:
    """Out-of-fold accuracy and AUC per kind of text, for each C."""
    from sklearn.metrics import roc_auc_score

    from keras_selfattn.imdb import data, ngrams
    from keras_selfattn.imdb import model as imdb_model
    from keras_selfattn.imdb.train import TrainConfig

    fold = np.random.default_rng(seed).integers(0, folds, len(texts))
    if any(len(np.unique(labels[fold == k])) < 2 for k in range(folds)):
        raise ValueError(
            f"Received an invalid value for argument `folds`, expected folds "
            f"that each hold texts of both classes. Received: folds={folds} "
            f"for {len(texts)} texts"
        )
    model = imdb_model.build_model(texts, **TrainConfig().model_options())
    layer = model.get_layer(imdb_model.NGRAM)
    sizes, vectorizers = layer.vocabulary_sizes, ngrams._vectorizers(model)
    pairs = ngrams.presence(vectorizers, sizes, texts)
    # The reviews' last sentences, each scored by the fold of its review.
    reviews = np.flatnonzero(~is_snippet)
    last = [data.last_sentence(texts[i]) for i in reviews]
    keep = np.array([s != texts[i] for s, i in zip(last, reviews, strict=True)])
    last_of = reviews[keep]
    last_pairs = ngrams.presence(
        vectorizers, sizes, [s for s, k in zip(last, keep, strict=True) if k]
    )
    results = []
    for c in cs:
        start = time.perf_counter()
        oof, oof_last = np.zeros(len(texts)), np.zeros(len(last_of))
        per_fold = []
        for k in range(folds):
            train = np.flatnonzero(fold != k)
            index = np.full(len(texts), -1)
            index[train] = np.arange(len(train))
            subset = []
            for these in pairs:
                these = these[index[these[:, 0]] >= 0]
                subset.append(np.stack([index[these[:, 0]], these[:, 1]], 1))
            weights, intercept, _, _ = ngrams.nb_lr(
                subset, labels[train], sizes, layer.first_id, C=c
            )
            out = fold == k
            z = ngrams.scores(pairs, weights, sizes, len(texts)) + intercept
            oof[out] = z[out]
            per_fold.append(roc_auc_score(labels[out], z[out]))
            out_last = fold[last_of] == k
            z = ngrams.scores(last_pairs, weights, sizes, len(last_of)) + intercept
            oof_last[out_last] = z[out_last]
        row = {
            "C": c,
            "seconds": time.perf_counter() - start,
            "fold AUC": (np.mean(per_fold), np.std(per_fold, ddof=1) / np.sqrt(folds)),
        }
        for name, z, y in (
            ("reviews", oof[~is_snippet], labels[~is_snippet]),
            ("snippets", oof[is_snippet], labels[is_snippet]),
            ("last sentences", oof_last, labels[last_of]),
            ("all", oof, labels),
        ):
            both = len(np.unique(y)) == 2
            row[name] = (
                np.mean((z > 0) == (y == 1)),
                roc_auc_score(y, z) if both else np.nan,
                len(y),
            )
        results.append(row)
        print(_line(row), flush=True)
    return results


def _line(row: dict) -> str:
    parts = [f"C={row['C']:g}"]
    for name in ("reviews", "snippets", "last sentences", "all"):
        accuracy, auc, n = row[name]
        parts.append(f"{name} ({n}): acc {accuracy:.4f} AUC {auc:.4f}")
    mean, error = row["fold AUC"]
    parts.append(f"AUC of a fold's texts {mean:.4f} +- {error:.4f}")
    return "; ".join(parts) + f"; {row['seconds']:.0f} s"


def main(argv=None) -> int:
    args = parse_args(argv)
    from benchmarks import _environment

    print(_environment.header())
    texts, labels, is_snippet = training_texts(args.limit)
    print(f"texts: {len(texts)} training texts ({int(is_snippet.sum())} snippets), "
          f"{args.folds} folds (seed {args.seed})")  # fmt: skip
    results = cross_validate(texts, labels, is_snippet, args.c, args.folds, args.seed)
    best = max(results, key=lambda row: row["fold AUC"][0])
    print(f"best C by the mean AUC of a fold's texts: {best['C']:g} "
          f"({best['fold AUC'][0]:.4f}); ended {_environment.now()}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
