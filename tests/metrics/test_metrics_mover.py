"""WMS, SMS and S+WMS (Clark 2021, Eqs. 5.1-5.5): hand-worked cases with a toy GloVe file,
checked against the closed form and an independent linear program (scipy's ``linprog``),
and the properties of Table 5.1 with the real GloVe vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import linprog

from storyeval.corpus import Story
from storyeval.metrics import score_stories

TOY = {"cat": (0, 0), "dog": (3, 4), "ran": (0, 1), "sat": (0, 2)}


@pytest.fixture(scope="module")
def toy_glove(tmp_path_factory):
    path = tmp_path_factory.mktemp("glove") / "toy.txt"
    path.write_text("".join(f"{w} {x} {y}\n" for w, (x, y) in TOY.items()), encoding="utf-8")
    return str(path)


def emd_linprog(xa, wa, xb, wb):
    """Earth mover's distance as a plain linear program (independent of POT)."""
    xa, xb = np.asarray(xa, float), np.asarray(xb, float)
    cost = np.linalg.norm(xa[:, None] - xb[None], axis=-1)
    n, m = cost.shape
    rows = [np.kron(np.eye(n)[i], np.ones(m)) for i in range(n)]
    cols = [np.kron(np.ones(n), np.eye(m)[j]) for j in range(m)]
    result = linprog(cost.ravel(), A_eq=np.array(rows + cols), b_eq=np.r_[wa, wb], bounds=(0, None))
    return result.fun


def _score(story, reference, metrics, glove):
    run = score_stories(
        [Story("a", "", story, reference=reference, system="x")],
        metrics,
        options={"mover.glove": glove},
        bootstrap=0,
    )
    return {s.metric: s.value for s in run.scores}


def test_hand_worked_wms_sms_swms(toy_glove):
    # A = "The cat sat." -> cat, sat (the: stopword); B = "A dog ran!" -> dog, ran
    values = _score("The cat sat.", "A dog ran!", "wms,sms,swms", toy_glove)
    # WMS: each word weighs 1/2; best plan cat->ran (1), sat->dog (sqrt 13)
    wmd = 0.5 * (1 + math.sqrt(13))
    assert values["wms"] == pytest.approx(math.exp(-wmd))
    assert wmd == pytest.approx(
        emd_linprog([TOY["cat"], TOY["sat"]], [0.5, 0.5], [TOY["dog"], TOY["ran"]], [0.5, 0.5])
    )
    # SMS: one sentence each, embedded as the mean of its words: (0, 1) and (1.5, 2.5)
    assert values["sms"] == pytest.approx(math.exp(-math.sqrt(1.5**2 + 1.5**2)))
    # S+WMS: words weigh count / 2|A| = 1/4, sentences |i| / 2|A| = 1/2; the sentence of A
    # moves for free onto "ran" (same point), the rest as worked out in the test docstring
    swmd = 0.25 * (math.sqrt(13) + math.sqrt(8.5) + math.sqrt(4.5))
    assert values["swms"] == pytest.approx(math.exp(-swmd))
    independent = emd_linprog(
        [TOY["cat"], TOY["sat"], (0, 1)], [0.25, 0.25, 0.5],
        [TOY["dog"], TOY["ran"], (1.5, 2.5)], [0.25, 0.25, 0.5],
    )  # fmt: skip
    assert swmd == pytest.approx(independent)


def test_weights_follow_word_counts_and_sentence_lengths(toy_glove):
    # A = "cat cat sat. dog." -> words cat x2, sat, dog (|A| = 4); sentences of 3 and 1 words
    values = _score("Cat cat sat. Dog.", "Ran.", "wms,sms", toy_glove)
    wmd = (2 * 1 + 1 * 1 + 1 * math.sqrt(18)) / 4  # everything moves to "ran" at (0, 1)
    assert values["wms"] == pytest.approx(math.exp(-wmd))
    mean_first = np.mean([TOY["cat"], TOY["cat"], TOY["sat"]], axis=0)
    smd = 0.75 * np.linalg.norm(mean_first - TOY["ran"]) + 0.25 * np.linalg.norm(
        np.subtract(TOY["dog"], TOY["ran"])
    )
    assert values["sms"] == pytest.approx(math.exp(-smd))


def test_identical_documents_score_one_and_unknown_words_are_dropped(toy_glove):
    values = _score("The cat sat, zorblax!", "Cat sat.", "wms,sms,swms", toy_glove)
    assert values == pytest.approx({"wms": 1.0, "sms": 1.0, "swms": 1.0})
    empty = _score("The zorblax.", "Cat sat.", "wms", toy_glove)
    assert math.isnan(empty["wms"])  # no content word with a vector: undefined, not 0


def test_table_5_1_properties_with_glove():
    """Clark (2021) Table 5.1: reordering clauses leaves WMS/SMS/S+WMS unchanged (within a
    sentence), repetition lowers SMS and S+WMS."""
    reference = (
        "the only thing crazier than a guy in snowbound massachusetts boxing up the powdery white "
        "stuff and offering it for sale online ? people are actually buying it ."
    )
    human = "a man in suburban boston is selling snow online to customers in warmer states ."
    reordered = "in suburban boston , a man is selling snow online to customers in warmer states ."
    repeated = "a man in suburban boston is selling snow is selling snow online to customers in warmer states in warmer states ."
    stories = [
        Story(n, "", t, reference=reference, system="x")
        for n, t in (("h", human), ("o", reordered), ("r", repeated))
    ]
    run = score_stories(stories, "wms,sms,swms,rougeL", bootstrap=0)
    v = {(s.item_id, s.metric): s.value for s in run.scores}
    for metric in ("wms", "sms", "swms"):
        assert v[("o", metric)] == pytest.approx(v[("h", metric)])
    assert v[("r", "sms")] < v[("h", "sms")] and v[("r", "swms")] < v[("h", "swms")]
    assert v[("o", "rougeL")] < v[("h", "rougeL")]  # ROUGE-L does care about order
    assert "glove:glove-6B-50d@" in run.scores[0].signature


def test_contextual_embeddings_option(short_stories):
    stories = [s for s in short_stories if s.references][:2]
    run = score_stories(
        stories, "wms,swms", options={"mover.embeddings": "contextual"}, bootstrap=0
    )
    assert all(0 < s.value <= 1 for s in run.scores)
    assert (
        "model:all-MiniLM-L6-v2@" in run.scores[0].signature
        and "layer:4" in run.scores[0].signature
    )
    same = score_stories(
        [Story("a", "", stories[0].story, reference=stories[0].story, system="x")],
        "wms",
        options={"mover.embeddings": "contextual"},
        bootstrap=0,
    )
    assert same.scores[0].value == pytest.approx(1.0)
