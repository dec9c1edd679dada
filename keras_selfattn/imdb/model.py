"""The IMDB sentiment model: raw review strings in, positive-class probability out.

`build_model` puts the whole pipeline inside one `keras.Model`:

    raw strings (batch,)
      -> TextVectorization (adapted on the training texts only)
      -> ClipSequence (at most `max_len` tokens)
      -> TokenAndPositionEmbedding (padding id 0 gives the Keras mask)
      -> TransformerEncoder x num_layers (attention: this package's kernel, or
         keras.layers.MultiHeadAttention with `attention="keras"`)
      -> AttentionPooling
      -> Dense(1, sigmoid), which also reads one more feature: the score of a
         linear bag of the review's distinct words and word pairs
         (`NgramLogit`, with `ngram_logit=True`: NB-LR, fitted after the
         attention branch has trained and blended with it on held-out
         reviews by `ngrams`), so that the classifier's logit is the
         attention branch's plus the n-gram branch's

Every layer has a fixed name, one of the constants below (`CLIP`,
`CLASSIFIER`, ...): `explain` and `distributed` find the layers by these names,
in models built today and in models loaded from older files.

`compile_model` sets up the optimizer and `evaluate` measures accuracy.
`ReviewBatches` feeds both with batches of reviews of similar length, so a
batch is padded to its own longest review rather than to `max_len`;
`ReviewBatches.dataset` puts them in `tf.data`. A probability above
`THRESHOLD` is a positive verdict (`label_of`, `accuracy`).
"""

from __future__ import annotations

import math
import weakref
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

import keras
import numpy as np

from keras_selfattn._validation import MAX_SEED, check_positive_int
from keras_selfattn.imdb import _checks, data
from keras_selfattn.imdb._errors import first_line
from keras_selfattn.layers.encoder import TransformerEncoder
from keras_selfattn.layers.pooling import AttentionPooling
from keras_selfattn.layers.position import TokenAndPositionEmbedding
from keras_selfattn.text import (
    BigramEmbedding,
    ClipSequence,
    NgramLogit,
    standardize,
    standardize_v2,
)

__all__ = [
    "ATTENTIONS",
    "DEFAULTS",
    "NEGATIVE",
    "POSITIVE",
    "THRESHOLD",
    "ModelFileError",
    "ReviewBatches",
    "accuracy",
    "build_model",
    "classifier_inputs",
    "compile_model",
    "evaluate",
    "has_words",
    "label_of",
    "load",
    "logits",
    "predict",
    "readable",
    "standardization",
]

# The names of the model's layers, in the order data flows through them.
TEXT = "text"  # the input
TEXT_VECTORIZATION = "text_vectorization"
CLIP = "clip"
EMBEDDING = "embedding"
BIGRAM_VECTORIZATION = "bigram_vectorization"
BIGRAM_CLIP = "bigram_clip"
BIGRAM_EMBEDDING = "bigram_embedding"
EMBEDDING_DROPOUT = "embedding_dropout"
ENCODER = "encoder"  # encoder block i is named f"{ENCODER}_{i}"
POOLING = "pooling"
POOLING_DROPOUT = "pooling_dropout"
NGRAM = "ngram_logit"  # the linear bag-of-n-grams branch (NgramLogit)
FEATURES = "features"  # the pooled vector and the n-gram score, side by side
CLASSIFIER = "classifier"
MODEL = "imdb_sentiment"
# The layers every demo model has (0.1's too), which its commands read.
REQUIRED_LAYERS = (TEXT, TEXT_VECTORIZATION, CLIP, EMBEDDING, POOLING, CLASSIFIER)

# The verdict: a positive-class probability above THRESHOLD (a logit above 0)
# is POSITIVE, any other NEGATIVE.
THRESHOLD = 0.5
POSITIVE, NEGATIVE = "positive", "negative"

# The values of `TransformerEncoder(attention=...)`.
ATTENTIONS = ("keras_selfattn", "keras")

# The defaults of `build_model` and of `keras-selfattn train`.
DEFAULTS = {
    "vocab_size": 20_000,
    "bigram_vocab_size": 80_000,
    "max_len": 400,
    "head_len": 100,
    "embed_dim": 64,
    "num_heads": 2,
    "intermediate_dim": 128,
    "num_layers": 1,
    "dropout": 0.3,
    "epochs": 4,
    "batch_size": 32,
    "learning_rate": 1e-3,
    "weight_decay": 0.01,
    "seed": 1337,
    "crop_rate": 0.7,
    "pooling_heads": 1,
    "pooling_entropy": 0.02,
    "attention": "keras_selfattn",
    "ngram_logit": True,
    # The n-gram branch's C, chosen by 5-fold cross-validation on the
    # training texts: benchmarks/ngram_cv.py.
    "ngram_c": 0.1,
}


def _offset(seed: int, offset: int) -> int:
    """A sub-layer's seed: `seed + offset`, wrapped into the seeds every
    backend takes (`[0, MAX_SEED]`), so that the largest seed works too."""
    return (seed + offset) % (MAX_SEED + 1)


def build_model(
    train_texts: Sequence[str],
    *,
    vocab_size: int = DEFAULTS["vocab_size"],
    bigram_vocab_size: int = DEFAULTS["bigram_vocab_size"],
    max_len: int = DEFAULTS["max_len"],
    head_len: int | None = DEFAULTS["head_len"],
    embed_dim: int = DEFAULTS["embed_dim"],
    num_heads: int = DEFAULTS["num_heads"],
    intermediate_dim: int = DEFAULTS["intermediate_dim"],
    num_layers: int = DEFAULTS["num_layers"],
    dropout: float = DEFAULTS["dropout"],
    seed: int = DEFAULTS["seed"],
    attention: str = DEFAULTS["attention"],
    pooling_heads: int = DEFAULTS["pooling_heads"],
    pooling_entropy: float = DEFAULTS["pooling_entropy"],
    ngram_logit: bool = DEFAULTS["ngram_logit"],
) -> keras.Model:
    """Builds the sentiment model; its vocabulary comes from `train_texts`.

    Args:
        train_texts: The training reviews (raw strings). Only these are used
            to build the vocabulary.
        vocab_size: Vocabulary size, padding and out-of-vocabulary included.
            Defaults to `20000`.
        bigram_vocab_size: Size of a second vocabulary, of word pairs; their
            vectors are added to the token vectors (see `BigramEmbedding`).
            0 leaves bigrams out. Defaults to `80000`.
        max_len: The most tokens read per review. Defaults to `400`.
        head_len: A longer review keeps its first `head_len` tokens and its
            last `max_len - head_len` ones (its verdict); `None` keeps the
            first `max_len`, as does a `head_len` of `max_len` or more (it
            is clipped to `max_len`). Defaults to `100`.
        embed_dim: Size of the token vectors. Defaults to `64`.
        num_heads: Attention heads of each encoder block. Defaults to `2`.
        intermediate_dim: Hidden size of the encoder's feed-forward part.
            Defaults to `128`.
        num_layers: Number of encoder blocks. Defaults to `1`.
        dropout: Dropout rate in the encoder and before the classifier.
            Defaults to `0.3`.
        seed: Seed of the weight initialisation and the dropouts.
            Defaults to `1337`.
        pooling_heads: Heads of the attention pooling (each pools its
            slice of the features with a query of its own). Defaults to
            `1`.
        pooling_entropy: The pooling's entropy penalty
            (`AttentionPooling(entropy_penalty=...)`): above 0, training
            prefers pooling on fewer tokens. Defaults to `0.02`.
        attention: The attention layer of the encoder blocks:
            `"keras_selfattn"` (this package's `MultiHeadAttention` and
            kernel) or `"keras"` (`keras.layers.MultiHeadAttention`: the
            same model, for comparison). Defaults to `"keras_selfattn"`.
        ngram_logit: Whether the classifier also reads the score of a
            linear bag of the review's distinct words and word pairs
            (`NgramLogit` on the whole review, unclipped). The branch and
            the classifier's weight of it start at zero, so that training
            fits the attention branch alone; `ngrams.fit_ngram_branch`
            (NB-LR) and `ngrams.blend` set them after training.
            Defaults to `True`.

    Returns:
        An uncompiled `keras.Model` from raw strings `(batch,)` to
        probabilities `(batch, 1)`.

    Example:

    >>> from keras_selfattn.imdb.model import build_model
    >>> model = build_model(["a great film", "a dull film"], vocab_size=100,
    ...                     bigram_vocab_size=0, max_len=16)
    >>> texts = np.array(["A great film!", "Dull."], dtype=object)
    >>> model.predict(texts, verbose=0).shape
    (2, 1)
    >>> model.get_layer("encoder_0").__class__.__name__
    'TransformerEncoder'
    """
    keras.utils.set_random_seed(seed)
    vectorizer = keras.layers.TextVectorization(
        max_tokens=vocab_size,
        standardize=standardize_v2,
        output_mode="int",
        name=TEXT_VECTORIZATION,
    )
    train_texts = np.asarray(list(train_texts), dtype=object)
    vectorizer.adapt(train_texts, batch_size=256)

    if head_len is not None:
        head_len = min(head_len, max_len)
    texts = keras.Input(shape=(), dtype="string", name=TEXT)
    all_ids = vectorizer(texts)
    streams, sizes = [all_ids], [vectorizer.vocabulary_size()]
    ids = ClipSequence(max_len, head=head_len, name=CLIP)(all_ids)
    x = TokenAndPositionEmbedding(
        vectorizer.vocabulary_size(), max_len, embed_dim, name=EMBEDDING
    )(ids)
    if bigram_vocab_size:
        bigrams = keras.layers.TextVectorization(
            max_tokens=bigram_vocab_size,
            standardize=standardize_v2,
            ngrams=(2,),
            output_mode="int",
            name=BIGRAM_VECTORIZATION,
        )
        bigrams.adapt(train_texts, batch_size=256)
        all_bigram_ids = bigrams(texts)
        streams.append(all_bigram_ids)
        sizes.append(bigrams.vocabulary_size())
        # Clipped like the tokens, so that bigram i still pairs tokens i, i + 1.
        bigram_ids = ClipSequence(
            max(1, max_len - 1),
            head=None if head_len is None else max(0, head_len - 1),
            name=BIGRAM_CLIP,
        )(all_bigram_ids)
        x = BigramEmbedding(
            bigrams.vocabulary_size(), embed_dim, name=BIGRAM_EMBEDDING
        )(x, bigram_ids)
    x = keras.layers.Dropout(dropout, seed=seed, name=EMBEDDING_DROPOUT)(x)
    for i in range(num_layers):
        x = TransformerEncoder(
            intermediate_dim=intermediate_dim,
            num_heads=num_heads,
            dropout=dropout,
            attention_dropout=0.0,  # dropout on the block's outputs only
            seed=_offset(seed, 10 * (i + 1)),
            attention=attention,
            name=f"{ENCODER}_{i}",
        )(x)
    # scale=1: with Adam the query then moves the logits 8x faster than with
    # 1/sqrt(64), so the pooling learns to prefer tokens within two epochs.
    x = AttentionPooling(
        num_heads=pooling_heads,
        scale=1.0,
        entropy_penalty=pooling_entropy,
        name=POOLING,
    )(x)
    x = keras.layers.Dropout(dropout, seed=_offset(seed, 1), name=POOLING_DROPOUT)(x)
    if ngram_logit:
        score = NgramLogit(sizes, dtype="float32", name=NGRAM)(streams)
        x = keras.layers.Concatenate(dtype="float32", name=FEATURES)(
            [keras.ops.cast(x, "float32"), score]
        )
    probability = keras.layers.Dense(
        1, activation="sigmoid", dtype="float32", name=CLASSIFIER
    )(x)
    model = keras.Model(texts, probability, name=MODEL)
    if ngram_logit:
        # Both ends of the n-gram branch start at zero, so their gradients are
        # zero and training fits the attention branch alone; `ngrams` fits
        # and blends the n-gram branch afterwards.
        classifier = model.get_layer(CLASSIFIER)
        kernel = keras.ops.convert_to_numpy(classifier.kernel)
        kernel[-1] = 0.0
        classifier.kernel.assign(kernel)
    return model


def compile_model(
    model: keras.Model,
    total_steps: int,
    *,
    learning_rate: float = DEFAULTS["learning_rate"],
    weight_decay: float = DEFAULTS["weight_decay"],
) -> keras.Model:
    """Compiles `model` with AdamW, a linear warm-up and a cosine decay.

    The learning rate rises from `learning_rate / 10` to `learning_rate`
    over the first 10% of the steps, then decays to 0 on a cosine. Gradients
    are clipped to norm 1. Loss: binary cross-entropy; metric: accuracy.

    Args:
        model: The model from `build_model`.
        total_steps: The number of training steps (epochs x batches).
        learning_rate: The peak learning rate. Defaults to `1e-3`.
        weight_decay: AdamW's weight decay. Defaults to `0.01`.

    Returns:
        `model`, compiled.
    """
    warmup = max(1, total_steps // 10)
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=learning_rate / 10,
        decay_steps=max(1, total_steps - warmup),
        alpha=0.0,
        warmup_target=learning_rate,
        warmup_steps=warmup,
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(
            learning_rate=schedule, weight_decay=weight_decay, clipnorm=1.0
        ),
        loss="binary_crossentropy",
        # An instance, not the string "accuracy": Keras makes a metric named
        # by a string inside the first traced train step of a built model,
        # and TensorFlow then traces the step again to lift its variables
        # (a tiny model's `train` took 13.1 s instead of 9.1 s here).
        metrics=[keras.metrics.BinaryAccuracy(name="accuracy")],
    )
    return model


class ReviewBatches(keras.utils.PyDataset):
    """Batches of reviews of similar length, reshuffled every epoch.

    Each epoch the reviews are shuffled, cut into pools of 50 batches, sorted
    by length inside each pool and batched; the batch order is shuffled too.
    So a batch is padded to its own longest review, not to `max_len`. Without
    shuffling (evaluation), the reviews are batched in order of length;
    `batch_indices()` tells which reviews each batch holds.

    `reviews` are the texts as given; `epoch_texts` are what the current
    epoch batches: the same reviews, some of them cropped when `crop_rate`
    is above 0. Both have one text per label, in the same order.

    The crops and the order of epoch `e` depend on `(seed, e)` only:
    `on_epoch_end` moves to the next epoch and `set_epoch(e)` to any, so a
    run resumed at epoch `e` sees the batches an uninterrupted run sees.

    Args:
        texts: Review strings.
        labels: Their 0/1 labels.
        batch_size: Reviews per batch.
        shuffle: Whether to shuffle (training) or keep the order.
            Defaults to `True`.
        seed: Seed of the shuffling and the crops. Defaults to `0`.
        crop_rate: The fraction of reviews replaced, each epoch, by a random
            crop of one to three of their sentences (`data.crop`), so that
            the model also learns to read short texts. Defaults to `0.0`.
    """

    def __init__(
        self,
        texts: Sequence[str],
        labels,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        crop_rate: float = 0.0,
    ):
        super().__init__()
        self.reviews = np.asarray(list(texts), dtype=object)
        self.epoch_texts = self.reviews
        self.labels = np.asarray(labels, dtype="float32")
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.crop_rate = crop_rate
        self.seed = seed
        self.epoch = 0
        self._batches = self._make_batches()

    def _make_batches(self) -> list[np.ndarray]:
        rng = np.random.default_rng((self.seed, self.epoch))
        if self.crop_rate:
            cropped = rng.random(len(self.reviews)) < self.crop_rate
            self.epoch_texts = np.array(
                [
                    data.crop(text, rng) if chosen else text
                    for text, chosen in zip(self.reviews, cropped, strict=True)
                ],
                dtype=object,
            )
        self.lengths = np.array([len(t.split()) for t in self.epoch_texts])
        n, size = len(self.reviews), self.batch_size
        if not self.shuffle:
            order = np.argsort(self.lengths, kind="stable")
            return [order[i : i + size] for i in range(0, n, size)]
        order = rng.permutation(n)
        pool = size * 50
        batches = []
        for start in range(0, n, pool):
            chunk = order[start : start + pool]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches += [chunk[i : i + size] for i in range(0, len(chunk), size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def __len__(self) -> int:
        return math.ceil(len(self.reviews) / self.batch_size)

    def __getitem__(self, index):
        import tensorflow as tf  # string batches: the demo runs on TensorFlow

        ids = self._batches[index]
        return tf.constant(list(self.epoch_texts[ids])), self.labels[ids]

    def batch_indices(self) -> list[np.ndarray]:
        """The indices of the reviews in each batch, in batch order."""
        return list(self._batches)

    def set_epoch(self, epoch: int) -> None:
        """Makes the batches of epoch `epoch` (counted from 0)."""
        if epoch != self.epoch:
            self.epoch = epoch
            self._batches = self._make_batches()

    def on_epoch_end(self):
        self.set_epoch(self.epoch + 1)

    def dataset(self, epochs: range | None = None, full_batches_only: bool = False):
        """The batches of the given epochs, one after the other, in `tf.data`.

        Each epoch's order is made when the pipeline reaches it (`set_epoch`),
        so it never depends on when a callback runs or how far ahead
        `tf.data` reads.

        Args:
            epochs: The epochs (counted from 0), or `None` for one pass in
                the current order (evaluation). Defaults to `None`.
            full_batches_only: Whether to skip the short batches, so that
                every step of a strategy has the global batch.
                Defaults to `False`.

        Returns:
            A `tf.data.Dataset` of `(texts, labels)` batches.
        """
        import tensorflow as tf

        epochs = [None] if epochs is None else epochs
        per_epoch = sum(
            not full_batches_only or len(ids) == self.batch_size
            for ids in self.batch_indices()
        )  # the same in every epoch

        def generate():
            for epoch in epochs:
                if epoch is not None:
                    self.set_epoch(epoch)
                for index in range(len(self)):
                    texts, labels = self[index]
                    if not full_batches_only or len(labels) == self.batch_size:
                        yield texts, labels

        dataset = tf.data.Dataset.from_generator(
            generate,
            output_signature=(
                tf.TensorSpec((None,), tf.string),
                tf.TensorSpec((None,), tf.float32),
            ),
        )
        known = tf.data.experimental.assert_cardinality(len(epochs) * per_epoch)
        return dataset.apply(known)


def _in_order(model: keras.Model, texts: Sequence[str], batch_size: int):
    """`model.predict` on `texts` batched by length, back in their order;
    `(0, outputs)` for no text. Refuses one string (not a list of them), a
    text that is not a string and a batch size that is not a positive
    integer, with a `ValueError`."""
    texts = _checks.texts(texts)
    check_positive_int("batch_size", batch_size)
    if not texts:
        width = model.outputs[0].shape[-1]
        return np.zeros((0, width), model.outputs[0].dtype)
    batches = ReviewBatches(texts, np.zeros(len(texts)), batch_size, shuffle=False)
    outputs = model.predict(batches, verbose=0)
    ordered = np.empty_like(outputs)
    ordered[np.concatenate(batches.batch_indices())] = outputs
    return ordered


def predict(
    model: keras.Model, texts: Sequence[str], batch_size: int = 128
) -> np.ndarray:
    """Positive-class probabilities of `texts`, in their order.

    The reviews are batched by length (so a batch is padded only to its own
    longest review) and the results put back in the order given.

    Args:
        model: A model from `build_model` (or loaded from its file).
        texts: Review strings: a list (or other sequence) of them, empty
            too; one string alone is refused (`ValueError`), not read as
            its characters.
        batch_size: Reviews per prediction batch. Defaults to `128`.

    Returns:
        A float array `(len(texts),)`.

    Example:

    >>> from keras_selfattn.imdb.model import build_model, predict
    >>> model = build_model(["a great film", "a dull film"], vocab_size=100,
    ...                     bigram_vocab_size=0, max_len=16)
    >>> probabilities = predict(model, ["A great film!", "Dull."])
    >>> probabilities.shape, bool(((0 < probabilities) & (probabilities < 1)).all())
    ((2,), True)
    """
    return _in_order(model, texts, batch_size)[:, 0]


def logits(
    model: keras.Model, texts: Sequence[str], batch_size: int = 128
) -> np.ndarray:
    """The classifier's logits (before its sigmoid) for `texts`, in float64.

    Computed from the pooled vectors, so that they stay exact where the
    probability rounds to 0 or 1 in float32.

    Args:
        model: A model from `build_model` (or loaded from its file).
        texts: Review strings.
        batch_size: Reviews per prediction batch. Defaults to `128`.

    Returns:
        A float64 array `(len(texts),)`.

    Example:

    >>> from keras_selfattn.imdb.model import build_model, logits, predict
    >>> model = build_model(["a great film", "a dull film"], vocab_size=100,
    ...                     bigram_vocab_size=0, max_len=16)
    >>> texts = ["A great film!", "Dull."]
    >>> probabilities = 1 / (1 + np.exp(-logits(model, texts)))
    >>> bool(np.allclose(probabilities, predict(model, texts), atol=1e-6))
    True
    """
    classifier = model.get_layer(CLASSIFIER)
    features = classifier_inputs(model, texts, batch_size)
    kernel = keras.ops.convert_to_numpy(classifier.kernel).astype("float64")
    bias = keras.ops.convert_to_numpy(classifier.bias).astype("float64")
    return (features @ kernel + bias)[:, 0]


# One sub-model per model, kept while the model lives: each sub-model keeps
# its own traced predict function, so a call costs a prediction, not a trace.
_CLASSIFIER_INPUTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def classifier_inputs(
    model: keras.Model, texts: Sequence[str], batch_size: int = 128
) -> np.ndarray:
    """What the classifier reads for `texts`, in float64, `(len(texts),
    features)`: the pooled vector, and last the n-gram score in a model with
    the n-gram branch."""
    if model not in _CLASSIFIER_INPUTS:  # one sub-model (and trace) per model
        inputs = keras.Model(model.inputs, model.get_layer(CLASSIFIER).input)
        _CLASSIFIER_INPUTS[model] = inputs
    return _in_order(_CLASSIFIER_INPUTS[model], texts, batch_size).astype("float64")


def evaluate(
    model: keras.Model,
    texts: Sequence[str],
    labels: Sequence[int] | np.ndarray,
    batch_size: int = 128,
) -> float:
    """Accuracy of `model` on reviews, batched by length.

    Args:
        model: A model from `build_model` (or loaded from its file).
        texts: Review strings (as `predict` takes them), at least one.
        labels: Their 0/1 labels, one per text (else a `ValueError`).
        batch_size: Reviews per prediction batch. Defaults to `128`.

    Returns:
        The fraction of reviews whose verdict is their label (`accuracy`).

    Example:

    >>> from keras_selfattn.imdb.model import build_model, evaluate
    >>> model = build_model(["a great film", "a dull film"], vocab_size=100,
    ...                     bigram_vocab_size=0, max_len=16)
    >>> accuracy = evaluate(model, ["A great film!", "Dull."], [1, 0])
    >>> accuracy in (0.0, 0.5, 1.0)
    True
    """
    return accuracy(predict(model, texts, batch_size), labels)


def label_of(probability: float) -> str:
    """The verdict on a positive-class probability: `POSITIVE` above
    `THRESHOLD`, else `NEGATIVE`."""
    return POSITIVE if probability > THRESHOLD else NEGATIVE


def accuracy(probabilities: np.ndarray, labels: np.ndarray) -> float:
    """The fraction of verdicts that are the labels.

    Args:
        probabilities: Positive-class probabilities; above `THRESHOLD` is a
            positive verdict.
        labels: Their 0/1 labels.

    Returns:
        A float in [0, 1]. (A NaN probability is a negative verdict: a
        diverged model's accuracy is still reported.)
    """
    positive = np.asarray(probabilities) > THRESHOLD
    if positive.ndim != 1:
        raise ValueError(
            "Received an invalid value for argument `probabilities`, expected "
            "a 1-D array (one per text). Received: probabilities of shape "
            f"{positive.shape}"
        )
    return float(np.mean(positive == (_checks.labels(labels, len(positive)) == 1)))


class ModelFileError(Exception):
    """A model file that is missing or not a model; one line for users."""


def standardization(model: keras.Model | None = None) -> Callable:
    """The function with which a demo model standardizes its texts.

    Args:
        model: A demo model (`build_model`'s or a loaded one). Defaults to
            `None`, meaning a model built today: `text.standardize_v2`.
            A model saved by keras-selfattn 0.1 reads text with
            `text.standardize`.

    Returns:
        The function, from a string tensor to a string tensor.
    """
    if model is None:
        return standardize_v2
    return model.get_layer(TEXT_VECTORIZATION).get_config()["standardize"]


def readable(texts: Sequence[str], model: keras.Model | None = None) -> list[bool]:
    """Whether each text keeps a word through the model's standardization.

    A text of nothing but characters that the standardization drops
    (`"@@@"`) leaves the model nothing to read: its probability would be the
    same constant for every such text, not a verdict. The commands and the
    server refuse such texts.

    Args:
        texts: Raw texts.
        model: The demo model whose standardization decides. Defaults to
            `None`, meaning any demo model: whether a word survives either
            standardization that one may use (`text.standardize` or
            `text.standardize_v2`), as the commands check before they load
            the model.

    Returns:
        One bool per text.
    """
    import tensorflow as tf

    texts = tf.constant(list(texts), dtype=tf.string)
    if model is None:
        words = has_words(texts, standardize) | has_words(texts, standardize_v2)
    else:
        words = has_words(texts, standardization(model))
    return [bool(r) for r in words.numpy()]


def has_words(texts, standardize: Callable = standardize_v2):
    """`readable` on a string tensor of any shape: a bool tensor, True where
    the text is UTF-8 and keeps a word through `standardize` (a TensorFlow
    op, so the exported SavedModel computes it too: bytes that are not
    UTF-8, which the standardization would keep as a word, get no verdict
    there either)."""
    import tensorflow as tf  # the standardization is a TensorFlow string op

    utf8 = tf.equal(tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8"), texts)
    words = tf.strings.length(tf.strings.strip(standardize(texts))) > 0
    return tf.logical_and(utf8, words)


def load(path: str | Path) -> keras.Model:
    """Loads a saved demo model (only `keras_selfattn` needs to be imported).

    Args:
        path: The `.keras` file.

    Returns:
        The model, which reads raw strings.

    Raises:
        ModelFileError: The file is missing (or a folder), not a model, or a
            model that is not the demo's (it lacks a layer the demo's
            commands read).

    Example:

    >>> import os, tempfile
    >>> from keras_selfattn.imdb.model import build_model, load
    >>> model = build_model(["a great film", "a dull film"], vocab_size=100,
    ...                     bigram_vocab_size=0, max_len=16)
    >>> path = os.path.join(tempfile.mkdtemp(), "tiny.keras")
    >>> model.save(path)
    >>> load(path).name
    'imdb_sentiment'
    >>> load("missing.keras")
    Traceback (most recent call last):
    ...
    keras_selfattn.imdb.model.ModelFileError: model file not found: missing.keras
    """
    import keras_selfattn  # noqa: F401  (registers the layers)

    if Path(path).is_dir():
        raise ModelFileError(
            f"cannot load model {path}: a folder, not a .keras file (the "
            "commands take the file that `train` wrote; `export` writes a "
            "folder for serving elsewhere)"
        )
    if not Path(path).is_file():
        raise ModelFileError(f"model file not found: {path}")
    if not zipfile.is_zipfile(path):  # Keras would say "File not found"
        raise ModelFileError(
            f"cannot load model {path}: not a .keras file (a zip archive)"
        )
    if not str(path).endswith(".keras"):  # Keras goes by the name (h5py, ...)
        raise ModelFileError(
            f"cannot load model {path}: a .keras archive under another name; "
            "Keras reads it only as a .keras file (rename it)"
        )
    try:
        model = keras.models.load_model(path)
    except Exception as error:  # corrupt, truncated or not a Keras model
        reason = first_line(error)
        raise ModelFileError(f"cannot load model {path}: {reason}") from None
    names = {layer.name for layer in getattr(model, "layers", ())}
    missing = [name for name in REQUIRED_LAYERS if name not in names]
    if missing:
        raise ModelFileError(
            f"cannot use model {path}: not a keras-selfattn IMDB model "
            f"(no layer {missing[0]!r}; train one with `keras-selfattn train`)"
        )
    return model
