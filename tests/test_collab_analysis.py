"""The collaborative-writing analysis on tests/data/writing_sessions.jsonl, whose answers were
worked out by hand (see tests/data/make_writing_sessions.py for the sessions).

The file holds two complete CYOA sessions of study ``fixture`` (generators alpha and beta,
three rounds each), one incomplete CYOA session, and one complete machine-in-the-loop session
of study ``mil-fixture`` (generator solo). Chosen suggestion -> kept text:

=====  =====  ========================================  ============================
turn   chose  suggestion                                kept
=====  =====  ========================================  ============================
A r1   alpha  He found a red ball.                      (unchanged)
A r2   beta   The boy laughed loudly.                   The boy laughed.
A r3   alpha  The dog went home and slept.              The dog went home.
B r1   alpha  She opened the old box up.               She opened the old box.
B r2   beta   Her brother laughed at the plan.          Her brother laughed.
B r3   alpha  She saw the tiny island.                  She saw the island.
=====  =====  ========================================  ============================

Each edit deletes one run of characters: " loudly" (7), " and slept" (10), " up" (3),
" at the plan" (12), "tiny " (5): edit distances alpha 0, 10, 3, 5 and beta 7, 12.
Jaccard (lower-cased word types): alpha 1, 4/6, 5/6, 4/5; beta 3/4, 3/6.
USER F1 (word tokens with punctuation; matched = recursive longest common substrings, all of
the kept text here, so recall = 1 and F1 = 2P/(P+1)): alpha P = 6/6, 5/7, 6/7, 5/6 ->
F1 1, 10/12, 12/13, 10/11; beta P = 4/5, 4/7 -> F1 8/9, 8/11.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from storyeval.collab import read_sessions
from storyeval.collab.analysis import analyse_sessions, preferences, write_analysis

DATA = Path(__file__).parent / "data" / "writing_sessions.jsonl"


@pytest.fixture(scope="module")
def analysis():
    return analyse_sessions(read_sessions(DATA))


def _row(frame: pd.DataFrame, **where: object) -> pd.Series:
    mask = pd.Series(True, index=frame.index)
    for key, value in where.items():
        mask &= frame[key] == value
    found = frame[mask]
    assert len(found) == 1, f"{where}: {len(found)} rows"
    return found.iloc[0]


def test_preferences_by_hand(analysis):
    """alpha was chosen in 4 of 6 pairs (rounds: 2/2, 0/2, 2/2). Two-sided exact binomial
    p = P(X <= 2) + P(X >= 4) = 2 * (1 + 6 + 15) / 64 = 0.6875; for 2 of 2 (or 0 of 2)
    p = 2 * 1/4 = 0.5 and the Clopper-Pearson interval is [0.025 ** 0.5, 1] = [0.158114, 1]."""
    table = analysis.preferences
    total = _row(table, factor="generator", round="all", level="alpha")
    assert (total["chosen"], total["n"]) == (4, 6)
    assert total["estimate"] == pytest.approx(4 / 6)
    assert total["p_value"] == pytest.approx(44 / 64)
    beta = _row(table, factor="generator", round="all", level="beta")
    assert beta["estimate"] == pytest.approx(2 / 6) and beta["p_value"] == pytest.approx(44 / 64)
    for round_number, alpha_count in (("1", 2), ("2", 0), ("3", 2)):
        row = _row(table, factor="generator", round=round_number, level="alpha")
        assert (row["chosen"], row["n"]) == (alpha_count, 2)
        assert row["p_value"] == pytest.approx(0.5)
    one = _row(table, factor="generator", round="1", level="alpha")
    assert (one["ci_low"], one["ci_high"]) == (pytest.approx(0.025**0.5), pytest.approx(1.0))
    zero = _row(table, factor="generator", round="2", level="alpha")
    assert (zero["ci_low"], zero["ci_high"]) == (pytest.approx(0.0), pytest.approx(1 - 0.025**0.5))
    # positions: A chose position 1 three times, B position 2 three times -> 3/6, p = 1
    position = _row(table, factor="position", round="all", level="position 1")
    assert (position["chosen"], position["n"], position["p_value"]) == (3, 6, pytest.approx(1.0))
    assert set(table["session"]) == {"fixture"}  # the MIL session has no pairs
    assert table["signature"].str.startswith("cyoa_preference|test:binomial-exact-two-sided").all()


def test_edit_items_by_hand(analysis):
    items = analysis.edit_items.set_index("session_id")
    by_turn = {
        (sid, int(r["round"])): (r["generator"], r["edit_distance"], r["jaccard"], r["user"])
        for sid, r in items.iterrows()
    }
    expected = {
        ("fixture/pA", 1): ("alpha", 0, 1.0, 1.0),
        ("fixture/pA", 2): ("beta", 7, 3 / 4, 8 / 9),
        ("fixture/pA", 3): ("alpha", 10, 4 / 6, 10 / 12),
        ("fixture/pB", 1): ("alpha", 3, 5 / 6, 12 / 13),
        ("fixture/pB", 2): ("beta", 12, 3 / 6, 8 / 11),
        ("fixture/pB", 3): ("alpha", 5, 4 / 5, 10 / 11),
        ("mil-fixture/pM", 1): ("solo", 7, 3 / 5, 4 / 5),  # " for it" deleted; P = 4/6
        ("mil-fixture/pM", 2): ("solo", 0, 1.0, 1.0),
    }
    assert set(by_turn) == set(expected)
    for key, (generator, distance, jaccard, user) in expected.items():
        got = by_turn[key]
        assert got[0] == generator, key
        assert got[1:] == (pytest.approx(distance), pytest.approx(jaccard), pytest.approx(user)), (
            key
        )


def test_edits_by_hand(analysis):
    """Means per generator, and Mann-Whitney U of alpha (4 turns) vs beta (2 turns) with no
    ties: U counts the (alpha, beta) pairs where alpha is larger. Edit distance: only 10 > 7,
    U = 1; Jaccard and USER: U = 7 of 8. Exact two-sided p = 2 * P(U <= 1) under H0, where
    the two beta ranks (r1 < r2) give U = r1 + r2 - 3: (1,2) -> 0 and (1,3) -> 1 of the 15
    placements, so p = 2 * 2/15 = 4/15."""
    table = analysis.edits
    means = {
        ("edit_distance", "alpha"): 18 / 4,
        ("edit_distance", "beta"): 19 / 2,
        ("edit_distance", "overall"): 37 / 6,
        ("jaccard", "alpha"): (1 + 4 / 6 + 5 / 6 + 4 / 5) / 4,
        ("jaccard", "beta"): (3 / 4 + 3 / 6) / 2,
        ("user", "alpha"): (1 + 10 / 12 + 12 / 13 + 10 / 11) / 4,
        ("user", "beta"): (8 / 9 + 8 / 11) / 2,
    }
    for (metric, group), mean in means.items():
        row = _row(table, session="fixture", metric=metric, round="all", group=group)
        assert row["estimate"] == pytest.approx(mean), (metric, group)
    alpha_ed = _row(table, session="fixture", metric="edit_distance", round="all", group="alpha")
    # sd of 0, 10, 3, 5: squared deviations from 4.5 sum to 53, / 3
    assert alpha_ed["sd"] == pytest.approx(math.sqrt(53 / 3)) and alpha_ed["n"] == 4
    for metric, u in (("edit_distance", 1), ("jaccard", 7), ("user", 7)):
        test = _row(table, session="fixture", metric=metric, round="all", group="alpha vs beta")
        assert test["statistic"] == pytest.approx(u)
        assert test["estimate"] == pytest.approx(u / 8)
        assert test["p_value"] == pytest.approx(4 / 15)
        assert test["n"] == 6
    # round 1: both choices were alpha (0 and 3): no beta turn, so no test
    assert _row(table, session="fixture", metric="edit_distance", round="1", group="alpha")[
        "estimate"
    ] == pytest.approx(1.5)
    assert math.isnan(
        _row(table, session="fixture", metric="edit_distance", round="1", group="alpha vs beta")[
            "p_value"
        ]
    )
    solo = _row(table, session="mil-fixture", metric="edit_distance", round="all", group="solo")
    assert solo["estimate"] == pytest.approx(3.5)
    assert not table["group"].str.contains("solo vs").any()
    assert (
        table.loc[table["metric"] == "edit_distance", "signature"]
        .str.startswith("levenshtein|")
        .all()
    )


def test_text_stats_by_hand(analysis):
    """Per-text values averaged over texts (6 suggestions per generator, 6 writer turns).

    Sentence length (one sentence per text, words without punctuation): alpha 5,7,6,6,6,5;
    beta 5,4,6,6,6,9; human 6,5,6,8,5,7. distinct-1: "The cat slept and the cat ate." 5/7,
    "The sea was calm and the sky was blue." 7/9, "The dog ran to the park." 5/6, "The dog ate
    the bone." 4/5, "The sun set over the hills." 5/6, "A girl found a map in the attic." 7/8,
    every other text 1; distinct-2: only "the cat" repeats (5/6); distinct-3 all 1.
    Concreteness (Brysbaert ratings of the lemmas of the nouns and verbs, e.g. alpha nouns ball
    5.0 | cat 4.86, cat 4.86 | dog 4.85 | box 4.9 | bag 4.9 | island 4.96; "home" is an
    adverb; beta has two texts without a verb ("was" is an auxiliary)).
    """
    table = analysis.text_stats
    expected = {
        ("sentence_length", "alpha"): 35 / 6,
        ("sentence_length", "beta"): 36 / 6,
        ("sentence_length", "human"): 37 / 6,
        ("distinct_1", "alpha"): (5 + 5 / 7) / 6,
        ("distinct_1", "beta"): (5 + 7 / 9) / 6,
        ("distinct_1", "human"): (5 / 6 + 4 / 5 + 5 / 6 + 7 / 8 + 1 + 1) / 6,
        ("distinct_2", "alpha"): (5 + 5 / 6) / 6,
        ("distinct_2", "beta"): 1.0,
        ("distinct_2", "human"): 1.0,
        ("distinct_3", "alpha"): 1.0,
        ("concreteness_noun", "alpha"): (5.0 + 4.86 + 4.85 + 4.9 + 4.9 + 4.96) / 6,
        ("concreteness_noun", "beta"): (
            3.92 + 4.76 + (4.52 + 4.69) / 2 + 4.93 + (4.43 + 3.4) / 2 + (4.79 + 4.45) / 2
        )
        / 6,
        ("concreteness_noun", "human"): (
            (4.85 + 4.74) / 2
            + (4.85 + 4.9) / 2
            + (4.83 + 4.93) / 2
            + (4.85 + 4.93 + 4.53) / 3
            + (4.93 + 4.96) / 2
            + 3.92
        )
        / 6,
        # find 2.63 | sleep 4.44, eat 4.44 | go 3.15, sleep 4.44 | open 3.21 | pack 3.83,
        # leave 2.53 | see 3.21
        ("concreteness_verb", "alpha"): (
            2.63 + 4.44 + (3.15 + 4.44) / 2 + 3.21 + (3.83 + 2.53) / 2 + 3.21
        )
        / 6,
        # laugh 4.21 | come 2.72, shine 3.85 | tear 4.56 | laugh 4.21
        ("concreteness_verb", "beta"): (4.21 + (2.72 + 3.85) / 2 + 4.56 + 4.21) / 4,
        # run 4.31 | eat 4.44 | set 3.41 | find 2.63 | show 3.97 | sail 4.59
        ("concreteness_verb", "human"): (4.31 + 4.44 + 3.41 + 2.63 + 3.97 + 4.59) / 6,
    }
    for (statistic, group), value in expected.items():
        row = _row(table, session="fixture", statistic=statistic, group=group)
        assert row["estimate"] == pytest.approx(value, abs=1e-9), (statistic, group)
    verbs = _row(table, session="fixture", statistic="concreteness_verb", group="beta")
    assert (verbs["n"], verbs["n_undefined"]) == (4, 2)
    mil = _row(table, session="mil-fixture", statistic="concreteness_verb", group="solo")
    assert mil["estimate"] == pytest.approx((2.96 + 4.64) / 2)  # look, fly
    assert set(table["group"]) == {"alpha", "beta", "human", "solo"}
    assert _row(table, session="fixture", statistic="distinct_2", group="alpha")[
        "signature"
    ].startswith("distinct2|")


def test_likert_and_open_answers_by_hand(analysis):
    likert = analysis.likert
    expected = {  # (A, B) answers
        "happy": (4, 5),
        "collaborative": (3, 4),
        "useful": (5, 4),
        "connected": (2, 3),
        "ideas": (4, 2),
    }
    for name, (a, b) in expected.items():
        row = _row(likert, session="fixture", statement=name)
        assert row["n"] == 2 and row["estimate"] == pytest.approx((a + b) / 2)
        assert row["median"] == pytest.approx((a + b) / 2)
        assert row["sd"] == pytest.approx(abs(a - b) / math.sqrt(2))
        assert row["share_agree"] == pytest.approx(sum(v >= 4 for v in (a, b)) / 2)
        assert [row[f"count_{p}"] for p in range(1, 6)] == [
            sum(v == p for v in (a, b)) for p in range(1, 6)
        ]
    assert _row(likert, session="mil-fixture", statement="enjoyable")["scale"] == 7
    answers = analysis.answers
    assert list(answers["answer"]) == [  # empty answers are left out
        "The one that fit my dog.",
        "Whichever kept the treasure hunt going.",
        "Surprises.",
    ]


def test_incomplete_sessions_are_left_out_unless_asked():
    sessions = read_sessions(DATA)
    assert (
        preferences([s for s in sessions if s.complete])
        .query("factor == 'generator' and round == 'all' and level == 'beta'")["chosen"]
        .iloc[0]
        == 2
    )
    everything = preferences(sessions)  # pC's one submitted pair went to beta
    row = everything.query("factor == 'generator' and round == 'all' and level == 'beta'").iloc[0]
    assert (row["chosen"], row["n"]) == (3, 7)
    full = analyse_sessions(sessions, include_incomplete=True)
    assert full.sessions == 4 and len(full.edit_items) == 9


def test_write_analysis_files(analysis, tmp_path):
    written = write_analysis(analysis, tmp_path / "out")
    names = {p.name for p in written}
    assert {"preferences.csv", "edits.csv", "text_stats.csv", "likert.csv", "report.md"} <= names
    edits = pd.read_csv(tmp_path / "out" / "edits.csv")
    for column in ("estimate", "ci_low", "ci_high", "p_value", "n", "method", "signature"):
        assert column in edits.columns
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| alpha | 67% | 100% | 0% | 100% |" in report
    assert "Table 4.3" in report and "cyoa_analyse|" in report
