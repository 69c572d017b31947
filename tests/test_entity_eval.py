"""The entity evaluation tasks of Clark's thesis (issue 15 section 2, Clark (2021) sections 3.5
and 3.6): MAP and accuracy worked out by hand on the thesis' own example, the LM's scores
against a direct computation, the CoNLL reader, the approximate detector, the commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from storyeval.analyses.entity_eval import (
    RECENCY,
    LanguageModelScorer,
    average_precision,
    mention_generation,
    mention_slots,
    sentence_selection,
)
from storyeval.base.errors import DataFileError
from storyeval.entities import (
    AnnotatedText,
    Mention,
    detect_mentions,
    read_annotated,
    read_conll,
)

# Figure 3.1 of the thesis: [Emily]1 ... [the dragon]2. [Seth]3 yelled at [her]1 ... [she]1 ... [him]3.
EMILY = "All of a sudden, Emily walked towards the dragon. Seth yelled at her to get back but she ignored him."
SPANS = [
    ("Emily", "1"),
    ("the dragon", "2"),
    ("Seth", "3"),
    ("her", "1"),
    ("she", "1"),
    ("him", "3"),
]


def emily_text() -> AnnotatedText:
    mentions, position = [], 0
    for words, cluster in SPANS:
        start = EMILY.index(words, position)
        mentions.append(Mention(start, start + len(words), cluster))
        position = start + len(words)
    return AnnotatedText("emily", EMILY, tuple(mentions))


def test_average_precision_counts_ties_at_their_expected_rank():
    assert average_precision([3.0, 1.0, 2.0], 0) == 1.0
    assert average_precision([3.0, 1.0, 2.0], 1) == pytest.approx(1 / 3)
    assert average_precision([1.0, 1.0, 1.0], 2) == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)


def test_candidate_lists_are_those_of_figure_3_2():
    slot = mention_slots(emily_text())[4]  # the slot of "she"
    assert slot.mention == "she" and slot.context.endswith("to get back but ")
    assert [w for w, _ in slot.candidates["mention_only"]] == [
        "her",
        "Seth",
        "the dragon",
        "Emily",
        "she",
    ]
    assert [c for _, c in slot.candidates["cluster_only"]] == ["1", "3", "2"]
    assert slot.candidates["cluster_and_mention"][-1] == ("she", "1")
    assert slot.correct == {"mention_only": 4, "cluster_only": 0, "cluster_and_mention": 4}


class LookupScorer:
    """A stand-in scorer: a fixed score per mention (words only)."""

    name = "lookup"
    tasks = ("mention_only",)
    table: ClassVar[dict[str, float]] = {
        "Emily": 1.0, "the dragon": 0.0, "Seth": 2.0, "her": 3.0, "she": 4.0, "him": 0.5
    }  # fmt: skip

    def score_mentions(self, requests):
        return [self.table[words] for _, words, _ in requests]


def test_map_by_hand_for_the_baseline_and_a_scorer():
    result = mention_generation([emily_text()], scorers=[LookupScorer()])
    table = result.summary.set_index(["model", "task"])["estimate"]
    # recency, mention only: the correct mention is always new here, last of 1..6 candidates
    assert table[(RECENCY, "mention_only")] == pytest.approx(
        (1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5 + 1 / 6) / 6
    )
    # recency, cluster only: [1], [1, 2*], [2, 1, 3*], [3, 2, 1*], [1*, 3, 2], [1, 3*, 2]
    assert table[(RECENCY, "cluster_only")] == pytest.approx(
        (1 + 1 / 2 + 1 / 3 + 1 / 3 + 1 + 1 / 2) / 6
    )
    # the lookup: Emily 1; the dragon below Emily 1/2; Seth first 1; her first 1; she first 1;
    # him (0.5) above the dragon (0) only: rank 5 of she, her, Seth, Emily, him, the dragon
    assert table[("lookup", "mention_only")] == pytest.approx((1 + 1 / 2 + 1 + 1 + 1 + 1 / 5) / 6)
    assert ("lookup", "cluster_only") not in table.index  # words only: the mention task alone
    assert set(result.items["candidates"][result.items["task"] == "mention_only"]) == {
        1,
        2,
        3,
        4,
        5,
        6,
    }
    assert result.signature.name == "mention_generation"


class IndexScorer:
    """Prefers the sentence with the smaller number ("S3." before "S5.")."""

    def __init__(self, name: str, sign: float) -> None:
        self.name, self.sign = name, sign

    def score(self, requests):
        return [-self.sign * float(text.strip(" S.")) for _, text in requests]


def test_sentence_selection_by_hand():
    texts = [(f"t{k}", [f"S{i}." for i in range(6)]) for k in range(3)]
    result = sentence_selection(
        texts, scorers=[IndexScorer("right", 1.0), IndexScorer("wrong", -1.0)], rounds=3, seed=1
    )
    summary = result.summary.set_index("model")
    assert summary.loc["right", "estimate"] == 1.0 and summary.loc["wrong", "estimate"] == 0.0
    assert summary.loc["right", "n"] == 12  # positions 1-4 of three 6-sentence texts
    assert summary.loc["right", "p_value"] == pytest.approx(0.5**12)
    assert summary.loc["right", "sd"] == 0.0 and summary.loc["right", "rounds"] == 3
    decisions = result.items[result.items["model"] == "right"]
    assert set(decisions["position"]) == {1, 2, 3, 4}
    (pair,) = result.comparisons.to_dict("records")  # the two models on the same decisions
    assert (pair["model_a"], pair["model_b"], pair["discordant"], pair["a_wins"]) == (
        "right",
        "wrong",
        12,
        12,
    )
    assert pair["p_value"] == pytest.approx(2 * 0.5**12)
    with pytest.raises(Exception, match="sentence selection needs"):
        sentence_selection([("x", ["A.", "B."])], scorers=[IndexScorer("r", 1.0)])


def test_lm_scores_are_conditional_log_probabilities(causal_lm):
    import torch

    scorer = LanguageModelScorer(causal_lm)
    context, continuation = "Seth yelled at her to get back but ", "she"
    (score,) = scorer.score([(context, continuation)])
    tokenizer, model = causal_lm.tokenizer, causal_lm.model
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    head = [start, *tokenizer(context.rstrip(), add_special_tokens=False)["input_ids"]]
    tail = tokenizer(" " + continuation, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        logits = model(torch.tensor([head + tail])).logits[0].double().log_softmax(-1)
    direct = sum(float(logits[len(head) - 1 + k, token]) for k, token in enumerate(tail))
    assert score == pytest.approx(direct, abs=1e-4)
    a, b = scorer.score([(context, "she"), (context, "the dragon")])
    assert a > b  # a pronoun is far likelier than a new noun phrase here


def test_shared_context_scoring_equals_scoring_each_pair(causal_lm):
    """continuation_nll (one reading of a growing context, candidates packed) gives
    token_nll's numbers: chains of prefixes, a context that breaks the chain, a lone
    context, empty and multi-token continuations, packs split across forward passes."""
    from storyeval.models.nll import continuation_nll, token_nll

    def ids(text: str) -> list[int]:
        return list(causal_lm.tokenizer(text, add_special_tokens=False)["input_ids"])

    start = [causal_lm.tokenizer.eos_token_id]
    story = "Emily saw the dragon by the river. She ran to Seth and told him what she saw."
    words = story.split()
    contexts = [start + ids(" ".join(words[:k])) for k in (2, 5, 9, 14)]
    contexts.append(start + ids("A different text begins here"))
    candidates = [ids(w) for w in (" she", " the dragon", " Seth", " him and her", "")]
    groups = [(context, candidates) for context in contexts]
    shared = continuation_nll(causal_lm, groups, pack_tokens=7)
    pairs = [(context, c) for context, cs in groups for c in cs]
    direct = token_nll(causal_lm, pairs)[0]
    np.testing.assert_allclose(np.concatenate(shared), direct, atol=2e-4)
    assert all(values[-1] == 0.0 for values in shared)  # nothing to score


def test_conll_reader(tmp_path: Path):
    rows = [
        "#begin document (story/emily); part 000",
        "story/emily 0 0 Emily NNP * - - - - * (1)",
        "story/emily 0 1 saw VBD * - - - - * -",
        "story/emily 0 2 the DT * - - - - * (2",
        "story/emily 0 3 dragon NN * - - - - * 2)",
        "story/emily 0 4 . . * - - - - * -",
        "",
        "story/emily 0 0 She PRP * - - - - * (1)|(3",
        "story/emily 0 1 smiled VBD * - - - - * 3)",
        "#end document",
    ]
    path = tmp_path / "emily.v4_gold_conll"
    path.write_text("\n".join(rows) + "\n")
    (text,) = read_conll(path)
    assert text.id == "story/emily" and text.text == "Emily saw the dragon . She smiled"
    assert [(text.words(m), m.cluster) for m in text.mentions] == [
        ("Emily", "1"), ("the dragon", "2"), ("She", "1"), ("She smiled", "3")
    ]  # fmt: skip
    bad = tmp_path / "bad.conll"
    bad.write_text("#begin document (x); part 000\nx 0 0 Hi UH * - - - - * 4)\n#end document\n")
    with pytest.raises(DataFileError, match=r"bad.conll:3: .*closes unopened"):
        read_conll(bad)


def test_detector_links_names_and_pronouns(nlp):
    (text,) = detect_mentions([("e", EMILY)], nlp=nlp)
    found = {text.words(m): m.cluster for m in text.mentions}
    assert found["Emily"] == found["her"] == found["she"]
    assert found["Seth"] == found["him"] != found["Emily"]
    assert found["the dragon"] not in (found["Emily"], found["Seth"])


def test_entity_eval_cli(tmp_path, run_cli, examples_dir, causal_lm):
    annotated = tmp_path / "emily.jsonl"
    annotated.write_text(json.dumps(emily_text().to_dict()) + "\n")
    assert read_annotated(annotated)[0] == emily_text()
    code, stdout, stderr = run_cli(
        "entity-eval", "mentions", str(annotated), "-o", str(tmp_path / "m")
    )
    assert code == 0, stderr
    assert "mention_only" in stdout and "signature: mention_generation" in stdout
    import pandas as pd

    summary = pd.read_csv(tmp_path / "m" / "mention_generation.csv")
    assert set(summary["model"]) == {RECENCY, f"lm:{causal_lm.identity}"}
    assert summary["estimate"].between(0, 1).all()

    stories = tmp_path / "three.jsonl"
    stories.write_text(
        "\n".join((examples_dir / "human.jsonl").read_text().splitlines()[:3]) + "\n"
    )
    code, stdout, stderr = run_cli(
        "entity-eval", "selection", str(stories), "-o", str(tmp_path / "s"), "--rounds", "2"
    )
    assert code == 0, stderr
    decisions = pd.read_csv(tmp_path / "s" / "decisions.csv")
    assert set(decisions["round"]) == {1, 2} and decisions["correct"].isin([0.0, 0.5, 1.0]).all()

    code, stdout, stderr = run_cli(
        "entity-eval", "annotate", str(stories), "-o", str(tmp_path / "a.jsonl")
    )
    assert code == 0, stderr
    assert len(read_annotated(tmp_path / "a.jsonl")) == 3

    broken = tmp_path / "broken.jsonl"
    broken.write_text(
        '{"id": "x", "text": "Hi", "mentions": [{"start": 0, "end": 9, "cluster": "1"}]}\n'
    )
    code, _, stderr = run_cli("entity-eval", "mentions", str(broken), "-o", str(tmp_path / "b"))
    assert code == 2 and "broken.jsonl:1:" in stderr and "outside the text" in stderr
