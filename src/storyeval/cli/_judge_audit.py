"""``storyeval judge-audit``: check a judge's biases before trusting it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from storyeval.cli._common import (
    check_choice,
    compute_settings,
    exit_with,
    threads_option,
    user_errors,
)
from storyeval.cli._judge_options import (
    JUDGE_API_KEY_ENV,
    JUDGE_BACKEND,
    JUDGE_BASE_URL,
    JUDGE_BATCH_SIZE,
    JUDGE_CACHE,
    JUDGE_CONCURRENCY,
    JUDGE_DEVICE,
    JUDGE_MAX_NEW_TOKENS,
    JUDGE_MODEL,
    JUDGE_NO_CACHE,
    JUDGE_PRECISION,
    JUDGE_PREFIX_CACHE,
    JUDGE_REPEATS,
    JUDGE_RUBRIC,
    JUDGE_SCORE,
    JUDGE_TEMPERATURE,
    backend_spec,
)

if TYPE_CHECKING:
    from storyeval.judge.audit_run import AuditInputs

AUDIT_JUDGE = typer.Option(
    None,
    "--judge",
    help="The judge's answers on the stories (storyeval judge's output; repeat for runs with "
    "other seeds: stability). Without it, storyeval runs the judge given by --model, "
    "--base-url or --backend (default: the offline SmolLM2) on the stories, their pairs and "
    "their perturbed copies, and writes its answers beside the audit.",
)
AUDIT_PERTURBED = typer.Option(
    None,
    "--perturbed",
    help="Perturbed stories (storyeval perturb's output, with source_id and techniques).",
)
AUDIT_PERTURBED_JUDGE = typer.Option(
    None, "--perturbed-judge", help="The judge's answers on the --perturbed stories."
)
AUDIT_OWN = typer.Option(
    None,
    "--own-systems",
    help="Comma-separated systems of the judge's own model family (self-preference; when "
    "storyeval runs the judge: the systems named after its model family).",
)
AUDIT_PERTURB = typer.Option(
    None,
    "--perturb",
    help="Running the judge: perturbation techniques, one copy per story and technique "
    "(storyeval perturb's names; 'none': no perturbations). Default: repetition and "
    "reordering (the judge must score the copy lower), typos and synonym (it must not).",
)
AUDIT_PAIRWISE = typer.Option(
    True,
    "--pairwise/--no-pairwise",
    help="Running the judge: also judge each pair of stories of a prompt in both orders "
    "(position bias).",
)


@dataclass
class JudgeToRun:
    """The ``storyeval judge`` options of ``judge-audit`` (used when no --judge is given)."""

    rubric: str
    model: list[str]
    backend: str
    base_url: str | None
    api_key_env: str
    repeats: int
    temperature: float
    max_new_tokens: int
    score: str
    cache: Path | None
    prefix_cache: bool
    batch_size: int
    device: str
    precision: str
    concurrency: int


def judge_audit(
    stories: Path = typer.Option(..., "--stories", help="The judged stories (systems, texts)."),
    output: Path = typer.Option(..., "-o", "--output", help="A directory for audit.csv/.md."),
    judge: list[Path] = AUDIT_JUDGE,
    humans: Path = typer.Option(None, "--humans", help="People's judgments of the stories."),
    comparisons: Path = typer.Option(
        None, "--comparisons", help="The judge's pairwise run (both orders): position bias."
    ),
    perturbed: Path = AUDIT_PERTURBED,
    perturbed_judge: Path = AUDIT_PERTURBED_JUDGE,
    own_systems: str = AUDIT_OWN,
    bootstrap: int = typer.Option(1000, "--bootstrap", min=10, help="Bootstrap replicates."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap and the perturbations."),
    rubric: str = JUDGE_RUBRIC,
    model: list[str] = JUDGE_MODEL,
    backend: str = JUDGE_BACKEND,
    base_url: str = JUDGE_BASE_URL,
    api_key_env: str = JUDGE_API_KEY_ENV,
    repeats: int = JUDGE_REPEATS,
    temperature: float = JUDGE_TEMPERATURE,
    max_new_tokens: int = JUDGE_MAX_NEW_TOKENS,
    score: str = JUDGE_SCORE,
    perturb: str | None = AUDIT_PERTURB,
    pairwise: bool = AUDIT_PAIRWISE,
    cache: Path = JUDGE_CACHE,
    no_cache: bool = JUDGE_NO_CACHE,
    prefix_cache: bool = JUDGE_PREFIX_CACHE,
    batch_size: int = JUDGE_BATCH_SIZE,
    device: str = JUDGE_DEVICE,
    precision: str = JUDGE_PRECISION,
    threads: int = threads_option(),
    concurrency: int = JUDGE_CONCURRENCY,
) -> None:
    """Audit a judge (Judgemark-style): separability of systems, stability across runs,
    position bias, length bias (beyond people's ratings when given), self-preference, and
    sensitivity to perturbations that destroy a story and to edits that keep it. One
    verdict line per check; audit.csv and audit.md in the output directory.

    Give the judge's answers (--judge, --comparisons, --perturbed-judge), or a judge to run
    (--model, --base-url, --backend; default the offline SmolLM2): storyeval then judges the
    stories, each pair of a prompt in both orders, and a perturbed copy of each story per
    --perturb technique, writes those answers to the output directory and audits them."""
    from storyeval.corpus import read_judgments, read_stories
    from storyeval.judge.audit_run import AuditInputs

    if (perturbed is None) != (perturbed_judge is None):
        raise exit_with("error: --perturbed and --perturbed-judge go together")
    if judge and (model or base_url or backend != "llm"):
        raise exit_with("error: give the judge's answers (--judge) or a judge to run, not both")
    if not judge and (comparisons or perturbed):
        raise exit_with(
            "error: --comparisons and --perturbed go with --judge; a judge that storyeval runs "
            "makes its own (--pairwise, --perturb)"
        )
    to_run = JudgeToRun(
        rubric, model or [], backend, base_url, api_key_env, repeats, temperature,
        max_new_tokens, score, None if no_cache else cache, prefix_cache, batch_size,
        device, precision, concurrency,
    )  # fmt: skip
    with user_errors():
        story_list = read_stories(stories)
        if judge:
            inputs = AuditInputs(
                runs=[read_judgments(path) for path in judge],
                comparisons=_records(comparisons) if comparisons else [],
                perturbed=read_stories(perturbed) if perturbed else [],
                perturbed_judgments=read_judgments(perturbed_judge) if perturbed_judge else [],
            )
        else:
            inputs = _run_judge(story_list, to_run, perturb, pairwise, seed, threads, no_cache)
            for path in inputs.write(output):
                typer.echo(f"the judge's answers -> {path}")
        _audit(inputs, story_list, humans, own_systems, bootstrap, seed, output)


def _run_judge(
    stories: list[Any],
    options: JudgeToRun,
    perturb: str | None,
    pairwise: bool,
    seed: int,
    threads: int | None,
    no_cache: bool,
) -> AuditInputs:
    """Run the judge of ``options`` on everything the audit checks."""
    from storyeval.judge import load_rubric
    from storyeval.judge.audit_run import AUDIT_TECHNIQUES, collect_audit_inputs
    from storyeval.judge.backends import JUDGE_BACKENDS, Decoding
    from storyeval.judge.cache import JudgeCache, default_cache_path
    from storyeval.judge.core import JudgeSettings
    from storyeval.perturb import parse_techniques

    check_choice(options.backend, ("llm", *JUDGE_BACKENDS.names()), "--backend")
    check_choice(options.score, ("expected", "argmax"), "--score")
    device, precision = options.device, options.precision
    if not options.base_url:
        device, precision = compute_settings(device, precision, threads)
    if perturb is None:
        techniques: tuple[str, ...] = AUDIT_TECHNIQUES
    else:
        techniques = () if perturb.strip().lower() == "none" else parse_techniques(perturb)
    settings = JudgeSettings(
        score=options.score,  # type: ignore[arg-type]
        repeats=options.repeats,
        seed=seed,
        decoding=Decoding(options.temperature, options.max_new_tokens, seed),
    )
    settings.check()
    rubric = load_rubric(options.rubric)
    spec = backend_spec(
        options.model, options.base_url, options.api_key_env, device, precision,
        options.prefix_cache, options.concurrency, 60.0, 3, options.batch_size, options.backend,
    )  # fmt: skip
    judges = spec.build()
    if len(judges) != 1:
        raise exit_with("error: an audit is of one judge; give one --model")
    cache = None if no_cache else JudgeCache(options.cache or default_cache_path())
    return collect_audit_inputs(
        stories, rubric, judges[0], settings=settings, pairwise=pairwise,
        techniques=techniques, seed=seed, cache=cache, progress=typer.echo,
    )  # fmt: skip


def _audit(
    inputs: AuditInputs,
    stories: list[Any],
    humans: Path | None,
    own_systems: str | None,
    bootstrap: int,
    seed: int,
    output: Path,
) -> None:
    """Audit the judge's answers; print the verdicts and write audit.csv/.md."""
    from storyeval.corpus import read_judgments
    from storyeval.judge.audit import audit_judge, write_audit

    own = [s.strip() for s in (own_systems or "").split(",") if s.strip()]
    result = audit_judge(
        inputs.runs,
        stories,
        humans=read_judgments(humans) if humans else (),
        comparisons=inputs.comparisons,
        perturbed=inputs.perturbed,
        perturbed_judgments=inputs.perturbed_judgments,
        own_systems=own or inputs.own_systems,
        n_boot=bootstrap,
        seed=seed,
    )
    files = write_audit(result, output)
    for line in result.verdicts():
        typer.echo(line)
    for line in inputs.notes:
        typer.echo(f"note: {line}")
    for line in result.skipped:
        typer.echo(f"not checked: {line}")
    typer.echo(f"wrote {', '.join(str(f) for f in files)}")
    if result.signature is not None:
        typer.echo(f"signature: {result.signature.render()}")


def _records(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
