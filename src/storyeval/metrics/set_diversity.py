"""Diversity of a system's stories as a set: the compression ratio and the Vendi score.

Both are properties of a system's stories together, not of one story: each story gets its
system's value (level ``system``), so the per-system table shows the system's number and the
per-story file repeats it. They complement distinct-n and Self-BLEU: the compression ratio
catches repeated text at any length (Shaib et al. 2024, "Standardizing the measurement of text
diversity"), the Vendi score counts the effective number of different stories under a
similarity (Friedman and Dieng 2023).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np

from storyeval.base.registry import Registry
from storyeval.metrics.cards import MetricCard
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.embedding import BatchTokens, Device, EncoderName, Precision, encoder_cache
from storyeval.metrics.function import (
    INJECTED,
    Groups,
    Opt,
    Prompts,
    Scores,
    Texts,
    metric,
    undefined_note,
)
from storyeval.metrics.registry import MetricBatch


@dataclass(frozen=True)
class SetDiversityScores(Scores):
    """Each text's value is its group's (the set's) value."""


def _by_group(texts: Texts, groups: Groups | None) -> dict[str, list[int]]:
    """The text indices of each group of two or more texts, in order (one group ``all``
    without groups); a text alone in its group is left out (a set of one has no diversity)."""
    members: dict[str, list[int]] = {}
    for index in range(len(texts)):
        members.setdefault(str(groups[index]) if groups is not None else "all", []).append(index)
    return {group: indices for group, indices in members.items() if len(indices) > 1}


def _only_sample_note(values: np.ndarray) -> tuple[str, ...]:
    """The note of the per-prompt set measures: stories without another sample."""
    return tuple(undefined_note(values, "stories are their system's only sample for their prompt"))


def _unit_rows(x: np.ndarray) -> np.ndarray:
    """The rows of ``x`` scaled to unit length (zero rows stay zero)."""
    return np.asarray(x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12))


def _alone_note(values: np.ndarray) -> tuple[str, ...]:
    alone = int(np.isnan(values).sum())
    return (f"{alone} stories are alone in their system: undefined",) if alone else ()


def compression_ratio_of(texts: Iterable[str], *, level: int = 9) -> float:
    """Bytes of the texts (UTF-8, one per line, sorted so the order of a file does not
    matter) over their gzip size: about 1 for incompressible text, higher for repetitive text.

    >>> compression_ratio_of(["the cat sat on the mat"] * 20) > compression_ratio_of(
    ...     ["the cat sat", "a dog ran far away", "rain fell on the old roof"])
    True
    """
    raw = "\n".join(sorted(texts)).encode("utf-8")
    if not raw:
        return float("nan")
    return len(raw) / len(gzip.compress(raw, compresslevel=level, mtime=0))


@metric(
    "compression_ratio",
    description="The gzip compression ratio of the system's stories together (higher = more "
    "repetitive, less diverse)",
    families=("diversity",),
    higher_is_better=False,
    value_range=(0.0, None),
    level="system",
    default=False,
    card=MetricCard(
        measures="The size of a system's stories (UTF-8, one per line, sorted) over "
        "their gzip size (level 9), as Shaib et al. (2024) standardise it: repeated words, "
        "phrases and whole passages, within and across stories, all make the text more "
        "compressible. Every story gets its system's value.",
        read="About 2-3 for varied English prose; higher = more repeated text across the "
        "system's stories. Compare systems on the same prompts and similar numbers of "
        "stories.",
        papers="Shaib et al. (2024) find compression ratios separate models' outputs and "
        "correlate with other diversity scores while costing almost nothing.",
        limits="gzip looks back 32 KB: repetition between stories further apart than that "
        "is not seen, so the ratio of a large system is a local one. Longer stories compress "
        "better; it depends on the number of stories. The per-system table's interval is "
        "degenerate (every story carries the system's one value).",
        refs="Shaib et al. (2024), Standardizing the measurement of text diversity.",
    ),
)
def compression_ratio(
    texts: Texts,
    groups: Groups | None = None,
    *,
    level: Annotated[int, Opt("gzip compression level", minimum=1, maximum=9)] = 9,
) -> SetDiversityScores:
    """Each text gets the compression ratio of its group's texts (all texts are one group
    without ``groups``).

    >>> repeated = "The cat sat on the mat. " * 4
    >>> varied = ["A storm rolled over the hills.", "Nobody answered the bell."]
    >>> r = compression_ratio([repeated, repeated, *varied], ["s", "s", "t", "t"])
    >>> bool(r.values[0] == r.values[1] > r.values[2] == r.values[3])
    True
    """
    values = np.full(len(texts), np.nan)
    for indices in _by_group(texts, groups).values():
        values[indices] = compression_ratio_of([texts[i] for i in indices], level=level)
    return SetDiversityScores(values, notes=_alone_note(values))


def vendi(vectors: np.ndarray) -> float:
    """The Vendi score of the rows of ``vectors`` under the cosine kernel: ``exp`` of the
    Shannon entropy of the eigenvalues of ``K / n`` (Friedman and Dieng 2023): 1 for identical
    items, ``n`` for orthogonal ones. Computed from the ``d x d`` matrix ``X^T X / n`` when
    there are more items than dimensions (the same non-zero eigenvalues).

    >>> round(vendi(np.eye(4)), 6), round(vendi(np.ones((5, 3))), 6)
    (4.0, 1.0)
    """
    x = np.asarray(vectors, dtype=np.float64)
    x = _unit_rows(x)
    n = x.shape[0]
    return _entropy_exp((x.T @ x if n > x.shape[1] else x @ x.T) / n)


def _entropy_exp(gram: np.ndarray) -> float:
    """``exp`` of the Shannon entropy of a Gram matrix's eigenvalues."""
    eigenvalues = np.clip(np.linalg.eigvalsh(gram), 0.0, None)
    eigenvalues = eigenvalues[eigenvalues > 1e-12]
    return float(np.exp(-np.sum(eigenvalues * np.log(eigenvalues))))


#: The n-gram kernel's Vendi score is an eigendecomposition of a square matrix the size of the
#: smaller of a set's stories and its distinct n-grams: cubic in that size. Beyond this size it
#: is refused with a pointer to the embedding kernel (384 dimensions: linear in the stories);
#: hashing the n-grams into fewer dimensions was tried and distorts the score of a diverse set
#: by a third (collisions add similarity), so it is not offered.
MAX_NGRAM_GRAM = 8192


def ngram_vendi(texts: Sequence[str], n: int) -> float:
    """The Vendi score of ``texts`` under the cosine of their word n-gram counts, from sparse
    counts (memory bounded by the Gram matrix, see :data:`MAX_NGRAM_GRAM`).

    >>> round(ngram_vendi(["a b", "a b", "c d"], 1), 4), round(vendi(ngram_vectors(["a b", "a b", "c d"], 1)), 4)
    (1.8899, 1.8899)
    """
    from scipy.sparse import csr_matrix

    from storyeval.metrics.phrases import ngrams, words

    counted = [ngrams(words(text), n) for text in texts]
    vocabulary = {g: k for k, g in enumerate(sorted({g for grams in counted for g in grams}))}
    size = min(len(texts), len(vocabulary))
    if size > MAX_NGRAM_GRAM:
        raise ValueError(
            f"the ngram kernel's Vendi score of {len(texts)} stories with {len(vocabulary)} "
            f"distinct n-grams needs a {size} x {size} eigendecomposition (at most "
            f"{MAX_NGRAM_GRAM}); use kernel embedding, linear in the number of stories"
        )
    rows = [row for row, grams in enumerate(counted) for _ in grams]
    columns = [vocabulary[g] for grams in counted for g in grams]
    shape = (len(texts), max(1, len(vocabulary)))
    x = csr_matrix((np.ones(len(rows)), (rows, columns)), shape=shape, dtype=np.float64)
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    x = csr_matrix(x.multiply(1.0 / np.maximum(norms, 1e-12)[:, None]))
    count = len(texts)
    gram = (x.T @ x if count > shape[1] else x @ x.T).toarray() / count
    return _entropy_exp(gram)


def ngram_vectors(texts: Sequence[str], n: int) -> np.ndarray:
    """Counts of each text's word n-grams (lowercased), one column per distinct n-gram."""
    from storyeval.metrics.phrases import ngrams, words

    counted = [ngrams(words(text), n) for text in texts]
    vocabulary = {g: k for k, g in enumerate(sorted({g for grams in counted for g in grams}))}
    matrix = np.zeros((len(texts), max(1, len(vocabulary))))
    for row, grams in enumerate(counted):
        for gram in grams:
            matrix[row, vocabulary[gram]] += 1
    return matrix


def _whole_story_plan(
    batch: MetricBatch, options: Mapping[str, Any]
) -> Iterable[tuple[str | None, list[str], list[int]]]:
    """Every story's last layer, shared with the other encoder metrics of a run."""
    if options.get("kernel", "embedding") == "embedding":
        cache = batch.context.cache(options["model"])
        yield options["model"], [s.story for s in batch.stories], [cache.n_layers]


@metric(
    "vendi_score",
    description="Vendi score of the system's stories: the effective number of different "
    "stories under a cosine similarity (higher = more diverse)",
    families=("diversity",),
    model="encoder",
    value_range=(1.0, None),
    level="system",
    default=False,
    plan=_whole_story_plan,
    card=MetricCard(
        measures="The Vendi score (Friedman and Dieng 2023) of a system's stories: the "
        "exponential of the entropy of the eigenvalues of their similarity matrix divided by "
        "the number of stories. The similarity is the cosine of the encoder's mean-pooled "
        "last layer (`kernel: embedding`, the offline MiniLM by default) or of word n-gram "
        "counts (`kernel: ngram`). Every story gets its system's value.",
        read="From 1 (all stories alike) to the number of stories (all orthogonal): the "
        "effective number of distinct stories. Compare systems with equal numbers of "
        "stories (it grows with them); divide by the count for a share.",
        papers="Friedman and Dieng (2023) introduce it as a reference-free diversity "
        "measure for generative models; Shaib et al. (2024) compare it with other text "
        "diversity scores.",
        limits="A property of the kernel: embeddings see topic and style, n-grams surface "
        "form. Not a quality measure: random text is maximally diverse. The per-system "
        "table's interval is degenerate (every story carries the system's one value). Cost: "
        "linear in the stories with embeddings; the n-gram kernel decomposes a matrix as "
        "large as the smaller of a system's stories and distinct n-grams (cubic; refused "
        "beyond 8,192, use the embedding kernel for larger sets).",
        refs="Friedman and Dieng (2023), The Vendi Score.",
    ),
)
def vendi_score(
    texts: Texts,
    groups: Groups | None = None,
    *,
    kernel: Annotated[
        Literal["embedding", "ngram"], Opt("the similarity: encoder cosine or n-gram cosine")
    ] = "embedding",
    n: Annotated[int, Opt("n-gram order of the ngram kernel", minimum=1, maximum=6)] = 1,
    model: EncoderName = None,
    batch_tokens: BatchTokens = 4096,
    scoring: ScoringContext = INJECTED,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> SetDiversityScores:
    """Each text gets the Vendi score of its group's texts (all texts are one group without
    ``groups``).

    >>> F = vendi_score(["a b", "a b", "c d", "e f", "g"], ["x", "x", "y", "y", "z"], kernel="ngram")
    >>> F.values.round(3).tolist()
    [1.0, 1.0, 2.0, 2.0, nan]
    """
    values = np.full(len(texts), np.nan)
    models: dict[str, str] = {}
    if kernel == "embedding":
        cache = encoder_cache(scoring, model, batch_tokens)
        vectors = cache.text_embeddings(list(texts))
        models = {"model": cache.identity}
        for indices in _by_group(texts, groups).values():
            values[indices] = vendi(vectors[indices])
    else:  # per group, sparse: the n-grams of one system's stories only
        for indices in _by_group(texts, groups).values():
            values[indices] = ngram_vendi([texts[i] for i in indices], n)
    fields: dict[str, Any] = {"kernel": kernel}
    fields.update({"n": n} if kernel == "ngram" else {"pooling": "mean"})
    return SetDiversityScores(values, models=models, fields=fields, notes=_alone_note(values))


@metric(
    "homogenization",
    description="Mean cosine similarity of a story to the other systems' stories for the same "
    "prompt (higher = the systems write the same story)",
    families=("diversity",),
    model="encoder",
    higher_is_better=False,
    value_range=(-1.0, 1.0),
    level="system",
    default=False,
    plan=_whole_story_plan,
    card=MetricCard(
        measures="How alike different systems' stories for one prompt are: the mean cosine "
        "similarity of a story's embedding (the encoder's mean-pooled last layer, the offline "
        "MiniLM by default) to every other system's stories for the same prompt (the same "
        "prompt text). The per-system mean says how much a system writes what the others "
        "write. `among: samples` compares a story with its own system's other samples for "
        "the prompt instead: how much a system repeats itself.",
        read="-1..1, in practice 0.2-0.9 for stories; higher = more homogeneous across "
        "systems. Undefined for a story whose prompt no other system answered.",
        papers="Jiang et al. (2025, the 'artificial hivemind') find different LLMs write "
        "strikingly similar answers to the same open-ended prompt; Padmakumar and He (2024) "
        "find writing with an LLM homogenises what people write.",
        limits="Embedding similarity mixes topic and plot: stories on one prompt share its "
        "topic, so compare systems with each other and with the human stories' value, not "
        "with a fixed threshold.",
        refs="Jiang et al. (2025); Padmakumar and He (2024).",
    ),
)
def homogenization(
    texts: Texts,
    prompts: Prompts,
    groups: Groups | None = None,
    *,
    among: Annotated[
        Literal["systems", "samples"],
        Opt("compare with the other systems' stories, or with the system's own other samples"),
    ] = "systems",
    model: EncoderName = None,
    batch_tokens: BatchTokens = 4096,
    scoring: ScoringContext = INJECTED,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> SetDiversityScores:
    """Each text's mean cosine similarity to the texts of other groups with the same prompt
    (``among="samples"``: to the other texts of its own group with the same prompt; NaN
    without one)."""
    cache = encoder_cache(scoring, model, batch_tokens)
    vectors = cache.text_embeddings(list(texts))
    vectors = _unit_rows(vectors)
    labels = [str(g) for g in groups] if groups is not None else [str(i) for i in range(len(texts))]
    by_prompt: dict[str, list[int]] = {}
    for index, prompt in enumerate(prompts):
        by_prompt.setdefault(prompt.strip(), []).append(index)
    values = np.full(len(texts), np.nan)
    for members in by_prompt.values():
        for i in members:
            if among == "systems":
                others = [j for j in members if labels[j] != labels[i]]
            else:
                others = [j for j in members if labels[j] == labels[i] and j != i]
            if others:
                values[i] = float((vectors[others] @ vectors[i]).mean())
    notes: tuple[str, ...] = ()
    if np.isnan(values).any():
        whose = "other system's story" if among == "systems" else "other sample of its system"
        notes = (
            f"{int(np.isnan(values).sum())} stories have no {whose} for their prompt: undefined",
        )
    return SetDiversityScores(
        values, models={"model": cache.identity}, fields={"pooling": "mean"}, notes=notes
    )


def equivalence_classes(similarity: np.ndarray, threshold: float) -> np.ndarray:
    """Class labels of items whose pairwise similarity reaches ``threshold`` (the connected
    components of the graph of such pairs: independent of the items' order).

    >>> s = np.array([[1, .95, .2], [.95, 1, .1], [.2, .1, 1]])
    >>> equivalence_classes(s, 0.9).tolist()
    [0, 0, 1]
    """
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    _, labels = connected_components(csr_matrix(similarity >= threshold), directed=False)
    return np.asarray(labels)


def _by_group_and_prompt(
    prompts: Prompts, groups: Groups | None, *, by_prompt: bool = True
) -> list[list[int]]:
    members: dict[tuple[str, str], list[int]] = {}
    for index, prompt in enumerate(prompts):
        group = str(groups[index]) if groups is not None else "all"
        members.setdefault((group, prompt.strip() if by_prompt else ""), []).append(index)
    return [indices for indices in members.values() if len(indices) > 1]


@metric(
    "functional_diversity",
    description="Number of meaningfully different stories among a system's samples for one "
    "prompt (NoveltyBench-style distinct_k; stories as alike as the threshold count once)",
    families=("diversity",),
    model="encoder",
    value_range=(1.0, None),
    level="system",
    default=False,
    plan=_whole_story_plan,
    card=MetricCard(
        measures="For each system and prompt with several samples, the number of classes of "
        "equivalent stories among them (distinct_k of Zhang et al. 2025's NoveltyBench): two "
        "stories are equivalent when the cosine similarity of their embeddings (the "
        "encoder's mean-pooled last layer; `kernel: ngram`: of word n-gram counts) reaches "
        "`threshold`, and classes are the connected groups of equivalent stories. Every "
        "story gets its prompt's count; the system mean is the mean over prompts. "
        "`within: system` counts distinct stories among all of a system's stories instead.",
        read="From 1 (every sample the same story) to k (all different), for k samples per "
        "prompt: compare systems with the same k. Read beside a quality score: random text "
        "is maximally diverse.",
        papers="Zhang et al. (2025) find that language models asked for several answers to "
        "one creative prompt give far fewer distinct ones than people, and that larger "
        "models are often less diverse.",
        limits="NoveltyBench decides equivalence with a trained classifier and compares each "
        "sample with earlier classes in order; storyeval's similarity kernels use a "
        "threshold and connected groups (independent of order, but chains of "
        "near-equivalents merge); `kernel: judge` follows NoveltyBench's procedure with an "
        "LLM judge asked whether two stories are essentially the same (each sample against "
        "the first member of each earlier class, in file order; `partition:sequential` in "
        "the signature), one model call per comparison. "
        "The threshold matters: calibrate it on pairs you judge by hand. Undefined for a "
        "prompt with one sample.",
        refs="Zhang et al. (2025), NoveltyBench: evaluating language models for humanlike "
        "diversity.",
    ),
)
def functional_diversity(
    texts: Texts,
    prompts: Prompts,
    groups: Groups | None = None,
    *,
    threshold: Annotated[
        float, Opt("similarity at which two stories count as the same", minimum=0.0, maximum=1.0)
    ] = 0.9,
    kernel: Annotated[
        Literal["embedding", "ngram", "judge"],
        Opt("the equivalence: encoder cosine, n-gram cosine, or an LLM judge's yes"),
    ] = "embedding",
    n: Annotated[int, Opt("n-gram order of the ngram kernel", minimum=1, maximum=6)] = 1,
    within: Annotated[
        Literal["prompt", "system"],
        Opt("count distinct stories per prompt, or among all of a system's stories"),
    ] = "prompt",
    judge: Annotated[
        str | None,
        Opt("kernel judge: a local causal LM (hub name or directory; default the offline SmolLM2)"),
    ] = None,
    model: EncoderName = None,
    batch_tokens: BatchTokens = 4096,
    scoring: ScoringContext = INJECTED,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> SetDiversityScores:
    """Each text gets the number of equivalence classes among its group's texts for its
    prompt (``within="system"``: among all its group's texts); NaN when it is the only one."""
    sets = _by_group_and_prompt(prompts, groups, by_prompt=within == "prompt")
    if kernel == "judge":
        return _judged_diversity(texts, prompts, sets, judge, device, precision)
    models: dict[str, str] = {}
    if kernel == "embedding":
        cache = encoder_cache(scoring, model, batch_tokens)
        wanted = sorted({i for indices in sets for i in indices})
        vectors = np.zeros((len(texts), 1))
        if wanted:
            found = cache.text_embeddings([texts[i] for i in wanted])
            vectors = np.zeros((len(texts), found.shape[1]))
            vectors[wanted] = found
        models["model"] = cache.identity
    values = np.full(len(texts), np.nan)
    for indices in sets:
        chosen = (
            vectors[indices]
            if kernel == "embedding"
            else ngram_vectors([texts[i] for i in indices], n)
        )
        unit = _unit_rows(chosen)
        values[indices] = len(set(equivalence_classes(unit @ unit.T, threshold).tolist()))
    notes = _only_sample_note(values)
    omit = ("model", "batch_tokens", "judge") if kernel == "ngram" else ("n", "judge")
    return SetDiversityScores(values, models=models, notes=notes, omit=omit)


def judged_classes(texts: Sequence[str], same: Any) -> list[int]:
    """NoveltyBench's partition (Zhang et al. 2025): each text in order joins the first class
    whose first member ``same(first_member_text, text)`` says it equals, else starts a class.

    >>> judged_classes(["a", "b", "a", "c"], lambda x, y: x == y)
    [0, 1, 0, 2]
    """
    firsts: list[str] = []
    labels = []
    for text in texts:
        match = next((k for k, first in enumerate(firsts) if same(first, text)), None)
        if match is None:
            firsts.append(text)
            match = len(firsts) - 1
        labels.append(match)
    return labels


#: Decides whether two texts (samples for one prompt) are essentially the same story:
#: ``same(first, second, prompt) -> bool``.
SameStory = Callable[[str, str, str], bool]

#: Equivalence judges for ``functional_diversity(kernel="judge")``: a factory
#: ``(model, device, precision) -> (same, identity)``. The LLM judge is written with the
#: judges (:mod:`storyeval.judge.equivalence`) and registered there, so that the metrics
#: need nothing of the judge code.
EQUIVALENCE_JUDGES: Registry[Callable[[str | None, str, str], tuple[SameStory, str]]] = Registry(
    "equivalence judge", builtins=("storyeval.judge.equivalence",)
)


def _judged_diversity(
    texts: Texts,
    prompts: Prompts,
    sets: list[list[int]],
    judge: str | None,
    device: Any,
    precision: Any,
) -> SetDiversityScores:
    """functional_diversity with an LLM judge deciding equivalence (NoveltyBench's procedure:
    each sample against the first of each class so far)."""
    same, identity = EQUIVALENCE_JUDGES.get("llm")(judge, device or "cpu", precision or "float32")
    values = np.full(len(texts), np.nan)
    for indices in sets:
        prompt = str(prompts[indices[0]])
        labels = judged_classes([texts[i] for i in indices], lambda a, b, p=prompt: same(a, b, p))
        values[indices] = len(set(labels))
    return SetDiversityScores(
        values,
        models={"judge": identity},
        fields={"partition": "sequential"},
        notes=_only_sample_note(values),
        omit=("model", "batch_tokens", "n", "threshold"),
    )


def _sentence_plan(
    batch: MetricBatch, options: Mapping[str, Any]
) -> Iterable[tuple[str | None, list[str], list[int]]]:
    """Every sentence of every story at the last layer (the events compared)."""
    cache = batch.context.cache(options["model"])
    texts = [t for s in batch.stories for t in batch.context.sentences(s.story)]
    yield options["model"], texts, [cache.n_layers]


def event_reuse(events: Sequence[np.ndarray], threshold: float) -> np.ndarray:
    """Per sample, the share of its events (rows, unit vectors) that have a match (cosine at
    least ``threshold``) among the other samples' events; nan for a sample without events.

    >>> a, b = np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 0.0]])
    >>> event_reuse([a, b], 0.9).tolist()
    [0.5, 1.0]
    """
    out = np.full(len(events), np.nan)
    for k, mine in enumerate(events):
        others = [e for j, e in enumerate(events) if j != k and len(e)]
        if not len(mine) or not others:
            continue
        best = (mine @ np.vstack(others).T).max(axis=1)
        out[k] = float((best >= threshold).mean())
    return out


@metric(
    "plot_reuse",
    description="Share of the story's events (sentences) that reappear in the system's other "
    "samples for the same prompt (higher = the samples retell one plot)",
    families=("diversity",),
    model="encoder",
    higher_is_better=False,
    value_range=(0.0, 1.0),
    level="system",
    default=False,
    plan=_sentence_plan,
    card=MetricCard(
        measures="Plot-level diversity in the manner of Sui Generis (Xu et al. 2025): of "
        "several samples one system wrote for one prompt, the share of a sample's events "
        "that reappear in the others. Events are the story's sentences; a sentence reappears "
        "when a sentence of another sample is at least `threshold` similar (cosine of the "
        "encoder's mean-pooled last layer). The system mean is over its samples.",
        read="0-1; 0: every sample tells new events, 1: every event of a sample is retold in "
        "another. Compare systems at the same number of samples per prompt, beside a "
        "quality score.",
        papers="Xu et al. (2025) find that LLMs' continuations of a story reuse the same plot "
        "elements across samples far more than human writers' do.",
        limits="Sentences stand in for plot events (Sui Generis extracts events with an LLM); "
        "a paraphrase below the threshold counts as new, a shared generic sentence ('The end.') "
        "as reused. Undefined for a prompt with one sample.",
        refs="Xu et al. (2025), Echoes in AI: quantifying lack of plot diversity in LLM outputs.",
    ),
)
def plot_reuse(
    texts: Texts,
    prompts: Prompts,
    groups: Groups | None = None,
    *,
    threshold: Annotated[
        float, Opt("similarity at which a sentence is the same event", minimum=0.0, maximum=1.0)
    ] = 0.8,
    within: Annotated[
        Literal["prompt", "system"],
        Opt("compare the samples of a prompt, or all of a system's stories"),
    ] = "prompt",
    model: EncoderName = None,
    batch_tokens: BatchTokens = 4096,
    scoring: ScoringContext = INJECTED,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> SetDiversityScores:
    """Each text's share of sentences found again in its group's other texts for its prompt."""
    cache = encoder_cache(scoring, model, batch_tokens)
    sentences = [scoring.sentences(t) for t in texts]
    flat = [s for group in sentences for s in group]
    vectors = cache.text_embeddings(flat) if flat else np.zeros((0, 1))
    vectors = _unit_rows(vectors)
    bounds = np.cumsum([0, *(len(group) for group in sentences)])
    values = np.full(len(texts), np.nan)
    for indices in _by_group_and_prompt(prompts, groups, by_prompt=within == "prompt"):
        events = [vectors[bounds[i] : bounds[i + 1]] for i in indices]
        values[indices] = event_reuse(events, threshold)
    notes = _only_sample_note(values)
    return SetDiversityScores(values, models={"model": cache.identity}, notes=notes)
