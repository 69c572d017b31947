"""Properties every registered metric must have (after scikit-learn's test_common): values
independent of the order of the stories, a single story works, values stay in the declared
range, missing inputs raise a clear error naming the metric and the line (or are skipped and
counted when asked), and the score records carry system and prompt_id."""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storyeval import functional as F
from storyeval.base.errors import MissingInputError, StoryevalError
from storyeval.corpus import Story
from storyeval.metrics import all_metrics, available_metrics, get_metric, score_stories
from storyeval.metrics.context import ScoringContext, UndefinedScoreWarning
from storyeval.metrics.function import (
    INJECTED,
    INPUTS,
    RESOURCES,
    Scores,
    metric,
    metric_function,
)
from storyeval.metrics.registry import OptionError

EDIT_FIELD = "suggestion"


def _options(checkpoints, spec=None):
    """Options for every metric: trained checkpoints (NSP head, UNION) and the edit field."""
    # two stories a system: a phrase shared by both counts as repeated; k-NN supports from
    # the nearest neighbour (a handful of stories a system)
    options = {**checkpoints, "edits.original": EDIT_FIELD, "prose.min_stories": "2"}
    options["precision_recall.k"] = "1"
    options["functional_diversity.within"] = "system"  # one story a system and prompt
    options["plot_reuse.within"] = "system"
    if spec is None:
        return options
    return {key: value for key, value in options.items() if key.split(".")[0] in spec.families}


def _with_original(stories):
    """Give every story an 'original' text (its first sentence), for the edit metrics, and a
    paragraph break after that sentence (for the paragraph metrics)."""
    result = []
    for story in stories:
        first, _, rest = story.story.partition(". ")
        extra = {**story.extra, EDIT_FIELD: first + "."}
        text = f"{first}.\n\n{rest}" if rest else story.story  # two paragraphs
        result.append(Story(story.id, story.prompt, text, story.reference, story.system, extra))
    return result


@pytest.fixture(scope="module")
def context():
    return ScoringContext()


@pytest.fixture(scope="module")
def forward_and_reversed(short_stories, checkpoints, context):
    stories = _with_original(short_stories)
    names = [spec.name for spec in all_metrics()]
    options = _options(checkpoints)
    forward = score_stories(
        stories, names, options=options, missing="skip", bootstrap=0, context=context
    )
    backward = score_stories(
        stories[::-1], names, options=options, missing="skip", bootstrap=0, context=context
    )
    return stories, forward, backward


@pytest.mark.slow
@pytest.mark.parametrize("spec", all_metrics(), ids=lambda s: s.name)
def test_order_invariance_and_declared_range(spec, forward_and_reversed):
    _, forward, backward = forward_and_reversed
    a = {s.item_id: s.value for s in forward.scores if s.metric == spec.name}
    b = {s.item_id: s.value for s in backward.scores if s.metric == spec.name}
    if spec.level == "corpus":  # no value per story: each system's value against the reference
        rows = forward.systems[forward.systems.metric == spec.name]
        a = {(r.system, r.statistic): r.estimate for r in rows.itertuples()}
        rows = backward.systems[backward.systems.metric == spec.name]
        b = {(r.system, r.statistic): r.estimate for r in rows.itertuples()}
    assert a.keys() == b.keys() and a
    for key in a:
        assert (math.isnan(a[key]) and math.isnan(b[key])) or a[key] == pytest.approx(
            b[key], rel=1e-6, abs=1e-9
        )
    low, high = spec.value_range
    finite = [v for v in a.values() if math.isfinite(v)]
    assert finite, f"{spec.name} gave no defined value on ordinary stories"
    assert all(
        (low is None or v >= low - 1e-9) and (high is None or v <= high + 1e-9) for v in finite
    )


@pytest.mark.slow
def test_records_carry_system_prompt_id_and_one_signature_per_metric(forward_and_reversed):
    stories, forward, _ = forward_and_reversed
    by_id = {s.id: s for s in stories}
    for score in forward.scores:
        story = by_id[score.item_id]
        assert score.extra["system"] == story.system
        assert score.extra["prompt_id"] == story.extra["prompt_id"]
    signatures = {}
    for score in forward.scores:
        signatures.setdefault(score.metric, set()).add(score.signature)
    assert all(len(s) == 1 for s in signatures.values())


@pytest.mark.slow
@pytest.mark.parametrize("spec", all_metrics(), ids=lambda s: s.name)
def test_single_story(spec, short_stories, checkpoints, context):
    story = _with_original([s for s in short_stories if s.references][:1])
    options = _options(checkpoints, spec)
    if spec.name == "moverscore":  # idf over one document weighs every token 0: undefined, said so
        with pytest.warns(UndefinedScoreWarning, match="idf needs at least two"):
            run = score_stories(story, spec.name, options=options, bootstrap=10, context=context)
        assert math.isnan(run.scores[0].value) and run.metrics["moverscore"].notes
        options["moverscore.idf"] = "false"
    if spec.level == "corpus" or "reference_system" in spec.option_map:
        # one machine story: no reference system to compare it with
        with pytest.raises(StoryevalError, match="reference"):
            score_stories(story, spec.name, options=options, bootstrap=10, context=context)
        return
    run = score_stories(story, spec.name, options=options, bootstrap=10, context=context)
    assert len(run.scores) == 1
    if spec.level == "system":  # self-BLEU of a story alone in its system is undefined
        assert math.isnan(run.scores[0].value)
    else:
        assert math.isfinite(run.scores[0].value)
    assert len(run.systems) >= 1


def _lacking(spec):
    if spec.needs_reference:
        return "reference", lambda s: Story(s.id, s.prompt, s.story, None, s.system, dict(s.extra))
    if spec.needs_prompt:
        return "prompt", lambda s: Story(s.id, "", s.story, s.reference, s.system, dict(s.extra))
    if spec.field_options:
        return EDIT_FIELD, lambda s: Story(
            s.id,
            s.prompt,
            s.story,
            s.reference,
            s.system,
            {k: v for k, v in s.extra.items() if k != EDIT_FIELD},
        )
    return None, None


NEEDY = [spec for spec in all_metrics() if _lacking(spec)[0] is not None]


@pytest.mark.parametrize("spec", NEEDY, ids=lambda s: s.name)
def test_missing_inputs_error_names_metric_and_line_or_are_skipped_and_counted(
    spec, short_stories, checkpoints, context
):
    field, strip = _lacking(spec)
    stories = _with_original([s for s in short_stories if s.references][:3])
    stories[1] = strip(stories[1])
    with pytest.raises(MissingInputError) as caught:
        score_stories(
            stories, spec.name, options=_options(checkpoints, spec), source="stories.jsonl",
            lines={stories[1].id: 7}, context=context,
        )  # fmt: skip
    message = str(caught.value)
    assert spec.name in message and "stories.jsonl:7" in message and field in message
    if spec.name in ("bleu", "distinct1", "user", "bertscore_prompt"):  # the skip path, cheaply
        run = score_stories(
            stories,
            spec.name,
            options=_options(checkpoints, spec),
            missing="skip",
            bootstrap=0,
            context=context,
        )
        assert len(run.scores) == 2 and run.metrics[spec.name].n_missing == 1
        items = run.systems[run.systems["statistic"] == spec.item_statistic]
        assert items["n_missing"].sum() == 1


def test_bootstrap_is_seeded_and_intervals_bracket_the_mean(example_stories):
    stories = [s for s in example_stories if s.references][:30]
    a = score_stories(stories, "bleu,distinct2", bootstrap=200, seed=3)
    b = score_stories(stories, "bleu,distinct2", bootstrap=200, seed=3)
    c = score_stories(stories, "bleu,distinct2", bootstrap=200, seed=4)
    assert a.systems.equals(b.systems)
    assert not np.allclose(a.systems["ci_low"], c.systems["ci_low"])
    for row in a.systems.itertuples():
        assert row.ci_low <= row.estimate <= row.ci_high
        assert "seed:3" in row.signature and "bootstrap:200" in row.signature


# --------------------------------------------------------------------------- one number three ways
# Every registered metric gives one number three ways: its typed function, ``storyeval score``
# (the pipeline) and ``F.metric(name)``: equal values and equal signatures, and every option a
# function declares changes what it computes or is refused. Before 0.9.0 they drifted apart:
# ``F.METRICS["mauve_star"]`` signed its result ``mauve``, ``F.METRICS["text_recall"]`` signed
# ``text_precision``, ``F.bertscore`` signed ``bertscore`` where the score file says
# ``bertscore_f``, and twelve functions declared options their body never read (MAUVE's feature
# function 9 of 19, ``batch_tokens`` in seven, ``original`` in the three edit metrics): a user
# who set one got neither an effect nor an error.


def test_one_list_of_metrics() -> None:
    """The registry is the one list: ``F.METRICS`` is derived from it, each entry holds its
    typed function, registered under its own name (so it signs its own name)."""
    names = available_metrics()
    assert sorted(F.METRICS) == sorted(names)
    for name in names:
        spec = get_metric(name)
        assert F.METRICS[name] is metric_function(name) is spec.function
        assert metric_function(name).__metric__.name == name  # type: ignore[attr-defined]
        assert metric_function(name).__name__ in (
            name,
            f"{name}_scores",
            f"{name}_similarity",
            f"{name}_distance",
        )


FAMILIES = {
    ("bertscore_p", "bertscore_r", "bertscore_f"): "component",
    ("wms", "sms", "swms"): "kind",
    ("rouge1", "rouge2", "rougeL"): "kind",
    ("distinct1", "distinct2", "distinct3"): "n",
    ("concreteness_noun", "concreteness_verb"): "pos",
    ("bertscore_prompt", "bertscore_prev"): "mode",
    ("nsp_prompt", "nsp_prev"): "mode",
    ("bleu", "bleu1"): None,
    ("mauve", "mauve_star"): None,
}


@pytest.mark.parametrize("members", list(FAMILIES), ids=lambda m: "-".join(m))
def test_a_family_is_one_function_registered_under_several_names(members) -> None:
    """Each member wraps the same function; what tells them apart is a fixed parameter (no
    option of theirs) or another default, and each signs its own name."""
    functions = [metric_function(name) for name in members]
    assert len({f.__wrapped__ for f in functions}) == 1  # type: ignore[attr-defined]
    schemas = [[o.name for o in get_metric(name).options] for name in members]
    assert all(schema == schemas[0] for schema in schemas)
    fixed = FAMILIES[members]
    if fixed is not None:
        assert fixed not in schemas[0]
        assert [f.__metric__.fixed[fixed] for f in functions]  # type: ignore[attr-defined]
        assert len({f.__metric__.fixed[fixed] for f in functions}) == len(members)  # type: ignore[attr-defined]
        with pytest.raises(OptionError, match=f"unknown option '{fixed}'"):
            functions[0](["a b c"], ["a b c"], **{fixed: "x"})


def test_bleu1_is_bleu_with_another_default() -> None:
    texts, references = ["the cat sat on the mat"], ["the cat sat on a mat"]
    one = F.bleu1(texts, references)
    assert one.values.tolist() == F.bleu(texts, references, max_order=1).values.tolist()
    assert one.signature.name == "bleu1" and one.signature.fields["max_order"] == 1
    assert get_metric("bleu1").defaults()["max_order"] == 1
    assert get_metric("bleu").defaults()["max_order"] == 4


def test_a_metric_function_is_written_the_one_way() -> None:
    """The texts scored are ``texts``; the scoring context is injected, never optional."""
    with pytest.raises(TypeError, match="first parameter must be `texts`"):

        @metric("toy_bad", description="d")
        def toy_bad(prompts: list[str]) -> Scores:
            return Scores([0.0] * len(prompts))

    with pytest.raises(TypeError, match="scoring: ScoringContext = INJECTED"):

        @metric("toy_bad", description="d")
        def toy_bad2(texts: list[str], *, scoring: ScoringContext | None = None) -> Scores:
            return Scores([0.0] * len(texts))

    assert "toy_bad" not in available_metrics()
    assert INJECTED is not None
    with pytest.raises(AttributeError, match="without a context"):
        INJECTED.sentences("a", "pysbd")


def _body_reads(function: Any) -> set[str]:
    source = textwrap.dedent(inspect.getsource(inspect.unwrap(function)))
    tree = ast.parse(source).body[0]
    assert isinstance(tree, ast.FunctionDef)
    return {node.id for stmt in tree.body for node in ast.walk(stmt) if isinstance(node, ast.Name)}


@pytest.mark.parametrize("name", available_metrics())
def test_every_declared_option_is_read_by_the_function(name: str) -> None:
    """An option in the signature that the body never reads would be set without effect; the
    registry's options that the per-text function has no use for (the per-system statistics'
    and the field naming the originals) are refused by it with a clear error."""
    function = metric_function(name)
    parameters = inspect.signature(function).parameters
    options = [p for p in parameters if p not in INPUTS and p not in RESOURCES]
    unread = [p for p in options if p not in _body_reads(function)]
    assert not unread, f"{name} declares options it never reads: {unread}"
    for option in get_metric(name).options:
        if option.name not in parameters:
            with pytest.raises(OptionError, match=f"option '{option.name}' is not an option"):
                function(["a text."], **{option.name: option.default})
    with pytest.raises(OptionError, match="unknown option 'no_such_option'"):
        function(["a text."], no_such_option=1)


def _inputs(name: str, stories: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """The function's positional inputs read from the stories as the pipeline reads them,
    and the same as ``F.metric`` keywords."""
    described = metric_function(name).__metric__  # type: ignore[attr-defined]
    from storyeval.metrics.function import story_inputs

    options = {"original": "suggestion"}
    positional = [story_inputs(stories, key, options) for key in described.inputs]
    keywords = {key: value for key, value in zip(described.inputs[1:], positional[1:], strict=True)}
    return positional, keywords


def _function_options(name: str, checkpoints: dict[str, str]) -> dict[str, Any]:
    """The options the properties run scored with, as keywords of the typed function."""
    spec = get_metric(name)
    parameters = inspect.signature(metric_function(name)).parameters
    chosen = {}
    for key, value in _options(checkpoints).items():
        prefix, field = key.split(".", 1)
        if prefix != name and prefix not in spec.families:
            continue
        if field in parameters and field in spec.option_map:
            chosen[field] = spec.option_map[field].parse(value)
    return chosen


@pytest.mark.slow
@pytest.mark.parametrize("name", available_metrics())
def test_function_score_and_f_metric_agree(
    name: str, forward_and_reversed: Any, checkpoints: dict[str, str]
) -> None:
    stories, run, _ = forward_and_reversed
    spec = get_metric(name)
    if spec.needs_reference:
        stories = [s for s in stories if s.references]
    positional, keywords = _inputs(name, stories)
    options = _function_options(name, checkpoints)
    direct = metric_function(name)(*positional, **options)
    by_name = F.metric(name, positional[0], keywords.pop("references", None), **keywords, **options)
    signature = run.metrics[name].signature
    parameters = inspect.signature(metric_function(name)).parameters
    # the per-system statistics' options (k, seeds, ...) are the run's, not the function's
    statistic = [o.name for o in spec.options if o.name not in parameters]
    expected = signature.without(*statistic).render()
    assert direct.signature.without(*statistic).render() == expected
    assert by_name.signature.without(*statistic).render() == expected
    for path in checkpoints.values():  # models are signed by their content, never their path
        assert str(Path(path).parent) not in expected
    if spec.level == "corpus":  # no value per story: the per-system table has them
        assert np.isnan(direct.values).all()
        return
    values = {s.item_id: s.value for s in run.scores if s.metric == name}
    wanted = np.array([values.get(s.id, math.nan) for s in stories])
    np.testing.assert_allclose(direct.values, wanted, rtol=1e-5, atol=1e-9, equal_nan=True)
    np.testing.assert_allclose(by_name.values, wanted, rtol=1e-5, atol=1e-9, equal_nan=True)


@pytest.mark.slow
def test_corpus_level_functions_give_the_per_system_values(forward_and_reversed: Any) -> None:
    """``F.mauve`` and ``F.precision_recall`` on one system's stories and people's give the
    values and settings the per-system table holds for ``mauve``, ``mauve_star``,
    ``text_precision`` and ``text_recall``."""
    stories, run, _ = forward_and_reversed
    people = [s.story for s in stories if s.system == "human"]
    system = sorted({s.system for s in stories} - {"human"})[0]
    mine = [s.story for s in stories if s.system == system]
    table = run.systems.set_index(["metric", "system"])
    result = F.mauve(mine, people, kmeans="sklearn")
    assert result.signature.name == "mauve"
    assert result.mauve == pytest.approx(table.loc[("mauve", system), "estimate"], abs=1e-9)
    assert result.mauve_star == pytest.approx(
        table.loc[("mauve_star", system), "estimate"], abs=1e-9
    )
    pr = F.precision_recall(mine, people, k=1)
    assert pr.estimate("precision") == pytest.approx(
        table.loc[("text_precision", system), "estimate"], abs=1e-9
    )
    assert pr.estimate("recall") == pytest.approx(
        table.loc[("text_recall", system), "estimate"], abs=1e-9
    )
    with pytest.raises(OptionError, match="'seeds' is not an option of this function"):
        F.METRICS["mauve"](mine, seeds=2)
    assert F.mauve(mine, people, seeds=2, kmeans="sklearn").signature.fields["seeds"] == 2


def test_batch_tokens_sizes_the_encoder_batches(short_stories: list[Any]) -> None:
    """``batch_tokens`` was declared and ignored by seven encoder metrics; now it sets the
    encoder cache's batch (and moves no number: it is not in the signature)."""
    from storyeval.metrics.context import ScoringContext

    texts = [s.story for s in short_stories]
    small, large = ScoringContext(), ScoringContext()
    a = F.embedding_coherence(texts, batch_tokens=64, scoring=small)
    b = F.embedding_coherence(texts, batch_tokens=8192, scoring=large)
    assert small.cache(None).batch_tokens == int(64 * small.batch_scale)
    assert large.cache(None).batch_tokens == int(8192 * large.batch_scale)
    np.testing.assert_allclose(a.values, b.values, rtol=1e-5, equal_nan=True)
    assert a.signature.render() == b.signature.render()
