"""Prediction-powered pass rates on TTCW: how many expert verdicts an LLM judge saves.

TTCW (Chakrabarty et al. 2024) has 3 experts' verdicts and 7 LLM judges' answers on the same
14 tests of the same 48 stories (2,016 expert verdicts). For each judge and each share of the
expert verdicts kept (10%, 20%, 30%, drawn at random; the judge answers every story and test),
this script estimates every source's
pass rate with prediction-powered inference (PPI++; ``storyeval.meta.ppi``, the
``storyeval ppi`` command) and with the experts' verdicts alone, over ``--resamples`` draws,
and reports each interval's mean width and how often it covers the full-data value (the pass
rate from every expert verdict). Targets: coverage >= 0.93 everywhere; intervals at least 30%
narrower where the judge agrees with the experts.

    python benchmarks/ppi_ttcw.py --data ../shared/data -o out/ppi-ttcw [--resamples 1000]

Writes ``OUT/ppi.csv`` (one row per judge, share and source) and ``OUT/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from storyeval.corpus import Judgment, read_judgments
from storyeval.meta.ppi import ppi_mean

SHARES = (0.1, 0.2, 0.3)


def _draws(
    frame: pd.DataFrame, share: float, resamples: int, seed: int, interval: str
) -> pd.DataFrame:
    """Per source: the PPI++ and experts-only intervals over ``resamples`` random subsets."""
    rng = np.random.default_rng(seed)
    rows = []
    for source, part in frame.groupby("system"):
        truth = part["human"].to_numpy(float)
        judged = part["judge"].to_numpy(float)
        full = float(truth.mean())
        size = max(2, round(share * len(part)))
        found = []
        for _ in range(resamples):
            mask = np.zeros(len(part), dtype=bool)
            mask[rng.choice(len(part), size=size, replace=False)] = True
            result = ppi_mean(truth[mask], judged[mask], judged[~mask], interval=interval)
            found.append(
                (
                    result.ci_low,
                    result.ci_high,
                    result.classical_ci_low,
                    result.classical_ci_high,
                    result.lam,
                )
            )
        low, high, c_low, c_high, lam = np.asarray(found).T
        rows.append({
            "source": source, "share": share, "verdicts": len(part), "labeled": size, "full_value": full,
            "ppi_width": float(np.mean(high - low)), "classical_width": float(np.mean(c_high - c_low)),
            "ppi_coverage": float(np.mean((low <= full) & (full <= high))),
            "classical_coverage": float(np.mean((c_low <= full) & (full <= c_high))),
            "mean_lam": float(np.mean(lam)),
            "judge_agreement": float(np.mean(judged == np.round(truth))),
        })  # fmt: skip
    return pd.DataFrame(rows)


def _verdicts(humans: list[Judgment], answers: list[Judgment], judge: str) -> pd.DataFrame:
    """One row per expert verdict the judge also answered: the source, the expert's verdict
    (``human``) and the judge's answer on the same story and test (``judge``)."""
    said = {(a.item_id, a.criterion): a.value for a in answers if a.rater_id == judge}
    rows = [
        {"system": h.condition, "human": h.value, "judge": said[(h.item_id, h.criterion)]}
        for h in humans
        if (h.item_id, h.criterion) in said
    ]
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("-o", "--out", type=Path, required=True)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--interval", choices=("t", "normal"), default="t")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    imported = args.out / "ttcw"
    subprocess.run(
        [sys.executable, "-m", "storyeval", "import", "ttcw", str(args.data / "ttcw"), "--out-dir", str(imported)],
        check=True,
    )  # fmt: skip
    humans = read_judgments(imported / "judgments.jsonl")
    answers = read_judgments(imported / "judge_judgments.jsonl")
    tables = []
    for judge in sorted({a.rater_id for a in answers}):
        frame = _verdicts(humans, answers, judge)
        for share in SHARES:
            table = _draws(frame, share, args.resamples, args.seed, args.interval)
            tables.append(table.assign(judge=judge))
    result = pd.concat(tables, ignore_index=True)
    result["width_ratio"] = result["ppi_width"] / result["classical_width"]
    result.to_csv(args.out / "ppi.csv", index=False)
    summary = {
        "resamples": args.resamples,
        "interval": args.interval,
        "min_ppi_coverage": float(result["ppi_coverage"].min()),
        "min_classical_coverage": float(result["classical_coverage"].min()),
        "best_width_ratio": float(result["width_ratio"].min()),
        "worst_width_ratio": float(result["width_ratio"].max()),
        "coverage_target_met": bool(result["ppi_coverage"].min() >= 0.93),
        "narrower_by_30pct": result.loc[
            result["width_ratio"] <= 0.7, ["judge", "source", "share"]
        ].to_dict("records"),
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    by_judge = result.groupby("judge")[
        ["width_ratio", "ppi_coverage", "mean_lam", "judge_agreement"]
    ].mean()
    print(by_judge.round(3).to_string())
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
