"""Automatic metrics: a registry of metric functions and the pipeline that scores stories.

>>> from storyeval.metrics import available_metrics
>>> {"bleu", "bertscore_f", "wms", "perplexity", "distinct2"} <= set(available_metrics())
True

Importing this package is light: metric modules (and torch) load on first use.
"""

from storyeval.metrics.aggregate import aggregate
from storyeval.metrics.pipeline import score_stories
from storyeval.metrics.registry import (
    CorpusStatistic,
    MetricBatch,
    MetricOption,
    MetricOutput,
    MetricSpec,
    OptionError,
    UnknownMetricError,
    all_metrics,
    available_metrics,
    families,
    get_metric,
    parse_metric_list,
    parse_option_assignments,
    register_spec,
    resolve_options,
    unregister_metric,
)
from storyeval.metrics.runs import (
    SYSTEM_COLUMNS,
    MetricRun,
    ScoreRun,
    default_suite,
    story_lines,
)

__all__ = [
    "SYSTEM_COLUMNS",
    "CorpusStatistic",
    "MetricBatch",
    "MetricOption",
    "MetricOutput",
    "MetricRun",
    "MetricSpec",
    "OptionError",
    "ScoreRun",
    "UnknownMetricError",
    "aggregate",
    "all_metrics",
    "available_metrics",
    "default_suite",
    "families",
    "get_metric",
    "parse_metric_list",
    "parse_option_assignments",
    "register_spec",
    "resolve_options",
    "score_stories",
    "story_lines",
    "unregister_metric",
]
