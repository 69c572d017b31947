"""BERTScore (Zhang et al. 2020): greedy matching of contextual token embeddings.

Each token of the candidate is matched to its most similar token of the reference (cosine of
the hidden states at one layer) and vice versa; precision, recall and F1 are the (optionally
idf-weighted) means of those best similarities. With several references, each of P, R and F
is the maximum over the references (what the ``bert-score`` package does). Optional baseline
rescaling maps ``x`` to ``(x - b) / (1 - b)``.

The implementation reads token embeddings from the run's encoder cache, so the same texts
also serve MoverScore, the BERTScore coherence metrics and embedding coherence; with the
same model and layer it reproduces ``bert_score.score`` to 1e-4 (tested).
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import numpy as np

from storyeval.base.errors import StoryevalError
from storyeval.metrics.cards import BASELINE_NOTE, BERTSCORE_LIMITS, MetricCard
from storyeval.metrics.context import EncoderCache, ScoringContext, resolve_layer
from storyeval.metrics.function import (
    INJECTED,
    Opt,
    References,
    Scores,
    Texts,
    metric,
    undefined_note,
)
from storyeval.metrics.registry import MetricBatch, OptionError

#: Recommended layers (bert-score's ``model2layers``, tuned on WMT16 by its authors) for
#: common hub encoders, and storyeval's choice for the offline default (4 of 6 layers, by
#: analogy with distilbert-base-uncased's 5 of 6 and bert-base-uncased's 9 of 12; not tuned).
DEFAULT_LAYERS: dict[str, int] = {
    "all-MiniLM-L6-v2": 4,
    "bert-base-uncased": 9,
    "bert-large-uncased": 18,
    "bert-base-cased": 9,
    "bert-base-multilingual-cased": 9,
    "distilbert-base-uncased": 5,
    "distilroberta-base": 5,
    "roberta-base": 10,
    "roberta-large": 17,
    "roberta-large-mnli": 19,
    "microsoft/deberta-base": 9,
    "microsoft/deberta-large": 16,
    "microsoft/deberta-xlarge-mnli": 40,
    "xlm-roberta-base": 9,
    "xlm-roberta-large": 17,
}

BASELINE_FILES = {"all-MiniLM-L6-v2": "bertscore_baseline_all-MiniLM-L6-v2.csv"}


def default_layer(encoder: Any, requested: int | None) -> int:
    """The hidden-states index to use: ``requested`` (negative counts from the top), else the
    recommended layer of a known model, else three quarters of the way up."""
    if requested is not None:
        return resolve_layer(encoder.model, requested)
    known = DEFAULT_LAYERS.get(encoder.name)
    if known is None:
        known = DEFAULT_LAYERS.get(Path(str(encoder.name)).name)
    if known is None:
        total = resolve_layer(encoder.model, -1)
        known = max(1, round(0.75 * total))
    return resolve_layer(encoder.model, known)


# --------------------------------------------------------------------------- idf


def idf_weights(token_lists: Iterable[Any]) -> tuple[dict[int, float], float]:
    """Inverse document frequencies ``log((M + 1) / (df + 1))`` over ``M`` documents (token id
    lists), and the value for unseen ids, ``log(M + 1)`` (bert-score's definition).

    >>> weights, unseen = idf_weights([[1, 2], [2, 3]])
    >>> round(weights[2], 4), round(weights[1], 4), round(unseen, 4)
    (0.0, 0.4055, 1.0986)
    """
    counts: Counter[int] = Counter()
    total = 0
    for ids in token_lists:
        counts.update(set(int(i) for i in ids))
        total += 1
    weights = {token: math.log((total + 1) / (count + 1)) for token, count in counts.items()}
    return weights, math.log(total + 1)


# --------------------------------------------------------------------------- matching


class Greedy:
    """Greedy-matching BERTScore between texts whose embeddings are in an encoder cache."""

    def __init__(
        self,
        cache: EncoderCache,
        layer: int,
        *,
        idf: tuple[dict[int, float], float] | None = None,
    ) -> None:
        self.cache = cache
        self.layer = layer
        self.idf = idf
        tokenizer = cache.encoder.tokenizer
        self.special = {
            tokenizer.cls_token_id,
            tokenizer.sep_token_id,
            tokenizer.bos_token_id,
            tokenizer.eos_token_id,
        } - {None}
        self._normed: dict[str, np.ndarray] = {}
        self._weights: dict[str, np.ndarray] = {}

    def normed(self, text: str) -> np.ndarray:
        """The unit-normed token embeddings of ``text``."""
        key = text.strip()
        if key not in self._normed:
            states = self.cache.embeddings(key, self.layer)
            norms = np.linalg.norm(states, axis=1, keepdims=True)
            # float32 like bert-score's own matching; sums below are taken in float64
            self._normed[key] = (states / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        return self._normed[key]

    def weights(self, text: str) -> np.ndarray:
        """The idf weights of the tokens of ``text`` (uniform without idf)."""
        key = text.strip()
        if key not in self._weights:
            ids = self.cache.token_ids(key)
            if self.idf is None:
                weights = np.array([0.0 if i in self.special else 1.0 for i in ids])
            else:
                table, unseen = self.idf
                weights = np.array(
                    [0.0 if i in self.special else table.get(int(i), unseen) for i in ids]
                )
            self._weights[key] = weights
        return self._weights[key]

    def pair(self, candidate: str, reference: str) -> tuple[float, float, float]:
        """Precision, recall and F1 of one candidate against one reference (NaN when either
        has no weighted token)."""
        c, r = self.normed(candidate), self.normed(reference)
        wc, wr = self.weights(candidate), self.weights(reference)
        if wc.sum() <= 0 or wr.sum() <= 0:
            return math.nan, math.nan, math.nan
        sim = c @ r.T
        precision = float((sim.max(axis=1).astype(np.float64) * wc).sum() / wc.sum())
        recall = float((sim.max(axis=0).astype(np.float64) * wr).sum() / wr.sum())
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else math.nan
        return precision, recall, f1

    def best(self, candidate: str, references: Sequence[str]) -> tuple[float, float, float]:
        """Each of P, R, F maximised over several references."""
        return _best_of(np.array([self.pair(candidate, ref) for ref in references]))

    def all_best(
        self, candidates: Sequence[str], references: Sequence[Sequence[str]]
    ) -> np.ndarray:
        """:meth:`best` of every candidate, shape ``(n, 3)``. On a GPU the pairs are matched
        there in batches (the same float32 products and float64 sums as :meth:`pair`)."""
        if not self.cache.device.startswith("cuda") or not candidates:  # MPS has no float64
            each = zip(candidates, references, strict=True)
            return np.array([self.best(c, refs) for c, refs in each])
        pairs = [(c, r) for c, refs in zip(candidates, references, strict=True) for r in refs]
        scores = self._pairs_on_device(pairs)
        rows, start = [], 0
        for refs in references:
            rows.append(_best_of(scores[start : start + len(refs)]))
            start += len(refs)
        return np.array(rows).reshape(-1, 3)

    PAIRS_PER_BATCH = 64

    def _pairs_on_device(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """P, R and F of each ``(candidate, reference)`` pair, matched on the cache's device."""
        import torch
        from torch.nn.utils.rnn import pad_sequence

        device = self.cache.device
        out = np.full((len(pairs), 3), np.nan)
        order = sorted(range(len(pairs)), key=lambda k: len(pairs[k][0]) + len(pairs[k][1]))
        for begin in range(0, len(order), self.PAIRS_PER_BATCH):
            chosen = order[begin : begin + self.PAIRS_PER_BATCH]
            texts = {t for k in chosen for t in pairs[k]}
            embedded = {
                t: _unit_rows(self.cache.device_embeddings(t.strip(), self.layer).to(device))
                for t in texts
            }
            weighted = {t: torch.from_numpy(self.weights(t)).to(device) for t in texts}

            def stack(side: int, table: dict[str, Any], chosen: list[int] = chosen) -> Any:
                return pad_sequence([table[pairs[k][side]] for k in chosen], batch_first=True)

            sim = torch.bmm(stack(0, embedded), stack(1, embedded).transpose(1, 2))
            # padding rows and columns are zero vectors: their similarities are 0, and
            # their weights 0, so they change no maximum that counts and add nothing
            cand_w, ref_w = stack(0, weighted).double(), stack(1, weighted).double()
            cand_max = _masked_max(sim, ref_w.new_tensor(_valid(pairs, chosen, 1, self)), 2)
            ref_max = _masked_max(sim, ref_w.new_tensor(_valid(pairs, chosen, 0, self)), 1)
            precision = (cand_max.double() * cand_w).sum(1) / cand_w.sum(1)
            recall = (ref_max.double() * ref_w).sum(1) / ref_w.sum(1)
            usable = (cand_w.sum(1) > 0) & (ref_w.sum(1) > 0)
            f1 = 2 * precision * recall / (precision + recall)
            got = torch.stack([precision, recall, f1], 1).masked_fill(~usable[:, None], np.nan)
            out[chosen] = got.cpu().numpy()
        return out


def _best_of(scores: np.ndarray) -> tuple[float, float, float]:
    """Each of P, R, F maximised over the rows (references) of ``scores``."""
    if np.isnan(scores).all():
        return math.nan, math.nan, math.nan
    p, r, f = np.nanmax(scores, axis=0)
    return float(p), float(r), float(f)


def _valid(pairs: Sequence[tuple[str, str]], chosen: list[int], side: int, greedy: Greedy) -> Any:
    """Which token positions of one side of the chosen pairs are real (not padding)."""
    lengths = [len(greedy.weights(pairs[k][side])) for k in chosen]
    width = max(lengths)
    return [[1.0] * n + [0.0] * (width - n) for n in lengths]


def _unit_rows(states: Any) -> Any:
    """:meth:`Greedy.normed` of a tensor (where it is)."""
    import torch

    norms = states.norm(dim=1, keepdim=True)
    return states / torch.where(norms > 0, norms, torch.ones_like(norms))


def _masked_max(sim: Any, valid: Any, dim: int) -> Any:
    """The maximum of ``sim`` over ``dim`` among its real (``valid``) positions."""
    shape = (valid.shape[0], 1, valid.shape[1]) if dim == 2 else (valid.shape[0], valid.shape[1], 1)
    return sim.masked_fill(valid.reshape(shape) == 0, float("-inf")).amax(dim)


# --------------------------------------------------------------------------- baselines


def load_baseline(spec: str, layer: int) -> tuple[float, float, float]:
    """Baseline ``(P, R, F)`` from three comma-separated numbers or a bert-score baseline file
    (CSV with columns ``LAYER,P,R,F``, one row per layer)."""
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) == 3:
        try:
            numbers = tuple(float(p) for p in parts)
        except ValueError:
            numbers = ()  # not numbers: a file name
        if len(numbers) == 3:
            if not all(-1.0 < n < 1.0 for n in numbers):
                raise OptionError(f"baseline values must be in (-1, 1); got {spec!r}")
            return numbers[0], numbers[1], numbers[2]
    path = Path(spec).expanduser()
    if not path.is_file():
        raise OptionError(
            f"baseline {spec!r} is neither three numbers P,R,F nor an existing baseline file"
        )
    return _baseline_from_file(path.read_text(encoding="utf-8"), layer, str(path))


def _baseline_from_file(text: str, layer: int, where: str) -> tuple[float, float, float]:
    rows = [
        row
        for row in csv.reader(line for line in text.splitlines() if not line.startswith("#"))
        if row
    ]
    if not rows or [c.strip().upper() for c in rows[0][-3:]] != ["P", "R", "F"]:
        raise OptionError(f"{where}: a baseline file needs a header LAYER,P,R,F")
    for row in rows[1:]:
        if int(float(row[0])) == layer:
            return float(row[-3]), float(row[-2]), float(row[-1])
    raise OptionError(f"{where}: no baseline for layer {layer}")


def default_baseline(encoder: Any, layer: int) -> tuple[tuple[float, float, float], str]:
    """The baseline storyeval knows for an encoder, and where it comes from."""
    shipped = BASELINE_FILES.get(encoder.name)
    if shipped is not None:
        text = resources.files("storyeval.metrics").joinpath("data", shipped).read_text("utf-8")
        return _baseline_from_file(text, layer, shipped), f"storyeval:{shipped}"
    try:
        import bert_score
    except ImportError:
        bert_score = None
    if bert_score is not None:
        file = Path(bert_score.__file__).parent / "rescale_baseline" / "en" / f"{encoder.name}.tsv"
        if file.is_file():
            return _baseline_from_file(
                file.read_text("utf-8"), layer, str(file)
            ), f"bert-score:{encoder.name}"
    raise StoryevalError(
        f"no rescaling baseline is known for the encoder {encoder.name}; give one with "
        "--option bertscore.baseline=FILE_OR_P,R,F (bert-score ships baseline files for hub "
        "models), or leave bertscore.rescale off"
    )


def rescaler(encoder: Any, layer: int, options: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A function rescaling (P, R, F) arrays, and the signature fields describing it."""
    if not options.get("rescale"):
        if options.get("baseline"):
            raise OptionError(
                "bertscore.baseline is set but bertscore.rescale is off; set rescale=true"
            )
        return (lambda p, r, f: (p, r, f)), {}
    if options.get("baseline"):
        base = load_baseline(str(options["baseline"]), layer)
        source = (
            options["baseline"]
            if "," in str(options["baseline"])
            else Path(str(options["baseline"])).name
        )
    else:
        base, source = default_baseline(encoder, layer)

    def rescale(p: np.ndarray, r: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple((x - b) / (1 - b) for x, b in zip((p, r, f), base, strict=True))

    return rescale, {"baseline": str(source)}


# --------------------------------------------------------------------------- metrics

EncoderName = Annotated[
    str | None,
    Opt("encoder: hub name or local directory (default: offline MiniLM)", model=True),
]
Layer = Annotated[
    int | None,
    Opt(
        "hidden layer (0 = embeddings, negative counts from the top; auto: the model's "
        "recommended layer)"
    ),
]
Idf = Annotated[bool, Opt("weight tokens by idf computed on the references")]
Rescale = Annotated[bool, Opt("rescale with a baseline: (x - b) / (1 - b)")]
Baseline = Annotated[
    str | None,
    Opt(
        "baseline for rescaling: a bert-score baseline file (LAYER,P,R,F) or three numbers "
        "P,R,F (default: the shipped one for the offline encoder, or bert-score's for its hub "
        "models)"
    ),
]
BatchTokens = Annotated[int, Opt("tokens per encoder batch", minimum=64, in_signature=False)]
Device = str | None
Precision = Literal["float32", "bfloat16", "float16"] | None


@dataclass(frozen=True)
class BertScores(Scores):
    """One BERTScore component per text (``values``), with all three from the same matching:
    ``precision``, ``recall`` and ``f1`` (each the best over a text's references)."""

    precision: np.ndarray | None = None
    recall: np.ndarray | None = None
    f1: np.ndarray | None = None


def _unused(options: Mapping[str, Any]) -> tuple[str, ...]:
    return () if options.get("rescale") else ("baseline",)


def encoder_cache(scoring: ScoringContext, model: Any, batch_tokens: int | None) -> EncoderCache:
    """The run's cache of ``model``, encoding ``batch_tokens`` tokens a batch (scaled to the
    device; None keeps the cache's)."""
    cache = scoring.cache(model)
    if batch_tokens is not None:
        cache.batch_tokens = int(batch_tokens * scoring.batch_scale)
    return cache


def _setup(scoring: ScoringContext, options: Mapping[str, Any]) -> tuple[EncoderCache, int]:
    cache = encoder_cache(scoring, options["model"], options.get("batch_tokens"))
    return cache, default_layer(cache.encoder, options["layer"])


def _plan(
    batch: MetricBatch, options: Mapping[str, Any]
) -> Iterable[tuple[str | None, list[str], list[int]]]:
    _, layer = _setup(batch.context, options)
    texts = [s.story for s in batch.stories] + [r for s in batch.stories for r in s.references]
    yield options["model"], texts, [layer]


def bertscore_triples(
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    options: Mapping[str, Any],
    scoring: ScoringContext,
) -> BertScores:
    """P, R and F of every candidate against its references, from one encoding of each text
    (memoised in the run: the three BERTScore metrics of a run match once)."""
    cache, layer = _setup(scoring, options)
    key = (
        "bertscore",
        cache.identity,
        layer,
        bool(options["idf"]),
        options.get("rescale"),
        options.get("baseline"),
        tuple(candidates),
        tuple(tuple(r) for r in references),
    )
    if key not in scoring.memo:
        cache.request([*candidates, *(r for refs in references for r in refs)], [layer])
        cache.run()
        idf = None
        if options["idf"]:
            idf = idf_weights(cache.token_ids(r) for refs in references for r in refs)
        greedy = Greedy(cache, layer, idf=idf)
        scores = greedy.all_best(candidates, references).reshape(-1, 3)
        rescale, fields = rescaler(cache.encoder, layer, options)
        p, r, f = rescale(scores[:, 0], scores[:, 1], scores[:, 2])
        scoring.memo[key] = BertScores(
            f,
            models={"model": cache.identity},
            fields={"layer": layer, **fields},
            omit=_unused(options),
            notes=tuple(undefined_note(f, "stories have no token to match")),
            precision=np.asarray(p),
            recall=np.asarray(r),
            f1=np.asarray(f),
        )
    return cast(BertScores, scoring.memo[key])


def _component(result: BertScores, component: str) -> BertScores:
    values = {"p": result.precision, "r": result.recall, "f": result.f1}[component]
    notes = tuple(undefined_note(np.asarray(values), "stories have no token to match"))
    return replace(result, values=np.asarray(values), notes=notes)


_BERTSCORE = {
    "families": ("bertscore", "encoder"),
    "model": "encoder",
    "value_range": (None, 1.0),
    "plan": _plan,
    "corpus_wide": lambda options: bool(options.get("idf")),
}


def _bertscore_description(what: str) -> str:
    return (
        f"BERTScore {what}: greedy-matched cosine similarity of contextual token embeddings of "
        "the story and its reference(s)"
    )


def _bertscore(
    texts: Texts,
    references: References,
    *,
    component: Literal["p", "r", "f"] = "f",
    model: EncoderName = None,
    layer: Layer = None,
    idf: Idf = False,
    rescale: Rescale = False,
    baseline: Baseline = None,
    batch_tokens: BatchTokens = 4096,
    scoring: ScoringContext = INJECTED,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> BertScores:
    """BERTScore's ``component`` (P, R or F1) of each candidate: the family registered as
    ``bertscore_p``, ``bertscore_r`` and ``bertscore_f``."""
    options = dict(model=model, layer=layer, idf=idf, rescale=rescale, baseline=baseline)
    options["batch_tokens"] = batch_tokens
    return _component(bertscore_triples(texts, references, options, scoring), component)


bertscore_f = metric(
    "bertscore_f",
    description=_bertscore_description("F1"),
    **_BERTSCORE,  # type: ignore[arg-type]
    card=MetricCard(
        measures="BERTScore F1: harmonic mean of BERTScore precision and recall (greedy "
        "cosine matching of contextual token embeddings); each of P, R, F is maximised over "
        "several references, as in the bert-score package.",
        read="The usual headline BERTScore. Compare only under one signature (model, layer, "
        "idf, rescaling).",
        papers="No values for stories in the source documents (see bertscore_prompt for "
        "Callan & Foster's unreferenced use). Parity: equal to `bert_score.score(..., "
        "model_type=PATH, num_layers=4)` within 1e-4.",
        limits=BERTSCORE_LIMITS,
        refs="Zhang et al. (2020); Zhang et al. (2020b), rescaling with baselines.",
        notes=BASELINE_NOTE,
    ),
    fixed={"component": "f"},
    doc="""BERTScore (Zhang et al. 2020) F1 of each candidate; ``.precision`` and ``.recall`` come
    from the same matching. With several references per candidate each of P, R and F is the
    best over them (as the bert-score package).

    Parameters
    ----------
    texts, references
        The texts and one reference (or several) each.
    model : str, loaded encoder or None
        A hub name, a local directory, :func:`storyeval.models.load_encoder`'s or
        :func:`storyeval.models.wrap_model`'s result; ``None``: the offline all-MiniLM-L6-v2.
    layer, idf, rescale, baseline, batch_tokens
        As ``storyeval metrics bertscore_f --options`` lists them.
    scoring : ScoringContext, optional
        Share loaded models and encoded texts with other calls.
    device, precision : str, optional
        Where and in what precision the encoder runs (a new context; recorded in the signature).

    Examples
    --------
    >>> result = bertscore_f(["The cat sat on the mat."], ["A cat was sitting on the mat."])
    >>> 0.5 < float(result.values[0]) <= 1.0, result.signature.fields["layer"]
    (True, 4)
    """,
)(_bertscore)


bertscore_p = metric(
    "bertscore_p",
    description=_bertscore_description("precision"),
    **_BERTSCORE,  # type: ignore[arg-type]
    card=MetricCard(
        measures="BERTScore precision: for each token of the story, the cosine similarity "
        "of its contextual embedding to the most similar reference token, averaged "
        "(optionally idf-weighted). With several references, the best value counts.",
        read="How much of the story is supported by the reference's meaning. Raw values "
        "live in a narrow band (about 0.4-0.7 for the offline encoder at layer 4); use "
        "`rescale=true` for a spread-out scale.",
        papers="The source documents report BERTScore only in its unreferenced coherence "
        "use (see bertscore_prompt); with the same model and layer, storyeval reproduces the "
        "bert-score package to 1e-4 (tests/metrics/test_metrics_embedding.py).",
        limits=BERTSCORE_LIMITS,
        refs="Zhang et al. (2020), BERTScore (ICLR).",
        notes=BASELINE_NOTE,
    ),
    fixed={"component": "p"},
    doc="""BERTScore precision of each candidate (see :func:`bertscore_f`).""",
)(_bertscore)


bertscore_r = metric(
    "bertscore_r",
    description=_bertscore_description("recall"),
    **_BERTSCORE,  # type: ignore[arg-type]
    card=MetricCard(
        measures="BERTScore recall: for each reference token, its best cosine match in the "
        "story, averaged (optionally idf-weighted); best reference.",
        read="How much of the reference's content the story covers. Same scale caveats as "
        "bertscore_p.",
        papers="No values for stories in the source documents (see bertscore_p).",
        limits=BERTSCORE_LIMITS,
        refs="Zhang et al. (2020).",
        notes=BASELINE_NOTE,
    ),
    fixed={"component": "r"},
    doc="""BERTScore recall of each candidate (see :func:`bertscore_f`).""",
)(_bertscore)
