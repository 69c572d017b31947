"""Classifier-based evaluation of style transfer (De Mattei et al. 2021, "On the interaction of
automatic evaluation and task framing in headline style transfer", De Mattei et al. (2020)).

People cannot tell two close styles apart reliably, so the paper judges a transfer with
purpose-trained classifiers instead:

* the **main** classifier tells the two styles apart; a transfer succeeds in style when the
  classifier's decision on the output is *reversed* relative to its decision on the source;
* the **HH** classifier checks that the output still says what the original says (trained on
  aligned texts of the two styles as positives and as many random pairs as negatives);
* the **AH** classifier checks that the output fits the source document (trained on
  (document, text) pairs and pairs with a random other document).

The **compliancy** score is the share of outputs for which all checks succeed at once, per
system and direction; the classifiers' own precision, recall and F1 on held-out gold texts
(the paper's Table 1) and the compliancy of the gold aligned texts (the upper bound) are
reported beside it, and BLEU, ROUGE-L and BERTScore against the source show what overlap
metrics see.

A corpus is a story file: ``story`` is the text, the style is in ``system`` (or the field
``style_field`` names), the source document (e.g. the article, or the story's prompt) in
``prompt``, and texts of the two styles with the same content share the value of
``pair_field`` (``pair`` by default). Outputs to evaluate are a story file whose ``source``
field (``source_field``) names the id of the text in the corpus they were transferred from.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from storyeval.base.errors import MetaEvaluationWarning, StoryevalError
from storyeval.base.signature import Signature
from storyeval.corpus import Story
from storyeval.learn.data import InsufficientDataError, corpus_hash
from storyeval.perturb.base import story_rng

if TYPE_CHECKING:
    from storyeval.learn.style import MatchModel, PairExample, StyleModel, TextExample
    from storyeval.learn.trainer import TrainingConfig

SUMMARY_FILE = "classify-eval.json"
CHECKS = ("hh", "ah")
MEASURES = ("hh", "ah", "main", "target", "compliancy")
GOLD_SYSTEM = "(gold)"
ALL_DIRECTIONS = "all"
OVERLAP_METRICS = ("bleu", "rougeL", "bertscore_f")


class ClassifyEvalWarning(MetaEvaluationWarning):
    """Something that weakens a classifier-based evaluation (e.g. sources seen in training)."""


@dataclass(frozen=True)
class StyledText:
    """A corpus text: its style, its source document (may be empty) and its alignment group."""

    id: str
    text: str
    style: str
    document: str = ""
    group: str | None = None
    split: str | None = None  # the data split (SA, A1-A3, R: :mod:`style_alignment`)


#: The paper's settings per classifier (De Mattei et al. 2021, section 4): the main classifier
#: on 32 tokens, batch 256, 6 epochs; HH on 64 tokens, batch 128, 2 epochs, trained on A1; AH
#: batch 8, 6 epochs, on R+A3+A1 (its article length is not given: 512, BERT's most); all at
#: learning rate 1e-5; SA is the test set.
PRESETS: dict[str, dict[str, Any]] = {
    "demattei2021": {
        "settings": {
            "main": {"max_length": 32, "batch_size": 256, "epochs": 6, "learning_rate": 1e-5},
            "hh": {"max_length": 64, "batch_size": 128, "epochs": 2, "learning_rate": 1e-5},
            "ah": {"max_length": 512, "batch_size": 8, "epochs": 6, "learning_rate": 1e-5},
        },
        "split_field": "split",
        "train_on": {"hh": ["A1"], "ah": ["R", "A3", "A1"]},
    }
}
SETTING_KEYS = ("max_length", "batch_size", "epochs", "learning_rate")


@dataclass(frozen=True)
class CorpusSplit:
    """Texts to train on, to stop early on, and to measure the classifiers on (by group)."""

    train: list[StyledText]
    dev: list[StyledText]
    test: list[StyledText]


# --------------------------------------------------------------------------- the corpus


def style_of(story: Story, style_field: str) -> str | None:
    """A story's style: its ``system`` or the field ``style_field`` names (None when empty)."""
    value = story.system if style_field == "system" else story.extra.get(style_field)
    return None if value is None or str(value).strip() == "" else str(value)


def styled_texts(
    stories: Sequence[Story],
    *,
    style_field: str = "system",
    pair_field: str = "pair",
    styles: Sequence[str] | None = None,
    split_field: str | None = None,
) -> tuple[list[StyledText], tuple[str, str]]:
    """The corpus texts of two styles, and the two styles (sorted, or as given); with
    ``split_field``, each text's data split.

    Raises
    ------
    StoryevalError
        When a text has no style, or the corpus does not have exactly two styles (pass
        ``styles`` to pick two of more).

    Examples
    --------
    >>> texts, pair = styled_texts([Story("1", "", "Hi.", system="a"), Story("2", "", "Hey.", system="b")])
    >>> pair, [t.style for t in texts]
    (('a', 'b'), ['a', 'b'])
    """
    texts = []
    for story in stories:
        style = style_of(story, style_field)
        if style is None:
            raise StoryevalError(f"story {story.id!r} has no style (field {style_field!r})")
        group = story.extra.get(pair_field)
        split = story.extra.get(split_field) if split_field else None
        texts.append(
            StyledText(
                story.id,
                story.story,
                style,
                story.prompt,
                None if group is None else str(group),
                None if split is None else str(split),
            )
        )
    found = sorted({t.style for t in texts})
    chosen = list(styles) if styles else found
    if len(chosen) != 2 or len(set(chosen)) != 2:
        raise StoryevalError(
            f"classifier-based evaluation compares two styles; the corpus has {len(found)} "
            f"({', '.join(found)}); choose two with --styles A,B"
        )
    missing = [s for s in chosen if s not in found]
    if missing:
        raise StoryevalError(f"style {missing[0]!r} is not in the corpus ({', '.join(found)})")
    return [t for t in texts if t.style in chosen], (chosen[0], chosen[1])


def _unit(text: StyledText) -> str:
    return text.group if text.group is not None else f"id:{text.id}"


def split_corpus(
    texts: Sequence[StyledText],
    *,
    test_fraction: float = 0.2,
    dev_fraction: float = 0.1,
    seed: int = 0,
) -> CorpusSplit:
    """Split by alignment group (a group never straddles two parts), reproducibly under
    ``seed``: ``test_fraction`` of the groups for the held-out gold measurements,
    ``dev_fraction`` for early stopping, the rest for training.

    Raises
    ------
    InsufficientDataError
        When a part would lack one of the two styles.
    """
    for name, value in (("test_fraction", test_fraction), ("dev_fraction", dev_fraction)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"{name} must be in (0, 1); got {value!r}")
    if test_fraction + dev_fraction >= 0.9:
        raise ValueError("test_fraction + dev_fraction must leave at least 10% for training")
    units = sorted({_unit(t) for t in texts})
    story_rng(seed, "classify-eval-split").shuffle(units)
    n_test = max(1, round(test_fraction * len(units)))
    n_dev = max(1, round(dev_fraction * len(units)))
    test_units, dev_units = set(units[:n_test]), set(units[n_test : n_test + n_dev])
    split = CorpusSplit(
        train=[t for t in texts if _unit(t) not in test_units | dev_units],
        dev=[t for t in texts if _unit(t) in dev_units],
        test=[t for t in texts if _unit(t) in test_units],
    )
    styles = {t.style for t in texts}
    for name in ("train", "dev", "test"):
        part = getattr(split, name)
        if {t.style for t in part} != styles:
            raise InsufficientDataError(
                f"the {name} part of a {len(units)}-group corpus lacks a style; classifier-based "
                "evaluation needs more texts of each style (at least a few dozen)"
            )
    return split


def aligned_pairs(texts: Sequence[StyledText]) -> list[tuple[StyledText, StyledText]]:
    """Every ordered (source, counterpart) pair of texts of different styles in one group."""
    groups: dict[str, list[StyledText]] = {}
    for text in texts:
        if text.group is not None:
            groups.setdefault(text.group, []).append(text)
    return [
        (a, b)
        for members in groups.values()
        for a in members
        for b in members
        if a.style != b.style
    ]


def style_examples(texts: Sequence[StyledText], styles: Sequence[str]) -> list[TextExample]:
    """The texts labelled with the index of their style."""
    from storyeval.learn.style import TextExample

    return [TextExample(t.text, list(styles).index(t.style)) for t in texts]


def hh_examples(texts: Sequence[StyledText], *, seed: int) -> list[PairExample]:
    """Aligned pairs as matches and, for each, the source with a random text of the
    counterpart's style from another group as a mismatch (the paper's HH training data)."""
    from storyeval.learn.style import PairExample

    examples = []
    for source, counterpart in aligned_pairs(texts):
        others = [t for t in texts if t.style == counterpart.style and _unit(t) != _unit(source)]
        examples.append(PairExample(source.text, counterpart.text, True))
        if others:
            other = story_rng(seed, "hh", source.id, counterpart.id).choice(others)
            examples.append(PairExample(source.text, other.text, False))
    return examples


def ah_examples(texts: Sequence[StyledText], *, seed: int) -> list[PairExample]:
    """(document, text) pairs as matches and, for each, the text with a random document of
    another group as a mismatch (the paper's AH training data)."""
    from storyeval.learn.style import PairExample

    examples = []
    with_documents = [t for t in texts if t.document.strip()]
    for text in with_documents:
        others = [
            t.document
            for t in with_documents
            if _unit(t) != _unit(text) and t.document != text.document
        ]
        examples.append(PairExample(text.document, text.text, True))
        if others:
            examples.append(
                PairExample(story_rng(seed, "ah", text.id).choice(others), text.text, False)
            )
    return examples


# --------------------------------------------------------------------------- classifiers


@dataclass
class Classifiers:
    """The trained classifiers of a ``classify-eval train`` directory."""

    directory: Path
    styles: tuple[str, str]
    main: StyleModel
    hh: MatchModel | None
    ah: MatchModel | None
    summary: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, directory: str | Path) -> Classifiers:
        """Load the classifiers written by :func:`train_classifiers`.

        Raises
        ------
        storyeval.base.errors.ModelLoadError
            When the directory was not written by :func:`train_classifiers`.
        """
        from storyeval.base.errors import ModelLoadError
        from storyeval.learn.style import MatchModel, StyleModel

        path = Path(directory)
        summary_path = path / SUMMARY_FILE
        if not summary_path.is_file():
            raise ModelLoadError(
                f"{directory}: no {SUMMARY_FILE}; train the classifiers with "
                "`storyeval classify-eval train CORPUS -o DIR`"
            )
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        checks = summary.get("checks", [])
        return cls(
            path,
            (summary["styles"][0], summary["styles"][1]),
            StyleModel(path / "main"),
            MatchModel(path / "hh") if "hh" in checks else None,
            MatchModel(path / "ah") if "ah" in checks else None,
            summary,
        )

    def signature(self, *, threshold: float) -> Signature:
        """The identity of the classifiers and the decision threshold."""
        fields: dict[str, Any] = {"styles": ",".join(self.styles), "main": self.main.identity}
        for check in CHECKS:
            model = getattr(self, check)
            fields[check] = model.identity if model is not None else "none"
        fields["threshold"] = threshold
        return Signature("classify_eval", fields)


def _report_rows(
    name: str, labels: Sequence[str], truth: Sequence[Any], predicted: Sequence[Any]
) -> list[dict[str, Any]]:
    from sklearn.metrics import precision_recall_fscore_support

    precision, recall, f1, support = precision_recall_fscore_support(
        truth, predicted, labels=list(labels), zero_division=0.0
    )
    return [
        {
            "classifier": name,
            "class": label,
            "precision": float(precision[i]),
            "recall": float(recall[i]),
            "f1": float(f1[i]),
            "support": int(support[i]),
        }
        for i, label in enumerate(labels)
    ]


def classifier_table(
    classifiers: Classifiers, test: Sequence[StyledText], *, seed: int, threshold: float = 0.5
) -> pd.DataFrame:
    """The classifiers' precision, recall and F1 per class on held-out gold data (the paper's
    Table 1): the style of each test text; aligned test pairs against random ones (HH); each
    test text with its own document against a random one (AH)."""
    rows = _report_rows(
        "main",
        classifiers.styles,
        [t.style for t in test],
        classifiers.main.predict([t.text for t in test]),
    )
    builders = {"hh": hh_examples, "ah": ah_examples}
    for check in CHECKS:
        model = getattr(classifiers, check)
        examples = builders[check](test, seed=seed + 7) if model is not None else []
        if not examples:
            continue
        probabilities = model.probabilities([(e.first, e.second) for e in examples])
        truth = ["match" if e.match else "no match" for e in examples]
        predicted = ["match" if p >= threshold else "no match" for p in probabilities]
        rows += _report_rows(check, ["match", "no match"], truth, predicted)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class ClassifierPlan:
    """How each classifier is trained: settings that differ from the common ones (per
    classifier: ``max_length``, ``batch_size``, ``epochs``, ``learning_rate``) and the data
    splits it trains on (all when absent)."""

    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    train_on: Mapping[str, Sequence[str]] = field(default_factory=dict)

    @classmethod
    def preset(cls, name: str) -> ClassifierPlan:
        """A plan of :data:`PRESETS`."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
        return cls(PRESETS[name]["settings"], PRESETS[name]["train_on"])

    def common(self, name: str, common: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of classifier ``name``'s training."""
        from dataclasses import replace

        mine = dict(self.settings.get(name, {}))
        unknown = sorted(set(mine) - set(SETTING_KEYS))
        if unknown:
            raise ValueError(f"{name}: unknown setting(s) {unknown}; use {', '.join(SETTING_KEYS)}")
        changes = {k: mine[k] for k in ("batch_size", "epochs", "learning_rate") if k in mine}
        return {
            **common,
            "max_length": int(mine.get("max_length", common["max_length"])),
            "training": replace(common["training"], **changes),
        }

    def part(self, name: str, texts: Sequence[StyledText]) -> list[StyledText]:
        """The texts of the splits classifier ``name`` trains on (its early stopping reads
        the whole dev part)."""
        wanted = self.train_on.get(name)
        return list(texts) if not wanted else [t for t in texts if t.split in set(wanted)]


def _train_checks(
    split: Any,
    checks: Sequence[str],
    pair_field: str,
    folder: Path,
    results: dict[str, Any],
    overwrite: bool,
    progress: bool,
    seed: int,
    common: dict[str, Any],
    plan: ClassifierPlan,
) -> dict[str, str]:
    """Train the HH and AH checks asked for into ``results``; the checks without data, and
    why."""
    from storyeval.learn.style import train_match_classifier

    builders = {"hh": hh_examples, "ah": ah_examples}
    skipped: dict[str, str] = {}
    for check in checks:
        train = builders[check](plan.part(check, split.train), seed=seed)
        dev = builders[check](split.dev, seed=seed + 1)
        if not train or not dev:
            skipped[check] = (
                f"no texts of both styles share a {pair_field!r} value"
                if check == "hh"
                else "no text has a source document (prompt)"
            )
            continue
        results[check] = train_match_classifier(
            train,
            dev,
            folder / check,
            check=check,
            overwrite=overwrite,
            progress=progress,
            **plan.common(check, common),
        )
    return skipped


def _split(
    texts: Sequence[StyledText],
    *,
    test_split: str | None,
    test_fraction: float,
    dev_fraction: float,
    seed: int,
) -> CorpusSplit:
    """Held out by group (:func:`split_corpus`), or, with ``test_split``, the texts of that
    data split (SA) as the test set and the others split into training and dev."""
    if test_split is None:
        return split_corpus(
            texts, test_fraction=test_fraction, dev_fraction=dev_fraction, seed=seed
        )
    test = [t for t in texts if t.split == test_split]
    if not test:
        raise InsufficientDataError(f"no text is in the split {test_split!r}")
    rest = [t for t in texts if t.split != test_split]
    units = sorted({_unit(t) for t in rest})
    story_rng(seed, "classify-eval-dev").shuffle(units)
    dev_units = set(units[: max(1, round(dev_fraction * len(units)))])
    split = CorpusSplit(
        train=[t for t in rest if _unit(t) not in dev_units],
        dev=[t for t in rest if _unit(t) in dev_units],
        test=test,
    )
    for name in ("train", "dev", "test"):
        if len({t.style for t in getattr(split, name)}) < 2:
            raise InsufficientDataError(
                f"the {name} part lacks a style; classifier-based evaluation needs more texts "
                "of each style"
            )
    return split


def train_classifiers(
    stories: Sequence[Story],
    output: str | Path,
    *,
    style_field: str = "system",
    pair_field: str = "pair",
    styles: Sequence[str] | None = None,
    checks: Sequence[str] = CHECKS,
    encoder: str | None = None,
    max_length: int = 128,
    training: TrainingConfig | None = None,
    test_fraction: float = 0.2,
    dev_fraction: float = 0.1,
    overwrite: bool = False,
    progress: bool = True,
    plan: ClassifierPlan | None = None,
    split_field: str | None = None,
    test_split: str = "SA",
) -> dict[str, Any]:
    """Train the main style classifier and the HH and AH checks on a two-style corpus, measure
    them on the held-out groups, and write everything into ``output``.

    ``plan`` gives each classifier its own settings and data splits (``ClassifierPlan.preset
    ("demattei2021")`` is the paper's); with ``split_field`` (the ``split`` of
    :func:`storyeval.analyses.style_alignment.align_corpus`) the texts of ``test_split`` are
    the test set.

    ``output`` receives ``main/``, ``hh/`` and ``ah/`` (model directories with their
    signatures) and ``classify-eval.json``: the styles, the split, the classifiers' table on
    held-out gold data and the compliancy of the held-out aligned texts (the upper bound).
    A check is skipped (and said so) when the corpus has no data for it: HH needs texts of both
    styles sharing a ``pair_field`` value, AH needs source documents (``prompt``).

    Raises
    ------
    InsufficientDataError
        When a split lacks a style or a requested check has no data.
    """
    from storyeval.base.io import write_text_atomic
    from storyeval.learn.style import train_style_classifier
    from storyeval.learn.trainer import TrainingConfig

    unknown = [c for c in checks if c not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check {unknown[0]!r}; choose from {', '.join(CHECKS)}")
    training = training or TrainingConfig()
    plan = plan or ClassifierPlan()
    texts, pair = styled_texts(
        stories, style_field=style_field, pair_field=pair_field, styles=styles,
        split_field=split_field,
    )  # fmt: skip
    split = _split(
        texts,
        test_split=test_split if split_field else None,
        test_fraction=test_fraction,
        dev_fraction=dev_fraction,
        seed=training.seed,
    )
    folder = Path(output)
    data = corpus_hash(list(stories))
    common = {"encoder": encoder, "max_length": max_length, "training": training, "data": data}
    results = {
        "main": train_style_classifier(
            style_examples(plan.part("main", split.train), pair),
            style_examples(split.dev, pair),
            folder / "main",
            labels=pair,
            overwrite=overwrite,
            progress=progress,
            **plan.common("main", common),
        )
    }
    skipped = _train_checks(
        split, checks, pair_field, folder, results, overwrite, progress, training.seed, common,
        plan,
    )  # fmt: skip
    summary: dict[str, Any] = {
        "styles": list(pair),
        "style_field": style_field,
        "pair_field": pair_field,
        "checks": [c for c in checks if c in results],
        "skipped": skipped,
        "plan": {"settings": dict(plan.settings), "train_on": dict(plan.train_on)},
        "seed": training.seed,
        "split": {
            "train": sorted(t.id for t in split.train),
            "dev": sorted(t.id for t in split.dev),
            "test": sorted(t.id for t in split.test),
        },
        "signatures": {name: result.signature.render() for name, result in results.items()},
    }
    write_text_atomic(folder / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    classifiers = Classifiers.load(folder)
    table = classifier_table(classifiers, split.test, seed=training.seed)
    gold = check_transfers(classifiers, split.test, gold_outputs(split.test))
    summary["gold"] = table.to_dict("records")
    summary["upper_bound"] = compliancy_table(gold).to_dict("records")
    write_text_atomic(folder / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class TransferOutput:
    """A system's output for one source text."""

    id: str
    system: str
    source_id: str
    text: str


def transfer_outputs(
    stories: Sequence[Story], sources: Sequence[StyledText], *, source_field: str = "source"
) -> list[TransferOutput]:
    """Outputs read from a story file; each names its source text by ``source_field``.

    Raises
    ------
    StoryevalError
        When an output has no source or names one that is not in the corpus.
    """
    known = {t.id for t in sources}
    outputs = []
    for story in stories:
        source = story.extra.get(source_field)
        if source is None:
            raise StoryevalError(
                f"output {story.id!r} has no {source_field!r} field (the source text's id)"
            )
        if str(source) not in known:
            raise StoryevalError(f"output {story.id!r}: source {source!r} is not in the corpus")
        outputs.append(TransferOutput(story.id, story.system or "(none)", str(source), story.story))
    return outputs


def gold_outputs(texts: Sequence[StyledText]) -> list[TransferOutput]:
    """The aligned counterpart of every text as its gold transfer (system ``(gold)``)."""
    return [
        TransferOutput(f"gold:{source.id}:{target.id}", GOLD_SYSTEM, source.id, target.text)
        for source, target in aligned_pairs(texts)
    ]


def check_transfers(
    classifiers: Classifiers,
    sources: Sequence[StyledText],
    outputs: Sequence[TransferOutput],
    *,
    threshold: float = 0.5,
) -> pd.DataFrame:
    """Every check for every output: one row per output with the style decisions on source and
    output, ``main`` (the decision is reversed), ``target`` (the output is classified as the
    target style), the HH and AH probabilities and decisions, and ``compliant`` (every check
    that applies succeeds). AH does not apply to a source without a document."""
    by_id = {t.id: t for t in sources}
    pair = classifiers.styles
    rows: list[dict[str, Any]] = []
    if not outputs:
        return pd.DataFrame(rows)
    source_texts = [by_id[o.source_id] for o in outputs]
    before = classifiers.main.predict([s.text for s in source_texts])
    after = classifiers.main.predict([o.text for o in outputs])
    hh = (
        classifiers.hh.probabilities(
            [(s.text, o.text) for s, o in zip(source_texts, outputs, strict=True)]
        )
        if classifiers.hh is not None
        else None
    )
    with_document = [i for i, s in enumerate(source_texts) if s.document.strip()]
    ah: dict[int, float] = {}
    if classifiers.ah is not None and with_document:
        found = classifiers.ah.probabilities(
            [(source_texts[i].document, outputs[i].text) for i in with_document]
        )
        ah = dict(zip(with_document, (float(v) for v in found), strict=True))
    for i, (output, source) in enumerate(zip(outputs, source_texts, strict=True)):
        target = pair[1] if source.style == pair[0] else pair[0]
        row: dict[str, Any] = {
            "output_id": output.id,
            "system": output.system,
            "source_id": source.id,
            "direction": f"{source.style}->{target}",
            "source_style": source.style,
            "target_style": target,
            "source_prediction": before[i],
            "output_prediction": after[i],
            "main": before[i] != after[i],
            "target": after[i] == target,
            "hh_probability": float(hh[i]) if hh is not None else math.nan,
            "hh": bool(hh[i] >= threshold) if hh is not None else None,
            "ah_probability": ah.get(i, math.nan),
            "ah": (ah[i] >= threshold) if i in ah else None,
        }
        row["compliant"] = all(row[c] for c in ("main", "hh", "ah") if row[c] is not None)
        rows.append(row)
    return pd.DataFrame(rows)


def _proportion_row(
    system: str, direction: str, measure: str, values: pd.Series, confidence: float
) -> dict[str, Any]:
    from storyeval.base.stats import binomial_test

    known = values.dropna().astype(bool)
    n, successes = len(known), int(known.sum())
    low, high = (
        binomial_test(successes, n, confidence=confidence)[1:] if n else (math.nan, math.nan)
    )
    return {
        "system": system,
        "direction": direction,
        "measure": measure,
        "estimate": successes / n if n else math.nan,
        "ci_low": low,
        "ci_high": high,
        "successes": successes,
        "n": n,
    }


def compliancy_table(items: pd.DataFrame, *, confidence: float = 0.95) -> pd.DataFrame:
    """Per system and direction (and ``all`` directions pooled): the share of outputs passing
    HH, AH, main (decision reversed), target (classified as the target style) and all checks
    at once (``compliancy``), with Clopper-Pearson intervals. Measures without data (a check
    not trained) are left out."""
    rows: list[dict[str, Any]] = []
    if len(items) == 0:
        return pd.DataFrame(rows)
    for system, group in items.groupby("system", sort=False):
        parts = [(str(d), g) for d, g in group.groupby("direction", sort=True)]
        for direction, part in [*parts, (ALL_DIRECTIONS, group)]:
            column_of = {"compliancy": "compliant"}
            for measure in MEASURES:
                values = part[column_of.get(measure, measure)]
                if values.notna().any():
                    rows.append(
                        _proportion_row(str(system), direction, measure, values, confidence)
                    )
    return pd.DataFrame(rows)


def overlap_table(
    outputs: Sequence[TransferOutput], sources: Sequence[StyledText], items: pd.DataFrame
) -> pd.DataFrame:
    """Corpus BLEU (0-100), mean ROUGE-L F and mean BERTScore F1 of each system's outputs
    against their source texts, per direction and pooled."""
    from storyeval import functional

    if not outputs:
        return pd.DataFrame()
    by_id = {t.id: t.text for t in sources}
    hypotheses = [o.text for o in outputs]
    references = [by_id[o.source_id] for o in outputs]
    frame = items[["system", "direction"]].copy()
    frame["rougeL"] = functional.rouge(hypotheses, references).values
    frame["bertscore_f"] = functional.bertscore(hypotheses, references).f1
    rows: list[dict[str, Any]] = []
    for system, group in frame.groupby("system", sort=False):
        parts = [(str(d), g) for d, g in group.groupby("direction", sort=True)]
        for direction, part in [*parts, (ALL_DIRECTIONS, group)]:
            index = list(part.index)
            bleu = functional.bleu([hypotheses[i] for i in index], [references[i] for i in index])
            rows.append(
                {
                    "system": str(system),
                    "direction": direction,
                    "bleu": bleu.corpus,
                    "rougeL": float(part["rougeL"].mean()),
                    "bertscore_f": float(part["bertscore_f"].mean()),
                }
            )
    return pd.DataFrame(rows)


@dataclass
class ClassifyEvalResult:
    """Everything ``classify-eval evaluate`` computes."""

    items: pd.DataFrame
    compliancy: pd.DataFrame
    summary: pd.DataFrame
    classifiers: pd.DataFrame
    signature: Signature
    notes: list[str]


def summary_table(compliancy: pd.DataFrame, overlap: pd.DataFrame) -> pd.DataFrame:
    """The paper's Table 2: one row per system and direction, the check shares and the
    overlap metrics side by side."""
    if len(compliancy) == 0:
        return pd.DataFrame()
    wide = compliancy.pivot_table(
        index=["system", "direction"], columns="measure", values="estimate", sort=False
    ).reset_index()
    wide.columns.name = None
    n = compliancy.groupby(["system", "direction"], sort=False)["n"].max().rename("n").reset_index()
    wide = wide.merge(n, on=["system", "direction"])
    if len(overlap):
        wide = wide.merge(overlap, on=["system", "direction"], how="left")
    order = ["system", "direction", "n", *MEASURES, *OVERLAP_METRICS]
    return wide[[c for c in order if c in wide.columns]]


def evaluate_transfers(
    classifiers: Classifiers,
    corpus: Sequence[Story],
    output_stories: Sequence[Story],
    *,
    source_field: str = "source",
    threshold: float = 0.5,
    confidence: float = 0.95,
    overlap: bool = True,
    gold: bool = True,
) -> ClassifyEvalResult:
    """Check every output, tabulate compliancy per system and direction (with the gold
    counterparts of the same sources as the upper bound when the corpus aligns them), and put
    BLEU, ROUGE-L and BERTScore against the source beside them."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1); got {threshold!r}")
    summary = classifiers.summary
    sources, _ = styled_texts(
        corpus,
        style_field=summary.get("style_field", "system"),
        pair_field=summary.get("pair_field", "pair"),
        styles=classifiers.styles,
    )
    outputs = transfer_outputs(output_stories, sources, source_field=source_field)
    if not outputs:
        raise StoryevalError("there are no outputs to evaluate")
    notes = []
    seen = set(summary.get("split", {}).get("train", [])) | set(
        summary.get("split", {}).get("dev", [])
    )
    trained_on = sum(o.source_id in seen for o in outputs)
    if trained_on:
        message = (
            f"{trained_on} of {len(outputs)} outputs transfer a source the classifiers were "
            "trained on; their checks are optimistic (evaluate on the held-out test split)"
        )
        warnings.warn(message, ClassifyEvalWarning, stacklevel=2)
        notes.append(message)
    if gold:
        used = {o.source_id for o in outputs}
        outputs = [*outputs, *(g for g in gold_outputs(sources) if g.source_id in used)]
    items = check_transfers(classifiers, sources, outputs, threshold=threshold)
    compliancy = compliancy_table(items, confidence=confidence)
    overlaps = overlap_table(outputs, sources, items) if overlap else pd.DataFrame()
    items = items.assign(output_text=[o.text for o in outputs])
    return ClassifyEvalResult(
        items,
        compliancy,
        summary_table(compliancy, overlaps),
        pd.DataFrame(summary.get("gold", [])),
        classifiers.signature(threshold=threshold),
        notes,
    )


def write_classify_eval(result: ClassifyEvalResult, directory: str | Path) -> dict[str, Path]:
    """Write ``items.csv``, ``compliancy.csv``, ``summary.csv``, ``classifiers.csv`` and
    ``classify-eval.md`` into ``directory`` (each atomically)."""
    from storyeval.base.io import claim_output_directory, write_table, write_text_atomic

    folder = claim_output_directory(directory, "classifier evaluation")
    written = {
        name: write_table(folder / f"{name}.csv", getattr(result, name))
        for name in ("items", "compliancy", "summary", "classifiers")
    }
    written["report"] = folder / "classify-eval.md"
    write_text_atomic(written["report"], classify_eval_markdown(result))
    return written


def classify_eval_markdown(result: ClassifyEvalResult) -> str:
    """The report: the summary table (the paper's Table 2), the classifiers on gold data
    (Table 1), the intervals, notes and the signature."""
    from storyeval.base.markdown import Document

    doc = Document()
    doc.heading(1, "Classifier-based evaluation of style transfer")
    doc.paragraph(
        "main: the style classifier's decision on the output is reversed relative to the "
        "source; target: the output is classified as the target style; hh: the output matches "
        "the original's content; ah: the output fits the source document; compliancy: every "
        f"check at once. `{GOLD_SYSTEM}` is the aligned human text of the other style (the "
        "upper bound). BLEU (0-100), ROUGE-L and BERTScore are against the source text."
    )
    doc.heading(2, "Summary")
    doc.frame(result.summary, list(result.summary.columns))
    doc.heading(2, "Shares with intervals")
    doc.frame(
        result.compliancy, ["system", "direction", "measure", "estimate", "ci_low", "ci_high", "n"]
    )
    if len(result.classifiers):
        doc.heading(2, "The classifiers on held-out gold data")
        doc.frame(
            result.classifiers, ["classifier", "class", "precision", "recall", "f1", "support"]
        )
    if result.notes:
        doc.heading(2, "Notes")
        doc.lines([f"- {note}" for note in result.notes])
    doc.paragraph(f"Signature: `{result.signature.render()}`")
    return doc.render()
