"""The IMDB loaders: the pinned bundled split, an aclImdb folder, keras.datasets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from keras_selfattn.imdb import data
from tests.helpers import write_reviews

pytestmark = pytest.mark.tensorflow_only

# SHA-256 of the 5,000 held-out reviews (label, tab, cleaned text, newline, in
# order). If this changes, every published accuracy figure changes with it.
TEST_SPLIT_SHA256 = "db9ad9337c264f9304ee138cb3fba482c3eb2f3f633c63a282d6a2ee17a70d15"
# The same of the 20,000 training reviews in their order, which `--limit`
# takes a prefix of: if it changes, so does every limited run.
TRAIN_SPLIT_SHA256 = "395ef97cca31104c83ea7a984135a26768e4a398c4b10636d281b3b4efc14c74"


@pytest.fixture(scope="module")
def bundled():
    return data.load_bundled()


def test_bundled_split_is_pinned(bundled):
    assert len(bundled.train_texts) == 20_000
    assert len(bundled.test_texts) == 5_000
    checksum = data.split_checksum(bundled.test_texts, bundled.test_labels)
    assert checksum == TEST_SPLIT_SHA256
    checksum = data.split_checksum(bundled.train_texts, bundled.train_labels)
    assert checksum == TRAIN_SPLIT_SHA256


def test_bundled_split_is_stratified_balanced_and_disjoint(bundled):
    assert int(bundled.test_labels.sum()) == 2_500
    assert int(bundled.train_labels.sum()) == 10_000
    # Any prefix (--limit) is balanced too.
    assert 0.4 < bundled.train_labels[:500].mean() < 0.6
    assert not set(bundled.test_texts) & set(bundled.train_texts)
    assert set(np.unique(bundled.train_labels)) == {0, 1}


@pytest.mark.parametrize("split", ["train", "test"])
def test_bundled_reviews_are_cleaned(bundled, split):
    texts = getattr(bundled, f"{split}_texts")
    assert not any("<br" in t.lower() for t in texts)
    assert all(t.strip() for t in texts)


def test_limit(bundled):
    small = bundled.limit(10)
    assert len(small.train_texts) == 10 and len(small.train_labels) == 10
    assert small.test_texts is bundled.test_texts


def test_folder_loader(tmp_path):
    write_reviews(
        tmp_path,
        "train",
        {"pos": ["Great film.<br /><br />Loved it", "Superb"], "neg": ["Awful"]},
    )
    write_reviews(tmp_path, "test", {"pos": ["Nice"], "neg": ["Bad<br/>bad"]})
    loaded = data.load(str(tmp_path))
    train = zip(loaded.train_texts, loaded.train_labels.tolist(), strict=True)
    test = zip(loaded.test_texts, loaded.test_labels.tolist(), strict=True)
    assert sorted(train) == [
        ("Awful", 0),
        ("Great film.  Loved it", 1),
        ("Superb", 1),
    ]
    assert sorted(test) == [
        ("Bad bad", 0),
        ("Nice", 1),
    ]


def test_folder_loader_missing_part(tmp_path):
    write_reviews(tmp_path, "train", {"pos": ["a"], "neg": ["b"]})
    with pytest.raises(data.DataError, match="test"):
        data.load_folder(tmp_path)


def test_folder_loader_reads_the_test_split_alone_without_train(tmp_path):
    # `keras-selfattn evaluate --data DIR` reads the test split only, but
    # the folder had to hold train/neg and train/pos as well.
    write_reviews(tmp_path, "test", {"pos": ["Nice"], "neg": ["Bad"]})
    with pytest.raises(data.DataError, match=r"train/neg is missing"):
        data.load(str(tmp_path))
    loaded = data.load(str(tmp_path), train=False)
    assert loaded.train_texts == [] and loaded.train_labels.shape == (0,)
    test = zip(loaded.test_texts, loaded.test_labels.tolist(), strict=True)
    assert sorted(test) == [("Bad", 0), ("Nice", 1)]


def test_folder_loader_refuses_one_class_and_unreadable_reviews(tmp_path):
    # One class trained a model that always says it (exit 0, accuracy 0.5);
    # an unreadable entry was a raw IsADirectoryError (exit 1).
    write_reviews(tmp_path, "train", {"pos": ["a", "c"], "neg": []})
    write_reviews(tmp_path, "test", {"pos": ["a"], "neg": ["b"]})
    with pytest.raises(data.DataError, match=r"train/neg has no \.txt reviews"):
        data.load_folder(tmp_path)
    (tmp_path / "train" / "neg" / "0_2.txt").write_text("b", encoding="utf-8")
    (tmp_path / "test" / "neg" / "folder.txt").mkdir()
    with pytest.raises(data.DataError, match=r"cannot read .*folder\.txt: Is a dir"):
        data.load_folder(tmp_path)


def test_keras_loader_decodes_with_word_index(tmp_path, monkeypatch):
    """A fake imdb.npz and word index in a temporary KERAS_HOME."""
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    word_index = {"the": 1, "movie": 2, "was": 3, "great": 4, "awful": 5}
    (datasets / "imdb_word_index.json").write_text(json.dumps(word_index))

    def ragged(*seqs):
        array = np.empty(len(seqs), dtype=object)
        array[:] = [list(s) for s in seqs]
        return array

    np.savez(
        datasets / "imdb.npz",
        x_train=ragged([1, 2, 3, 4], [1, 2, 3, 5]),
        y_train=np.array([1, 0]),
        x_test=ragged([2, 3, 5]),
        y_test=np.array([0]),
    )
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    loaded = data.load("keras")
    train = zip(loaded.train_texts, loaded.train_labels.tolist(), strict=True)
    assert sorted(train) == [("the movie was awful", 0), ("the movie was great", 1)]
    assert loaded.test_texts == ["movie was awful"]
    assert loaded.test_labels.tolist() == [0]


def test_keras_loader_interleaves_a_file_sorted_by_class(tmp_path, monkeypatch):
    # The file keeps its reviews by class: `--limit` took one class only.
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    (datasets / "imdb_word_index.json").write_text(json.dumps({"w": 1, "x": 2}))
    reviews = np.empty(16, dtype=object)
    reviews[:] = [[1] * (i + 1) for i in range(16)]
    labels = np.array([0] * 8 + [1] * 8)
    np.savez(datasets / "imdb.npz", x_train=reviews, y_train=labels,
             x_test=reviews, y_test=labels)  # fmt: skip
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    loaded = data.load("keras")
    assert set(loaded.limit(6).train_labels.tolist()) == {0, 1}
    assert sorted(
        zip(loaded.train_texts, loaded.train_labels.tolist(), strict=True)
    ) == sorted((" ".join(["w"] * (i + 1)), int(labels[i])) for i in range(16))


@pytest.mark.parametrize(
    "npz, index",
    [(b"not a zip file", "{}"), (None, "[1, 2]")],
    ids=["npz_not_a_zip", "word_index_a_list"],
)
def test_keras_loader_names_unreadable_files(tmp_path, monkeypatch, npz, index):
    datasets = tmp_path / "datasets"
    datasets.mkdir()
    if npz is None:
        np.savez(datasets / "imdb.npz", x_train=np.zeros((1, 2), "int64"))
    else:
        (datasets / "imdb.npz").write_bytes(npz)
    (datasets / "imdb_word_index.json").write_text(index)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    with pytest.raises(data.DataError, match=r"cannot read keras\.datasets\.imdb"):
        data.load("keras")


@pytest.mark.parametrize(
    "keras_home, writable, expected",
    [
        ("{tmp}", ["{tmp}"], "{tmp}/datasets"),
        ("{tmp}", [], "/tmp/.keras/datasets"),
        (None, ["~", "~/.keras"], "~/.keras/datasets"),
        (None, ["~"], "/tmp/.keras/datasets"),  # ~/.keras read-only
        (None, [], "/tmp/.keras/datasets"),
    ],
    ids=[
        "keras_home",
        "keras_home_read_only",
        "user_home",
        "user_keras_read_only",
        "user_home_read_only",
    ],
)
def test_keras_loader_looks_where_keras_writes(
    tmp_path, monkeypatch, keras_home, writable, expected
):
    # As root every folder is writable: `os.access` stands in for the user's.
    def fill(text):
        return os.path.expanduser(text.replace("{tmp}", str(tmp_path)))

    if keras_home is None:
        monkeypatch.delenv("KERAS_HOME", raising=False)
    else:
        monkeypatch.setenv("KERAS_HOME", fill(keras_home))
    writable = {fill(path) for path in writable}
    monkeypatch.setattr(data.os, "access", lambda path, mode: path in writable)
    assert data._keras_datasets_dir() == Path(fill(expected))


def test_keras_loader_offline_points_to_bundled(tmp_path, monkeypatch):
    import keras

    def offline(*args, **kwargs):
        raise Exception(
            "URL fetch failure on https://storage.googleapis.com/...: None -- "
            "[Errno -3] Temporary failure in name resolution\nmore"
        )

    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setattr(keras.datasets.imdb, "load_data", offline)
    with pytest.raises(data.DataError) as error:
        data.load("keras")
    message = str(error.value)
    assert "\n" not in message
    assert "--data bundled" in message and "offline" in message


def test_unknown_source():
    with pytest.raises(data.DataError, match="unknown data source 'nope'"):
        data.load("nope")


def test_crop_takes_one_to_three_sentences_at_most_50_words():
    text = "First one here. Second is longer! Third? Fourth and last."
    rng = np.random.default_rng(0)
    crops = {data.crop(text, rng) for _ in range(200)}
    sentences = data.sentences(text)
    assert sentences == ["First one here.", "Second is longer!", "Third?",
                         "Fourth and last."]  # fmt: skip
    for crop in crops:
        start = sentences.index(next(s for s in sentences if crop.startswith(s)))
        assert any(crop == " ".join(sentences[start : start + n]) for n in (1, 2, 3))
    assert len(crops) > 5
    long = " ".join(f"w{i}" for i in range(300))  # one sentence, 300 words
    assert len(data.crop(long, rng).split()) == 50
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    assert data.crop(text, a) == data.crop(text, b)  # seeded


def test_last_sentence_has_at_least_five_words():
    text = "Loved the start. The middle drags on far too long. Great ending!"
    assert data.last_sentence(text) == "The middle drags on far too long."
    assert data.last_sentence("Too short.") == "Too short."


@pytest.mark.parametrize(
    "text, last",
    [
        ("A fine cast, a fine score.What a waste of both it was.",
         "What a waste of both it was."),
        ('He said "no."Then the film ends, and rightly so.',
         "Then the film ends, and rightly so."),
        ("Two hours of this!!!Never again will I watch it.",
         "Never again will I watch it."),
        # Not an end: an abbreviation, a number.
        ("It cost 1.5 million in the U.S.A.Worth it.",
         "It cost 1.5 million in the U.S.A.Worth it."),
    ],
    ids=["after_a_word", "after_a_quote", "after_repeated_marks", "no_end"],
)  # fmt: skip
def test_last_sentence_splits_where_no_space_follows_the_end(text, last):
    # 46 of the 5,000 held-out reviews have such glued ends only: their
    # "last sentence" was the whole review, up to 257 words.
    assert data.last_sentence(text) == last


def test_the_training_crops_keep_the_split_at_spaces():
    text = "First part.Second part here. Third."
    assert data.sentences(text) == ["First part.Second part here.", "Third."]
    assert data.sentences(text, glued_ends=True) == [
        "First part.", "Second part here.", "Third."
    ]  # fmt: skip


def test_rotten_tomatoes_snippets_are_the_other_rows(bundled):
    texts, labels = data.load_rotten_tomatoes()
    assert len(texts) == 8530 and int(labels.sum()) == 4265
    assert max(len(t.split()) for t in texts) < 100
    imdb = set(bundled.train_texts) | set(bundled.test_texts)
    assert not {data.clean(t) for t in texts} & imdb


def test_rotten_tomatoes_split_rule_on_a_tiny_file(tmp_path):
    import csv
    import hashlib

    texts = [f"snippet {i} : a film , café and all" for i in range(40)]
    path = tmp_path / "reviews.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label", "source"])
        writer.writerow(["an imdb review", 1, "imdb"])  # not a snippet
        for i, text in enumerate(texts):
            writer.writerow([text, i % 2, "rotten_tomatoes"])
    # The rule, by another road: the hex digest read as a number.
    expected = [
        t
        for t in texts
        if int(hashlib.sha256(t.encode("utf-8")).hexdigest(), 16) % 5 == 0
    ]
    assert 0 < len(expected) < len(texts)  # the file holds both sides
    test, test_labels = data.load_rotten_tomatoes("test", path=path)
    train, _ = data.load_rotten_tomatoes("train", path=path)
    everything, labels = data.load_rotten_tomatoes(path=path)
    assert test == expected
    assert train == [t for t in texts if t not in expected]
    assert everything == texts and labels.tolist() == [i % 2 for i in range(40)]
    assert test_labels.tolist() == [texts.index(t) % 2 for t in test]
    # As a spreadsheet saves it: a byte-order mark, spaces around a label.
    edited = tmp_path / "edited.csv"
    content = path.read_text(encoding="utf-8").replace(",1,rotten", ", 1 ,rotten")
    edited.write_bytes(b"\xef\xbb\xbf" + content.encode("utf-8"))
    assert data.load_rotten_tomatoes(path=edited)[1].tolist() == labels.tolist()
    with pytest.raises(ValueError, match="`split`"):
        data.load_rotten_tomatoes("validation", path=path)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no file {path}"),
        ("text,label\nfine,1\n", "{path} has no column source: expected"),
        ("text,label,source\nfine,pos,rotten_tomatoes\n",
         "{path}, line 2: label 'pos' is not 0 or 1"),
        ("text,label,source\nfine,1,imdb\n", "{path} has no rotten_tomatoes reviews"),
        (b"text,label,source\ncaf\xe9,1,rotten_tomatoes\n", "{path} is not UTF-8"),
        ("folder", "cannot read {path}: "),
    ],
    ids=["missing", "no_source_column", "bad_label", "no_snippets", "latin1", "folder"],
)  # fmt: skip
def test_a_csv_that_cannot_be_read_is_named_in_a_data_error(tmp_path, content, message):
    path = tmp_path / "reviews.csv"
    if content == "folder":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(data.DataError) as caught:
        data.load_rotten_tomatoes(path=path)
    assert str(caught.value).startswith(message.format(path=path))


def test_rotten_tomatoes_test_split_of_the_bundled_file():
    test, labels = data.load_rotten_tomatoes("test")
    train, _ = data.load_rotten_tomatoes("train")
    assert len(test) == 1_694 and len(train) == 8_530 - 1_694
    assert int(labels.sum()) == 823  # positives among the test snippets
    assert not set(test) & set(train)


def test_training_on_rotten_tomatoes_never_reads_its_test_split(bundled):
    small = data.with_rotten_tomatoes(bundled.limit(1000), limit=1000)
    snippets = set(small.train_texts) - set(bundled.train_texts)
    assert len(snippets) == round(6_836 * 1000 / 20_000)
    # A share of both classes: the file lists its positive snippets first.
    rows = zip(small.train_texts, small.train_labels, strict=True)
    positive = sum(label for text, label in rows if text in snippets)
    assert 0.4 < positive / len(snippets) < 0.6
    test = {data.clean(t) for t in data.load_rotten_tomatoes("test")[0]}
    assert not snippets & test
    assert small.test_texts is bundled.test_texts
    # The snippets are spread through the training reviews (hash order), so
    # the validation tail holds both kinds.
    tail = small.train_texts[-100:]
    assert 0 < sum(t in snippets for t in tail) < 100
