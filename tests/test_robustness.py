"""Robustness tests of metrics (issue 14, section 4): OpenMEVA's extra discrimination
techniques and the quality-preserving invariance changes, on crafted stories; the invariance
table worked out by hand; `storyeval robustness` end to end with cheap metrics."""

from __future__ import annotations

import json
import random
import re

import pandas as pd
import pytest

from storyeval.analyses.robustness import invariance_table
from storyeval.corpus import Story
from storyeval.perturb import PerturbationCorpus, PerturbOptions, apply_techniques
from storyeval.perturb.base import get_technique, parse_techniques, technique_names
from storyeval.text import split_sentences

STORY = Story(
    "ken",
    "",
    "Ken didn't like the cold morning, but he went jogging with Mia. Then he felt happy. "
    'Mia laughed at the "big" dog near the old bridge. Finally they went home and slept.',
)
PLAIN = Story(
    "ann", "", "Ann opened the heavy door. The room was dark. She lit a candle. She smiled."
)


@pytest.fixture(scope="module")
def corpus(nlp):
    return PerturbationCorpus(((s.id, s.story) for s in (STORY, PLAIN)), nlp=nlp)


def _apply(corpus, name, story=STORY, seed=0, **options):
    return apply_techniques(
        story.story,
        [name],
        random.Random(seed),
        corpus,
        story_id=story.id,
        options=PerturbOptions(**options),
    )


def _letters(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


def test_suites_are_separate_from_unions_default_four():
    assert technique_names() == ("repetition", "substitution", "reordering", "negation")
    assert parse_techniques(None) == technique_names()
    assert parse_techniques("invariance") == ("synonym", "contraction", "punctuation", "typos")
    assert set(parse_techniques("discrimination,negation")) == {
        "negation", "causal_reordering", "antonym_swap", "entity_swap", "repeated_plot",
    }  # fmt: skip
    assert all(get_technique(n).mix_weight == 0 for n in technique_names("invariance"))
    with pytest.raises(ValueError, match="suite must be all or one of"):
        technique_names("nonsense")


def test_causal_reordering_puts_the_connected_event_first(corpus):
    original = split_sentences(STORY.story)
    for seed in range(10):
        text, _, (edit,) = _apply(corpus, "causal_reordering", seed=seed)
        new = split_sentences(text)
        i = edit.sentence
        assert edit.detail["connective"] in ("then", "finally")
        assert new[i - 1] == original[i] and new[i] == original[i - 1]
        assert sorted(new) == sorted(original)
    with pytest.raises(Exception, match="no sentence after the first opens"):
        _apply(corpus, "causal_reordering", story=PLAIN)


def test_antonym_swap_uses_antonyms_only_and_entity_swap_swaps_both_ways(corpus):
    from storyeval.perturb import antonyms

    for seed in range(5):
        text, _, edits = _apply(corpus, "antonym_swap", seed=seed)
        assert 1 <= len(edits) <= 2 and all(e.operation == "antonym" for e in edits)
        for edit in edits:  # a WordNet antonym of the word's lemma, never a random keyword
            detail = edit.detail
            assert detail["antonym"] in antonyms(detail["lemma"], detail["pos"])
            assert edit.after.lower() in text.lower()
    text, _, (edit,) = _apply(corpus, "entity_swap")
    assert edit.operation == "swap_names" and {edit.before, edit.after} == {"Ken", "Mia"}
    assert text.startswith("Mia didn't like") and "with Ken." in text and "Ken laughed" in text


def test_repeated_plot_repeats_an_earlier_non_adjacent_sentence(corpus):
    original = split_sentences(PLAIN.story)
    for seed in range(10):
        text, _, (edit,) = _apply(corpus, "repeated_plot", story=PLAIN, seed=seed)
        new = split_sentences(text)
        source, target = edit.detail["source_sentence"], edit.sentence
        assert target - source >= 2 and new[target] == original[source]
        assert len(new) == len(original) and original[target] not in new


def test_invariance_changes_keep_the_words_or_their_meaning(corpus):
    from nltk.corpus import wordnet

    text, _, edits = _apply(corpus, "synonym", keyword_rate=1.0)
    assert edits
    pos = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}
    for edit in edits:  # a lemma of the word's most frequent sense: the same meaning
        detail = edit.detail
        (sense,) = wordnet.synsets(detail["lemma"], pos=pos[detail["pos"]])[:1]
        assert detail["synonym"] in {lemma.name().lower() for lemma in sense.lemmas()}
        assert detail["synonym"] != detail["lemma"] and edit.after in text
    text, _, edits = _apply(corpus, "contraction")
    assert "did not like" in text and [e.before for e in edits] == ["didn't"]
    back, _, _ = apply_techniques(
        text, ["contraction"], random.Random(0), corpus, story_id="x", options=PerturbOptions()
    )
    assert back == STORY.story  # contracting the expansion gives the story back
    text, _, _ = _apply(corpus, "punctuation")
    assert "“big”" in text and "morning but he" in text and "didn’t" in text
    assert _letters(text) == _letters(STORY.story)  # only punctuation changed
    long = Story("long", "", " ".join([PLAIN.story] * 30))
    big = PerturbationCorpus([(long.id, long.story)], nlp=corpus.nlp)
    words = re.findall(r"\b[A-Za-z]{4,}\b", long.story)
    text, _, edits = apply_techniques(
        long.story, ["typos"], random.Random(3), big, story_id="long",
        options=PerturbOptions(typo_rate=0.2),
    )  # fmt: skip
    assert 0.12 < len(edits) / len(words) < 0.28  # about the asked-for rate
    for edit in edits:
        assert edit.before[0] == edit.after[0] and abs(len(edit.before) - len(edit.after)) <= 1
    assert len(text.split()) == len(long.story.split())


def test_invariance_table_by_hand():
    scores = pd.DataFrame(
        [
            ("a", "m", 1.0), ("b", "m", 2.0), ("c", "m", 3.0),  # sd over originals = 1
            ("a-t", "m", 1.05), ("b-t", "m", 2.5), ("c-t", "m", 2.0),
        ],
        columns=["item_id", "metric", "value"],
    )  # fmt: skip
    pairs = pd.DataFrame(
        {"original_id": ["a", "b", "c"], "altered_id": ["a-t", "b-t", "c-t"], "test": "t"}
    )
    (row,) = invariance_table(scores, pairs, tolerance=0.1).to_dict("records")
    assert row["sd_original"] == pytest.approx(1.0) and row["tolerance"] == pytest.approx(0.1)
    assert row["mean_change"] == pytest.approx((0.05 + 0.5 - 1.0) / 3)
    assert row["mean_abs_change"] == pytest.approx((0.05 + 0.5 + 1.0) / 3)
    assert row["changed_share"] == pytest.approx(2 / 3) and row["n_pairs"] == 3
    assert 0 <= row["ci_low"] < 2 / 3 < row["ci_high"] <= 1
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        invariance_table(scores, pairs, tolerance=-1)


def test_robustness_command_writes_tables_heatmap_and_report(examples_dir, tmp_path, run_cli):
    stories = tmp_path / "six.jsonl"
    lines = (examples_dir / "human.jsonl").read_text().splitlines()[:6]
    stories.write_text("\n".join(lines) + "\n")
    out = tmp_path / "rob"
    code, stdout, stderr = run_cli(
        "robustness", str(stories), "--metrics", "distinct2,repeated_ngram_rate",
        "-o", str(out), "--no-progress",
    )  # fmt: skip
    assert code == 0, stderr
    for name in ("invariance.csv", "discrimination.csv", "robustness.png", "robustness.md"):
        assert (out / name).is_file(), name
    assert (out / "robustness.png").read_bytes().startswith(b"\x89PNG")
    disc = pd.read_csv(out / "discrimination.csv")
    assert set(disc["group"]) == {
        "(all)", *technique_names(), *technique_names("discrimination")
    }  # fmt: skip
    repeated = disc.set_index(["metric", "group"]).loc[("repeated_ngram_rate", "repeated_plot")]
    assert repeated["estimate"] == 1.0 and repeated["n_pairs"] == 6  # a repeated sentence is seen
    inv = pd.read_csv(out / "invariance.csv").set_index(["metric", "test"])
    assert set(inv.index.get_level_values("test")) == set(technique_names("invariance"))
    assert inv.loc[("repeated_ngram_rate", "punctuation"), "changed_share"] == 0.0
    records = [json.loads(line) for line in (out / "perturbed.jsonl").read_text().splitlines()]
    assert {r["source_id"] for r in records} == {json.loads(x)["id"] for x in lines}
    report = (out / "robustness.md").read_text()
    assert "## Discrimination" in report and "## Invariance" in report
    assert "signature: robustness|invariance:synonym,contraction,punctuation,typos|" in stdout
    saved = json.loads((out / "robustness.json").read_text())
    assert saved["signature"]["name"] == "robustness" and set(saved["metrics"]) == {
        "distinct2", "repeated_ngram_rate"
    }  # fmt: skip

    # the tables become a section of the meta-evaluation report
    from metahelpers import JUDGMENTS, STORIES, write_example_scores

    scores = write_example_scores(tmp_path / "scores.jsonl")
    code, _, stderr = run_cli(
        "report", "-s", str(scores), "-j", str(JUDGMENTS), "--stories", str(STORIES),
        "-o", str(tmp_path / "report"), "--n-boot", "20", "--robustness", str(out),
    )  # fmt: skip
    assert code == 0, stderr
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "Robustness of metrics" in markdown and "figures/robustness.png" in markdown
    assert "repeated_plot" in markdown and "robustness\\|invariance:synonym" in markdown
    shown = pd.read_csv(tmp_path / "report" / "robustness_invariance.csv")
    pd.testing.assert_frame_equal(shown, pd.read_csv(out / "invariance.csv"))
    html = (tmp_path / "report" / "index.html").read_text()
    assert 'src="figures/robustness.png"' in html
    code, _, stderr = run_cli(
        "robustness", str(stories), "--metrics", "distinct2", "-o", str(tmp_path / "x"),
        "--invariance", "none", "--discrimination", "sideways",
    )  # fmt: skip
    assert code == 2 and "sideways" in stderr


def test_paraphrase_rewrites_keep_the_meaning_and_are_reproducible(corpus, causal_lm):
    from storyeval import functional
    from storyeval.perturb import NotApplicableError
    from storyeval.perturb.paraphrase import paraphraser

    assert parse_techniques("invariance-lm") == ("paraphrase",)
    assert "paraphrase" not in parse_techniques("invariance")  # slow: asked for by name
    sentence = "She could not remember where she had hidden the key."
    rewrite = paraphraser().paraphrase(sentence, seed=1)
    assert rewrite is not None, "the offline LM found no paraphrase"
    assert _letters(rewrite.text) != _letters(sentence) and rewrite.similarity >= 0.85
    f1 = functional.bertscore([rewrite.text], [sentence]).f1
    assert f1[0] > 0.8  # meaning kept, by another measure than the filter's
    assert paraphraser().paraphrase(sentence, seed=1) == rewrite

    text, _, edits = _apply(corpus, "paraphrase", PLAIN, seed=3)
    assert edits and text != PLAIN.story
    for edit in edits:
        assert edit.operation == "paraphrase" and edit.detail["similarity"] >= 0.85
        assert split_sentences(PLAIN.story)[edit.sentence] == edit.before
    one = Story("one", "", sentence)
    with pytest.raises(NotApplicableError, match="no sentence got a rewrite"):
        _apply(corpus, "paraphrase", one, seed=1, paraphrase_similarity=1.0)


def test_paraphrase_filter_rejects_flipped_negations_and_strips_labels():
    from storyeval.perturb.paraphrase import _clean, _negations, _words

    assert _clean('Rewrite: "Tomas explained it."\nThis sentence uses...') == "Tomas explained it."
    original = _words("Priya could fix the engine, but only if she went outside alone.")
    flipped = _words("Priya could not fix the engine alone if she went outside alone.")
    assert _negations(original) == 0 and _negations(flipped) == 1
    assert _negations(_words("She couldn't go; she never did.")) == 2
