"""Properties every registered metric must have (after scikit-learn's test_common): values
independent of the order of the stories, a single story works, values stay in the declared
range, missing inputs raise a clear error naming the metric and the line (or are skipped and
counted when asked), and the score records carry system and prompt_id."""

from __future__ import annotations

import math

import numpy as np
import pytest

from storyeval.corpus import Story
from storyeval.errors import MissingInputError, StoryevalError
from storyeval.metrics import all_metrics, score_stories
from storyeval.metrics.context import ScoringContext, UndefinedScoreWarning

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
