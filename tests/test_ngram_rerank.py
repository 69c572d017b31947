"""The interpolated Kneser-Ney n-gram model (the same estimates as NLTK's) and the reranking
of sampled continuations that Clark (2021, section 3.7) applies before a human evaluation."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from storyeval.corpus import Story, read_stories
from storyeval.generate.ngram_lm import KneserNeyLM, ngram_tokens, rerank_continuations


def _sentences(examples_dir: Path) -> list[list[str]]:
    from storyeval.text import split_sentences

    stories = read_stories(examples_dir / "human.jsonl")[:30]
    return [ngram_tokens(s) for t in stories for s in split_sentences(t.story)]


def test_kneser_ney_matches_nltk(examples_dir: Path) -> None:
    from nltk.lm import KneserNeyInterpolated
    from nltk.lm.preprocessing import padded_everygram_pipeline

    sentences = _sentences(examples_dir)
    for order in (2, 3, 5):
        train, vocab = padded_everygram_pipeline(order, sentences)
        reference = KneserNeyInterpolated(order, discount=0.1)
        reference.fit(train, vocab)
        ours = KneserNeyLM.fit(sentences, order=order, discount=0.1, uniform_floor=False)
        probes = [
            (s[i], s[max(0, i - order + 1) : i]) for s in sentences[:12] for i in range(len(s))
        ]
        probes += [("the", ["he", "saw"]), (".", ["she"]), ("he", [])]  # seen and unseen contexts
        for word, context in probes:
            assert ours.probability(word, context) == pytest.approx(
                reference.score(word, context), abs=1e-9
            ), (order, word, context)


def test_unseen_words_get_a_finite_score_and_fluent_text_ranks_first(examples_dir: Path) -> None:
    lm = KneserNeyLM.fit(_sentences(examples_dir), order=5)
    fluent = ngram_tokens("He walked to the door.")
    scrambled = ngram_tokens("Door the to walked he.")
    assert lm.logprob(fluent) > lm.logprob(scrambled)
    assert math.isfinite(lm.logprob(ngram_tokens("The zorblax walked.")))
    assert not math.isfinite(
        KneserNeyLM.fit(_sentences(examples_dir), order=2, uniform_floor=False).logprob(["zorblax"])
    )
    with pytest.raises(ValueError, match="discount must be in"):
        KneserNeyLM.fit([["a"]], discount=1.5)


def test_rerank_keeps_the_best_per_system_and_prompt(examples_dir: Path) -> None:
    lm = KneserNeyLM.fit(_sentences(examples_dir), order=5)
    texts = ["He walked to the door.", "Door the to walked he.", "She looked at him."]
    stories = [
        Story(f"{p}-{system}-{n}", f"prompt {p}", text, system=system, extra={"prompt_id": p})
        for p in ("a", "b")
        for system in ("engen", "s2sa")
        for n, text in enumerate(texts)
    ]
    result = rerank_continuations(stories, lm, keep=2)
    assert len(result.stories) == 8
    kept = {(s.extra["prompt_id"], s.system): [] for s in result.stories}
    for story in result.stories:
        kept[(story.extra["prompt_id"], story.system)].append(story.story)
        assert story.extra["rerank_candidates"] == 3
    assert all("Door the to walked he." not in v for v in kept.values())
    assert result.signature.fields["lm"] == "kneser-ney-5"
    with pytest.raises(ValueError, match="keep must be at least 1"):
        rerank_continuations(stories, lm, keep=0)


def test_rerank_command(examples_dir: Path, tmp_path: Path, run_cli: Any) -> None:
    candidates = tmp_path / "candidates.jsonl"
    rows = [
        {"id": f"p{p}-{n}", "prompt": f"P{p}", "story": text, "system": "m", "prompt_id": f"p{p}"}
        for p in range(3)
        for n, text in enumerate(["He walked to the door.", "door door the he to."])
    ]
    candidates.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "kept.jsonl"
    code, stdout, err = run_cli(
        "rerank", str(candidates), "--train", str(examples_dir / "human.jsonl"), "-o", str(out)
    )
    assert code == 0, stdout + err
    kept = [json.loads(line) for line in out.open()]
    assert [r["story"] for r in kept] == ["He walked to the door."] * 3
    assert kept[0]["rerank_signature"].startswith("rerank|") and "signature: rerank|" in stdout
    code, stdout, err = run_cli(
        "rerank", str(candidates), "--train", str(tmp_path / "missing.jsonl"), "-o", str(out)
    )
    assert code == 2
