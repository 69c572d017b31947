"""Rule-based controlled test data and rule conformance ("Evaluation rules!", van Miltenburg et al. (2020)).

A **grammar** (YAML, :class:`Grammar`) defines lexicons, *rules* (each with one or more
*realisations*: templates with ``{slot}`` slots filled from the lexicons), the story's
*sections* (ordering: which rules may fill each section, and how many sentences it takes;
segmentation: sections joined as one paragraph or as separate paragraphs) and named
*distributions* over the rules (e.g. ``uniform`` and ``skewed``).

:func:`generate_corpus` writes texts with a record of which rule, realisation and slot values
produced every sentence (the same grammar, distribution and seed give the same corpus).
:func:`conformance` reads a system's outputs and finds, sentence by sentence, which rule and
realisation each reproduces (templates matched with the lexicons' values), whether the
sections come in the grammar's order, and reports per rule, per realisation and per system the
conformance rates with Clopper-Pearson intervals, beside the rule distribution the system
produced (for comparing systems trained on corpora with different distributions).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import Field, model_validator

from storyeval.base.registry import Registry
from storyeval.base.yamlfile import StrictModel, YamlFileError, load_model

_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class GrammarError(YamlFileError):
    """A grammar file that cannot be used (``FILE:LINE: key.path: reason``)."""


class Rule(StrictModel):
    """A predicate of the grammar and its surface realisations (templates with slots)."""

    realisations: list[str] = Field(min_length=1)


class Section(StrictModel):
    """A part of the story: the rules that may fill it and how many sentences it takes."""

    name: str
    rules: list[str] = Field(min_length=1)
    sentences: tuple[int, int] = (1, 1)


def _uniform_only() -> dict[str, dict[str, float]]:
    return {"uniform": {}}


class Grammar(StrictModel):
    """A story grammar (see the module docstring)."""

    name: str = "grammar"
    lexicons: dict[str, list[str]] = Field(min_length=1)
    rules: dict[str, Rule] = Field(min_length=1)
    sections: list[Section] = Field(min_length=1)
    distributions: dict[str, dict[str, float]] = Field(default_factory=_uniform_only)
    segmentation: str = "sentences"
    bind: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Grammar:
        problems = []
        if self.segmentation not in ("sentences", "paragraphs"):
            problems.append(
                f"segmentation must be sentences or paragraphs, not {self.segmentation!r}"
            )
        for name, rule in self.rules.items():
            for template in rule.realisations:
                unknown = set(_SLOT.findall(template)) - set(self.lexicons)
                if unknown:
                    problems.append(
                        f"rule {name!r}: no lexicon for slot(s) {', '.join(sorted(unknown))}"
                    )
        for section in self.sections:
            low, high = section.sentences
            if not 1 <= low <= high:
                problems.append(
                    f"section {section.name!r}: sentences must be [min, max] with 1 <= min <= max"
                )
            missing = [r for r in section.rules if r not in self.rules]
            if missing:
                problems.append(f"section {section.name!r}: unknown rule(s) {', '.join(missing)}")
        for dist, weights in self.distributions.items():
            strange = [r for r in weights if r not in self.rules]
            if strange or any(w < 0 for w in weights.values()):
                problems.append(f"distribution {dist!r}: unknown rules or negative weights")
        unbound = [name for name in self.bind if name not in self.lexicons]
        if unbound:
            problems.append(f"bind: no lexicon {', '.join(unbound)}")
        for lexicon, values in self.lexicons.items():
            if not values:
                problems.append(f"lexicon {lexicon!r} is empty")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def weight(self, distribution: str, rule: str) -> float:
        """The weight of ``rule`` under ``distribution`` (1 when the distribution omits it)."""
        return float(self.distributions[distribution].get(rule, 1.0))


#: Built-in grammars by name (``story``: characters, settings, events).
GRAMMARS: Registry[str] = Registry("grammar")
GRAMMARS.register("story", str(Path(__file__).parent / "grammars" / "story.yaml"))


def load_grammar(name_or_path: str | Path) -> Grammar:
    """A built-in grammar by name, or a grammar file."""
    path = Path(str(name_or_path))
    if not path.exists() and str(name_or_path) in GRAMMARS:
        path = Path(GRAMMARS.get(str(name_or_path)))
    return load_model(path, Grammar, what="a grammar", error=GrammarError)


# --------------------------------------------------------------------------- generation


@dataclass(frozen=True)
class RuleSentence:
    """One generated sentence and what produced it."""

    section: str
    rule: str
    realisation: int
    slots: dict[str, str]
    text: str

    def to_dict(self) -> dict[str, Any]:
        """The record kept with the story."""
        return {
            "section": self.section,
            "rule": self.rule,
            "realisation": self.realisation,
            "slots": dict(self.slots),
            "text": self.text,
        }


@dataclass
class RuleStory:
    """A generated story with its rule records."""

    id: str
    sentences: list[RuleSentence]
    segmentation: str
    distribution: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The story: sentences joined with spaces, sections with blank lines if asked for."""
        if self.segmentation == "sentences":
            return " ".join(s.text for s in self.sentences)
        blocks: list[list[str]] = []
        for index, sentence in enumerate(self.sentences):
            if index == 0 or sentence.section != self.sentences[index - 1].section:
                blocks.append([])
            blocks[-1].append(sentence.text)
        return "\n\n".join(" ".join(block) for block in blocks)

    def to_record(self) -> dict[str, Any]:
        """A story record (``storyeval`` story file) with the rules that made it."""
        return {
            "id": self.id,
            "prompt": "",
            "story": self.text,
            "rules": [s.to_dict() for s in self.sentences],
            "distribution": self.distribution,
            **self.extra,
        }


def _fill(
    template: str, grammar: Grammar, rng: random.Random, bound: dict[str, str]
) -> tuple[str, dict[str, str]]:
    """The template with every slot filled; a ``bind`` slot already used in the story keeps
    its value (the protagonist stays the same person), others are drawn from their lexicon."""
    used: dict[str, str] = {}
    for slot in _SLOT.findall(template):
        if slot not in used:
            keep = bound.get(slot) if slot in grammar.bind else None
            used[slot] = keep or rng.choice(grammar.lexicons[slot])
    text = _SLOT.sub(lambda m: used[m.group(1)], template)
    return text[:1].upper() + text[1:], used


def generate_story(
    grammar: Grammar, rng: random.Random, distribution: str, story_id: str
) -> RuleStory:
    """One story: each section draws its sentence count, then its rules by the distribution."""
    bound: dict[str, str] = {}
    sentences: list[RuleSentence] = []
    for section in grammar.sections:
        low, high = section.sentences
        weights = [grammar.weight(distribution, r) for r in section.rules]
        if sum(weights) <= 0:
            raise ValueError(
                f"distribution {distribution!r} gives section {section.name!r} no rule"
            )
        for _ in range(rng.randint(low, high)):
            rule = rng.choices(section.rules, weights=weights, k=1)[0]
            realisation = rng.randrange(len(grammar.rules[rule].realisations))
            text, used = _fill(grammar.rules[rule].realisations[realisation], grammar, rng, bound)
            bound.update(used)
            sentences.append(RuleSentence(section.name, rule, realisation, used, text))
    return RuleStory(story_id, sentences, grammar.segmentation, distribution)


def generate_corpus(
    grammar: Grammar, n: int, *, distribution: str = "uniform", seed: int = 0, prefix: str = "r"
) -> list[RuleStory]:
    """``n`` stories; story ``i`` depends only on the grammar, distribution, seed and ``i``."""
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    if distribution not in grammar.distributions:
        raise ValueError(
            f"unknown distribution {distribution!r}; the grammar has {', '.join(grammar.distributions)}"
        )
    return [
        generate_story(
            grammar, random.Random(f"{seed}|{distribution}|{i}"), distribution, f"{prefix}{i:05d}"
        )
        for i in range(n)
    ]


# --------------------------------------------------------------------------- conformance


def _pattern(template: str, grammar: Grammar) -> re.Pattern[str]:
    parts = []
    last = 0
    for match in _SLOT.finditer(template):
        parts.append(re.escape(template[last : match.start()]))
        values = sorted(grammar.lexicons[match.group(1)], key=len, reverse=True)
        parts.append("(?:" + "|".join(re.escape(v) for v in values) + ")")
        last = match.end()
    parts.append(re.escape(template[last:]))
    return re.compile("^" + "".join(parts) + "$", re.IGNORECASE)


def _normal(sentence: str) -> str:
    return " ".join(sentence.split())


@dataclass(frozen=True)
class _Matcher:
    patterns: list[tuple[str, int, re.Pattern[str]]]

    @classmethod
    def of(cls, grammar: Grammar) -> _Matcher:
        return cls(
            [
                (name, index, _pattern(template, grammar))
                for name, rule in grammar.rules.items()
                for index, template in enumerate(rule.realisations)
            ]
        )

    def match(self, sentence: str) -> tuple[str, int] | None:
        text = _normal(sentence)
        for name, index, pattern in self.patterns:
            if pattern.match(text):
                return name, index
        return None


def _sentences(text: str) -> list[str]:
    from storyeval.text import split_sentences

    return [s for block in text.split("\n\n") for s in split_sentences(block)]


def _order_ok(rules: Sequence[str | None], grammar: Grammar) -> bool:
    """Whether the matched rules follow the sections' order (unmatched sentences break it)."""
    section_of: dict[str, list[int]] = {}
    for position, section in enumerate(grammar.sections):
        for rule in section.rules:
            section_of.setdefault(rule, []).append(position)
    current = 0
    for found in rules:
        if found is None:
            return False
        later = [p for p in section_of[found] if p >= current]
        if not later:
            return False
        current = min(later)
    return True


def match_outputs(grammar: Grammar, outputs: Sequence[tuple[str, str, str]]) -> pd.DataFrame:
    """Sentence by sentence, the rule and realisation each output sentence reproduces.

    ``outputs`` are ``(id, system, text)``; returns one row per sentence: ``id, system,
    position, sentence, rule, realisation`` (``rule`` empty when no template matches) and the
    story's ``order_ok``.
    """
    matcher = _Matcher.of(grammar)
    rows = []
    for item_id, system, text in outputs:
        found = [(s, matcher.match(s)) for s in _sentences(text)]
        ordered = _order_ok([m[0] if m else None for _, m in found], grammar)
        for position, (sentence, hit) in enumerate(found):
            rows.append(
                {
                    "id": item_id,
                    "system": system,
                    "position": position,
                    "sentence": sentence,
                    "rule": hit[0] if hit else "",
                    "realisation": hit[1] if hit else -1,
                    "order_ok": ordered,
                }
            )
    return pd.DataFrame(
        rows, columns=["id", "system", "position", "sentence", "rule", "realisation", "order_ok"]
    )


def _rate(successes: int, n: int, confidence: float) -> dict[str, float]:
    from storyeval.base.stats import binomial_test

    if n == 0:
        nan = float("nan")
        return {"rate": nan, "ci_low": nan, "ci_high": nan}
    _, low, high = binomial_test(successes, n, confidence=confidence)
    return {"rate": successes / n, "ci_low": low, "ci_high": high}


def conformance(
    grammar: Grammar,
    outputs: Sequence[tuple[str, str, str]],
    *,
    distribution: str | None = None,
    confidence: float = 0.95,
) -> dict[str, pd.DataFrame]:
    """Which rules the outputs reproduce, per system.

    Returns
    -------
    dict of DataFrame
        ``systems``: per system, the share of sentences that realise some rule, of stories
        whose every sentence does, and of stories in the grammar's section order (rates with
        Clopper-Pearson intervals). ``rules``: per system and rule, how many sentences realise
        it, its share of the matched sentences and, with ``distribution``, the share the
        grammar's distribution gives it (the expected share of a system trained on that
        corpus). ``realisations``: per system, rule and realisation, the count and share within
        the rule. ``sentences``: :func:`match_outputs`.
    """
    sentences = match_outputs(grammar, outputs)
    if sentences.empty:
        raise ValueError("the outputs hold no sentence")
    systems, rules, realisations = [], [], []
    expected = _expected_shares(grammar, distribution) if distribution else {}
    for system, group in sentences.groupby("system", sort=True):
        matched = group[group["rule"] != ""]
        stories = group.groupby("id")
        complete = int(stories["rule"].apply(lambda r: bool((r != "").all())).sum())
        ordered = int(stories["order_ok"].first().sum())
        for measure, hits, n in (
            ("sentence_conformance", len(matched), len(group)),
            ("story_conformance", complete, stories.ngroups),
            ("order_conformance", ordered, stories.ngroups),
        ):
            systems.append(
                {"system": system, "measure": measure, "n": n, **_rate(hits, n, confidence)}
            )
        counts = Counter(matched["rule"])
        for rule in grammar.rules:
            row = {"system": system, "rule": rule, "count": counts[rule], "n_matched": len(matched)}
            row.update(_rate(counts[rule], len(matched), confidence))
            row["expected_share"] = expected.get(rule, float("nan"))
            rules.append(row)
            per = Counter(matched.loc[matched["rule"] == rule, "realisation"])
            for index in range(len(grammar.rules[rule].realisations)):
                realisations.append(
                    {
                        "system": system,
                        "rule": rule,
                        "realisation": index,
                        "count": per[index],
                        **_rate(per[index], counts[rule], confidence),
                    }
                )
    return {
        "systems": pd.DataFrame(systems),
        "rules": pd.DataFrame(rules),
        "realisations": pd.DataFrame(realisations),
        "sentences": sentences,
    }


def _expected_shares(grammar: Grammar, distribution: str) -> dict[str, float]:
    """Each rule's expected share of the sentences under ``distribution`` (sections weighted
    by their mean sentence count)."""
    if distribution not in grammar.distributions:
        raise ValueError(f"unknown distribution {distribution!r}")
    totals: dict[str, float] = {}
    for section in grammar.sections:
        mean_count = sum(section.sentences) / 2
        weights = {r: grammar.weight(distribution, r) for r in section.rules}
        total = sum(weights.values())
        for rule, weight in weights.items():
            totals[rule] = totals.get(rule, 0.0) + (mean_count * weight / total if total else 0.0)
    whole = sum(totals.values())
    return {rule: value / whole for rule, value in totals.items()}
