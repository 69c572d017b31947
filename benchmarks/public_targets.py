"""The measured targets of the reward-model and UNION work, on the public releases, in one run.

storyeval cannot ship or download the public rated story sets, so its targets for them are
measured where the files are. This script runs, with the CLI commands the learned-metrics
guide gives, every measurement those targets name, and writes one JSON with each value,
its target and whether it was met (``OUT/targets.json``; every command's output beside it):

* ``--union-release DIR`` (UNION's release: its root, ``Data/ROCStories`` or its
  ``ant_data`` folder, which holds ``ant_data.txt``, ``reference_ipt.txt`` and
  ``reference_opt.txt``): a reward model (``train preference``, five
  folds, by story since each prompt has one story) against people's "reasonable" labels of
  the 400 generated stories: its held-out Kendall tau (target >= 0.34, UNION's 0.339 after
  88k stories), the minutes per fold (<= 30 on 2 cores), and whether it is above every metric
  storyeval scores offline on the same stories (Kendall, and BH-adjusted Williams tests);
* ``--deltascore [LABEL=]FILE`` (repeatable; DeltaScore's JSONL, e.g. ``inhouse/roc.jsonl``
  and ``crowdsource/roc.jsonl``, keyed by label or by the path's distinct ending): the same
  per aspect, above every metric;
* ``--human-train FILE --human-heldout FILE`` (human ROCStories stories, any story file):
  UNION's CPU recipe (perturbed negatives, ``train union`` with ``--heldout``): each
  technique told from its original on held-out stories (target >= 0.75), the minutes of
  training (<= 30), and with ``--union-release`` the Kendall of the trained UNION against
  people on the 400 rated stories (target >= 0.25).

* ``--wq FILE`` (WQ's ``style_mimic.json``, Chakrabarty et al. 2025): storyeval's own verdict,
  a preference model on every offline metric with the features chosen inside each training
  set (``--select-features``), cross-validated by author (no author in a training and a
  held-out fold), its held-out pairwise accuracy against the experts (target >= 0.70), above
  every single metric, and significantly above at least half of them (paired permutation
  tests over authors, BH-adjusted);
* ``--ttcw DIR`` (TTCW's release folder, Chakrabarty et al. 2024): the same by plot against
  the experts' share of tests passed (Kendall tau; the 36 stories with text), above every
  metric and significantly above at least half (BH-adjusted Williams tests).

``--quick`` shrinks every step (2 folds, a few metrics, one DeltaScore aspect, a few
training steps) to check the pipeline on small files; its numbers mean nothing.

    python benchmarks/public_targets.py --union-release Data/ROCStories \\
        [--deltascore deltascore.jsonl] [--human-train roc-train.jsonl --human-heldout
        roc-heldout.jsonl] -o public-targets [--threads 2] [--quick] [--in-process]
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

from commands import Runner, flag, target

REWARD_FEATURES = "repeated_ngram_rate,repeated_sentence_rate,distinct2,perplexity"
#: Every offline metric of one text alone (no reference, prompt or trained model)
VERDICT_FEATURES = (
    "word_count,distinct1,distinct2,distinct3,repeated_ngram_rate,repeated_sentence_rate,"
    "sentence_length,sentence_length_cv,slop_index,not_but_rate,concreteness_noun,"
    "concreteness_verb,embedding_coherence,perplexity"
)
QUICK_VERDICT = "word_count,distinct2,sentence_length,sentence_length_cv"
QUICK_METRICS = "distinct2,repeated_ngram_rate,sentence_length"
MIX_WEIGHTS = "repetition=0.4,substitution=0.3,reordering=0.2,negation=0.1"
MODEL_PREFIX = "preference_heldout:"


def kendall_table(path: Path, criterion: str) -> dict[str, float]:
    """Story-level (pooled) Kendall tau of every metric with people for ``criterion``."""
    found: dict[str, float] = {}
    with open(path, encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["criterion"] == criterion and row["estimate"] not in ("", "nan"):
                found[row["metric"]] = float(row["estimate"])
    return found


def williams_wins(path: Path, model: str) -> dict[str, int]:
    """How many metrics the reward model beats in the BH-adjusted one-sided Williams tests
    (``storyeval compare``'s rows "model vs metric"), and of how many."""
    wins = total = 0
    with open(path, encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["metric_a"] == model:
                total += 1
                wins += int(float(row["p_adjusted"] or "nan") < 0.05)
    return {"significantly_above": wins, "compared": total}


def reward_model_on(
    run: Runner, name: str, stories: Path, judgments: Path, criterion: str, quick: bool
) -> dict[str, Any]:
    """Train a reward model for ``criterion`` (held-out predictions from its folds), score
    the stories with storyeval's metrics, and set the model beside them."""
    out = run.out / name
    folds = "2" if quick else "5"
    features = "distinct2" if quick else REWARD_FEATURES
    l2 = ["--l2", "0.1"] if quick else ["--l2", "auto"]
    seconds = run(
        f"{name}-train", "train", "preference", "--stories", str(stories), "--judgments",
        str(judgments), "--criterion", criterion, "--with-prompt", "--metric-features", features,
        *l2, "--folds", folds, "--threads", str(run.threads), "-o", str(out / "reward"),
    )  # fmt: skip
    metrics = ["--metrics", QUICK_METRICS] if quick else []
    run(
        f"{name}-score", "score", str(stories), *metrics, "--skip-missing", "--threads",
        str(run.threads), "-o", str(out / "scores.jsonl"),
    )  # fmt: skip
    sources = ["-s", str(out / "scores.jsonl"), "-s", str(out / "reward/heldout_scores.jsonl")]
    common = [*sources, "-j", str(judgments), "--stories", str(stories), "-m", "kendall"]
    common += ["--criterion", criterion]
    run(
        f"{name}-correlate",
        "correlate",
        *common,
        "--level",
        "pooled",
        "-o",
        str(out / "kendall.csv"),
    )
    run(f"{name}-compare", "compare", *common, "-o", str(out / "williams.csv"))
    table = kendall_table(out / "kendall.csv", criterion)
    model = next(m for m in table if m.startswith(MODEL_PREFIX))
    others = {m: v for m, v in table.items() if m != model}
    best = max(others, key=lambda m: abs(others[m])) if others else None
    return {
        "kendall": table[model],
        "minutes_per_fold": seconds / 60 / (int(folds) + 1),  # the folds and the final fit
        "best_metric": best,
        "best_metric_kendall": others.get(best) if best else None,
        "above_every_metric": all(table[model] > abs(v) for v in others.values()),
        "williams": williams_wins(out / "williams.csv", model),
    }


def union_rated(run: Runner, release: Path, quick: bool) -> tuple[dict[str, Any], Path]:
    """The reward model on UNION's 400 rated stories; the stories' import folder. ``release``
    is any folder ``storyeval import union`` accepts (the release's root, ``Data/ROCStories``
    or its ``ant_data``): the importer finds ``ant_data.txt`` and its side files."""
    rated = run.out / "union-rated"
    run("union-import", "import", "union", str(release), "--out-dir", str(rated))
    found = reward_model_on(
        run, "union", rated / "stories.jsonl", rated / "judgments.jsonl", "reasonable", quick
    )
    targets = {
        "kendall": target(found["kendall"], 0.34),
        "minutes_per_fold": target(found["minutes_per_fold"], 30, at_most=True),
        "above_every_metric": flag(found["above_every_metric"]),
    }
    return {"found": found, "targets": targets}, rated


def labelled(files: list[str]) -> list[tuple[str, Path]]:
    """``(label, path)`` of each ``--deltascore`` value: ``LABEL=PATH``, or the path's shortest
    ending that no other file shares (``inhouse/roc.jsonl`` beside ``crowdsource/roc.jsonl``).

    >>> labelled(["a/inhouse/roc.jsonl", "a/crowdsource/roc.jsonl", "mine=x/wp.jsonl"])
    [('inhouse/roc.jsonl', PosixPath('a/inhouse/roc.jsonl')), ('crowdsource/roc.jsonl', PosixPath('a/crowdsource/roc.jsonl')), ('mine', PosixPath('x/wp.jsonl'))]
    """
    given = [value.partition("=") if "=" in value else ("", "", value) for value in files]
    paths = [Path(path) for _, _, path in given]
    labels = []
    for (label, _, _), path in zip(given, paths, strict=True):
        if not label:
            for depth in range(1, len(path.parts) + 1):
                label = "/".join(path.parts[-depth:])
                if sum("/".join(p.parts[-depth:]) == label for p in paths) == 1:
                    break
        labels.append(label)
    if len(set(labels)) != len(labels):
        raise SystemExit(f"--deltascore: two files have the same label ({', '.join(labels)})")
    return list(zip(labels, paths, strict=True))


def deltascore_sets(run: Runner, files: list[str], quick: bool) -> dict[str, Any]:
    """The reward model per aspect of each DeltaScore file, beside every metric; results are
    keyed ``LABEL:ASPECT`` (see :func:`labelled`)."""
    results: dict[str, Any] = {}
    for number, (label, path) in enumerate(labelled(files)):
        folder = run.out / f"deltascore-{number}"
        run(
            f"deltascore-{number}-import",
            "import",
            "deltascore",
            str(path),
            "--out-dir",
            str(folder),
        )
        lines = (folder / "judgments.jsonl").read_text(encoding="utf-8").splitlines()
        aspects = sorted({json.loads(line)["criterion"] for line in lines if line.strip()})
        for aspect in aspects[:1] if quick else aspects:
            found = reward_model_on(
                run, f"deltascore-{number}-{aspect}", folder / "stories.jsonl",
                folder / "judgments.jsonl", aspect, quick,
            )  # fmt: skip
            results[f"{label}:{aspect}"] = {
                "found": found,
                "above_every_metric": flag(found["above_every_metric"]),
            }
    return results


def union_recipe(
    run: Runner, train: Path, heldout: Path, rated: Path | None, quick: bool
) -> dict[str, Any]:
    """UNION's CPU recipe (the learned-metrics guide): every technique on held-out stories,
    the training time and, with the rated stories, the Kendall with people."""
    out = run.out / "union-recipe"
    run(
        "recipe-perturb", "perturb", str(train), "--mix", "--seed", "1", "--mix-weights",
        MIX_WEIGHTS, "-o", str(out / "negatives.jsonl"),
    )  # fmt: skip
    steps = ["--max-steps", "4", "--eval-every", "2"] if quick else ["--eval-every", "200"]
    seconds = run(
        "recipe-train", "train", "union", "--stories", str(train), "-o", str(out / "model"),
        "--negatives-file", str(out / "negatives.jsonl"), "--rank-weight", "1", "--max-length",
        "96", "--epochs", "2", "--lr", "5e-5", "--head-lr", "1e-3", "--batch-size", "10",
        *steps, "--patience", "3", "--threads", str(run.threads), "-q", "--heldout", str(heldout),
    )  # fmt: skip
    techniques = {}
    with open(out / "model" / "heldout_techniques.csv", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            techniques[row["technique"]] = target(float(row["estimate"]), 0.75)
    result: dict[str, Any] = {
        "techniques": techniques,
        "training_minutes": target(seconds / 60, 30, at_most=True),
    }
    if rated is not None:
        scores = out / "rated-union.jsonl"
        run(
            "recipe-score", "score", str(rated / "stories.jsonl"), "--metrics", "union",
            "--option", f"union.model={out / 'model'}", "-o", str(scores),
        )  # fmt: skip
        run(
            "recipe-correlate", "correlate", "-s", str(scores), "-j", str(rated / "judgments.jsonl"),
            "--stories", str(rated / "stories.jsonl"), "-m", "kendall", "--level", "pooled",
            "-o", str(out / "kendall.csv"),
        )  # fmt: skip
        kendall = kendall_table(out / "kendall.csv", "reasonable").get("union")
        result["kendall_with_people"] = target(kendall, 0.25)
    return result


def wq_verdict(run: Runner, path: Path, quick: bool) -> dict[str, Any]:
    """storyeval's own verdict on WQ style-mimic, cross-validated by author, beside every
    single metric on the same pairs."""
    out = run.out / "wq"
    run("wq-import", "import", "wq", str(path), "--out-dir", str(out))
    stories, pairs = out / "stories.jsonl", out / "comparisons.jsonl"
    features = QUICK_VERDICT if quick else VERDICT_FEATURES
    seconds = run(
        "wq-train", "train", "preference", "--stories", str(stories), "--pairs", str(pairs),
        "--criterion", "quality", "--features", "none", "--metric-features", features,
        "--no-length-covariate", "--select-features", "--group-by", "group", "--folds",
        "2" if quick else "5", "--l2", "0.1" if quick else "auto", "-o", str(out / "verdict"),
    )  # fmt: skip
    run(
        "wq-score", "score", str(stories), "--metrics", features, "--no-progress",
        "--threads", str(run.threads), "-o", str(out / "scores.jsonl"),
    )  # fmt: skip
    model = f"{MODEL_PREFIX}verdict"
    run(
        "wq-accuracy", "pairwise-accuracy", "-s", str(out / "scores.jsonl"), "-s",
        str(out / "verdict" / "heldout_scores.jsonl"), "-c", str(pairs), "--cluster", "group",
        "--n-boot", "200" if quick else "2000", "--versus", model, "--tests",
        str(out / "tests.csv"), "-o", str(out / "accuracy.csv"),
    )  # fmt: skip
    accuracy = {r["metric"]: float(r["estimate"]) for r in _rows(out / "accuracy.csv")}
    return _verdict(accuracy, model, _rows(out / "tests.csv"), 0.70, seconds)


def ttcw_verdict(run: Runner, folder: Path, quick: bool) -> dict[str, Any]:
    """storyeval's own verdict on TTCW's stories with text, cross-validated by plot, against
    the experts' share of tests passed, beside every single metric (Williams tests), and its
    learning curve: the same model's held-out Kendall as the folds, so the training plots,
    grow."""
    out = run.out / "ttcw"
    run("ttcw-import", "import", "ttcw", str(folder), "--out-dir", str(out))
    stories, share = out / "stories.jsonl", out / "passed.jsonl"
    _passed_share(out / "judgments.jsonl", share)
    features = QUICK_VERDICT if quick else VERDICT_FEATURES.replace(",perplexity", "")
    seconds = _ttcw_train(run, out, features, 2 if quick else 6, "verdict", quick)
    run(
        "ttcw-score", "score", str(stories), "--metrics", features, "--no-progress",
        "-o", str(out / "scores.jsonl"),
    )  # fmt: skip
    sources = ["-s", str(out / "scores.jsonl"), "-s", str(out / "verdict/heldout_scores.jsonl")]
    common = [*sources, "-j", str(share), "--stories", str(stories), "-m", "kendall"]
    run("ttcw-correlate", "correlate", *common, "--level", "pooled", "-o", str(out / "kendall.csv"))
    run("ttcw-compare", "compare", *common, "-o", str(out / "williams.csv"))
    table = kendall_table(out / "kendall.csv", "passed")
    model = next(m for m in table if m.startswith(MODEL_PREFIX))
    tests = [
        {"metric_b": r["metric_b"], "p_adjusted": r["p_adjusted"]}
        for r in _rows(out / "williams.csv")
        if r["metric_a"] == model
    ]
    result = _verdict(table, model, tests, None, seconds)
    result["found"]["learning_curve"] = ttcw_learning_curve(run, out, features, quick)
    return result


#: The folds of TTCW's learning curve: 6, 8, 9, 10 and 11 of its 12 plots to train on
CURVE_FOLDS = (2, 3, 4, 6, 12)


def ttcw_learning_curve(run: Runner, out: Path, features: str, quick: bool) -> list[dict]:
    """The verdict's held-out Kendall with the experts when trained on more plots: more folds
    leave more plots to train on (the model sees (k-1)/k of the 12)."""
    folds = CURVE_FOLDS[:2] if quick else CURVE_FOLDS
    sources: list[str] = []
    for k in folds:
        _ttcw_train(run, out, features, k, f"curve-{k}", quick)
        sources += ["-s", str(out / f"curve-{k}" / "heldout_scores.jsonl")]
    run(
        "ttcw-curve", "correlate", *sources, "-j", str(out / "passed.jsonl"), "--stories",
        str(out / "stories.jsonl"), "-m", "kendall", "--level", "pooled", "-o",
        str(out / "curve.csv"),
    )  # fmt: skip
    rows = {r["metric"]: r for r in _rows(out / "curve.csv") if r["criterion"] == "passed"}
    return [
        {
            "training_plots": 12 * (k - 1) // k,
            "kendall": float(rows[f"{MODEL_PREFIX}curve-{k}"]["estimate"]),
            "ci": [float(rows[f"{MODEL_PREFIX}curve-{k}"][c]) for c in ("ci_low", "ci_high")],
        }
        for k in folds
    ]


def _ttcw_train(run: Runner, out: Path, features: str, folds: int, name: str, quick: bool) -> float:
    """``train preference`` on TTCW's LLM stories (the New Yorker's have no text) against the
    share of tests passed, with ``folds`` folds by plot; its seconds."""
    return run(
        f"ttcw-train-{name}", "train", "preference", "--stories", str(out / "stories.jsonl"),
        "--judgments", str(out / "passed.jsonl"), "--criterion", "passed", "--exclude-systems",
        "NewYorker", "--features", "none", "--metric-features", features,
        "--no-length-covariate", "--select-features", "--folds", str(folds), "--l2",
        "0.1" if quick else "auto", "-o", str(out / name),
    )  # fmt: skip


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _passed_share(judgments: Path, target: Path) -> None:
    """Each expert's share of TTCW's 14 tests a story passed, as one criterion (``passed``):
    the paper's summary of a story."""
    shares: dict[tuple[str, str], list[float]] = {}
    extra: dict[tuple[str, str], dict[str, Any]] = {}
    for line in judgments.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        key = (record["item_id"], record["rater_id"])
        shares.setdefault(key, []).append(float(record["value"]))
        extra[key] = {"system": record.get("system")}
    rows = [
        {
            "item_id": i,
            "rater_id": r,
            "criterion": "passed",
            "value": sum(v) / len(v),
            **extra[(i, r)],
        }
        for (i, r), v in shares.items()
    ]
    target.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def _verdict(
    values: dict[str, float],
    model: str,
    tests: list[dict[str, str]],
    goal: float | None,
    seconds: float,
) -> dict[str, Any]:
    """The model beside every metric: its value, the best metric's, how many it is
    significantly above (BH-adjusted p < 0.05), and the targets."""
    others = {m: v for m, v in values.items() if m != model}
    best = max(others, key=lambda m: abs(others[m] - (0.5 if goal else 0.0)))
    wins = sum(float(t["p_adjusted"] or "nan") < 0.05 for t in tests)
    chance = 0.5 if goal else 0.0
    found: dict[str, Any] = {
        "value": values[model],
        "best_metric": best,
        "best_metric_value": others[best],
        "metrics": others,
        "significantly_above": wins,
        "compared": len(tests),
        "minutes": seconds / 60,
    }
    targets: dict[str, Any] = {
        "above_every_metric": flag(
            all(values[model] - chance > abs(v - chance) for v in others.values())
        ),
        "significantly_above_half": flag(wins * 2 >= len(tests) > 0),
    }
    if goal is not None:
        targets["pairwise_accuracy"] = target(values[model], goal)
    return {"found": found, "targets": targets}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--union-release", type=Path)
    parser.add_argument(
        "--deltascore",
        action="append",
        default=[],
        help="a DeltaScore JSONL file, or LABEL=FILE (repeat; results keyed by label, else by "
        "the shortest distinct ending of the path)",
    )
    parser.add_argument("--wq", type=Path, help="WQ's style_mimic.json")
    parser.add_argument("--ttcw", type=Path, help="TTCW's release folder")
    parser.add_argument("--human-train", type=Path)
    parser.add_argument("--human-heldout", type=Path)
    parser.add_argument("-o", "--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--in-process", action="store_true", help="every command in this process (models load once)"
    )
    args = parser.parse_args()
    if (args.human_train is None) != (args.human_heldout is None):
        parser.error("--human-train and --human-heldout go together")
    run = Runner(args.out, args.threads, in_process=args.in_process)
    report: dict[str, Any] = {"quick": args.quick}
    rated = None
    if args.union_release is not None:
        report["union_rated"], rated = union_rated(run, args.union_release, args.quick)
    if args.deltascore:
        report["deltascore"] = deltascore_sets(run, args.deltascore, args.quick)
    if args.wq is not None:
        report["wq_verdict"] = wq_verdict(run, args.wq, args.quick)
    if args.ttcw is not None:
        report["ttcw_verdict"] = ttcw_verdict(run, args.ttcw, args.quick)
    if args.human_train is not None:
        report["union_recipe"] = union_recipe(
            run, args.human_train, args.human_heldout, rated, args.quick
        )
    report["commands"] = run.commands
    (args.out / "targets.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "commands"}, indent=1))


if __name__ == "__main__":
    main()
