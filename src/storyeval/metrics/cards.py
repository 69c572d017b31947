"""Metric cards: what a metric measures, how to read it, values from its papers, its
limitations, and the facts of its registry entry, as one Markdown page.

The narrative of a card is written beside the metric's definition
(``@metric(..., card=MetricCard(...))``); the facts (inputs, direction, range, level,
statistics, options, the default suite) come from the registry entry, so a card cannot drift
from the code. ``storyeval metrics --card NAME`` prints one; ``make cards`` writes them all
to ``docs/metrics/``.
"""

from __future__ import annotations

from dataclasses import dataclass

from storyeval.metrics.registry import MetricSpec


@dataclass(frozen=True)
class MetricCard:
    """The hand-written part of a metric's card.

    Attributes
    ----------
    measures : str
        What the metric computes, and how.
    read : str
        How to read a value: its scale and what differences mean.
    papers : str
        Values reported in the source papers (or why there are none).
    limits : str
        Its limitations.
    refs : str
        References, by author and year.
    notes : str
        Further notes on reading it (optional).
    """

    measures: str
    read: str
    papers: str
    limits: str
    refs: str
    notes: str = ""


# --------------------------------------------------------------------------- shared text
# Sources and limitations several metrics share.

BLEU_LIMITS = (
    "BLEU rewards exact n-gram overlap with one human continuation, while an open-ended prompt "
    "has countless good continuations: a creative story that shares few words with the "
    "reference scores near zero. Sentence BLEU is noisy for single items; compare systems "
    "with corpus BLEU and its bootstrap interval. Scores depend on the tokenizer (recorded "
    "in the signature)."
)
ROUGE_LIMITS = (
    "Surface overlap with one reference; insensitive to meaning-preserving paraphrase and, for "
    "ROUGE-1/2, to order. Clark (2021, Table 5.1) shows ROUGE-L dropping 20% when clauses of "
    "a good summary are merely reordered. Values are on a 0-1 scale (the thesis multiplies by "
    "100)."
)
BERTSCORE_LIMITS = (
    "Raw values crowd into a narrow band that depends on the model and layer (cosines of "
    "contextual embeddings are rarely near 0), so compare numbers only under the same "
    "signature; rescaling spreads them but needs a baseline. The offline MiniLM is a sentence "
    "embedding model, not the roberta-large the BERTScore authors recommend for English; its "
    "default layer (4 of 6) was chosen by analogy with bert-score's table, not tuned. Texts "
    "longer than 512 tokens are encoded in overlapping windows (a warning says so)."
)
BASELINE_NOTE = (
    "Rescaling (`rescale=true`) needs a baseline `b` (the mean score of unrelated pairs): "
    "bert-score ships baseline files for hub models (used automatically when the package is "
    "installed); for the offline MiniLM storyeval ships one computed by "
    "`scripts/bertscore_baseline.py` from 20,000 random pairs of sentences of different "
    "stories in `examples/human.jsonl` (a small single-domain sample, not bert-score's 1M "
    "Common Crawl pairs: rescaled values are comparable only with other storyeval runs); any "
    "other baseline can be given as a file (`LAYER,P,R,F` rows) or as three numbers `P,R,F`."
)
MOVER_LIMITS = (
    "Needs a reference; bag-of-embeddings metrics ignore word order within a sentence (SMS and "
    "S+WMS see it only through sentence boundaries); the offline GloVe is 6B-token 50-d, "
    "smaller than the 300-d Common Crawl vectors of the thesis, so absolute values differ "
    "from the thesis'. Words without a vector are dropped silently by design (as in the "
    "original code), which can make very short or unusual texts undefined (NaN). Similarity "
    "is `exp(-distance)`, so values are small and compress at the top; only their order is "
    "meaningful."
)
DISTINCT_LIMITS = (
    "Distinct-n of one story depends strongly on its length (longer texts repeat more "
    "function words): compare systems whose stories have similar lengths. It measures lexical "
    "variety, not quality; random word salad scores 1.0."
)
CONCRETE_LIMITS = (
    "Depends on the POS tagger (the offline spaCy small English model) and on the rating "
    "list's coverage (words without a rating are ignored); a descriptive measure of style, "
    "neither higher nor lower is better."
)
EDIT_LIMITS = (
    "Exact-match measures: a writer's paraphrase of a suggestion counts as a complete "
    "rewrite. They need both texts of each pair in the record (`original` option names the "
    "field with the unedited text)."
)
CLARK = "Clark (2021), *Text Generation and Evaluation for Human-Machine Collaborative Writing*"
CF = "Callan & Foster (2023), *Expert Systems* 40(6) e13292"


# --------------------------------------------------------------------------- rendering


def _inputs_text(spec: MetricSpec) -> str:
    parts = ["`story`"]
    if spec.needs_prompt:
        parts.append("`prompt` (non-empty)")
    if spec.needs_reference:
        parts.append("`reference` (a string or a list: the best reference counts)")
    for key in spec.field_options:
        parts.append(f"the field named by `{spec.name}.{key}`")
    if spec.level == "system":
        parts.append("`system` (stories are compared with the other stories of their system)")
    if spec.level == "corpus":
        parts.append("`system` (each system is compared with the reference system)")
    model = {
        "encoder": "an encoder (default: the offline all-MiniLM-L6-v2; `model` option)",
        "causal-lm": "a causal LM (default: the offline SmolLM2-135M; `model` option)",
        "glove": "word vectors (default: the offline GloVe 6B 50d; `glove` option) or an encoder",
        "spacy": "a spaCy pipeline (default: the offline en_core_web_sm) and the Brysbaert ratings",
        "nsp": "a trained NSP head (`nsp.model`: a BERT with its NSP head, or a directory "
        "from `storyeval train nsp`; none ships offline)",
        "checkpoint": "a checkpoint directory (`model` option)",
    }.get(spec.model or "", "no model")
    return f"Fields: {', '.join(parts)}. Model: {model}."


def _per_system_text(spec: MetricSpec, corpus: str) -> str:
    if spec.level == "corpus":
        against = ", ".join(f"`{s.name}`" for s in spec.system_statistics)
        return f"{against} of each system against `reference_system` (no per-story value)"
    return f"`{spec.item_statistic}` (with sd and bootstrap CI), corpus: {corpus}"


def _option_rows(spec: MetricSpec) -> list[str]:
    """The rows of the card's options table."""
    rows = []
    for option in spec.options:
        kind = (
            " \\| ".join(str(c) for c in option.choices) if option.choices else option.type.__name__
        )
        default = (
            "required"
            if option.required
            else (
                "auto"
                if option.default is None
                else str(option.default).lower()
                if isinstance(option.default, bool)
                else str(option.default)
            )
        )
        rows.append(f"| `{spec.name}.{option.name}` | {kind} | {default} | {option.help} |")
    if not spec.options:
        rows.append("| (none) | | | |")
    return rows


def render_card(spec: MetricSpec) -> str:
    """The card of a metric (Markdown): the facts of its registry entry (inputs, direction,
    range, level, statistics, options, the default suite) and the narrative of its
    :class:`MetricCard`.

    Raises
    ------
    ValueError
        When the metric has no card narrative.
    """
    card = spec.card
    if not isinstance(card, MetricCard):
        raise ValueError(f"metric {spec.name} has no card narrative (card=MetricCard(...))")
    corpus = ", ".join(f"`{c.name}`" for c in spec.corpus) or "none"
    ok, why = spec.runnable_offline()
    suite = "yes" if spec.default and ok else f"no ({why or 'ask for it by name'})"
    lines = [
        f"# {spec.name}",
        "",
        f"{spec.description}.",
        "",
        "## What it measures",
        "",
        card.measures,
        "",
        "## Inputs",
        "",
        _inputs_text(spec),
        "",
        "## Range and direction",
        "",
        "| fact | value |",
        "|---|---|",
        f"| direction | {spec.direction} |",
        f"| range | {spec.range_text} |",
        f"| level | {spec.level} |",
        f"| per-system statistics | {_per_system_text(spec, corpus)} |",
        f"| families (for `--option FAMILY.KEY=...`) | {', '.join(f'`{f}`' for f in spec.families)} |",
        f"| default suite | {suite} |",
        "",
        "## Options",
        "",
        "| option | type | default | meaning |",
        "|---|---|---|---|",
    ]
    lines += _option_rows(spec)
    lines += [
        "",
        "## How to read it",
        "",
        card.read,
    ]
    if card.notes:
        lines += ["", card.notes]
    lines += [
        "",
        "## Values from the source papers",
        "",
        card.papers,
        "",
        "## Limitations",
        "",
        card.limits,
        "",
        "## Example",
        "",
        "```bash",
        f"storyeval score examples/stories.jsonl --metrics {spec.name} --skip-missing"
        + "".join(f" -O {spec.name}.{o.name}=<{o.name}>" for o in spec.options if o.required)
        + f" -o out/{spec.name}.jsonl",
        "```",
        "",
        "## References",
        "",
        card.refs,
        "",
    ]
    return "\n".join(lines)
