"""Rule-based data-to-text corpora with an input side ("Evaluation rules!", van Miltenburg et
al. 2020, sections 4-5): records of facts rendered by templates, controlled splits, noise, and
conformance of each output to its own record.

A **data grammar** (YAML, :class:`DataGrammar`) has *entities* (lexicons of entity values,
each with one or more realisations: referring expressions), *predicates* (each with typed
slots and its templates, e.g. ``founder: "{object} founded {subject}."``), optional
*combinations* (one template realising several facts of the same subject: the paper's
*insertion*, "Alan Bean was an American test pilot"), how facts are aggregated (``separate``
sentences, ``conjunction`` joining two facts' sentences with "and", ``insertion`` by a
combination) and named *distributions* that weight templates and entity values.

:func:`generate_records` draws records (1 to ``facts`` facts about one subject) and renders
them, keeping what produced the text (templates, realisations, aggregation, noise).
:func:`make_splits` builds train/validation/test corpora whose templates and entity values
overlap by stated shares (part of each predicate's templates and each lexicon's values are held
out of training and appear only in validation/test), and reports the overlap it measured.
:func:`data_conformance` checks every output against the facts of its own record: which facts
it expresses (and with which template), which entity values it mentions that the record does
not hold, per record, predicate, template and split. :func:`template_ratios` is the paper's
unique-to-total template ratio per predicate (its Table 1), and :func:`import_webnlg` reads the
enriched WebNLG corpus' templates (Castro Ferreira et al. 2018) into a data grammar.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import Field, field_validator, model_validator

from storyeval.base.yamlfile import StrictModel, load_model
from storyeval.rules import GrammarError

_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)\}")
AGGREGATIONS = ("separate", "conjunction", "insertion")
PEOPLE = Path(__file__).parent / "grammars" / "people.yaml"
NOISE_KINDS = ("drop", "swap", "add")


class Predicate(StrictModel):
    """A predicate: its slots (slot name -> entity lexicon) and templates."""

    slots: dict[str, str] = Field(min_length=1)
    templates: list[str] = Field(min_length=1)
    subject: str = "subject"
    weights: dict[str, list[float]] = Field(default_factory=dict)


class Combination(StrictModel):
    """An insertion template realising facts of several predicates about one subject; slots
    are ``{predicate.slot}``."""

    predicates: list[str] = Field(min_length=2)
    templates: list[str] = Field(min_length=1)


def _uniform() -> dict[str, dict[str, dict[str, float]]]:
    return {"uniform": {}}


class DataGrammar(StrictModel):
    """A data-to-text grammar (see the module docstring)."""

    name: str = "data"
    entities: dict[str, dict[str, list[str]]] = Field(min_length=1)
    predicates: dict[str, Predicate] = Field(min_length=1)
    combinations: list[Combination] = Field(default_factory=list)
    aggregation: dict[str, float] = Field(default_factory=lambda: {"separate": 1.0})
    facts: tuple[int, int] = (1, 1)
    distributions: dict[str, dict[str, dict[str, float]]] = Field(default_factory=_uniform)

    @field_validator("entities", mode="before")
    @classmethod
    def _lists_are_values(cls, value: Any) -> Any:
        """A lexicon given as a list: each value is its own single realisation."""
        if isinstance(value, dict):
            return {
                name: {str(v): [str(v)] for v in values} if isinstance(values, list) else values
                for name, values in value.items()
            }
        return value

    @model_validator(mode="after")
    def _consistent(self) -> DataGrammar:
        problems = []
        for name, predicate in self.predicates.items():
            problems += _predicate_problems(name, predicate, self)
        for number, combination in enumerate(self.combinations):
            problems += _combination_problems(number, combination, self)
        strange = set(self.aggregation) - set(AGGREGATIONS)
        if strange or any(w < 0 for w in self.aggregation.values()):
            problems.append(f"aggregation: weights of {', '.join(AGGREGATIONS)}, not negative")
        low, high = self.facts
        if not 1 <= low <= high:
            problems.append("facts must be [min, max] with 1 <= min <= max")
        for lexicon, values in self.entities.items():
            if not values or any(not r for r in values.values()):
                problems.append(f"entities {lexicon!r}: every value needs a realisation")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def template_weights(self, distribution: str, predicate: str) -> list[float]:
        """The weights of ``predicate``'s templates under ``distribution`` (1 each unless the
        predicate lists weights for it)."""
        given = self.predicates[predicate].weights.get(distribution)
        return list(given) if given else [1.0] * len(self.predicates[predicate].templates)

    def value_weight(self, distribution: str, lexicon: str, value: str) -> float:
        """The weight of an entity value under ``distribution`` (1 unless listed)."""
        return float(self.distributions.get(distribution, {}).get(lexicon, {}).get(value, 1.0))


def _predicate_problems(name: str, predicate: Predicate, grammar: DataGrammar) -> list[str]:
    problems = []
    unknown = [lex for lex in predicate.slots.values() if lex not in grammar.entities]
    if unknown:
        problems.append(f"predicate {name!r}: no entity lexicon {', '.join(unknown)}")
    if predicate.subject not in predicate.slots:
        problems.append(f"predicate {name!r}: subject {predicate.subject!r} is not a slot")
    for template in predicate.templates:
        slots = set(_SLOT.findall(template))
        if slots != set(predicate.slots):
            problems.append(
                f"predicate {name!r}: template {template!r} must use the slots "
                f"{', '.join(sorted(predicate.slots))} (each at least once)"
            )
    for dist, weights in predicate.weights.items():
        if len(weights) != len(predicate.templates) or any(w < 0 for w in weights):
            problems.append(f"predicate {name!r}: weights {dist!r} need one per template, >= 0")
    return problems


def _combination_problems(number: int, combination: Combination, grammar: DataGrammar) -> list[str]:
    problems = []
    missing = [p for p in combination.predicates if p not in grammar.predicates]
    if missing:
        return [f"combination {number}: unknown predicate(s) {', '.join(missing)}"]
    subjects = {
        grammar.predicates[p].slots[grammar.predicates[p].subject] for p in combination.predicates
    }
    if len(subjects) > 1:
        problems.append(f"combination {number}: the predicates' subjects differ in type")
    for template in combination.templates:
        for slot in _SLOT.findall(template):
            predicate, _, name = slot.partition(".")
            if predicate not in combination.predicates or (
                name not in grammar.predicates[predicate].slots
            ):
                problems.append(f"combination {number}: unknown slot {{{slot}}}")
    return problems


def load_data_grammar(path: str | Path) -> DataGrammar:
    """A data grammar file, or the built-in ``people`` grammar by name.

    Raises
    ------
    GrammarError
        With the file, line and key of what is wrong.
    """
    source = Path(str(path))
    if not source.exists() and str(path) == "people":
        source = PEOPLE
    return load_model(source, DataGrammar, what="a data grammar", error=GrammarError)


# --------------------------------------------------------------------------- generation


@dataclass(frozen=True)
class Pools:
    """What a split may draw: templates per predicate and values per lexicon seen in training
    (``seen``) and held out of it (``unseen``), and the share of draws from ``seen``."""

    seen_templates: dict[str, list[int]]
    unseen_templates: dict[str, list[int]]
    seen_values: dict[str, list[str]]
    unseen_values: dict[str, list[str]]
    template_overlap: float = 1.0
    entity_overlap: float = 1.0

    @classmethod
    def everything(cls, grammar: DataGrammar) -> Pools:
        """Every template and value, nothing held out."""
        return cls(
            {p: list(range(len(d.templates))) for p, d in grammar.predicates.items()},
            {p: [] for p in grammar.predicates},
            {lex: list(values) for lex, values in grammar.entities.items()},
            {lex: [] for lex in grammar.entities},
        )


def _weighted(rng: random.Random, options: Sequence[Any], weights: Sequence[float]) -> Any:
    if sum(weights) <= 0:
        return rng.choice(list(options))
    return rng.choices(list(options), weights=list(weights), k=1)[0]


class _Drawer:
    """Draws templates, values and realisations for one record."""

    def __init__(self, grammar: DataGrammar, pools: Pools, distribution: str, rng: random.Random):
        self.grammar, self.pools, self.distribution, self.rng = grammar, pools, distribution, rng

    def template(self, predicate: str) -> int:
        unseen = self.pools.unseen_templates.get(predicate, [])
        use_unseen = unseen and self.rng.random() >= self.pools.template_overlap
        options = unseen if use_unseen else self.pools.seen_templates[predicate]
        weights = self.grammar.template_weights(self.distribution, predicate)
        return int(_weighted(self.rng, options, [weights[i] for i in options]))

    def value(self, lexicon: str, avoid: Sequence[str] = ()) -> str:
        unseen = [v for v in self.pools.unseen_values.get(lexicon, []) if v not in avoid]
        seen = [v for v in self.pools.seen_values[lexicon] if v not in avoid] or list(
            self.pools.seen_values[lexicon]
        )
        use_unseen = unseen and self.rng.random() >= self.pools.entity_overlap
        options = unseen if use_unseen else seen
        weights = [self.grammar.value_weight(self.distribution, lexicon, v) for v in options]
        return str(_weighted(self.rng, options, weights))

    def realisation(self, lexicon: str, value: str) -> int:
        return self.rng.randrange(len(self.grammar.entities[lexicon][value]))


def _facts(grammar: DataGrammar, drawer: _Drawer) -> list[dict[str, Any]]:
    """1 to ``facts`` facts about one subject (distinct predicates whose subject has the first
    one's type)."""
    rng = drawer.rng
    first = rng.choice(sorted(grammar.predicates))
    definition = grammar.predicates[first]
    subject_type = definition.slots[definition.subject]
    subject = drawer.value(subject_type)
    same = [
        p
        for p, d in sorted(grammar.predicates.items())
        if d.slots[d.subject] == subject_type and p != first
    ]
    rng.shuffle(same)
    count = rng.randint(*grammar.facts)
    facts = []
    for predicate in [first, *same][:count]:
        d = grammar.predicates[predicate]
        values = {d.subject: subject}
        for slot, lexicon in d.slots.items():
            if slot != d.subject:
                values[slot] = drawer.value(lexicon, avoid=list(values.values()))
        facts.append({"predicate": predicate, "values": values})
    return facts


def _fill(template: str, lookup: dict[str, str]) -> str:
    text = _SLOT.sub(lambda m: lookup[m.group(1)], template)
    return text[:1].upper() + text[1:]


def _realise(grammar: DataGrammar, fact: dict[str, Any], drawer: _Drawer) -> dict[str, Any]:
    """One fact as a sentence: its template and the realisation of each value."""
    definition = grammar.predicates[fact["predicate"]]
    template = drawer.template(fact["predicate"])
    chosen = {
        slot: drawer.realisation(definition.slots[slot], value)
        for slot, value in fact["values"].items()
    }
    lookup = {
        slot: grammar.entities[definition.slots[slot]][value][chosen[slot]]
        for slot, value in fact["values"].items()
    }
    return {
        "template": template,
        "realisations": chosen,
        "text": _fill(definition.templates[template], lookup),
    }


def _lower_first(template: str, text: str) -> str:
    """A second conjunct: its first letter downcased unless it starts with an entity."""
    return text if template.startswith("{") else text[:1].lower() + text[1:]


def _insertion(
    grammar: DataGrammar, facts: list[dict[str, Any]], left: list[int], drawer: _Drawer
) -> dict[str, Any] | None:
    """A combination realising several of the facts left, or None when none fits."""
    by_predicate = {facts[i]["predicate"]: i for i in left}
    for number, combination in enumerate(grammar.combinations):
        if not all(p in by_predicate for p in combination.predicates):
            continue
        template = drawer.rng.randrange(len(combination.templates))
        chosen, lookup = {}, {}
        for predicate in combination.predicates:
            fact = facts[by_predicate[predicate]]
            for slot, value in fact["values"].items():
                lexicon = grammar.predicates[predicate].slots[slot]
                chosen[f"{predicate}.{slot}"] = drawer.realisation(lexicon, value)
                realisations = grammar.entities[lexicon][value]
                lookup[f"{predicate}.{slot}"] = realisations[chosen[f"{predicate}.{slot}"]]
        return {
            "facts": [by_predicate[p] for p in combination.predicates],
            "aggregation": "insertion",
            "combination": number,
            "template": template,
            "realisations": chosen,
            "text": _fill(combination.templates[template], lookup),
        }
    return None


def _units(
    grammar: DataGrammar, facts: list[dict[str, Any]], drawer: _Drawer
) -> list[dict[str, Any]]:
    """The record's sentences: facts alone, two joined by "and", or several by a combination,
    as the aggregation weights draw (an insertion with no fitting combination is separate)."""
    left = list(range(len(facts)))
    weights = [grammar.aggregation.get(a, 0.0) for a in AGGREGATIONS]
    units: list[dict[str, Any]] = []
    while left:
        mode = _weighted(drawer.rng, AGGREGATIONS, weights) if len(left) > 1 else "separate"
        inserted = _insertion(grammar, facts, left, drawer) if mode == "insertion" else None
        if inserted is not None:
            units.append(inserted)
            left = [i for i in left if i not in inserted["facts"]]
            continue
        if mode == "conjunction" and len(left) > 1:
            first, second = (_realise(grammar, facts[i], drawer) for i in left[:2])
            template = grammar.predicates[facts[left[1]]["predicate"]].templates[second["template"]]
            text = f"{first['text'].rstrip('.!?')} and {_lower_first(template, second['text'])}"
            units.append(
                {
                    "facts": left[:2],
                    "aggregation": "conjunction",
                    "parts": [first, second],
                    "text": text,
                }
            )
            left = left[2:]
            continue
        units.append(
            {
                "facts": [left[0]],
                "aggregation": "separate",
                **_realise(grammar, facts[left[0]], drawer),
            }
        )
        left = left[1:]
    return units


def linearise(facts: Sequence[dict[str, Any]], grammar: DataGrammar) -> str:
    """The input as WebNLG-style triples: ``subject | predicate | other values`` joined by
    `` ; ``."""
    parts = []
    for fact in facts:
        definition = grammar.predicates[fact["predicate"]]
        values = fact["values"]
        others = [values[s] for s in definition.slots if s != definition.subject]
        parts.append(" | ".join([values[definition.subject], fact["predicate"], *others]))
    return " ; ".join(parts)


def _swap(
    grammar: DataGrammar,
    facts: list[dict[str, Any]],
    units: list[dict[str, Any]],
    rng: random.Random,
) -> dict[str, Any] | None:
    """Noise: one unit states a wrong value (another of the same lexicon) for one fact."""
    for unit in rng.sample(units, len(units)):
        index = unit["facts"][0]
        definition = grammar.predicates[facts[index]["predicate"]]
        for slot, value in facts[index]["values"].items():
            lexicon = grammar.entities[definition.slots[slot]]
            others = [v for v in lexicon if v != value]
            shown = [r for r in lexicon[value] if r in unit["text"]]
            if slot != definition.subject and others and shown:
                wrong = rng.choice(others)
                unit["text"] = unit["text"].replace(max(shown, key=len), lexicon[wrong][0], 1)
                return {"kind": "swap", "fact": index, "slot": slot, "value": wrong}
    return None


def _add_noise(
    grammar: DataGrammar,
    facts: list[dict[str, Any]],
    units: list[dict[str, Any]],
    drawer: _Drawer,
) -> dict[str, Any] | None:
    """Knowingly introduce one error (section 5.2): ``drop`` a fact's sentence, ``swap`` a
    value for a wrong one, or ``add`` a sentence of a fact the input does not hold."""
    kinds = list(NOISE_KINDS)
    drawer.rng.shuffle(kinds)
    for kind in kinds:
        if kind == "drop" and len(units) > 1:
            single = [u for u in units if len(u["facts"]) == 1]
            if single:
                unit = drawer.rng.choice(single)
                units.remove(unit)
                return {"kind": "drop", "fact": unit["facts"][0]}
        if kind == "swap":
            swapped = _swap(grammar, facts, units, drawer.rng)
            if swapped:
                return swapped
        if kind == "add":
            extra = _facts(grammar, drawer)[0]
            if extra not in facts:
                units.append(
                    {"facts": [], "aggregation": "separate", **_realise(grammar, extra, drawer)}
                )
                return {"kind": "add", "extra": extra}
    return None


def generate_record(
    grammar: DataGrammar,
    rng: random.Random,
    record_id: str,
    *,
    pools: Pools | None = None,
    distribution: str = "uniform",
    noise: float = 0.0,
) -> dict[str, Any]:
    """One record and its text: ``id``, ``prompt`` (the linearised input), ``story``,
    ``input`` (the facts), ``rules`` (how each sentence was made), ``noise`` (the error
    introduced, or None) and ``distribution``."""
    drawer = _Drawer(grammar, pools or Pools.everything(grammar), distribution, rng)
    facts = _facts(grammar, drawer)
    units = _units(grammar, facts, drawer)
    error = _add_noise(grammar, facts, units, drawer) if rng.random() < noise else None
    return {
        "id": record_id,
        "prompt": linearise(facts, grammar),
        "story": " ".join(u["text"] for u in units),
        "input": facts,
        "rules": units,
        "noise": error,
        "distribution": distribution,
    }


def generate_records(
    grammar: DataGrammar,
    n: int,
    *,
    distribution: str = "uniform",
    seed: int = 0,
    noise: float = 0.0,
    pools: Pools | None = None,
    prefix: str = "d",
) -> list[dict[str, Any]]:
    """``n`` records (record ``i`` depends only on the grammar, settings, seed and ``i``)."""
    if n < 0:
        raise ValueError(f"n must be >= 0; got {n}")
    if not 0 <= noise <= 1:
        raise ValueError(f"noise must be in [0, 1]; got {noise}")
    if distribution not in grammar.distributions:
        raise ValueError(
            f"unknown distribution {distribution!r}; the grammar has {', '.join(grammar.distributions)}"
        )
    return [
        generate_record(
            grammar,
            random.Random(f"{seed}|{distribution}|{prefix}|{i}"),
            f"{prefix}{i:05d}",
            pools=pools,
            distribution=distribution,
            noise=noise,
        )
        for i in range(n)
    ]


# --------------------------------------------------------------------------- splits


def template_uses(record: dict[str, Any]) -> list[tuple[str, int]]:
    """``(predicate, template)`` of every realised fact (``combination:N`` for an insertion)."""
    uses = []
    for unit in record["rules"]:
        if unit["aggregation"] == "insertion":
            uses.append((f"combination:{unit['combination']}", int(unit["template"])))
        elif unit["aggregation"] == "conjunction":
            for part, index in zip(unit["parts"], unit["facts"], strict=True):
                uses.append((record["input"][index]["predicate"], int(part["template"])))
        elif unit["facts"]:
            uses.append((record["input"][unit["facts"][0]]["predicate"], int(unit["template"])))
    return uses


def _value_uses(record: dict[str, Any], grammar: DataGrammar) -> list[tuple[str, str]]:
    return [
        (grammar.predicates[fact["predicate"]].slots[slot], value)
        for fact in record["input"]
        for slot, value in fact["values"].items()
    ]


def _held_out(options: Sequence[Any], share: float, rng: random.Random) -> list[Any]:
    """Part of ``options`` kept out of training (always leaving one in)."""
    count = min(len(options) - 1, round(len(options) * share))
    return sorted(rng.sample(list(options), count)) if count > 0 else []


def make_splits(
    grammar: DataGrammar,
    sizes: dict[str, int],
    *,
    template_overlap: float = 1.0,
    entity_overlap: float = 1.0,
    holdout: float = 0.5,
    noise: float = 0.0,
    distribution: str = "uniform",
    seed: int = 0,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Train, validation and test records with controlled overlap (section 5.2).

    With an overlap below 1, ``holdout`` of each predicate's templates (of each lexicon's
    values) never appear in ``train``; in the other splits a fact's template (each value) comes
    from the held-out ones with probability ``1 - overlap``. ``noise`` applies to ``train``
    only (the evaluation splits stay clean). Returns the records per split and a statement:
    the settings, what was held out, and the overlap measured per split (the share of its
    template uses and value uses also seen in ``train``), beside each split's
    unique-to-total template ratio.

    Raises
    ------
    ValueError
        For overlaps or holdout outside [0, 1] or a split without ``train``.
    """
    for name, value in (
        ("template_overlap", template_overlap),
        ("entity_overlap", entity_overlap),
        ("holdout", holdout),
    ):
        if not 0 <= value <= 1:
            raise ValueError(f"{name} must be in [0, 1]; got {value}")
    if "train" not in sizes:
        raise ValueError("the splits need a train split")
    rng = random.Random(f"{seed}|holdout")
    unseen_templates = {
        p: _held_out(range(len(d.templates)), holdout if template_overlap < 1 else 0, rng)
        for p, d in sorted(grammar.predicates.items())
    }
    unseen_values = {
        lex: _held_out(sorted(values), holdout if entity_overlap < 1 else 0, rng)
        for lex, values in sorted(grammar.entities.items())
    }
    seen_templates = {
        p: [i for i in range(len(d.templates)) if i not in unseen_templates[p]]
        for p, d in grammar.predicates.items()
    }
    seen_values = {
        lex: [v for v in values if v not in unseen_values[lex]]
        for lex, values in grammar.entities.items()
    }
    splits = {}
    for split, size in sizes.items():
        training = split == "train"
        pools = Pools(
            seen_templates,
            {} if training else unseen_templates,
            seen_values,
            {} if training else unseen_values,
            1.0 if training else template_overlap,
            1.0 if training else entity_overlap,
        )
        records = generate_records(
            grammar, size, distribution=distribution, seed=seed, noise=noise if training else 0.0,
            pools=pools, prefix=f"{split[:2]}",
        )  # fmt: skip
        splits[split] = [{**r, "split": split} for r in records]
    statement = _statement(grammar, splits, unseen_templates, unseen_values)
    statement["settings"] = {
        "sizes": dict(sizes),
        "template_overlap": template_overlap,
        "entity_overlap": entity_overlap,
        "holdout": holdout,
        "noise": noise,
        "distribution": distribution,
        "seed": seed,
    }
    return splits, statement


def _statement(
    grammar: DataGrammar,
    splits: dict[str, list[dict[str, Any]]],
    unseen_templates: dict[str, list[int]],
    unseen_values: dict[str, list[str]],
) -> dict[str, Any]:
    """What was held out and the overlap each split has with ``train``."""
    train_templates = {u for r in splits["train"] for u in template_uses(r)}
    train_values = {u for r in splits["train"] for u in _value_uses(r, grammar)}
    measured = {}
    for split, records in splits.items():
        templates = [u for r in records for u in template_uses(r)]
        values = [u for r in records for u in _value_uses(r, grammar)]
        noise = Counter(r["noise"]["kind"] for r in records if r["noise"])
        measured[split] = {
            "records": len(records),
            "facts": sum(len(r["input"]) for r in records),
            "template_overlap": _share(templates, train_templates),
            "entity_overlap": _share(values, train_values),
            "noisy_records": dict(sorted(noise.items())),
            "aggregation": dict(
                sorted(Counter(u["aggregation"] for r in records for u in r["rules"]).items())
            ),
        }
    return {
        "held_out_templates": {p: t for p, t in unseen_templates.items() if t},
        "held_out_values": {lex: v for lex, v in unseen_values.items() if v},
        "measured": measured,
    }


def _share(uses: Sequence[Any], seen: set[Any]) -> float:
    return sum(1 for u in uses if u in seen) / len(uses) if uses else float("nan")


def template_ratios(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per split and predicate: unique templates, total template uses and their ratio (the
    paper's Table 1: a lower ratio means more examples per template, an easier predicate)."""
    rows = []
    by_split: dict[str, list[tuple[str, int]]] = {}
    for record in records:
        by_split.setdefault(str(record.get("split", "all")), []).extend(template_uses(record))
    for split, uses in by_split.items():
        totals = Counter(p for p, _ in uses)
        unique = Counter(p for p, _ in set(uses))
        for predicate in sorted(totals):
            rows.append(
                {
                    "split": split,
                    "predicate": predicate,
                    "unique": unique[predicate],
                    "total": totals[predicate],
                    "ratio": unique[predicate] / totals[predicate],
                }
            )
    return pd.DataFrame(rows, columns=["split", "predicate", "unique", "total", "ratio"])


# --------------------------------------------------------------------------- conformance


def _bound_pattern(template: str, lookup: dict[str, list[str]]) -> re.Pattern[str]:
    """``template`` as a search pattern: each slot any realisation of its value, spaces
    flexible, the final punctuation optional, case ignored."""
    parts, last = [], 0
    body = template.rstrip(".!? ")
    for match in _SLOT.finditer(body):
        parts.append(re.escape(body[last : match.start()]))
        options = sorted(lookup[match.group(1)], key=len, reverse=True)
        parts.append("(?:" + "|".join(re.escape(o) for o in options) + ")")
        last = match.end()
    parts.append(re.escape(body[last:]))
    pattern = r"\s+".join(p for p in "".join(parts).split(r"\ ") if p)
    return re.compile(r"(?<!\w)" + pattern + r"(?!\w)", re.IGNORECASE)


def _expressed(grammar: DataGrammar, facts: list[dict[str, Any]], text: str) -> list[str]:
    """For each fact how the text expresses it: ``template:N``, ``combination:K:N``, or ""."""
    found = [""] * len(facts)
    by_predicate = {f["predicate"]: i for i, f in enumerate(facts)}
    for number, combination in enumerate(grammar.combinations):
        if not all(p in by_predicate for p in combination.predicates):
            continue
        lookup = {
            f"{p}.{slot}": grammar.entities[grammar.predicates[p].slots[slot]][value]
            for p in combination.predicates
            for slot, value in facts[by_predicate[p]]["values"].items()
        }
        for index, template in enumerate(combination.templates):
            if _bound_pattern(template, lookup).search(text):
                for p in combination.predicates:
                    found[by_predicate[p]] = (
                        found[by_predicate[p]] or f"combination:{number}:{index}"
                    )
    for i, fact in enumerate(facts):
        definition = grammar.predicates[fact["predicate"]]
        lookup = {s: grammar.entities[definition.slots[s]][v] for s, v in fact["values"].items()}
        for index, template in enumerate(definition.templates):
            if not found[i] and _bound_pattern(template, lookup).search(text):
                found[i] = f"template:{index}"
    return found


def _mentioned_values(grammar: DataGrammar, text: str) -> set[tuple[str, str]]:
    """Every entity value the text mentions by one of its realisations (longest first)."""
    realisations = sorted(
        (
            (r, lex, v)
            for lex, values in grammar.entities.items()
            for v, rs in values.items()
            for r in rs
        ),
        key=lambda item: -len(item[0]),
    )
    masked, found = text, set()
    for realisation, lexicon, value in realisations:
        pattern = re.compile(r"(?<!\w)" + re.escape(realisation) + r"(?!\w)", re.IGNORECASE)
        if pattern.search(masked):
            found.add((lexicon, value))
            masked = pattern.sub(lambda m: "\0" * len(m.group()), masked)
    return found


def data_conformance(
    grammar: DataGrammar,
    outputs: Sequence[tuple[str, str, str]],
    records: Sequence[dict[str, Any]],
    *,
    confidence: float = 0.95,
) -> dict[str, pd.DataFrame]:
    """Each output checked against its own record (joined by id).

    Returns
    -------
    dict of DataFrame
        ``facts``: per output and input fact, whether the text expresses it and how
        (``template:N`` of the predicate, or ``combination:K:N``). ``records``: per output, the
        facts expressed, whether all are (``complete``), the entity values it mentions that its
        record does not hold (``unsupported``) and whether there are none (``faithful``).
        ``systems``: per system and split, fact recall, complete and faithful records, rates
        with Clopper-Pearson intervals. ``predicates``: recall per system and predicate.
        ``templates``: per system, predicate and way of expressing it, the count and share.

    Raises
    ------
    ValueError
        When an output's id has no record, or there are no outputs.
    """

    by_id = {str(r["id"]): r for r in records}
    missing = [item for item, _, _ in outputs if item not in by_id]
    if missing:
        raise ValueError(f"{len(missing)} output(s) have no record, e.g. {missing[0]!r}")
    if not outputs:
        raise ValueError("no outputs to check")
    fact_rows, record_rows = [], []
    for item, system, text in outputs:
        record = by_id[item]
        how = _expressed(grammar, record["input"], text)
        held = set(_value_uses(record, grammar))
        unsupported = sorted(v for _, v in _mentioned_values(grammar, text) - held)
        split = str(record.get("split", "all"))
        for fact, way in zip(record["input"], how, strict=True):
            fact_rows.append(
                {
                    "id": item,
                    "system": system,
                    "split": split,
                    "predicate": fact["predicate"],
                    "expressed": bool(way),
                    "how": way,
                }
            )
        record_rows.append(
            {
                "id": item, "system": system, "split": split, "facts": len(how),
                "expressed": sum(1 for w in how if w), "complete": all(how),
                "unsupported": ";".join(unsupported), "faithful": not unsupported,
            }
        )  # fmt: skip
    return _conformance_tables(pd.DataFrame(fact_rows), pd.DataFrame(record_rows), confidence)


def _conformance_tables(
    facts: pd.DataFrame, per_record: pd.DataFrame, confidence: float
) -> dict[str, pd.DataFrame]:
    """The summaries of :func:`data_conformance` from its per-fact and per-record rows."""
    from storyeval.rules import _rate

    systems = []
    for (system, split), group in per_record.groupby(["system", "split"], sort=True):
        fact_group = facts[(facts["system"] == system) & (facts["split"] == split)]
        for measure, hits, n in (
            ("fact_recall", int(fact_group["expressed"].sum()), len(fact_group)),
            ("complete_records", int(group["complete"].sum()), len(group)),
            ("faithful_records", int(group["faithful"].sum()), len(group)),
        ):
            systems.append(
                {
                    "system": system,
                    "split": split,
                    "measure": measure,
                    "n": n,
                    **_rate(hits, n, confidence),
                }
            )
    predicates = [
        {
            "system": system,
            "predicate": predicate,
            "n": len(group),
            **_rate(int(group["expressed"].sum()), len(group), confidence),
        }
        for (system, predicate), group in facts.groupby(["system", "predicate"], sort=True)
    ]
    templates = (
        facts[facts["expressed"]]
        .groupby(["system", "predicate", "how"])
        .size()
        .rename("count")
        .reset_index()
    )
    templates["share"] = templates["count"] / templates.groupby(["system", "predicate"])[
        "count"
    ].transform("sum")
    return {
        "systems": pd.DataFrame(systems),
        "predicates": pd.DataFrame(predicates),
        "templates": templates,
        "records": per_record,
        "facts": facts,
    }


# --------------------------------------------------------------------------- WebNLG


_TAG = re.compile(r"\b(AGENT|PATIENT|BRIDGE)-(\d+)\b")


def _detokenised(template: str) -> str:
    text = re.sub(r"\s+([.,;:!?])", r"\1", " ".join(template.split()))
    return re.sub(r"\s+'s\b", "'s", text)


def _webnlg_lexicalisation(lex: Any) -> tuple[str, dict[str, tuple[str, str]]] | None:
    """A one-triple lexicalisation's template (AGENT-1 -> {subject}, PATIENT-1 -> {object})
    and the realisation of each tagged entity; None for other tags or a missing one."""
    template = (lex.findtext("template") or "").strip()
    tags = set(_TAG.findall(template))
    if tags != {("AGENT", "1"), ("PATIENT", "1")}:
        return None
    refs = {
        r.get("tag"): (r.get("entity") or "", (r.text or "").strip()) for r in lex.iter("reference")
    }
    text = _TAG.sub(lambda m: "{subject}" if m.group(1) == "AGENT" else "{object}", template)
    return _detokenised(text), {str(tag): value for tag, value in refs.items() if tag}


def import_webnlg(paths: Sequence[str | Path]) -> tuple[DataGrammar, pd.DataFrame]:
    """A data grammar from the enriched WebNLG corpus' XML files (Castro Ferreira et al. 2018:
    ``<entry category size>`` with ``<modifiedtripleset><mtriple>``, and per ``<lex>`` its
    ``<references>`` and delexicalised ``<template>``, e.g. ``AGENT-1 founded PATIENT-1 .``).
    One-triple entries give each predicate its templates (the subject's lexicon is the entry's
    category, the object's ``PREDICATE_object``) and each entity its realisations from the
    references; the ``corpus`` distribution weights each template by how often it occurs.
    Returns the grammar and the unique-to-total template ratio per predicate (the paper's
    Table 1).

    Raises
    ------
    storyeval.base.errors.DataFileError
        For a file that is not XML or holds no usable template.
    """
    import xml.etree.ElementTree as ET

    from storyeval.base.errors import DataFileError

    templates: dict[str, Counter[str]] = {}
    types: dict[str, tuple[str, str]] = {}
    entities: dict[str, dict[str, list[str]]] = {}
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as exc:
            raise DataFileError.single(Path(path), exc.position[0], f"not XML: {exc}") from None
        for entry in root.iter("entry"):
            triples = [t.text or "" for t in entry.iter("mtriple")]
            if len(triples) != 1 or triples[0].count("|") != 2:
                continue
            subject, predicate, obj = (part.strip() for part in triples[0].split("|"))
            category = entry.get("category") or "entity"
            subject_type, object_type = types.setdefault(
                predicate, (category, f"{predicate}_object")
            )
            for lex in entry.iter("lex"):
                found = _webnlg_lexicalisation(lex)
                if found is None:
                    continue
                template, refs = found
                templates.setdefault(predicate, Counter())[template] += 1
                for tag, lexicon, value in (
                    ("AGENT-1", subject_type, subject),
                    ("PATIENT-1", object_type, obj),
                ):
                    realisation = refs.get(tag, ("", ""))[1] or value.replace("_", " ")
                    known = entities.setdefault(lexicon, {}).setdefault(value, [])
                    if realisation not in known:
                        known.append(realisation)
    if not templates:
        raise DataFileError.single(
            Path(paths[0]), 1, "no one-triple entry with an AGENT-1/PATIENT-1 <template>: the "
            "enriched WebNLG corpus (Castro Ferreira et al. 2018) has them, the original does not",
        )  # fmt: skip
    return _webnlg_grammar(templates, types, entities)


def _webnlg_grammar(
    templates: dict[str, Counter[str]],
    types: dict[str, tuple[str, str]],
    entities: dict[str, dict[str, list[str]]],
) -> tuple[DataGrammar, pd.DataFrame]:
    predicates, rows = {}, []
    for predicate, counts in sorted(templates.items()):
        ordered = sorted(counts, key=lambda t: (-counts[t], t))
        subject_type, object_type = types[predicate]
        predicates[predicate] = {
            "slots": {"subject": subject_type, "object": object_type},
            "templates": ordered,
            "weights": {"corpus": [float(counts[t]) for t in ordered]},
        }
        total = sum(counts.values())
        rows.append(
            {
                "predicate": predicate,
                "unique": len(counts),
                "total": total,
                "ratio": len(counts) / total,
            }
        )
    grammar = DataGrammar.model_validate(
        {
            "name": "webnlg",
            "entities": entities,
            "predicates": predicates,
            "distributions": {"uniform": {}, "corpus": {}},
        }
    )
    return grammar, pd.DataFrame(rows).sort_values("ratio", ascending=False, ignore_index=True)


def read_data_records(path: str | Path, grammar: DataGrammar) -> list[dict[str, Any]]:
    """Records written by :func:`make_splits` (``storyeval rules data``), checked against the
    grammar.

    Raises
    ------
    storyeval.base.errors.DataFileError
        With the file and line of every record without ``id`` and ``input`` facts of the
        grammar's predicates.
    """
    from storyeval.base.errors import DataFileError, DataProblem
    from storyeval.corpus import iter_raw_records

    records, problems = [], []
    for line, record in iter_raw_records(path):
        if isinstance(record, DataProblem):
            problems.append(record)
            continue
        facts = record.get("input")
        good = (
            "id" in record
            and isinstance(facts, list)
            and all(
                isinstance(f, dict)
                and f.get("predicate") in grammar.predicates
                and isinstance(f.get("values"), dict)
                and set(f["values"]) == set(grammar.predicates[f["predicate"]].slots)
                for f in facts
            )
        )
        if not good:
            problems.append(
                DataProblem(
                    str(path), line, "a record needs id and input facts of the grammar's predicates"
                )
            )
            continue
        records.append(record)
    if problems:
        raise DataFileError(problems)
    return records


def grammar_yaml(grammar: DataGrammar) -> str:
    """The grammar as a YAML file (:func:`load_data_grammar` reads it back)."""
    import yaml

    data = grammar.model_dump(exclude_defaults=False)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
