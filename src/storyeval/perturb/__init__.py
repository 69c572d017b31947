"""Perturbations of human-written stories: negative samples for learned metrics and
robustness tests (Guan & Huang 2020, section 3.2).

The registry :data:`TECHNIQUES` holds ``repetition``, ``substitution``, ``reordering`` and
``negation``; :func:`perturb_stories` applies them to a corpus (every listed technique, one
technique per output, or UNION's random mixture), seeded and reproducible, recording which
techniques were applied and where. :class:`Delexicalizer` masks character names.

Examples
--------
>>> from storyeval.perturb import technique_names, negate
>>> technique_names()
('repetition', 'substitution', 'reordering', 'negation')
>>> negate("He goes through the park.")
'He does not go through the park.'
"""

from storyeval.perturb import techniques as _techniques  # noqa: F401  (registers techniques)
from storyeval.perturb.base import (
    TECHNIQUES,
    UNION_COUNT_PROBABILITIES,
    Edit,
    NotApplicableError,
    PerturbOptions,
    Technique,
    get_technique,
    parse_mix_weights,
    parse_techniques,
    register_technique,
    story_rng,
    technique_names,
)
from storyeval.perturb.corpus import PerturbationCorpus, is_keyword, split_text
from storyeval.perturb.delex import PLACEHOLDERS, Delexicalizer, read_name_table
from storyeval.perturb.engine import (
    MODES,
    PerturbationRun,
    PerturbedStory,
    Redraw,
    SkippedStoriesWarning,
    apply_mixture,
    apply_techniques,
    perturb_stories,
    sample_mixture,
)
from storyeval.perturb.lexicon import antonyms, inflect
from storyeval.perturb.negation import RULES, affirm, negate, negation_sites

__all__ = [
    "MODES",
    "PLACEHOLDERS",
    "RULES",
    "TECHNIQUES",
    "UNION_COUNT_PROBABILITIES",
    "Delexicalizer",
    "Edit",
    "NotApplicableError",
    "PerturbOptions",
    "PerturbationCorpus",
    "PerturbationRun",
    "PerturbedStory",
    "Redraw",
    "SkippedStoriesWarning",
    "Technique",
    "affirm",
    "antonyms",
    "apply_mixture",
    "apply_techniques",
    "get_technique",
    "inflect",
    "is_keyword",
    "negate",
    "negation_sites",
    "parse_mix_weights",
    "parse_techniques",
    "perturb_stories",
    "read_name_table",
    "register_technique",
    "sample_mixture",
    "split_text",
    "story_rng",
    "technique_names",
]
