"""``storyeval train``: train learned metrics (UNION, an NSP head, NUBIA, a preference model)
and models (ENGEN, rewards) on your own data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from storyeval.cli._common import compute_settings, exit_with, user_error

train_app = typer.Typer(
    help="Train learned metrics on human-written stories (CPU is fine). Re-running the same "
    "command resumes an interrupted run.",
    no_args_is_help=True,
)

_STORIES = typer.Option(..., "--stories", help="Human-written stories (.jsonl or .csv).")
_OUTPUT = typer.Option(..., "-o", "--output", help="The model directory to write.")
_DEV = typer.Option(
    None, "--dev", help="A separate dev story file (default: hold out --dev-fraction)."
)


def _training_config(**values: Any) -> Any:
    from storyeval.learn.trainer import TrainingConfig

    values["bucket"] = not values.pop("no_bucket", False)
    try:
        return TrainingConfig(**values)
    except ValueError as exc:
        raise exit_with(f"error: {exc}") from None


def _set_threads(threads: int | None) -> None:
    from storyeval.models.devices import configure_threads

    configure_threads(threads)


#: the options every ``storyeval train`` command shares (command-line name -> setting)
_COMMON = {
    "precision": "precision",
    "device": "device",
    "no_bucket": "no_bucket",
    "dev": "dev",
    "overwrite": "overwrite",
    "quiet": "quiet",
    "threads": "threads",
    "epochs": "epochs",
    "learning_rate": "learning_rate",
    "head_lr": "head_learning_rate",
    "batch_size": "batch_size",
    "seed": "seed",
    "patience": "patience",
    "eval_every": "eval_every",
    "max_steps": "max_steps",
}


def _common(given: dict[str, Any]) -> dict[str, Any]:
    """The shared options of a train command, from its arguments."""
    return {setting: given[name] for name, setting in _COMMON.items()}


def _train_and_report(
    train: Any,
    stories: Path,
    output: Path,
    config: Any,
    *,
    dev: Path | None,
    overwrite: bool,
    quiet: bool,
    threads: int | None,
    **training: Any,
) -> None:
    """Build the training settings, run ``train`` (``train_union`` or ``train_nsp``) and
    print what it did."""
    from storyeval.corpus import read_stories

    settings = _training_config(**training)
    _set_threads(threads)
    result = train(
        read_stories(stories),
        output,
        config=config,
        training=settings,
        dev_stories=read_stories(dev) if dev is not None else None,
        overwrite=overwrite,
        progress=not quiet,
    )
    _report(result)


def _report(result: Any) -> None:
    training = result.metadata["training"]
    if result.reused:
        typer.echo(f"{result.directory}: already trained with these settings; nothing to do")
    else:
        verb = "resumed and finished" if result.resumed else "trained"
        rate = training.get("examples_per_second")
        typer.echo(
            f"{verb} in {training['seconds']:.1f} s: {training['steps']} steps"
            + (f", {rate:.2f} examples/s" if rate else "")
            + (", stopped early" if training["stopped_early"] else "")
        )
    dev = training["best_dev"]
    shown = ", ".join(f"{key} {value:.4f}" for key, value in dev.items())
    typer.echo(f"dev (best, step {training['best_step']}): {shown}")
    initial = training.get("data", {}).get("initial_dev")
    if initial:
        before = ", ".join(f"{key} {value:.4f}" for key, value in initial.items())
        typer.echo(f"dev (before fine-tuning): {before}")
    typer.echo(f"model: {result.directory}")
    typer.echo(f"signature: {result.signature.render()}")


# options every train command shares
_DEV_FRACTION = typer.Option(0.1, "--dev-fraction", help="Share held out for dev.")
_PATIENCE = typer.Option(2, "--patience", min=1, help="Evaluations without improvement.")
_EVAL_EVERY = typer.Option(
    None, "--eval-every", min=1, help="Evaluate every N steps (default: every epoch)."
)
_MAX_STEPS = typer.Option(None, "--max-steps", min=1, help="Stop after N steps.")
_THREADS = typer.Option(
    None, "--threads", min=1, help="CPU threads for torch (default: the CPUs free at the start)."
)
_DEVICE = typer.Option(
    "cpu", "--device", help="Where to train: cpu, cuda, cuda:N, mps or auto (in the signature)."
)
_PRECISION = typer.Option(
    "float32",
    "--precision",
    help="float32, or bfloat16 autocast for the forward passes (about 2x on CPUs with bf16).",
)
_NO_BUCKET = typer.Option(
    False,
    "--no-bucket",
    help="Plain shuffled batches instead of length-bucketed ones (less padding).",
)
_OVERWRITE = typer.Option(False, "--overwrite", help="Replace a model trained with other settings.")


UNION_MODEL = typer.Option(
    None,
    "--model",
    help="Base encoder: a local directory or a BERT-like hub name "
    "(default: the offline all-MiniLM-L6-v2).",
)
UNION_HEAD_LR = typer.Option(
    None,
    "--head-lr",
    help="Peak learning rate of the new heads (default: --lr, as in the paper); a higher "
    "one shortens the start-up plateau of short CPU runs.",
)
UNION_NO_RECON = typer.Option(
    False, "--no-recon", help="Ablation: train without the reconstruction head."
)
UNION_RECON_SAMPLE = typer.Option(
    "1024",
    "--recon-sample",
    help="The reconstruction softmax of a training step: over the batch's tokens plus N "
    "sampled from the vocabulary (fast), or 'full': the whole vocabulary, as in the paper "
    "(Eq. 4; what the -Recon ablation is measured against).",
)


def _recon_sample(value: str) -> int | None:
    """``--recon-sample``: a count, or None for the full softmax."""
    if value == "full":
        return None
    try:
        count = int(value)
    except ValueError:
        raise ValueError(f"--recon-sample takes a count or 'full', got {value!r}") from None
    return count


UNION_TECHNIQUES = typer.Option(
    None,
    "--techniques",
    help="Techniques negatives are drawn from (comma-separated; default all four).",
)
UNION_WITHOUT = typer.Option(
    None, "--without", help="Ablation: leave out these techniques (comma-separated)."
)
UNION_WINDOW = typer.Option(
    None, "--window", help="Train on windows of this many sentences instead of whole stories."
)
UNION_STRIDE = typer.Option(
    None, "--stride", help="Sentences between window starts (default: --window; 1 = all)."
)
UNION_DELEX = typer.Option(
    False, "--delex", help="Mask character names as [MALE]/[FEMALE]/[NEUTRAL]."
)
UNION_ANTONYMS = typer.Option(
    None,
    "--antonyms",
    help="A ConceptNet-style antonym file (word|||/r/Antonym|||antonym lines, as in the "
    "UNION repository; also /r/NotDesires, /r/NotCapableOf, /r/NotHasProperty) for "
    "substitution, beside WordNet's sparse antonyms.",
)
UNION_SINGLE_SHARE = typer.Option(
    0.0,
    "--single-share",
    help="Share of the stories whose negative is one technique alone, the techniques in turn "
    "(the rest the paper's mixture; 0, the paper, by default). Each technique then gets a "
    "clean training signal: in the mixture, repetition is alone in 5% of the negatives.",
)
UNION_MIX_WEIGHTS = typer.Option(
    None,
    "--mix-weights",
    help="Weights of the techniques in the mixture instead of the paper's (repetition .1, "
    "substitution .3, reordering .4, negation .2), e.g. 'repetition=0.25,substitution=0.25,"
    "reordering=0.25,negation=0.25'. In the paper's mixture a repeated n-gram is rarely a "
    "negative's only cue and is learned last (see the learned-metrics guide).",
)
UNION_RANK_WEIGHT = typer.Option(
    0.0,
    "--rank-weight",
    help="Weight of a pairwise ranking loss beside the paper's (0, the paper, by default): "
    "each story shares a batch with its negatives, which must score below it (RankNet's "
    "logistic loss). Subtle errors such as a repeated n-gram get a direct gradient; see the "
    "learned-metrics guide.",
)
UNION_HELDOUT = typer.Option(
    None,
    "--heldout",
    help="Human stories the model never trains on: after training, each technique's "
    "negatives of them are told from the originals (pairwise accuracy with an interval, "
    "printed and written to DIR/heldout_techniques.csv).",
)
UNION_NEGATIVES_FILE = typer.Option(
    None,
    "--negatives-file",
    help="Use the negatives of a `storyeval perturb` output file (made from these stories, "
    "or windows with --window) instead of drawing them; drawn ones are cached on disk.",
)


@train_app.command("union")
def union(
    stories: Path = _STORIES,
    output: Path = _OUTPUT,
    epochs: int = typer.Option(3, "--epochs", min=1, help="Passes over the data (at most)."),
    seed: int = typer.Option(42, "--seed", help="Seed for the split, negatives and training."),
    model: str = UNION_MODEL,
    learning_rate: float = typer.Option(5e-5, "--lr", help="Peak learning rate."),
    head_lr: float = UNION_HEAD_LR,
    batch_size: int = typer.Option(10, "--batch-size", min=1, help="Examples per step."),
    lam: float = typer.Option(0.1, "--lambda", help="Weight of the reconstruction loss."),
    no_recon: bool = UNION_NO_RECON,
    recon_sample: str = UNION_RECON_SAMPLE,
    techniques: str = UNION_TECHNIQUES,
    without: str = UNION_WITHOUT,
    max_length: int = typer.Option(256, "--max-length", help="Longest input in tokens."),
    window: int = UNION_WINDOW,
    stride: int = UNION_STRIDE,
    no_prompt: bool = typer.Option(False, "--no-prompt", help="Ignore the prompt field."),
    delex: bool = UNION_DELEX,
    negatives: int = typer.Option(1, "--negatives", min=1, help="Negative samples per story."),
    dev: Path = _DEV,
    dev_fraction: float = _DEV_FRACTION,
    patience: int = _PATIENCE,
    eval_every: int = _EVAL_EVERY,
    max_steps: int = _MAX_STEPS,
    threads: int = _THREADS,
    overwrite: bool = _OVERWRITE,
    precision: str = _PRECISION,
    device: str = _DEVICE,
    no_bucket: bool = _NO_BUCKET,
    antonyms: Path = UNION_ANTONYMS,
    negatives_file: Path = UNION_NEGATIVES_FILE,
    heldout: Path = UNION_HELDOUT,
    single_share: float = UNION_SINGLE_SHARE,
    mix_weights: str = UNION_MIX_WEIGHTS,
    rank_weight: float = UNION_RANK_WEIGHT,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Train UNION (Guan & Huang 2020) on human-written stories.

    Negatives are made from your stories by repetition, substitution, reordering and
    negation; the model learns to tell them apart and to reconstruct the originals. Score
    with `storyeval score STORIES --metrics union --option union.model=DIR`.
    """
    from storyeval.learn.union import UnionConfig, train_union

    try:
        config = UnionConfig(
            encoder=model,
            techniques=_chosen_techniques(techniques, without),
            reconstruction=not no_recon,
            recon_sample=_recon_sample(recon_sample),
            lam=lam,
            max_length=max_length,
            use_prompt=not no_prompt,
            delexicalize=delex,
            negatives=negatives,
            window=window,
            stride=stride,
            dev_fraction=dev_fraction,
            perturb=_union_perturb_options(antonyms, mix_weights),
            single_share=single_share,
            rank_weight=rank_weight,
        )
        if negatives_file is not None and (single_share or mix_weights):
            raise ValueError(
                "--single-share and --mix-weights decide how negatives are drawn, and "
                "--negatives-file already holds them: leave out one of them"
            )
    except (ValueError, OSError) as exc:
        raise user_error(exc) from None
    import functools

    run = functools.partial(train_union, negatives=negatives_file)
    _train_and_report(run, stories, output, config, **_common(locals()))
    if heldout is not None:
        _technique_check(output, heldout, config.techniques, seed)


def _chosen_techniques(techniques: str | None, without: str | None) -> tuple[str, ...]:
    """``--techniques`` less ``--without``; ValueError when none is left."""
    from storyeval.perturb import parse_techniques, technique_names

    chosen = list(parse_techniques(techniques))
    if without:
        dropped = set(parse_techniques(without))
        chosen = [name for name in chosen if name not in dropped]
        if not chosen:
            raise ValueError(
                f"--without leaves no technique (all of {', '.join(technique_names())})"
            )
    return tuple(chosen)


def _union_perturb_options(antonyms: Path | None, mix_weights: str | None) -> Any:
    """The perturbation options of ``train union``; a missing or malformed antonym file and
    bad weights raise now."""
    from storyeval.perturb import PerturbOptions, parse_mix_weights
    from storyeval.perturb.lexicon import antonym_file_identity

    if antonyms is not None:
        antonym_file_identity(antonyms)
    return PerturbOptions(
        antonyms_file=str(antonyms) if antonyms else None,
        mix_weights=parse_mix_weights(mix_weights),
    )


def _technique_check(output: Path, heldout: Path, techniques: Any, seed: int) -> None:
    """Per technique, how often the trained model scores a held-out story above its
    negative made by that technique alone, and per edit operation of each technique (an
    n-gram or a whole sentence repeated, ...): printed, and written to
    DIR/heldout_techniques.csv and DIR/heldout_operations.csv."""
    import pandas as pd

    from storyeval.base.errors import StoryevalError
    from storyeval.base.io import write_table
    from storyeval.cli._tables import print_table
    from storyeval.corpus import read_stories
    from storyeval.learn.union_scoring import UnionScorer, heldout_discrimination

    try:
        stories, scorer = read_stories(heldout), UnionScorer(output)
        rows = [
            heldout_discrimination(
                scorer, stories, techniques=[name], seed=seed + 1, by_operation=True
            ).assign(technique=name)
            for name in techniques
        ]
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    table = pd.concat(rows, ignore_index=True)
    pooled = table["group"] == "(all)"
    by_technique = table[pooled].drop(columns="group").reset_index(drop=True)
    by_operation = table[~pooled].rename(columns={"group": "operation"}).reset_index(drop=True)
    write_table(output / "heldout_techniques.csv", by_technique)
    write_table(output / "heldout_operations.csv", by_operation)
    typer.echo(f"held-out stories ({heldout.name}): the original preferred to its negative")
    print_table(by_technique, ["technique", "estimate [ci]", "n_pairs", "p", "accuracy"])
    typer.echo("by edit operation (a negative with several counts for each):")
    print_table(by_operation, ["technique", "operation", "estimate [ci]", "n_pairs", "p"])


@train_app.command("nsp")
def nsp(
    stories: Path = _STORIES,
    output: Path = _OUTPUT,
    epochs: int = typer.Option(2, "--epochs", min=1, help="Passes over the data (at most)."),
    seed: int = typer.Option(42, "--seed", help="Seed for the split, pairs and training."),
    model: str = typer.Option(
        None,
        "--model",
        help="Base BERT model: a local directory or a hub name "
        "(default: the offline all-MiniLM-L6-v2).",
    ),
    learning_rate: float = typer.Option(5e-5, "--lr", help="Peak learning rate."),
    head_lr: float = typer.Option(
        None, "--head-lr", help="Peak learning rate of the new NSP head (default: --lr)."
    ),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Pairs per step."),
    max_length: int = typer.Option(
        128, "--max-length", help="Longest input in tokens (siamese: each text)."
    ),
    architecture: str = typer.Option(
        "auto",
        "--architecture",
        help="cross (BERT NSP head on the pair), siamese (cosine of mean-pooled sentence "
        "embeddings) or auto: cross when the base model has a trained NSP head, else siamese.",
    ),
    no_prompt: bool = typer.Option(
        False, "--no-prompt", help="Do not pair the prompt with the story."
    ),
    dev: Path = _DEV,
    dev_fraction: float = _DEV_FRACTION,
    patience: int = _PATIENCE,
    eval_every: int = _EVAL_EVERY,
    max_steps: int = _MAX_STEPS,
    threads: int = _THREADS,
    overwrite: bool = _OVERWRITE,
    precision: str = _PRECISION,
    device: str = _DEVICE,
    no_bucket: bool = _NO_BUCKET,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Train a next-sentence-prediction head (BERT's NSP objective) on a story corpus.

    The nsp_prompt / nsp_prev metrics use the directory with --option nsp.model=DIR. With the
    offline sentence encoder the head is siamese (cosine of mean-pooled embeddings); a cross
    head also loads with BertForNextSentencePrediction.from_pretrained(DIR).
    """
    from storyeval.learn.nsp import NspConfig, train_nsp

    try:
        config = NspConfig(
            encoder=model,
            max_length=max_length,
            use_prompt=not no_prompt,
            dev_fraction=dev_fraction,
            architecture=architecture,
        )
    except ValueError as exc:
        raise exit_with(f"error: {exc}") from None
    _train_and_report(train_nsp, stories, output, config, **_common(locals()))


_NUBIA_AGGREGATOR = typer.Option(
    "linear",
    "--aggregator",
    help="linear (-LREG), mlp (-NN: one hidden layer of 10 units, reading Kane et al.'s "
    "'10 hidden layers' as units) or mlp-deep (ten hidden layers of 10 units, the literal "
    "reading).",
)


_NUBIA_ABLATION = typer.Option(
    None,
    "--ablation",
    help="Write Kane et al.'s (2020) Table 5 here: held-out correlations of the aggregator on "
    "each subset of the feature groups SS, LI, SI.",
)
_NUBIA_ABLATION_BY = typer.Option(
    None, "--ablation-by", help="A story field to break the ablation down by (language_pair)."
)


def _nubia_ablation(
    table: Any, stories: Any, output: Path, aggregator: str, folds: int, seed: int, by: str | None
) -> None:
    from storyeval.base.io import write_table
    from storyeval.learn.nubia import feature_ablation

    found = feature_ablation(table, stories, aggregator=aggregator, folds=folds, seed=seed, by=by)
    write_table(output, found)
    overall = found[found["group"] == ("AVG" if by else "all")]
    for _, row in overall.iterrows():
        typer.echo(f"ablation {row['subset']}: Pearson {row['pearson']:.3f}")


_NUBIA_NLI = typer.Option(
    None,
    "--nli",
    help="An NLI classifier (hub name or directory, e.g. roberta-large-mnli); default: "
    "zero-shot NLI with the causal LM (weaker; named in the signature).",
)

_NUBIA_FEATURES = typer.Option(
    "6dim",
    "--features",
    help="6dim (the paper's: STS similarity, NLI one way, two perplexities), 8dim (and "
    "the lengths), both-ways (NLI both ways) or both-ways+lengths.",
)

_NUBIA_STS = typer.Option(
    None,
    "--sts",
    help="An STS cross-encoder for the similarity (hub name or directory, e.g. "
    "cross-encoder/stsb-roberta-large); default: the encoder's cosine (named in the "
    "signature).",
)

_NUBIA_GET_FEATURES = typer.Option(
    None, "--get-features", help="Write every feature per story (and the held-out prediction)."
)


@train_app.command("nubia")
def nubia(
    stories: Path = _STORIES,
    judgments: Path = typer.Option(..., "--judgments", help="Human judgments of those stories."),
    output: Path = _OUTPUT,
    criterion: str = typer.Option(
        None, "--criterion", help="The criterion to learn (needed when there are several)."
    ),
    aggregator: str = _NUBIA_AGGREGATOR,
    calibration: str = typer.Option(
        "self", "--calibration", help="self (divide by the candidate against itself) or clip."
    ),
    nli: str = _NUBIA_NLI,
    encoder: str = typer.Option(
        None, "--encoder", help="Encoder for similarity (default offline)."
    ),
    lm: str = typer.Option(None, "--lm", help="Causal LM for perplexity (default offline)."),
    features: str = _NUBIA_FEATURES,
    lengths: bool = typer.Option(False, "--lengths", help="Same as --features 8dim."),
    sts: str = _NUBIA_STS,
    folds: int = typer.Option(5, "--folds", min=2, help="Cross-validation folds."),
    seed: int = typer.Option(0, "--seed", help="Seed of the folds and the MLP."),
    get_features: Path = _NUBIA_GET_FEATURES,
    threads: int = _THREADS,
    device: str = _DEVICE,
    precision: str = _PRECISION,
    ablation: Path = _NUBIA_ABLATION,
    ablation_by: str = _NUBIA_ABLATION_BY,
) -> None:
    """Train NUBIA (Kane et al. 2020): features -> aggregator -> calibrator, on human judgments
    of stories that have references. Prints held-out correlations; score with
    `storyeval score S --metrics nubia --option nubia.model=DIR`. --ablation writes the
    paper's Table 5 (the aggregator on each subset of the feature groups)."""
    from storyeval.base.errors import StoryevalError
    from storyeval.base.io import write_table
    from storyeval.corpus import read_judgments, read_stories
    from storyeval.learn.nubia import train_nubia

    device, precision = compute_settings(device, precision, threads)
    try:
        model, table = train_nubia(
            read_stories(stories),
            read_judgments(judgments),
            output,
            criterion=criterion,
            aggregator=aggregator,
            calibration=calibration,
            encoder=encoder,
            nli=nli,
            lm=lm,
            features="8dim" if lengths and features == "6dim" else features,
            sts=sts,
            folds=folds,
            seed=seed,
            device=device,
            precision=precision,
        )
        if get_features is not None:
            write_table(get_features, table)
        if ablation is not None:
            _nubia_ablation(
                table, read_stories(stories), ablation, aggregator, folds, seed, ablation_by
            )
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    report = model.report
    typer.echo(
        f"held-out ({report['folds']}-fold {report.get('split', 'by story')}, {report['n']} "
        f"stories, {report['criterion']}): "
        f"Pearson {report['heldout_pearson']:.3f}, Spearman {report['heldout_spearman']:.3f}, "
        f"Kendall {report['heldout_kendall']:.3f}"
    )
    typer.echo(f"model: {output}")
    typer.echo(f"signature: {model.signature.render()}")


_ENGEN_TEXTS = typer.Option(
    ...,
    "--texts",
    help="Annotated texts (.jsonl with id, text, mentions), a CoNLL-2012 file (*conll), or "
    "a story file (mentions then detected approximately). Mentions of more than three words "
    "become their head word (section 3.4).",
)
_ENGEN_VARIANT = typer.Option(
    "engen", "--variant", help="engen, s2sa (no entities) or entitynlm (no previous sentence)."
)
_ENGEN_COMBINE = typer.Option(
    "max",
    "--combine",
    help="max (parameter-free max pooling of the contexts, the thesis' Eq. 3.5) or tanh "
    "(a learned combination, storyeval before 0.4.0).",
)
_ENGEN_SOFTMAX = typer.Option(
    "class",
    "--softmax",
    help="class (a class-factored softmax over word classes estimated from the training texts, "
    "as the thesis) or full.",
)
_ENGEN_CLASSES = typer.Option(160, "--classes", min=1, help="Word classes (the thesis: 160).")
_ENGEN_VOCABULARY = typer.Option(
    None, "--vocabulary", min=1, help="At most this many words (default: no cap)."
)
_ENGEN_MIN_COUNT = typer.Option(
    10, "--min-count", min=1, help="Words seen fewer times become <unk> (the thesis: 10)."
)
_ENGEN_CASE = typer.Option(
    True, "--lowercase/--keep-case", help="Downcase the words (as the thesis)."
)
_ENGEN_NUMBERS = typer.Option(
    True, "--num/--keep-numbers", help="Numbers become NUM (as the thesis)."
)
_ENGEN_SEGMENT = typer.Option(
    50,
    "--segment-sentences",
    min=0,
    help="Train on segments of at most N sentences (the thesis: 50; 0: whole texts).",
)
_ENGEN_OPTIMIZER = typer.Option(
    "sgd", "--optimizer", help="sgd (the thesis, with --lr 0.1) or adam (try --lr 3e-3)."
)


@train_app.command("engen")
def engen(
    texts: Path = _ENGEN_TEXTS,
    output: Path = _OUTPUT,
    variant: str = _ENGEN_VARIANT,
    combine: str = _ENGEN_COMBINE,
    softmax: str = _ENGEN_SOFTMAX,
    classes: int = _ENGEN_CLASSES,
    epochs: int = typer.Option(3, "--epochs", min=1, help="Passes over the texts."),
    embedding: int = typer.Option(
        512, "--embedding", min=1, help="Word embedding size (the thesis: 512)."
    ),
    hidden: int = typer.Option(
        512, "--hidden", min=1, help="LSTM and entity size (the thesis: 512)."
    ),
    dropout: float = typer.Option(0.0, "--dropout", help="Dropout (the thesis names none)."),
    vocabulary: int = _ENGEN_VOCABULARY,
    min_count: int = _ENGEN_MIN_COUNT,
    lowercase: bool = _ENGEN_CASE,
    numbers: bool = _ENGEN_NUMBERS,
    segment_sentences: int = _ENGEN_SEGMENT,
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Texts per step."),
    optimizer: str = _ENGEN_OPTIMIZER,
    learning_rate: float = typer.Option(0.1, "--lr", help="Learning rate."),
    max_steps: int = typer.Option(None, "--max-steps", min=1, help="Stop after N steps."),
    seed: int = typer.Option(0, "--seed", help="Seed of the split and the initialisation."),
    fmt: str = typer.Option("auto", "--format", help="auto, annotated, conll or stories."),
    device: str = _DEVICE,
    threads: int = _THREADS,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No line per step."),
) -> None:
    """Train ENGEN (Clark et al. 2018; Clark (2021), chapter 3) or an ablation on texts with entity
    mentions and coreference: an LSTM language model with previous-sentence attention and
    dynamic entity representations, trained on words, mention starts, entities and lengths.
    Then `storyeval generate PROMPTS --model DIR` and `storyeval entity-eval mentions|selection
    --model DIR`. Training and data follow the thesis (sections 3.3-3.4: SGD at 0.1, a
    class-factored softmax over 160 classes, downcased words, NUM, words seen fewer than 10
    times as <unk>, 50-sentence segments, 512 dimensions; --embedding 64 --hidden 128 for a
    quick CPU run). The epoch with the best dev log-likelihood is kept."""
    from storyeval.base.errors import StoryevalError
    from storyeval.entities import read_entity_texts
    from storyeval.tuning.engen import EngenConfig, train_engen

    _set_threads(threads)
    try:
        config = EngenConfig(
            variant=variant,
            combine=combine,
            softmax=softmax,
            classes=classes,
            epochs=epochs,
            embedding=embedding,
            hidden=hidden,
            dropout=dropout,
            vocabulary=vocabulary,
            min_count=min_count,
            lowercase=lowercase,
            numbers=numbers,
            segment_sentences=segment_sentences,
            batch_size=batch_size,
            optimizer=optimizer,
            learning_rate=learning_rate,
            seed=seed,
        )
        annotated, source = read_entity_texts(texts, fmt=fmt)
        model = train_engen(
            annotated,
            config=config,
            source=source,
            progress=not quiet,
            max_steps=max_steps,
            device=_device(device),
        )
        model.save(output)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    _report_engen(model, source, output)


def _report_engen(model: Any, source: str, output: Path) -> None:
    """The per-epoch lines, the model's path and its signature."""
    for row in model.history:
        typer.echo(
            f"epoch {row['epoch']}: train word NLL {row['train_word_nll']:.3f}, dev perplexity "
            f"{row['dev_perplexity']:.1f}, dev entity NLL/word {row['dev_entity_nll']:.3f} "
            f"({row['seconds']:.0f} s){' <- kept (best dev)' if row.get('kept') else ''}"
        )
    typer.echo(f"vocabulary: {len(model.vocab)} words (with <unk>, <s>, </s>)")
    if source == "detected":
        typer.echo("note: mentions come from storyeval's approximate detector, not annotations")
    typer.echo(f"model: {output}")
    typer.echo(f"signature: {model.signature.render()}")


def _device(device: str) -> str:
    """The resolved device (a bad or missing one is a one-line error)."""
    from storyeval.models.devices import resolve_device

    try:
        return resolve_device(device)
    except ValueError as exc:
        raise exit_with(f"error: {exc}") from None


def _reward_options(metric: str, assignments: list[str] | None) -> dict[str, Any]:
    """The metric options the user set (typed and validated as `storyeval score` does)."""
    from storyeval.metrics.registry import parse_option_assignments, resolve_options

    parsed = parse_option_assignments(assignments or [])
    if not parsed or metric.startswith("judge:"):
        return {}
    resolved = resolve_options([metric], parsed)[metric]
    keys = {name.partition(".")[2] for name in parsed}
    return {key: resolved[key] for key in sorted(keys)}


_PROMPTS = typer.Option(
    ...,
    "--prompts",
    help="Prompts file (.jsonl or .csv): id and prompt; reference (or story) for metrics that "
    "need one and for maximum-likelihood steps.",
)


REWARD_ALGORITHM = typer.Option(
    "grpo",
    "--algorithm",
    help="grpo or rloo (TRL's trainers), or scst (the thesis': self-critical REINFORCE "
    "with the greedy decode as the baseline, a mixed loss with MLE, the best validation "
    "checkpoint kept).",
)
REWARD_VALIDATION = typer.Option(
    None,
    "--validation",
    help="Validation prompts: their reward before and after; scst keeps the weights with "
    "the best (default for scst: a fifth of the prompts held out).",
)
REWARD_GAMMA_START = typer.Option(
    0.97, "--gamma-start", help="scst: the policy-gradient weight at the first step."
)
REWARD_GAMMA_END = typer.Option(
    1.0, "--gamma-end", help="scst: the weight at the last step (1 - weight: MLE)."
)
REWARD_MLE_FORM = typer.Option(
    "sum",
    "--mle-form",
    help="scst: the MLE term per reference as the sum of its token NLLs (Clark 2021, Eq. 5.6) "
    "or their mean.",
)
REWARD_EVAL_EVERY = typer.Option(
    5, "--eval-every", min=1, help="scst: steps between validation scorings."
)


def _print_reward(spec: Any, result: Any) -> None:
    typer.echo(
        f"mean reward ({spec.describe()}) on the training prompts: {result.reward_before:.4f} "
        f"before, {result.reward_after:.4f} after ({result.seconds:.0f} s)"
    )
    if result.validation_before is not None:
        typer.echo(
            f"on the validation prompts: {result.validation_before:.4f} before, "
            f"{result.validation_after:.4f} after"
        )
    if result.best_step is not None:
        typer.echo(f"kept the weights of step {result.best_step} (best validation reward)")


@train_app.command("reward")
def reward(
    prompts: Path = _PROMPTS,
    output: Path = _OUTPUT,
    metric: str = typer.Option(
        "sms",
        "--metric",
        help="The reward: a registered metric (sms, bertscore_f, union, ...) or "
        "judge:RUBRIC:CRITERION (an LLM judge's score).",
    ),
    option: list[str] = typer.Option(
        None, "--option", "-O", help="NAME.KEY=VALUE for the metric (repeat)."
    ),
    judge_model: str = typer.Option(
        None, "--judge-model", help="With a judge reward: the judge's causal LM."
    ),
    model: str = typer.Option(
        None, "--model", help="The causal LM to train (default: the offline SmolLM2)."
    ),
    algorithm: str = REWARD_ALGORITHM,
    validation: Path = REWARD_VALIDATION,
    gamma_start: float = REWARD_GAMMA_START,
    gamma_end: float = REWARD_GAMMA_END,
    eval_every: int = REWARD_EVAL_EVERY,
    mle_form: str = REWARD_MLE_FORM,
    steps: int = typer.Option(20, "--steps", min=1, help="Policy-gradient steps."),
    batch_size: int = typer.Option(
        4, "--batch-size", min=2, help="Continuations per step (a multiple of --generations)."
    ),
    generations: int = typer.Option(
        4, "--generations", min=2, help="Continuations per prompt, compared with each other."
    ),
    max_new_tokens: int = typer.Option(48, "--max-new-tokens", min=1, help="Tokens each."),
    learning_rate: float = typer.Option(2e-5, "--lr", help="Learning rate."),
    beta: float = typer.Option(0.0, "--beta", help="KL penalty towards the initial model."),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature."),
    mle_steps: int = typer.Option(
        0, "--mle-steps", min=0, help="Maximum-likelihood steps on the references first."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the sampling and the training."),
    device: str = _DEVICE,
    threads: int = _THREADS,
) -> None:
    """Fine-tune a causal LM with a storyeval metric as the reward (Clark 2021, chapter 5) using
    TRL's policy-gradient trainers (storyeval[rl]). Prints the mean reward of seeded
    continuations of the training prompts before and after; the directory is a Hugging Face
    checkpoint with a signature naming the reward (`storyeval generate --model DIR`)."""
    from storyeval.base.errors import StoryevalError
    from storyeval.generate import read_prompts
    from storyeval.tuning.reward import RewardSpec, RewardTraining, train_reward

    device = _device(device)
    _set_threads(threads)
    try:
        settings = RewardTraining(
            algorithm=algorithm,
            steps=steps,
            batch_size=batch_size,
            num_generations=generations,
            max_new_tokens=max_new_tokens,
            learning_rate=learning_rate,
            beta=beta,
            temperature=temperature,
            mle_steps=mle_steps,
            gamma_start=gamma_start,
            gamma_end=gamma_end,
            eval_every=eval_every,
            mle_form=mle_form,
            seed=seed,
        )
        spec = RewardSpec(metric, _reward_options(metric, option), judge_model)
        result = train_reward(
            read_prompts(prompts),
            output,
            reward=spec,
            model=model,
            settings=settings,
            device=device,
            validation=read_prompts(validation) if validation is not None else None,
        )
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    _print_reward(spec, result)
    typer.echo(f"model: {output}")
    typer.echo(f"signature: {result.signature.render()}")


_MLE_VALIDATION = typer.Option(
    None,
    "--validation",
    help="Prompts with references to choose the checkpoint by: the lowest validation "
    "cross-entropy is kept.",
)
_MLE_EVAL_EVERY = typer.Option(
    None, "--eval-every", min=1, help="Steps between validations (default: a fifth of --steps)."
)


@train_app.command("mle")
def mle(
    prompts: Path = _PROMPTS,
    output: Path = _OUTPUT,
    model: str = typer.Option(
        None, "--model", help="The causal LM to train (default: the offline SmolLM2)."
    ),
    steps: int = typer.Option(20, "--steps", min=1, help="Training steps."),
    learning_rate: float = typer.Option(5e-5, "--lr", help="Learning rate."),
    seed: int = typer.Option(0, "--seed", help="Seed."),
    device: str = _DEVICE,
    threads: int = _THREADS,
    validation: Path = _MLE_VALIDATION,
    eval_every: int = _MLE_EVAL_EVERY,
) -> None:
    """The baseline of `train reward`: the same model fine-tuned by maximum likelihood on the
    prompts' references only (TRL's SFTTrainer), saved the same way. With --validation, the
    checkpoint kept is the one with the lowest validation cross-entropy (Clark 2021)."""
    from storyeval.base.errors import StoryevalError
    from storyeval.generate import read_prompts
    from storyeval.tuning.reward import train_mle

    device = _device(device)
    _set_threads(threads)
    try:
        signature = train_mle(
            read_prompts(prompts),
            output,
            model=model,
            steps=steps,
            learning_rate=learning_rate,
            seed=seed,
            device=device,
            validation=read_prompts(validation) if validation is not None else None,
            eval_every=eval_every,
        )
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    if validation is not None:
        _print_selection(output)
    typer.echo(f"model: {output}")
    typer.echo(f"signature: {signature.render()}")


def _print_selection(output: Path) -> None:
    import json

    from storyeval.learn.trainer import METADATA_FILE

    training = json.loads((output / METADATA_FILE).read_text(encoding="utf-8"))["training"]
    losses = ", ".join(f"{step}: {loss:.4f}" for step, loss in training["validation_loss"])
    typer.echo(f"validation cross-entropy by step: {losses}")
    typer.echo(f"kept the checkpoint of step {training['best_step']}")


def register(app: typer.Typer) -> None:
    """Add the ``train`` commands to the application."""
    from storyeval.cli._train_preference import preference

    train_app.command("preference")(preference)
    app.add_typer(train_app, name="train", rich_help_panel="Learned metrics")
