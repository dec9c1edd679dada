"""explain: the tokens the model read, and their picture drawn without pyplot."""

from __future__ import annotations

import keras
import matplotlib
import numpy as np
import pytest

from keras_selfattn.imdb import explain, ngrams
from keras_selfattn.imdb import model as imdb_model
from keras_selfattn.imdb.model import build_model
from tests.helpers import png_size

pytestmark = pytest.mark.tensorflow_only


def _explanation(n: int = 6, heads: int = 2) -> explain.Explanation:
    weights = np.arange(1, n + 1, dtype="float32")
    return explain.Explanation(
        tokens=[f"w{i}" for i in range(n)],
        weights=weights / weights.sum(),
        head_maps=np.full((heads, n, n), 1 / n, dtype="float32"),
        probability=0.7,
        contributions=np.linspace(-1, 1, n, dtype="float32"),
    )


def test_explain_long_review_shows_head_and_tail(tmp_path):
    model = build_model(
        ["a b c"], vocab_size=10, max_len=6, head_len=2, embed_dim=4, num_heads=1
    )
    text = " ".join(f"w{i}" for i in range(20))
    result = explain.explain(model, text)
    assert result.tokens == ["w0", "w1", "w16", "w17", "w18", "w19"]
    assert result.gap_after == 1
    png = explain.plot(result, tmp_path / "long.png", heads=True)
    assert png_size(png)[0] > 300


@pytest.mark.parametrize(
    ("head_len", "kept", "gap_after"),
    [
        pytest.param(0, [14, 15, 16, 17, 18, 19], -1, id="start_cut"),
        pytest.param(None, [0, 1, 2, 3, 4, 5], 5, id="end_cut"),
        pytest.param(6, [0, 1, 2, 3, 4, 5], 5, id="head_is_max_len"),
    ],
)
def test_explain_marks_a_cut_start_or_end(tmp_path, head_len, kept, gap_after):
    model = build_model(
        ["a b c"], vocab_size=10, max_len=6, head_len=head_len, embed_dim=4,
        num_heads=1, bigram_vocab_size=20,
    )  # fmt: skip
    text = " ".join(f"w{i}" for i in range(20))
    result = explain.explain(model, text)
    assert result.tokens == [f"w{i}" for i in kept]
    assert result.gap_after == gap_after
    lines = explain._wrap(result.tokens, 80, result.gap_after)
    items = [item for line in lines for item in line]
    assert items.index((-1, explain.GAP)) == gap_after + 1
    # A review that fits has no gap, whatever the clip.
    assert explain.explain(model, "w1 w2 w3").gap_after is None
    assert explain.plot(result, tmp_path / "cut.png").exists()


_LABELLED = {
    # The three strongest each way.
    "both-signs": ([0.5, -0.1, 0.2, -0.9, 0.05, -0.3, 0.4, 0.01], [0, 6, 2, 3, 5, 1]),
    # All negative: the six most negative, not the three nearest zero.
    "all-negative": ([-0.02, -0.5, -0.01, -0.3, -0.4, -0.2, -0.1], [1, 4, 3, 5, 6, 0]),
    "one-positive": ([-0.2, 0.1, -0.3, -0.05, -0.4, -0.01, -0.6], [1, 6, 4, 2, 0, 3]),
    "fewer-than-six": ([0.3, -0.2], [0, 1]),
    "none": ([], []),
}


@pytest.mark.parametrize("case", list(_LABELLED), ids=list(_LABELLED))
def test_plot_labels_the_largest_bars_of_each_sign(case):
    shares, expected = _LABELLED[case]
    assert explain._labelled(np.array(shares)) == expected


def test_plot_draws_the_head_maps_on_one_colour_scale(tmp_path, monkeypatch):
    # Each map was scaled to its own largest weight, so one colour meant a
    # different weight in each head.
    from matplotlib.figure import Figure

    drawn = []
    save = Figure.savefig
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, *a, **k: (drawn.append(fig), save(fig, *a, **k))
    )
    result = _explanation(n=4, heads=3)
    result.head_maps = np.stack(
        [np.full((4, 4), 0.25), np.eye(4), np.full((4, 4), 0.1)]
    ).astype("float32")
    explain.plot(result, tmp_path / "heads.png", heads=True)
    (fig,) = drawn
    maps = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(maps) == 3
    assert [image.get_clim() for image in maps] == [(0.0, 1.0)] * 3
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "attention weight"]
    assert len(bars) == 1


def test_plot_leaves_the_matplotlib_backend_alone(tmp_path):
    original = matplotlib.get_backend()
    matplotlib.use("svg")  # anything but Agg, which the plot draws with
    try:
        png = explain.plot(_explanation(), tmp_path / "e.png", heads=True)
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(original)
    width, height = png_size(png)
    assert width > 600 and height > 300


def test_summary_lists_the_top_tokens_and_both_sides():
    lines = _explanation().summary(top=2).splitlines()
    assert lines[0] == "most-attended tokens, pooling weights (of 6):"
    assert lines[1].split() == ["0.2857", "w5", "(token", "5)"]
    assert lines[2].split()[1] == "w4"
    assert lines[3].startswith("pooling shares towards positive: w5 (+1.000), w4")
    assert lines[4].startswith("pooling shares towards negative: w0 (-1.000), w1")
    with_attributions = _explanation()
    with_attributions.attributions = np.array([0.5, -2.0, 0.0, 0.1, 0.0, 0.0])
    lines = with_attributions.summary(top=2).splitlines()
    assert lines[0] == "attributions towards positive: w0 (+0.500), w3 (+0.100)"
    assert lines[1] == "attributions towards negative: w1 (-2.000)"
    # No token on a side reads "(none)"; it read "-", which is a token too.
    with_attributions.attributions = np.array([0.5, 0.0, 0.0, 0.1, 0.0, 0.0])
    lines = with_attributions.summary(top=2).splitlines()
    assert lines[1] == "attributions towards negative: (none)"


def test_colours_are_anchored_at_uniform_attention():
    n = 8
    uniform = np.full(n, 1 / n)
    np.testing.assert_array_equal(explain.token_shades(uniform), 0.0)  # all white
    weights = np.array([4, 2.5, 1, 0.5, 0, 0, 0, 0]) / n
    weights[-1] = 1 - weights[:-1].sum()
    shades = explain.token_shades(weights)
    np.testing.assert_allclose(shades[:4], [1.0, 0.5, 0.0, 0.0])
    # Near-uniform weights (1.38x uniform at most, as on a one-line review)
    # stay pale: the scale does not stretch to the range of the review.
    near = np.linspace(0.0125, 0.0227, 61)
    near /= near.sum()
    assert explain.token_shades(near).max() < 0.15


def test_erase_deletes_or_keeps_the_top_tokens():
    tokens = ["a", "b", "c", "d", "e"]
    scores = np.array([0.1, 0.9, 0.3, 0.8, 0.0])
    assert explain.erase(tokens, scores, 0.4) == "a c e"
    assert explain.erase(tokens, scores, 0.4, keep=True) == "b d"
    assert explain.erase(tokens, scores, 0.01) == "a c d e"  # at least one


def test_token_scores_point_towards_the_predicted_class():
    e = _explanation()
    np.testing.assert_allclose(explain.token_scores(e, "shares"), e.contributions)
    e.probability = 0.2
    np.testing.assert_allclose(explain.token_scores(e, "shares"), -e.contributions)
    e.attributions = np.array([1.0, -2.0, 0.0, 0.5, 0.0, 3.0])
    np.testing.assert_allclose(explain.token_scores(e, "attributions"), -e.attributions)
    # Turned towards a class given: the faithfulness measure's own.
    np.testing.assert_allclose(
        explain.token_scores(e, "attributions", positive=True), e.attributions
    )
    with pytest.raises(ValueError, match=r"`positive`.*Received: positive='yes'"):
        explain.token_scores(e, "shares", positive="yes")
    with pytest.raises(ValueError, match="`kind`"):
        explain.token_scores(e, "gradients")
    with pytest.raises(ValueError, match="`model` is required"):
        explain.token_scores(e, "occlusion")


# A stand-in logit with context: each word's value, and "not" reverses the
# word after it.
VALUES = {"great": 2.0, "awful": -3.0}


def _stand_in_logits(model, texts, batch_size=128):
    def logit(words):
        return sum(
            VALUES.get(w, 0.0) * (-1.0 if i and words[i - 1] == "not" else 1.0)
            for i, w in enumerate(words)
        )

    return np.array([logit(t.split()) for t in texts], dtype="float64")


def test_occlusion_is_the_logit_lost_when_a_token_is_deleted(monkeypatch):
    monkeypatch.setattr(imdb_model, "logits", _stand_in_logits)
    tokens = ["not", "great", ",", "awful"]  # logit -2 - 3 = -5
    # Without "not": 2 - 3 = -1; without "great": -3 (the "not" now
    # reverses ","); without ",": -2 - 3; without "awful": -2.
    np.testing.assert_allclose(
        explain.occlusion(None, tokens), [-4.0, -2.0, 0.0, -3.0], atol=0
    )
    assert explain.occlusion(None, []).shape == (0,)
    e = _explanation(n=4)
    e.tokens, e.probability = tokens, 0.1  # negative: the scores flip
    np.testing.assert_allclose(
        explain.token_scores(e, "occlusion", model="stand-in"), [4.0, 2.0, 0.0, 3.0]
    )
    e.probability = 0.9  # positive: they stay
    np.testing.assert_allclose(
        explain.token_scores(e, "occlusion", model="stand-in"), [-4.0, -2.0, 0.0, -3.0]
    )


# The stand-in model of the faithfulness test: its answer hangs on one word.
PLANTED = {"great": 0.8, "awful": 0.1}  # with either word; 0.5 without


def _stand_in_predict(model, texts):
    def probability(text):
        words = set(text.split())
        return next((p for w, p in PLANTED.items() if w in words), 0.5)

    return np.array([probability(t) for t in texts])


def _stand_in_planted_logits(model, texts, batch_size=128):
    p = _stand_in_predict(model, texts)
    return np.log(p / (1 - p))


def _stand_in_explain(model, text):
    """Weights that point at the first tokens, shares and attributions at the
    planted word."""
    tokens = text.split()
    (planted,) = [i for i, t in enumerate(tokens) if t in PLANTED]
    probability = PLANTED[tokens[planted]]
    contributions = np.full(len(tokens), 0.01, dtype="float32")
    contributions[planted] = 1.0 if probability > 0.5 else -1.0
    weights = np.linspace(1.0, 0.1, len(tokens), dtype="float32")
    return explain.Explanation(
        tokens=tokens,
        weights=weights / weights.sum(),
        head_maps=np.zeros((1, len(tokens), len(tokens)), dtype="float32"),
        probability=probability,
        contributions=contributions,
        attributions=contributions.astype("float64"),
    )


def test_faithfulness_is_the_drop_in_the_predicted_class(monkeypatch):
    # 10 tokens each; the planted word (a positive and a negative review)
    # comes after the first three tokens, which the weights rank first.
    texts = [
        "the film i saw last night was great fun really",
        "the film i saw last night was awful fun really",
    ]
    monkeypatch.setattr(imdb_model, "predict", _stand_in_predict)
    monkeypatch.setattr(explain, "explain", _stand_in_explain)
    monkeypatch.setattr(imdb_model, "logits", _stand_in_planted_logits)
    result = explain.faithfulness(None, texts, fractions=(0.1, 0.3, 1.0), seed=0)
    assert set(result) == {"attributions", "weights", "shares", "random"}
    kinds = ("occlusion", "random")
    occluded = explain.faithfulness("stand-in", texts, (0.1, 0.3, 1.0), 0, kinds)
    assert set(occluded) == set(kinds)
    # Occlusion draws nothing from the seeded generator: the random
    # baseline beside it is the same one.
    assert occluded["random"] == result["random"]
    result["occlusion"] = occluded["occlusion"]
    with pytest.raises(ValueError, match=r"`kinds`.*Received: kinds='gradients'"):
        explain.faithfulness(None, texts, kinds=("gradients",))
    with pytest.raises(ValueError, match=r"expected a tuple.*Received: kinds='random'"):
        explain.faithfulness(None, texts, kinds="random")
    # The predicted class's probability falls to 0.5 without the planted
    # word: by 0.8 - 0.5 = 0.3 (positive) and (1 - 0.1) - 0.5 = 0.4
    # (negative), 0.35 on average; it does not move while the word stays.
    missed = {"comprehensiveness": 0.0, "sufficiency": 0.35}
    found = {"comprehensiveness": 0.35, "sufficiency": 0.0}
    everything = {"comprehensiveness": 0.35, "sufficiency": 0.0}
    for kind, expected in (
        ("weights", missed),
        ("shares", found),
        ("attributions", found),
        ("occlusion", found),
    ):
        assert set(result[kind]) == {0.1, 0.3, 1.0}
        for k in (0.1, 0.3):  # 1 and 3 tokens
            assert result[kind][k] == pytest.approx(expected, abs=1e-12), (kind, k)
        assert result[kind][1.0] == pytest.approx(everything, abs=1e-12), kind
    # A random token is the planted one or not: either way the two
    # measures of a review add up to its drop.
    for k in (0.1, 0.3, 1.0):
        measures = result["random"][k]
        total = measures["comprehensiveness"] + measures["sufficiency"]
        assert total == pytest.approx(0.35, abs=1e-12), k
        hit = measures["comprehensiveness"]  # 0.3 / 2 and 0.4 / 2 per review
        assert min(abs(hit - v) for v in (0.0, 0.15, 0.2, 0.35)) < 1e-12, k
    assert result["random"][1.0]["sufficiency"] == pytest.approx(0.0, abs=1e-12)


def test_faithfulness_turns_the_scores_towards_the_class_of_the_text_as_read(
    monkeypatch,
):
    # A long review: the model read a clipped text that it calls negative
    # ("awful": 0.1), while the whole review (its skipped middle praised
    # the film) is positive, 0.9. The drops are in the class of the text as
    # read, so the scores must point towards it: the attributions rank
    # "awful" first. Turned towards the whole review's class, they ranked a
    # filler token first and the drop was 0 (a review found it in 5 of 500
    # held-out reviews; 2026-12-07).
    def clipped_explain(model, text):
        e = _stand_in_explain(model, text)
        e.probability = 0.9  # the whole review's
        return e

    monkeypatch.setattr(imdb_model, "predict", _stand_in_predict)
    monkeypatch.setattr(explain, "explain", clipped_explain)
    text = "the film i saw last night was awful fun really"
    result = explain.faithfulness(None, [text], fractions=(0.1,), kinds=("shares",))
    assert result["shares"][0.1] == pytest.approx(
        {"comprehensiveness": (1 - 0.1) - 0.5, "sufficiency": 0.0}, abs=1e-12
    )


def test_tokens_are_the_words_the_models_own_standardization_gives():
    model = build_model(
        ["it's a cliche , sadly", "a fine film"] * 2,
        vocab_size=20,
        max_len=12,
        embed_dim=4,
        num_heads=1,
    )
    result = explain.explain(model, "It\u2019s a CLICH\u00c9, zebra")
    # Out-of-vocabulary words show as themselves, not as [UNK].
    assert result.tokens == ["it's", "a", "cliche", ",", "zebra"]


def test_a_text_with_no_token_is_explained_as_nothing():
    model = build_model(["a b c"], vocab_size=10, max_len=6, embed_dim=4, num_heads=1)
    result = explain.explain(model, "$$$ ###")
    assert result.tokens == [] and len(result.weights) == 0
    assert 0.0 < result.probability < 1.0


@pytest.mark.parametrize(
    "options",
    [
        {"num_layers": 1, "bigram_vocab_size": 0},
        {"num_layers": 2, "pooling_heads": 2, "bigram_vocab_size": 20, "seed": 3},
    ],
)
def test_the_explanation_adds_up_to_the_models_own_prediction(tmp_path, options):
    texts = ["a great film , i loved it .", "boring and far too long ."] * 3
    model = build_model(texts, vocab_size=30, max_len=12, embed_dim=8, **options)
    text = "a great film ,<br /><br />far too long ."
    result = explain.explain(model, text)
    assert result.tokens == ["a", "great", "film", ",", "far", "too", "long", "."]
    classifier = model.get_layer(imdb_model.CLASSIFIER)
    bias = float(np.asarray(classifier.bias)[0])
    (logit,) = imdb_model.logits(model, [text])
    total = result.contributions.sum() + bias + result.ngram_share
    np.testing.assert_allclose(total, logit, atol=1e-5)
    # Integrated gradients: complete up to the midpoint rule's error.
    total = result.attributions.sum() + result.baseline + result.rest
    span = abs(logit - result.baseline)
    np.testing.assert_allclose(total, logit, atol=0.02 * span + 1e-4)
    (probability,) = model.predict(np.array([text], dtype=object), verbose=0)[:, 0]
    assert result.probability == pytest.approx(float(probability), abs=1e-6)
    assert len(result.tokens) == len(result.weights) == len(result.contributions)
    assert len(result.attributions) == len(result.tokens)
    assert result.head_maps.shape == (2, len(result.tokens), len(result.tokens))
    np.testing.assert_allclose(result.weights.sum(), 1.0, atol=1e-5)
    # The explainer is built once per model and shares the model's weights.
    sub = explain.explainer(model)
    assert explain.explainer(model) is sub
    assert {id(w) for w in sub.weights} <= {id(w) for w in model.weights}
    # A reloaded model explains the same, also as the first model of a
    # session (as in the server): its operations then get the first names,
    # and an explainer that made a second mask operation would clash.
    model.save(tmp_path / "m.keras")
    keras.backend.clear_session()
    again = explain.explain(imdb_model.load(tmp_path / "m.keras"), text)
    assert again.tokens == result.tokens
    np.testing.assert_allclose(again.contributions, result.contributions, atol=1e-6)
    np.testing.assert_allclose(again.head_maps, result.head_maps, atol=1e-6)


def _planted(n: int = 40):
    """Reviews whose label is the planted word "zorb" (positive) or its
    absence; every other word is drawn from the same bag in both classes."""
    rng = np.random.default_rng(0)
    filler = ["the", "film", "was", "a", "story", "of", "its", "cast", "and", "plot"]
    texts, labels = [], []
    for i in range(n):
        words = list(rng.choice(filler, 8))
        if i % 2:
            words.insert(int(rng.integers(0, 8)), "zorb")
        texts.append(" ".join(words))
        labels.append(i % 2)
    return texts, np.array(labels)


def _planted_model(texts, ngram_logit: bool):
    """A tiny model of `_planted`'s vocabulary, with or without the n-gram branch."""
    return build_model(
        texts, vocab_size=30, bigram_vocab_size=60, max_len=16, embed_dim=8,
        num_heads=1, intermediate_dim=8, ngram_logit=ngram_logit,
    )  # fmt: skip


def test_a_planted_word_gets_the_largest_attribution():
    texts, labels = _planted()
    model = _planted_model(texts, ngram_logit=True)
    ngrams.fit_ngram_branch(model, texts, labels)
    ngrams.blend(model, texts, labels)
    text = "the cast was a zorb story and the plot"
    result = explain.explain(model, text)
    assert result.tokens[int(np.argmax(result.attributions))] == "zorb"
    assert result.attributions.max() > 0  # towards positive, as its label
    (logit,) = imdb_model.logits(model, [text])
    total = result.attributions.sum() + result.baseline + result.rest
    np.testing.assert_allclose(total, logit, atol=0.02 * abs(logit - result.baseline))
    # Occlusion, the measured alternative, finds it too.
    occluded = explain.occlusion(model, result.tokens)
    assert result.tokens[int(np.argmax(occluded))] == "zorb"
    assert occluded.max() > 0


def test_a_word_pairs_credit_is_split_between_its_two_words():
    texts, _ = _planted()
    model = _planted_model(texts, ngram_logit=False)
    # Only word pairs move the logit: the token vectors are zero.
    tokens = model.get_layer(imdb_model.EMBEDDING).token_embedding.embeddings
    tokens.assign(np.zeros(tokens.shape, "float32"))
    pairs = model.get_layer(imdb_model.BIGRAM_EMBEDDING).embedding.embeddings
    pairs.assign(np.random.default_rng(1).normal(size=pairs.shape).astype("float32"))
    text = "the cast was a zorb story"
    ids, *_, vectors, token_vectors = explain.explainer(model)(np.array([text]))[:7]
    mask = np.asarray(ids) != 0
    # Without the token vectors, a pair's credit lands on its second word
    # (word 0 holds the vector of the padding id, no pair: it stays there).
    at_end, _ = explain.integrated_gradients(model, vectors, mask)
    assert np.abs(at_end[1:]).min() > 0
    expected = at_end.copy()
    expected[1:] -= at_end[1:] / 2
    expected[:-1] += at_end[1:] / 2
    split, _ = explain.integrated_gradients(
        model, vectors, mask, token_vectors=token_vectors
    )
    np.testing.assert_allclose(split, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(split.sum(), at_end.sum(), rtol=1e-5)
    result = explain.explain(model, text)
    np.testing.assert_allclose(result.attributions, split, rtol=1e-5, atol=1e-7)


def test_the_pair_after_a_clip_gap_stays_with_the_word_shown():
    # The first word kept after the gap reads the pair it forms with a word
    # the clip cut: half of that pair's credit went to the word before the
    # gap, which is not in the pair.
    texts, _ = _planted()
    model = build_model(
        texts, vocab_size=30, bigram_vocab_size=60, max_len=4, head_len=1,
        embed_dim=8, num_heads=1, intermediate_dim=8, ngram_logit=False,
    )  # fmt: skip
    tokens = model.get_layer(imdb_model.EMBEDDING).token_embedding.embeddings
    tokens.assign(np.zeros(tokens.shape, "float32"))
    pairs = model.get_layer(imdb_model.BIGRAM_EMBEDDING).embedding.embeddings
    pairs.assign(np.random.default_rng(2).normal(size=pairs.shape).astype("float32"))
    text = "the cast was a zorb story"
    result = explain.explain(model, text)
    assert result.tokens == ["the", "a", "zorb", "story"] and result.gap_after == 0
    ids, *_, vectors, _ = explain.explainer(model)(np.array([text]))[:7]
    at_end, _ = explain.integrated_gradients(model, vectors, np.asarray(ids) != 0)
    expected = at_end.copy()  # "was a" stays with "a"; the others split
    expected[2:] -= at_end[2:] / 2
    expected[1:-1] += at_end[2:] / 2
    np.testing.assert_allclose(result.attributions, expected, rtol=1e-5, atol=1e-7)


def test_ngram_shares_split_a_word_over_its_occurrences():
    texts, labels = _planted()
    model = build_model(
        texts, vocab_size=30, bigram_vocab_size=0,
        max_len=16, embed_dim=8, num_heads=1, intermediate_dim=8, ngram_logit=True,
    )  # fmt: skip
    ngrams.fit_ngram_branch(model, texts, labels)
    ngram = model.get_layer(imdb_model.NGRAM)
    weights = np.asarray(ngram.kernel)
    vocabulary = model.get_layer(imdb_model.TEXT_VECTORIZATION).get_vocabulary()
    ids = np.array([[vocabulary.index(w) for w in ["zorb", "film", "zorb"]]])
    shares = explain._ngram_shares(model, [ids[0]])
    zorb, film = weights[ids[0, 0]], weights[ids[0, 1]]
    np.testing.assert_allclose(shares, [zorb / 2, film, zorb / 2], rtol=1e-6)
    score = float(np.asarray(ngram([ids]))[0, 0])
    np.testing.assert_allclose(shares.sum(), score, rtol=1e-5)


_BAD_PLOTS = {
    # "no" is truthy: the head maps were drawn.
    "heads_a_string": ({"heads": "no"}, r"`heads`, expected a boolean"),
    "no_characters_per_line": ({"chars_per_line": 0}, r"`chars_per_line`"),
    "no_width": ({"width": 0}, r"`width`"),
    "no_dpi": ({"dpi": 0}, r"`dpi`"),
}


@pytest.mark.parametrize("kwargs, match", _BAD_PLOTS.values(), ids=_BAD_PLOTS.keys())
def test_bad_plot_arguments_are_a_value_error(tmp_path, kwargs, match):
    # They failed inside matplotlib (ZeroDivisionError, LinAlgError).
    with pytest.raises(ValueError, match=match):
        explain.plot(_explanation(), tmp_path / "bad.png", **kwargs)
    assert not (tmp_path / "bad.png").exists()


def test_explain_and_occlusion_refuse_what_is_not_text():
    model = build_model(["a b c"], vocab_size=10, max_len=6, embed_dim=4, num_heads=1)
    # A number failed inside TensorFlow (a cast to string); a string given as
    # the tokens was read as its characters.
    with pytest.raises(ValueError, match=r"`text`, expected one review as a string"):
        explain.explain(model, 123)
    with pytest.raises(ValueError, match=r"`tokens`, expected a list of token"):
        explain.occlusion(model, "a good")
    with pytest.raises(ValueError, match=r"`batch_size`"):
        explain.occlusion(model, ["a", "good"], batch_size=0)
