"""The analysis of a slogan-writing study (Clark 2021, section 2.6.5), per condition (solo vs
machine in the loop):

* ``survey``: the writers' seven-point answers about each final slogan (creative, catchy,
  relevant, satisfied) and the final survey (enjoyment; suggestion questions for MIL
  writers), mean, sd and t interval per condition, with a Mann-Whitney U test and Welch's t
  test between the conditions (the thesis reports satisfaction 5.22 vs 4.07, p < 0.01);
* ``pulls``: how often MIL writers pulled suggestions (per slogan, share of slogans with a
  pull) and how much of a suggestion survived into the final slogan (share of the final
  slogan's words taken from the closest suggestion and not from the writer's own keywords
  and drafts; share of that suggestion's words kept); "would you use it again" counts;
* ``ratings``: third-party ratings of the final slogans (any judgment file whose ``item_id``
  is a slogan id of :func:`slogan_stories`, e.g. from a Likert study over them), per
  condition and criterion, with the same tests;
* ``self_vs_others``: how well writers judge their own slogans: Pearson's r (as the thesis
  reports; Spearman's rho on request) between a writer's seven-point answer about a slogan (creative, catchy, ...) and the third-party mean
  rating of the same slogan, per question and criterion, with a bootstrap interval
  (section 2.6.2 compares the two).

Examples
--------
>>> records = [
...     {"format": "storyeval-slogan-session", "participant": "p1", "condition": "mil",
...      "status": "complete", "session": "s", "tasks": [{"task": 1, "prompt": {"id": "her",
...      "text": "Her"}, "final": "Love speaks.", "pulls": [{"suggestions": ["Love speaks."]}],
...      "survival": {"new_words": 0.5, "kept": 1.0}, "survey": {"likert": [{"name":
...      "satisfied", "value": 6}]}}], "final_survey": None}]
>>> [s.story for s in slogan_stories(records)]
['Love speaks.']
>>> analyse_slogan_sessions(records).pulls[["condition", "pulls_per_slogan", "new_words"]].to_dict("records")
[{'condition': 'mil', 'pulls_per_slogan': 1.0, 'new_words': 0.5}]
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.corpus import Judgment, Story

FORMAT = "storyeval-slogan-session"
CONDITIONS = ("solo", "mil")


def read_slogan_sessions(path: str | Path) -> list[dict[str, Any]]:
    """The records of a slogan sessions file (``storyeval cyoa export`` or the admin page).

    Raises
    ------
    DataFileError
        For a line that is not a slogan-session record, with its line number.
    """
    problems: list[DataProblem] = []
    records = []
    text = Path(path).read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(DataProblem(str(path), number, f"malformed JSON: {exc.msg}"))
            continue
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            problems.append(DataProblem(str(path), number, f"not a {FORMAT} record"))
            continue
        records.append(record)
    if problems:
        raise DataFileError(problems)
    if not records:
        raise DataFileError([DataProblem(str(path), 1, "the file holds no slogan session")])
    return records


def _completed_tasks(records: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], Any]]:
    return [(r, t) for r in records for t in r.get("tasks", []) if t.get("final")]


def slogan_id(record: Mapping[str, Any], task: Mapping[str, Any]) -> str:
    """The id of a final slogan in the story file for third-party rating."""
    return f"{record['session']}-{record['participant']}-{task['task']}"


def slogan_stories(records: Sequence[Mapping[str, Any]]) -> list[Story]:
    """The final slogans as story records, ``system`` = the condition, ``prompt_id`` = the
    prompt's id, ready for a Likert study (third-party ratings, section 2.6.2)."""
    return [
        Story(
            id=slogan_id(record, task),
            story=task["final"],
            prompt=str((task.get("prompt") or {}).get("text") or ""),
            system=str(record["condition"]),
            extra={"prompt_id": str((task.get("prompt") or {}).get("id") or "")},
        )
        for record, task in _completed_tasks(records)
    ]


def compare_conditions(frame: pd.DataFrame, key: str, confidence: float) -> pd.DataFrame:
    """Per ``key`` and condition (``frame`` has ``key``, ``condition`` and ``value``): n, mean,
    sd and t interval, and tests between the conditions: Mann-Whitney U, Welch's t test and
    the independent two-sample (Student's) t test that Clark (2021) reports."""
    from scipy.stats import mannwhitneyu, ttest_ind

    from storyeval.base.stats import mean_interval

    rows = []
    for name, group in frame.groupby(key, sort=True):
        samples = {
            c: group.loc[group["condition"] == c, "value"].to_numpy(float) for c in CONDITIONS
        }
        p_u = p_t = p_student = float("nan")
        if all(len(v) >= 2 for v in samples.values()):
            with warnings.catch_warnings():  # constant groups: scipy warns, the p value says it
                warnings.simplefilter("ignore", RuntimeWarning)
                p_u = float(mannwhitneyu(samples["solo"], samples["mil"]).pvalue)
                p_t = float(ttest_ind(samples["solo"], samples["mil"], equal_var=False).pvalue)
                p_student = float(ttest_ind(samples["solo"], samples["mil"]).pvalue)
        for condition in CONDITIONS:
            values = samples[condition]
            if not len(values):
                continue
            mean, sd, low, high = mean_interval(values, confidence=confidence)
            rows.append(
                {
                    key: name,
                    "condition": condition,
                    "n": len(values),
                    "mean": mean,
                    "sd": sd,
                    "ci_low": low,
                    "ci_high": high,
                    "mannwhitney_p": p_u,
                    "welch_p": p_t,
                    "student_p": p_student,
                }
            )
    columns = [
        key,
        *("condition", "n", "mean", "sd", "ci_low", "ci_high"),
        *("mannwhitney_p", "welch_p", "student_p"),
    ]
    return pd.DataFrame(rows, columns=columns)


def answer_rows(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Every seven-point answer of the writers: ``item_id`` (the slogan; empty for the final
    survey, which is about the writing), ``question``, ``survey`` (``slogan`` or ``final``),
    ``condition`` and ``value``."""
    rows = [
        (slogan_id(record, task), answer["name"], "slogan", record["condition"], answer["value"])
        for record, task in _completed_tasks(records)
        for answer in (task.get("survey") or {}).get("likert", [])
    ]
    rows += [
        ("", answer["name"], "final", record["condition"], answer["value"])
        for record in records
        for answer in (record.get("final_survey") or {}).get("likert", [])
    ]
    columns = ["item_id", "question", "survey", "condition", "value"]
    return pd.DataFrame(rows, columns=columns).astype({"value": float})


def _pull_rows(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    from storyeval.generate.slogans import first_word_diversity

    rows = []
    for condition in CONDITIONS:
        tasks = [t for r, t in _completed_tasks(records) if r["condition"] == condition]
        if not tasks:
            continue
        pulls = [len(t.get("pulls", [])) for t in tasks]
        survived = [t["survival"] for t in tasks if t.get("pulls") and t.get("survival")]
        again = [
            (r.get("final_survey") or {}).get("use_again")
            for r in records
            if r["condition"] == condition and r.get("final_survey")
        ]
        counts = {c: again.count(c) for c in sorted({a for a in again if a})}
        variety = first_word_diversity([p for t in tasks for p in t.get("pulls", [])])
        rows.append(
            {
                "condition": condition,
                "slogans": len(tasks),
                "pulls": sum(pulls),
                "pulls_per_slogan": sum(pulls) / len(tasks),
                "share_with_pull": sum(1 for p in pulls if p) / len(tasks),
                "new_words": _mean([s["new_words"] for s in survived]),
                "kept": _mean([s["kept"] for s in survived]),
                "use_again": json.dumps(counts) if counts else "",
                "suggestions": variety["suggestions"],
                "distinct_first_words": variety["distinct_first_words"],
            }
        )
    columns = [
        "condition",
        "slogans",
        "pulls",
        "pulls_per_slogan",
        "share_with_pull",
        "new_words",
        "kept",
        "use_again",
        "suggestions",
        "distinct_first_words",
    ]
    return pd.DataFrame(rows, columns=columns)


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


@dataclass(frozen=True)
class SloganAnalysis:
    """The tables of :func:`analyse_slogan_sessions`."""

    survey: pd.DataFrame
    pulls: pd.DataFrame
    ratings: pd.DataFrame
    writers: pd.DataFrame
    self_vs_others: pd.DataFrame = field(default_factory=pd.DataFrame)


def analyse_slogan_sessions(
    records: Sequence[Mapping[str, Any]],
    *,
    ratings: Sequence[Judgment] = (),
    include_incomplete: bool = False,
    confidence: float = 0.95,
    agreement_method: str = "pearson",
) -> SloganAnalysis:
    """Survey means per condition, pulls and suggestion survival, and third-party ratings of
    the final slogans (see the module docstring)."""
    used = [r for r in records if include_incomplete or r.get("status") == "complete"]
    writers = _writers(used)
    survey = answer_rows(used)
    survey_table = compare_conditions(
        survey.assign(question=survey["survey"] + ":" + survey["question"]), "question", confidence
    )
    condition_of = {slogan_id(r, t): r["condition"] for r, t in _completed_tasks(used)}
    rated = pd.DataFrame(
        [
            {"criterion": j.criterion, "condition": condition_of[j.item_id], "value": j.value}
            for j in ratings
            if j.item_id in condition_of
        ],
        columns=["criterion", "condition", "value"],
    )
    ratings_table = compare_conditions(rated, "criterion", confidence)
    agreement = self_vs_others(
        own_answers(answer_rows(used)), ratings, method=agreement_method, confidence=confidence
    )
    return SloganAnalysis(survey_table, _pull_rows(used), ratings_table, writers, agreement)


def _writers(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Writers per condition, and per level of writing experience where it was asked (Clark's
    thesis, Table 2.3: none, some, a lot)."""
    from storyeval.collab.config import EXPERIENCE_CHOICES

    rows = []
    for condition in CONDITIONS:
        mine = [r for r in records if r["condition"] == condition]
        row: dict[str, Any] = {"condition": condition, "writers": len(mine)}
        levels = [(r.get("final_survey") or {}).get("experience") for r in mine]
        for level, _ in EXPERIENCE_CHOICES:
            row[f"experience: {level}"] = levels.count(level)
        row["experience: not asked"] = sum(1 for v in levels if v is None)
        rows.append(row)
    return pd.DataFrame(rows)


def own_answers(answers: pd.DataFrame) -> pd.DataFrame:
    """The answers about a piece (item_id, question, own), for :func:`self_vs_others`."""
    about = answers[answers["item_id"] != ""]
    return about[["item_id", "question"]].assign(own=about["value"])


def self_vs_others(
    own: pd.DataFrame,
    ratings: Sequence[Judgment],
    *,
    method: str = "pearson",
    confidence: float = 0.95,
) -> pd.DataFrame:
    """How well writers judge their own pieces: the correlation (Pearson's r, as Clark 2021
    reports, or Spearman's rho) between a writer's answer about a piece (``own``: item_id,
    question, own) and the mean third-party rating of it, per question and criterion, with a
    bootstrap interval."""
    from storyeval.base.validation import check_choice
    from storyeval.meta.correlation import level_correlation

    check_choice(method, ("pearson", "spearman"), "method")
    others = pd.DataFrame(
        [(j.item_id, j.criterion, float(j.value)) for j in ratings],
        columns=["item_id", "criterion", "value"],
    )
    columns = ["question", "criterion", "method", "estimate", "ci_low", "ci_high", "p_value", "n"]
    if own.empty or others.empty:
        return pd.DataFrame(columns=columns)
    means = others.groupby(["item_id", "criterion"], as_index=False)["value"].mean()
    rows = []
    for (question, criterion), part in own.merge(means, on="item_id").groupby(
        ["question", "criterion"]
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = level_correlation(
                part["own"], part["value"], method=method, n_boot=1000, confidence=confidence
            )
        rows.append({"question": question, "criterion": criterion, "method": method, **result})
    return pd.DataFrame(rows, columns=columns) if rows else pd.DataFrame(columns=columns)


def slogan_report(result: SloganAnalysis) -> str:
    """The analysis as Markdown."""
    from storyeval.base.markdown import Document

    doc = Document()
    doc.heading(1, "Slogan writing: solo vs machine in the loop")
    doc.frame(result.writers)
    doc.heading(2, "Writers' surveys (seven-point)")
    doc.frame(result.survey, digits=3)
    doc.heading(2, "Suggestions pulled and kept")
    doc.paragraph(
        "new_words: share of the final slogan's words taken from the closest suggestion and "
        "not from the writer's own keywords and drafts; kept: share of that suggestion's words "
        "in the final slogan."
    )
    doc.frame(result.pulls)
    doc.heading(2, "Third-party ratings of the final slogans")
    if result.ratings.empty:
        doc.paragraph(
            "No ratings given: rate the slogans (`storyeval slogan-study stories`, then a "
            "Likert study) and pass the judgments with `--ratings`."
        )
    else:
        doc.frame(result.ratings)
        doc.heading(2, "Writers' own ratings against the third-party ratings")
        doc.paragraph(
            "The correlation (Pearson's r unless the method column says otherwise) between a "
            "writer's answer about their slogan and the mean third-party rating of it, with a "
            "bootstrap interval."
        )
        doc.frame(result.self_vs_others, digits=3)
    return doc.render()


def write_slogan_analysis(result: SloganAnalysis, output: str | Path) -> list[Path]:
    """Write survey.csv, pulls.csv, ratings.csv, writers.csv, self_vs_others.csv and
    report.md into ``output``."""
    from storyeval.base.io import claim_output_directory, write_table, write_text_atomic

    folder = claim_output_directory(output, "slogan-study analysis")
    written = [
        write_table(folder / "survey.csv", result.survey),
        write_table(folder / "pulls.csv", result.pulls),
        write_table(folder / "ratings.csv", result.ratings),
        write_table(folder / "writers.csv", result.writers),
        write_table(folder / "self_vs_others.csv", result.self_vs_others),
    ]
    write_text_atomic(folder / "report.md", slogan_report(result))
    return [*written, folder / "report.md"]
