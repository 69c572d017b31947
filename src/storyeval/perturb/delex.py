"""Delexicalization: character names become ``[MALE]``, ``[FEMALE]`` or ``[NEUTRAL]``.

Guan & Huang (2020) follow Guan et al. (2020) and mask "all the male/female/unknown names
with placeholders [MALE]/[FEMALE]/[NEUTRAL]". Names are found with spaCy's named-entity
recognizer (``PERSON`` entities; every word of a full name also counts as that character's
name, so "Clara Stone" and a later "Clara" both become the same placeholder). A name's gender
comes, in order, from a user table of first names, from a title before it ("Mister", "Mrs."),
from the US Census 1990 first-name frequencies (shipped by the ``names`` package; a name is
male or female when at least 80 % of its bearers are), or from gendered pronouns that most likely refer back to it: when the name is the subject of
its clause, the first possessive or reflexive pronoun in that clause ("Clara taped it to her
door") and the subject pronoun opening the next sentence ("Tomas sighed. He ...") each cast a
vote; object pronouns are ignored, as they usually refer to someone else. Names with no evidence, or tied
evidence, are ``[NEUTRAL]``.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from storyeval.corpus import Story

PLACEHOLDERS = {"male": "[MALE]", "female": "[FEMALE]", "neutral": "[NEUTRAL]"}
_MALE_TITLES = frozenset(
    {"mr", "mister", "sir", "lord", "king", "prince", "father", "uncle", "brother", "grandpa"}
    | {"grandfather", "dad"}
)
_FEMALE_TITLES = frozenset(
    {"mrs", "ms", "miss", "madam", "lady", "queen", "princess", "aunt", "sister", "grandma"}
    | {"grandmother", "mom", "mother"}
)
_GENDERS = ("male", "female", "neutral")


CENSUS_SHARE = 0.8


@functools.lru_cache(maxsize=1)
def census_first_names() -> dict[str, str]:
    """First name (lower case) -> ``male``/``female``/``neutral`` from the US Census 1990
    frequency lists (1,219 male and 4,275 female names): a name is male (female) when the
    male (female) frequency is at least 80 % of the sum of both, otherwise neutral.

    >>> census = census_first_names()
    >>> census["james"], census["mary"], census["casey"]
    ('male', 'female', 'neutral')
    """
    spec = importlib.util.find_spec("names")
    if spec is None or not spec.submodule_search_locations:
        from storyeval.base.errors import ModelLoadError

        raise ModelLoadError(
            "the census first-name lists are not installed: `pip install names==0.3.0`"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    frequencies: dict[str, dict[str, float]] = {}
    for gender in ("male", "female"):
        with open(folder / f"dist.{gender}.first", encoding="ascii") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 2:
                    frequencies.setdefault(parts[0].lower(), {})[gender] = float(parts[1])
    table: dict[str, str] = {}
    for name, by_gender in frequencies.items():
        male, female = by_gender.get("male", 0.0), by_gender.get("female", 0.0)
        if male + female <= 0:
            continue
        share = male / (male + female)
        table[name] = (
            "male"
            if share >= CENSUS_SHARE
            else "female"
            if share <= 1 - CENSUS_SHARE
            else "neutral"
        )
    return table


def read_name_table(path: str | Path) -> dict[str, str]:
    """Read a first-name table: CSV with columns ``name`` and ``gender`` (male, female or
    neutral; also m/f/n). Names are matched case-insensitively."""
    from storyeval.base.errors import DataFileError

    table: dict[str, str] = {}
    aliases = {"m": "male", "f": "female", "n": "neutral", "u": "neutral", "unknown": "neutral"}
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames or not {"name", "gender"} <= set(reader.fieldnames):
            raise DataFileError.single(path, 1, "the name table needs the columns name,gender")
        for row in reader:
            gender = (row.get("gender") or "").strip().lower()
            gender = aliases.get(gender, gender)
            if gender not in _GENDERS:
                raise DataFileError.single(
                    path,
                    reader.line_num,
                    f"gender must be one of {', '.join(_GENDERS)} (or m/f/n); got {row.get('gender')!r}",
                )
            name = (row.get("name") or "").strip()
            if name:
                table[name.lower()] = gender
    return table


def _pronoun_gender(token: Any, *, subject: bool) -> str | None:
    lower = token.lower_
    if subject:
        return {"he": "male", "she": "female"}.get(lower)
    if lower in ("his", "himself"):
        return "male"
    if lower in ("hers", "herself") or (lower == "her" and token.tag_ == "PRP$"):
        return "female"
    return None


class Delexicalizer:
    """Replace character names by gender placeholders.

    Parameters
    ----------
    nlp : spaCy Language, optional
        A pipeline with a named-entity recognizer (default :func:`storyeval.models.load_spacy`).
    names : mapping of str to str, optional
        First name -> ``male``/``female``/``neutral``; it overrides the other evidence.
    census : bool
        Use the US Census 1990 first-name lists (default yes).

    Examples
    --------
    >>> delex = Delexicalizer()
    >>> delex("Clara found a note. She read it twice. Then Tom laughed at his own joke.")
    '[FEMALE] found a note. She read it twice. Then [MALE] laughed at his own joke.'
    """

    def __init__(
        self, *, nlp: Any = None, names: Mapping[str, str] | None = None, census: bool = True
    ) -> None:
        if nlp is None:
            from storyeval.models import load_spacy

            nlp = load_spacy()
        if "ner" not in nlp.pipe_names:
            from storyeval.base.errors import ModelLoadError

            raise ModelLoadError(
                "delexicalization needs a spaCy pipeline with a named-entity recognizer ('ner')"
            )
        self.nlp = nlp
        self.names = {key.lower(): value for key, value in (names or {}).items()}
        self.census = census_first_names() if census else {}

    def genders(self, text: str) -> dict[str, str]:
        """Every character name in ``text`` (full names and their words) -> gender."""
        doc = self.nlp(text)
        persons = [ent for ent in doc.ents if ent.label_ == "PERSON"]
        votes: dict[str, Counter[str]] = {}
        aliases: dict[str, str] = {}
        for ent in persons:
            words = [t for t in ent if t.is_alpha and t.text[:1].isupper()]
            if not words:
                continue
            key = " ".join(t.text for t in words)
            votes.setdefault(key, Counter())
            for word in words:
                if word.lower_ not in _MALE_TITLES | _FEMALE_TITLES:
                    aliases.setdefault(word.text, key)
            aliases[key] = key
            title = doc[ent.start - 1].lower_.rstrip(".") if ent.start > 0 else ""
            first = ent[0].lower_.rstrip(".")
            for word in (title, first):
                if word in _MALE_TITLES:
                    votes[key]["male"] += 10
                elif word in _FEMALE_TITLES:
                    votes[key]["female"] += 10
            for gender in self._pronoun_evidence(ent):
                votes[key][gender] += 1
        genders: dict[str, str] = {}
        for key, counter in votes.items():
            table = self.names.get(key.split()[0].lower()) or self.names.get(key.lower())
            if table is not None:
                genders[key] = table
                continue
            titled = [g for g, votes_ in counter.items() if votes_ >= 10]
            given = [w for w in key.lower().split() if w not in _MALE_TITLES | _FEMALE_TITLES]
            census = self.census.get(given[0]) if given else None
            if not titled and census in ("male", "female"):
                genders[key] = census
                continue
            ranked = counter.most_common()
            if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
                genders[key] = "neutral"
            else:
                genders[key] = ranked[0][0]
        return {alias: genders[key] for alias, key in aliases.items()}

    @staticmethod
    def _pronoun_evidence(ent: Any) -> list[str]:
        """Genders of the pronouns that most likely refer to the mention ``ent``: possessive
        or reflexive pronouns in the clause the name is the subject of ("Clara taped the note
        to her door"), and the subject pronoun of the next sentence when the name is the
        subject of its sentence ("Tomas sighed. He ...")."""
        root = ent.root
        if root.dep_ not in ("nsubj", "nsubjpass"):
            return []
        found: list[str] = []
        verb = root.head
        for token in verb.subtree:
            if token.i < ent.end or token.ent_type_ == "PERSON":
                continue
            gender = _pronoun_gender(token, subject=False)
            if gender is not None:
                found.append(gender)
                break
        sentence = ent.sent
        if verb == sentence.root and sentence.end < len(ent.doc):
            following = ent.doc[sentence.end].sent
            subjects = [t for t in following if t.dep_ in ("nsubj", "nsubjpass")]
            if subjects and subjects[0].head == following.root:
                gender = _pronoun_gender(subjects[0], subject=True)
                if gender is not None:
                    found.append(gender)
        return found

    def __call__(self, text: str, *, genders: Mapping[str, str] | None = None) -> str:
        """``text`` with every character name (and a title before it) replaced by its
        placeholder."""
        found = dict(genders) if genders is not None else self.genders(text)
        if not found:
            return text
        names = sorted(found, key=len, reverse=True)
        titles = sorted({t.rstrip(".").capitalize() for t in _MALE_TITLES | _FEMALE_TITLES})
        pattern = re.compile(
            rf"(?:\b(?:{'|'.join(map(re.escape, titles))})\.?\s+)?"
            rf"\b(?P<name>{'|'.join(map(re.escape, names))})\b"
        )
        return pattern.sub(lambda match: PLACEHOLDERS[found[match.group("name")]], text)

    def story(self, story: Story) -> Story:
        """A copy of ``story`` with names in the prompt, story and references replaced; the
        genders are inferred from the prompt and story together."""
        context = f"{story.prompt}\n\n{story.story}" if story.prompt else story.story
        genders = self.genders(context)
        reference: str | list[str] | None = story.reference
        if isinstance(reference, str):
            reference = self(reference, genders=genders)
        elif isinstance(reference, list):
            reference = [self(item, genders=genders) for item in reference]
        return Story(
            id=story.id,
            prompt=self(story.prompt, genders=genders) if story.prompt else story.prompt,
            story=self(story.story, genders=genders),
            reference=reference,
            system=story.system,
            extra=dict(story.extra),
        )
