"""The options of the commands that run a judge (``storyeval judge``, ``storyeval
judge-audit``), and the judges they describe."""

from __future__ import annotations

from typing import Any

import typer

from storyeval.cli._common import exit_with


def backend_spec(
    models: list[str],
    base_url: str | None,
    api_key_env: str,
    device: str,
    precision: str,
    prefix_cache: bool,
    concurrency: int,
    timeout: float,
    retries: int,
    batch_size: int = 8,
    backend: str = "llm",
    max_tokens_total: int | None = None,
    max_cost: float | None = None,
    price: tuple[float, float] | None = None,
) -> Any:
    """The judges of the run as a :class:`~storyeval.judge.backends.BackendSpec`."""
    from storyeval.judge.backends import BackendSpec

    if base_url is not None and not models:
        raise exit_with("error: --base-url needs --model (the name the server knows)")
    if backend == "reward-model" and (base_url is not None or not models):
        raise exit_with(
            "error: --backend reward-model needs --model DIR (written by storyeval train "
            "preference) and no --base-url"
        )
    return BackendSpec(
        models=tuple(models) if models else (None,),
        base_url=base_url,
        api_key_env=api_key_env,
        device=device,
        precision=precision,
        prefix_cache=prefix_cache,
        concurrency=concurrency,
        timeout=timeout,
        retries=retries,
        batch_size=batch_size,
        kind=backend,
        max_tokens_total=max_tokens_total,
        max_cost=max_cost,
        price=price,
    )


JUDGE_BACKEND = typer.Option(
    "llm",
    "--backend",
    help="llm (a causal LM, local or at --base-url) or reward-model (--model DIR written by "
    "storyeval train preference: ratings and pair probabilities from a model trained on "
    "people's judgments).",
)
JUDGE_MAX_TOKENS_TOTAL = typer.Option(
    None,
    "--max-tokens-total",
    min=1,
    help="Stop asking an endpoint once this many tokens (prompt and completion) were spent: "
    "the questions left are counted as failed (budget) and a later run with the same cache "
    "asks only them.",
)
JUDGE_MAX_COST = typer.Option(
    None,
    "--max-cost",
    help="Stop asking an endpoint once the answers cost this much at --price: the questions "
    "left are counted as failed (budget) and a later run with the same cache asks only them.",
)
JUDGE_PRICE = typer.Option(
    None,
    "--price",
    help="IN,OUT: the endpoint's price per million prompt and completion tokens, for the run "
    "summary's cost per judge and per 1,000 stories.",
)
JUDGE_OUTPUT = typer.Option(
    ..., "-o", "--output", help="Judgments (absolute) or comparisons (pairwise), JSONL."
)
JUDGE_RUBRIC = typer.Option(
    "karpinska",
    "--rubric",
    help="A built-in rubric (hanna, karpinska, callan_foster, checklist, negative: flaws "
    "after EQ-Bench, ttcw: the 14 Torrance tests, writing_quality: WQ's one question) or a "
    "rubric file.",
)
JUDGE_MODE = typer.Option(
    "absolute",
    "--mode",
    help="absolute (a score per criterion) or pairwise (which story of a prompt is better).",
)
JUDGE_MODEL = typer.Option(
    None,
    "--model",
    help="The judge: a hub name or local directory, or the model name at --base-url (repeat for an ensemble). Default: the offline SmolLM2 (not a credible judge).",
)
JUDGE_BASE_URL = typer.Option(
    None, "--base-url", help="An OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1."
)
JUDGE_API_KEY_ENV = typer.Option(
    "OPENAI_API_KEY",
    "--api-key-env",
    help="The environment variable holding the endpoint's API key.",
)
JUDGE_REPEATS = typer.Option(
    1,
    "--repeats",
    min=1,
    help="Samples per item (needs an analyse-first rubric and --temperature > 0).",
)
JUDGE_TEMPERATURE = typer.Option(
    0.0, "--temperature", min=0.0, help="Sampling temperature of written answers (0: greedy)."
)
JUDGE_MAX_NEW_TOKENS = typer.Option(160, "--max-new-tokens", min=1, help="Longest written answer.")
JUDGE_SCORE = typer.Option(
    "expected", "--score", help="expected (over the answer probabilities) or argmax."
)
JUDGE_ONE_ORDER = typer.Option(
    False, "--one-order", help="Pairwise: one seeded random order per pair instead of both."
)
JUDGE_MARGIN = typer.Option(
    0.0, "--margin", help="Pairwise: a preference within 0.5 +- margin is a tie."
)
JUDGE_MAX_WORDS = typer.Option(None, "--max-words", min=1, help="Flag stories longer than this.")
JUDGE_TRUNCATE = typer.Option(
    False, "--truncate", help="Cut flagged stories to --max-words (recorded in the signature)."
)
JUDGE_CACHE = typer.Option(
    None, "--cache", help="The answer cache (default: ~/.cache/storyeval/judge-cache.sqlite)."
)
JUDGE_NO_CACHE = typer.Option(False, "--no-cache", help="Neither read nor write the cache.")
JUDGE_PREFIX_CACHE = typer.Option(
    True,
    "--prefix-cache/--no-prefix-cache",
    help="Local judge: compute the rubric's preamble once and each story once for all "
    "its questions.",
)
JUDGE_BATCH_SIZE = typer.Option(
    8,
    "--batch-size",
    min=1,
    help="Local judge: stories per forward pass on a CPU (batches sorted by length; "
    "scaled by the free memory on a GPU).",
)
JUDGE_DEVICE = typer.Option("cpu", "--device", help="cpu, cuda, cuda:N, mps or auto (local judge).")
JUDGE_PRECISION = typer.Option(
    "float32", "--precision", help="float32, bfloat16 or float16 (GPUs) (local judge)."
)
JUDGE_FIT_WEIGHTS = typer.Option(
    None,
    "--fit-weights",
    help="People's judgments of some of the stories: fit each criterion's weight (checklist "
    "items, flaws) to their rating and write OUTPUT.fitted.jsonl with the weighted sum "
    "(out-of-fold where people rated), its weights and its evaluation (as storyeval jury "
    "--checklist).",
)
JUDGE_FIT_TARGET = typer.Option(
    None,
    "--fit-target",
    help="--fit-weights: the people's criterion to predict (default: their only one, overall, "
    "else the mean of their criteria's z-scores).",
)
JUDGE_CONCURRENCY = typer.Option(4, "--concurrency", min=1, help="Requests in flight (endpoint).")
