"""The tables of two expert-judged creative-writing studies, reproduced with storyeval's own
commands from their public files (``../shared/data``: TTCW and WQ, see its README).

* TTCW (Chakrabarty et al. 2024, "Art or Artifice?"): the experts' pass rate of each source
  over the 14 tests (the paper: New Yorker stories 84.7% of the verdicts, LLM stories 8.7% to
  30.0%), the experts' agreement per test (Fleiss' kappa; about 0.41 on average), and each of
  the 7 LLM judges against the experts' majority per test (Cohen's kappa; the paper: no LLM
  judge agrees with the experts beyond chance) and the alternative annotator test's verdict
  per test (Calderon et al. 2025: may the judge replace one of the experts?);
* WQ style-mimic (Chakrabarty et al. 2025): the pairwise accuracy of every offline metric, of
  a length baseline (``word_count``) and (``--judge``) of the offline LLM judge against the
  experts' preferences, with intervals that resample authors, and the judge's position bias.

Every step is a ``storyeval`` command (its output and log under ``OUT``); the numbers are
collected in ``OUT/tables.json`` and ``OUT/tables.md``, beside the paper's where it gives one.

    python benchmarks/creativity_tables.py --data ../shared/data -o out/creativity \\
        [--judge N] [--quick] [--in-process]

``--quick`` (a few metrics, 60 WQ pairs, 2 judges, small bootstraps) checks the pipeline.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

from commands import Runner

#: The offline metrics scored on WQ's paragraphs (no reference, no trained model)
WQ_METRICS = (
    "word_count,distinct1,distinct2,distinct3,repeated_ngram_rate,repeated_sentence_rate,"
    "sentence_length,sentence_length_cv,slop_index,not_but_rate,concreteness_noun,"
    "concreteness_verb,embedding_coherence,perplexity"
)
QUICK_METRICS = "word_count,distinct2,sentence_length,slop_index"
#: The figures the papers give (as shares)
PAPER = {
    "ttcw_pass_rate_newyorker": 0.847,
    "ttcw_pass_rate_llm_low": 0.087,
    "ttcw_pass_rate_llm_high": 0.300,
    "ttcw_fleiss_mean": 0.41,
}


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def ttcw_tables(run: Runner, data: Path, quick: bool) -> dict[str, Any]:
    """Pass rates per source, experts' Fleiss' kappa per test, each judge against the
    experts' majority per test."""
    out = run.out / "ttcw"
    run("ttcw-import", "import", "ttcw", str(data / "ttcw"), "--out-dir", str(out))
    boot = "50" if quick else "1000"
    run(
        "ttcw-analyse", "study", "analyse", "--judgments", str(out / "judgments.jsonl"),
        "--min-median-time", "0", "--bootstrap", boot, "-o", str(run.out / "ttcw-analysis"),
    )  # fmt: skip
    summary = rows(run.out / "ttcw-analysis" / "summary.csv")
    by_source: dict[str, list[float]] = {}
    for row in summary:
        by_source.setdefault(row["condition"], []).append(float(row["mean"]))
    rates = {source: sum(v) / len(v) for source, v in sorted(by_source.items())}
    run(
        "ttcw-fleiss", "agreement", "-j", str(out / "judgments.jsonl"), "--statistic", "fleiss",
        "--n-boot", boot, "-o", str(run.out / "ttcw-fleiss.csv"),
    )  # fmt: skip
    kappas = {r["criterion"]: float(r["estimate"]) for r in rows(run.out / "ttcw-fleiss.csv")}
    pooled = _pooled_kappa(run, out, boot)
    judges = _judges(run, out, boot, quick)
    llm = [rate for source, rate in rates.items() if source != "NewYorker"]
    return {
        "pass_rates": rates,
        "pass_rate_checks": {
            "newyorker": _check(rates.get("NewYorker"), PAPER["ttcw_pass_rate_newyorker"]),
            "llm_low": _check(min(llm), PAPER["ttcw_pass_rate_llm_low"]),
            "llm_high": _check(max(llm), PAPER["ttcw_pass_rate_llm_high"]),
        },
        "fleiss_kappa": kappas,
        "fleiss_kappa_mean": _check(sum(kappas.values()) / len(kappas), PAPER["ttcw_fleiss_mean"]),
        "fleiss_kappa_pooled": _check(pooled, PAPER["ttcw_fleiss_mean"]),
        "judges": judges,
    }


def _pooled_kappa(run: Runner, out: Path, boot: str) -> float:
    """The experts' Fleiss' kappa over every (story, test) verdict at once: the paper gives
    one kappa without saying whether it pools the tests or averages them, so both are shown."""
    pooled = [
        j | {"item_id": f"{j['item_id']}/{j['criterion']}", "criterion": "all_tests"}
        for j in records(out / "judgments.jsonl")
    ]
    source = _write(run.out / "ttcw-pooled.jsonl", pooled)
    run(
        "ttcw-fleiss-pooled", "agreement", "-j", str(source), "--statistic", "fleiss",
        "--n-boot", boot, "-o", str(run.out / "ttcw-fleiss-pooled.csv"),
    )  # fmt: skip
    return float(rows(run.out / "ttcw-fleiss-pooled.csv")[0]["estimate"])


def _check(value: float | None, paper: float, tolerance: float = 0.005) -> dict[str, Any]:
    within = value is not None and abs(round(value, 3) - paper) <= tolerance + 1e-9
    return {"value": value, "paper": paper, "within_0.005": within}


def _judges(run: Runner, out: Path, boot: str, quick: bool) -> dict[str, Any]:
    """Each LLM judge's Cohen's kappa with the experts' majority per test (``judge-eval``:
    quadratic-weighted kappa against the rounded mean of the three verdicts, which for
    binary verdicts is Cohen's kappa with the majority) and its mean over the tests."""
    answers = records(out / "judge_judgments.jsonl")
    names = sorted({a["rater_id"] for a in answers})[: 2 if quick else None]
    found: dict[str, Any] = {}
    for name in names:
        mine = out / f"judge-{name}.jsonl"
        mine.write_text("".join(json.dumps(a) + "\n" for a in answers if a["rater_id"] == name))
        folder = run.out / "ttcw-judges" / name
        run(
            f"ttcw-judge-{name}", "judge-eval", "--judge", str(mine), "--humans",
            str(out / "judgments.jsonl"), "--bootstrap", boot, "-o", str(folder),
        )  # fmt: skip
        kappa = {r["criterion"]: float(r["kappa"]) for r in rows(folder / "agreement.csv")}
        alt = {r["criterion"]: r["verdict"] for r in rows(folder / "alt_test.csv")}
        found[name] = {
            "kappa": kappa,
            "kappa_mean": sum(kappa.values()) / len(kappa),
            "alt_test": alt,
            "alt_test_passed": sorted(c for c, v in alt.items() if v == "may replace a rater"),
        }
    return found


def wq_tables(run: Runner, data: Path, quick: bool, judge: int) -> dict[str, Any]:
    """Every offline metric's pairwise accuracy against the experts (intervals by author),
    and with ``judge`` the offline judge's, with its position bias."""
    out = run.out / "wq"
    run("wq-import", "import", "wq", str(data / "wq" / "style_mimic.json"), "--out-dir", str(out))
    stories, pairs = out / "stories.jsonl", out / "comparisons.jsonl"
    if quick:  # the first 60 pairs and their paragraphs
        kept = records(pairs)[:60]
        sides = {c[k] for c in kept for k in ("system_a", "system_b")}
        stories = _write(run.out / "wq60.jsonl", [s for s in records(stories) if s["id"] in sides])
        pairs = _write(run.out / "wq60-pairs.jsonl", kept)
    metrics = QUICK_METRICS if quick else WQ_METRICS
    run(
        "wq-score", "score", str(stories), "--metrics", metrics, "--no-progress",
        "--threads", str(run.threads), "-o", str(run.out / "wq-scores.jsonl"),
    )  # fmt: skip
    boot = "200" if quick else "2000"
    run(
        "wq-accuracy", "pairwise-accuracy", "-s", str(run.out / "wq-scores.jsonl"), "-c",
        str(pairs), "--cluster", "group", "--n-boot", boot, "-o", str(run.out / "wq-accuracy.csv"),
    )  # fmt: skip
    table = {
        r["metric"]: {k: float(r[k]) for k in ("estimate", "ci_low", "ci_high")}
        | {"n": int(r["n"]), "direction": r["direction"]}
        for r in rows(run.out / "wq-accuracy.csv")
    }
    result: dict[str, Any] = {"pairwise_accuracy": table}
    if judge:
        kept = records(pairs)[:judge]
        sides = {c[k] for c in kept for k in ("system_a", "system_b")}
        judged = _write(
            run.out / "wq-judged.jsonl", [s for s in records(stories) if s["id"] in sides]
        )
        result["judge"] = _wq_judge(run, judged, _write(run.out / "wq-judged-pairs.jsonl", kept))
    return result


def _write(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    return path


def _wq_judge(run: Runner, stories: Path, pairs: Path) -> dict[str, Any]:
    """The offline judge asked which paragraph of each pair is better, in both orders."""
    judged = run.out / "wq-judge.jsonl"
    run(
        "wq-judge", "judge", str(stories), "--mode", "pairwise", "--rubric", "writing_quality",
        "--no-cache", "--threads", str(run.threads), "-o", str(judged),
    )  # fmt: skip
    folder = run.out / "wq-judge-eval"
    run("wq-judge-eval", "judge-eval", "--judge", str(judged), "--human-pairs", str(pairs), "-o", str(folder))  # fmt: skip
    agreement = rows(folder / "preferences.csv")[0]
    position = rows(folder / "position.csv")[0]
    return {
        "accuracy": _number(agreement["accuracy"]),
        "ci_low": _number(agreement["ci_low"]),
        "ci_high": _number(agreement["ci_high"]),
        "accuracy_ties_half": _number(agreement["accuracy_ties_half"]),
        "judge_ties": int(agreement["judge_ties"]),
        "pairs": int(agreement["pairs"]),
        "first_position_wins": float(position["first_position_wins"]),
        "position_consistency": float(position["position_consistency"]),
    }


def _number(text: str) -> float:
    """A CSV cell as a float (empty: NaN, e.g. the accuracy of a judge that tied every pair)."""
    return float(text) if text not in ("", "nan") else float("nan")


def markdown(report: dict[str, Any]) -> str:
    """The tables as the guide shows them."""
    lines = ["# TTCW and WQ reproduced with storyeval", ""]
    ttcw = report.get("ttcw")
    if ttcw:
        lines += [
            "## TTCW: experts' pass rate per source",
            "",
            "| source | pass rate |",
            "|---|---|",
        ]
        lines += [f"| {s} | {100 * r:.1f}% |" for s, r in ttcw["pass_rates"].items()]
        lines += ["", "## TTCW: agreement per test", "", "| test | experts' Fleiss' kappa |"]
        lines += ["|---|---|"] + [f"| {t} | {k:.3f} |" for t, k in ttcw["fleiss_kappa"].items()]
        lines += [
            "",
            f"Mean over the tests: {ttcw['fleiss_kappa_mean']['value']:.3f}; pooled over every "
            f"verdict: {ttcw['fleiss_kappa_pooled']['value']:.3f} (the paper: about 0.41)",
            "",
        ]
        lines += ["## TTCW: LLM judges against the experts' majority (Cohen's kappa)", ""]
        lines += ["| judge | mean kappa | may replace an expert (alt-test, epsilon 0.2) |"]
        lines += ["|---|---|---|"] + [
            f"| {j} | {v['kappa_mean']:+.3f} | {', '.join(v['alt_test_passed']) or 'on no test'} |"
            for j, v in ttcw["judges"].items()
        ]
    wq = report.get("wq")
    if wq:
        lines += ["", "## WQ style-mimic: pairwise accuracy against the experts", ""]
        lines += ["| metric | accuracy [95% CI, authors resampled] | direction |", "|---|---|---|"]
        ordered = sorted(wq["pairwise_accuracy"].items(), key=lambda kv: -kv[1]["estimate"])
        lines += [
            f"| {m} | {v['estimate']:.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}] | {v['direction']} |"
            for m, v in ordered
        ]
        if "judge" in wq:
            j = wq["judge"]
            lines += [
                "",
                f"Offline judge on {j['pairs']} pairs: {j['accuracy_ties_half']:.3f} with its "
                f"ties counted half ({j['judge_ties']} pairs tied: its two orders disagreed); "
                f"{j['accuracy']:.3f} on the pairs it decided; the first paragraph won "
                f"{100 * j['first_position_wins']:.0f}% of its decisions; "
                f"{100 * j['position_consistency']:.0f}% of pairs judged alike in both orders.",
            ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("-o", "--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--judge",
        type=int,
        default=0,
        metavar="N",
        help="also the offline judge on WQ's first N pairs (both orders; 0: none)",
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--in-process", action="store_true")
    args = parser.parse_args()
    run = Runner(args.out, args.threads, in_process=args.in_process)
    report: dict[str, Any] = {"quick": args.quick}
    report["ttcw"] = ttcw_tables(run, args.data, args.quick)
    report["wq"] = wq_tables(run, args.data, args.quick, args.judge)
    report["commands"] = run.commands
    (args.out / "tables.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "tables.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
