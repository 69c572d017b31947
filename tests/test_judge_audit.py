"""judge-audit on a simulated judge with planted biases: it rewards length beyond people,
prefers the first story shown and its own family's stories, misses no repetition and ignores
typos, and repeats itself closely. Each planted bias must be found, and a judge without them
must pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storyeval import __version__
from storyeval.corpus import Judgment, Story, read_judgments, read_stories
from storyeval.judge.audit import audit_judge
from test_judge import ONE_CRITERION

OWN = "smollm2-p0.9"


@pytest.fixture(scope="module")
def corpus(examples_dir: Path) -> tuple[list[Story], list[Judgment]]:
    return read_stories(examples_dir / "stories.jsonl"), read_judgments(
        examples_dir / "judgments.jsonl"
    )


def _judge(
    stories: list[Story], humans: list[Judgment], *, biased: bool, noise: float, seed: int
) -> list[Judgment]:
    """A judge of coherence: people's mean, plus (biased) length and own-family bonuses."""
    rng = np.random.default_rng(seed)
    ratings: dict[str, list[float]] = {}
    for j in humans:
        if j.criterion == "coherence":
            ratings.setdefault(j.item_id, []).append(j.value)
    lengths = np.array([np.log1p(len(s.story.split())) for s in stories])
    z = (lengths - lengths.mean()) / lengths.std()
    out = []
    for story, zl in zip(stories, z, strict=True):
        value = float(np.mean(ratings[story.id])) + rng.normal(0, noise)
        if biased:
            value += 1.0 * zl + (1.0 if story.system == OWN else 0.0)
        out.append(Judgment(story.id, "judge", "coherence", value))
    return out


def _comparisons(stories: list[Story], *, first_bias: float, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows = []
    by_prompt: dict[str, list[Story]] = {}
    for s in stories:
        by_prompt.setdefault(str(s.extra.get("prompt_id") or s.id), []).append(s)
    for prompt, group in by_prompt.items():
        a, b = group[0], group[1]
        for first, second in ((a, b), (b, a)):
            winner = first.system if rng.random() < first_bias else second.system
            rows.append(
                {
                    "item_id": f"{prompt}:{a.id}~{b.id}",
                    "prompt_id": prompt,
                    "system_a": a.system,
                    "system_b": b.system,
                    "winner": winner,
                    "first": first.system,
                    "criterion": "coherence",
                    "sample": 0,
                }
            )
    return rows


def _perturbed(stories: list[Story], judged: list[Judgment]) -> tuple[list[Story], list[Judgment]]:
    from storyeval.perturb.engine import perturb_stories

    human = [s for s in stories if s.system == "human"][:20]
    run = perturb_stories(human, ["repetition", "typos"], mode="each", seed=1)
    score = {j.item_id: j.value for j in judged}
    made, answers = [], []
    for p in run.stories:
        record = p.to_record()
        story = Story(
            record["id"],
            record["prompt"],
            record["story"],
            extra={"source_id": record["source_id"], "techniques": record["techniques"]},
        )
        made.append(story)
        drop = 1.0 if "repetition" in record["techniques"] else 0.0
        answers.append(Judgment(story.id, "judge", "coherence", score[record["source_id"]] - drop))
    return made, answers


def test_planted_biases_are_found(corpus: tuple[list[Story], list[Judgment]]) -> None:
    stories, humans = corpus
    first = _judge(stories, humans, biased=True, noise=0.05, seed=1)
    second = _judge(stories, humans, biased=True, noise=0.05, seed=2)
    perturbed, answers = _perturbed(stories, first)
    audit = audit_judge(
        [first, second],
        stories,
        humans=humans,
        comparisons=_comparisons(stories, first_bias=0.8, seed=0),
        perturbed=perturbed,
        perturbed_judgments=answers,
        own_systems=[OWN],
        n_boot=200,
    )
    verdicts = "\n".join(audit.verdicts())
    assert "favours longer stories beyond people's ratings" in verdicts
    assert "favours the first position" in verdicts
    assert "prefers its own family's stories" in verdicts
    assert "stability (coherence): stable" in verdicts
    assert "detects repetition (lower for 100%)" in verdicts
    assert "robust to typos" in verdicts
    assert "separates the systems" in verdicts
    checks = audit.checks.set_index("check")
    low, high = checks.loc["length_bias", ["ci_low", "ci_high"]]
    assert 0 < low <= checks.loc["length_bias", "estimate"] <= high


def test_a_fair_judge_passes_and_what_is_missing_is_said(
    corpus: tuple[list[Story], list[Judgment]], tmp_path: Path, run_cli: Any
) -> None:
    stories, humans = corpus
    fair = _judge(stories, humans, biased=False, noise=0.05, seed=3)
    audit = audit_judge(
        [fair],
        stories,
        humans=humans,
        own_systems=[OWN],
        n_boot=200,
        comparisons=_comparisons(stories, first_bias=0.5, seed=4),
    )
    verdicts = "\n".join(audit.verdicts())
    assert "no length bias found" in verdicts and "no self-preference found" in verdicts
    assert "no position bias found" in verdicts
    assert any("stability (coherence): one run" in s for s in audit.skipped)
    judge_file, humans_file = tmp_path / "judge.jsonl", tmp_path / "humans.jsonl"
    judge_file.write_text("".join(json.dumps(j.to_dict()) + "\n" for j in fair))
    humans_file.write_text("".join(json.dumps(j.to_dict()) + "\n" for j in humans))
    stories_file = tmp_path / "stories.jsonl"
    stories_file.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in stories))
    code, out, err = run_cli(
        "judge-audit",
        "--judge",
        str(judge_file),
        "--stories",
        str(stories_file),
        "--humans",
        str(humans_file),
        "-o",
        str(tmp_path / "audit"),
        "--bootstrap",
        "50",
    )
    assert code == 0, err
    assert "length_bias (coherence): no length bias found" in out
    assert "not checked: position bias" in out
    assert (tmp_path / "audit" / "audit.csv").is_file()
    assert "# Judge audit" in (tmp_path / "audit" / "audit.md").read_text()
    # read back, and a section of the meta-evaluation report
    from metahelpers import write_example_scores
    from storyeval.judge.audit import read_audit

    again = read_audit(tmp_path / "audit")
    assert again.signature is not None and again.signature.name == "judge_audit"
    assert any("position bias" in line for line in again.skipped)
    assert list(again.checks["verdict"]) == [
        line.split(": ", 1)[1]
        for line in out.splitlines()
        if line.startswith(("separab", "len", "replaceab"))
    ]
    assert "replaceability (coherence): may replace a rater" in out  # a fair judge, 3 raters
    scores = write_example_scores(tmp_path / "scores.jsonl")
    code, _, err = run_cli(
        "report", "-s", str(scores), "-j", str(humans_file), "--stories", str(stories_file),
        "-o", str(tmp_path / "report"), "--n-boot", "20", "--judge-audit", str(tmp_path / "audit"),
    )  # fmt: skip
    assert code == 0, err
    report = (tmp_path / "report" / "report.md").read_text()
    assert "Audit of the judge" in report and "no length bias found" in report
    assert "Not checked: position bias" in report and "judge_audit\\|judge:" in report
    assert (tmp_path / "report" / "judge_audit.csv").is_file()
    code, _, err = run_cli(
        "report", "-s", str(scores), "-j", str(humans_file), "-o", str(tmp_path / "r2"),
        "--n-boot", "20", "--judge-audit", str(tmp_path),
    )  # fmt: skip
    assert code == 2 and "no audit.csv" in err


@pytest.mark.slow
def test_judge_audit_runs_the_judge_and_its_files_reproduce_the_audit(
    corpus: tuple[list[Story], list[Judgment]],
    tmp_path: Path,
    run_cli: Any,
    examples_dir: Path,
    tiny_models: dict[str, Path],
) -> None:
    """The command's plumbing, with a two-layer model of SmolLM2's architecture as the judge."""
    stories = [s for s in corpus[0] if s.extra.get("prompt_id") in ("s001", "s002")]
    stories_file, rubric = tmp_path / "stories.jsonl", tmp_path / "tiny.yaml"
    stories_file.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in stories))
    rubric.write_text(ONE_CRITERION)
    common = ["--stories", str(stories_file), "--humans", str(examples_dir / "judgments.jsonl")]
    common += ["--bootstrap", "50"]
    ran = tmp_path / "ran"
    code, out, err = run_cli(
        "judge-audit", *common, "--rubric", str(rubric), "--perturb", "repetition,typos",
        "--no-cache", "--model", str(tiny_models["lm"]), "-o", str(ran),
    )  # fmt: skip
    assert code == 0, err
    judged = read_judgments(ran / "judge.jsonl")
    assert len(judged) == len(stories)  # one criterion
    pairs = [json.loads(line) for line in (ran / "pairwise.jsonl").read_text().splitlines()]
    assert len(pairs) == 2 * 3 * 2  # two prompts, three stories each, both orders
    perturbed = read_stories(ran / "perturbed.jsonl")
    assert {tuple(s.extra["techniques"]) for s in perturbed} == {("repetition",), ("typos",)}
    assert {s.extra["source_id"] for s in perturbed} <= {s.id for s in stories}
    assert len(read_judgments(ran / "perturbed-judge.jsonl")) == len(perturbed)
    checks = (ran / "audit.csv").read_text().splitlines()
    for check in ("separability", "position_bias", "self_preference", "length_bias"):
        assert any(line.startswith(check + ",") for line in checks), check
    assert "perturbation:repetition (coherence)" in out and "perturbation:typos" in out
    assert "signature: judge_audit|judge:" in out and "|perturbed:" in out
    assert all(line.endswith("version:" + __version__) for line in checks[1:])
    # the answers written beside the audit give the same audit when read back
    again = tmp_path / "again"
    own = "smollm2-k40-t0.7,smollm2-p0.9"  # what the run found: the judge's own family
    code, _, err = run_cli(
        "judge-audit", *common, "--judge", str(ran / "judge.jsonl"),
        "--comparisons", str(ran / "pairwise.jsonl"), "--perturbed", str(ran / "perturbed.jsonl"),
        "--perturbed-judge", str(ran / "perturbed-judge.jsonl"), "--own-systems", own,
        "-o", str(again),
    )  # fmt: skip
    assert code == 0, err
    assert (again / "audit.csv").read_text() == (ran / "audit.csv").read_text()
    code, _, err = run_cli(
        "judge-audit",
        *common,
        "--judge",
        str(ran / "judge.jsonl"),
        "--model",
        "x",
        "-o",
        str(again),
    )
    assert code == 2 and "not both" in err
    code, _, err = run_cli(
        "judge-audit", *common, "--comparisons", str(ran / "pairwise.jsonl"), "-o", str(again)
    )
    assert code == 2 and "go with --judge" in err
