"""Meta-evaluation: how well do metrics agree with people, and how sure can we be?

- :func:`load_meta_table` / :func:`build_meta_table`: join scores, judgments and stories.
- :func:`correlate`: Pearson, Spearman, Kendall (tau-b; tau-c on request) of each metric with
  each human criterion at the pooled, story and system levels, with p-values and seeded
  bootstrap intervals; :func:`correlation_matrix` for a Callan & Foster style matrix.
- :func:`williams_test`, :func:`compare_metrics`, :func:`adjust_pvalues` (BH, Bonferroni, Holm).
- :func:`aggregate_ratings`, :func:`agreement` (Krippendorff's alpha, Fleiss' kappa, ICC,
  percent full agreement), :func:`describe_ratings`, :func:`human_ceiling`.
- :func:`quality_drift`, :func:`subset_correlations`, :func:`dataset_drift` (Guan and Huang 2020, 4.4).
- :func:`discrimination` with :func:`read_pairs`, :func:`pairs_from_perturbations`,
  :func:`pairs_from_score_files`.

Every table is a tidy DataFrame (``estimate, ci_low, ci_high, p_value, n, method`` ...) whose
rows carry signatures; undefined statistics are nan with a :class:`DegenerateInputWarning`.
"""

from storyeval.base.errors import (
    BootstrapWarning,
    DataCoverageWarning,
    DegenerateInputWarning,
    MetaEvaluationWarning,
    MixedSignatureWarning,
)
from storyeval.meta.agreement import agreement, describe_ratings, human_ceiling
from storyeval.meta.correlation import (
    ALL_LEVELS,
    LEVELS,
    CorrelationSettings,
    correlate,
    correlation_matrix,
    level_correlation,
)
from storyeval.meta.data import (
    MetaInputError,
    MetaTable,
    aggregate_ratings,
    build_meta_table,
    load_meta_table,
)
from storyeval.meta.discrimination import (
    discrimination,
    pairs_from_perturbations,
    pairs_from_score_files,
    read_pairs,
)
from storyeval.meta.drift import (
    DriftRun,
    dataset_drift,
    load_drift_runs,
    quality_drift,
    subset_correlations,
)
from storyeval.meta.significance import adjust_pvalues, compare_metrics, williams_test

# isort: split
# Last: importing the submodule storyeval.meta.correlation binds its name on this package,
# which would hide the function imported before it.
from storyeval.base.stats import METHODS, correlation

__all__ = [
    "ALL_LEVELS",
    "LEVELS",
    "METHODS",
    "BootstrapWarning",
    "CorrelationSettings",
    "DataCoverageWarning",
    "DegenerateInputWarning",
    "DriftRun",
    "MetaEvaluationWarning",
    "MetaInputError",
    "MetaTable",
    "MixedSignatureWarning",
    "adjust_pvalues",
    "aggregate_ratings",
    "agreement",
    "build_meta_table",
    "compare_metrics",
    "correlate",
    "correlation",
    "correlation_matrix",
    "dataset_drift",
    "describe_ratings",
    "discrimination",
    "human_ceiling",
    "level_correlation",
    "load_drift_runs",
    "load_meta_table",
    "pairs_from_perturbations",
    "pairs_from_score_files",
    "quality_drift",
    "read_pairs",
    "subset_correlations",
    "williams_test",
]
