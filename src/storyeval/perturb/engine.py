"""Applying techniques to stories: one story, a whole corpus, or UNION's random mixture."""

from __future__ import annotations

import random
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from storyeval.base.errors import StoryevalError, StoryevalWarning
from storyeval.base.signature import Signature
from storyeval.base.validation import check_choice
from storyeval.corpus import Story
from storyeval.engine.blocks import Executor, consecutive_blocks
from storyeval.perturb.base import (
    TECHNIQUES,
    UNION_COUNT_PROBABILITIES,
    Edit,
    NotApplicableError,
    PerturbOptions,
    get_technique,
    parse_techniques,
    story_rng,
)
from storyeval.perturb.corpus import PerturbationCorpus

Mode = Literal["all", "mix", "each"]
MODES: tuple[str, ...] = ("all", "mix", "each")


class SkippedStoriesWarning(StoryevalWarning):
    """Some stories could not be perturbed and were left out (their ids are in the message)."""


@dataclass
class PerturbedStory:
    """A perturbed story and how it was made.

    Attributes
    ----------
    id : str
        ``SOURCE-pK`` (one output per story, K counting samples) or ``SOURCE-TECHNIQUE``
        (mode ``each``).
    source_id : str
        The id of the story it was made from.
    prompt : str
        The source story's prompt (unchanged).
    story : str
        The perturbed text.
    techniques : list of str
        The techniques applied, in the order they ran.
    edits : list of Edit
        Where and how each technique changed the story.
    original : str
        The source text (after delexicalization, when asked for).
    redraws : list of Redraw
        Mode ``mix``: the drawn techniques that could not change the story and what was
        drawn in their place.
    """

    id: str
    source_id: str
    prompt: str
    story: str
    techniques: list[str]
    edits: list[Edit] = field(default_factory=list)
    original: str = ""
    redraws: list[Redraw] = field(default_factory=list)

    def to_record(self, signature: Signature | None = None) -> dict[str, Any]:
        """The output record: ``id``, ``source_id``, ``prompt``, ``story``, ``techniques``,
        ``edits``, ``system`` (``perturbed``) and the run's ``signature``."""
        record: dict[str, Any] = {
            "id": self.id,
            "source_id": self.source_id,
            "prompt": self.prompt,
            "story": self.story,
            "techniques": list(self.techniques),
            "edits": [edit.to_dict() for edit in self.edits],
            "system": "perturbed",
        }
        if self.redraws:
            record["redrawn"] = [redraw.to_dict() for redraw in self.redraws]
        if signature is not None:
            record["signature"] = signature.render()
        return record


def sample_mixture(
    rng: random.Random, techniques: Sequence[str], options: PerturbOptions | None = None
) -> list[str]:
    """Draw the techniques for one UNION negative sample (Guan & Huang 2020, 3.2).

    The number of techniques is drawn from {1, 2, 3, 4} with probabilities
    {0.5, 0.2, 0.2, 0.1} (restricted to the number available and renormalized, for
    ablations that leave techniques out); the techniques are then drawn without
    replacement with weights repetition 0.1, substitution 0.3, reordering 0.4, negation 0.2
    (or ``options.mix_weights``). They are returned in application order (registry order).

    >>> sample_mixture(random.Random(0), ["repetition", "substitution", "reordering", "negation"])
    ['repetition', 'substitution', 'reordering']
    """
    names = parse_techniques(list(techniques))
    sizes = [n for n in UNION_COUNT_PROBABILITIES if n <= len(names)]
    size = rng.choices(sizes, weights=[UNION_COUNT_PROBABILITIES[n] for n in sizes], k=1)[0]
    options = options or PerturbOptions()
    pool = list(names)
    chosen: list[str] = []
    while len(chosen) < size:
        weights = [options.mix_weight(name) for name in pool]
        pick = rng.choices(pool, weights=weights, k=1)[0]
        chosen.append(pick)
        pool.remove(pick)
    return [name for name in TECHNIQUES if name in chosen]


@dataclass(frozen=True)
class Redraw:
    """A technique a UNION mixture drew that could not change the story as it stood, and what
    was drawn in its place.

    Attributes
    ----------
    technique : str
        The technique that could not be applied.
    reason : str
        Why (naming the earlier techniques of the mixture when they caused it).
    replacement : str or None
        The technique drawn in its place from those not drawn yet (weighted as the mixture
        draws); None when none was left, so the mixture has one technique fewer.
    """

    technique: str
    reason: str
    replacement: str | None

    def to_dict(self) -> dict[str, Any]:
        """For the output record."""
        return {"technique": self.technique, "reason": self.reason, "replacement": self.replacement}


def _apply_one(
    name: str,
    sentences: list[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions,
    after: Sequence[str],
) -> tuple[list[str], list[Edit]]:
    """Technique ``name`` on the story's current ``sentences``; a
    :class:`NotApplicableError` names the story and, when earlier techniques (``after``)
    changed it, says so: the cause may be their edit, not the story."""
    technique = get_technique(name)
    since = f" (after {', '.join(after)} changed the story)" if after else ""
    if len(sentences) < technique.min_sentences:
        raise NotApplicableError(
            name,
            f"the story has {len(sentences)} sentence(s) and {name} needs at least "
            f"{technique.min_sentences}{since}",
            story_id,
        )
    try:
        return technique.apply(sentences, rng, corpus, story_id=story_id, options=options)
    except NotApplicableError as exc:
        raise NotApplicableError(name, exc.reason + since, story_id) from None


def _story_sentences(text: str, corpus: PerturbationCorpus, story_id: str) -> tuple[Any, list[str]]:
    split = corpus.split(story_id, text)
    if not split.sentences:
        raise NotApplicableError("perturbation", "the story is empty", story_id)
    return split, list(split.sentences)


def _changed(
    split: Any, sentences: list[str], text: str, applied: Sequence[str], story_id: str
) -> str:
    """The joined text; an error when the techniques gave back the original."""
    result: str = split.join(sentences)
    if result == text.strip() or result == split.join(split.sentences):
        raise NotApplicableError(
            "+".join(applied), "the techniques gave back the original text", story_id
        )
    return result


def apply_techniques(
    text: str,
    techniques: Sequence[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions | None = None,
) -> tuple[str, list[str], list[Edit]]:
    """Apply every technique in ``techniques`` (in registry order) to ``text``, each to the
    story as the ones before it left it.

    Returns the new text, the techniques applied and the edits. Raises
    :class:`NotApplicableError` (naming the story, and the earlier techniques when the story
    they left is why) when one cannot be applied.
    """
    options = options or PerturbOptions()
    split, sentences = _story_sentences(text, corpus, story_id)
    applied: list[str] = []
    edits: list[Edit] = []
    for name in parse_techniques(list(techniques)):
        sentences, new_edits = _apply_one(
            name, sentences, rng, corpus, story_id=story_id, options=options, after=applied
        )
        applied.append(name)
        edits += new_edits
    return _changed(split, sentences, text, applied, story_id), applied, edits


def apply_mixture(
    text: str,
    techniques: Sequence[str],
    rng: random.Random,
    corpus: PerturbationCorpus,
    *,
    story_id: str,
    options: PerturbOptions | None = None,
) -> tuple[str, list[str], list[Edit], list[Redraw]]:
    """Apply a UNION mixture (:func:`sample_mixture`) drawn from ``techniques``.

    The drawn techniques run in registry order, each on the story as the earlier ones left
    it. One that cannot change the story then (reordering a one-sentence story, or two
    sentences that an earlier repetition made identical; negating a story without verbs) is
    replaced by a technique not drawn yet, drawn with the mixture's weights, as a fresh draw
    of UNION's sampling would be; when none is left, the mixture has one technique fewer.
    Every such case is returned as a :class:`Redraw`. Raises :class:`NotApplicableError`
    only when no technique can change the story.
    """
    options = options or PerturbOptions()
    names = parse_techniques(list(techniques))
    drawn = sample_mixture(rng, names, options)
    undrawn = [name for name in names if name not in drawn]
    split, sentences = _story_sentences(text, corpus, story_id)
    applied: list[str] = []
    edits: list[Edit] = []
    redraws: list[Redraw] = []
    for name in drawn:
        current: str | None = name
        while current is not None:
            try:
                sentences, new_edits = _apply_one(
                    current, sentences, rng, corpus, story_id=story_id, options=options,
                    after=applied,
                )  # fmt: skip
            except NotApplicableError as exc:
                replacement = _redraw(rng, undrawn, options)
                redraws.append(Redraw(current, exc.reason, replacement))
                current = replacement
                continue
            applied.append(current)
            edits += new_edits
            break
    if not applied:
        reasons = "; ".join(f"{r.technique}: {r.reason}" for r in redraws)
        raise NotApplicableError(
            "every technique", f"none can change this story ({reasons})", story_id
        )
    return _changed(split, sentences, text, applied, story_id), applied, edits, redraws


def _redraw(rng: random.Random, undrawn: list[str], options: PerturbOptions) -> str | None:
    """A technique drawn (and removed) from ``undrawn`` with the mixture's weights; None
    when it is empty."""
    if not undrawn:
        return None
    pick = rng.choices(undrawn, weights=[options.mix_weight(n) for n in undrawn], k=1)[0]
    undrawn.remove(pick)
    return pick


def _check_run(mode: str, samples: int, seed: int) -> None:
    check_choice(mode, MODES, "mode")
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        raise ValueError(f"samples must be a positive integer; got {samples!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer; got {seed!r}")


def _jobs(
    sources: Sequence[Story], names: Sequence[str], mode: str, samples: int
) -> list[tuple[Story, str, list[str], int]]:
    """``(story, output id, techniques, sample)`` for every output; an output id that is a
    source id too is an error."""
    jobs: list[tuple[Story, str, list[str], int]] = []
    for story in sources:
        for sample in range(samples):
            if mode == "each":
                for name in names:
                    suffix = name if samples == 1 else f"{name}{sample}"
                    jobs.append((story, f"{story.id}-{suffix}", [name], sample))
            else:
                jobs.append((story, f"{story.id}-p{sample}", list(names), sample))
    seen = {story.id for story in sources}
    for _, new_id, _, _ in jobs:
        if new_id in seen:
            raise StoryevalError(
                f"the output id {new_id!r} is also a source story id; rename the source story"
            )
        seen.add(new_id)
    return jobs


@dataclass
class PerturbationRun:
    """The result of :func:`perturb_stories`: the perturbed stories, the outputs left out
    (id -> reason) and the run's signature.

    In mode ``mix`` the signature also counts the outputs with a redrawn technique
    (``redrawn``) and those left out (``left_out``), so two runs that differ there say so.
    """

    stories: list[PerturbedStory]
    skipped: dict[str, str]
    signature: Signature

    def records(self) -> list[dict[str, Any]]:
        """The perturbed stories as story records (with their techniques and edits)."""
        return [story.to_record(self.signature) for story in self.stories]

    @property
    def redrawn(self) -> int:
        """How many outputs had a drawn technique replaced (mode ``mix``)."""
        return sum(bool(story.redraws) for story in self.stories)

    def summary(self) -> str:
        """One line: outputs written, redrawn and left out."""
        line = f"{len(self.stories)} perturbed"
        if self.signature.fields.get("mode") == "mix":
            line += f"; {self.redrawn} with a technique redrawn"
        return line + f"; {len(self.skipped)} left out"


def _counted(signature: Signature, stories: Sequence[PerturbedStory], skipped: int) -> Signature:
    """A mixture run's signature with its redrawn and left-out counts."""
    if signature.fields.get("mode") != "mix":
        return signature
    redrawn = sum(bool(story.redraws) for story in stories)
    return signature.with_fields(redrawn=redrawn, left_out=skipped)


def perturbation_signature(
    techniques: Sequence[str],
    *,
    mode: str,
    seed: int,
    samples: int,
    options: PerturbOptions,
    delexicalize: bool,
    nlp: Any,
    style: str | None = None,
) -> Signature:
    """The signature of a perturbation run: techniques, mode, seed, options, the corpus's
    negation style, spaCy and WordNet."""
    from storyeval.models import spacy_identity

    fields: dict[str, Any] = {
        "techniques": ",".join(techniques),
        "mode": mode,
        "samples": samples,
        "seed": seed,
        **options.signature_fields(),
    }
    if style is not None:
        fields["negation_style"] = style
    fields.update(delex=delexicalize, spacy=spacy_identity(nlp), wordnet="3.0")
    return Signature("perturb", fields)


def perturb_stories(
    stories: Sequence[Story],
    techniques: str | Sequence[str] | None = None,
    *,
    mode: Mode = "all",
    seed: int = 0,
    samples: int = 1,
    options: PerturbOptions | None = None,
    delexicalize: bool = False,
    skip_inapplicable: bool = False,
    nlp: Any = None,
    corpus: PerturbationCorpus | None = None,
    progress: bool = False,
) -> PerturbationRun:
    """Perturb every story of a corpus.

    Parameters
    ----------
    stories : sequence of Story
        The source stories; their ``story`` text is perturbed, the ``prompt`` kept.
    techniques : str or sequence of str, optional
        Technique names (comma-separated string or list); default all registered ones.
    mode : {"all", "mix", "each"}
        ``all`` applies every listed technique to every story (one output per sample);
        ``mix`` draws a UNION mixture from the listed techniques for each sample;
        ``each`` makes one output per story and technique.
    seed : int
        Seed; each story's draws depend only on the seed, its id and the sample number.
    samples : int
        Outputs per story (per technique, in mode ``each``).
    options : PerturbOptions, optional
        Technique knobs (keyword rate, probabilities); defaults follow the paper.
    delexicalize : bool
        Replace character names by ``[MALE]``/``[FEMALE]``/``[NEUTRAL]`` first.
    skip_inapplicable : bool
        Leave out (and report in ``skipped``, with a :class:`SkippedStoriesWarning`) stories
        a technique cannot change; by default they raise :class:`NotApplicableError`. In mode
        ``mix`` a story is always left out rather than stopping the run (and only when no
        technique can change it: see :func:`apply_mixture`).
    nlp : spaCy Language, optional
        The pipeline for POS tags, parses and names (default
        :func:`storyeval.models.load_spacy`).
    corpus : PerturbationCorpus, optional
        A prepared corpus (built from ``stories`` when absent).

    Returns
    -------
    PerturbationRun

    Examples
    --------
    >>> from storyeval.corpus import Story
    >>> stories = [Story("a", "", "Ken went jogging. The air was cold. He ran two miles."),
    ...            Story("b", "", "Mia baked bread. It rose well. She ate it warm.")]
    >>> run = perturb_stories(stories, "reordering", seed=1)
    >>> [(s.id, s.techniques) for s in run.stories]
    [('a-p0', ['reordering']), ('b-p0', ['reordering'])]
    """
    _check_run(mode, samples, seed)
    names = parse_techniques(techniques)
    options = options or PerturbOptions()
    if nlp is None:
        from storyeval.models import load_spacy

        nlp = corpus.nlp if corpus is not None else load_spacy()
    if not stories:
        raise StoryevalError("there are no stories to perturb")
    sources = list(stories)
    if delexicalize:
        from storyeval.perturb.delex import Delexicalizer

        delex = Delexicalizer(nlp=nlp)
        sources = [delex.story(story) for story in sources]
    if corpus is None:
        corpus = PerturbationCorpus(
            ((story.id, story.story) for story in sources), nlp=nlp, progress=progress
        )
    signature = perturbation_signature(
        names,
        mode=mode,
        seed=seed,
        samples=samples,
        options=options,
        delexicalize=delexicalize,
        nlp=nlp,
        style=corpus.style.describe(),
    )
    jobs = _jobs(sources, names, mode, samples)
    iterator: Any = jobs
    if progress:
        from tqdm import tqdm

        iterator = tqdm(jobs, desc="perturbing", unit="story", leave=False)
    results: list[PerturbedStory] = []
    skipped: dict[str, str] = {}
    for story, new_id, chosen, sample in iterator:
        rng = story_rng(seed, story.id, mode, ",".join(chosen), sample)
        redraws: list[Redraw] = []
        try:
            if mode == "mix":
                text, applied, edits, redraws = apply_mixture(
                    story.story, chosen, rng, corpus, story_id=story.id, options=options
                )
            else:
                text, applied, edits = apply_techniques(
                    story.story, chosen, rng, corpus, story_id=story.id, options=options
                )
        except NotApplicableError as exc:
            if not (skip_inapplicable or mode == "mix"):  # a mixture never stops the corpus
                raise
            skipped[new_id] = str(exc)
            continue
        results.append(
            PerturbedStory(
                new_id, story.id, story.prompt, text, applied, edits, story.story, redraws
            )
        )
    if skipped:
        shown = ", ".join(list(skipped)[:5]) + (" ..." if len(skipped) > 5 else "")
        warnings.warn(
            f"{len(skipped)} output(s) left out because no technique could change the story: "
            f"{shown}",
            SkippedStoriesWarning,
            stacklevel=2,
        )
    return PerturbationRun(results, skipped, _counted(signature, results, len(skipped)))


def perturb_on(
    executor: Executor,
    techniques: str | Sequence[str] | None = None,
    *,
    block_size: int = 500,
    nlp: Any = None,
    progress: bool = False,
    **settings: Any,
) -> PerturbationRun:
    """Perturb the stories an executor holds. Each part is parsed where it is held and its
    keywords, sentences and negation style counted; the counts are summed into the corpus
    every technique draws from (as :class:`~storyeval.perturb.corpus.PerturbationCorpus` does
    from the stories themselves), and each story's draws depend only on the seed and its id,
    so every executor gives the same stories. ``settings`` are the keyword arguments of
    :func:`perturb_stories`; ``nlp`` and ``progress`` apply in this process only.

    Raises
    ------
    StoryevalError
        When there are no stories, or an output id is also a source story's id.
    """
    if executor.n_stories == 0:
        raise StoryevalError("there are no stories to perturb")
    _check_run(settings.get("mode", "all"), settings.get("samples", 1), settings.get("seed", 0))
    settings = {**settings, "techniques": parse_techniques(techniques)}
    local_nlp = nlp if executor.in_process else None
    counts = executor.map_parts(count_part, bool(settings.get("delexicalize")), local_nlp)
    if executor.in_process:
        settings.update(nlp=nlp, progress=progress)
        source: Any = PerturbationCorpus([], nlp=nlp, counts=counts)
    else:
        source = counts
    blocks = consecutive_blocks(executor.n_stories, block_size)
    runs = executor.map_blocks(perturb_block, blocks, source, uuid.uuid4().hex, settings)
    ids = {story.id for story in executor.stubs()}
    stories: list[PerturbedStory] = []
    skipped: dict[str, str] = {}
    for run in runs:
        for story in run.stories:
            if story.id in ids:
                raise StoryevalError(
                    f"the output id {story.id!r} is also a source story id; rename the source story"
                )
            ids.add(story.id)
        stories += run.stories
        skipped.update(run.skipped)
    base = runs[0].signature.without("redrawn", "left_out")
    return PerturbationRun(stories, skipped, _counted(base, stories, len(skipped)))


def count_part(stories: Sequence[Story], offset: int, delexicalize: bool, nlp: Any) -> Any:
    """The perturbation-corpus counts of one part of the stories (parsed with spaCy where
    the part is held)."""
    from storyeval.perturb.corpus import count_corpus

    if nlp is None:
        from storyeval.models import load_spacy

        nlp = load_spacy()
    if delexicalize:
        from storyeval.perturb.delex import Delexicalizer

        delex = Delexicalizer(nlp=nlp)
        stories = [delex.story(story) for story in stories]
    return count_corpus(((s.id, s.story) for s in stories), nlp)


#: corpora built from counts, one per run, per process (a worker builds a run's corpus once)
_CORPORA: dict[str, PerturbationCorpus] = {}


def perturb_block(
    stories: list[Story], block: int, source: Any, key: str, settings: dict[str, Any]
) -> PerturbationRun:
    """Perturb one block where the executor runs it, with the corpus of the whole run
    (``source``: the corpus itself, or the counts of its parts, built into a corpus once per
    process)."""
    if not isinstance(source, PerturbationCorpus):
        if key not in _CORPORA:
            _CORPORA.clear()
            _CORPORA[key] = PerturbationCorpus([], counts=source)
        source = _CORPORA[key]
    return perturb_stories(stories, corpus=source, **settings)


def perturb_source(
    source: str | Path,
    *,
    client: Any,
    block_size: int = 500,
    progress: bool = False,
    **settings: Any,
) -> Any:
    """Perturb a story file on a Dask cluster: :func:`~storyeval.perturb.engine.perturb_on`
    with this cluster's executor (workers parse and count their partitions; the counts make
    the corpus every technique draws from), so the result equals the local engine's.
    ``settings`` are those of :func:`storyeval.perturb.perturb_stories`."""
    from storyeval.engine.dask import read_source

    executor = read_source(client, source, progress=progress)
    return perturb_on(executor, block_size=block_size, **settings)
