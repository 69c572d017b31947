"""Analysis of collaborative-writing sessions (Clark 2021, chapter 4, §4.2.2 and Tables 4.1-4.3).

(Q1) Is one model better at generating story suggestions than the other?
    :func:`preferences`: the share of suggestion pairs in which writers chose each generator,
    overall and per round, with an exact two-sided binomial test against 0.5 and a
    Clopper-Pearson interval (Table 4.1); the same for the position on screen, which checks
    that the random order worked.
(Q2) How useful are the suggestions?
    :func:`edits`: Levenshtein edit distance (characters), Jaccard similarity of word sets and
    USER (Akoury et al. 2020) between the chosen suggestion and the text the writer kept, per
    generator, overall and per round, with a two-sided Mann-Whitney U test between the two
    generators (Table 4.2, Tables A.1-A.2).
(Q3) How does the generated text compare to human-authored text?
    :func:`text_stats`: mean sentence length, concreteness of nouns and verbs (Brysbaert et al.
    2014) and distinct-1/2/3 of each generator's suggestions and of the writers' own turns
    (Table 4.3).
Writer feedback
    :func:`likert_summary` (mean, median, sd and the count of every point per statement, as
    in Fig. A.2) and :func:`open_answers`.

The metrics come from :mod:`storyeval.metrics` (``levenshtein``, ``jaccard``, ``user``,
``sentence_length``, ``concreteness_noun``, ``concreteness_verb``, ``distinct1..3``); each row
carries the signature of the metric and of the aggregation. Every table is tidy: one row per
estimate with columns ``estimate, ci_low, ci_high, p_value, n, method``. Values are on their
natural scale (Jaccard and USER in [0, 1]; the thesis prints them x100).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storyeval.base.errors import StoryevalError
from storyeval.base.markdown import Document, fmt
from storyeval.base.signature import Signature
from storyeval.base.stats import binomial_test, mean_interval
from storyeval.collab.records import SessionRecord
from storyeval.corpus import Story

if TYPE_CHECKING:
    import pandas as pd

EDIT_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("edit_distance", "levenshtein", False),
    ("jaccard", "jaccard", True),
    ("user", "user", True),
)
"""(column, registered metric, higher_is_better) of the three edit metrics of Table 4.2."""

TEXT_METRICS: tuple[tuple[str, str], ...] = (
    ("sentence_length", "sentence_length"),
    ("concreteness_noun", "concreteness_noun"),
    ("concreteness_verb", "concreteness_verb"),
    ("distinct_1", "distinct1"),
    ("distinct_2", "distinct2"),
    ("distinct_3", "distinct3"),
)
"""(row name, registered metric) of the text statistics of Table 4.3."""

HUMAN = "human"
CONFIDENCE = 0.95


class AnalysisError(StoryevalError, ValueError):
    """The sessions cannot be analysed as asked (e.g. none is complete)."""


def _data_hash(sessions: Sequence[SessionRecord]) -> str:
    digest = hashlib.sha256()
    for record in sessions:
        digest.update(json.dumps(record.raw, sort_keys=True, ensure_ascii=False).encode())
    return digest.hexdigest()[:12]


def select_sessions(
    sessions: Sequence[SessionRecord], *, include_incomplete: bool = False
) -> list[SessionRecord]:
    """The sessions to analyse: complete ones, or every one with ``include_incomplete``
    (their submitted turns and any survey answers count)."""
    chosen = [s for s in sessions if include_incomplete or s.complete]
    if not chosen:
        raise AnalysisError(
            "no complete writing session to analyse"
            + ("" if include_incomplete else " (use include_incomplete to analyse unfinished ones)")
        )
    return chosen


def _generator_sets(sessions: Sequence[SessionRecord]) -> dict[str, tuple[str, ...]]:
    found: dict[str, tuple[str, ...]] = {}
    for record in sessions:
        previous = found.setdefault(record.session, record.generators)
        if sorted(previous) != sorted(record.generators):
            raise AnalysisError(
                f"session {record.session_id}: generators {list(record.generators)} differ from "
                f"{list(previous)} of other sessions of {record.session!r}"
            )
    return found


# ----------------------------------------------------------------------------- statistics


# ----------------------------------------------------------------------------- Q1 preferences


def suggestion_turns(sessions: Sequence[SessionRecord]) -> Any:
    """One row per submitted suggestion turn: session, session_id, participant, round,
    chosen generator and its position, the first generator chosen, switches, the chosen
    suggestion and the text kept."""
    import pandas as pd

    rows = []
    for record in sessions:
        for turn in record.suggestion_turns:
            by_name = {s.generator: s for s in turn.suggestions}
            rows.append(
                {
                    "session": record.session,
                    "kind": record.kind,
                    "session_id": record.session_id,
                    "participant": record.participant,
                    "round": turn.round,
                    "chosen": turn.chosen,
                    "chosen_position": by_name[turn.chosen].position,
                    "switches": turn.switches,
                    "suggestion": turn.chosen_text,
                    "kept": turn.text,
                    **{f"text:{s.generator}": s.text for s in turn.suggestions},
                }
            )
    columns = [
        "session",
        "kind",
        "session_id",
        "participant",
        "round",
        "chosen",
        "chosen_position",
        "switches",
        "suggestion",
        "kept",
    ]
    return pd.DataFrame(rows, columns=None if rows else columns)


def preferences(sessions: Sequence[SessionRecord], *, confidence: float = CONFIDENCE) -> Any:
    """Share of choices per generator (and per screen position), overall and per round.

    Parameters
    ----------
    sessions : sequence of SessionRecord
        CYOA sessions (MIL sessions, with a single generator, are left out).
    confidence : float
        Coverage of the Clopper-Pearson intervals.

    Returns
    -------
    pandas.DataFrame
        Columns ``session, factor, round, level, chosen, n, estimate, ci_low, ci_high,
        p_value, method, signature``: ``factor`` is ``generator`` or ``position``, ``round``
        is ``all`` or the round number, ``level`` the generator name or ``position 1/2``,
        ``chosen`` how many of the ``n`` suggestion pairs went to it, ``estimate`` the share.

    Notes
    -----
    The p-value is the exact two-sided binomial test of H0: each generator is chosen half of
    the time (Clark 2021, Table 4.1: writers chose GPT2 65.7% of 525 pairs, p < 0.01). Both
    rows of a round share it.

    Examples
    --------
    >>> from storyeval.collab.records import SessionRecord, Suggestion, SuggestionTurn
    >>> turns = tuple(SuggestionTurn(r, (Suggestion("a", 1, "x"), Suggestion("b", 2, "y")),
    ...               "a" if r < 5 else "b", "x") for r in range(1, 6))
    >>> record = SessionRecord("s/1", "cyoa", "s", "p1", "complete", ("a", "b"), (), turns, (), ())
    >>> table = preferences([record])
    >>> row = table[(table.factor == "generator") & (table["round"] == "all") & (table.level == "a")]
    >>> int(row.chosen.iloc[0]), int(row.n.iloc[0]), float(row.estimate.iloc[0]), float(row.p_value.iloc[0])
    (4, 5, 0.8, 0.375)
    """
    import pandas as pd

    cyoa = [s for s in sessions if s.kind == "cyoa"]
    generator_sets = _generator_sets(cyoa)
    method = (
        "share of suggestion pairs; exact two-sided binomial test (H0: p = 0.5); "
        f"Clopper-Pearson {confidence:.0%} interval"
    )
    signature = Signature(
        "cyoa_preference",
        {
            "test": "binomial-exact-two-sided",
            "ci": "clopper-pearson",
            "confidence": confidence,
            "sessions": len(cyoa),
            "data": _data_hash(cyoa),
        },
    ).render()
    rows = []
    for name, generators in generator_sets.items():
        turns = [
            (
                turn.round,
                turn.chosen,
                next(s.position for s in turn.suggestions if s.generator == turn.chosen),
            )
            for record in cyoa
            if record.session == name
            for turn in record.suggestion_turns
        ]
        rounds: list[Any] = ["all", *sorted({r for r, _, _ in turns})]
        for factor, levels in (
            ("generator", list(generators)),
            ("position", [1, 2]),
        ):
            for round_number in rounds:
                subset = [t for t in turns if round_number == "all" or t[0] == round_number]
                n = len(subset)
                if n == 0:
                    continue
                for level in levels:
                    k = sum(
                        1
                        for _, chosen, position in subset
                        if (chosen if factor == "generator" else position) == level
                    )
                    p_value, low, high = binomial_test(k, n, confidence=confidence)
                    rows.append(
                        {
                            "session": name,
                            "factor": factor,
                            "round": str(round_number),
                            "level": str(level) if factor == "generator" else f"position {level}",
                            "chosen": k,
                            "n": n,
                            "estimate": k / n,
                            "ci_low": low,
                            "ci_high": high,
                            "p_value": p_value,
                            "method": method,
                            "signature": signature,
                        }
                    )
    columns = [
        "session",
        "factor",
        "round",
        "level",
        "chosen",
        "n",
        "estimate",
        "ci_low",
        "ci_high",
        "p_value",
        "method",
        "signature",
    ]
    return pd.DataFrame(rows, columns=columns)


# ----------------------------------------------------------------------------- Q2 edits


def _score(
    stories: list[Story], metrics: Sequence[str], context: Any
) -> tuple[dict[tuple[str, str], float], dict[str, str]]:
    """Per-item values ``{(item_id, metric): value}`` and each metric's signature."""
    from storyeval.metrics import score_stories

    if not stories:
        return {}, {}
    run = score_stories(stories, list(metrics), bootstrap=0, missing="error", context=context)
    values = {(s.item_id, s.metric): float(s.value) for s in run.scores}
    signatures = {name: m.signature.render() for name, m in run.metrics.items()}
    return values, signatures


def edit_scores(sessions: Sequence[SessionRecord], *, context: Any = None) -> Any:
    """The three edit metrics for every submitted suggestion turn.

    Returns
    -------
    pandas.DataFrame
        Columns ``session, session_id, participant, round, generator, suggestion, kept,
        edit_distance, jaccard, user, switches`` plus ``signature:<metric>`` columns. The
        suggestion is the text of the generator finally chosen; ``kept`` is the text the
        writer added to the story. ``edit_distance`` counts characters (Levenshtein),
        ``jaccard`` compares lower-cased word sets, ``user`` is the USER F1 of word tokens.
    """
    import pandas as pd

    items = []
    stories = []
    for record in sessions:
        for turn in record.suggestion_turns:
            item_id = f"{record.session_id}#r{turn.round}"
            items.append((item_id, record, turn))
            stories.append(
                Story(
                    item_id,
                    "",
                    turn.text,
                    system=turn.chosen,
                    extra={"original": turn.chosen_text},
                )
            )
    values, signatures = _score(stories, [m for _, m, _ in EDIT_METRICS], context)
    rows = []
    for item_id, record, turn in items:
        row = {
            "session": record.session,
            "session_id": record.session_id,
            "participant": record.participant,
            "round": turn.round,
            "generator": turn.chosen,
            "suggestion": turn.chosen_text,
            "kept": turn.text,
            "switches": turn.switches,
        }
        for column, metric, _ in EDIT_METRICS:
            row[column] = values[(item_id, metric)]
        rows.append(row)
    frame = pd.DataFrame(rows)
    for _column, metric, _ in EDIT_METRICS:
        frame[f"signature:{metric}"] = signatures.get(metric, "")
    return frame


def _group_rows(
    part: Any, generators: Sequence[str], column: str, common: dict[str, Any], confidence: float
) -> list[dict[str, Any]]:
    """The mean, sd and t interval of the per-turn values, overall and per generator."""
    groups: list[tuple[str, Any]] = [("overall", part)]
    groups += [(g, part[part["generator"] == g]) for g in generators]
    rows = []
    for group, values in groups:
        data = values[column].astype(float).tolist()
        mean, sd, low, high = mean_interval(data, confidence=confidence)
        rows.append(
            {
                **common,
                "group": group,
                "estimate": mean,
                "sd": sd,
                "ci_low": low,
                "ci_high": high,
                "statistic": math.nan,
                "p_value": math.nan,
                "n": int(sum(1 for v in data if not math.isnan(v))),
                "method": f"mean of per-turn values; sd (n-1); t {confidence:.0%} interval",
            }
        )
    return rows


def _test_row(
    part: Any, generators: Sequence[str], column: str, common: dict[str, Any]
) -> dict[str, Any]:
    """The two-sided Mann-Whitney U test between the two generators' turns (estimate: the
    probability that a turn of the first scores higher, ties counting half)."""
    from scipy.stats import mannwhitneyu

    a, b = (
        [v for v in part[part["generator"] == g][column].astype(float) if not math.isnan(v)]
        for g in generators
    )
    if a and b:
        test = mannwhitneyu(a, b, alternative="two-sided")
        statistic, p_value = float(test.statistic), float(test.pvalue)
        effect = statistic / (len(a) * len(b))
    else:
        statistic = p_value = effect = math.nan
    return {
        **common,
        "group": f"{generators[0]} vs {generators[1]}",
        "estimate": effect,
        "sd": math.nan,
        "ci_low": math.nan,
        "ci_high": math.nan,
        "statistic": statistic,
        "p_value": p_value,
        "n": len(a) + len(b),
        "method": "Mann-Whitney U test, two-sided (scipy auto: exact without ties for small samples)",
    }


def edits(
    sessions: Sequence[SessionRecord],
    *,
    confidence: float = CONFIDENCE,
    context: Any = None,
    scores: Any = None,
) -> Any:
    """Edit distance, Jaccard similarity and USER per generator, overall and per round, with
    a two-sided Mann-Whitney U test between the generators of a CYOA session.

    Parameters
    ----------
    scores : pandas.DataFrame, optional
        The output of :func:`edit_scores` (computed here when not given).

    Returns
    -------
    pandas.DataFrame
        Columns ``session, metric, round, group, estimate, sd, ci_low, ci_high, statistic,
        p_value, n, higher_is_better, method, signature``. ``group`` is ``overall``, a
        generator name (rows with the mean, sd and t interval of the per-turn values), or
        ``A vs B`` (the test row: ``statistic`` is U of A, ``estimate`` U / (n_A n_B), the
        probability that a turn of A scores higher than one of B, ties counting half).

    Notes
    -----
    Clark (2021) Table 4.2: FUSION 37.61 / 51.13 / 60.69 vs GPT2 29.49 / 61.35 / 71.77 (ED, JS x100,
    USER x100), all three differences significant (Mann-Whitney U, p < 0.01).
    """
    import pandas as pd

    frame = scores if scores is not None else edit_scores(sessions, context=context)
    generator_sets = _generator_sets(sessions)
    rows = []
    for name, generators in generator_sets.items():
        subset = frame[frame["session"] == name] if len(frame) else frame
        if len(subset) == 0:
            continue
        rounds: list[Any] = ["all", *sorted(subset["round"].unique().tolist())]
        for column, metric, higher in EDIT_METRICS:
            metric_signature = str(subset[f"signature:{metric}"].iloc[0])
            for round_number in rounds:
                part = subset if round_number == "all" else subset[subset["round"] == round_number]
                common = {
                    "session": name,
                    "metric": column,
                    "round": str(round_number),
                    "higher_is_better": higher,
                    "signature": metric_signature,
                }
                rows += _group_rows(part, generators, column, common, confidence)
                if len(generators) == 2:
                    rows.append(_test_row(part, generators, column, common))
    columns = [
        "session",
        "metric",
        "round",
        "group",
        "estimate",
        "sd",
        "ci_low",
        "ci_high",
        "statistic",
        "p_value",
        "n",
        "higher_is_better",
        "method",
        "signature",
    ]
    return pd.DataFrame(rows, columns=columns)


# ----------------------------------------------------------------------------- Q3 text stats


def text_stats(
    sessions: Sequence[SessionRecord], *, confidence: float = CONFIDENCE, context: Any = None
) -> Any:
    """Sentence length, noun and verb concreteness and distinct-1/2/3 of each generator's
    suggestions (every suggestion offered, chosen or not) and of the writers' own turns.

    Returns
    -------
    pandas.DataFrame
        Columns ``session, statistic, group, estimate, sd, ci_low, ci_high, n, n_undefined,
        method, signature``: ``group`` is a generator name or ``human``; ``estimate`` is the
        mean over texts of the per-text value (as See et al. 2019 average per story);
        ``n_undefined`` counts texts without a value (e.g. no rated noun).

    Notes
    -----
    Clark (2021) Table 4.3 (FUSION / GPT2 / HUMAN): sentence length 13.70 / 10.31 / 18.86,
    concrete nouns 4.04 / 4.35 / 4.17, verbs 2.90 / 3.10 / 3.12, distinct-1 0.75 / 0.53 /
    0.72, distinct-2 0.97 / 0.70 / 0.95, distinct-3 1.00 / 0.76 / 0.99.
    """
    import pandas as pd

    generator_sets = _generator_sets(sessions)
    stories: list[Story] = []
    owners: dict[str, tuple[str, str]] = {}
    for record in sessions:
        for turn in record.writer_turns:
            item_id = f"{record.session_id}#w{turn.round}"
            stories.append(Story(item_id, "", turn.text, system=HUMAN))
            owners[item_id] = (record.session, HUMAN)
        for s_turn in record.suggestion_turns:
            for suggestion in s_turn.suggestions:
                item_id = f"{record.session_id}#r{s_turn.round}:{suggestion.generator}"
                stories.append(Story(item_id, "", suggestion.text, system=suggestion.generator))
                owners[item_id] = (record.session, suggestion.generator)
    values, signatures = _score(stories, [m for _, m in TEXT_METRICS], context)
    method = f"mean over texts of the per-text value; sd (n-1); t {confidence:.0%} interval"
    rows = []
    for name, generators in generator_sets.items():
        for statistic, metric in TEXT_METRICS:
            for group in [*generators, HUMAN]:
                data = [
                    values[(item_id, metric)]
                    for item_id, owner in owners.items()
                    if owner == (name, group)
                ]
                defined = [v for v in data if not math.isnan(v)]
                mean, sd, low, high = mean_interval(defined, confidence=confidence)
                rows.append(
                    {
                        "session": name,
                        "statistic": statistic,
                        "group": group,
                        "estimate": mean,
                        "sd": sd,
                        "ci_low": low,
                        "ci_high": high,
                        "n": len(defined),
                        "n_undefined": len(data) - len(defined),
                        "method": method,
                        "signature": signatures.get(metric, ""),
                    }
                )
    columns = [
        "session",
        "statistic",
        "group",
        "estimate",
        "sd",
        "ci_low",
        "ci_high",
        "n",
        "n_undefined",
        "method",
        "signature",
    ]
    return pd.DataFrame(rows, columns=columns)


# ----------------------------------------------------------------------------- feedback


def likert_summary(sessions: Sequence[SessionRecord], *, confidence: float = CONFIDENCE) -> Any:
    """Per statement: n, mean (with a t interval), sd, median, and how many writers chose
    each point (the distribution plotted in Clark (2021) Fig. A.2).

    Returns
    -------
    pandas.DataFrame
        Columns ``session, statement, text, scale, n, estimate, sd, ci_low, ci_high, median,
        share_agree, count_1 .. count_<scale>, method``; ``share_agree`` is the share above
        the scale's midpoint ("Agree" or "Strongly Agree" on 5 points).
    """
    import numpy as np
    import pandas as pd

    groups: dict[tuple[str, str], list[Any]] = {}
    for record in sessions:
        for answer in record.likert:
            groups.setdefault((record.session, answer.name), []).append(answer)
    rows = []
    largest = max((a[0].scale for a in groups.values()), default=5)
    for (name, statement), answers in groups.items():
        scale = answers[0].scale
        values = [a.value for a in answers]
        mean, sd, low, high = mean_interval([float(v) for v in values], confidence=confidence)
        row: dict[str, Any] = {
            "session": name,
            "statement": statement,
            "text": answers[0].statement,
            "scale": scale,
            "n": len(values),
            "estimate": mean,
            "sd": sd,
            "ci_low": low,
            "ci_high": high,
            "median": float(np.median(values)),
            "share_agree": sum(1 for v in values if v > (scale + 1) / 2) / len(values),
        }
        for point in range(1, largest + 1):
            row[f"count_{point}"] = (
                sum(1 for v in values if v == point) if point <= scale else math.nan
            )
        row["method"] = f"mean with t {confidence:.0%} interval; median; counts per point"
        rows.append(row)
    return pd.DataFrame(rows)


def open_answers(sessions: Sequence[SessionRecord]) -> Any:
    """Every non-empty answer to the open questions, one row each."""
    import pandas as pd

    rows = [
        {
            "session": record.session,
            "session_id": record.session_id,
            "participant": record.participant,
            "question": answer.name,
            "text": answer.question,
            "answer": answer.answer,
        }
        for record in sessions
        for answer in record.answers
        if answer.answer.strip()
    ]
    return pd.DataFrame(
        rows, columns=["session", "session_id", "participant", "question", "text", "answer"]
    )


# ----------------------------------------------------------------------------- everything


@dataclass
class WritingAnalysis:
    """Every table of :func:`analyse_sessions`."""

    preferences: Any
    edits: Any
    edit_items: Any
    text_stats: Any
    likert: Any
    answers: Any
    turns: Any
    sessions: int
    signature: str


def analyse_sessions(
    sessions: Sequence[SessionRecord],
    *,
    include_incomplete: bool = False,
    confidence: float = CONFIDENCE,
) -> WritingAnalysis:
    """Run every analysis on the sessions (complete ones unless ``include_incomplete``)."""
    from storyeval.metrics.context import ScoringContext

    chosen = select_sessions(sessions, include_incomplete=include_incomplete)
    context = ScoringContext()
    items = edit_scores(chosen, context=context)
    return WritingAnalysis(
        preferences=preferences(chosen, confidence=confidence),
        edits=edits(chosen, confidence=confidence, scores=items),
        edit_items=items,
        text_stats=text_stats(chosen, confidence=confidence, context=context),
        likert=likert_summary(chosen, confidence=confidence),
        answers=open_answers(chosen),
        turns=suggestion_turns(chosen),
        sessions=len(chosen),
        signature=Signature(
            "cyoa_analyse",
            {
                "sessions": len(chosen),
                "include_incomplete": include_incomplete,
                "confidence": confidence,
                "data": _data_hash(chosen),
            },
        ).render(),
    )


OUTPUT_FILES = {
    "preferences": "preferences.csv",
    "edits": "edits.csv",
    "text_stats": "text_stats.csv",
    "likert": "likert.csv",
    "answers": "open_answers.csv",
    "edit_items": "edit_items.csv",
}


def write_analysis(analysis: WritingAnalysis, directory: str | Path) -> list[Path]:
    """Write every table as CSV plus ``report.md`` into ``directory`` (atomically, as a
    whole); returns the files written."""
    from storyeval.base.io import atomic_directory

    target = Path(directory)
    written = []
    with atomic_directory(target, "writing-session analysis") as tmp:
        for attribute, filename in OUTPUT_FILES.items():
            getattr(analysis, attribute).to_csv(tmp / filename, index=False)
            written.append(target / filename)
        (tmp / "report.md").write_text(report_markdown(analysis), encoding="utf-8")
        written.append(target / "report.md")
    return written


def _fmt(value: Any, digits: int = 2) -> str:
    return fmt(value, digits)


def _p(value: float) -> str:
    if math.isnan(value):
        return fmt(value)
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def _row(label: str, cells: Sequence[str]) -> str:
    return f"| {label} | " + " | ".join(cells) + " |"


def _header(first: str, columns: Sequence[str]) -> list[str]:
    return [_row(first, columns).replace("|  |", "| |"), "|---|" + "---|" * len(columns)]


def _preference_sections(doc: Document, prefs: pd.DataFrame) -> None:
    for name in prefs["session"].unique() if len(prefs) else []:
        part = prefs[(prefs["session"] == name) & (prefs["factor"] == "generator")]
        rounds = list(dict.fromkeys(part["round"]))
        doc.heading(2, f"{name}: share of chosen suggestions (Table 4.1)")
        rows = _header("generator", ["total" if r == "all" else f"#{r}" for r in rounds])
        for level in dict.fromkeys(part["level"]):
            shares = [
                part[(part["level"] == level) & (part["round"] == r)]["estimate"].iloc[0]
                for r in rounds
            ]
            rows.append(_row(str(level), [f"{100 * share:.0f}%" for share in shares]))
        doc.lines(rows)
        total = part[part["round"] == "all"].iloc[0]
        doc.paragraph(
            f"{int(total['n'])} suggestion pairs; binomial test p = {_p(float(total['p_value']))}."
        )


def _edit_sections(doc: Document, edit_table: pd.DataFrame) -> None:
    for name in edit_table["session"].unique() if len(edit_table) else []:
        part = edit_table[(edit_table["session"] == name) & (edit_table["round"] == "all")]
        groups = [g for g in dict.fromkeys(part["group"]) if " vs " not in g]
        tests = part[part["group"].str.contains(" vs ")]
        doc.heading(2, f"{name}: edits between the chosen suggestion and the kept text (Table 4.2)")
        rows = _header("", ["edit distance (lower = more kept)", "Jaccard", "USER"])
        for group in groups:
            cells = [
                _fmt(
                    float(
                        part[(part["group"] == group) & (part["metric"] == m)]["estimate"].iloc[0]
                    ),
                    2 if m == "edit_distance" else 3,
                )
                for m, _, _ in EDIT_METRICS
            ]
            rows.append(_row(group, cells))
        if len(tests):
            cells = [
                _p(float(tests[tests["metric"] == m]["p_value"].iloc[0]))
                for m, _, _ in EDIT_METRICS
            ]
            rows.append(_row("Mann-Whitney U p", cells))
        doc.lines(rows)


def _text_sections(doc: Document, stats: pd.DataFrame) -> None:
    for name in stats["session"].unique() if len(stats) else []:
        part = stats[stats["session"] == name]
        groups = list(dict.fromkeys(part["group"]))
        doc.heading(2, f"{name}: generated vs human-written text (Table 4.3)")
        rows = _header("", groups)
        for statistic, _ in TEXT_METRICS:
            chosen = part[part["statistic"] == statistic]
            cells = [_fmt(float(chosen[chosen["group"] == g]["estimate"].iloc[0])) for g in groups]
            rows.append(_row(statistic, cells))
        doc.lines(rows)


def _likert_section(doc: Document, likert: pd.DataFrame) -> None:
    if not len(likert):
        return
    doc.heading(2, "Likert statements")
    rows = _header("statement", ["n", "mean", "median", "agree"])
    for _, row in likert.iterrows():
        cells = [
            str(int(row["n"])),
            _fmt(float(row["estimate"])),
            _fmt(float(row["median"]), 1),
            f"{100 * float(row['share_agree']):.0f}%",
        ]
        rows.append(_row(str(row["text"]), cells))
    doc.lines(rows)


def report_markdown(analysis: WritingAnalysis) -> str:
    """A Markdown summary laid out like Clark's (2021) Tables 4.1-4.3, with the signatures."""
    doc = Document()
    doc.heading(1, "Collaborative-writing analysis")
    doc.paragraph(f"{analysis.sessions} session(s). Signature: `{analysis.signature}`")
    _preference_sections(doc, analysis.preferences)
    _edit_sections(doc, analysis.edits)
    _text_sections(doc, analysis.text_stats)
    _likert_section(doc, analysis.likert)
    doc.paragraph("Files: " + ", ".join(f"`{f}`" for f in OUTPUT_FILES.values()) + ".")
    return doc.render()
