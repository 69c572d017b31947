"""Human evaluation design statements, generated from the study file and the collected data.

The statement covers what Schoch et al. (Schoch et al. 2020: "human evaluation design statements") ask
to report (question types, scales and exact wording; presentation order and questions per
annotator; criteria definitions; annotators' background, recruitment and compensation), laid
out after the Human Evaluation Datasheet (HEDS: evaluated outputs, evaluators, experimental
design, quality criteria, ethics), and ends with the reporting checklist of Karpinska et al.
(Karpinska et al. 2021, appendix A). Everything that can be derived is derived (wording, scales, labels,
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
from storyeval.base.errors import StoryevalError
from storyeval.base.markdown import Document
from storyeval.base.markdown import cell as _cell
from storyeval.corpus import Judgment, read_judgments
from storyeval.human.model import Study
from storyeval.human.protocols import get_protocol
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
"""The questions of the reporting survey of Karpinska et al. (2021) (appendix A)."""


class StatementError(StoryevalError, ValueError):
    """The data does not belong to this version of the study."""


_ORDER_TEXT = {
    "balanced": (
        "balanced: within a participant's batch the conditions follow a row of a Williams Latin square chosen by "
        "the participant's number (each condition equally often in each position and after each other condition "
        "across participants); items within a condition in random order"
    ),
    "random": "random: each participant's batch is shuffled independently",
    "fixed": "fixed: the order of the story file",
}


def check_data_version(study: Study, judgments: Sequence[Judgment]) -> list[str]:
    """Verify that the judgments were collected with this version of the study.

    Returns notes for the statement; raises :class:`StatementError` on a mismatch. Judgments
    exported by storyeval 0.1 carry the version 0.1 gave the same file, which is accepted.
    """
    notes = []
    names = {j.study for j in judgments if j.study is not None}
    if names and names != {study.name}:
        raise StatementError(
            f"the judgments belong to study {', '.join(sorted(names))}, not to {study.name!r}"
        )
    versions = {j.extra.get("study_version") for j in judgments}
    versions.discard(None)
    accepted = {study.version, study.legacy_version} - {None}
    if versions and not versions <= accepted:
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
    quality = study.config.quality
    threshold = quality.min_median_time_s if min_median_time_s is None else min_median_time_s
    drop_failed = (
        quality.exclude_failed_checks if exclude_failed_checks is None else exclude_failed_checks
    )
    notes = check_data_version(study, judgments) if judgments is not None else []
    answered: dict[str, bool] = {}
    doc = Document()
    _title(doc, study, judgments, notes)
    _outputs(doc, study, answered)
    _task(doc, study, answered)
    _presentation(doc, study, answered)
    _training(doc, study)
    _quality(doc, study, judgments, participants, threshold, drop_failed, answered)
    _evaluators(doc, study, answered)
    _checklist(doc, answered)
    return doc.render()


def _title(
    doc: Document, study: Study, judgments: Sequence[Judgment] | None, notes: list[str]
) -> None:
    doc.heading(1, f"Human evaluation design statement: {study.config.title}")
    source = f"`{study.path}`" if study.path is not None else "a study definition"
    data_text = (
        f" and {len(judgments)} collected judgments"
        if judgments is not None
        else " (no data collected yet)"
    )
    doc.paragraph(
        f"Generated by storyeval {__version__} from {source} (study `{study.name}`, version "
        f"`{study.version}`){data_text}. Items marked **TODO** are not in the study file; add "
        "them under `reporting:` and regenerate."
    )
    for note in notes:
        doc.paragraph(f"*Note: {note}*")


def _outputs(doc: Document, study: Study, answered: dict[str, bool]) -> None:
    doc.heading(2, "1. Evaluated outputs")
    per_condition: dict[str, int] = {}
    for item in study.items:
        per_condition[item.condition] = per_condition.get(item.condition, 0) + 1
    lengths: dict[str, list[int]] = {}
    seen: set[str] = set()
    for item in study.items:
        for text in item.texts:
            if text.id not in seen:
                seen.add(text.id)
                lengths.setdefault(str(text.system), []).append(count_words(text.story))
    systems = sorted({str(t.system) for item in study.items for t in item.texts})
    has_human = any(s == "human" for s in systems) or study.protocol == "side_by_side"
    beside = " (as references beside the model stories)" if study.protocol == "side_by_side" else ""
    doc.bullets(
        [
            f"Story file: `{study.stories_path.name}` (sha256 `{study.stories_sha256[:16]}`).",
            f"Items (pages of the task): **{len(study.items)}**; protocol `{study.protocol}`.",
            "Items per condition: "
            + ", ".join(f"`{c}` {n}" for c, n in per_condition.items())
            + ".",
            "Length of the rated texts (words, mean and range): "
            + "; ".join(
                f"`{system}` {statistics.mean(v):.1f} ({min(v)}-{max(v)}, n = {len(v)})"
                for system, v in sorted(lengths.items())
            )
            + ".",
            "Selection: " + _selection_rule(study) + ".",
            "Systems shown: " + ", ".join(f"`{s}`" for s in systems) + ".",
            "Human-written texts (ground truth) included: "
            + ("yes" if has_human else "no")
            + beside
            + ".",
        ]
    )
    answered.update(length=True, items=True, systems=True, ground_truth=True)


def _selection_rule(study: Study) -> str:
    sel = study.config.select
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
    return "; ".join(rule) if rule else "every story of the file"


def _task(doc: Document, study: Study, answered: dict[str, bool]) -> None:
    config = study.config
    doc.heading(2, "2. Task and question design")
    part = get_protocol(study.protocol).describe(study)
    _lines_with_blanks(doc, part.lines)
    answered["task"] = True
    answered.update(part.answered)
    doc.paragraph("Instructions shown before the task:")
    doc.quote(config.instructions)
    answered["instructions"] = bool(config.instructions.strip())
    if config.comprehension is not None:
        comp = config.comprehension
        doc.paragraph(
            f"Comprehension check after consent ({comp.attempts} attempt(s); participants who "
            "fail every attempt are screened out"
            + (
                f" with code `{config.platform.screen_out_code}`"
                if config.platform.screen_out_code
                else ""
            )
            + " and their data is kept apart):"
        )
        doc.lines(
            f'{i}. "{q.question}" ({", ".join(q.options)}; correct: {q.options[q.answer - 1]})'
            for i, q in enumerate(comp.questions, start=1)
        )
    if config.questions:
        doc.paragraph(
            "Free-text questions at the end: "
            + "; ".join(
                f'"{q.question}" ({"required" if q.required else "optional"})'
                for q in config.questions
            )
            + "."
        )
    else:
        doc.paragraph("Free-text questions at the end: none.")
    if config.content_warning:
        doc.paragraph("Content warning shown before consent:")
        doc.quote(config.content_warning)
    else:
        doc.paragraph("Content warning: none.")


def _lines_with_blanks(doc: Document, lines: Sequence[str]) -> None:
    """A protocol's lines, where an empty line separates blocks."""
    block: list[str] = []
    for line in [*lines, ""]:
        if line:
            block.append(line)
        elif block:
            doc.lines(block)
            block = []


def _raters_text(study: Study) -> str:
    adaptive = study.config.assignment.adaptive
    if adaptive is None:
        return f"Planned raters per item: {study.raters_per_item}."
    criteria = ", ".join(adaptive.criteria) if adaptive.criteria else "every criterion"
    return (
        f"Raters per item: adaptive, {adaptive.min_raters} to {study.raters_per_item}; after "
        f"{adaptive.min_raters} judgments each item, the next rater went to the item whose "
        f"mean judgment had the widest {adaptive.confidence:.0%} interval ({criteria}), and an "
        f"item stopped once its interval was narrower than {adaptive.target_width:g} "
        f"(within-item variance shrunk toward the pooled variance with the weight of "
        f"{adaptive.prior_weight:g} judgments); every routing decision is exported."
    )


def _presentation(doc: Document, study: Study, answered: dict[str, bool]) -> None:
    config = study.config
    protocol = get_protocol(study.protocol)
    a = config.assignment
    per_person = study.items_per_participant
    cap = study.max_items_per_participant
    items: list[str] = [f"Order of items: {_ORDER_TEXT[a.order]} (seed {a.seed})."]
    items += protocol.presentation(study)
    if protocol.groups_by_prompt:
        items.append("A participant never gets two items continuing the same prompt.")
    items += [
        f"Prompt shown: {'yes' if config.show_prompt else 'no'}; system names shown: no.",
        f"Items per participant: {per_person} per batch"
        + (f", up to {cap} in total (a cap)" if cap > per_person else " (no further batches)")
        + ".",
        _raters_text(study),
        "Interface: storyeval study server (server-rendered web pages, no JavaScript); the server "
        "records the time from the delivery of each page to its submission and the gap between "
        "consecutive submissions; each participant's order of pages is exported.",
    ]
    if config.platform.name != "none":
        items.append(
            f"Recruitment platform: {config.platform.name}; the platform's identifiers "
            f"({', '.join(config.platform.parameters)}) are stored with each participant."
        )
    doc.heading(2, "3. Presentation")
    doc.bullets(items)
    answered["raters"] = True


def _training(doc: Document, study: Study) -> None:
    doc.heading(2, "4. Training")
    if not study.training:
        doc.paragraph("No training examples.")
        return
    doc.paragraph(
        f"{len(study.training)} training example(s) before the task, each answered like a real "
        "item and followed by the correct answer and an explanation (the Examples training of "
        "Clark et al., 2021):"
    )
    lines = []
    for i, example in enumerate(study.training, start=1):
        answer = (
            example.answer
            if example.answers is None
            else ", ".join(f"{k} {v}" for k, v in example.answers.items())
        )
        ids = ", ".join(f"`{t.id}`" for t in example.texts)
        lines.append(
            f'{i}. texts {ids}; answer: {answer}. Explanation: "{_cell(example.explanation)}"'
        )
    doc.lines(lines)


def _quality(
    doc: Document,
    study: Study,
    judgments: Sequence[Judgment] | None,
    participants: Sequence[dict[str, Any]] | None,
    threshold: float,
    drop_failed: bool,
    answered: dict[str, bool],
) -> None:
    report = study.config.reporting
    doc.heading(2, "5. Quality control and exclusions")
    items: list[str] = []
    if study.checks:
        checks = [
            f"Attention checks: {len(study.checks)} per participant, inserted in the first batch:"
        ]
        for check in study.checks:
            expect = "; ".join(f"{k} in {list(v)}" for k, v in check.expect.items())
            where = (
                f"position {check.position}"
                if check.position
                else "a random position (never first)"
            )
            checks.append(f"  - `{check.id}` at {where}; accepted answers: {expect}.")
        items.append("\n".join(checks))
    else:
        items.append("Attention checks: none.")
    failed_rule = (
        "raters failing any attention check are excluded; " if drop_failed and study.checks else ""
    )
    time_rule = (
        f"raters whose median time per item is below {threshold:g} s are excluded (Karpinska et al., 2021)."
        if threshold
        else "no time-based exclusion."
    )
    items.append(f"Exclusion rules: {failed_rule}{time_rule}")
    items.append(_typing_line(study))
    if report.qualifications:
        items.append(f"Qualifications required: {report.qualifications}")
    doc.bullets(items)
    answered["quality"] = bool(study.checks) or bool(threshold) or bool(report.qualifications)
    if judgments:
        _exclusions(doc, study, judgments, participants, threshold, drop_failed)


def _typing_line(study: Study) -> str:
    """What the study recorded of how its free-text answers were produced."""
    from storyeval.human.protocols import get_protocol

    protocol = get_protocol(study.protocol)
    free_text = bool(study.config.questions) or protocol.wants_follow_up(study.config)
    if not free_text:
        return "Free-text answers: none asked."
    if not study.config.quality.record_typing:
        return "How free-text answers were produced: not recorded."
    return (
        "How free-text answers were produced: for each answer the page recorded the number of "
        "keys typed and deleted, of pastes and drops and the characters they brought, of times "
        "the page lost focus during writing, and the composition time (never a keystroke's or "
        "a paste's content); answers at least half pasted, or that arrived without typing or "
        "faster than a person types, were flagged for reading, not excluded."
    )


def _exclusions(
    doc: Document,
    study: Study,
    judgments: Sequence[Judgment],
    participants: Sequence[dict[str, Any]] | None,
    threshold: float,
    drop_failed: bool,
) -> None:
    from storyeval.human.tables import filter_raters, judgments_table

    frame = judgments_table(judgments)
    kept, steps, raters = filter_raters(
        frame, min_median_time_s=threshold, exclude_failed_checks=drop_failed
    )
    doc.table(
        [
            "exclusion step",
            "rule",
            "raters removed",
            "judgments removed",
            "raters left",
            "judgments left",
        ],
        [
            [
                row["step"],
                row["threshold"],
                f"{row['raters_removed']} of {row['raters_before']}",
                f"{row['judgments_removed']} of {row['judgments_before']}",
                row["raters_after"],
                row["judgments_after"],
            ]
            for _, row in steps.iterrows()
        ],
        digits=1,
    )
    times = raters["median_time_s"].dropna()
    if len(times):
        doc.paragraph(
            f"Median time per item over raters: median {times.median():.1f} s "
            f"(range {times.min():.1f}-{times.max():.1f} s), measured by the server."
        )
    _collected(doc, study, kept, participants)


def _collected(
    doc: Document, study: Study, kept: Any, participants: Sequence[dict[str, Any]] | None
) -> None:
    doc.heading(3, "Collected data (after exclusions)")
    if kept.empty:
        doc.bullets(["No judgments are left after the exclusions above."])
        return
    pages = kept.groupby(["rater_id", "page"]).size().reset_index().groupby("rater_id").size()
    per_item = kept.groupby("item_id")["rater_id"].nunique()
    items = [
        f"Raters contributing judgments: {kept['rater_id'].nunique()}; items judged per rater: "
        f"min {pages.min()}, median {pages.median():g}, max {pages.max()}.",
        f"Raters per rated text: min {per_item.min()}, median {per_item.median():g}, max "
        f"{per_item.max()} (planned {study.raters_per_item}).",
    ]
    if participants:
        started = sum(1 for p in participants if p.get("started_at"))
        finished = sum(1 for p in participants if p.get("finished_at"))
        screened = sum(1 for p in participants if p.get("status") == "screened_out")
        line = f"Participant links: {len(participants)}; started: {started}; finished: {finished}."
        if screened:
            line += f" Screened out by the comprehension check: {screened}."
        items.append(line)
    if "submitted_at" in kept:
        stamps = sorted(str(s) for s in kept["submitted_at"].dropna())
        if stamps:
            items.append(f"Collected from {stamps[0]} to {stamps[-1]} (UTC).")
    agreement = _pooled_agreement(kept)
    if agreement:
        items.append(agreement)
    doc.bullets(items)


def _pooled_agreement(kept: Any) -> str:
    from storyeval.human.analysis import agreement

    table = agreement(kept, n_boot=0)
    pooled = table[table["condition"] == "all"]
    if not len(pooled):
        return ""
    return (
        "Agreement (Krippendorff's alpha, all conditions pooled): "
        + "; ".join(
            f"{row['criterion']} {row['estimate']:.2f}"
            if row["estimate"] == row["estimate"]
            else f"{row['criterion']} undefined"
            for _, row in pooled.iterrows()
        )
        + "."
    )


def _evaluators(doc: Document, study: Study, answered: dict[str, bool]) -> None:
    report = study.config.reporting
    consent = report.consent or "participants confirmed a consent statement before starting"
    items = [
        f"Recruitment: {report.recruitment or TODO}",
        f"Compensation: {report.compensation or TODO}",
        f"Platform: {report.platform or (study.config.platform.name if study.config.platform.name != 'none' else TODO)}",
        f"Who the evaluators are (expertise, background): {report.evaluators or TODO}",
        f"Demographics: {report.demographics or TODO}",
        f"Qualifications: {report.qualifications or TODO}",
        f"Consent: {consent}",
        f"Ethics review: {report.ethics or TODO}",
    ]
    if report.notes:
        items.append(f"Notes: {report.notes}")
    doc.heading(2, "6. Evaluators")
    doc.bullets(items)
    answered["compensation"] = bool(report.compensation)


def _checklist(doc: Document, answered: dict[str, bool]) -> None:
    doc.heading(2, "Reporting checklist")
    doc.paragraph(
        "The questions of the survey of Karpinska et al. (2021, appendix A), answered by this "
        "statement:"
    )
    doc.table(
        ["item", "reported"],
        [[question, "yes" if answered.get(key) else "TODO"] for question, key in SURVEY_ITEMS],
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
    from storyeval.base.io import write_text_atomic

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
