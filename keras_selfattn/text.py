"""Text pieces for models that read raw text: standardization, clipping, n-grams.

Saved models (the IMDB demo's among them) refer to these by their registered
names (`keras_selfattn>standardize_v2`, `keras_selfattn>standardize`,
`keras_selfattn>ClipSequence`,
`keras_selfattn>BigramEmbedding`, `keras_selfattn>NgramLogit`).
`import keras_selfattn` imports this module, so such a model loads in a
fresh process without `custom_objects`.
It imports nothing heavier than Keras; TensorFlow is imported when a text is
standardized (`TextVectorization` runs on TensorFlow whatever the backend).
"""

from __future__ import annotations

import unicodedata

import keras

from keras_selfattn._validation import _is_int, check_positive_int, check_rank
from keras_selfattn.layers._common import embedded_ids, zero_padded

# HTML line breaks as they appear in the IMDB reviews: "<br />", "<br/>", "<br>".
BREAK_TAG = r"<br\s*/?>"
# Punctuation kept as tokens of its own ("great!" -> "great !").
_PUNCTUATION = r"""([!?.,;:()"*/\-])"""
# Anything else that is not an ASCII letter (a to z), a digit, an apostrophe
# or a kept mark: letters outside a to z among them.
_OTHER = r"""[^a-z0-9'!?.,;:()"*/\- ]"""


@keras.saving.register_keras_serializable(package="keras_selfattn")
def standardize(texts):
    """Standardizes a string tensor for `TextVectorization` (the first version).

    Demo models saved by keras-selfattn 0.1 (and by 0.2 development builds
    before `standardize_v2`) read text this way, so it is kept, unchanged,
    for them; new models use `standardize_v2`. It lowercases, turns
    `<br />` tags into spaces, keeps `! ? . , ; : ( ) " * / -` as tokens of
    their own (so "great!!" becomes "great ! !"), keeps every ASCII
    apostrophe as part of its word ("don't"; a word quoted with them keeps
    its quotes: "'hello'"), and turns every other character into a space (a
    curly apostrophe too: "it’s" reads as "it s"). That includes letters
    outside a to z: "cliché" reads as "clich", and a text in another script
    has no word left.

    Args:
        texts: String tensor of any shape.

    Returns:
        The standardized string tensor, of the same shape.
    """
    import tensorflow as tf

    texts = tf.strings.lower(texts)
    texts = tf.strings.regex_replace(texts, BREAK_TAG, " ")
    texts = tf.strings.regex_replace(texts, _OTHER, " ")
    return tf.strings.regex_replace(texts, _PUNCTUATION, r" \1 ")


def _folds() -> tuple[tuple[str, str], ...]:
    """`standardize_v2`'s `(regex, replacement)` pairs: combining accents
    dropped and typographic marks to their ASCII forms, then each letter
    with a diacritic of Latin-1 and Latin Extended-A (U+00C0 to U+017F) to
    its lowercase base letter."""
    marks = (
        ("[\u0300-\u036f]", ""),  # combining accents: "e\u0301" is "é"
        # Apostrophes: curly and low ones, the prime, the acute accent and
        # the backtick used as one ("didn´t"), and Windows-1252's read as
        # Latin-1.
        ("[\u2018\u2019\u201a\u201b\u2032\u00b4`\u02bc\u0091\u0092]", "'"),
        (
            "[\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb\u2039\u203a\u0093\u0094]",
            '"',
        ),
        ("[\u2010-\u2015\u2212\u0096\u0097]", "-"),  # hyphens and dashes
        ("[\u2026\u0085]", "..."),  # the ellipsis
    )
    # Letters whose decomposition has no ASCII base letter.
    bases = {"æ": "ae", "œ": "oe", "ß": "ss", "ø": "o", "đ": "d", "ð": "d",
             "ħ": "h", "ı": "i", "ĳ": "ij", "ŀ": "l", "ł": "l", "ŉ": "n",
             "ŋ": "n", "þ": "th", "ĸ": "k", "ſ": "s", "ŧ": "t"}  # fmt: skip
    letters: dict[str, list[str]] = {}
    for code in range(0xC0, 0x180):
        char = chr(code)
        if not char.isalpha():
            continue  # × and ÷
        lower = char.lower()
        base = bases.get(lower) or unicodedata.normalize("NFKD", lower)[0]
        if base.isascii() and base.isalpha():
            letters.setdefault(base, []).append(char)
    return marks + tuple(
        (f"[{''.join(chars)}]", base) for base, chars in sorted(letters.items())
    )


_FOLDS = _folds()
# A text that the folds leave unchanged: ASCII without the backtick.
_UNFOLDED = r"[\x00-\x5f\x61-\x7f]*"


@keras.saving.register_keras_serializable(package="keras_selfattn")
def standardize_v2(texts):
    """Standardizes a string tensor for `TextVectorization`, reading Unicode.

    `standardize` with typographic marks and accented Latin letters first
    folded to ASCII, so that a text reads the same whether a phone or a
    keyboard typed it: curly and low single quotes (a phone's "it’s"), the
    modifier-letter apostrophe, the prime, and the acute accent and the
    backtick used as an apostrophe ("didn´t") read as `'`; curly, low and
    angle quotes and the double prime as `"`; hyphens, dashes and the minus
    sign as `-`; the ellipsis as `...`; combining accents (U+0300 to U+036F)
    are dropped from the letter they follow, and each letter with a
    diacritic of Latin-1 and Latin Extended-A (U+00C0 to U+017F) reads as
    its base letter ("Cliché" as "cliche", "Æon" as "aeon"). Windows-1252's
    quotes, dashes and ellipsis read as Latin-1, as in the IMDB reviews
    (U+0085, U+0091 to U+0094, U+0096, U+0097), fold too; its other
    characters read that way (U+0084 for „, U+008A for Š, U+008E for Ž,
    ...) do not. Then, as `standardize` does: lowercase, `<br />` tags to
    spaces, `! ? . , ; : ( ) " * / -` as tokens of their own, every
    apostrophe kept with its word, and every other character a space:
    letters of other scripts too, so a text in Cyrillic or Chinese has no
    word left (the demo's vocabulary has none of theirs).

    The IMDB demo's models use it from keras-selfattn 0.2 on.

    Args:
        texts: String tensor of any shape, or a `tf.RaggedTensor` of
            strings.

    Returns:
        The standardized string tensor, of the same shape.

    Example:

    >>> import numpy as np
    >>> out = standardize_v2(np.array(["It’s a CLICHÉ… ok"]))
    >>> out.numpy()[0].decode().split()
    ["it's", 'a', 'cliche', '.', '.', '.', 'ok']
    """
    import tensorflow as tf

    if isinstance(texts, tf.RaggedTensor):
        return texts.with_flat_values(standardize_v2(texts.flat_values))
    texts = tf.convert_to_tensor(texts, dtype=tf.string)
    flat = tf.reshape(texts, [-1])
    # Only the texts with a character to fold (about 1 review in 10) go
    # through the folds: the rest would come out unchanged.
    where = tf.where(tf.logical_not(tf.strings.regex_full_match(flat, _UNFOLDED)))
    folded = tf.gather_nd(flat, where)
    for pattern, replacement in _FOLDS:
        folded = tf.strings.regex_replace(folded, pattern, replacement)
    flat = tf.tensor_scatter_nd_update(flat, where, folded)
    return standardize(tf.reshape(flat, tf.shape(texts)))


@keras.saving.register_keras_serializable(package="keras_selfattn")
class ClipSequence(keras.layers.Layer):
    """Keeps at most `max_length` token ids of each `(batch, seq)` row.

    `TextVectorization` without `output_sequence_length` pads each batch to
    its longest text (padding id 0 at the end). This layer then bounds the
    length: a row with more than `max_length` real tokens keeps its first
    `head` tokens and its last `max_length - head` ones (reviews often end
    with the verdict); shorter rows are unchanged. `head=None` keeps the
    first `max_length` tokens.

    Args:
        max_length: Positive integer, the most tokens kept per text.
        head: Optional integer in `[0, max_length]`, how many leading tokens
            a long text keeps. Defaults to `None`, meaning `max_length`.
        **kwargs: Base layer arguments, such as `name`.

    Call arguments:
        inputs: Integer tensor `(batch, seq)`, padding id 0 at the end.

    Returns:
        Integer tensor `(batch, min(seq, max_length))`.

    Example:

    >>> ids = np.array([[5, 6, 7, 8, 9, 0], [5, 6, 0, 0, 0, 0]])
    >>> clipped = ClipSequence(4, head=1)(ids)  # the first token, the last 3
    >>> keras.ops.convert_to_numpy(clipped).tolist()
    [[5, 7, 8, 9], [5, 6, 0, 0]]
    """

    def __init__(self, max_length: int, head: int | None = None, **kwargs):
        check_positive_int("max_length", max_length)
        if head is not None and (not _is_int(head) or not 0 <= head <= max_length):
            raise ValueError(
                "Received an invalid value for argument `head`, expected an "
                f"integer in [0, max_length={max_length}] or `None`. "
                f"Received: head={head!r}"
            )
        super().__init__(**kwargs)
        self.max_length = int(max_length)
        self.head = None if head is None else int(head)

    def call(self, inputs):
        from keras import ops

        check_rank("inputs", inputs.shape, 2, "(batch, seq) of token ids")
        if self.head is None or self.head == self.max_length:
            return inputs[:, : self.max_length]
        # The kept length is the clipped slice's: static where `seq` is,
        # symbolic under `jax.export` (where `min(seq, max_length)` is no
        # bool), dynamic in TensorFlow graphs of any length.
        length = inputs[:, : self.max_length].shape[1]
        if length is None:  # a traced length (TensorFlow graphs)
            length = ops.minimum(ops.shape(inputs)[1], self.max_length)
        real = ops.sum(ops.cast(ops.not_equal(inputs, 0), "int32"), axis=1)
        steps = ops.expand_dims(ops.arange(0, length, dtype="int32"), 0)
        start = ops.expand_dims(real - (self.max_length - self.head), 1)
        clipped = ops.where(steps < self.head, steps, start + steps - self.head)
        long_row = ops.expand_dims(real > self.max_length, 1)
        index = ops.where(long_row, clipped, steps)
        return ops.take_along_axis(inputs, index, axis=1)

    def compute_output_shape(self, input_shape):
        seq = input_shape[1]
        if seq is not None:
            seq = min(seq, self.max_length)
        return (input_shape[0], seq)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(
            self.compute_output_shape(inputs.shape), dtype=inputs.dtype
        )

    def get_config(self):
        return {
            **super().get_config(),
            "max_length": self.max_length,
            "head": self.head,
        }


@keras.saving.register_keras_serializable(package="keras_selfattn")
class BigramEmbedding(keras.layers.Layer):
    """Adds the vector of the bigram that ends at each token to that token's.

    `TextVectorization(ngrams=(2,))` gives the ids of the bigrams
    `(w_1 w_2, w_2 w_3, ...)`, one fewer than the tokens. This layer shifts
    them by one position, so that position `t` gets the bigram
    `w_(t-1) w_t`, embeds them and adds them to the token vectors, so that
    the model can read word pairs such as "not good". No bigram ends at
    position 0: it gets the vector of id 0 (`TextVectorization`'s padding
    id, which no real bigram has), so that vector learns a start of text.
    Padded positions (from the Keras mask of `inputs`) come out zero,
    whatever `inputs` holds there, and the mask is handed on.

    Args:
        vocabulary_size: Positive integer, the number of bigram ids.
        embedding_dim: Positive integer, the size of the vectors.
        embeddings_initializer: Initializer of the bigram vectors.
            Defaults to `"zeros"`: training starts from the unigram model.
        **kwargs: Base layer arguments, such as `name`.

    Call arguments:
        inputs: Token vectors `(batch, seq, embedding_dim)`, e.g. from
            `TokenAndPositionEmbedding`.
        bigram_ids: Integer tensor `(batch, seq - 1)` of ids in
            `[0, vocabulary_size)`; it is padded or cut to line up with
            `inputs`. An id outside that range raises a `ValueError` in an
            eager call; in a compiled one, TensorFlow's CPU kernel raises,
            and elsewhere its position is NaN (as `TokenAndPositionEmbedding`).
        mask: Optional boolean `(batch, seq)`, the padding mask. Defaults
            to the Keras mask of `inputs`, which Keras passes as
            `inputs_mask`.

    Returns:
        Tensor `(batch, seq, embedding_dim)`.

    Example:

    >>> layer = BigramEmbedding(vocabulary_size=10, embedding_dim=2)
    >>> layer.build((1, 3, 2))
    >>> layer.embedding.set_weights([np.arange(20.0).reshape(10, 2)])
    >>> tokens = np.zeros((1, 3, 2), "float32")  # w1 w2 w3
    >>> bigrams = np.array([[4, 7]])  # "w1 w2" and "w2 w3"
    >>> keras.ops.convert_to_numpy(layer(tokens, bigrams)).tolist()
    [[[0.0, 1.0], [8.0, 9.0], [14.0, 15.0]]]
    """

    def __init__(
        self,
        vocabulary_size: int,
        embedding_dim: int,
        embeddings_initializer="zeros",
        **kwargs,
    ):
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("embedding_dim", embedding_dim)
        super().__init__(**kwargs)
        # Keras's Embedding takes only Python integers (ours NumPy's too).
        self.vocabulary_size = int(vocabulary_size)
        self.embedding_dim = int(embedding_dim)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.supports_masking = True
        # Keras would cast float `bigram_ids` to the compute dtype before
        # `call` (bfloat16 turns id 257.0 into 256.0, another pair): `call`
        # casts `inputs` itself, and `embedded_ids` reads the ids as given.
        self.autocast = False
        self.embedding = keras.layers.Embedding(
            self.vocabulary_size,
            self.embedding_dim,
            embeddings_initializer=self.embeddings_initializer,
            dtype=self.dtype_policy,
            name="bigram_embedding",
        )

    def build(self, inputs_shape, bigram_ids_shape=None):
        check_rank("inputs", inputs_shape, 3, "(batch, seq, embedding_dim)")
        self.embedding.build(bigram_ids_shape or inputs_shape[:2])

    def call(self, inputs, bigram_ids, mask=None, inputs_mask=None):
        from keras import ops

        # With two tensor arguments Keras passes the mask of `inputs` as
        # `inputs_mask`, never as `mask`.
        mask = inputs_mask if mask is None else mask
        check_rank("inputs", inputs.shape, 3, "(batch, seq, embedding_dim)")
        check_rank("bigram_ids", bigram_ids.shape, 2, "(batch, seq - 1) of ids")
        inputs = ops.cast(inputs, self.compute_dtype)
        if inputs.shape[1] == 0:
            return inputs  # A text with no token: no pair to add.
        length = ops.shape(inputs)[1]
        ids = ops.pad(bigram_ids, [[0, 0], [1, 0]])[:, :length]
        ids = ops.pad(ids, [[0, 0], [0, length - ops.shape(ids)[1]]])
        vectors = embedded_ids(self.embedding, ids, "bigram_ids")
        # Zeros at padding, whatever `inputs` holds there (a select).
        return zero_padded(ops.add(inputs, ops.cast(vectors, inputs.dtype)), mask)

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, inputs_shape, bigram_ids_shape=None):
        return tuple(inputs_shape)

    def compute_output_spec(self, inputs, bigram_ids, mask=None, inputs_mask=None):
        return keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "embedding_dim": self.embedding_dim,
            "embeddings_initializer": keras.initializers.serialize(
                self.embeddings_initializer
            ),
        }


@keras.saving.register_keras_serializable(package="keras_selfattn")
class NgramLogit(keras.layers.Layer):
    """A linear score of the distinct n-grams of each text, `(batch, 1)`.

    A bag of binarized n-grams, as in NB-SVM (Wang & Manning, 2012): each
    id of each vocabulary has one weight, and a text scores the sum of the
    weights of the distinct ids it holds, each counted once however often
    it occurs. Ids below `first_id` (padding 0 and the out-of-vocabulary
    id 1 of `TextVectorization`) count for nothing, so padding never
    matters. Several id tensors (unigrams, bigrams, ...) each index their
    own vocabulary; their weights sit one after the other in `kernel`.

    Args:
        vocabulary_sizes: Positive integers, the size of each vocabulary,
            in the order of the id tensors of the call.
        first_id: Non-negative integer, the lowest id that counts.
            Defaults to `2`.
        kernel_initializer: Initializer of the weights `(sum of sizes,)`.
            Defaults to `"zeros"`.
        **kwargs: Base layer arguments, such as `name`.

    Call arguments:
        inputs: A list (or tuple) of integer tensors `(batch, seq_i)`, one
            per vocabulary, padded with 0 (any length, any padding). Ids
            below `first_id` or not below their vocabulary's size count for
            nothing; so does a float id that is not whole (NaN too), where
            a whole one (3.0) is its id, also in mixed precision.

    Returns:
        Tensor `(batch, 1)`: the sum of the weights of each text's distinct
        ids.

    Example:

    >>> import numpy as np
    >>> layer = NgramLogit([5, 3], kernel_initializer="ones")
    >>> unigrams = np.array([[2, 2, 3, 1, 0]])  # 2 twice, OOV, padding
    >>> bigrams = np.array([[2, 0, 0, 0]])
    >>> float(keras.ops.convert_to_numpy(layer([unigrams, bigrams]))[0, 0])
    3.0
    """

    def __init__(
        self,
        vocabulary_sizes,
        first_id: int = 2,
        kernel_initializer="zeros",
        **kwargs,
    ):
        listed = isinstance(vocabulary_sizes, (list, tuple))
        sizes = list(vocabulary_sizes) if listed else None
        if not sizes:
            raise ValueError(
                "Received an invalid value for argument `vocabulary_sizes`, "
                "expected a non-empty list of positive integers. Received: "
                f"vocabulary_sizes={vocabulary_sizes!r}"
            )
        for size in sizes:
            check_positive_int("vocabulary_sizes", size)
        if not _is_int(first_id) or first_id < 0:
            raise ValueError(
                "Received an invalid value for argument `first_id`, expected a "
                f"non-negative integer. Received: first_id={first_id!r}"
            )
        super().__init__(**kwargs)
        self.vocabulary_sizes = [int(size) for size in sizes]
        self.first_id = int(first_id)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        # Float ids are not cast to the compute dtype (bfloat16 turns 257.0
        # into 256.0); the weights are summed in their own dtype (below).
        self.autocast = False

    def build(self, input_shape=None):
        self.kernel = self.add_weight(
            name="kernel",
            shape=(sum(self.vocabulary_sizes),),
            initializer=self.kernel_initializer,
            autocast=False,  # read in float32 under mixed precision too
        )

    def call(self, inputs):
        from keras import ops

        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if len(inputs) != len(self.vocabulary_sizes):
            raise ValueError(
                "Received an invalid value for argument `inputs`, expected "
                f"{len(self.vocabulary_sizes)} id tensors (one per vocabulary). "
                f"Received: {len(inputs)} tensors"
            )
        total, offset = None, 0
        for ids, size in zip(inputs, self.vocabulary_sizes, strict=True):
            check_rank("inputs", ids.shape, 2, "(batch, seq) of ids")
            if "float" in keras.backend.standardize_dtype(ids.dtype):
                ids = ops.where(ops.equal(ids, ops.floor(ids)), ids, -1)  # 2.7
            # Ids past int32 (int64 ones) count for nothing, not wrapped.
            ids = ops.where(ops.less(ids, size), ids, -1)
            ids = ops.sort(ops.cast(ids, "int32"), axis=-1)
            # After sorting, an id is new where it differs from its left one.
            left = ops.pad(ids, [[0, 0], [1, 0]], constant_values=-1)[:, :-1]
            counts = ops.logical_and(ops.not_equal(ids, left), ids >= self.first_id)
            counts = ops.logical_and(counts, ids < size)
            index = ops.where(counts, ids + offset, 0)
            weights = ops.take(ops.convert_to_tensor(self.kernel), index)
            part = ops.sum(ops.where(counts, weights, 0.0), axis=1, keepdims=True)
            total = part if total is None else total + part
            offset += size
        return ops.cast(total, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        several = input_shape and isinstance(input_shape[0], (list, tuple))
        shapes = input_shape if several else [input_shape]
        return (shapes[0][0], 1)

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_sizes": list(self.vocabulary_sizes),
            "first_id": self.first_id,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


__all__ = [
    "BREAK_TAG",
    "BigramEmbedding",
    "ClipSequence",
    "NgramLogit",
    "standardize",
    "standardize_v2",
]
