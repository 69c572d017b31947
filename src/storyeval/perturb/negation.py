"""Negation alteration by the rules of Guan & Huang (2020), appendix A and Table 8.

Adding a negation depends on the verb type:

==========================  ===============  ===================  ===================================
verb type                   examples         rule                 example
==========================  ===============  ===================  ===================================
be                          am, was, been    ~ + not              Failure was not an option.
modal verbs                 would, will      ~ + not              I can not walk well.
base form                   go               do not + v.          I do not go through the park.
3rd person singular present goes             does not + v.        He does not go through the park.
simple past                 went             did not + v.         He did not go through the park.
past participle             gone             not + ~              His insurance rate had not gone up.
gerund                      going            not + ~              She ended up not going elsewhere.
==========================  ===============  ===================  ===================================

(``~`` is the verb as it stands, ``v.`` its base form.) "not" may be replaced by the short
form "n't" ("wasn't", "can't", "didn't"). Removing a negation reverses the rules: "not" or
"n't" is dropped and do-support is undone by inflecting the verb ("did not go" -> "went",
"does not go" -> "goes").

A verb with auxiliaries is negated at its first auxiliary ("had not gone", "was not going",
"will not be"), which is where the table's participle and gerund rules put "not" when an
auxiliary precedes the verb. Infinitives ("to go") are not negated; other negative words
("nobody", "never") are left to antonym substitution, as in the paper.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

from storyeval.perturb.lexicon import inflect, match_case, verb_lemma

#: The rule names, one per row of Table 8 (plus ``infinitive`` for removing "not to").
RULES = (
    "be",
    "modal",
    "base",
    "third_singular_present",
    "simple_past",
    "past_participle",
    "gerund",
)

_CONTRACTED = {
    "is": "isn't",
    "are": "aren't",
    "was": "wasn't",
    "were": "weren't",
    "have": "haven't",
    "has": "hasn't",
    "had": "hadn't",
    "do": "don't",
    "does": "doesn't",
    "did": "didn't",
    "can": "can't",
    "could": "couldn't",
    "will": "won't",
    "would": "wouldn't",
    "shall": "shan't",
    "should": "shouldn't",
    "must": "mustn't",
    "need": "needn't",
}
#: The first half of a contraction as spaCy tokenizes it ("wo" + "n't") -> the full word.
_UNCONTRACT = {"wo": "will", "ca": "can", "sha": "shall"}
_DO_TENSE = {"did": "VBD", "does": "VBZ", "do": "VBP"}
_DO_RULE = {"VBD": "simple_past", "VBZ": "third_singular_present", "VBP": "base", "VB": "base"}
#: Clauses with a negative subject ("nobody wanted cake") are left alone: adding "not" would
#: make a double negative, and the paper leaves such words to antonym substitution.
_NEGATIVE_SUBJECTS = frozenset({"nobody", "nothing", "none", "noone", "neither", "no"})
_NONFINITE_DEPS = frozenset({"xcomp", "advcl", "pcomp", "ccomp", "acl", "ROOT", "conj", "relcl"})

Direction = Literal["add", "remove"]


@dataclass(frozen=True)
class NegationSite:
    """A place in a parsed sentence where a negation can be added or removed."""

    direction: Direction
    rule: str
    verb: int  # token index of the verb (or auxiliary) the rule is about
    anchor: int  # token index after which "not" goes (add) or of the negation word (remove)
    can_contract: bool
    must_contract: bool = False  # "Did you go?" -> "Didn't you go?", never "Did not you go?"


class _Tokens:
    """An editable copy of a spaCy doc's tokens with their trailing whitespace."""

    def __init__(self, doc: Any) -> None:
        self.items: list[list[str]] = [[t.text, t.whitespace_] for t in doc]

    def text(self) -> str:
        return "".join(text + space for text, space in self.items if text).strip()

    def delete(self, index: int) -> None:
        if index > 0:
            previous = index - 1
            while previous > 0 and not self.items[previous][0]:
                previous -= 1
            self.items[previous][1] = self.items[index][1]
        self.items[index] = ["", ""]

    def capitalize_first(self) -> None:
        for item in self.items:
            if item[0]:
                item[0] = item[0][:1].upper() + item[0][1:]
                return


def _is_aux(token: Any) -> bool:
    return token.dep_ in ("aux", "auxpass")


def _auxiliaries(verb: Any) -> list[Any]:
    return sorted((c for c in verb.children if _is_aux(c) and c.i < verb.i), key=lambda c: c.i)


def _is_first_word(token: Any) -> bool:
    return all(not t.is_alpha for t in token.doc[: token.i])


def _is_clitic(token: Any) -> bool:
    return bool(token.text.startswith(("'", "’")))


def negation_sites(doc: Any) -> list[NegationSite]:
    """Every place in a parsed sentence where a negation can be added or removed."""
    sites: list[NegationSite] = []
    negated_verbs = set()
    for token in doc:
        if token.dep_ == "neg" and token.lower_ in ("not", "n't", "n’t"):
            site = _removal_site(token)
            if site is not None:
                sites.append(site)
            negated_verbs.add(token.head.i)
            if _is_aux(token.head):
                negated_verbs.add(token.head.head.i)
    for token in doc:
        if token.i in negated_verbs or token.pos_ not in ("VERB", "AUX") or _is_aux(token):
            continue
        if any(child.dep_ == "neg" for child in token.children):
            continue
        site = _addition_site(token)
        if site is not None:
            sites.append(site)
    return sorted(sites, key=lambda s: (s.anchor, s.direction))


_SUBJECT_DEPS = ("nsubj", "nsubjpass", "expl")
_FINITE_RULES = {"VBD": "simple_past", "VBZ": "third_singular_present", "VBP": "base"}


def _negative_subject(verb: Any) -> bool:
    """The verb's subject is already negative ("nobody", "no one", "neither of them")."""
    return any(
        child.dep_ in _SUBJECT_DEPS
        and (
            child.lower_ in _NEGATIVE_SUBJECTS
            or any(t.lower_ in ("no", "neither") for t in child.subtree)
        )
        for child in verb.children
    )


def _auxiliary_rule(first: Any) -> str | None:
    """How to negate after the first auxiliary (None: not an auxiliary we negate)."""
    lemma = first.lemma_.lower()
    if first.tag_ == "MD":
        return "modal"
    if lemma == "be":
        return "be"
    if lemma == "have":
        return "past_participle"
    if lemma == "do":
        return _DO_RULE.get(first.tag_, "base")
    return None


def _auxiliary_site(verb: Any, first: Any) -> NegationSite | None:
    rule = _auxiliary_rule(first)
    if rule is None:
        return None
    subject_between = any(c.dep_ in _SUBJECT_DEPS and first.i < c.i < verb.i for c in verb.children)
    can_contract = first.lower_ in _CONTRACTED and not _is_clitic(first)
    if subject_between and not can_contract:
        return None  # "Did you not go" needs "Didn't you go"
    return NegationSite("add", rule, first.i, first.i, can_contract, subject_between)


def _main_verb_site(verb: Any) -> NegationSite | None:
    if verb.lemma_.lower() == "be" and verb.tag_ in ("VBD", "VBZ", "VBP"):
        contract = verb.lower_ in _CONTRACTED and not _is_clitic(verb)
        return NegationSite("add", "be", verb.i, verb.i, contract)
    if verb.pos_ != "VERB":
        return None
    if verb.tag_ in _FINITE_RULES:
        return NegationSite("add", _FINITE_RULES[verb.tag_], verb.i, verb.i, True)
    if verb.tag_ == "VB":
        has_subject = any(c.dep_ in ("nsubj", "nsubjpass") for c in verb.children)
        if verb.dep_ == "ROOT" and not has_subject and _is_first_word(verb):
            return NegationSite("add", "base", verb.i, verb.i, True)  # imperative
        return None
    if verb.tag_ in ("VBN", "VBG") and verb.dep_ in _NONFINITE_DEPS:
        rule = "past_participle" if verb.tag_ == "VBN" else "gerund"
        return NegationSite("add", rule, verb.i, verb.i, False)
    return None


def _addition_site(verb: Any) -> NegationSite | None:
    if _negative_subject(verb):
        return None
    auxes = _auxiliaries(verb)
    if any(aux.tag_ == "TO" or aux.lower_ == "to" for aux in auxes):
        return None  # infinitive
    if auxes:
        return _auxiliary_site(verb, auxes[0])
    return _main_verb_site(verb)


def _removal_site(negation: Any) -> NegationSite | None:
    doc = negation.doc
    if negation.i == 0:
        following = doc[1] if len(doc) > 1 else None
        if following is not None and following.tag_ in ("VBG", "VBN"):
            rule = "gerund" if following.tag_ == "VBG" else "past_participle"
            return NegationSite("remove", rule, following.i, negation.i, False)
        return None
    previous = doc[negation.i - 1]
    head = negation.head
    if head.pos_ not in ("VERB", "AUX"):
        return None
    if previous.lower_ in ("ai",):
        return None  # "ain't" has no single affirmative form
    contracted = negation.lower_ != "not"
    lemma = previous.lemma_.lower()
    if previous.tag_ == "MD" or (lemma in ("be", "have", "do") and previous.pos_ == "AUX"):
        if previous.tag_ == "MD":
            rule = "modal"
        elif lemma == "be":
            rule = "be"
        elif lemma == "have":
            rule = "past_participle"
        else:
            rule = _DO_RULE.get(_DO_TENSE.get(previous.lower_, previous.tag_), "base")
        return NegationSite("remove", rule, previous.i, negation.i, contracted)
    following = doc[negation.i + 1] if negation.i + 1 < len(doc) else None
    if not contracted and following is not None:
        if following.tag_ == "VBG":
            return NegationSite("remove", "gerund", following.i, negation.i, False)
        if following.tag_ == "VBN":
            return NegationSite("remove", "past_participle", following.i, negation.i, False)
        if following.lower_ == "to":
            return NegationSite("remove", "infinitive", following.i, negation.i, False)
    return None


def apply_site(doc: Any, site: NegationSite, *, contract: bool = False) -> str:
    """The sentence of ``doc`` with the negation at ``site`` added or removed.

    ``contract`` uses "n't" instead of "not" when adding (where the verb allows it).
    """
    tokens = _Tokens(doc)
    if site.direction == "add":
        _add(doc, tokens, site, site.must_contract or (contract and site.can_contract))
    else:
        _remove(doc, tokens, site)
    return tokens.text()


def _add(doc: Any, tokens: _Tokens, site: NegationSite, contract: bool) -> None:
    anchor = doc[site.anchor]
    item = tokens.items[site.anchor]
    if _is_aux(anchor) or site.rule in ("be", "modal"):
        # "not" (or "n't") right after the first auxiliary, the modal or the copula
        if contract:
            item[0] = match_case(anchor.text, _CONTRACTED[anchor.lower_])
        else:
            item[0] = item[0] + " not"
        return
    if site.rule in ("past_participle", "gerund"):
        phrase = "not " + anchor.text
        if _is_first_word(anchor):
            phrase = (
                match_case(anchor.text, "not") + " " + anchor.text[:1].lower() + anchor.text[1:]
            )
        item[0] = phrase
        return
    # do-support: "went" -> "did not go", "goes" -> "does not go", "go" -> "do not go"
    tense = anchor.tag_ if anchor.tag_ in ("VBD", "VBZ") else "VBP"
    auxiliary = {"VBD": "did", "VBZ": "does", "VBP": "do"}[tense]
    lemma = verb_lemma(anchor.text, anchor.lemma_)
    negated = _CONTRACTED[auxiliary] if contract else f"{auxiliary} not"
    phrase = f"{negated} {lemma}"
    item[0] = match_case(anchor.text, phrase) if _is_first_word(anchor) else phrase


def _remove(doc: Any, tokens: _Tokens, site: NegationSite) -> None:
    negation = doc[site.anchor]
    was_first = _is_first_word(negation) or (
        site.anchor > 0 and _is_first_word(doc[site.anchor - 1])
    )
    if site.rule in ("gerund", "past_participle", "infinitive") and site.verb > site.anchor:
        tokens.delete(site.anchor)
        if was_first:
            tokens.capitalize_first()
        return
    auxiliary = doc[site.verb]
    main = auxiliary.head if _is_aux(auxiliary) else auxiliary
    if (
        auxiliary.lemma_.lower() == "do"
        and _is_aux(auxiliary)
        and main.tag_ == "VB"
        and main.i > negation.i
    ):
        tense = _DO_TENSE.get(auxiliary.lower_, "VBP")
        lemma = verb_lemma(main.text, main.lemma_)
        form = inflect(lemma, tense) or lemma
        if tense == "VBP" and lemma == "be":
            form = "are"
        tokens.items[main.i][0] = match_case(main.text, form) if main.text[:1].isupper() else form
        tokens.delete(negation.i)
        tokens.delete(auxiliary.i)
        if _is_first_word(auxiliary):
            tokens.capitalize_first()
        return
    full = _UNCONTRACT.get(auxiliary.lower_)
    if full is not None:
        tokens.items[auxiliary.i][0] = match_case(auxiliary.text, full)
    tokens.delete(negation.i)


def alter_negation(
    doc: Any, rng: random.Random, *, contract_probability: float = 0.5
) -> tuple[str, NegationSite, bool] | None:
    """Add or remove one negation in a parsed sentence, choosing the place at random.

    Returns the new sentence, the place and whether "n't" was used; ``None`` when the
    sentence has no place for a negation."""
    sites = negation_sites(doc)
    if not sites:
        return None
    site = rng.choice(sites)
    contract = site.direction == "add" and (
        site.must_contract or (site.can_contract and rng.random() < contract_probability)
    )
    return apply_site(doc, site, contract=contract), site, contract


def negate(sentence: str, *, nlp: Any = None, contract: bool = False) -> str:
    """Add a negation at the first place that takes one (for trying the rules out).

    Examples
    --------
    >>> negate("He went through the park.")
    'He did not go through the park.'
    >>> negate("Failure was an option.", contract=True)
    "Failure wasn't an option."
    """
    doc = _parse(sentence, nlp)
    sites = [s for s in negation_sites(doc) if s.direction == "add"]
    if not sites:
        raise ValueError(f"no verb to negate in {sentence!r}")
    return apply_site(doc, sites[0], contract=contract)


def affirm(sentence: str, *, nlp: Any = None) -> str:
    """Remove the first negation of a sentence (for trying the rules out).

    Examples
    --------
    >>> affirm("He did not go through the park.")
    'He went through the park.'
    >>> affirm("I can't walk well.")
    'I can walk well.'
    """
    doc = _parse(sentence, nlp)
    sites = [s for s in negation_sites(doc) if s.direction == "remove"]
    if not sites:
        raise ValueError(f"no negation to remove in {sentence!r}")
    return apply_site(doc, sites[0])


def _parse(sentence: str, nlp: Any) -> Any:
    if nlp is None:
        from storyeval.models import load_spacy

        nlp = load_spacy()
    return nlp(sentence, disable=["ner"])
