"""The trust benchmark's baselines: NB-LR, VADER and the plausibility measure."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.baselines import (
    NbLr,
    plausibility,
    vader_lexicon,
    vader_probabilities,
    wilson_interval,
)

pytestmark = pytest.mark.backend_independent

TEXTS = ["a great film", "great acting", "a dull film", "dull and slow"] * 3
LABELS = np.array([1, 1, 0, 0] * 3)


def test_nblr_ratios_are_the_log_count_ratios_by_hand():
    model = NbLr().fit(TEXTS, LABELS)
    vocabulary = model.vectorizer.vocabulary_
    # "great" is in all 6 positive texts and no negative one; there are
    # 6 * (3 + 2) / ... counts: p = 1 + counts over positives, normalised.
    x = model.vectorizer.transform(TEXTS).toarray()
    p = 1 + x[LABELS == 1].sum(0)
    q = 1 + x[LABELS == 0].sum(0)
    expected = np.log(p / p.sum()) - np.log(q / q.sum())
    np.testing.assert_allclose(model.ratios, expected)
    assert model.ratios[vocabulary["great"]] > 0 > model.ratios[vocabulary["dull"]]
    assert "great film" in vocabulary  # bigrams too


def test_nblr_reads_the_planted_words():
    model = NbLr().fit(TEXTS, LABELS)
    p = model.predict_proba(["great", "dull", "a great night", "slow and dull"])
    assert (p > 0.5).tolist() == [True, False, True, False]
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-model.logits(["great", "dull",
                               "a great night", "slow and dull"]))))  # fmt: skip


def test_vader_needs_no_training():
    p = vader_probabilities(["A wonderful, moving film.", "Awful and boring."])
    assert p[0] > 0.5 > p[1]
    lexicon = vader_lexicon()
    assert lexicon["wonderful"] > 0 > lexicon["awful"]


def test_plausibility_by_hand():
    lexicon = {"great": 3.0, "awful": -2.5}
    explanations = [
        (["a", "great", "film"], np.array([0.1, 2.0, -0.3])),  # top: great, +
        (["an", "awful", "film"], np.array([-1.0, 0.5, 0.2])),  # top: an; awful +
        (["no", "words"], np.array([1.0, 2.0])),  # no lexicon word: left out
    ]
    m = plausibility(explanations, lexicon)
    assert m["texts"] == 2 and m["top"] == 0.5
    # A random token of either counted text is its lexicon word 1 time in 3.
    assert m["random"] == pytest.approx(1 / 3) and m["ratio"] == pytest.approx(1.5)
    # Top-3 lexicon tokens: great (+, valence +) and awful (+, valence -).
    assert m["signed"] == 2 and m["sign_agreement"] == 0.5
    assert m["interval"] == pytest.approx(wilson_interval(1, 2))


def test_plausibility_reads_top_3_two_ways():
    # Five tokens: the top 3 by |attribution| hold one lexicon word ("bad",
    # pushed towards negative: agrees); the 3 lexicon words of the largest
    # |attribution| are bad, fine (towards negative: disagrees) and good
    # (towards positive: agrees).
    lexicon = {"bad": -2.0, "fine": 1.0, "good": 2.0}
    tokens = ["so", "bad", "the", "fine", "good"]
    attributions = np.array([3.0, -2.5, 2.0, -0.5, 0.1])
    m = plausibility([(tokens, attributions)], lexicon)
    assert (m["signed"], m["sign_agreement"]) == (1, 1.0)
    assert m["signed_3_lexicon"] == 3
    assert m["sign_agreement_3_lexicon"] == pytest.approx(2 / 3)
    assert m["interval_3_lexicon"] == pytest.approx(wilson_interval(2, 3))


def test_wilson_interval_by_hand():
    # 8 of 10, z = 1.96: the textbook interval (0.490, 0.943).
    low, high = wilson_interval(8, 10)
    assert (round(low, 3), round(high, 3)) == (0.49, 0.943)
    assert wilson_interval(0, 0) == (0.0, 1.0)
