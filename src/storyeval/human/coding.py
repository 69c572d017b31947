"""Coding raters' explanations with a codebook (Clark 2021, section 6.3 and Appendix C.3).

The thesis' authors sampled one explanation from each of 50 raters per setting, two of them
labelled each comment with the codebook of Table C.1 (a comment may get several labels), and
Table 6.3 reports the share of labels in each category per training arm, the Null category
left out. Here:

* :data:`CLARK2021_CODEBOOK` is Table C.1 (categories Form, Content, Machine capabilities and
  Null; :func:`read_codebook` reads another from YAML);
* :func:`coding_sheet` samples the explanations to code from a study's ``responses.jsonl``
  (per study, up to ``per_study`` raters, one explanation each) as a sheet with an empty
  ``coder`` and ``labels`` column per row, for each coder to fill in;
* :func:`read_codings` reads the filled sheets (``labels`` separated by ``;``), checking every
  label against the codebook, with file and line for each problem;
* :func:`coding_agreement` gives, per label, the coders' agreement on whether it applies
  (Krippendorff's alpha, nominal; Cohen's kappa for two coders; raw agreement);
* :func:`label_shares` gives Table 6.3: per study (arm) and category, the labels given and
  their share of the counted (non-Null) labels, and the same per label.

Examples
--------
>>> [c.label for c in CLARK2021_CODEBOOK if c.category == "Content"]
['Repetition', 'Factuality', 'Consistency', 'Common sense', 'Coherence']
>>> codings = pd.DataFrame({"comment_id": ["c1", "c1", "c2", "c2"], "study": ["none"] * 4,
...     "coder": ["a", "b", "a", "b"],
...     "labels": [("Grammar",), ("Grammar", "Repetition"), ("Factuality",), ("Factuality",)]})
>>> label_shares(codings).query("level == 'category'")[["study", "name", "labels", "share"]].to_dict("records")
[{'study': 'none', 'name': 'Form', 'labels': 2, 'share': 40.0}, {'study': 'none', 'name': 'Content', 'labels': 3, 'share': 60.0}, {'study': 'none', 'name': 'Machine capabilities', 'labels': 0, 'share': 0.0}]
"""

from __future__ import annotations

import csv
import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from storyeval.base.errors import DataFileError, DataProblem, DegenerateInputWarning


@dataclass(frozen=True)
class CodeLabel:
    """One label of a codebook: its category, name, description and an example."""

    category: str
    label: str
    description: str
    example: str = ""
    counted: bool = True  # False for the Null category, left out of the shares


CLARK2021_CODEBOOK: tuple[CodeLabel, ...] = (
    CodeLabel(
        "Form",
        "Grammar",
        "The spelling and grammar of the text, punctuation/formatting issues",
        "I would make the text more grammatical by adding more punctuation where necessary.",
    ),
    CodeLabel(
        "Form",
        "Level of detail",
        "Is the text simple or does it go more in-depth?",
        "i would include more examples and explanations of the statements.",
    ),
    CodeLabel(
        "Form",
        "Genre",
        "If the text is the genre/domain/style/formality that the reader expects, adheres to "
        "style norms",
        "written exactly the way a human will tell a story",
    ),
    CodeLabel(
        "Content",
        "Repetition",
        "Words/phrases/content repeated itself",
        "Repeating 'or some would say' seemed very unnatural.",
    ),
    CodeLabel(
        "Content",
        "Factuality",
        "The accuracy of the text, whether it describes things that are 'true.'",
        "The article lists many facts that make the information seem like it was "
        "machine-generated.",
    ),
    CodeLabel(
        "Content",
        "Consistency",
        "How the text relates to the context and other pieces of the text",
        "The subject of the article follows the headline well without repeating it exactly",
    ),
    CodeLabel(
        "Content",
        "Common sense",
        "Whether the text 'makes sense' within the world that it is written",
        "You can't bake on top of the stove but to bake in the oven.",
    ),
    CodeLabel(
        "Content",
        "Coherence",
        "The structure and coherence of the text. Order issues go here.",
        "More cohesion between sentences. Feel loosely related, but wording is strange.",
    ),
    CodeLabel(
        "Machine capabilities",
        "Writer intent and expression",
        "Speculating about writer's intent or capabilities (e.g., ability to express emotions)",
        "It is very inclusive and humans worry about being inclusive not machines.",
    ),
    CodeLabel("Null", "Miscellaneous", "Everything else", counted=False),
    CodeLabel(
        "Null",
        "Null/Vague",
        "No reasons given, or too vague to be considered a real reason",
        "i selected this rating because it is definitely written by human",
        counted=False,
    ),
)
"""Table C.1 of Clark (2021): the annotation labels of evaluators' explanations."""


def read_codebook(path: str | Path) -> tuple[CodeLabel, ...]:
    """A codebook from YAML: a list of ``{category, label, description, example, counted}``
    (``counted: false`` marks labels left out of the shares, like Table C.1's Null)."""
    from pydantic import Field

    from storyeval.base.yamlfile import StrictModel, YamlFileError, read_yaml, validate

    class _Label(StrictModel):
        category: str = Field(min_length=1)
        label: str = Field(min_length=1)
        description: str = ""
        example: str = ""
        counted: bool = True

    class _Codebook(StrictModel):
        labels: list[_Label] = Field(min_length=1)

    document = read_yaml(path, what="a codebook")
    book = validate(document, _Codebook.model_validate, error=YamlFileError)
    names = [item.label for item in book.labels]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: every label must be unique; got {names}")
    return tuple(CodeLabel(**item.model_dump()) for item in book.labels)


def coding_sheet(
    responses: Sequence[dict[str, Any]],
    *,
    per_study: int = 50,
    seed: int = 0,
    question: str = "explanation",
) -> pd.DataFrame:
    """Explanations to code: per study, up to ``per_study`` raters drawn at random, one of
    each one's explanations drawn at random (Appendix C.3), in a random order so coders do not
    see the arms in blocks. Columns: comment_id, study, rater_id, item_id, text, coder,
    labels."""
    if per_study < 1:
        raise ValueError(f"per_study must be at least 1; got {per_study}")
    rng = random.Random(seed)
    usable = [
        r
        for r in responses
        if r.get("question") == question and r.get("scope", "item") == "item" and r.get("text")
    ]
    rows = []
    for study in sorted({str(r.get("study")) for r in usable}):
        mine = [r for r in usable if str(r.get("study")) == study]
        raters = sorted({str(r["rater_id"]) for r in mine})
        for rater in sorted(rng.sample(raters, min(per_study, len(raters)))):
            own = [r for r in mine if str(r["rater_id"]) == rater]
            chosen = own[rng.randrange(len(own))]
            rows.append(
                {
                    "study": study,
                    "rater_id": rater,
                    "item_id": str(chosen.get("item_id") or ""),
                    "text": str(chosen["text"]),
                }
            )
    rng.shuffle(rows)
    for number, row in enumerate(rows, start=1):
        row["comment_id"] = f"c{number:04d}"
    columns = ["comment_id", "study", "rater_id", "item_id", "text", "coder", "labels"]
    return pd.DataFrame(rows, columns=columns).fillna("")


def read_responses(path: str | Path) -> list[dict[str, Any]]:
    """The records of a study's ``responses.jsonl`` (``storyeval study export``)."""
    from storyeval.corpus import iter_raw_records

    problems: list[DataProblem] = []
    records = []
    for number, record in iter_raw_records(path, fmt="jsonl"):
        if isinstance(record, DataProblem):
            problems.append(record)
        elif "text" not in record or "rater_id" not in record:
            problems.append(DataProblem(str(path), number, "not a response record"))
        else:
            records.append(dict(record))
    if problems:
        raise DataFileError(problems)
    return records


def read_codings(
    paths: Sequence[str | Path], codebook: Sequence[CodeLabel] = CLARK2021_CODEBOOK
) -> pd.DataFrame:
    """The filled coding sheets (CSV with comment_id, study, coder and labels; labels
    separated by ``;``, matched to the codebook ignoring case). One row per comment and
    coder; a comment a coder left without labels is an error, as is a label not in the
    codebook or a comment coded twice by one coder."""
    known = {c.label.casefold(): c.label for c in codebook}
    problems: list[DataProblem] = []
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], str] = {}
    for path in paths:
        with open(path, encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            missing = {"comment_id", "coder", "labels"} - set(reader.fieldnames or [])
            if missing:
                problems.append(DataProblem(str(path), 1, f"missing column(s) {sorted(missing)}"))
                continue
            for line, record in enumerate(reader, start=2):
                row = _coding_row(record, known, f"{path}:{line}", seen)
                if isinstance(row, str):
                    problems.append(DataProblem(str(path), line, row))
                else:
                    rows.append(row)
    if problems:
        raise DataFileError(problems)
    if not rows:
        raise ValueError("the coding sheets hold no coded comment")
    return pd.DataFrame(rows, columns=["comment_id", "study", "coder", "labels"])


def _coding_row(
    record: dict[str, str], known: dict[str, str], where: str, seen: dict[tuple[str, str], str]
) -> dict[str, Any] | str:
    comment, coder = (record.get("comment_id") or "").strip(), (record.get("coder") or "").strip()
    if not comment or not coder:
        return "comment_id and coder are required"
    given = [part.strip() for part in (record.get("labels") or "").split(";") if part.strip()]
    if not given:
        return f"comment {comment}: no label (give at least one; the codebook has Null labels)"
    unknown = [g for g in given if g.casefold() not in known]
    if unknown:
        return f"comment {comment}: unknown label(s) {unknown}; the codebook has {sorted(known.values())}"
    key = (comment, coder)
    if key in seen:
        return f"comment {comment} coded twice by {coder} (first at {seen[key]})"
    seen[key] = where
    labels = tuple(dict.fromkeys(known[g.casefold()] for g in given))
    return {
        "comment_id": comment,
        "study": (record.get("study") or "").strip(),
        "coder": coder,
        "labels": labels,
    }


def coding_agreement(
    codings: pd.DataFrame, codebook: Sequence[CodeLabel] = CLARK2021_CODEBOOK
) -> pd.DataFrame:
    """Per label: how far coders agree on whether it applies to a comment, over the comments
    coded by at least two coders: Krippendorff's alpha (nominal), Cohen's kappa (exactly two
    coders) and the raw share of agreeing pairs."""
    from sklearn.metrics import cohen_kappa_score

    from storyeval.human.tables import krippendorff_alpha

    shared = codings.groupby("comment_id")["coder"].transform("nunique") >= 2
    both = codings[shared]
    coders = sorted(both["coder"].unique())
    rows = []
    for label in codebook:
        present = both.assign(value=both["labels"].map(lambda ls, x=label.label: float(x in ls)))
        frame = present.rename(columns={"comment_id": "item_id", "coder": "rater_id"})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateInputWarning)
            alpha, n_items, _ = krippendorff_alpha(frame, level="nominal")
        wide = frame.pivot_table(index="item_id", columns="rater_id", values="value")
        kappa = raw = float("nan")
        if len(coders) == 2 and not wide.dropna().empty:
            pair = wide.dropna()
            raw = float((pair[coders[0]] == pair[coders[1]]).mean())
            with warnings.catch_warnings():  # one class only: kappa is undefined (NaN)
                warnings.simplefilter("ignore")
                kappa = float(cohen_kappa_score(pair[coders[0]], pair[coders[1]]))
        rows.append(
            {
                "category": label.category,
                "label": label.label,
                "comments": n_items,
                "applied": int(present["value"].sum()),
                "alpha": alpha,
                "cohen_kappa": kappa,
                "agreement": raw,
            }
        )
    return pd.DataFrame(rows)


def label_shares(
    codings: pd.DataFrame, codebook: Sequence[CodeLabel] = CLARK2021_CODEBOOK
) -> pd.DataFrame:
    """Table 6.3: per study (training arm), the labels given in each category and label (by
    every coder) and their percentage of the counted labels (the Null category, not counted,
    is listed with a share of NaN)."""
    category_of = {c.label: c.category for c in codebook}
    counted = {c.label for c in codebook if c.counted}
    categories = list(dict.fromkeys(c.category for c in codebook))
    rows = []
    for study, part in codings.groupby("study", sort=False):
        given = [label for labels in part["labels"] for label in labels]
        total = sum(1 for g in given if g in counted)
        for category in categories:
            members = [c for c in codebook if c.category == category]
            n = sum(1 for g in given if category_of[g] == category)
            rows.append(
                _share_row(
                    study, "category", category, category, n, total, all(c.counted for c in members)
                )
            )
        for label in codebook:
            n = given.count(label.label)
            rows.append(
                _share_row(study, "label", label.category, label.label, n, total, label.counted)
            )
    table = pd.DataFrame(rows)
    shown = table["level"].eq("label") | table["share"].notna()
    return table[shown].reset_index(drop=True)


def _share_row(
    study: str, level: str, category: str, name: str, n: int, total: int, counted: bool
) -> dict[str, Any]:
    share = 100.0 * n / total if counted and total else (0.0 if counted else float("nan"))
    return {
        "study": study,
        "level": level,
        "category": category,
        "name": name,
        "labels": n,
        "share": share,
        "counted_labels": total,
    }
