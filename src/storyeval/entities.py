"""Texts with entity mentions and coreference clusters, for the entity evaluation tasks of
Clark's thesis (Clark 2021, chapter 3; :mod:`storyeval.analyses.entity_eval`).

Three sources:

* a JSONL file of annotated texts: ``{"id": ..., "text": ..., "mentions": [{"start": 0,
  "end": 5, "cluster": "1"}, ...]}`` (character offsets, ``end`` exclusive);
* a CoNLL-2012 file (``*_conll``; the word in column 4, the coreference in the last column,
  e.g. ``(12``, ``12)``, ``(12)|(3``); the words are joined with single spaces;
* raw stories, through :func:`detect_mentions`: an **approximate** spaCy-based detector with
  simple coreference (see its docstring). It is good enough to run the tasks on any corpus,
  not a coreference system: use real annotations when the numbers matter.

As in the thesis (section 3.4), a mention longer than three words is replaced by its head word,
whatever the source: spaCy's syntactic head for detected mentions, and for annotated and
CoNLL mentions (which come without a parse) :func:`mention_head`, an approximation of the
noun-phrase head rule (the last word before the first post-modifier).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storyeval.base.errors import DataFileError, StoryevalError

MAX_MENTION_WORDS = 3


@dataclass(frozen=True)
class Mention:
    """A mention: character offsets into its text and its entity cluster."""

    start: int
    end: int
    cluster: str


@dataclass(frozen=True)
class AnnotatedText:
    """A text with its entity mentions (in text order)."""

    id: str
    text: str
    mentions: tuple[Mention, ...]

    def __post_init__(self) -> None:
        for mention in self.mentions:
            if not 0 <= mention.start < mention.end <= len(self.text):
                raise StoryevalError(
                    f"text {self.id!r}: mention [{mention.start}, {mention.end}) is outside the "
                    f"text ({len(self.text)} characters)"
                )
        ordered = tuple(sorted(self.mentions, key=lambda m: (m.start, m.end)))
        object.__setattr__(self, "mentions", ordered)

    def words(self, mention: Mention) -> str:
        """The mention's text."""
        return self.text[mention.start : mention.end]

    def to_dict(self) -> dict[str, Any]:
        """The JSONL record."""
        return {
            "id": self.id,
            "text": self.text,
            "mentions": [
                {"start": m.start, "end": m.end, "cluster": m.cluster, "text": self.words(m)}
                for m in self.mentions
            ],
        }


def _problem(path: Path, line: int, message: str) -> DataFileError:
    return DataFileError.single(path, line, message)


def read_annotated(path: str | Path) -> list[AnnotatedText]:
    """Annotated texts from a JSONL file (see the module docstring).

    Raises
    ------
    storyeval.base.errors.DataFileError
        With the file and line of a malformed record.
    """
    source = Path(path)
    texts = []
    for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            mentions = tuple(
                Mention(int(m["start"]), int(m["end"]), str(m["cluster"]))
                for m in record["mentions"]
            )
            texts.append(AnnotatedText(str(record["id"]), str(record["text"]), mentions))
        except json.JSONDecodeError as exc:
            raise _problem(source, number, f"not JSON: {exc.msg}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise _problem(
                source,
                number,
                f"an annotated text needs id, text and mentions with start, "
                f"end and cluster ({type(exc).__name__}: {exc})",
            ) from None
        except StoryevalError as exc:
            raise _problem(source, number, str(exc)) from None
    return texts


_COREF = re.compile(r"\(?\d+\)?")


def _conll_document(name: str, rows: list[tuple[str, str]]) -> AnnotatedText:
    """One document from (word, coreference column) rows; "" rows end sentences."""
    text, mentions = "", []
    open_spans: dict[str, list[int]] = {}
    for word, coref in rows:
        if not word:
            continue
        start = len(text) + (1 if text else 0)
        text = f"{text} {word}" if text else word
        end = len(text)
        for part in coref.split("|") if coref not in ("-", "_", "") else []:
            cluster = part.strip("()")
            if part.startswith("("):
                open_spans.setdefault(cluster, []).append(start)
            if part.endswith(")"):
                if not open_spans.get(cluster):
                    raise StoryevalError(f"document {name!r}: cluster {cluster} closes unopened")
                mentions.append(Mention(open_spans[cluster].pop(), end, cluster))
    return AnnotatedText(name, text, tuple(mentions))


def read_conll(path: str | Path) -> list[AnnotatedText]:
    """Documents of a CoNLL-2012 file (every ``#begin document`` part is one text).

    Raises
    ------
    storyeval.base.errors.DataFileError
        With the file and line of a malformed row.
    """
    source = Path(path)
    documents: list[AnnotatedText] = []
    name, begun = "", False
    rows: list[tuple[str, str]] = []
    for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("#begin document"):
            match = re.match(r"#begin document \(?([^);]*)\)?;?\s*(?:part\s+(\d+))?", line)
            name = (match.group(1) if match else f"doc{len(documents)}").strip()
            if match and match.group(2) and match.group(2) != "000":
                name = f"{name}#{match.group(2)}"
            rows, begun = [], True
        elif line.startswith("#end document"):
            try:
                documents.append(_conll_document(name, rows))
            except StoryevalError as exc:
                raise _problem(source, number, str(exc)) from None
            begun = False
        elif begun and line.strip():
            columns = line.split()
            if len(columns) < 5 or (
                not _COREF.fullmatch(columns[-1].split("|")[0]) and columns[-1] != "-"
            ):
                raise _problem(
                    source, number, "a CoNLL-2012 row needs 5+ columns ending in the coreference"
                )
            rows.append((columns[3], columns[-1]))
    return documents


# --------------------------------------------------------------------------- detection

_PRONOUN_GROUPS = {
    "male": {"he", "him", "his", "himself"},
    "female": {"she", "her", "hers", "herself"},
    "neuter": {"it", "its", "itself"},
    "plural": {"they", "them", "their", "theirs", "themselves"},
    "first": {"i", "me", "my", "mine", "myself"},
    "we": {"we", "us", "our", "ours", "ourselves"},
    "you": {"you", "your", "yours", "yourself"},
}
_GROUP_OF = {word: group for group, words in _PRONOUN_GROUPS.items() for word in words}
_NAMED = {"PERSON", "ORG", "GPE", "LOC", "FAC", "NORP", "PRODUCT"}


@dataclass
class _Cluster:
    key: str
    kind: str  # person, thing, plural
    names: set[str]
    gender: str | None = None
    last: int = 0
    last_subject: int = -1


class _Resolver:
    """Greedy coreference: names by a shared word, nouns by head lemma, pronouns to the most
    recent compatible cluster."""

    def __init__(self) -> None:
        self.clusters: list[_Cluster] = []

    def _new(self, kind: str, names: set[str], gender: str | None = None) -> _Cluster:
        cluster = _Cluster(str(len(self.clusters) + 1), kind, names, gender)
        self.clusters.append(cluster)
        return cluster

    def _recent(self, ok: Any, key: Any = None) -> _Cluster | None:
        found = [c for c in self.clusters if ok(c)]
        return max(found, key=key or (lambda c: c.last)) if found else None

    def name(self, words: list[str], person: bool) -> _Cluster:
        kind = "person" if person else "thing"
        found = self._recent(lambda c: c.kind == kind and c.names & set(words))
        if found is not None:
            found.names |= set(words)
            return found
        return self._new(kind, set(words))

    def noun(self, lemma: str, plural: bool) -> _Cluster:
        kind = "plural" if plural else "thing"
        found = self._recent(lambda c: c.kind == kind and lemma in c.names)
        return found if found is not None else self._new(kind, {lemma})

    def pronoun(self, group: str, exclude: set[str], subject: bool = False) -> _Cluster:
        if group in ("first", "we", "you"):
            found = self._recent(lambda c: c.kind == group)
            return found if found is not None else self._new(group, set())
        if group in ("male", "female"):
            # a known gender beats an unknown one; a subject pronoun continues the latest
            # subject (centering), any other the latest mention
            found = self._recent(
                lambda c: c.kind == "person" and c.gender in (None, group) and c.key not in exclude,
                lambda c: (c.gender == group, c.last_subject if subject else c.last, c.last),
            )
            if found is not None:
                found.gender = group
                return found
            return self._new("person", set(), group)
        kind = "thing" if group == "neuter" else "plural"
        found = self._recent(lambda c: c.kind == kind and c.key not in exclude)
        return found if found is not None else self._new(kind, set())


def _clause_subjects(token: Any) -> list[int]:
    """Token indices of the subjects of the verb governing ``token`` (a non-reflexive
    pronoun does not corefer with them: "Seth yelled at her" - her is not Seth)."""
    head = token.head
    while head.pos_ not in ("VERB", "AUX") and head.head.i != head.i:
        head = head.head
    return [c.i for c in head.children if c.dep_ in ("nsubj", "nsubjpass") and c.i != token.i]


# words that start a noun phrase's post-modifier: the head is the last word before one
_POST_MODIFIER = frozenset(
    [
        "of",
        "with",
        "in",
        "on",
        "at",
        "from",
        "to",
        "by",
        "for",
        "about",
        "near",
        "under",
        "over",
        "behind",
        "into",
        "onto",
        "inside",
        "outside",
        "beside",
        "across",
        "through",
        "without",
        "who",
        "whom",
        "whose",
        "which",
        "that",
        "where",
        "when",
        "like",
        "named",
        "called",
        ",",
        "(",
        ";",
        ":",
        "-",
    ]
)
_MENTION_TOKEN = re.compile(r"\w+(?:'\w+)?|[^\w\s]")


def mention_head(words: str) -> tuple[int, int]:
    """Offsets in ``words`` of the noun phrase's head by the rule the thesis' preprocessing
    needs without a parser: the last word before the first post-modifier (a preposition, a
    relative pronoun, a comma), or the last word. A possessive's head is what it owns.

    >>> [(w, w[slice(*mention_head(w))]) for w in ("the old man with the hat", "Emily's dog")]
    [('the old man with the hat', 'man'), ("Emily's dog", 'dog')]
    """
    tokens = [(m.group(), m.start(), m.end()) for m in _MENTION_TOKEN.finditer(words)]
    head: tuple[str, int, int] | None = None
    for number, token in enumerate(tokens):
        if number and token[0].lower() in _POST_MODIFIER and head is not None:
            break
        if token[0][0].isalnum():
            head = token
    if head is None:
        return 0, len(words)
    return head[1], head[2]


def reduce_long_mentions(
    text: AnnotatedText, max_words: int | None = MAX_MENTION_WORDS
) -> AnnotatedText:
    """``text`` with every mention of more than ``max_words`` words replaced by its head word
    (:func:`mention_head`); a reduced mention that lands on another mention's span is dropped.
    ``max_words`` None: unchanged."""
    if max_words is None:
        return text
    kept: dict[tuple[int, int], Mention] = {}
    for mention in text.mentions:
        words = text.words(mention)
        if len(re.findall(r"\w+(?:'\w+)?", words)) > max_words:
            begin, finish = mention_head(words)
            mention = Mention(mention.start + begin, mention.start + finish, mention.cluster)
        kept.setdefault((mention.start, mention.end), mention)
    return AnnotatedText(text.id, text.text, tuple(kept.values()))


def _head_span(span: Any) -> tuple[int, int]:
    """The span's character offsets, or its head word's when it has more than three words."""
    if len(span) > MAX_MENTION_WORDS:
        return span.root.idx, span.root.idx + len(span.root.text)
    return span.start_char, span.end_char


def _annotate(story_id: str, text: str, nlp: Any) -> AnnotatedText:
    doc = nlp(text)
    resolver = _Resolver()
    spans: list[tuple[int, int, Any]] = []  # (start token, end token, kind or spaCy span)
    taken: set[int] = set()
    for entity in doc.ents:
        if entity.label_ in _NAMED:
            spans.append((entity.start, entity.end, entity))
            taken |= set(range(entity.start, entity.end))
    for chunk in doc.noun_chunks:
        if chunk.root.pos_ in ("NOUN", "PROPN") and not taken & set(range(chunk.start, chunk.end)):
            spans.append((chunk.start, chunk.end, chunk))
            taken |= set(range(chunk.start, chunk.end))
    for token in doc:
        if token.i not in taken and token.lower_ in _GROUP_OF:
            spans.append((token.i, token.i + 1, doc[token.i : token.i + 1]))
    mentions = []
    cluster_of_token: dict[int, str] = {}
    for start, _end, span in sorted(spans, key=lambda s: s[0]):
        word = span.text.lower()
        if len(span) == 1 and word in _GROUP_OF:
            reflexive = word.endswith(("self", "selves"))
            subjects = [] if reflexive else _clause_subjects(span[0])
            exclude = {cluster_of_token[i] for i in subjects if i in cluster_of_token}
            subject = span[0].dep_ in ("nsubj", "nsubjpass")
            cluster = resolver.pronoun(_GROUP_OF[word], exclude, subject)
        elif span.root.pos_ == "PROPN" and span.label_ not in _NAMED:
            # a proper noun the small NER model missed: in stories, usually a character
            cluster = resolver.name([t.text for t in span if t.pos_ == "PROPN"], True)
        elif getattr(span, "label_", "") in _NAMED:
            cluster = resolver.name(
                [t.text for t in span if t.text[:1].isupper()] or [span.text],
                span.label_ == "PERSON",
            )
        else:
            cluster = resolver.noun(span.root.lemma_.lower(), span.root.tag_ in ("NNS", "NNPS"))
        cluster.last = start
        if span.root.dep_ in ("nsubj", "nsubjpass"):
            cluster.last_subject = start
        for token in span:
            cluster_of_token[token.i] = cluster.key
        begin, finish = _head_span(span)
        mentions.append(Mention(begin, finish, cluster.key))
    return AnnotatedText(story_id, text, tuple(mentions))


def detect_mentions(stories: Iterable[tuple[str, str]], *, nlp: Any = None) -> list[AnnotatedText]:
    """Approximate mentions and coreference for raw ``(id, text)`` pairs.

    Mentions: spaCy's named entities (people, organisations, places, ...), noun chunks headed
    by a noun or a proper noun (a proper noun outside the named entities counts as a person: in
    stories, usually a character the small NER model missed), and personal pronouns; a mention of more than three words becomes its head word.
    Clusters, greedily in text order: a name joins the latest cluster of its kind sharing a
    capitalised word ("Emily" and "Emily Hart"); a noun phrase the latest one with its head
    lemma ("the dragon", "that dragon"); he/she the latest person cluster of that (or an
    unknown) gender, which it then fixes (a known gender first; a subject pronoun continues
    the latest subject, others the latest mention); it the latest thing, they the latest plural;
    I/we/you their own clusters. No cataphora, no bridging, no appositions: approximate.

    Examples
    --------
    >>> (text,) = detect_mentions([("s", "Emily saw Seth. She waved at him.")])
    >>> [(text.words(m), m.cluster) for m in text.mentions]
    [('Emily', '1'), ('Seth', '2'), ('She', '1'), ('him', '2')]
    """
    if nlp is None:
        from storyeval.models import load_spacy

        nlp = load_spacy()
    return [_annotate(story_id, text, nlp) for story_id, text in stories]


def entity_file_format(path: str | Path) -> str:
    """``conll`` for a ``*conll`` file, ``annotated`` for a JSONL whose first record has
    ``mentions``, else ``stories``."""
    source = Path(path)
    if source.name.endswith("conll"):
        return "conll"
    with source.open(encoding="utf-8") as handle:
        first = next((line for line in handle if line.strip()), "")
    try:
        record = json.loads(first)
    except json.JSONDecodeError:
        return "stories"
    return "annotated" if isinstance(record, dict) and "mentions" in record else "stories"


def read_entity_texts(
    path: str | Path,
    *,
    fmt: str = "auto",
    nlp: Any = None,
    limit: int | None = None,
    max_words: int | None = MAX_MENTION_WORDS,
) -> tuple[list[AnnotatedText], str]:
    """Annotated texts from ``path`` and where their mentions came from (``annotated``,
    ``conll`` or ``detected``); ``fmt`` ``auto`` decides by :func:`entity_file_format`, and a
    story file goes through :func:`detect_mentions`. ``limit``: the first N texts only.
    Annotated and CoNLL mentions of more than ``max_words`` words become their head word
    (:func:`reduce_long_mentions`; None keeps them whole), as detected ones do."""
    source = Path(path)
    if fmt == "auto":
        fmt = entity_file_format(source)
    if fmt in ("conll", "annotated"):
        texts = (read_conll if fmt == "conll" else read_annotated)(source)[:limit]
        return [reduce_long_mentions(t, max_words) for t in texts], fmt
    if fmt != "stories":
        raise ValueError(f"format must be auto, annotated, conll or stories; got {fmt!r}")
    from storyeval.corpus import read_stories

    stories = read_stories(source)[:limit]
    return detect_mentions(((s.id, s.story) for s in stories), nlp=nlp), "detected"


def write_annotated(path: str | Path, texts: Sequence[AnnotatedText]) -> None:
    """Write annotated texts as JSONL (atomically)."""
    from storyeval.base.io import write_text_atomic

    write_text_atomic(
        path, "".join(json.dumps(t.to_dict(), ensure_ascii=False) + "\n" for t in texts)
    )
