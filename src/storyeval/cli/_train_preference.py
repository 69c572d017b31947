"""``storyeval train preference``: a story reward model from people's judgments."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import typer

from storyeval.cli._common import compute_settings, exit_with, user_error

PREFERENCE_STORIES = typer.Option(
    ..., "--stories", help="The judged stories (.jsonl or .csv): texts, prompts, systems."
)
PREFERENCE_JUDGMENTS = typer.Option(
    None, "--judgments", help="Ratings of those stories (long format; repeat for several files)."
)
PREFERENCE_PAIRS = typer.Option(
    None,
    "--pairs",
    help="Pairwise preferences (comparisons.jsonl of `storyeval import pairwise` or a pairwise "
    "study's export; repeat for several).",
)
PREFERENCE_CRITERION = typer.Option(
    None, "--criterion", help="The rated criterion to learn (default: every one, z-scored)."
)
PREFERENCE_FEATURES = typer.Option(
    "encoder",
    "--features",
    help="encoder (mean-pooled last layer), causal-lm (last state) or none (the "
    "--metric-features alone: a calibrated combination of their scores).",
)
PREFERENCE_MODEL = typer.Option(
    None, "--model", help="The encoder or causal LM: hub name or directory (default: offline)."
)
PREFERENCE_OBJECTIVE = typer.Option(
    "both", "--objective", help="ratings (pointwise), pairs (Bradley-Terry), or both."
)
PREFERENCE_MARGIN = typer.Option(
    0.5, "--margin", min=0, help="Rating gap that makes two stories of a prompt a pair."
)
PREFERENCE_TIE = typer.Option(
    0.0, "--tie-margin", min=0, help="Rating gap up to which two stories are a tie."
)
PREFERENCE_LENGTH = typer.Option(
    True,
    "--length-covariate/--no-length-covariate",
    help="Learn length's effect beside the features and leave it out of the scores.",
)
PREFERENCE_HIDDEN = typer.Option(0, "--hidden", min=0, help="0: a linear head; N: one tanh layer.")
PREFERENCE_L2 = typer.Option(
    "0.01",
    "--l2",
    help="Weight decay of the head (a linear head leaves metric features free), or auto: "
    "chosen by cross-validation within the training stories.",
)
PREFERENCE_RATING_LOSS = typer.Option(
    "mse",
    "--rating-loss",
    help="mse (squared error on each story's mean rating) or ordinal (ordered logit on every "
    "single rating of --criterion: a distribution over the scale).",
)
PREFERENCE_METRICS = typer.Option(
    None,
    "--metric-features",
    help="Metrics whose values join the features, comma-separated (e.g. repeated_ngram_rate, "
    "distinct2, perplexity): what an embedding misses; each metric's weight is printed.",
)
PREFERENCE_METRIC_OPTION = typer.Option(
    None,
    "--metric-option",
    help="NAME.KEY=VALUE: an option of a metric feature (repeat), e.g. perplexity.model=DIR.",
)
PREFERENCE_TUNE_EPOCHS = typer.Option(
    0,
    "--fine-tune-epochs",
    min=0,
    help="0: a head over the frozen encoder; N: fine-tune the encoder N epochs first (each "
    "cross-validation fold tunes its own on its training stories; saved in OUTPUT/encoder).",
)
PREFERENCE_TUNE_LR = typer.Option(3e-5, "--fine-tune-lr", help="The encoder's learning rate.")
PREFERENCE_TUNE_BATCH = typer.Option(
    8, "--fine-tune-batch-size", min=2, help="Stories per fine-tuning step (a prompt's together)."
)
PREFERENCE_TUNE_LENGTH = typer.Option(
    256, "--fine-tune-max-length", min=8, help="Tokens of each story read while fine-tuning."
)
PREFERENCE_NEGATIVES = typer.Option(
    None,
    "--negatives",
    help="Perturbation techniques, comma-separated (e.g. repetition,reordering): each story's "
    "perturbed copy must score below it; held-out copies scored lower are reported per "
    "technique.",
)
PREFERENCE_NEGATIVE_WEIGHT = typer.Option(
    1.0,
    "--negative-weight",
    min=0,
    help="Weight of the copies' ranking loss beside people's judgments (0: only measure them).",
)
PREFERENCE_SYSTEMS = typer.Option(
    None, "--systems", help="Only these systems' stories (repeat), with their judgments."
)
PREFERENCE_EXCLUDE = typer.Option(
    None,
    "--exclude-systems",
    help="Leave these systems' stories and their judgments out (repeat), e.g. human: beside "
    "human stories a model learns mostly to tell them from generated ones.",
)
PREFERENCE_FOLDS = typer.Option(
    5, "--folds", min=0, help="Prompt-disjoint cross-validation folds (0: none)."
)
PREFERENCE_SELECT = typer.Option(
    False,
    "--select-features",
    help="Choose the features inside every training set (nested): the 1, 2, 3 or 5 strongest "
    "--metric-features, all of them, or the encoder's features with them, by a "
    "cross-validation within the training set.",
)
PREFERENCE_GROUP_BY = typer.Option(
    None,
    "--group-by",
    help="A story field whose values the folds keep apart (e.g. author: no author in a "
    "training and a held-out fold); default the prompt.",
)


def preference(
    stories: Path = PREFERENCE_STORIES,
    judgments: list[Path] = PREFERENCE_JUDGMENTS,
    pairs: list[Path] = PREFERENCE_PAIRS,
    output: Path = typer.Option(..., "-o", "--output", help="The model directory to write."),
    criterion: str = PREFERENCE_CRITERION,
    features: str = PREFERENCE_FEATURES,
    model: str = PREFERENCE_MODEL,
    with_prompt: bool = typer.Option(False, "--with-prompt", help="Read the prompt first."),
    objective: str = PREFERENCE_OBJECTIVE,
    margin: float = PREFERENCE_MARGIN,
    tie_margin: float = PREFERENCE_TIE,
    length_covariate: bool = PREFERENCE_LENGTH,
    hidden: int = PREFERENCE_HIDDEN,
    l2: str = PREFERENCE_L2,
    rating_loss: str = PREFERENCE_RATING_LOSS,
    metric_features: str = PREFERENCE_METRICS,
    metric_option: list[str] = PREFERENCE_METRIC_OPTION,
    fine_tune_epochs: int = PREFERENCE_TUNE_EPOCHS,
    fine_tune_lr: float = PREFERENCE_TUNE_LR,
    fine_tune_batch_size: int = PREFERENCE_TUNE_BATCH,
    fine_tune_max_length: int = PREFERENCE_TUNE_LENGTH,
    negatives: str = PREFERENCE_NEGATIVES,
    negative_weight: float = PREFERENCE_NEGATIVE_WEIGHT,
    systems: list[str] = PREFERENCE_SYSTEMS,
    exclude_systems: list[str] = PREFERENCE_EXCLUDE,
    folds: int = PREFERENCE_FOLDS,
    group_by: str = PREFERENCE_GROUP_BY,
    select_features: bool = PREFERENCE_SELECT,
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0, help="Resamples of the CIs."),
    seed: int = typer.Option(0, "--seed", help="Seed of the folds, the head and the CIs."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace another model there."),
    threads: int = typer.Option(None, "--threads", min=1, help="Torch threads."),
    device: str = typer.Option("cpu", "--device", help="Where the features are computed."),
    precision: str = typer.Option("float32", "--precision", help="float32, bfloat16 or float16."),
) -> None:
    """Train a story reward model on people's ratings and preferences (LitBench-style):
    prompt-disjoint cross-validation (held-out pairwise accuracy and story-level Kendall tau
    with intervals, beside a length-only baseline), then the model on every story. Score with
    `storyeval score S --metrics preference -O preference.model=DIR`, or judge with
    `storyeval judge S --backend reward-model --model DIR`."""
    from storyeval.base.errors import StoryevalError
    from storyeval.learn.metric_features import parse_metric_options
    from storyeval.learn.preference import PreferenceConfig, train_preference

    _check_inputs(objective, judgments, pairs)
    device, precision = compute_settings(device, precision, threads)
    try:
        config = PreferenceConfig(
            features=features,  # type: ignore[arg-type]  # validated by the config
            model=model,
            with_prompt=with_prompt,
            criterion=criterion,
            pointwise=objective in ("ratings", "both"),
            pairwise=objective in ("pairs", "both"),
            margin=margin,
            tie_margin=tie_margin,
            length_covariate=length_covariate,
            hidden=hidden,
            l2=_weight_decay(l2),
            seed=seed,
            rating_loss=rating_loss,  # type: ignore[arg-type]
            metric_features=_names(metric_features),
            metric_options=parse_metric_options(metric_option or []),
            fine_tune_epochs=fine_tune_epochs, fine_tune_lr=fine_tune_lr,
            fine_tune_batch_size=fine_tune_batch_size, fine_tune_max_length=fine_tune_max_length,
            negatives=_names(negatives),
            negative_weight=negative_weight,
            group_by=group_by,
            select_features=select_features,
        )  # fmt: skip
        data = _training_data(stories, judgments, pairs, config, systems, exclude_systems)
        trained = train_preference(
            data,
            output,
            config=config,
            folds=folds if folds > 1 else 0,
            n_boot=bootstrap,
            overwrite=overwrite,
            device=device,
            precision=precision,
            progress=typer.echo,
        )
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    _report(trained, data, output)


def _check_inputs(objective: str, judgments: list[Path] | None, pairs: list[Path] | None) -> None:
    """Refuse an unknown objective, or no judgments of either kind."""
    if objective not in ("ratings", "pairs", "both"):
        raise exit_with("error: --objective must be ratings, pairs or both")
    if not judgments and not pairs:
        raise exit_with("error: give --judgments (ratings), --pairs (preferences), or both")


def _training_data(
    stories: Path,
    judgments: list[Path] | None,
    pairs: list[Path] | None,
    config: Any,
    systems: list[str] | None,
    exclude_systems: list[str] | None,
) -> Any:
    """The files' training data, of the systems kept."""
    from storyeval.learn.preference import preference_data

    return preference_data(
        *_read(stories, judgments, pairs),
        config=config,
        systems=systems or None,
        exclude_systems=exclude_systems or (),
    )


def _systems_apart_hint(table: list[dict[str, Any]]) -> str | None:
    """A hint when the model agrees with people far more across systems than within them: it
    then mostly tells the systems apart (human from generated)."""
    found = {row["statistic"]: row["estimate"] for row in table if row["predictor"] == "model"}
    pooled, within = found.get("kendall_tau_b"), found.get("kendall_tau_b_within_system")
    if pooled is None or within is None or pooled - within < 0.15:
        return None
    return (
        f"held-out Kendall {pooled:.2f} over all stories but {within:.2f} within systems: the "
        "model mostly tells the systems apart; to rank stories of the same systems, train on "
        "them (--systems, --exclude-systems) and compare within systems (storyeval correlate "
        "--level within_system)"
    )


def _weight_decay(text: str) -> float | Literal["auto"]:
    """``--l2``: a number, or auto."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--l2 must be a number >= 0 or auto; got {text!r}") from None


def _names(text: str | None) -> tuple[str, ...]:
    """A comma-separated list's names (spaces ignored)."""
    return tuple(name for name in (text or "").replace(" ", "").split(",") if name)


def _read(stories: Path, judgments: list[Path] | None, pairs: list[Path] | None) -> tuple[Any, ...]:
    """The stories, the ratings of every judgment file and the comparisons of every pair file."""
    from storyeval.corpus import read_judgments, read_stories
    from storyeval.meta.comparisons import read_comparisons

    ratings = [j for path in judgments or [] for j in read_judgments(path)]
    comparisons = [
        record for path in pairs or [] for record in read_comparisons(path).to_dict("records")
    ]
    return read_stories(stories), ratings, comparisons


def _report(trained: Any, data: Any, output: Path) -> None:
    """The data, the cross-validation table, the length effect and the signature."""
    decided = sum(1 for _, _, outcome in data.pairs if outcome == 1.0)
    rated = int((data.targets == data.targets).sum())
    judged = len(data.stories) - len(data.negatives)
    typer.echo(
        f"{judged} stories, {rated} with a mean rating, {len(data.pairs)} pairs "
        f"({decided} decided, {len(data.pairs) - decided} ties)"
    )
    for note in trained.summary.get("notes", []):
        typer.echo(f"note: {note}")
    table = trained.summary.get("cross_validation")
    if table:
        import pandas as pd

        typer.echo(f"held out ({trained.summary['folds']} prompt-disjoint folds, 95% CIs):")
        shown = pd.DataFrame(table)
        typer.echo(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    hint = _systems_apart_hint(table or [])
    if hint:
        typer.echo(f"note: {hint}")
    if trained.config.length_covariate:
        typer.echo(
            f"length effect left out: {trained.summary['length_effect']:+.3f} score sd per sd of "
            "log length"
        )
    if "l2_chosen" in trained.summary:
        typer.echo(f"weight decay chosen by cross-validation: {trained.summary['l2_chosen']:g}")
    if "selected_features" in trained.summary:
        chosen = ", ".join(trained.summary["selected_features"])
        typer.echo(f"features chosen on every story (each fold chose its own): {chosen}")
    for name, effect in trained.summary.get("metric_effects", {}).items():
        typer.echo(f"metric feature {name}: {effect:+.3f} score sd per sd of {name}")
    from storyeval.learn.preference import HELDOUT_FILE

    heldout = output / HELDOUT_FILE
    if heldout.is_file():
        typer.echo(
            f"held-out scores: {heldout} (beside metrics: storyeval correlate --scores "
            f"SCORES --scores {heldout} --judgments JUDGMENTS --stories STORIES)"
        )
    typer.echo(f"wrote {output}")
    typer.echo(f"signature: {trained.signature.render()}")
