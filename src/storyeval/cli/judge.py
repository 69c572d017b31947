"""``storyeval judge``, ``storyeval judge-eval``, ``storyeval rank`` and ``storyeval paired``:
LLM judges, judges against people, system rankings from comparisons, paired tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from storyeval.cli._common import (
    aggregate_option,
    block_size_option,
    check_choice,
    compute_settings,
    criteria_map,
    dask_client,
    engine_option,
    exit_with,
    scheduler_option,
    threads_option,
    user_errors,
    workers_option,
)
from storyeval.cli._judge_options import (
    JUDGE_API_KEY_ENV,
    JUDGE_BACKEND,
    JUDGE_BASE_URL,
    JUDGE_BATCH_SIZE,
    JUDGE_CACHE,
    JUDGE_CONCURRENCY,
    JUDGE_DEVICE,
    JUDGE_FIT_TARGET,
    JUDGE_FIT_WEIGHTS,
    JUDGE_MARGIN,
    JUDGE_MAX_COST,
    JUDGE_MAX_NEW_TOKENS,
    JUDGE_MAX_TOKENS_TOTAL,
    JUDGE_MAX_WORDS,
    JUDGE_MODE,
    JUDGE_MODEL,
    JUDGE_NO_CACHE,
    JUDGE_ONE_ORDER,
    JUDGE_OUTPUT,
    JUDGE_PRECISION,
    JUDGE_PREFIX_CACHE,
    JUDGE_PRICE,
    JUDGE_REPEATS,
    JUDGE_RUBRIC,
    JUDGE_SCORE,
    JUDGE_TEMPERATURE,
    JUDGE_TRUNCATE,
    backend_spec,
)

_MODES = ("absolute", "pairwise")


def judge(
    stories: Path = typer.Argument(..., help="A story file (.jsonl or .csv)."),
    output: Path = JUDGE_OUTPUT,
    rubric: str = JUDGE_RUBRIC,
    mode: str = JUDGE_MODE,
    model: list[str] = JUDGE_MODEL,
    backend: str = JUDGE_BACKEND,
    base_url: str = JUDGE_BASE_URL,
    api_key_env: str = JUDGE_API_KEY_ENV,
    repeats: int = JUDGE_REPEATS,
    seed: int = typer.Option(0, "--seed", help="Seed of the sampling and of any random order."),
    temperature: float = JUDGE_TEMPERATURE,
    max_new_tokens: int = JUDGE_MAX_NEW_TOKENS,
    score: str = JUDGE_SCORE,
    one_order: bool = JUDGE_ONE_ORDER,
    margin: float = JUDGE_MARGIN,
    max_words: int = JUDGE_MAX_WORDS,
    truncate: bool = JUDGE_TRUNCATE,
    cache: Path = JUDGE_CACHE,
    no_cache: bool = JUDGE_NO_CACHE,
    prefix_cache: bool = JUDGE_PREFIX_CACHE,
    batch_size: int = JUDGE_BATCH_SIZE,
    device: str = JUDGE_DEVICE,
    precision: str = JUDGE_PRECISION,
    threads: int = threads_option(),
    concurrency: int = JUDGE_CONCURRENCY,
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds per request (endpoint)."),
    retries: int = typer.Option(3, "--retries", min=0, help="Retries with back-off (endpoint)."),
    engine: str = engine_option(),
    scheduler: str = scheduler_option(),
    workers: int = workers_option(),
    block_size: int = block_size_option(),
    fit_weights: Path = JUDGE_FIT_WEIGHTS,
    fit_target: str = JUDGE_FIT_TARGET,
    max_tokens_total: int = JUDGE_MAX_TOKENS_TOTAL,
    max_cost: float = JUDGE_MAX_COST,
    price: str = JUDGE_PRICE,
) -> None:
    """Judge stories with an LLM: a score per rubric criterion, or pairwise preferences in both
    orders. Every parse failure is counted and written beside the output, never imputed.

    Stories are judged in blocks (pairwise: whole prompts); with --engine dask the blocks run
    on a Dask cluster, with the same answers (the answer cache must then be on a file system
    every worker reaches)."""
    from storyeval.judge import load_rubric
    from storyeval.judge.backends import Decoding
    from storyeval.judge.cache import default_cache_path
    from storyeval.judge.core import JudgeSettings

    check_choice(mode, _MODES, "--mode")
    from storyeval.judge.backends import JUDGE_BACKENDS

    check_choice(backend, ("llm", *JUDGE_BACKENDS.names()), "--backend")
    check_choice(score, ("expected", "argmax"), "--score")
    if fit_weights is not None and mode != "absolute":
        raise exit_with("error: --fit-weights fits absolute scores; leave out --mode pairwise")
    if not base_url:
        device, precision = compute_settings(device, precision, threads)
    with user_errors():
        settings = JudgeSettings(
            mode=mode,  # type: ignore[arg-type]
            score=score,  # type: ignore[arg-type]
            repeats=repeats,
            seed=seed,
            decoding=Decoding(temperature, max_new_tokens, seed),
            max_words=max_words,
            truncate=truncate,
            both_orders=not one_order,
            margin=margin,
        )
        settings.check()
        chosen = load_rubric(rubric)
        prices = _prices(price)
        spec = backend_spec(
            model or [], base_url, api_key_env, device, precision, prefix_cache, concurrency,
            timeout, retries, batch_size, backend, max_tokens_total, max_cost, prices,
        )  # fmt: skip
        cache_path = None if no_cache else (cache or default_cache_path())
        client = dask_client(engine, scheduler, workers)
        run = _run(stories, chosen, spec, settings, cache_path, client, block_size)
    _write(run, output, mode)
    _tokens(run, prices, stories)
    if fit_weights is not None:
        _fit(run, chosen, fit_weights, fit_target, output)


def _prices(price: str | None) -> tuple[float, float] | None:
    """``--price IN,OUT`` as two numbers (per million tokens)."""
    if price is None:
        return None
    try:
        given, taken = (float(part) for part in price.split(","))
    except ValueError:
        raise exit_with(
            f"error: --price takes IN,OUT (per million tokens), got {price!r}"
        ) from None
    if given < 0 or taken < 0:
        raise exit_with("error: --price takes prices of zero or more")
    return given, taken


def _tokens(run: Any, prices: tuple[float, float] | None, stories: Path) -> None:
    """The tokens each judge's fresh answers used, their cost at ``prices``, and the
    request failures by kind."""
    from collections import Counter

    from storyeval.corpus import read_stories

    # the story file is read again only when a cost per 1,000 stories is asked for
    count = max(len(read_stories(stories)), 1) if prices is not None and run.tokens else 1
    for judge, (given, taken, cached) in run.tokens.items():
        line = f"tokens ({judge}): {given} prompt ({cached} cached), {taken} completion"
        if prices is not None:
            cost = (given * prices[0] + taken * prices[1]) / 1e6
            line += f"; cost {cost:.4f}, {1000 * cost / count:.4f} per 1,000 stories"
        typer.echo(line)
    kinds = Counter(
        f["status"][len("failed:") :] for f in run.failures if f["status"].startswith("failed:")
    )
    if kinds:
        typer.echo(
            "requests with no answer after the retries: "
            + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        )


def _fit(run: Any, rubric: Any, people: Path, target: str | None, output: Path) -> None:
    """``--fit-weights``: the criteria's weights fitted to people (storyeval jury --checklist)."""
    from storyeval.cli._jury import write_fitted
    from storyeval.corpus import read_judgments
    from storyeval.judge.jury import fit_checklist

    with user_errors():
        fitted = fit_checklist(
            run.judgments,
            read_judgments(people),
            target=target,
            negative=[c.name for c in rubric.criteria if c.negative],
        )
        write_fitted(fitted, output.with_name(output.stem + ".fitted.jsonl"))


def _run(
    stories: Path,
    rubric: Any,
    spec: Any,
    settings: Any,
    cache_path: Path | None,
    client: Any,
    block_size: int,
) -> Any:
    """Judge on the local engine (``client`` None) or on the Dask cluster."""
    if client is None:
        from storyeval.corpus import read_stories
        from storyeval.judge.cache import JudgeCache
        from storyeval.judge.core import judge_blocks

        store = JudgeCache(cache_path) if cache_path is not None else None
        return judge_blocks(
            read_stories(stories),
            rubric,
            spec.build(),
            settings=settings,
            cache=store,
            block_size=block_size,
            progress=lambda line: typer.echo(line, err=True),
        )
    from storyeval.engine.dask import close
    from storyeval.judge.core import judge_source

    try:
        return judge_source(
            stories,
            rubric,
            spec,
            client=client,
            settings=settings,
            cache_path=cache_path,
            block_size=block_size,
        )
    finally:
        close(client)


def _write(run: Any, output: Path, mode: str) -> None:
    """Write the judgments (or comparisons) and the parse failures beside them; report."""
    from storyeval.base.io import write_text_atomic
    from storyeval.corpus import write_judgments

    if mode == "absolute":
        write_judgments(output, run.judgments)
    else:
        write_text_atomic(output, "".join(json.dumps(c) + "\n" for c in run.comparisons))
    failures = output.with_name(output.stem + ".failures.jsonl")
    if run.failures:
        write_text_atomic(failures, "".join(json.dumps(f) + "\n" for f in run.failures))
    _report(run, output, failures)


def _report(run: Any, output: Path, failures: Path) -> None:
    summary = run.summary()
    if not summary.empty:
        typer.echo(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    count = len(run.judgments) or len(run.comparisons)
    typer.echo(f"{count} answers -> {output}; {run.calls} model calls, {run.cached} from the cache")
    if run.failures:
        typer.echo(f"{len(run.failures)} answers did not parse (not imputed) -> {failures}")
    _, agreement = run.ensemble()
    if not agreement.empty:
        typer.echo("agreement among the judges:")
        shown = agreement[["criterion", "method", "estimate", "ci_low", "ci_high", "n"]]
        typer.echo(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for note in run.notes:
        typer.echo(f"note: {note}")
    for name, signature in run.signatures.items():
        typer.echo(f"signature ({name}): {signature.render()}")


def judge_eval(
    judge_file: Path = typer.Option(
        ...,
        "--judge",
        help="Judgments written by storyeval judge (or its comparisons, with --human-pairs).",
    ),
    humans: Path = typer.Option(None, "--humans", help="People's judgments of the same stories."),
    human_pairs: Path = typer.Option(
        None,
        "--human-pairs",
        help="People's pairwise preferences (comparisons.jsonl of storyeval import pairwise); --judge is then a pairwise judge run.",
    ),
    stories: Path = typer.Option(
        None,
        "--stories",
        help="The story file (systems and prompts, for the story and system levels).",
    ),
    comparisons: Path = typer.Option(
        None, "--comparisons", help="A pairwise judge run, for position bias."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="A directory for the tables."),
    bootstrap: int = typer.Option(
        1000, "--bootstrap", help="Bootstrap replicates of the intervals."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
    aggregate: str = aggregate_option(),
    criteria: list[str] = typer.Option(
        None,
        "--criteria",
        help="JUDGE=PEOPLE: compare the judge's criterion with the people's of another name, "
        "e.g. coherence=reasonable (repeat).",
    ),
    alt_epsilon: float = typer.Option(
        0.2,
        "--alt-epsilon",
        help="The alternative annotator test's epsilon: how much lower the judge's winning "
        "rate may be than a rater's (0.2 against experts, 0.1 against crowd workers).",
    ),
) -> None:
    """A judge against people: correlations at three levels beside the human ceiling, the
    judge as one more rater (alpha, kappa), confusion matrices, calibration, consistency, and
    the alternative annotator test (Calderon et al. 2025; alt_test.csv): may the judge replace
    one of the raters?"""
    from storyeval.corpus import read_judgments, read_stories
    from storyeval.judge.evaluate import evaluate_judge, preference_agreement, write_evaluation

    if (humans is None) == (human_pairs is None):
        raise exit_with("error: give --humans (ratings) or --human-pairs (preferences)")
    from storyeval.meta.data import AGGREGATIONS

    check_choice(aggregate, AGGREGATIONS, "--aggregate")
    if human_pairs is not None:
        from storyeval.base.io import claim_output_directory
        from storyeval.cli._tables import write_table
        from storyeval.judge.evaluate import position_bias
        from storyeval.meta.comparisons import read_comparisons

        with user_errors():
            people = read_comparisons(human_pairs).to_dict("records")
            run = _read_jsonl(judge_file)
            table = preference_agreement(run, people)
            position = position_bias(run)
            claim_output_directory(output, "judge evaluation", inputs=[judge_file, human_pairs])
            write_table(table, output / "preferences.csv")
            write_table(position, output / "position.csv")
        typer.echo(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        typer.echo(position.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        return
    with user_errors():
        result = evaluate_judge(
            read_judgments(judge_file),
            read_judgments(humans),
            stories=read_stories(stories) if stories is not None else None,
            comparisons=_read_jsonl(comparisons) if comparisons is not None else None,
            criteria=criteria_map(criteria or []),
            aggregate=aggregate,
            n_boot=bootstrap,
            seed=seed,
            alt_epsilon=alt_epsilon,
        )
        files = write_evaluation(result, output)
    _print_evaluation(result)
    typer.echo(f"tables: {', '.join(sorted(p.name for p in files))} in {output}")


def _print_evaluation(result: Any) -> None:
    """The headline, the spans, the alternative annotator test and the notes of a judge
    evaluation."""
    typer.echo(result.headline().to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if not result.spans.empty:
        typer.echo("spans, the judge against the people's majority:")
        typer.echo(result.spans.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if not result.alt_test.empty:
        typer.echo("alternative annotator test (may the judge replace a rater?):")
        shown = result.alt_test[["criterion", "winning_rate", "advantage_probability", "verdict"]]
        typer.echo(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for note in result.notes:
        typer.echo(f"note: {note}")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


RANK_WEIGHTS = typer.Option(
    None,
    "--weights",
    help="A numeric column weighing each comparison (margin-weighted Bradley-Terry); "
    "'strength' derives |2 p_first - 1| from a judge's run.",
)
RANK_ANCHORS = typer.Option(
    None,
    "--anchors",
    help="A stored ranking (an earlier rank output): its systems keep their Bradley-Terry "
    "strengths, new systems join on the same scale.",
)
RANK_ANCHOR = typer.Option(
    None,
    "--anchor",
    help="An old judge's judgments (long format): PAIRS is then the new judge's judgments, "
    "and its board is re-expressed on the old board's scale from the items both scored (a "
    "monotone map), with the order changes beyond the uncertainty.",
)
RANK_PPI = typer.Option(
    None,
    "--ppi-judge",
    help="A judge's comparisons of every pair (people's in PAIRS being a random subset): also "
    "prediction-powered Bradley-Terry strengths (PPI++), written to OUT-ppi.",
)
RANK_AGGREGATE = typer.Option(
    None,
    "--aggregate",
    help="Combine the raters of each pair by a competence model first: mace or dawid-skene "
    "(Bradley-Terry on posterior-weighted outcomes; every bootstrap replicate draws the "
    "outcomes from the posteriors).",
)
RANK_COVARIATES = typer.Option(
    None,
    "--covariates",
    help="Comma-separated covariates held equal: length (log words) and any metric of "
    "--scores, e.g. length,slop_index (Bradley-Terry with covariates).",
)


def rank(
    pairs: Path = typer.Argument(
        ...,
        help="Comparisons: item_id, prompt_id, system_a, system_b, winner (a system or tie), rater_id, criterion.",
    ),
    output: Path = typer.Option(
        ..., "-o", "--output", help="One row per system and method (.csv or .jsonl)."
    ),
    criterion: str = typer.Option(None, "--criterion", help="Only this criterion's comparisons."),
    ties: str = typer.Option("davidson", "--ties", help="davidson, half or drop."),
    bootstrap: int = typer.Option(
        1000, "--bootstrap", min=0, help="Bootstrap replicates over prompts."
    ),
    confidence: float = typer.Option(0.95, "--confidence", help="Coverage of the intervals."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap and of Elo's orders."),
    matrix: Path = typer.Option(None, "--matrix", help="Write the win-rate matrix here (.csv)."),
    plan: int = typer.Option(
        0,
        "--plan",
        min=0,
        help="Print the N pairs to compare next (least compared, then neighbours).",
    ),
    weights: str = RANK_WEIGHTS,
    anchors: Path = RANK_ANCHORS,
    covariates: str = RANK_COVARIATES,
    stories: Path = typer.Option(
        None, "--stories", help="With --covariates: the compared stories (their texts)."
    ),
    scores: Path = typer.Option(
        None, "--scores", help="With --covariates: metric scores of the stories (long format)."
    ),
    baseline: str = typer.Option(
        None, "--baseline", help="With --covariates: the system of the controlled win rates."
    ),
    aggregate: str = RANK_AGGREGATE,
    anchor: Path = RANK_ANCHOR,
    ppi_judge: Path = RANK_PPI,
) -> None:
    """Rank systems from pairwise comparisons: Bradley-Terry (log-odds, Davidson ties) and
    Elo, with bootstrap intervals over prompts. With --covariates, also the strengths with
    the stories' length (or any metric) held equal, each covariate's effect, and the
    length-controlled win rate against a baseline (OUT-controlled and OUT-covariates). With
    --anchor OLD, a new judge's board (its judgments in PAIRS) on an old judge's scale."""
    if anchor is not None:
        _anchored_board(pairs, anchor, output, stories, criterion, bootstrap, confidence, seed)
        return
    from storyeval.cli._tables import write_table
    from storyeval.meta.comparisons import (
        next_pairs,
        rank_systems,
        read_comparisons,
        win_rate_matrix,
    )

    check_choice(ties, ("davidson", "half", "drop"), "--ties")
    if aggregate is not None:
        check_choice(aggregate, ("mace", "dawid-skene"), "--aggregate")
    with user_errors():
        frame = read_comparisons(pairs)
        table = rank_systems(
            frame,
            criterion=criterion,
            ties=ties,
            n_boot=bootstrap,
            confidence=confidence,
            seed=seed,
            weights=weights,
            anchors=_anchor_table(anchors) if anchors is not None else None,
            aggregate=aggregate,
        )
        write_table(table, output)
        if matrix is not None:
            write_table(win_rate_matrix(frame).reset_index(names="system"), matrix)
    shown = table.drop(columns=["signature"])
    typer.echo(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    typer.echo(f"signature: {table['signature'].iloc[0]}")
    if ppi_judge is not None:
        _ppi_strengths(pairs, ppi_judge, output, criterion, confidence)
    if covariates:
        _controlled(
            pairs, output, criterion, covariates, stories, scores, baseline, bootstrap, seed
        )
    if plan:
        shown = next_pairs(frame, budget=plan)
        typer.echo(f"compare next:\n{shown.to_string(index=False, float_format=_three)}")


def _three(value: float) -> str:
    return f"{value:.3f}"


def _ppi_difference(
    scores: Path, judge: Path, metric: str, system_a: str, system_b: str, stories: Path | None
) -> None:
    """``paired --ppi-judge``: A - B from the judge on every prompt and people on some."""
    from storyeval.meta.comparisons import paired_differences
    from storyeval.meta.ppi import ppi_mean

    with user_errors():
        people = paired_differences(scores, metric, system_a, system_b, stories=stories)
        said = paired_differences(judge, metric, system_a, system_b, stories=stories)
        labelled = said.index.intersection(people.index)
        rest = said.index.difference(people.index)
        found = ppi_mean(people[labelled], said[labelled], said[rest], interval="t")
    typer.echo(
        f"prediction-powered {system_a} - {system_b}: {found.estimate:.4f} "
        f"[{found.ci_low:.4f}, {found.ci_high:.4f}] (PPI++, lam {found.lam:.2f}; people on "
        f"{found.n_labeled} prompts, the judge alone on {found.n_unlabeled}); people alone: "
        f"{found.classical_estimate:.4f} [{found.classical_ci_low:.4f}, {found.classical_ci_high:.4f}]"
    )


def _ppi_strengths(
    pairs: Path, judge: Path, output: Path, criterion: str | None, confidence: float
) -> None:
    """``rank --ppi-judge``: prediction-powered strengths beside people's alone."""
    from storyeval.cli._tables import write_table
    from storyeval.meta.comparisons import read_comparisons
    from storyeval.meta.ppi import ppi_bradley_terry

    with user_errors():
        people, said = read_comparisons(pairs), read_comparisons(judge)
        if criterion is not None:
            people = people[people["criterion"] == criterion]
            said = said[said["criterion"] == criterion]
        table = ppi_bradley_terry(people, said, confidence=confidence)
        target = output.with_name(f"{output.stem}-ppi{output.suffix}")
        write_table(table, target)
    shown = ["system", "estimate", "ci_low", "ci_high", "classical_ci_low", "classical_ci_high"]
    typer.echo("prediction-powered Bradley-Terry (PPI++; the classical columns: people alone):")
    typer.echo(table[shown].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    typer.echo(f"lam {table['lam'].iloc[0]:.3f}; wrote {target}")


def _anchored_board(
    new: Path, old: Path, output: Path, stories: Path | None, criterion: str | None,
    bootstrap: int, confidence: float, seed: int,
) -> None:  # fmt: skip
    """``rank --anchor``: the new judge's per-system means on the old judge's scale."""
    import pandas as pd

    from storyeval.cli._tables import write_table
    from storyeval.corpus import read_judgments, read_stories
    from storyeval.meta.anchoring import anchor_board

    with user_errors():
        systems = {s.id: s.system for s in read_stories(stories)} if stories is not None else {}

        def table(path: Path) -> pd.DataFrame:
            rows = [
                {"item_id": j.item_id, "system": j.extra.get("system") or systems.get(j.item_id), "value": j.value}
                for j in read_judgments(path)
                if criterion is None or j.criterion == criterion
            ]  # fmt: skip
            if not rows:
                raise ValueError(f"{path}: no judgment{' of ' + criterion if criterion else ''}")
            return pd.DataFrame(rows)

        found = anchor_board(
            table(old), table(new), n_boot=bootstrap, confidence=confidence, seed=seed
        )
        board = found.board.assign(signature=found.signature.render())
        write_table(board, output)
    typer.echo(
        board.drop(columns=["signature"]).to_string(index=False, float_format=lambda v: f"{v:.3f}")
    )
    typer.echo(
        f"Kendall tau, old board vs anchored: {found.kendall:.3f} ({found.shared_items} shared items)"
    )
    if found.changes.empty:
        typer.echo("no two systems change order")
    else:
        typer.echo("order changes (beyond_uncertainty: the anchored interval excludes a tie):")
        typer.echo(found.changes.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    typer.echo(f"signature: {found.signature.render()}")


def _anchor_table(path: Path) -> dict[str, float]:
    """System -> Bradley-Terry strength of a stored ranking."""
    import pandas as pd

    table = pd.read_json(path, lines=True) if path.suffix == ".jsonl" else pd.read_csv(path)
    if not {"system", "method", "estimate"} <= set(table.columns):
        raise exit_with(f"error: {path}: not a ranking (needs system, method, estimate)")
    rows = table[table["method"] == "bradley-terry"]
    return {str(r.system): float(r.estimate) for r in rows.itertuples(index=False)}


def _controlled(
    pairs: Path,
    output: Path,
    criterion: str | None,
    covariates: str,
    stories: Path | None,
    scores: Path | None,
    baseline: str | None,
    bootstrap: int,
    seed: int,
) -> None:
    """The covariate-controlled ranking beside the raw one, written next to ``output``."""
    from storyeval.cli._tables import write_table
    from storyeval.corpus import read_stories
    from storyeval.meta.comparisons import read_comparisons
    from storyeval.meta.controlled import controlled_ranking

    if stories is None:
        raise exit_with("error: --covariates needs --stories (the compared stories)")
    with user_errors():
        frame = read_comparisons(pairs)
        if criterion is not None:
            frame = frame[frame["criterion"] == criterion]
        score_frame = _score_frame(scores) if scores is not None else None
        result = controlled_ranking(
            frame,
            read_stories(stories),
            covariates=[c.strip() for c in covariates.split(",") if c.strip()],
            scores=score_frame,
            baseline=baseline,
            n_boot=bootstrap,
            seed=seed,
        )
        controlled = output.with_name(f"{output.stem}-controlled{output.suffix}")
        effects = output.with_name(f"{output.stem}-covariates{output.suffix}")
        write_table(result.systems, controlled)
        write_table(result.covariates, effects)
    shown = result.systems.drop(columns=["signature"])
    typer.echo(f"with {covariates} held equal (win rates against {result.baseline}):")
    typer.echo(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    typer.echo(
        result.covariates.drop(columns=["unit"]).to_string(
            index=False, float_format=lambda v: f"{v:+.3f}"
        )
        + "  (log-odds per sd)"
    )
    typer.echo(f"wrote {controlled} and {effects}")
    typer.echo(f"signature: {result.signature.render()}")


def _score_frame(path: Path) -> Any:
    """Scores as ``item_id``, ``metric``, ``value``."""
    import pandas as pd

    from storyeval.corpus import read_scores

    return pd.DataFrame(
        [{"item_id": s.item_id, "metric": s.metric, "value": s.value} for s in read_scores(path)]
    )


def paired(
    scores: Path = typer.Argument(
        ...,
        help="Scores or judgments (item_id, metric or criterion, value) with system and prompt_id, or a story file given with --stories.",
    ),
    metric: str = typer.Option(
        ..., "--metric", help="The metric (or judged criterion) to compare on."
    ),
    system_a: str = typer.Option(..., "--system-a", help="System A."),
    system_b: str = typer.Option(..., "--system-b", help="System B."),
    stories: Path = typer.Option(
        None, "--stories", help="The story file, when the scores lack system and prompt_id."
    ),
    method: str = typer.Option("bootstrap", "--method", help="bootstrap, permutation or sign."),
    resamples: int = typer.Option(
        10_000, "--resamples", min=100, help="Resamples (bootstrap, permutation)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed."),
    effect: float = typer.Option(
        None,
        "--plan-effect",
        help="Also print the prompts needed to detect this mean difference (with the observed SD).",
    ),
    ppi_judge: Path = typer.Option(
        None,
        "--ppi-judge",
        help="A judge's scores of both systems on every prompt (people's in SCORES on a random "
        "subset): also the prediction-powered mean difference (PPI++).",
    ),
) -> None:
    """Is system A better than system B on a per-story score? Paired over prompts."""
    if ppi_judge is not None:
        _ppi_difference(scores, ppi_judge, metric, system_a, system_b, stories)
    from storyeval.meta.comparisons import paired_test, paired_values, prompts_needed

    check_choice(method, ("bootstrap", "permutation", "sign"), "--method")
    with user_errors():
        a, b = paired_values(scores, metric, system_a, system_b, stories=stories)
        result = paired_test(a, b, method=method, n_resamples=resamples, seed=seed)  # type: ignore[arg-type]
    typer.echo(
        f"{system_a} - {system_b} on {metric}: mean difference {result['mean_difference']:.4f} over "
        f"{result['n']} prompts; {method} p = {result['p_value']:.4g}"
        + (
            f", interval [{result['ci_low']:.4f}, {result['ci_high']:.4f}]"
            if method == "bootstrap"
            else ""
        )
    )
    if effect is not None:
        import numpy as np

        sd = float(np.std(np.asarray(a) - np.asarray(b), ddof=1))
        typer.echo(
            f"prompts needed to detect {effect} (SD {sd:.3f}, alpha .05, power .8): {prompts_needed(effect, sd)}"
        )


def register(app: typer.Typer) -> None:
    """Add the judge, judge-eval, rank and paired commands to the application."""
    app.command(rich_help_panel="LLM judges")(judge)
    app.command(name="judge-eval", rich_help_panel="LLM judges")(judge_eval)
    from storyeval.cli._judge_audit import judge_audit
    from storyeval.cli._jury import jury

    app.command(name="judge-audit", rich_help_panel="LLM judges")(judge_audit)
    app.command(rich_help_panel="LLM judges")(jury)
    app.command(rich_help_panel="Meta-evaluation")(rank)
    app.command(rich_help_panel="Meta-evaluation")(paired)
