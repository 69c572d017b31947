"""Run a judge on everything an audit needs (``storyeval judge-audit --model ...``).

:func:`storyeval.judge.audit.audit_judge` reads answers a judge already gave. This module
gives them: the judge's answers on the stories (absolute, with the settings' repeats), its
pairwise answers in both orders within each prompt (position bias), perturbed copies of the
stories, made by the perturbation engine one technique at a time, and its answers on them
(sensitivity to errors that destroy a story, robustness to edits that keep it), and the
systems of the judge's own model family (self-preference). The files are written beside the
audit so that each answer can be read and the audit re-run from them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from storyeval.base.errors import StoryevalError
from storyeval.corpus import Judgment, Story, parse_story, write_judgments, write_stories
from storyeval.judge.backends import JudgeBackend
from storyeval.judge.cache import JudgeCache
from storyeval.judge.core import JudgeSettings, family_systems, judge_stories, training_notes
from storyeval.judge.rubric import Rubric

#: Techniques perturbed by default: two that destroy a story (the judge must score the copy
#: lower) and two that keep its meaning (it must not move).
AUDIT_TECHNIQUES: tuple[str, ...] = ("repetition", "reordering", "typos", "synonym")


@dataclass
class AuditInputs:
    """What a judge answered for an audit, in the arguments of
    :func:`~storyeval.judge.audit.audit_judge` (``runs``, ``comparisons``, ``perturbed``,
    ``perturbed_judgments``, ``own_systems``), and notes on what could not be run."""

    runs: list[list[Judgment]]
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    perturbed: list[Story] = field(default_factory=list)
    perturbed_judgments: list[Judgment] = field(default_factory=list)
    own_systems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def write(self, directory: str | Path) -> list[Path]:
        """``judge.jsonl``, ``pairwise.jsonl``, ``perturbed.jsonl``, ``perturbed-judge.jsonl``
        (those that have content) in ``directory``; returns the paths written."""
        from storyeval.base.io import claim_output_directory, write_text_atomic

        out = claim_output_directory(directory, "judge audit")
        written = [out / "judge.jsonl"]
        write_judgments(written[0], [j for run in self.runs for j in run])
        if self.comparisons:
            written.append(out / "pairwise.jsonl")
            lines = "".join(json.dumps(c) + "\n" for c in self.comparisons)
            write_text_atomic(written[-1], lines)
        if self.perturbed:
            written += [out / "perturbed.jsonl", out / "perturbed-judge.jsonl"]
            write_stories(written[-2], self.perturbed)
            write_judgments(written[-1], self.perturbed_judgments)
        return written


def collect_audit_inputs(
    stories: Sequence[Story],
    rubric: Rubric,
    judge: JudgeBackend,
    *,
    settings: JudgeSettings | None = None,
    pairwise: bool = True,
    techniques: Sequence[str] = AUDIT_TECHNIQUES,
    seed: int = 0,
    cache: JudgeCache | None = None,
    nlp: Any = None,
    progress: Callable[[str], None] | None = None,
) -> AuditInputs:
    """Run ``judge`` on what :func:`~storyeval.judge.audit.audit_judge` checks.

    Parameters
    ----------
    stories : sequence of Story
        With ``system`` (separability, self-preference) and prompts (pairwise).
    rubric : Rubric
    judge : JudgeBackend
        One judge: an LLM (local or at an endpoint) or a reward model.
    settings : JudgeSettings, optional
        The absolute run's settings (repeats with sampling give stability); the pairwise run
        uses them with both orders.
    pairwise : bool
        Also judge every pair of stories within a prompt, both orders (position bias).
    techniques : sequence of str
        Perturbation techniques, one perturbed copy per story and technique (empty: none).
    seed : int
        Seed of the perturbations.
    """
    base = settings or JudgeSettings()
    if base.mode != "absolute":
        raise StoryevalError("an audit's settings are the absolute run's; pairwise is added")
    if not stories:
        raise StoryevalError("give the stories to audit the judge on")
    absolute = judge_stories(
        stories, rubric, [judge], settings=base, cache=cache, progress=progress
    )
    inputs = AuditInputs(runs=[absolute.judgments])
    inputs.own_systems = family_systems(stories, judge.name)
    # people-based checks (length bias with quality held) are in-sample on training stories
    inputs.notes += training_notes(absolute)
    if base.repeats == 1 and (not rubric.analyse_first or base.decoding.temperature == 0):
        inputs.notes.append(
            "stability: this judge's answers are deterministic (read from probabilities or "
            "written greedily), so a second run repeats them; sample written answers "
            "(an analyse-first rubric, --temperature > 0, --repeats 2) to measure it"
        )
    if pairwise:
        _pairwise(inputs, stories, rubric, judge, base, cache)
    if techniques:
        _perturbed(inputs, stories, rubric, judge, base, techniques, seed, cache, nlp)
    return inputs


def _pairwise(
    inputs: AuditInputs,
    stories: Sequence[Story],
    rubric: Rubric,
    judge: JudgeBackend,
    settings: JudgeSettings,
    cache: JudgeCache | None,
) -> None:
    from storyeval.corpus import prompt_id

    if max(Counter(prompt_id(s) for s in stories).values()) < 2:
        inputs.notes.append("position bias: every prompt has one story, so no pairs to judge")
        return
    paired = replace(settings, mode="pairwise", both_orders=True, repeats=1)
    run = judge_stories(stories, rubric, [judge], settings=paired, cache=cache)
    inputs.comparisons = run.comparisons


def _perturbed(
    inputs: AuditInputs,
    stories: Sequence[Story],
    rubric: Rubric,
    judge: JudgeBackend,
    settings: JudgeSettings,
    techniques: Sequence[str],
    seed: int,
    cache: JudgeCache | None,
    nlp: Any,
) -> None:
    from storyeval.perturb import perturb_stories

    made = perturb_stories(
        stories, list(techniques), mode="each", seed=seed, skip_inapplicable=True, nlp=nlp
    )
    if made.skipped:
        inputs.notes.append(
            f"perturbations: {len(made.skipped)} left out (the technique could not change "
            "the story)"
        )
    inputs.perturbed = [parse_story(record) for record in made.records()]
    _trained_on_copies(inputs, judge, techniques, seed)
    if inputs.perturbed:
        once = replace(settings, repeats=1)
        run = judge_stories(inputs.perturbed, rubric, [judge], settings=once, cache=cache)
        inputs.perturbed_judgments = run.judgments


def _trained_on_copies(
    inputs: AuditInputs, judge: JudgeBackend, techniques: Sequence[str], seed: int
) -> None:
    """A note when the judge (a reward model trained with negatives) learned to score copies
    made by these techniques lower: on its training stories, with its seed, the audit's
    copies are the very ones it was trained on."""
    trained, trained_seed = getattr(judge, "trained_perturbations", ((), None))
    shared = [name for name in techniques if name in trained]
    if not shared:
        return
    same = "the same seed: these copies of its training stories are the ones it learned from; "
    same += "give --seed N for others"
    other = "another seed, but on its training stories the copies are of stories it saw"
    inputs.notes.append(
        f"perturbations: the judge was trained to score {', '.join(shared)} copies lower "
        f"(negatives, seed {trained_seed}); {same if seed == trained_seed else other}"
    )
