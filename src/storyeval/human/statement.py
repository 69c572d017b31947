"""Human evaluation design statements, generated from the study file and the collected data.

The statement covers what Schoch et al. (seed 002: "human evaluation design statements") ask
to report (question types, scales and exact wording; presentation order and questions per
annotator; criteria definitions; annotators' background, recruitment and compensation), laid
out after the Human Evaluation Datasheet (HEDS: evaluated outputs, evaluators, experimental
design, quality criteria, ethics), and ends with the reporting checklist of Karpinska et al.
(seed 003, appendix A). Everything that can be derived is derived (wording, scales, labels,
order, counts, exclusions), so the statement cannot drift from what was run: the judgments
must carry the study version of the file. What only the researcher knows (recruitment,
compensation, demographics...) comes from the file's ``reporting`` section or is marked TODO.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from storyeval import __version__
from storyeval.corpus import Judgment, read_judgments
from storyeval.errors import StoryevalError
from storyeval.human.study import Study, detection_settings, triangle_evaluations
from storyeval.text import count_words

TODO = "**TODO** (not in the study file: add it under `reporting:`)"

SURVEY_ITEMS: tuple[tuple[str, str], ...] = (
    ("type of the task", "task"),
    ("length of rated text", "length"),
    ("rated attributes", "criteria"),
    ("rating scale", "scale"),
    ("labels used for ratings", "labels"),
    ("definitions of each attribute", "definitions"),
    ("instructions provided to raters", "instructions"),
    ("qualifications and quality control measures employed", "quality"),
    ("number of rated items", "items"),
    ("number of rated systems", "systems"),
    ("number of raters per item", "raters"),
    ("inclusion of ground truth", "ground_truth"),
    ("monetary compensation", "compensation"),
)
"""The questions of the reporting survey of seed 003 (appendix A)."""


class StatementError(StoryevalError, ValueError):
    """The data does not belong to this version of the study."""


_PROTOCOL_TEXT = {
    "likert": "Likert-scale rating: each story is shown on its own (with its prompt) and rated on every criterion.",
    "side_by_side": (
        "Side-by-side Likert rating: each model story is shown next to the human reference for the same "
        "prompt and both are rated on every criterion (the calibration recommended by Karpinska et al., 2021). "
        "Raters are not told which text is the reference."
    ),
    "pairwise": "Pairwise preference: two systems' stories for the same prompt are shown side by side; the rater chooses one per criterion.",
    "detection": (
        "Human-or-machine detection (Clark et al., 2021): each text is rated on a 4-point scale from "
        "'definitely human-written' to 'definitely machine-generated', then the rater explains the answer."
    ),
    "triangle": (
        "NLG triangle test (sensory analysis, ISO 4120): three texts, two by one author and one by another; the "
        "judge must pick the odd one out (forced choice)."
    ),
}

_ORDER_TEXT = {
    "balanced": (
        "balanced: within a participant's batch the conditions follow a row of a Williams Latin square chosen by "
        "the participant's number (each condition equally often in each position and after each other condition "
        "across participants); items within a condition in random order"
    ),
    "random": "random: each participant's batch is shuffled independently",
    "fixed": "fixed: the order of the story file",
}


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.strip().splitlines())


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def check_data_version(study: Study, judgments: Sequence[Judgment]) -> list[str]:
    """Verify that the judgments were collected with this version of the study.

    Returns notes for the statement; raises :class:`StatementError` on a mismatch.
    """
    notes = []
    names = {j.study for j in judgments if j.study is not None}
    if names and names != {study.name}:
        raise StatementError(
            f"the judgments belong to study {', '.join(sorted(names))}, not to {study.name!r}"
        )
    versions = {j.extra.get("study_version") for j in judgments}
    versions.discard(None)
    if versions and versions != {study.version}:
        raise StatementError(
            f"the judgments were collected with version {', '.join(sorted(map(str, versions)))} of study "
            f"{study.name!r}, but the study file is now version {study.version}: the file (or its story file) "
            "changed after the data was collected. Generate the statement from the file that was run."
        )
    if not versions:
        notes.append(
            "The judgments carry no study version, so this statement could not verify that they were "
            "collected with this study file."
        )
    return notes


def design_statement(
    study: Study,
    *,
    judgments: Sequence[Judgment] | None = None,
    participants: Sequence[dict[str, Any]] | None = None,
    min_median_time_s: float | None = None,
    exclude_failed_checks: bool | None = None,
) -> str:
    """The design statement of ``study`` as Markdown (see the module docstring).

    Parameters
    ----------
    study
        The loaded study file.
    judgments
        The collected judgments (long format, as exported by the server); optional.
    participants
        The exported participant records (``participants.jsonl``); optional.
    min_median_time_s, exclude_failed_checks
        The exclusion rules applied in the analysis (default: the study file's ``quality``).

    Examples
    --------
    >>> import pathlib
    >>> from storyeval.human.study import load_study
    >>> study = load_study(pathlib.Path(__file__).parents[3] / "examples/studies/likert.yaml")
    >>> text = design_statement(study)
    >>> "How grammatically correct is the text of the story fragment?" in text
    True
    """
    config = study.config
    quality = config.quality
    threshold = quality.min_median_time_s if min_median_time_s is None else min_median_time_s
    drop_failed = (
        quality.exclude_failed_checks if exclude_failed_checks is None else exclude_failed_checks
    )
    notes: list[str] = []
    if judgments is not None:
        notes += check_data_version(study, judgments)
    report = config.reporting
    answered: dict[str, bool] = {}
    out: list[str] = []
    add = out.append

    add(f"# Human evaluation design statement: {config.title}")
    add("")
    source = f"`{study.path}`" if study.path is not None else "a study definition"
    data_text = (
        f" and {len(judgments)} collected judgments"
        if judgments is not None
        else " (no data collected yet)"
    )
    add(
        f"Generated by storyeval {__version__} from {source} (study `{study.name}`, version `{study.version}`)"
        f"{data_text}. Items marked **TODO** are not in the study file; add them under `reporting:` and "
        "regenerate."
    )
    for note in notes:
        add("")
        add(f"*Note: {note}*")

    # ------------------------------------------------------------------ 1. outputs
    add("")
    add("## 1. Evaluated outputs")
    add("")
    add(f"- Story file: `{study.stories_path.name}` (sha256 `{study.stories_sha256[:16]}`).")
    add(f"- Items (pages of the task): **{len(study.items)}**; protocol `{study.protocol}`.")
    per_condition: dict[str, int] = {}
    for item in study.items:
        per_condition[item.condition] = per_condition.get(item.condition, 0) + 1
    add("- Items per condition: " + ", ".join(f"`{c}` {n}" for c, n in per_condition.items()) + ".")
    lengths: dict[str, list[int]] = {}
    seen: set[str] = set()
    for item in study.items:
        for text in item.texts:
            if text.id in seen:
                continue
            seen.add(text.id)
            lengths.setdefault(str(text.system), []).append(count_words(text.story))
    add(
        "- Length of the rated texts (words, mean and range): "
        + "; ".join(
            f"`{system}` {statistics.mean(v):.1f} ({min(v)}-{max(v)}, n = {len(v)})"
            for system, v in sorted(lengths.items())
        )
        + "."
    )
    answered["length"] = True
    sel = config.select
    rule = []
    if sel.systems:
        rule.append("systems " + ", ".join(f"`{s}`" for s in sel.systems))
    if sel.ids:
        rule.append(f"{len(sel.ids)} listed ids")
    if sel.per_system:
        rule.append(f"{sel.per_system} per system sampled at random (seed {sel.seed})")
    if sel.limit:
        rule.append(f"at most {sel.limit} sampled at random (seed {sel.seed})")
    if sel.exclude_ids:
        rule.append(f"{len(sel.exclude_ids)} ids excluded")
    if study.training:
        rule.append("stories sharing a prompt with a training example excluded")
    add("- Selection: " + ("; ".join(rule) if rule else "every story of the file") + ".")
    systems = sorted({str(t.system) for item in study.items for t in item.texts})
    add("- Systems shown: " + ", ".join(f"`{s}`" for s in systems) + ".")
    answered["items"] = answered["systems"] = True
    has_human = any(s == "human" for s in systems) or study.protocol == "side_by_side"
    answered["ground_truth"] = True
    add(
        "- Human-written texts (ground truth) included: "
        + ("yes" if has_human else "no")
        + (" (as references beside the model stories)" if study.protocol == "side_by_side" else "")
        + "."
    )

    # ------------------------------------------------------------------ 2. questions
    add("")
    add("## 2. Task and question design")
    add("")
    add(_PROTOCOL_TEXT[study.protocol])
    answered["task"] = True
    add("")
    if study.protocol in ("likert", "side_by_side"):
        add("| criterion | question (exact wording) | definition shown | scale | labels |")
        add("|---|---|---|---|---|")
        for c in config.criteria:
            labels = ", ".join(f'{p} = "{_cell(lab)}"' for p, lab in c.point_labels().items())
            add(
                f"| {c.name} | {_cell(c.question)} | {_cell(c.definition) if c.definition else '(none)'} | "
                f"{c.scale}-point | {c.labelling}: {labels} |"
            )
        answered.update(criteria=True, scale=True, labels=True)
        answered["definitions"] = all(c.definition for c in config.criteria)
    elif study.protocol == "pairwise":
        assert config.pairwise is not None
        add("| criterion | question (exact wording) | definition shown | answers |")
        add("|---|---|---|---|")
        options = f'"{config.pairwise.labels[0]}" / "{config.pairwise.labels[1]}"'
        if config.pairwise.allow_tie:
            options += f' / "{config.pairwise.tie_label}"'
        for c in config.criteria:
            add(
                f"| {c.name} | {_cell(c.question)} | {_cell(c.definition) if c.definition else '(none)'} | {options} |"
            )
        add("")
        add(
            f"Systems compared: `{config.pairwise.systems[0]}` (system A) and `{config.pairwise.systems[1]}` "
            f"(system B); ties {'allowed' if config.pairwise.allow_tie else 'not allowed (forced choice)'}."
        )
        answered.update(criteria=True, scale=True, labels=True)
        answered["definitions"] = all(c.definition for c in config.criteria)
    elif study.protocol == "detection":
        det = detection_settings(config)
        add(f'Question: "{det.question}"')
        add("")
        for i, label in enumerate(det.labels, start=1):
            add(f"{i}. {label}")
        add("")
        add(
            f"Follow-up (free text, {'required' if det.explanation_required else 'optional'}): "
            f'"{det.why_question}" after answer(s) {", ".join(map(str, det.why_for))}; otherwise '
            f'"{det.change_question}".'
        )
        add(
            f"Human-written texts: systems {', '.join(f'`{s}`' for s in det.human_systems)}; every other system counts as machine."
        )
        answered.update(criteria=True, scale=True, labels=True, definitions=True)
    else:
        tri = config.triangle
        assert tri is not None
        add(f'Question: "{tri.question}" (texts labelled {", ".join(tri.labels)}).')
        add("")
        plan = (
            f"alpha = {tri.plan.alpha:g}, beta = {tri.plan.beta:g}, p_d = {tri.plan.pd:g}"
            if tri.plan
            else "given directly"
        )
        add(
            f"Test of {tri.test}; subjects A = `{tri.systems[0]}`, B = `{tri.systems[1]}`; "
            f"{triangle_evaluations(config)} triads (number of judges from the plan: {plan}). The six orders AAB, ABA, "
            "BAA, BBA, BAB, ABB are balanced over judges in groups of six; each triad uses three different prompts."
        )
        answered.update(criteria=True, scale=True, labels=True, definitions=True)
    add("")
    add("Instructions shown before the task:")
    add("")
    add(_quote(config.instructions) if config.instructions.strip() else "> (none)")
    answered["instructions"] = bool(config.instructions.strip())
    add("")
    if config.questions:
        add(
            "Free-text questions at the end: "
            + "; ".join(
                f'"{q.text}" ({"required" if q.required else "optional"})' for q in config.questions
            )
            + "."
        )
    else:
        add("Free-text questions at the end: none.")
    add("")
    add(
        "Content warning shown before consent:"
        if config.content_warning
        else "Content warning: none."
    )
    if config.content_warning:
        add("")
        add(_quote(config.content_warning))

    # ------------------------------------------------------------------ 3. presentation
    add("")
    add("## 3. Presentation")
    add("")
    a = config.assignment
    add(f"- Order of items: {_ORDER_TEXT[a.order]} (seed {a.seed}).")
    if study.protocol in ("side_by_side", "pairwise"):
        add(
            "- Left/right position of the two texts alternates over items and over the raters of an item."
        )
    if study.protocol != "triangle":
        add("- A participant never gets two items continuing the same prompt.")
    add(f"- Prompt shown: {'yes' if config.show_prompt else 'no'}; system names shown: no.")
    per_person = study.items_per_participant
    cap = study.max_items_per_participant
    add(
        f"- Items per participant: {per_person} per batch"
        + (f", up to {cap} in total (a cap)" if cap > per_person else " (no further batches)")
        + "."
    )
    add(f"- Planned raters per item: {study.raters_per_item}.")
    answered["raters"] = True
    add(
        "- Interface: storyeval study server (server-rendered web pages, no JavaScript); the server records "
        "the time from the delivery of each page to its submission and the gap between consecutive submissions."
    )

    # ------------------------------------------------------------------ 4. training
    add("")
    add("## 4. Training")
    add("")
    if study.training:
        add(
            f"{len(study.training)} training example(s) before the task, each answered like a real item and followed "
            "by the correct answer and an explanation (the Examples training of Clark et al., 2021):"
        )
        add("")
        for i, example in enumerate(study.training, start=1):
            answer = (
                example.answer
                if example.answers is None
                else ", ".join(f"{k} {v}" for k, v in example.answers.items())
            )
            ids = ", ".join(f"`{t.id}`" for t in example.texts)
            add(f'{i}. texts {ids}; answer: {answer}. Explanation: "{_cell(example.explanation)}"')
    else:
        add("No training examples.")

    # ------------------------------------------------------------------ 5. quality
    add("")
    add("## 5. Quality control and exclusions")
    add("")
    if study.checks:
        add(
            f"- Attention checks: {len(study.checks)} per participant, inserted in the first batch:"
        )
        for check in study.checks:
            expect = "; ".join(f"{k} in {list(v)}" for k, v in check.expect.items())
            where = (
                f"position {check.position}"
                if check.position
                else "a random position (never first)"
            )
            add(f"  - `{check.id}` at {where}; accepted answers: {expect}.")
    else:
        add("- Attention checks: none.")
    add(
        f"- Exclusion rules: {'raters failing any attention check are excluded; ' if drop_failed and study.checks else ''}"
        + (
            f"raters whose median time per item is below {threshold:g} s are excluded (Karpinska et al., 2021)."
            if threshold
            else "no time-based exclusion."
        )
    )
    answered["quality"] = bool(study.checks) or bool(threshold) or bool(report.qualifications)
    if report.qualifications:
        add(f"- Qualifications required: {report.qualifications}")
    if judgments is not None and judgments:
        from storyeval.human.analysis import filter_raters, judgments_table

        frame = judgments_table(judgments)
        kept, steps, raters = filter_raters(
            frame, min_median_time_s=threshold, exclude_failed_checks=drop_failed
        )
        add("")
        add(
            "| exclusion step | rule | raters removed | judgments removed | raters left | judgments left |"
        )
        add("|---|---|---|---|---|---|")
        for _, row in steps.iterrows():
            add(
                f"| {row['step']} | {row['threshold']} | {row['raters_removed']} of {row['raters_before']} | "
                f"{row['judgments_removed']} of {row['judgments_before']} | {row['raters_after']} | {row['judgments_after']} |"
            )
        times = raters["median_time_s"].dropna()
        if len(times):
            add("")
            add(
                f"Median time per item over raters: median {times.median():.1f} s "
                f"(range {times.min():.1f}-{times.max():.1f} s), measured by the server."
            )
        _data_sections(add, study, kept, participants)

    # ------------------------------------------------------------------ 6. evaluators
    add("")
    add("## 6. Evaluators")
    add("")
    add(f"- Recruitment: {report.recruitment or TODO}")
    add(f"- Compensation: {report.compensation or TODO}")
    add(f"- Platform: {report.platform or TODO}")
    add(f"- Who the evaluators are (expertise, background): {report.evaluators or TODO}")
    add(f"- Demographics: {report.demographics or TODO}")
    add(f"- Qualifications: {report.qualifications or TODO}")
    add(
        f"- Consent: {report.consent or 'participants confirmed a consent statement before starting'}"
    )
    add(f"- Ethics review: {report.ethics or TODO}")
    if report.notes:
        add(f"- Notes: {report.notes}")
    answered["compensation"] = bool(report.compensation)

    # ------------------------------------------------------------------ checklist
    add("")
    add("## Reporting checklist")
    add("")
    add(
        "The questions of the survey of Karpinska et al. (2021, appendix A), answered by this statement:"
    )
    add("")
    add("| item | reported |")
    add("|---|---|")
    for question, key in SURVEY_ITEMS:
        add(f"| {question} | {'yes' if answered.get(key) else 'TODO'} |")
    add("")
    return "\n".join(out)


def _data_sections(
    add: Any, study: Study, kept: Any, participants: Sequence[dict[str, Any]] | None
) -> None:
    add("")
    add("### Collected data (after exclusions)")
    add("")
    if kept.empty:
        add("- No judgments are left after the exclusions above.")
        return
    pages = kept.groupby(["rater_id", "page"]).size().reset_index().groupby("rater_id").size()
    add(
        f"- Raters contributing judgments: {kept['rater_id'].nunique()}; items judged per rater: "
        f"min {pages.min()}, median {pages.median():g}, max {pages.max()}."
    )
    per_item = kept.groupby("item_id")["rater_id"].nunique()
    add(
        f"- Raters per rated text: min {per_item.min()}, median {per_item.median():g}, max {per_item.max()} "
        f"(planned {study.raters_per_item})."
    )
    if participants:
        started = sum(1 for p in participants if p.get("started_at"))
        finished = sum(1 for p in participants if p.get("finished_at"))
        add(f"- Participant links: {len(participants)}; started: {started}; finished: {finished}.")
    if "submitted_at" in kept:
        stamps = sorted(str(s) for s in kept["submitted_at"].dropna())
        if stamps:
            add(f"- Collected from {stamps[0]} to {stamps[-1]} (UTC).")
    if study.protocol != "triangle":
        from storyeval.human.analysis import agreement

        table = agreement(kept, n_boot=0)
        pooled = table[table["condition"] == "all"]
        if len(pooled):
            add(
                "- Agreement (Krippendorff's alpha, all conditions pooled): "
                + "; ".join(
                    f"{row['criterion']} {row['estimate']:.2f}"
                    if row["estimate"] == row["estimate"]
                    else f"{row['criterion']} undefined"
                    for _, row in pooled.iterrows()
                )
                + "."
            )


def write_statement(
    study: Study,
    output: str | Path,
    *,
    judgments_path: str | Path | None = None,
    participants_path: str | Path | None = None,
    min_median_time_s: float | None = None,
) -> str:
    """Read the data files, write the statement atomically, return its text."""
    from storyeval.io import write_text_atomic

    judgments = read_judgments(judgments_path) if judgments_path is not None else None
    participants = None
    if participants_path is not None:
        participants = [
            json.loads(line)
            for line in Path(participants_path).read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    text = design_statement(
        study, judgments=judgments, participants=participants, min_median_time_s=min_median_time_s
    )
    write_text_atomic(output, text)
    return text
