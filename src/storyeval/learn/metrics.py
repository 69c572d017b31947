"""Learned metrics trained with ``storyeval train``: UNION (Guan & Huang 2020), NUBIA (Kane et
al. 2020) and BERT-NSP-1/2 (Callan and Foster 2023: the probability, under a BERT model with a
trained next-sentence-prediction head, that each sentence follows the prompt / the previous
sentence, averaged; the offline encoder has no trained head, so these metrics refuse with an
error naming a hub model that has one and the storyeval command that trains one). The metric
registry imports this module by name with its built-in metrics
(:data:`storyeval.metrics.registry.OTHER_BUILTIN_MODULES`), so the metrics layer needs
nothing of the training code.

``union`` scores each story with a UNION model trained on human-written stories
(``storyeval train union --stories HUMAN.jsonl -o DIR``): the probability, in [0, 1], that the
story is human-written rather than a perturbation. ``nubia`` scores a story against its
reference with a NUBIA aggregator (``storyeval train nubia``). Both need the trained model
directory (``--option union.model=DIR``), so neither is in the default suite.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np

from storyeval.base.errors import ModelLoadError
from storyeval.metrics.cards import CF, MetricCard
from storyeval.metrics.coherence import CoherenceScores, Split, text_pairs
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.embedding import Device, Precision
from storyeval.metrics.function import (
    INJECTED,
    Ids,
    Opt,
    Prompts,
    References,
    Scores,
    Texts,
    metric,
)


@dataclass(frozen=True)
class LearnedScores(Scores):
    """A trained model's score of each text (its identity and training settings signed)."""


@metric(
    "union",
    description="UNION: probability that the story is human-written, from a model trained on "
    "human stories and their perturbations (Guan & Huang 2020)",
    families=("union", "learned"),
    model="checkpoint",
    value_range=(0.0, 1.0),
    unavailable_offline="needs a trained UNION model: storyeval train union --stories HUMAN.jsonl -o DIR",
    card=MetricCard(
        measures=(
            "UNION is a learned, unreferenced metric: the probability that a story was "
            "written by a human rather than being a perturbation of a human story. It is "
            "trained on *your* human-written stories and negative samples made from them by "
            "repetition, substitution (WordNet antonyms, or a ConceptNet-style file with "
            "`--antonyms`; corpus keywords; sentences of other stories), reordering and "
            "negation alteration, mixed as in the paper (1-4 techniques with probabilities "
            ".5/.2/.2/.1; technique weights .1/.3/.4/.2). An auxiliary head learns to "
            "reconstruct the original story from the perturbed one (loss = BCE + 0.1 x "
            "reconstruction NLL; in training the reconstruction softmax runs over the batch's "
            "word pieces plus 1,024 sampled ones, and the head shares the encoder's input "
            "embeddings, so a step costs about what the encoder costs). Train a model with "
            "`storyeval train union --stories HUMAN.jsonl -o DIR`; the learned-metrics guide gives a recipe "
            "for a corpus of a few thousand stories on a CPU. That recipe departs from the paper "
            "in two settings of its own (`--mix-weights` with repetition at 0.4, and "
            "`--rank-weight 1`, a pairwise ranking loss between each story and its negatives, "
            "RankNet's (Burges et al. 2005)), with which every technique is learned, a repeated "
            "n-gram included; the model's signature records both (the weights through the "
            "negatives file's hash when the negatives come from `storyeval perturb`)."
        ),
        read=(
            "A score compares a story with what the model learned of *its training stories*: "
            "a story far from them in genre or length may score low for that reason alone "
            "(dataset drift, the paper's Table 6). Compare systems on the same prompts, with "
            "the same model (same signature). Stories longer than the model's `max_length` "
            "tokens are cut, and the run notes how many were."
        ),
        papers=(
            "Trained on 88,344 ROCStories with BERT-base, UNION reaches Pearson 0.3687 / "
            "Spearman 0.4599 / Kendall 0.3386 with human judgments on 400 generated ROC "
            "stories (0.3101 / 0.4027 / 0.2927 without reconstruction), and 0.3663 / 0.4493 / "
            "0.3293 on WritingPrompts (Guan & Huang 2020, Table 5). Leaving out reordering "
            "costs the most (Pearson 0.2302, Table 7)."
        ),
        limits=(
            "The model is only as good as its training corpus: on the 60 example stories and "
            "a few CPU minutes it learns the negation cue and repetition, while substitution "
            "and reordering stay at chance (see `benchmarks/bench_union.py`); the paper used "
            "tens of thousands of stories. Perturbations miss some errors (semantic "
            "repetition, emotional inconsistency; the paper's Table 11), and some perturbed "
            "stories remain reasonable (reordering sentences without temporal links). WordNet "
            "stands in for ConceptNet for keywords and antonyms unless you pass a ConceptNet "
            "antonym file (`--antonyms`, the UNION repository's format)."
        ),
        refs="Guan and Huang (2020), UNION: An Unreferenced Metric for Evaluating Open-ended Story Generation (EMNLP).",
        notes=(
            "Fields: `story`; the `prompt` (leading context) is the first segment of the "
            "input when the model was trained with prompts (the default). No reference. "
            "Model: a directory written by `storyeval train union` (`union.model`; none "
            "offline until you train one).\n"
            "\n"
            "The signature records the trained weights' hash (`model:DIR@HASH`), the base "
            "encoder, the techniques, whether the reconstruction head was trained, "
            "`max_length`, prompt use, delexicalization, the seed and the hash of the "
            "training stories."
        ),
    ),
)
def union(
    texts: Texts,
    prompts: Prompts | None = None,
    *,
    model: Annotated[
        str | None,
        Opt("directory written by `storyeval train union`", model=True, required=True),
    ] = None,
    batch_size: Annotated[int, Opt("stories per forward pass", minimum=1, in_signature=False)] = 32,
    scoring: ScoringContext = INJECTED,
    device: str | None = None,
    precision: str | None = None,
    progress: bool = False,
) -> LearnedScores:
    """UNION (Guan and Huang 2020): the probability that each text (read after its prompt, as
    the model was trained) is human-written; long texts are scored in sentence windows.

    Parameters
    ----------
    model : str or UnionScorer
        A directory written by ``storyeval train union``, or
        :func:`storyeval.learn.union_scoring.load_union`'s result.
    """
    from storyeval.corpus import Story
    from storyeval.learn.union_scoring import load_union
    from storyeval.models.devices import autocast, on_device, place
    from storyeval.text import TruncationWarning

    scorer = scoring.given(model) or load_union(str(model))
    place(scorer.model, scoring.device)
    heads = prompts if prompts is not None else [""] * len(texts)
    stories = [Story(str(i), p, t) for i, (p, t) in enumerate(zip(heads, texts, strict=True))]
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TruncationWarning)
        with on_device(scoring.device), autocast(scoring.device, scoring.precision):
            values = scorer.score(stories, batch_size=batch_size)
    for warning in caught:
        if issubclass(warning.category, TruncationWarning):
            notes.append(str(warning.message))
        else:
            warnings.warn(warning.message, warning.category, stacklevel=2)
    fields = {k: v for k, v in scorer.signature.fields.items() if k != "model"}
    return LearnedScores(
        np.asarray(values, dtype=float),
        models={"model": scorer.identity},
        fields=fields,
        notes=tuple(notes),
    )


@metric(
    "nubia",
    description="NUBIA: a learned aggregate of semantic similarity, NLI in both directions and "
    "LM likelihood against the reference, calibrated to [0, 1] (Kane et al. 2020)",
    families=("nubia", "learned"),
    model="checkpoint",
    value_range=(0.0, 1.0),
    unavailable_offline="needs a trained NUBIA model: storyeval train nubia --stories S --judgments J -o DIR",
    card=MetricCard(
        measures=(
            "How interchangeable a story is with its reference, as a regressor trained on "
            "*your* human judgments weighs the evidence. Three kinds of neural features are "
            "extracted for each (reference, candidate) pair:\n"
            "\n"
            "- **semantic similarity**: an STS cross-encoder's score of the pair (`train "
            "nubia --sts NAME`; NUBIA used RoBERTa fine-tuned on STS-B), or offline the "
            "cosine of the two stories' embeddings (each the mean of its sentences' "
            "mean-pooled, normalised encoder embeddings);\n"
            "- **logical entailment**: the entailment, neutral and contradiction "
            "probabilities with the reference as premise and the candidate as hypothesis "
            "(`--features both-ways`: also the other way round). Stories are documents, so "
            "NLI runs on **aligned sentence pairs**: each candidate sentence is paired with "
            "the reference sentence most similar to it (encoder cosine), and the "
            "probabilities are averaged over the candidate's sentences;\n"
            "- **intelligibility**: the log perplexity of each text under the causal LM "
            "(NUBIA used GPT-2); `--features 8dim` adds the word counts (the 8-DIM variant). "
            "The default is the paper's six features (`6dim`).\n"
            "\n"
            "An **aggregator** (linear, `-LREG`, or a 10-unit tanh network, `-NN`; `mlp-deep`, ten "
            "hidden layers, is the literal reading of the paper's '10 hidden layers') maps the "
            "standardised features to the human score scaled to [0, 1]; the **calibrator** "
            "divides the prediction by the prediction for the candidate against itself and "
            "clips to [0, 1] (the paper's section 3.3; `--calibration clip` only clips). "
            "Train with `storyeval train nubia --stories S --judgments J -o DIR` (held-out "
            "correlations printed)."
        ),
        read=(
            "A NUBIA model is only as good as the judgments it learned from and transfers "
            "poorly across criteria and genres: train it on the criterion you report. "
            'Offline, NLI is **zero-shot with the small causal LM** (the probabilities of " '
            'True", " Neither", " False" after an NLI prompt), which is close to uniform on '
            "most pairs: name a real NLI model (`--nli roberta-large-mnli`) for NUBIA as "
            "published."
        ),
        papers=(
            "On WMT17 segment-level direct assessment NUBIA-8DIM-NN reaches an average "
            "Pearson of 0.777 across language pairs, ablations showing semantic similarity as "
            "the most important feature (Kane et al. 2020, Tables 2 and 5)."
        ),
        limits=(
            "No licensed three-way NLI model installs offline, so the offline features are "
            "weaker than the paper's. The aggregator sees one reference; stories with several "
            "references use the first. Long stories are embedded sentence by sentence (no "
            "truncation), but NLI prompts longer than 1,024 tokens are cut from the left."
        ),
        refs="Kane et al. (2020), NUBIA: NeUral Based Interchangeability Assessor for Text Generation (EvalNLGEval workshop).",
        notes=(
            "Fields: `story` and `reference` (the first one). Model: a directory written by "
            "`storyeval train nubia` (`nubia.model`). `nubia.features=FILE` also writes every "
            "feature of every story (and the raw prediction) to a CSV, to see why a score is "
            "low.\n"
            "\n"
            "The signature records the model file's hash, the encoder, the similarity "
            "(`sts:MODEL` or `cosine`), the NLI model (or "
            "`lm-zero-shot:LM` for the offline default), the LM, the aggregator, the "
            "calibration, the feature set, the alignment and the criterion it was "
            "trained on."
        ),
    ),
)
def nubia(
    texts: Texts,
    references: References,
    ids: Ids | None = None,
    *,
    model: Annotated[
        str | None,
        Opt("directory written by `storyeval train nubia`", model=True, required=True),
    ] = None,
    features: Annotated[
        str | None,
        Opt(
            "also write every feature of every story to this CSV (why a score is low)",
            in_signature=False,
        ),
    ] = None,
    scoring: ScoringContext = INJECTED,
    device: str | None = None,
    precision: str | None = None,
    progress: bool = False,
) -> LearnedScores:
    """NUBIA (Kane et al. 2020): the calibrated interchangeability of each text with its
    (first) reference, in [0, 1].

    Parameters
    ----------
    model : str or NubiaModel
        A directory written by ``storyeval train nubia`` or
        :meth:`storyeval.learn.nubia.NubiaModel.load`'s result.
    ids : sequence of str, optional
        The texts' ids, for the features file.
    features : str, optional
        A CSV file to write every text's features to.
    """
    import hashlib
    from pathlib import Path

    from storyeval.base.io import write_table
    from storyeval.learn.nubia import NubiaModel

    given = scoring.given(model)
    scorer = given or NubiaModel.load(str(model))
    values, table = scorer.score(
        list(texts),
        [refs[0] for refs in references],
        device=scoring.device,
        precision=scoring.precision,
    )
    if features:
        names = list(ids) if ids is not None else [str(i) for i in range(len(texts))]
        write_table(Path(features), table.assign(item_id=names))
    if given is not None:  # a model object: its numbers are its identity
        identity = scorer.identity
    else:
        directory = Path(str(model))
        saved = directory / "nubia.json" if directory.is_dir() else directory
        identity = f"{directory.name}@{hashlib.sha256(saved.read_bytes()).hexdigest()[:12]}"
    fields = {k: v for k, v in scorer.signature.fields.items() if k not in ("n", "seed")}
    return LearnedScores(np.asarray(values, dtype=float), models={"model": identity}, fields=fields)


# --------------------------------------------------------------------------- BERT-NSP-1/2

NSP_HELP = (
    "a BERT model with a trained next-sentence-prediction head: bert-base-uncased (hub; needs "
    "network access or a local copy), or a directory written by "
    "`storyeval train nsp --stories HUMAN.jsonl -o DIR`"
)


@functools.lru_cache(maxsize=4)
def _siamese_scorer(path: str, stamp: float) -> Any:
    from storyeval.learn.nsp import NspScorer

    return NspScorer(path)


def load_nsp_model(name: str | None) -> Any:
    """Load an NSP model for ``name`` (None: the offline encoder): a directory with a siamese
    head from ``storyeval train nsp`` loads as an :class:`~storyeval.learn.nsp.NspScorer`,
    anything else as ``BertForNextSentencePrediction``, refusing a model whose NSP head would be
    randomly initialised.

    Raises
    ------
    ModelLoadError
        When the checkpoint has no trained NSP head (the offline MiniLM has none).
    """
    from transformers import BertForNextSentencePrediction

    from storyeval.learn.nsp import HEAD_FILE, has_trained_nsp_head
    from storyeval.models import load_pretrained, resolve_model_path

    display, path, _ = resolve_model_path(name, "encoder")
    head = Path(path) / HEAD_FILE
    if head.is_file():  # a siamese head trained by `storyeval train nsp`
        return _siamese_scorer(str(Path(path).resolve()), head.stat().st_mtime)
    status = has_trained_nsp_head(path)
    if status is False:
        raise ModelLoadError(
            f"the encoder {display} has no trained next-sentence-prediction head (its checkpoint "
            "lacks cls.seq_relationship, which transformers would initialise at random); the NSP "
            f"metrics need {NSP_HELP}; pass it with --option nsp.model=NAME_OR_DIR"
        )
    return load_pretrained(name, "encoder", BertForNextSentencePrediction, option="nsp.model")


def nsp_probabilities(
    model: Any, pairs: Sequence[tuple[str, str]], *, batch_size: int = 32
) -> np.ndarray:
    """P(second text follows first) for ``(first, second)`` pairs, from the NSP head
    (label 0 = "is next") or a siamese head (an :class:`~storyeval.learn.nsp.NspScorer`)."""
    import torch

    from storyeval.learn.nsp import NspScorer

    if isinstance(model, NspScorer):
        return np.asarray(model.probabilities(pairs, batch_size=batch_size), dtype=np.float64)

    tokenizer = model.tokenizer
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    result = np.zeros(len(pairs))
    limit = int(model.max_length)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            encoded = tokenizer(
                [pairs[i][0] for i in chunk],
                [pairs[i][1] for i in chunk],
                padding=True,
                truncation="only_first",
                max_length=limit,
                return_tensors="pt",
            )
            logits = model.model(**encoded.to(model.model.device)).logits.float()
            probabilities = torch.softmax(logits, dim=-1)[:, 0].double().cpu().numpy()
            result[chunk] = probabilities
    return result


def nsp_cuts(model: Any, pairs: Sequence[tuple[str, str]]) -> tuple[int, int]:
    """How many ``(context, sentence)`` pairs the NSP model reads in part: contexts longer
    than it keeps, and sentences longer than it keeps (counted, reported, never silent)."""
    from storyeval.learn.nsp import NspScorer

    tokenizer = model.tokenizer
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    contexts = sentences = 0
    for context, sentence in pairs:
        a, b = count(context), count(sentence)
        if isinstance(model, NspScorer) and model.architecture == "siamese":
            keep_a = keep_b = model.max_length - 2  # each text on its own
        elif isinstance(model, NspScorer):  # encode_pair: the context keeps its last tokens
            keep_a = max(1, model.max_length // 2 - 2)
            keep_b = model.max_length - 3 - min(a, keep_a)
        else:  # truncation="only_first": the sentence whole, the context cut to fit
            keep_b = int(model.max_length) - 3
            keep_a = max(0, keep_b - b)
        contexts += a > keep_a
        sentences += b > keep_b
    return contexts, sentences


def _nsp(
    mode: str,
    texts: Sequence[str],
    prompts: Sequence[str],
    options: Mapping[str, Any],
    scoring: ScoringContext,
) -> CoherenceScores:
    from storyeval.models.devices import autocast, on_device, place

    model = scoring.given(options["model"]) or load_nsp_model(options["model"])
    stories = text_pairs(scoring, texts, prompts, options["split"], mode)
    flat = [(context, sentence) for pairs in stories for sentence, context in pairs]
    contexts, sentences = nsp_cuts(model, flat)
    place(model, scoring.device)
    notes = []
    if contexts:
        notes.append(
            f"{contexts} of {len(flat)} contexts (prompt or previous sentence) are longer "
            "than the NSP model reads beside a sentence and were read in part"
        )
    if sentences:
        notes.append(
            f"{sentences} of {len(flat)} sentences are longer than the NSP model reads and "
            "were read in part (their first tokens)"
        )
    with on_device(scoring.device), autocast(scoring.device, scoring.precision):
        probabilities = nsp_probabilities(model, flat, batch_size=options["batch_size"])
    if options["score"] == "label":
        probabilities = (probabilities > 0.5).astype(np.float64)
    values = []
    position = 0
    for pairs in stories:
        chunk = probabilities[position : position + len(pairs)]
        position += len(pairs)
        values.append(float(chunk.mean()) if len(chunk) else math.nan)
    return CoherenceScores(
        np.asarray(values, dtype=np.float64), models={"model": model.identity}, notes=tuple(notes)
    )


NspModel = Annotated[str | None, Opt(NSP_HELP, model=True)]
NspScore = Annotated[
    Literal["probability", "label"],
    Opt("average the probability, or the share of sentences predicted to follow"),
]
NspBatch = Annotated[int, Opt("pairs per batch", minimum=1, in_signature=False)]


def _nsp_metric(label: str, what: str) -> dict[str, Any]:
    return {
        "description": f"{label} (Callan & Foster 2023): mean probability, under a BERT NSP "
        f"head, that {what}",
        "families": ("nsp", "coherence"),
        "model": "nsp",
        "value_range": (0.0, 1.0),
        "offline": False,
        "unavailable_offline": "needs a trained NSP head: `storyeval train nsp` makes one, then "
        "--option nsp.model=DIR",
    }


def _nsp_family(
    texts: Texts,
    prompts: Prompts,
    *,
    mode: Literal["prompt", "prev"] = "prompt",
    model: NspModel = None,
    split: Split = "pysbd",
    score: NspScore = "probability",
    batch_size: NspBatch = 32,
    scoring: ScoringContext = INJECTED,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> CoherenceScores:
    """The mean next-sentence probability of each sentence of a text after the prompt
    (``mode="prompt"``) or after the sentence before it (``"prev"``): the family registered as
    ``nsp_prompt`` and ``nsp_prev`` (Callan and Foster 2023)."""
    options = {"model": model, "split": split, "score": score, "batch_size": batch_size}
    return _nsp(mode, texts, prompts, options, scoring)


nsp_prompt = metric(
    "nsp_prompt",
    **_nsp_metric("BERT-NSP-1", "each story sentence follows the prompt"),
    card=MetricCard(
        measures="BERT-NSP-1 (Callan & Foster 2023): the probability, under a BERT model "
        "with a trained next-sentence-prediction head, that each story sentence follows the "
        "prompt, averaged (`score=label` averages the 0/1 predictions instead).",
        read="0-1; higher = sentences judged continuations of the prompt.",
        papers=f"{CF}: 433 of 531 prompt/sentence pairs predicted to follow; correlation "
        "with Q1 0.25, Q2 0.12, Q4 0.10. The authors conclude NSP, used this way, is not a "
        "useful measure of narrative coherence.",
        limits="Needs a model with a trained NSP head: the offline MiniLM has none, so the "
        "metric refuses (exit 2) and names `bert-base-uncased` (hub; needs network access or "
        "a local copy) and `storyeval train nsp --stories HUMAN.jsonl -o DIR`, which trains a "
        "siamese head (cosine of mean-pooled sentence embeddings) on the offline encoder. "
        "BERT's own head saturates near 1 for fluent text; a head trained on your corpus "
        "measures continuity as that corpus shows it, and scores its own training stories "
        "higher than unseen ones.",
        refs=f"{CF}; Devlin et al. (2019).",
    ),
    fixed={"mode": "prompt"},
    doc="""BERT-NSP-1 (Callan and Foster 2023): the mean probability, under a trained next-sentence
    head, that each sentence of a text follows the prompt.""",
)(_nsp_family)


nsp_prev = metric(
    "nsp_prev",
    **_nsp_metric(
        "BERT-NSP-2", "each story sentence follows the previous one (the first: the prompt)"
    ),
    card=MetricCard(
        measures="BERT-NSP-2 (Callan & Foster 2023): the probability that the first "
        "sentence follows the prompt and each later sentence the one before it, averaged.",
        read="0-1; higher = each sentence judged a continuation of the previous one.",
        papers=f"{CF}: 497 of 531 pairs predicted to follow; correlation with Q1 0.25, Q2 "
        "0.15, Q4 0.25; with BERT-NSP-1 0.61.",
        limits="As nsp_prompt: needs a trained NSP head (`--option nsp.model=...`); "
        "saturates for fluent text.",
        refs=f"{CF}; Devlin et al. (2019).",
    ),
    fixed={"mode": "prev"},
    doc="""BERT-NSP-2 (Callan and Foster 2023): the mean probability that each sentence of a text
    follows the previous one (the first: the prompt).""",
)(_nsp_family)


@metric(
    "preference",
    description="A story reward model's score, trained from people's ratings and preferences "
    "(storyeval train preference)",
    families=("preference", "learned"),
    model="checkpoint",
    higher_is_better=True,
    unavailable_offline="needs a trained preference model: storyeval train preference "
    "--stories S --judgments J -o DIR",
    card=MetricCard(
        measures=(
            "What people who judged your stories would think of a new one: a scalar head over "
            "the story's features (the encoder's mean-pooled last layer, or a causal LM's last "
            "hidden state), trained with `storyeval train preference` on your own judgments: "
            "the mean rating of each story (a pointwise objective) and pairs of stories for "
            "one prompt (from ratings that differ by a margin, and from pairwise "
            "preferences), with a Bradley-Terry loss and Davidson's ties. Length can be a "
            "covariate whose effect is learned and left out of the score, and metrics of the "
            "story alone (repeated n-grams, distinct n-grams, perplexity: what a mean-pooled "
            "embedding hardly sees) can join the features (`--metric-features`). Perturbed "
            "copies of the judged stories (a repeated sentence, shuffled sentences) can be "
            "negatives that must score lower (`--negatives`), teaching the model an error "
            "the people's stories seldom show, as far as its features can see it."
        ),
        read=(
            "With one rated criterion, the predicted mean rating on its scale; otherwise a "
            "score in standard deviations of the training stories. Compare systems only "
            "under one model (one signature). The training report gives the held-out "
            "pairwise accuracy and story-level Kendall tau (prompt-disjoint folds), and the "
            "length effect it removed; the held-out predictions (`DIR/heldout_scores.jsonl`, "
            "metric `preference_heldout:DIR`) compare with any metric on the same stories in "
            "`storyeval compare` and `storyeval report`. Do that within the stories you will "
            "rank: trained beside human stories, a model may mostly tell them from generated "
            "ones (on the example ratings, held-out Kendall 0.42 over all stories but 0.12 "
            "over the generated ones, below `bertscore_prompt`, and 0.10 within systems: "
            "`correlate --level within_system`); `--exclude-systems human` trains on the "
            "generated ones."
        ),
        papers=(
            "Fein et al. (2025, LitBench) report Bradley-Terry reward models trained on human "
            "story preferences agreeing with held-out people 78% of the time, against 73% for "
            "the best off-the-shelf LLM judge; their models fine-tune 1-8B parameter LMs, "
            "where this one trains a head over frozen features (seconds on a CPU) or "
            "fine-tunes a small encoder with it (`--fine-tune-epochs`)."
        ),
        limits=(
            "A model of the people, criterion and genre it was trained on: it transfers "
            "poorly to others. Frozen features (the default) limit what it can learn "
            "(`--fine-tune-epochs` tunes the encoder too, at minutes rather than seconds on a "
            "CPU), and a mean-pooled embedding barely changes when a sentence is repeated "
            "or the sentences are shuffled: without metric features the model misses those "
            "errors (audit it with `storyeval judge-audit --backend reward-model`); nothing "
            "offline but a trained UNION sees the order of sentences. With few "
            "judgments the held-out intervals are wide: read them before trusting the scores."
        ),
        refs="Fein et al. (2025), LitBench; Bradley and Terry (1952); Davidson (1970).",
    ),
)
def preference(
    texts: Texts,
    prompts: Prompts | None = None,
    *,
    model: Annotated[
        str | None,
        Opt("directory written by `storyeval train preference`", model=True, required=True),
    ] = None,
    scoring: ScoringContext = INJECTED,
    device: str | None = None,
    precision: str | None = None,
    progress: bool = False,
) -> LearnedScores:
    """A preference model's score of each text (read after its prompt when the model was
    trained so).

    Parameters
    ----------
    model : str or PreferenceModel
        A directory written by ``storyeval train preference``, or
        :func:`storyeval.learn.preference.load_preference`'s result.
    """
    from storyeval.corpus import Story
    from storyeval.learn.preference import load_preference

    scorer = scoring.given(model) or load_preference(str(model))
    heads = prompts if prompts is not None else [""] * len(texts)
    stories = [Story(str(i), p, t) for i, (p, t) in enumerate(zip(heads, texts, strict=True))]
    values = scorer.score(stories, scoring=scoring)
    fields = {k: v for k, v in scorer.signature.fields.items() if k != "data"}
    return LearnedScores(
        np.asarray(values, dtype=float), models={"model": scorer.identity}, fields=fields
    )
