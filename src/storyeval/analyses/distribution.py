"""MAUVE of each system's stories against people's, as tables, curves, reports and files: the
``storyeval mauve`` command's analysis, over the ``mauve`` metric (its computation is
:mod:`storyeval.metrics.divergence`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storyeval.metrics.divergence import MIN_TEXTS

# --------------------------------------------------------------------------- per system, files


MAUVE_COLUMNS = (
    "system",
    "statistic",
    "estimate",
    "ci_low",
    "ci_high",
    "sd",
    "n",
    "method",
    "signature",
)
SIGNATURE_FILE = "mauve.json"


@dataclass
class MauveTable:
    """MAUVE and MAUVE* of every system against the reference system.

    Attributes
    ----------
    frame : pandas.DataFrame
        Columns :data:`MAUVE_COLUMNS`, a row per system and statistic.
    curves : pandas.DataFrame
        ``system``, ``seed``, ``point``, ``x``, ``y``: every seed's divergence curve.
    reference : str
        The reference system.
    notes : list of str
        Warnings (small samples, lengths that differ), each prefixed with its system.
    signatures : dict of str to str
        The signature of each statistic.
    """

    frame: Any
    curves: Any
    reference: str
    notes: list[str]
    signatures: dict[str, str]


def mauve_by_system(
    stories: Sequence[Any],
    *,
    options: Any = None,
    progress: bool = False,
    device: str = "cpu",
    precision: str = "float32",
) -> MauveTable:
    """MAUVE and MAUVE* of each system's stories against the reference system's, through
    :func:`storyeval.metrics.score_stories` (so the numbers are those of ``storyeval score
    --metrics mauve,mauve_star``).

    Parameters
    ----------
    stories : sequence of Story
        Stories of several systems, the reference system's among them.
    options : mapping, optional
        ``{"mauve.KEY": value}`` settings (``mauve.reference_system``, ``mauve.features``,
        ``mauve.seeds``, ...; ``storyeval metrics --options`` lists them).
    progress : bool
        Progress bars.
    device, precision : str
        Where and how the feature model runs (in the signatures).

    Returns
    -------
    MauveTable
    """
    import pandas as pd

    from storyeval.metrics.pipeline import score_stories

    run = score_stories(
        stories,
        "mauve,mauve_star",
        options=options or {},
        bootstrap=0,
        progress=progress,
        device=device,
        precision=precision,
    )
    frame = run.systems[list(MAUVE_COLUMNS)].reset_index(drop=True)
    reference = ""
    curve_frames = []
    for (metric, _, system), result in sorted(run.details.items()):
        if metric == "mauve" and result is not None:
            curves = result.curves()
            curves.insert(0, "system", system)
            curve_frames.append(curves)
    for info in run.metrics.values():
        reference = str(info.signature.fields.get("reference_system", "human"))
    columns = ["system", "seed", "point", "x", "y"]
    curves = (
        pd.concat(curve_frames, ignore_index=True)
        if curve_frames
        else pd.DataFrame(columns=columns)
    )
    notes = sorted({note for info in run.metrics.values() for note in info.notes})
    signatures = {name: info.signature.render() for name, info in run.metrics.items()}
    return MauveTable(frame, curves, reference, notes, signatures)


def divergence_plot(table: MauveTable) -> bytes:
    """The divergence curves (PNG): one colour per system, one line per k-means seed."""
    from storyeval.base.plots import figure as _figure
    from storyeval.base.plots import png as _png

    fig = _figure(5.2, 4.4)
    ax = fig.add_subplot(1, 1, 1)
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"]
    for index, (system, curves) in enumerate(table.curves.groupby("system", sort=True)):
        colour = colours[index % len(colours)]
        mean = table.frame.query("system == @system and statistic == 'mauve'")["estimate"]
        label = f"{system} (MAUVE {float(mean.iloc[0]):.3f})" if len(mean) else str(system)
        for position, (_, one) in enumerate(curves.groupby("seed", sort=True)):
            one = one.sort_values("point")
            inner = one[(one["point"] > one["point"].min()) & (one["point"] < one["point"].max())]
            ax.plot(
                inner["x"],
                inner["y"],
                color=colour,
                alpha=0.6,
                linewidth=1.2,
                label=label if position == 0 else None,
            )
    ax.set_xlabel(f"exp(-c KL(Q || R)),  Q = {table.reference}")
    ax.set_ylabel("exp(-c KL(P || R)),  P = the system")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.set_title("Divergence curves (one line per k-means seed)", fontsize=10)
    if len(table.curves):
        ax.legend(fontsize=8, loc="lower left")
    return _png(fig)


def mauve_markdown(table: MauveTable) -> str:
    """The summary page of a ``storyeval mauve`` directory."""
    from storyeval.base.markdown import Document

    doc = Document()
    doc.heading(1, "MAUVE")
    doc.paragraph(
        f"Each system's stories against the {table.reference!r} stories: MAUVE (Pillutla et "
        "al. 2021) and MAUVE* (smoothed histograms; Pillutla et al. 2023), the mean over "
        "k-means seeds with a Student t interval across seeds. 1 means the two distributions "
        f"cannot be told apart in feature space. Below {MIN_TEXTS} stories a side, values vary "
        "strongly with the seed; lengths that differ strongly dominate the score."
    )
    doc.lines(["![divergence curves](divergence.png)"])
    doc.frame(table.frame, ["system", "statistic", "estimate", "ci_low", "ci_high", "sd", "n"])
    if table.notes:
        doc.heading(2, "Warnings")
        doc.bullets(table.notes)
    doc.heading(2, "Signatures")
    doc.bullets([f"`{sig}`" for sig in table.signatures.values()])
    return doc.render()


def write_mauve(table: MauveTable, directory: str | Path) -> dict[str, Path]:
    """Write ``mauve.csv``, ``curves.csv``, ``divergence.png``, ``mauve.md`` and
    ``mauve.json`` (signatures, reference, notes) into ``directory``, each atomically."""
    import json

    from storyeval.base.io import (
        claim_output_directory,
        write_bytes_atomic,
        write_table,
        write_text_atomic,
    )

    folder = claim_output_directory(directory, "mauve report")
    written = {
        "table": write_table(folder / "mauve.csv", table.frame),
        "curves": write_table(folder / "curves.csv", table.curves),
        "figure": folder / "divergence.png",
        "report": folder / "mauve.md",
        "signatures": folder / SIGNATURE_FILE,
    }
    write_bytes_atomic(written["figure"], divergence_plot(table))
    write_text_atomic(written["report"], mauve_markdown(table))
    saved = {"reference": table.reference, "notes": table.notes, "signatures": table.signatures}
    write_text_atomic(written["signatures"], json.dumps(saved, indent=2) + "\n")
    return written


def read_mauve(directory: str | Path) -> MauveTable:
    """A directory written by :func:`write_mauve` (for ``storyeval report --mauve DIR``).

    Raises
    ------
    StoryevalError
        When the directory lacks ``mauve.csv`` or ``curves.csv``.
    """
    import json

    import pandas as pd

    from storyeval.base.errors import StoryevalError

    folder = Path(directory)
    for name in ("mauve.csv", "curves.csv"):
        if not (folder / name).is_file():
            raise StoryevalError(
                f"{folder}: no {name}; write one with `storyeval mauve STORIES -o DIR`"
            )
    saved: dict[str, Any] = {}
    if (folder / SIGNATURE_FILE).is_file():
        saved = json.loads((folder / SIGNATURE_FILE).read_text(encoding="utf-8"))
    return MauveTable(
        pd.read_csv(folder / "mauve.csv"),
        pd.read_csv(folder / "curves.csv"),
        str(saved.get("reference", "human")),
        list(saved.get("notes", [])),
        dict(saved.get("signatures", {})),
    )
