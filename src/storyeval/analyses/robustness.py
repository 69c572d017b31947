"""Robustness of metrics (OpenMEVA, Guan et al. 2021): invariance and discrimination tests.

For a set of stories and metrics, :func:`robustness` perturbs every story with each test,
scores the originals and the perturbed copies with the metrics, and returns two tidy tables:

* **invariance** (quality-preserving changes: synonyms, contractions, punctuation, typos): per
  metric and test, the mean change (perturbed - original), the mean absolute change, and the
  share of stories whose score moved by more than ``tolerance`` standard deviations of the
  metric over the original stories (with a Clopper-Pearson interval). A robust metric has a
  small share.
* **discrimination** (errors: UNION's four techniques and OpenMEVA's causal/temporal
  reordering, antonym and entity swaps, repeated plots): per metric and test, the share of
  pairs where the metric prefers the original, with its interval and one-sided sign test
  (:func:`storyeval.meta.discrimination.discrimination`).

:func:`write_robustness` writes both tables, a heatmap and a Markdown summary.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from storyeval.base.errors import StoryevalError
from storyeval.base.signature import Signature
from storyeval.base.stats import binomial_test
from storyeval.corpus import Story

#: Columns of the invariance table.
INVARIANCE_COLUMNS = (
    "metric",
    "test",
    "n_pairs",
    "mean_change",
    "mean_abs_change",
    "sd_original",
    "tolerance",
    "changed_share",
    "ci_low",
    "ci_high",
)


SIGNATURE_FILE = "robustness.json"


@dataclass
class RobustnessResult:
    """What :func:`robustness` found.

    Attributes
    ----------
    invariance, discrimination : DataFrame
        The two tables (see the module docstring); ``discrimination`` has one row per metric
        and test (``group``), plus ``(all)``.
    perturbed : list of dict
        The perturbed stories (``storyeval perturb`` records).
    skipped : dict
        Perturbed ids a test could not make, and why.
    signature : Signature
        Tests, seed, tolerance, the perturbation signature and the metrics' signatures.
    """

    invariance: pd.DataFrame
    discrimination: pd.DataFrame
    perturbed: list[dict[str, Any]]
    skipped: dict[str, str]
    signature: Signature
    metric_signatures: dict[str, str] = field(default_factory=dict)


def invariance_table(
    scores: pd.DataFrame,
    pairs: pd.DataFrame,
    *,
    tolerance: float = 0.1,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """How much quality-preserving changes move each metric.

    Parameters
    ----------
    scores : DataFrame
        ``item_id``, ``metric``, ``value`` for the originals and the changed copies.
    pairs : DataFrame
        ``original_id``, ``altered_id``, ``test``.
    tolerance : float
        A change larger than ``tolerance`` standard deviations of the metric over the original
        stories counts as "changed" (scales differ between metrics; 0.1 sd by default).
    confidence : float
        Of the Clopper-Pearson interval of the changed share.

    Returns
    -------
    DataFrame
        One row per metric and test; columns :data:`INVARIANCE_COLUMNS`.
    """
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0; got {tolerance}")
    values = scores.pivot_table(index="item_id", columns="metric", values="value", aggfunc="first")
    rows = []
    originals = pairs["original_id"].unique()
    for metric in values.columns:
        column = values[metric]
        base = column.reindex(originals).dropna()
        sd = float(base.std(ddof=1)) if len(base) > 1 else math.nan
        for test, group in pairs.groupby("test", sort=False):
            before = column.reindex(group["original_id"]).to_numpy(dtype=float)
            after = column.reindex(group["altered_id"]).to_numpy(dtype=float)
            keep = np.isfinite(before) & np.isfinite(after)
            change = after[keep] - before[keep]
            limit = tolerance * sd if math.isfinite(sd) else math.nan
            changed = int((np.abs(change) > limit).sum()) if math.isfinite(limit) else 0
            n = int(keep.sum())
            low, high = (
                binomial_test(changed, n, confidence=confidence)[1:] if n else (math.nan,) * 2
            )
            rows.append(
                {
                    "metric": metric,
                    "test": test,
                    "n_pairs": n,
                    "mean_change": float(change.mean()) if n else math.nan,
                    "mean_abs_change": float(np.abs(change).mean()) if n else math.nan,
                    "sd_original": sd,
                    "tolerance": limit,
                    "changed_share": changed / n if n and math.isfinite(limit) else math.nan,
                    "ci_low": low,
                    "ci_high": high,
                }
            )
    return pd.DataFrame(rows, columns=list(INVARIANCE_COLUMNS))


def _pairs(records: Sequence[dict[str, Any]], suites: Mapping[str, str]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "original_id": r["source_id"],
                "altered_id": r["id"],
                "test": r["techniques"][0],
                "suite": suites[r["techniques"][0]],
            }
            for r in records
        ],
        columns=["original_id", "altered_id", "test", "suite"],
    )


def _chosen_tests(
    invariance: Sequence[str] | None, discrimination: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """The invariance and discrimination techniques (defaults: the ``invariance`` suite;
    UNION's four and the ``discrimination`` suite)."""
    from storyeval.perturb import technique_names
    from storyeval.perturb.base import parse_techniques

    if invariance is None:
        invariance = technique_names("invariance")
    if discrimination is None:
        discrimination = technique_names("union") + technique_names("discrimination")
    chosen = (
        list(parse_techniques(invariance)) if invariance else [],
        list(parse_techniques(discrimination)) if discrimination else [],
    )
    if not chosen[0] and not chosen[1]:
        raise ValueError("give at least one invariance or discrimination test")
    return chosen


def _tables(
    frame: pd.DataFrame, pairs: pd.DataFrame, tolerance: float, confidence: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The invariance table and the discrimination table of the scored pairs."""
    from storyeval.meta.discrimination import discrimination as discriminate

    inv_pairs = pairs[pairs["suite"] == "invariance"]
    disc_pairs = pairs[pairs["suite"] == "discrimination"].rename(columns={"test": "techniques"})
    invariance_result = (
        invariance_table(frame, inv_pairs, tolerance=tolerance, confidence=confidence)
        if len(inv_pairs)
        else pd.DataFrame(columns=list(INVARIANCE_COLUMNS))
    )
    discrimination_result = (
        discriminate(frame, disc_pairs, by="techniques", confidence=confidence)
        if len(disc_pairs)
        else pd.DataFrame()
    )
    return invariance_result, discrimination_result


def _changed_stories(stories: Sequence[Story], perturbed: Sequence[Any]) -> list[Story]:
    """The changed copies as stories of the system ``perturbed``, with their source's
    reference and prompt id."""
    by_id = {story.id: story for story in stories}
    return [
        Story(
            p.id,
            p.prompt,
            p.story,
            reference=by_id[p.source_id].reference,
            system="perturbed",
            extra={"prompt_id": by_id[p.source_id].extra.get("prompt_id", p.source_id)},
        )
        for p in perturbed
    ]


def robustness(
    stories: Sequence[Story],
    metrics: str | Sequence[str],
    *,
    invariance: Sequence[str] | None = None,
    discrimination: Sequence[str] | None = None,
    seed: int = 0,
    tolerance: float = 0.1,
    confidence: float = 0.95,
    typo_rate: float = 0.05,
    paraphrase_model: str | None = None,
    paraphrase_similarity: float = 0.85,
    options: Mapping[str, Any] | None = None,
    nlp: Any = None,
    progress: bool = False,
    device: str = "cpu",
    precision: str = "float32",
) -> RobustnessResult:
    """Run invariance and discrimination tests of ``metrics`` on ``stories``.

    Parameters
    ----------
    stories : sequence of Story
        Good stories (human-written ones are the usual choice); references and prompts are
        carried over to the changed copies.
    metrics : str or sequence of str
        Registered metric names.
    invariance, discrimination : sequence of str, optional
        Technique names; defaults: the ``invariance`` suite, and UNION's four with the
        ``discrimination`` suite. An empty list skips that kind.
    seed : int
        Seed of the perturbations.
    tolerance : float
        See :func:`invariance_table`.
    typo_rate : float
        Typo probability per word of the ``typos`` test.
    paraphrase_model, paraphrase_similarity
        The LM of the ``paraphrase`` test (asked for by name: ``invariance=[..., "paraphrase"]``)
        and the cosine its rewrites need (see :mod:`storyeval.perturb.paraphrase`).
    options : mapping, optional
        Metric options, as for :func:`storyeval.metrics.score_stories`.
    nlp : spaCy Language, optional
    device, precision : str
        Where and how the metrics' models run (see :func:`storyeval.metrics.score_stories`).

    Raises
    ------
    StoryevalError
        When no test could change any story.
    """
    from storyeval.metrics import score_stories
    from storyeval.perturb import perturb_stories
    from storyeval.perturb.base import PerturbOptions

    invariance, discrimination = _chosen_tests(invariance, discrimination)
    tests = tuple(dict.fromkeys([*invariance, *discrimination]))
    if not stories:
        raise StoryevalError("there are no stories to test")
    if "paraphrase" in tests:
        from storyeval.perturb.paraphrase import paraphraser

        paraphraser(paraphrase_model).place(device)  # rewrites on the run's device too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # stories a test cannot change are reported in skipped
        run = perturb_stories(
            stories,
            tests,
            mode="each",
            seed=seed,
            skip_inapplicable=True,
            nlp=nlp,
            options=PerturbOptions(
                typo_rate=typo_rate,
                paraphrase_model=paraphrase_model,
                paraphrase_similarity=paraphrase_similarity,
            ),
        )
    if not run.stories:
        raise StoryevalError("no test could change any story")
    changed = _changed_stories(stories, run.stories)
    scored = score_stories(
        [*stories, *changed],
        metrics,
        options=options,
        bootstrap=0,
        progress=progress,
        device=device,
        precision=precision,
    )
    records = run.records()
    suites = {name: ("invariance" if name in invariance else "discrimination") for name in tests}
    invariance_result, discrimination_result = _tables(
        scored.frame(), _pairs(records, suites), tolerance, confidence
    )
    metric_signatures = {name: m.signature.render() for name, m in scored.metrics.items()}
    signature = Signature(
        "robustness",
        {
            "invariance": ",".join(invariance),
            "discrimination": ",".join(discrimination),
            "seed": seed,
            "tolerance": tolerance,
            "perturb": run.signature.render(),
        },
    )
    return RobustnessResult(
        invariance_result,
        discrimination_result,
        records,
        dict(run.skipped),
        signature,
        metric_signatures,
    )


def robustness_heatmap(result: RobustnessResult) -> bytes:
    """Two panels, metrics x tests: the discrimination accuracy (0.5 is chance) and the share
    of stories an invariance test moved beyond the tolerance (0 is robust)."""
    from storyeval.base.plots import figure as _figure
    from storyeval.base.plots import png as _png
    from storyeval.base.plots import short_label as _short

    panels = []
    if len(result.discrimination):
        table = result.discrimination[result.discrimination["group"] != "(all)"]
        panels.append(
            (
                "discrimination: original preferred",
                table.pivot(index="metric", columns="group", values="estimate"),
                "RdBu",
            )
        )
    if len(result.invariance):
        panels.append(
            (
                "invariance: share moved > tolerance",
                result.invariance.pivot(index="metric", columns="test", values="changed_share"),
                "Reds",
            )
        )
    width = sum(1.2 + 0.7 * matrix.shape[1] for _, matrix, _ in panels) + 1.5
    height = 1.2 + 0.45 * max(matrix.shape[0] for _, matrix, _ in panels)
    fig = _figure(width, height)
    fig.set_layout_engine("constrained")  # the second panel's labels clear the first
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (title, matrix, cmap) in zip(axes, panels, strict=True):
        _heatmap_panel(ax, matrix, cmap, _short)
        ax.set_title(title, fontsize=9)
    return _png(fig)


def _heatmap_panel(ax: Any, matrix: pd.DataFrame, cmap: str, short: Any) -> None:
    values = matrix.to_numpy(dtype=float)
    ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(matrix.shape[1]))
    ax.set_xticklabels([short(str(c)) for c in matrix.columns], rotation=40, ha="right", fontsize=8)
    ax.set_yticks(range(matrix.shape[0]))
    ax.set_yticklabels([short(str(r)) for r in matrix.index], fontsize=8)
    for (i, j), value in np.ndenumerate(values):
        finite = bool(np.isfinite(value))
        dark = finite and (value > 0.8 or (cmap == "RdBu" and value < 0.2))
        text = f"{value:.2f}" if finite else "n/a"
        ax.text(
            j, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black"
        )


def write_robustness(result: RobustnessResult, directory: str | Path) -> dict[str, Path]:
    """Write ``invariance.csv``, ``discrimination.csv``, ``perturbed.jsonl``,
    ``robustness.png``, ``robustness.md`` and ``robustness.json`` (the signatures) into
    ``directory`` (each atomically)."""
    import json

    from storyeval.base.io import (
        claim_output_directory,
        write_bytes_atomic,
        write_table,
        write_text_atomic,
    )

    folder = claim_output_directory(directory, "robustness report")
    written = {
        "invariance": write_table(folder / "invariance.csv", result.invariance),
        "discrimination": write_table(folder / "discrimination.csv", result.discrimination),
    }
    perturbed = folder / "perturbed.jsonl"
    write_text_atomic(perturbed, "".join(json.dumps(r) + "\n" for r in result.perturbed))
    written["perturbed"] = perturbed
    written["heatmap"] = folder / "robustness.png"
    write_bytes_atomic(written["heatmap"], robustness_heatmap(result))
    written["report"] = folder / "robustness.md"
    write_text_atomic(written["report"], robustness_markdown(result))
    written["signatures"] = folder / SIGNATURE_FILE
    signatures = {"signature": result.signature.to_dict(), "metrics": result.metric_signatures}
    write_text_atomic(written["signatures"], json.dumps(signatures, indent=2) + "\n")
    return written


def read_robustness(directory: str | Path) -> RobustnessResult:
    """The tables and signatures of a directory written by :func:`write_robustness` (for
    ``storyeval report --robustness DIR``); the perturbed stories are not read.

    Raises
    ------
    StoryevalError
        When the directory lacks the tables.
    """
    import json

    folder = Path(directory)
    tables = {}
    for name in ("invariance", "discrimination"):
        path = folder / f"{name}.csv"
        if not path.is_file():
            raise StoryevalError(
                f"{folder}: no {name}.csv; write one with `storyeval robustness STORIES "
                "--metrics M1,M2 -o DIR`"
            )
        tables[name] = pd.read_csv(path) if path.stat().st_size > 1 else pd.DataFrame()
    saved: dict[str, Any] = {}
    if (folder / SIGNATURE_FILE).is_file():
        saved = json.loads((folder / SIGNATURE_FILE).read_text(encoding="utf-8"))
    signature = (
        Signature.from_dict(saved["signature"])
        if "signature" in saved
        else Signature("robustness", {})
    )
    return RobustnessResult(
        tables["invariance"], tables["discrimination"], [], {}, signature, saved.get("metrics", {})
    )


def robustness_markdown(result: RobustnessResult) -> str:
    """The summary: what was tested, both tables, the heatmap, the signatures."""
    from storyeval.base.markdown import Document

    doc = Document()
    doc.heading(1, "Robustness of metrics")
    doc.paragraph(
        "Discrimination: the share of (original, altered) pairs where the metric prefers the "
        "original story (0.5 is chance; one-sided sign test). Invariance: how far "
        "quality-preserving changes move the metric; `changed_share` is the share of stories "
        "moved by more than the tolerance (a fraction of the metric's sd over the originals)."
    )
    doc.lines(["![robustness heatmap](robustness.png)"])
    if len(result.discrimination):
        doc.heading(2, "Discrimination")
        doc.frame(
            result.discrimination,
            ["metric", "group", "n_pairs", "estimate", "ci_low", "ci_high", "p_value"],
        )
    if len(result.invariance):
        doc.heading(2, "Invariance")
        doc.frame(
            result.invariance,
            [
                "metric",
                "test",
                "n_pairs",
                "mean_change",
                "mean_abs_change",
                "changed_share",
                "ci_low",
                "ci_high",
            ],
        )
    if result.skipped:
        doc.paragraph(
            f"{len(result.skipped)} perturbation(s) could not be made (the test does not apply)."
        )
    doc.heading(2, "Signatures")
    doc.bullets(
        [
            f"`{result.signature.render()}`",
            *(f"{k}: `{v}`" for k, v in result.metric_signatures.items()),
        ]
    )
    return doc.render()
