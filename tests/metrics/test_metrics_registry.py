"""The metric registry: metadata, option parsing and validation, signatures, extensibility,
metric cards."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import pytest

from storyeval.base.signature import Signature
from storyeval.corpus import Story, prompt_id
from storyeval.metrics import (
    MetricOption,
    OptionError,
    UnknownMetricError,
    all_metrics,
    available_metrics,
    default_suite,
    families,
    get_metric,
    parse_option_assignments,
    resolve_options,
    score_stories,
    unregister_metric,
)
from storyeval.metrics.function import Opt, Scores, Texts, metric

DOCS = Path(__file__).resolve().parent.parent.parent / "docs" / "metrics"

ISSUE_METRICS = {
    "bleu", "bleu1", "rouge1", "rouge2", "rougeL", "bertscore_p", "bertscore_r", "bertscore_f",
    "moverscore", "wms", "sms", "swms", "perplexity", "bertscore_prompt", "bertscore_prev",
    "nsp_prompt", "nsp_prev", "embedding_coherence", "distinct1", "distinct2", "distinct3",
    "repeated_ngram_rate", "repeated_sentence_rate", "sentence_length", "concreteness_noun",
    "concreteness_verb", "self_bleu", "levenshtein", "jaccard", "user",
}  # fmt: skip


def test_every_metric_the_issue_names_is_registered():
    assert set(available_metrics()) >= ISSUE_METRICS


@pytest.mark.parametrize("spec", all_metrics(), ids=lambda s: s.name)
def test_metadata_is_complete_and_defaults_validate(spec):
    assert spec.description and spec.level in ("item", "system", "corpus")
    assert spec.higher_is_better in (True, False, None)
    low, high = spec.value_range
    assert low is None or high is None or low < high
    for option in spec.options:
        if not option.required:  # every default passes its own validation
            assert option.parse(option.default) == option.default
    if spec.needs_reference:
        assert "reference" in spec.inputs
    assert spec.families, f"{spec.name} belongs to no family"


def test_unknown_metric_names_the_choices():
    with pytest.raises(UnknownMetricError, match=r"must be one of .*bleu"):
        get_metric("blue")


def test_family_option_applies_to_every_member_that_declares_it():
    resolved = resolve_options(
        ["bertscore_f", "bertscore_prompt", "bleu"], {"bertscore.layer": "3"}
    )
    assert resolved["bertscore_f"]["layer"] == 3
    assert resolved["bertscore_prompt"]["layer"] == 3
    assert "layer" not in resolved["bleu"]


def test_metric_option_overrides_family_option_whatever_the_order():
    for options in (
        {"bertscore_f.layer": "2", "bertscore.layer": "5"},
        {"bertscore.layer": "5", "bertscore_f.layer": "2"},
    ):
        resolved = resolve_options(["bertscore_f", "bertscore_p"], options)
        assert resolved["bertscore_f"]["layer"] == 2
        assert resolved["bertscore_p"]["layer"] == 5


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bertscore.layre": "4"}, r"unknown option 'bertscore.layre'.*layer"),
        ({"bleu.model": "x"}, r"unknown option 'bleu.model'"),
        ({"nosuch.key": "1"}, r"neither a metric nor a family"),
        ({"bertscore.layer": "four"}, r"must be an integer"),
        ({"bleu.tokenize": "klingon"}, r"must be one of 13a"),
        ({"bleu.lowercase": "maybe"}, r"must be true or false"),
        ({"bleu": "1"}, r"NAME.KEY"),
    ],
)
def test_bad_options_are_errors_not_ignored(options, message):
    with pytest.raises(OptionError, match=message):
        resolve_options(["bleu", "bertscore_f"], options)


def test_option_assignment_parsing():
    assert parse_option_assignments(["perplexity.model=/a=b"]) == {"perplexity.model": "/a=b"}
    with pytest.raises(OptionError, match=r"NAME\.KEY=VALUE"):
        parse_option_assignments(["bertscore.layer"])
    with pytest.raises(OptionError, match=r"NAME\.KEY=VALUE"):
        parse_option_assignments(["layer=4"])


def test_boolean_and_none_option_values():
    option = MetricOption("flag", bool, False, "h")
    assert [option.parse(v) for v in ("true", "YES", "1", "off", False)] == [
        True,
        True,
        True,
        False,
        False,
    ]
    layer = MetricOption("layer", int, None, "h")
    assert layer.parse("auto") is None and layer.parse("-1") == -1
    with pytest.raises(OptionError):
        MetricOption("n", int, 1, "h", minimum=1).parse("0")


def test_signature_holds_model_identity_options_and_runtime_fields():
    spec = get_metric("bertscore_f")
    options = resolve_options(["bertscore_f"], {"bertscore.idf": "yes"})["bertscore_f"]
    signature = spec.signature(options, {"model": "enc@123"}, {"layer": 4}, omit=("baseline",))
    text = signature.render()
    assert text.startswith("bertscore_f|model:enc@123|layer:4|idf:yes|rescale:no")
    assert "baseline" not in text and "batch_tokens" not in text  # omitted / not in signature
    assert Signature.parse(text).fields["idf"] == "yes"


def test_prompt_id_is_the_field_or_a_stable_hash_of_the_prompt():
    a = Story("a", "A  dark night.", "x")
    b = Story("b", "A dark night.", "y")
    c = Story("c", "Another prompt.", "z")
    assert prompt_id(a) == prompt_id(b) != prompt_id(c)
    assert re.fullmatch(r"p[0-9a-f]{12}", prompt_id(a))
    assert prompt_id(Story("d", "", "w", extra={"prompt_id": "s007"})) == "s007"
    assert prompt_id(Story("e", "  ", "w")) is None  # no prompt: no prompt id


def test_another_package_can_register_a_metric_with_a_required_checkpoint_option(tmp_path):
    """What the learned-metrics engineer does for `union`: a metric needing a checkpoint
    directory given by an option; it is listed, stays out of the default suite, refuses to run
    without the option, and its option and model identity reach the signature."""
    (tmp_path / "weights.bin").write_bytes(b"\x00" * 16)

    def toy_learned(
        texts: Texts,
        *,
        model: Annotated[str | None, Opt("checkpoint directory", required=True)] = None,
    ) -> Scores:
        size = (Path(str(model)) / "weights.bin").stat().st_size
        return Scores([len(t) / size for t in texts], models={"model": f"toy@{size}"})

    metric(
        "toy_learned",
        description="A toy learned metric: story length over a checkpoint constant.",
        families=("learned",),
        model="checkpoint",
        value_range=(0.0, None),
        default=False,
    )(toy_learned)

    try:
        assert "toy_learned" in available_metrics() and "learned" in families()
        stories = [Story("a", "", "abcd", system="x"), Story("b", "", "abcdefgh", system="x")]
        chosen, skipped = default_suite(stories)
        assert "toy_learned" not in chosen and "toy_learned" in skipped
        with pytest.raises(OptionError, match=r"needs option toy_learned\.model"):
            score_stories(stories, "toy_learned")
        run = score_stories(
            stories, "toy_learned", options={"learned.model": str(tmp_path)}, bootstrap=0
        )
        assert [s.value for s in run.scores] == [0.25, 0.5]
        assert run.scores[0].signature.startswith("toy_learned|model:toy@16")
        with pytest.raises(ValueError, match="already registered"):
            metric("bleu", description="clash")(toy_learned)
    finally:
        unregister_metric("toy_learned")
    assert "toy_learned" not in available_metrics()


def test_default_suite_depends_on_the_fields_present():
    without = [Story("a", "", "It rained. Then it stopped.", system="x")]
    chosen, skipped = default_suite(without)
    assert "bleu" not in chosen and skipped["bleu"] == "no story has a reference"
    assert "bertscore_prompt" not in chosen and "prompt" in skipped["bertscore_prompt"]
    assert "distinct1" in chosen and "perplexity" in chosen
    assert "nsp_prompt" in skipped and "NSP" in skipped["nsp_prompt"]
    assert "user" in skipped and "original" in skipped["user"]


REQUIRED_SECTIONS = (
    "## What it measures",
    "## Inputs",
    "## Range and direction",
    "## How to read it",
    "## Values from the source papers",
    "## Limitations",
)


@pytest.mark.parametrize("spec", all_metrics(), ids=lambda s: s.name)
def test_every_registered_metric_has_a_card(spec):
    card = DOCS / f"{spec.name}.md"
    assert card.is_file(), f"missing metric card {card}"
    text = card.read_text(encoding="utf-8")
    assert text.startswith(f"# {spec.name}")
    for section in REQUIRED_SECTIONS:
        assert section in text, f"{card.name} lacks '{section}'"
    # the card's registry block agrees with the registry
    assert f"| direction | {spec.direction} |" in text
    assert f"| range | {spec.range_text} |" in text
    for option in spec.options:
        assert f"`{spec.name}.{option.name}`" in text or f"`{option.name}`" in text


def test_generated_cards_are_up_to_date():
    """docs/metrics is generated from the registry by scripts/metric_cards.py (`make cards`):
    a registry change (option, range, direction) must be followed by regenerating the cards."""
    import subprocess
    import sys

    script = DOCS.parent.parent / "scripts" / "metric_cards.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_metric_carries_its_card_and_the_cli_prints_it():
    """The card's narrative is written beside the metric's definition (no second list to
    keep in step), and `storyeval metrics --card NAME` prints the same card as the docs."""
    from typer.testing import CliRunner

    from storyeval.cli import app
    from storyeval.metrics.cards import MetricCard, render_card

    specs = all_metrics()
    assert all(isinstance(spec.card, MetricCard) for spec in specs), [
        spec.name for spec in specs if not isinstance(spec.card, MetricCard)
    ]
    result = CliRunner().invoke(app, ["metrics", "--card", "bleu1"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == render_card(get_metric("bleu1")).strip()
    assert "Callan & Foster" in result.output
    wrong = CliRunner().invoke(app, ["metrics", "--card", "bleu5"])
    assert wrong.exit_code == 2 and "unknown metric 'bleu5'" in wrong.output
