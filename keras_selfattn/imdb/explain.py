"""Which words decided the verdict? Attributions per token and their picture.

`explain(model, text)` runs a sub-model of the IMDB model's own layers
(`explainer`) on one review and returns each token's attribution: how much it
moved the logit, computed on the input (`attributions`: integrated gradients
over the token and bigram vectors for the attention branch, plus each token's
exact share of the linear n-gram branch). As a second view it returns the
`AttentionPooling` weight of every token (the weight each token's vector gets
in the average that the classifier reads), each token's share of the
attention branch's logit through the pooling, and the last encoder block's
per-head self-attention maps. `occlusion` (leave one token out) is the
method the attributions were measured against and chosen over
(`benchmarks/imdb.py --trust`). `plot` draws the review
as text with each token shaded by its attribution (`view="attributions"`,
the default) or by its pooling weight with the shares as bars below it
(`view="pooling"`), and, on request, the per-head maps, on a
`matplotlib.figure.Figure` of its own: it leaves pyplot and matplotlib's
backend alone. The model's layers are
found by their names (`model.py`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from pathlib import Path

import keras
import numpy as np

from keras_selfattn._validation import (
    check_bool,
    check_one_of,
    check_positive_float,
    check_positive_int,
    invalid,
)
from keras_selfattn.imdb import model as imdb_model

__all__ = [
    "Explanation",
    "erase",
    "explain",
    "explainer",
    "faithfulness",
    "integrated_gradients",
    "occlusion",
    "plot",
    "relative_weights",
    "token_scores",
    "token_shades",
]


@dataclass
class Explanation:
    """What decided the model's verdict on one review, and where it attended.

    Attributes:
        tokens: The review's tokens as the model read them (standardized,
            at most `max_len`).
        attributions: `(len(tokens),)` how much each token moved the logit,
            positive towards "positive": integrated gradients (Sundararajan
            et al., 2017) over the token and bigram vectors, from the
            review with no words (position vectors only), for the
            attention branch (a word pair's vector's credit split half to
            each of its two words), plus the
            token's exact share of the n-gram branch (each distinct word's
            weight split over its occurrences, each word pair's over its
            two words). With `baseline` and `rest` they sum to the logit,
            up to the integral's discretisation (`integrated_gradients`).
        weights: `(len(tokens),)` pooling weights, averaged over the pooling
            heads; they sum to 1.
        head_maps: `(num_heads, len(tokens), len(tokens))` self-attention
            weights of the last encoder block, or None.
        probability: The model's positive-class probability.
        contributions: `(len(tokens),)` each token's share of the logit:
            its pooling weight times its vector's dot product with the
            classifier's kernel. They sum, with the classifier's bias and
            `ngram_share`, to the logit exactly; positive values push
            towards "positive".
        gap_after: For a review longer than `max_len`, the position after
            which words were skipped: the middle of the review (`head_len`
            in `(0, max_len)`), -1 when its start was (`head_len=0`),
            `len(tokens) - 1` when its end was (`head_len=None`); else
            None.
        baseline: The attention branch's logit on the review with no words
            (position vectors only) plus the classifier's bias: where the
            attributions start.
        rest: The n-gram branch's share of the words the attention branch
            does not read (the skipped middle of a long review).
        ngram_share: The n-gram branch's term of the logit (0 for a model
            without one); `contributions`, the classifier's bias and it sum
            to the logit.
    """

    tokens: list[str]
    weights: np.ndarray
    head_maps: np.ndarray | None
    probability: float
    contributions: np.ndarray
    gap_after: int | None = None
    attributions: np.ndarray | None = None
    baseline: float = 0.0
    rest: float = 0.0
    ngram_share: float = 0.0

    def top_attributions(
        self, k: int = 5, positive: bool = True
    ) -> list[tuple[int, str, float]]:
        """The `k` tokens whose attributions push most towards one class."""
        values = np.asarray(self.attributions)
        order = np.argsort(-values if positive else values, kind="stable")[:k]
        return [
            (int(i), self.tokens[i], float(values[i]))
            for i in order
            if (values[i] > 0 if positive else values[i] < 0)
        ]

    def top(self, k: int = 10) -> list[tuple[int, str, float]]:
        """The `k` most-attended tokens as (position, token, weight)."""
        order = np.argsort(-self.weights, kind="stable")[:k]
        return [(int(i), self.tokens[i], float(self.weights[i])) for i in order]

    def top_contributions(
        self, k: int = 5, positive: bool = True
    ) -> list[tuple[int, str, float]]:
        """The `k` tokens pushing most towards one class, with their shares."""
        sign = -1.0 if positive else 1.0
        order = np.argsort(sign * self.contributions, kind="stable")[:k]
        return [
            (int(i), self.tokens[i], float(self.contributions[i]))
            for i in order
            if (self.contributions[i] > 0) == positive
        ]

    def summary(self, top: int = 10) -> str:
        """The most-attended tokens and the tokens pushing most each way.

        Args:
            top: How many most-attended tokens to list. Defaults to `10`.

        Returns:
            Lines of text, for printing (a side no token pushes towards
            reads `(none)`).
        """
        lines = []
        if self.attributions is not None:
            for positive in (True, False):
                found = self.top_attributions(5, positive=positive)
                listed = ", ".join(f"{token} ({a:+.3f})" for _, token, a in found)
                side = "positive" if positive else "negative"
                lines.append(f"attributions towards {side}: {listed or '(none)'}")
        lines.append(f"most-attended tokens, pooling weights (of {len(self.tokens)}):")
        for position, token, weight in self.top(top):
            lines.append(f"  {weight:.4f}  {token}  (token {position})")
        for positive in (True, False):
            shares = self.top_contributions(5, positive=positive)
            listed = ", ".join(f"{token} ({share:+.3f})" for _, token, share in shares)
            side = "positive" if positive else "negative"
            lines.append(f"pooling shares towards {side}: {listed or '(none)'}")
        return "\n".join(lines)


# The explainer of each model explained so far (built once per model).
_EXPLAINERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def explainer(model: keras.Model) -> keras.Model:
    """The IMDB model with the outputs that `explain` reads.

    A `keras.Model` of `model`'s own layers (and so its weights), from raw
    strings `(batch,)` to: the token ids `(batch, T)` after the clip; the
    token vectors that the pooling reads `(batch, T, D)`; the pooling
    weights `(batch, pooling_heads, T)`; the last encoder block's
    self-attention maps `(batch, num_heads, T, T)`; the model's own
    output, the probabilities `(batch, 1)`; the vectors the first encoder
    block reads and the token and position vectors alone (`(batch, T, D)`
    each: their difference is the bigram vectors); and the unclipped token
    (and bigram) ids that the n-gram branch reads. Only the last encoder block and
    the pooling are called a second time, on the tensors the model gives
    them, to return their weights; every other tensor is the model's own.
    Made once per model.

    Args:
        model: A model built by `keras_selfattn.imdb.model.build_model`,
            possibly reloaded from a `.keras` file.

    Returns:
        The `keras.Model`.
    """
    if model not in _EXPLAINERS:
        encoders = [
            layer
            for layer in model.layers
            if layer.name.startswith(f"{imdb_model.ENCODER}_")
        ]
        pooling = model.get_layer(imdb_model.POOLING)
        names = {layer.name for layer in model.layers}
        outputs = [
            model.get_layer(imdb_model.CLIP).output,
            keras.tree.flatten(pooling.input)[0],
            _Scores.of(pooling),
            _Scores.of(encoders[-1]),
            model.outputs[0],
            keras.tree.flatten(model.get_layer(imdb_model.EMBEDDING_DROPOUT).input)[0],
            model.get_layer(imdb_model.EMBEDDING).output,
            model.get_layer(imdb_model.TEXT_VECTORIZATION).output,
        ]
        if imdb_model.BIGRAM_VECTORIZATION in names:
            outputs.append(model.get_layer(imdb_model.BIGRAM_VECTORIZATION).output)
        _EXPLAINERS[model] = keras.Model(model.inputs, outputs, name="explainer")
    return _EXPLAINERS[model]


class _Scores(keras.layers.Layer):
    """The attention weights of one of the model's layers: that layer, with
    its weights, called with `return_attention_scores=True`, on the tensor
    (and Keras mask) the model gives it."""

    def __init__(self, layer: keras.layers.Layer, **kwargs):
        super().__init__(name=f"{layer.name}_scores", **kwargs)
        self.layer = layer

    def call(self, inputs, mask=None):
        return self.layer(inputs, mask=mask, return_attention_scores=True)[1]

    def compute_mask(self, inputs, mask=None):
        return None

    @classmethod
    def of(cls, layer: keras.layers.Layer):
        # The tensors the model called `layer` with: the input, then the
        # mask (a loaded model's inputs may carry another, equal, mask).
        inputs, *mask = keras.tree.flatten(layer.input)
        return cls(layer)(inputs, mask=mask[0] if mask else None)


def explain(model: keras.Model, text: str) -> Explanation:
    """What decided an IMDB model's verdict on one review, and where it attended.

    Args:
        model: A model built by `keras_selfattn.imdb.model.build_model`,
            possibly reloaded from a `.keras` file.
        text: One raw review.

    Returns:
        An `Explanation`: its `probability` is the model's; its
        `attributions` with `baseline` and `rest` sum to the model's logit
        (up to the integral's discretisation), and its `contributions` with
        the classifier's bias and `ngram_share` sum to it exactly.

    Example:

    >>> from keras_selfattn.imdb.explain import explain
    >>> from keras_selfattn.imdb.model import build_model, logits
    >>> model = build_model(["a great film", "a dull film"], vocab_size=100,
    ...                     bigram_vocab_size=0, max_len=16)
    >>> explanation = explain(model, "A great film!")
    >>> explanation.tokens, explanation.attributions.shape
    (['a', 'great', 'film', '!'], (4,))
    >>> total = explanation.baseline + explanation.rest
    >>> total += explanation.attributions.sum()
    >>> bool(abs(total - logits(model, ["A great film!"])[0]) < 0.01)
    True
    >>> print(explanation.summary(top=1))
    attributions towards positive: ...
    attributions towards negative: ...
    most-attended tokens, pooling weights (of 4):
      0.2500  a  (token 0)
    pooling shares towards positive: ...
    pooling shares towards negative: ...
    """
    import tensorflow as tf

    if not isinstance(text, str):
        raise invalid("text", "one review as a string", text)
    vectorizer = model.get_layer(imdb_model.TEXT_VECTORIZATION)
    clip = model.get_layer(imdb_model.CLIP)
    classifier = model.get_layer(imdb_model.CLASSIFIER)
    texts = tf.constant([text])
    outputs = explainer(model)(texts)
    ids, x, weights, maps, probability, vectors_in, token_vectors, *all_ids = outputs
    probability = float(np.asarray(probability)[0, 0])

    ids = np.asarray(ids)[0]
    length = int(np.sum(ids != 0))
    head_weights = np.asarray(weights, dtype="float32")[0][:, :length]  # (H, T)
    # Each token's share of the logit: the classifier is linear in the pooled
    # vector, and each pooling head averages its slice of the token vectors.
    vectors = np.asarray(x, dtype="float32")[0, :length]  # (T, D)
    full_kernel = np.asarray(classifier.kernel, dtype="float32")[:, 0]
    kernel = full_kernel[: vectors.shape[-1]]  # (D,): the pooled vector's part
    heads = head_weights.shape[0]
    per_head = (vectors * kernel).reshape(length, heads, -1 if length else 0)
    per_head = per_head.sum(-1)  # (T, H)
    contributions = (per_head * head_weights.T).sum(-1)

    # The words TextVectorization saw, at the positions the clip kept, so
    # out-of-vocabulary words show as themselves instead of [UNK].
    standardize = imdb_model.standardization(model)
    words = standardize(texts).numpy()[0].decode("utf-8").split()
    positions = np.arange(1, len(words) + 1, dtype="int32")[None]
    kept = np.asarray(clip(positions))[0] - 1
    kept = kept[kept >= 0][:length]
    gap_after = None
    if len(kept) == length and len(words) == int(
        np.sum(np.asarray(vectorizer(texts)) != 0)
    ):
        tokens = [words[i] for i in kept]
        jumps = np.nonzero(np.diff(kept) > 1)[0]
        if len(jumps):  # the middle was cut
            gap_after = int(jumps[0])
        elif length and kept[0] > 0:  # the start was cut
            gap_after = -1
        elif length and kept[-1] < len(words) - 1:  # the end was cut
            gap_after = length - 1
    else:
        vocabulary = vectorizer.get_vocabulary()
        tokens = [vocabulary[i] for i in ids[:length]]
    if gap_after is None and len(tokens) == length and len(kept) != length:
        kept = np.arange(length)
    maps = np.asarray(maps, dtype="float32")[0][:, :length, :length]

    # Attributions: integrated gradients for the attention branch, and the
    # n-gram branch's exact shares.
    mask = tf.not_equal(ids[None], 0)
    gradients, baseline = integrated_gradients(
        model, vectors_in, mask, token_vectors=token_vectors, gap_after=gap_after
    )
    attributions = gradients[:length].astype("float64")
    baseline += float(np.asarray(classifier.bias)[0])
    rest = ngram_share = 0.0
    if imdb_model.NGRAM in {layer.name for layer in model.layers}:
        shares = _ngram_shares(model, [np.asarray(a)[0] for a in all_ids])
        shares *= float(full_kernel[-1])  # the classifier's weight of the score
        ngram_share = float(shares.sum())
        if len(kept) == length and len(shares) >= length:
            attributions += shares[kept]
            rest = ngram_share - float(shares[kept].sum())
        else:  # the words and the ids do not line up: the shares stay apart
            rest = ngram_share
    return Explanation(
        tokens,
        head_weights.mean(axis=0),
        maps,
        probability,
        contributions,
        gap_after,
        attributions,
        baseline,
        rest,
        ngram_share,
    )


# Steps of the integral of `integrated_gradients` (midpoint rule).
IG_STEPS = 64


def integrated_gradients(
    model, vectors, mask, steps: int = IG_STEPS, *, token_vectors=None, gap_after=None
):
    """Integrated gradients of the attention branch's logit over the token
    and bigram vectors (Sundararajan et al., 2017).

    The baseline is the review with no words: each position keeps its
    position vector only. The attention branch (the encoder blocks, the
    pooling and the classifier's kernel on the pooled vector) runs on the
    baseline plus `(k + 0.5) / steps` (`k = 0 .. steps - 1`) of the words'
    vectors (token and bigram vectors), with the review's padding mask; each
    position's attribution is its words' vector times the mean gradient,
    summed over the features. With `token_vectors`, the part that comes from
    the bigram vector of a position (the pair of that word and the one
    before it) is split half to each of the pair's two words, as a word
    pair's weight is in the n-gram branch: in "not good" the pair's credit
    goes to "not" as much as to "good". After the gap of a clipped review
    the pair's first word is one the clip cut: that pair's credit stays
    with the word shown. Their sum is the branch's logit on the review
    minus its logit on the baseline, up to the midpoint rule's error.

    Args:
        model: A model from `build_model`.
        vectors: `(1, T, D)` the vectors that the first encoder block reads
            (token, position and bigram vectors, summed).
        mask: `(1, T)` boolean, True at real tokens.
        steps: Points of the integral. Defaults to `IG_STEPS` (64).
        token_vectors: `(1, T, D)` the token and position vectors alone
            (`vectors` less the bigram vectors), or None to credit each
            bigram vector to the position it is added at. Defaults to
            `None`.
        gap_after: The position after which a clipped review's words were
            cut (`Explanation.gap_after`), or None. Only a cut middle moves
            a pair's credit: a cut start or end (-1, `T - 1`) leaves no
            pair that reaches past the clip. Defaults to `None`.

    Returns:
        `(attributions (T,), the branch's logit on the baseline)`.
    """
    import tensorflow as tf
    from keras.src.backend import set_keras_mask

    encoders = [
        layer
        for layer in model.layers
        if layer.name.startswith(f"{imdb_model.ENCODER}_")
    ]
    pooling = model.get_layer(imdb_model.POOLING)
    classifier = model.get_layer(imdb_model.CLASSIFIER)
    vectors = tf.cast(vectors, "float32")
    length = int(vectors.shape[1])
    table = np.asarray(model.get_layer(imdb_model.EMBEDDING).position_embeddings)
    real = tf.cast(mask, "float32")[..., None]
    baseline = tf.constant(table[:length].astype("float32"))[None] * real
    words = vectors - baseline
    width = pooling.compute_output_shape(tuple(vectors.shape))[-1]
    kernel = tf.constant(np.asarray(classifier.kernel, dtype="float32")[:width])

    def branch(x, m):
        x = tf.cast(x, encoders[0].compute_dtype)
        set_keras_mask(x, m)
        for encoder in encoders:
            x = encoder(x)
        return tf.matmul(tf.cast(pooling(x), "float32"), kernel)[:, 0]

    alphas = (tf.range(steps, dtype="float32") + 0.5) / steps
    path = baseline + alphas[:, None, None] * words
    masks = tf.repeat(mask, steps, axis=0)
    with tf.GradientTape() as tape:
        tape.watch(path)
        outputs = branch(path, masks)
    gradients = tape.gradient(outputs, path)
    mean = tf.reduce_mean(gradients, 0)
    attributions = tf.reduce_sum(words[0] * mean, -1).numpy()
    if token_vectors is not None:
        # Position t's bigram vector is the pair (t - 1, t)'s: half of its
        # credit moves to word t - 1, as the n-gram branch splits a pair.
        pairs = vectors[0] - tf.cast(token_vectors, "float32")[0]
        moved = tf.reduce_sum(pairs * mean, -1).numpy()[1:] / 2
        if gap_after is not None and 0 <= gap_after < len(moved):
            moved[gap_after] = 0.0  # the pair's first word was cut
        attributions[:-1] += moved
        attributions[1:] -= moved
    start = float(branch(baseline, mask).numpy()[0])
    return attributions, start


def occlusion(
    model: keras.Model, tokens: list[str], batch_size: int = 128
) -> np.ndarray:
    """Leave-one-token-out attributions (occlusion; Li et al., 2016).

    Each token's attribution is the model's logit on the text as it read it
    (`tokens` joined by spaces) minus its logit with that token deleted:
    positive towards "positive", whatever the model predicts. For a review
    longer than the model reads, `Explanation.tokens` are the clipped text,
    so the logits are those of the clipped text too. The method needs no
    gradient and sees the whole model, context included; it does not sum to
    the logit (a word that another word backs up loses little when deleted
    alone). The demo measures it beside `Explanation.attributions`
    (`benchmarks/imdb.py --trust`), which it chose by that measurement.

    Args:
        model: A model from `build_model` (or loaded from its file).
        tokens: The text's tokens, as `Explanation.tokens`.
        batch_size: Texts per prediction batch. Defaults to `128`.

    Returns:
        `(len(tokens),)` float64 logit differences.

    Example:

    >>> from keras_selfattn.imdb.explain import occlusion
    >>> from keras_selfattn.imdb.model import build_model, logits
    >>> model = build_model(["a great film", "a dull film"], vocab_size=100,
    ...                     bigram_vocab_size=0, max_len=16)
    >>> scores = occlusion(model, ["a", "great", "film"])
    >>> without_great = logits(model, ["a film"])[0]
    >>> bool(np.isclose(scores[1], logits(model, ["a great film"])[0] - without_great))
    True
    """
    if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens):
        # A string would be read as its characters.
        raise invalid("tokens", "a list of token strings", tokens)
    check_positive_int("batch_size", batch_size)
    tokens = list(tokens)
    if not tokens:
        return np.zeros(0)
    variants = [" ".join(tokens)]
    variants += [" ".join(tokens[:i] + tokens[i + 1 :]) for i in range(len(tokens))]
    values = imdb_model.logits(model, variants, batch_size)
    return values[0] - values[1:]


def _ngram_shares(model, streams: list[np.ndarray]) -> np.ndarray:
    """Each word's share of the n-gram branch's score (before the classifier's
    weight), over all the review's words (unclipped): a distinct word's
    weight split evenly over its occurrences, a distinct pair's over its
    occurrences and, half each, its two words."""
    ngram = model.get_layer(imdb_model.NGRAM)
    weights = np.asarray(ngram.kernel, dtype="float64")
    words = int(np.sum(streams[0] != 0))
    shares = np.zeros(words)
    offset = 0
    for stream, (index, size) in zip(
        streams, enumerate(ngram.vocabulary_sizes), strict=False
    ):
        ids = np.asarray(stream[: words if index == 0 else max(0, words - 1)])
        counts = (ids >= ngram.first_id) & (ids < size)
        values = np.zeros(len(ids))
        if counts.any():
            unique, inverse, occurrences = np.unique(
                ids[counts], return_inverse=True, return_counts=True
            )
            values[counts] = weights[offset + unique][inverse] / occurrences[inverse]
        if index == 0:
            shares += values
        else:  # pair j joins words j and j + 1
            shares[: len(values)] += values / 2
            shares[1 : len(values) + 1] += values / 2
        offset += size
    return shares


GAP = "[…]"

# The picture's colour scale: full colour at this multiple of uniform (1/n).
SATURATION = 4.0


def relative_weights(weights: np.ndarray) -> np.ndarray:
    """Pooling weights as multiples of uniform attention: `weights * n`.

    1 means "as much as average"; below 1, less. The picture (and the web
    page) shades from 1 up, so that near-uniform attention looks near white.

    Args:
        weights: `(n,)` pooling weights of one review's tokens, as
            `Explanation.weights`.

    Returns:
        `(n,)` float64 multiples of `1 / n`.
    """
    weights = np.asarray(weights, dtype="float64")
    return weights * len(weights)


def token_shades(weights: np.ndarray) -> np.ndarray:
    """The picture's colour strength per token, in [0, 1].

    0 (white) up to uniform attention, 1 from `SATURATION` times uniform on,
    linear between.

    Args:
        weights: `(n,)` pooling weights, as `Explanation.weights`.

    Returns:
        `(n,)` float64 shades in `[0, 1]`.
    """
    ratios = relative_weights(weights)
    return np.clip((ratios - 1.0) / (SATURATION - 1.0), 0.0, 1.0)


def _wrap(
    tokens: list[str], width: int, gap_after: int | None = None
) -> list[list[tuple[int, str]]]:
    """Lines of (position, token); position -1 marks the skipped middle."""
    items = list(enumerate(tokens))
    if gap_after is not None:
        items.insert(gap_after + 1, (-1, GAP))
    lines, line, used = [], [], 0
    for i, token in items:
        token = token if len(token) <= width else token[: width - 1] + "…"
        if line and used + len(token) > width:
            lines.append(line)
            line, used = [], 0
        line.append((i, token))
        used += len(token) + 1
    if line:
        lines.append(line)
    return lines


def _labelled(shares: np.ndarray, each_way: int = 3) -> list[int]:
    """The positions whose bars `plot` labels: the `each_way` largest
    positive shares and the `each_way` most negative, then, where one sign
    has fewer, the next largest by magnitude, up to `2 * each_way` in all.
    (Labelling the three lowest and three highest values labelled the bars
    nearest zero when every share had the same sign.)"""
    shares = np.asarray(shares, dtype="float64")
    by_size = [int(i) for i in np.argsort(-np.abs(shares), kind="stable")]
    chosen = [i for i in by_size if shares[i] > 0][:each_way]
    chosen += [i for i in by_size if shares[i] < 0][:each_way]
    chosen += [i for i in by_size if i not in chosen]
    return chosen[: 2 * each_way]


def plot(
    explanation: Explanation,
    path: str | Path,
    *,
    heads: bool = False,
    view: str = "attributions",
    chars_per_line: int = 100,
    width: float = 12.0,
    dpi: int = 110,
) -> Path:
    """Draws the review shaded by attribution (or attention) and saves a PNG.

    With `view="attributions"` (the default, when the explanation has
    them) the review is shaded by each token's attribution: green towards
    positive, purple towards negative, white at zero, full colour at the
    review's largest |attribution|; the bars below show the attributions.
    With `view="pooling"` (the second view) the top panel is the review
    as text, each token on a background whose colour is anchored at
    uniform attention: white for a weight of at most 1/n (no more than
    average), full red from `SATURATION` (4) times 1/n
    on (`relative_weights`), so near-uniform weights stay near white; the
    title says so and gives the largest ratio.
    For a review longer than `max_len`, "[…]" marks the skipped middle. In
    the pooling view the panel below shows each token's signed share of the
    classifier's logit
    (green: towards positive, purple: towards negative), the largest ones
    labelled. With `heads=True`, the last encoder block's per-head
    token-by-token maps follow, on one colour scale (0 to the largest
    weight of any head, with a colour bar). A 200-word review takes about
    12 lines.

    Args:
        explanation: From `explain`.
        path: The PNG file to write.
        heads: Whether to add the per-head attention maps. Defaults to
            `False`.
        view: `"attributions"` or `"pooling"` (the pooling weights and
            shares). Defaults to `"attributions"`.
        chars_per_line: Line width of the text panel, in characters.
            Defaults to `100`.
        width: Figure width in inches. Defaults to `12.0`.
        dpi: Resolution of the PNG. Defaults to `110`.

    Returns:
        The path written.

    Example:

    >>> import os, tempfile
    >>> from keras_selfattn.imdb.model import build_model
    >>> model = build_model(["a great film", "a dull film"], vocab_size=100,
    ...                     bigram_vocab_size=0, max_len=16)
    >>> from keras_selfattn.imdb.explain import explain, plot
    >>> path = os.path.join(tempfile.mkdtemp(), "review.png")
    >>> plot(explain(model, "A great film!"), path).name
    'review.png'
    """
    import matplotlib
    from matplotlib.figure import Figure

    check_one_of("view", view, ("attributions", "pooling"))
    check_bool("heads", heads)
    check_positive_int("chars_per_line", chars_per_line)
    check_positive_float("width", width)
    check_positive_int("dpi", dpi)
    attributions = explanation.attributions
    by_attribution = view == "attributions" and attributions is not None
    tokens, weights = explanation.tokens, explanation.weights
    lines = _wrap(tokens, chars_per_line, explanation.gap_after)
    ratios = relative_weights(weights)
    shade = token_shades(weights)
    cmap = matplotlib.colormaps["Reds"]
    if by_attribution:
        attributions = np.asarray(attributions, dtype="float64")
        largest = float(np.abs(attributions).max()) if len(attributions) else 0.0
        shade = np.abs(attributions) / largest if largest > 0 else 0 * attributions
        green, purple = matplotlib.colormaps["Greens"], matplotlib.colormaps["Purples"]

    def colour(i: int):
        if by_attribution:
            side = green if attributions[i] >= 0 else purple
            return side(0.9 * float(shade[i]))
        return cmap(0.9 * float(shade[i]))

    left, right = 0.07, 0.98
    # DejaVu Sans Mono advances 0.6 em per character.
    char_pt = (right - left) * width * 72 / chars_per_line
    font_pt = char_pt / 0.62
    line_in = font_pt * 1.75 / 72
    text_h = line_in * (len(lines) + 1) + 0.4
    bar_h = 2.2
    n_heads = 0
    if heads and explanation.head_maps is not None:
        n_heads = len(explanation.head_maps)
    head_h = min(3.6, width / max(n_heads, 1)) if n_heads else 0.0
    heights = [text_h, bar_h] + ([head_h] if n_heads else [])
    fig = Figure(figsize=(width, sum(heights) + 0.8), dpi=dpi)
    grid = fig.add_gridspec(
        len(heights),
        1,
        height_ratios=heights,
        hspace=0.45,
        left=left,
        right=right,
        top=0.95,
        bottom=0.05,
    )

    label = imdb_model.label_of(explanation.probability)
    n = max(len(tokens), 1)
    ax = fig.add_subplot(grid[0])
    ax.set_axis_off()
    ax.set_xlim(0, chars_per_line)
    ax.set_ylim(len(lines) + 0.3, -0.5)
    if by_attribution:
        title = (
            f"Attribution per token: {label} (p = {explanation.probability:.3f}), "
            f"{len(tokens)} tokens\ngreen: towards positive, purple: towards "
            "negative; full colour: the largest |attribution| here, "
            f"{largest:.3f} (integrated gradients + n-gram shares)"
        )
    ax.set_title(
        title
        if by_attribution
        else f"Attention-pooling weight per token: {label} "
        f"(p = {explanation.probability:.3f}), {len(tokens)} tokens\n"
        f"white: at most the uniform weight 1/n = {1 / n:.4f}; full red: "
        f"{SATURATION:g}x 1/n or more; the largest here is "
        f"{ratios.max() if len(ratios) else 0:.2f}x 1/n",
        loc="left",
        fontsize=10,
    )
    for row, line in enumerate(lines):
        column = 0
        for i, token in line:
            if i < 0:
                ax.text(
                    column,
                    row + 0.5,
                    token,
                    color="gray",
                    va="center",
                    family="DejaVu Sans Mono",
                    fontsize=font_pt,
                )
                column += len(token) + 1
                continue
            ax.text(
                column,
                row + 0.5,
                token,
                family="DejaVu Sans Mono",
                fontsize=font_pt,
                va="center",
                color="white" if shade[i] > 0.6 else "black",
                bbox={
                    "facecolor": colour(i),
                    "edgecolor": "none",
                    "pad": 0.6,
                },
            )
            column += len(token) + 1

    bars = fig.add_subplot(grid[1])
    shares = attributions if by_attribution else explanation.contributions
    positions = np.arange(len(tokens))
    colors = np.where(shares >= 0, "#2ca02c", "#9467bd")
    bars.bar(positions, shares, width=1.0, color=colors)
    bars.margins(y=0.15)  # room for the labels of the longest bars
    bars.axhline(0.0, color="gray", linewidth=0.8)
    bars.set_xlim(-0.5, n - 0.5)
    bars.set_xlabel("token position")
    bars.set_ylabel("attribution" if by_attribution else "share of logit")
    bars.set_title(
        "Each token's attribution (how much it moved the logit): green pushes "
        "towards positive, purple towards negative"
        if by_attribution
        else "Each token's share of the classifier's logit (pooling weight x "
        "vector . classifier): green pushes towards positive, purple towards "
        "negative",
        loc="left",
        fontsize=9,
    )
    for position in _labelled(shares):
        bars.annotate(
            tokens[position],
            (position, shares[position]),
            textcoords="offset points",
            xytext=(0, 3 if shares[position] >= 0 else -10),
            ha="center",
            fontsize=8,
        )

    if n_heads:
        # One colour scale for every head (each map scaled to its own
        # largest weight made a colour mean a different weight per head).
        largest_weight = max(float(np.max(explanation.head_maps)), 1e-12)
        sub = grid[2].subgridspec(1, n_heads, wspace=0.25)
        head_axes = []
        for h in range(n_heads):
            axh = fig.add_subplot(sub[0, h])
            image = axh.imshow(
                explanation.head_maps[h],
                cmap=matplotlib.colormaps["viridis"],
                vmin=0.0,
                vmax=largest_weight,
                aspect="auto",
            )
            axh.set_title(f"encoder head {h + 1}", fontsize=9)
            axh.set_xlabel("key token", fontsize=8)
            if h == 0:
                axh.set_ylabel("query token", fontsize=8)
            axh.tick_params(labelsize=7)
            head_axes.append(axh)
        colour_bar = fig.colorbar(image, ax=head_axes, fraction=0.02, pad=0.01)
        colour_bar.set_label("attention weight", fontsize=8)
        colour_bar.ax.tick_params(labelsize=7)
    path = Path(path)
    fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=0.15)
    return path


# ---------------------------------------------------------------------------
# Faithfulness: do the tokens an explanation ranks first decide the output?

EXPLANATIONS = ("attributions", "weights", "shares", "random", "occlusion")


def token_scores(
    explanation: Explanation,
    kind: str,
    rng: np.random.Generator | None = None,
    model: keras.Model | None = None,
    positive: bool | None = None,
) -> np.ndarray:
    """How much each token matters, by one of the demo's explanations.

    Args:
        explanation: From `explain`.
        kind: `"attributions"` (`Explanation.attributions` towards the
            predicted class), `"weights"` (the pooling weights), `"shares"`
            (each token's pooling share of the logit towards the predicted
            class), `"random"` (a random ranking: the baseline) or
            `"occlusion"` (`occlusion` towards the predicted class).
        rng: The generator for `"random"`. Defaults to `None`.
        model: The model whose tokens `"occlusion"` deletes; needed for
            that kind only. Defaults to `None`.
        positive: The class the signed kinds are turned towards: `True`
            for "positive", `False` for "negative", `None` for the class
            of `Explanation.probability` (the prediction on the whole
            text). Defaults to `None`.

    Returns:
        `(len(tokens),)` scores, higher = more important.

    Raises:
        ValueError: If `kind` is not one of `EXPLANATIONS`, or if it is
            `"occlusion"` and `model` is `None`.
    """
    check_one_of("kind", kind, EXPLANATIONS)
    if kind == "weights":
        return np.asarray(explanation.weights, dtype="float64")
    if kind == "random":
        return (rng or np.random.default_rng()).random(len(explanation.tokens))
    if kind == "occlusion" and model is None:
        raise ValueError(
            "Argument `model` is required for kind='occlusion': the tokens "
            "are deleted and the text scored again. Received: model=None"
        )
    values = {
        "attributions": lambda: explanation.attributions,
        "shares": lambda: explanation.contributions,
        "occlusion": lambda: occlusion(model, explanation.tokens),
    }[kind]()
    if positive is None:
        positive = explanation.probability > imdb_model.THRESHOLD
    check_bool("positive", positive)
    return (1.0 if positive else -1.0) * np.asarray(values, dtype="float64")


def erase(
    tokens: list[str], scores: np.ndarray, fraction: float, keep: bool = False
) -> str:
    """Deletes (or, with `keep`, keeps only) the top `fraction` of tokens.

    At least one token is chosen. The text comes back with the remaining
    tokens in their order, joined by spaces (the model standardizes it to
    the same tokens).

    Args:
        tokens: The tokens, as `Explanation.tokens`.
        scores: One score per token; the highest are chosen.
        fraction: The share of tokens chosen, in (0, 1].
        keep: Keep the chosen tokens only, instead of deleting them.
            Defaults to `False`.

    Returns:
        The text.
    """
    count = max(1, round(fraction * len(tokens)))
    chosen = set(np.argsort(-np.asarray(scores), kind="stable")[:count].tolist())
    return " ".join(t for i, t in enumerate(tokens) if (i in chosen) == keep)


def faithfulness(
    model: keras.Model,
    texts: list[str],
    fractions: tuple[float, ...] = (0.01, 0.05, 0.1, 0.2),
    seed: int = 0,
    kinds: tuple[str, ...] = ("attributions", "weights", "shares", "random"),
) -> dict[str, dict[float, dict[str, float]]]:
    """ERASER's comprehensiveness and sufficiency (DeYoung et al., 2020).

    For each review and explanation: the predicted class's probability on
    the review as the model read it, minus that probability with the top
    `k` of tokens deleted (comprehensiveness: high = the explanation found
    what mattered) and with only the top `k` kept (sufficiency: low = those
    tokens alone carry the decision). Averaged over the reviews. For a
    review longer than the model reads, the text as read is the clipped one
    (`Explanation.tokens`), and the predicted class is the one on it, which
    the signed explanations are turned towards too (it may differ from the
    whole review's class).

    Args:
        model: A model from `build_model`.
        texts: The reviews.
        fractions: The shares `k` of tokens. Defaults to 1%, 5%, 10%, 20%.
        seed: The seed of the random baseline. Defaults to `0`.
        kinds: The explanations measured, of `EXPLANATIONS` (see
            `token_scores`). Defaults to all but `"occlusion"` (which
            scores each review once per token).

    Returns:
        `{kind: {k: {"comprehensiveness": ..., "sufficiency": ...}}}` for
        each kind of `kinds`.

    Raises:
        ValueError: If `kinds` is a string rather than a tuple of them, or
            names a kind that is not one of `EXPLANATIONS`.
    """
    if isinstance(kinds, str):
        raise invalid(
            "kinds", f"a tuple of names of `EXPLANATIONS`, such as ({kinds!r},)", kinds
        )
    for kind in kinds:
        check_one_of("kinds", kind, EXPLANATIONS)
    rng = np.random.default_rng(seed)
    explanations = [explain(model, text) for text in texts]
    as_read = [" ".join(e.tokens) for e in explanations]
    original = imdb_model.predict(model, as_read)
    positive = original > imdb_model.THRESHOLD
    variants, cases = [], []  # cases: (kind, k, measure, index of the review)
    for index, e in enumerate(explanations):
        for kind in kinds:
            scores = token_scores(e, kind, rng, model, bool(positive[index]))
            for k in fractions:
                for measure, keep in (("comprehensiveness", False),
                                      ("sufficiency", True)):  # fmt: skip
                    variants.append(erase(e.tokens, scores, k, keep=keep))
                    cases.append((kind, k, measure, index))
    probabilities = imdb_model.predict(model, variants)

    def of_predicted(p, index):
        return p if positive[index] else 1.0 - p

    sums: dict = {}
    for (kind, k, measure, index), p in zip(cases, probabilities, strict=True):
        drop = of_predicted(original[index], index) - of_predicted(p, index)
        sums.setdefault(kind, {}).setdefault(k, {}).setdefault(measure, []).append(drop)
    return {
        kind: {
            k: {m: float(np.mean(v)) for m, v in measures.items()}
            for k, measures in by_k.items()
        }
        for kind, by_k in sums.items()
    }
