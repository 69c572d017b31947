"""Records, the technique registry and per-story random generators for perturbations.

A *technique* turns the sentences of a story into a perturbed list of sentences and says
what it changed (a list of :class:`Edit`). Techniques register themselves in
:data:`TECHNIQUES` with :func:`register_technique`; the CLI's choices, the mixing weights and
the tests are read from the registry.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from storyeval.base.errors import StoryevalError
from storyeval.base.registry import Registry, UnknownNameError
from storyeval.base.validation import check_choice

if TYPE_CHECKING:
    from storyeval.perturb.corpus import PerturbationCorpus


class NotApplicableError(StoryevalError, ValueError):
    """A technique cannot change this story (too few sentences, no verb to negate, ...).

    ``technique`` names the technique and ``story_id`` the story (when known).
    """

    def __init__(self, technique: str, reason: str, story_id: str | None = None) -> None:
        self.technique = technique
        self.reason = reason
        self.story_id = story_id
        where = f"story {story_id!r}: " if story_id is not None else ""
        super().__init__(f"{where}{technique} cannot be applied: {reason}")

    def for_story(self, story_id: str) -> NotApplicableError:
        """The same error, naming the story."""
        return NotApplicableError(self.technique, self.reason, story_id)


@dataclass(frozen=True)
class Edit:
    """One change a technique made.

    Attributes
    ----------
    technique : str
        The registered technique name.
    operation : str
        What was done, e.g. ``ngram_repetition``, ``sentence_repetition``, ``antonym``,
        ``keyword``, ``sentence_substitution``, ``reorder``, ``add_negation``,
        ``remove_negation``.
    sentence : int or None
        Index of the sentence changed, counted in the story as it was when this technique ran
        (techniques run in registry order; ``reordering`` runs last, so earlier indices refer
        to the original sentence order). ``None`` for whole-story operations.
    before, after : str or None
        The text replaced and the text that replaced it (a word, an n-gram or a sentence).
    detail : mapping
        Technique-specific facts: the n-gram size, the Table 8 rule, the WordNet antonym,
        the source story of a substituted sentence, the new sentence order, ...
    """

    technique: str
    operation: str
    sentence: int | None
    before: str | None = None
    after: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The edit as a JSON-ready mapping (recorded with the perturbed story)."""
        record: dict[str, Any] = {
            "technique": self.technique,
            "operation": self.operation,
            "sentence": self.sentence,
        }
        if self.before is not None:
            record["before"] = self.before
        if self.after is not None:
            record["after"] = self.after
        record.update(dict(self.detail))
        return record


@dataclass(frozen=True)
class PerturbOptions:
    """Knobs of the techniques (defaults follow Guan & Huang 2020, section 3.2).

    Attributes
    ----------
    keyword_rate : float
        Share of a story's keywords that word-level substitution replaces (15 %).
    sentence_substitution_probability : float
        Probability that substitution replaces a whole sentence instead of keywords.
    sentence_repetition_probability : float
        Probability that repetition repeats a sentence instead of an n-gram.
    max_ngram : int
        Longest n-gram repetition repeats (N = 1..4).
    contraction_probability : float or None
        Probability that an added negation is written "n't" where the verb allows it (None:
        the corpus's own share). Whatever it is, a form the corpus never uses is never
        written, and a tokenized corpus gets "did n't" (see
        :class:`storyeval.perturb.corpus.ContractionStyle`).
    typo_rate : float
        Probability of a typo in each word of four or more letters (the ``typos`` invariance
        test; at least one typo per story).
    antonyms_file : str or None
        A ConceptNet-style file (``word|||/r/Antonym|||antonym`` lines, as in the UNION
        repository; also UNION's negated relations NotDesires, NotCapableOf and
        NotHasProperty) whose antonyms join WordNet's for substitution; WordNet's are sparse.
    paraphrase_model : str or None
        The instruction-tuned causal LM of the ``paraphrase`` test (a hub name or a local
        directory; None: the offline SmolLM2-135M-Instruct).
    paraphrase_similarity : float
        The encoder cosine a rewrite needs to count as a paraphrase (0.85).
    mix_weights : mapping of str to float
        Weights that replace the paper's (repetition 0.1, substitution 0.3, reordering 0.4,
        negation 0.2) when a UNION mixture draws its techniques; techniques not named keep
        theirs. Empty (the default): the paper's. Stored as sorted (name, weight) pairs.
    """

    keyword_rate: float = 0.15
    sentence_substitution_probability: float = 0.5
    sentence_repetition_probability: float = 0.5
    max_ngram: int = 4
    contraction_probability: float | None = 0.5
    antonyms_file: str | None = None
    typo_rate: float = 0.05
    paraphrase_model: str | None = None
    paraphrase_similarity: float = 0.85
    mix_weights: Mapping[str, float] | Sequence[tuple[str, float]] = ()

    def __post_init__(self) -> None:
        for name in (
            "keyword_rate",
            "sentence_substitution_probability",
            "sentence_repetition_probability",
            "contraction_probability",
            "typo_rate",
            "paraphrase_similarity",
        ):
            value = getattr(self, name)
            if value is None and name == "contraction_probability":
                continue
            if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a number in [0, 1]; got {value!r}")
        if not isinstance(self.max_ngram, int) or self.max_ngram < 1:
            raise ValueError(f"max_ngram must be a positive integer; got {self.max_ngram!r}")
        if self.antonyms_file is not None:  # read when used: a saved config may outlive it
            object.__setattr__(self, "antonyms_file", str(self.antonyms_file))
        object.__setattr__(self, "mix_weights", _checked_weights(self.mix_weights))

    @property
    def mix_weight_pairs(self) -> tuple[tuple[str, float], ...]:
        """``mix_weights`` as the sorted (technique, weight) pairs they are stored as."""
        return cast(tuple[tuple[str, float], ...], self.mix_weights)

    def mix_weight(self, name: str) -> float:
        """The weight of technique ``name`` when a mixture draws techniques."""
        return dict(self.mix_weight_pairs).get(name, TECHNIQUES.get(name).mix_weight)

    def signature_fields(self) -> dict[str, float | int | str]:
        """The settings that change the perturbations, for the signature."""
        fields: dict[str, float | int | str] = {
            "keyword_rate": self.keyword_rate,
            "sentence_substitution": self.sentence_substitution_probability,
            "sentence_repetition": self.sentence_repetition_probability,
            "max_ngram": self.max_ngram,
            "contraction": "match"
            if self.contraction_probability is None
            else self.contraction_probability,
        }
        if self.typo_rate != 0.05:  # the default is implied by the version
            fields["typo_rate"] = self.typo_rate
        if self.paraphrase_model is not None:
            fields["paraphrase_model"] = self.paraphrase_model
        if self.paraphrase_similarity != 0.85:
            fields["paraphrase_similarity"] = self.paraphrase_similarity
        if self.mix_weights:
            fields["mix_weights"] = ",".join(f"{n}={w:g}" for n, w in self.mix_weight_pairs)
        if self.antonyms_file is not None:
            from storyeval.perturb.lexicon import antonym_file_identity

            fields["antonyms"] = antonym_file_identity(self.antonyms_file)
        return fields


def _checked_weights(
    weights: Mapping[str, float] | Sequence[tuple[str, float]],
) -> tuple[tuple[str, float], ...]:
    """Mixture weights as sorted (technique, weight) pairs, each technique registered and
    each weight a positive finite number (leave a technique out with ``techniques``)."""
    import math

    pairs = list(weights.items()) if isinstance(weights, Mapping) else list(weights)
    checked = []
    for pair in pairs:
        if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
            raise ValueError(f"mix_weights must map technique names to weights; got {pair!r}")
        name, weight = pair[0], pair[1]
        if name not in TECHNIQUES:
            raise ValueError(
                f"mix_weights: unknown technique {name!r}; one of {', '.join(TECHNIQUES.names())}"
            )
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not (math.isfinite(weight) and weight > 0)
        ):
            raise ValueError(f"mix_weights: the weight of {name} must be > 0; got {weight!r}")
        checked.append((str(name), float(weight)))
    if len({name for name, _ in checked}) != len(checked):
        raise ValueError("mix_weights: a technique is named twice")
    return tuple(sorted(checked))


def parse_mix_weights(text: str | None) -> dict[str, float]:
    """``"repetition=0.25,negation=0.15"`` as a mapping of mixture weights (empty for none).

    >>> parse_mix_weights("repetition=0.25, negation=.15")
    {'repetition': 0.25, 'negation': 0.15}
    """
    weights: dict[str, float] = {}
    for part in filter(str.strip, (text or "").split(",")):
        name, _, value = (piece.strip() for piece in part.partition("="))
        try:
            weights[name] = float(value)
        except ValueError:
            raise ValueError(f"mix weights are NAME=WEIGHT pairs; got {part.strip()!r}") from None
    _checked_weights(weights)
    return weights


class TechniqueFunction(Protocol):
    """What a technique is: sentences, a random generator and the corpus in, new sentences and their edits out."""

    def __call__(
        self,
        sentences: list[str],
        rng: random.Random,
        corpus: PerturbationCorpus,
        *,
        story_id: str,
        options: PerturbOptions,
    ) -> tuple[list[str], list[Edit]]: ...


@dataclass(frozen=True)
class Technique:
    """A registered perturbation technique.

    Attributes
    ----------
    name : str
        The name used on the command line and in output records.
    apply : callable
        ``apply(sentences, rng, corpus, *, story_id, options) -> (new_sentences, edits)``;
        raises
        :class:`NotApplicableError` when it cannot change the story.
    min_sentences : int
        The fewest sentences a story needs (reordering needs 2).
    mix_weight : float
        Weight when techniques are sampled for a UNION negative (Guan & Huang 2020, 3.2).
    error_type : str
        The error of generated stories it mimics (repeated plots, poor coherence, ...).
    description : str
        One line for help texts and docs.
    suite : {"union", "discrimination", "invariance", "invariance-lm", "consistency"}
        ``union``: UNION's four negative-sampling techniques, the default set. The others
        are asked for by name or by suite: ``discrimination`` introduces an error of
        generated stories (OpenMEVA's tests), ``invariance`` keeps the quality (a robust
        metric barely moves), ``invariance-lm`` keeps it with a language model's rewrites
        (slow), ``consistency`` plants contradictions for the consistency checks.
    """

    name: str
    apply: TechniqueFunction
    min_sentences: int
    mix_weight: float
    error_type: str
    description: str
    suite: str = "union"


class UnknownTechniqueError(UnknownNameError, ValueError):
    """A perturbation technique name that the registry does not know."""


#: The registry, in the order techniques are applied when several are combined: the built-in
#: techniques, then the ``storyeval.perturb`` entry points.
TECHNIQUES: Registry[Technique] = Registry(
    "technique",
    builtins=("storyeval.perturb.techniques", "storyeval.perturb.openmeva"),
    entry_point_group="storyeval.perturb",
    error=UnknownTechniqueError,
)

#: Distribution of the number of techniques combined in one UNION negative sample
#: (Guan & Huang 2020, section 3.2): 1, 2, 3 or 4 with probabilities 50/20/20/10 %.
UNION_COUNT_PROBABILITIES: dict[int, float] = {1: 0.5, 2: 0.2, 3: 0.2, 4: 0.1}


#: The suites of techniques (see :class:`Technique`).
SUITES: tuple[str, ...] = (
    "union",
    "discrimination",
    "invariance",
    "invariance-lm",
    "consistency",
)


def register_technique(
    name: str,
    *,
    min_sentences: int,
    mix_weight: float,
    error_type: str,
    description: str,
    suite: str = "union",
) -> Callable[[TechniqueFunction], TechniqueFunction]:
    """Register a technique function under ``name`` (a decorator)."""
    check_choice(suite, SUITES, "suite")

    def decorator(function: TechniqueFunction) -> TechniqueFunction:
        technique = Technique(
            name, function, min_sentences, mix_weight, error_type, description, suite
        )
        TECHNIQUES.register(name, technique)
        return function

    return decorator


def technique_names(suite: str = "union") -> tuple[str, ...]:
    """Registered technique names of a suite (``all``: every one) in application order.

    >>> technique_names()
    ('repetition', 'substitution', 'reordering', 'negation')
    """
    if suite == "all":
        return TECHNIQUES.names()
    if suite not in SUITES:
        raise ValueError(f"suite must be all or one of {', '.join(SUITES)}; got {suite!r}")
    return tuple(name for name in TECHNIQUES.names() if TECHNIQUES.get(name).suite == suite)


def get_technique(name: str) -> Technique:
    """The registered technique ``name``; an unknown name raises ``ValueError``."""
    return TECHNIQUES.get(name)


def parse_techniques(names: str | Sequence[str] | None) -> tuple[str, ...]:
    """Validate a comma-separated string or a list of technique names; ``None`` means UNION's
    four. A suite name (``union``, ``discrimination``, ``invariance``) stands for its
    techniques.

    Duplicates are dropped and the registry order is kept.

    >>> parse_techniques("negation,reordering")
    ('reordering', 'negation')
    """
    if names is None:
        return technique_names()
    items = names.split(",") if isinstance(names, str) else list(names)
    cleaned: list[str] = []
    for item in (item.strip() for item in items):
        if item in SUITES and item not in TECHNIQUES:
            cleaned += technique_names(item)
        elif item:
            cleaned.append(item)
    if not cleaned:
        raise ValueError(
            f"give at least one technique; they must be one of {', '.join(TECHNIQUES.names())}"
        )
    for item in cleaned:
        get_technique(item)
    return tuple(name for name in TECHNIQUES if name in cleaned)


def story_rng(seed: int, *keys: object) -> random.Random:
    """A random generator determined by ``seed`` and ``keys`` alone (e.g. a story id), so a
    story's perturbation does not depend on the order or number of other stories.

    >>> story_rng(1, "s001").random() == story_rng(1, "s001").random()
    True
    """
    text = "|".join([str(seed), *(str(key) for key in keys)])
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))
