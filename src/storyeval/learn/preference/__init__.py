"""Story reward models trained from human judgments (``storyeval train preference``).

A researcher who ran one study owns the data to train a judge of their own (LitBench, Fein et
al. 2025, trained Bradley-Terry reward models on human story preferences that agree with
held-out people more often than off-the-shelf LLM judges). The model is a scalar head over a
story's features: the mean-pooled last layer of an encoder (default the offline MiniLM, any hub
or local encoder) or a causal LM's last hidden state. It learns from

- **ratings**: a pointwise objective on each story's mean rating (z-scored), and pairs of
  stories for one prompt whose mean ratings differ by more than ``margin`` (ties, within
  ``tie_margin``, kept as ties);
- **comparisons**: pairwise preferences (``storyeval import pairwise``, a pairwise study's
  export), with a Bradley-Terry loss and Davidson's (1970) ties,

both together when both exist. The encoder can first be fine-tuned on the same objective
(:mod:`storyeval.learn.preference.tune`), and metric scores can join its features
(:mod:`storyeval.learn.metric_features`). Length can be a covariate (``length_covariate``): its
coefficient is learned and reported, and removed from the scores, so a longer story gets no
credit for its length alone. Pair probabilities are calibrated by a temperature fitted on a
held-out split; splits are by prompt (no prompt in both train and test), by story where every
prompt has one story. :func:`cross_validate` reports the held-out pairwise accuracy and the
story-level Kendall tau with bootstrap intervals.

The package follows the steps: :mod:`~storyeval.learn.preference.config` (settings),
:mod:`~storyeval.learn.preference.data` (judged stories and pairs),
:mod:`~storyeval.learn.preference.features`, :mod:`~storyeval.learn.preference.head`,
:mod:`~storyeval.learn.preference.validation` (splits, cross-validation, choices within folds),
:mod:`~storyeval.learn.preference.evaluation` (the report's rows),
:mod:`~storyeval.learn.preference.model` (training, saving, loading),
:mod:`~storyeval.learn.preference.tune` (fine-tuning the encoder) and
:mod:`~storyeval.learn.preference.judge` (the model as a judge backend).
"""

from storyeval.learn.preference.config import (
    FEATURES,
    FEATURES_DIR,
    HELDOUT_FILE,
    HELDOUT_METRIC,
    MODEL_FILE,
    TRAINING_TEXTS_FILE,
    PreferenceConfig,
    PreferenceDataError,
    text_key,
)
from storyeval.learn.preference.data import (
    PreferenceData,
    add_negatives,
    preference_data,
)
from storyeval.learn.preference.features import (
    feature_encoder,
    metric_columns,
    story_features,
)
from storyeval.learn.preference.head import (
    PreferenceHead,
    fit_head,
    fit_temperature,
)
from storyeval.learn.preference.model import (
    TUNING_DIR,
    TUNING_FIELDS,
    PreferenceModel,
    load_preference,
    metric_feature_effects,
    preference_signature,
    train_preference,
)
from storyeval.learn.preference.validation import (
    L2_FOLDS,
    L2_GRID,
    SELECT_MOST,
    CrossValidation,
    chosen_l2,
    cross_validate,
    group_folds,
    heldout_scores,
    negatives_within,
    pairs_within,
    selected_columns,
    selected_names,
    wrong_sign_note,
)

__all__ = [
    "FEATURES",
    "FEATURES_DIR",
    "HELDOUT_FILE",
    "HELDOUT_METRIC",
    "L2_FOLDS",
    "L2_GRID",
    "MODEL_FILE",
    "SELECT_MOST",
    "TRAINING_TEXTS_FILE",
    "TUNING_DIR",
    "TUNING_FIELDS",
    "CrossValidation",
    "PreferenceConfig",
    "PreferenceData",
    "PreferenceDataError",
    "PreferenceHead",
    "PreferenceModel",
    "add_negatives",
    "chosen_l2",
    "cross_validate",
    "feature_encoder",
    "fit_head",
    "fit_temperature",
    "group_folds",
    "heldout_scores",
    "load_preference",
    "metric_columns",
    "metric_feature_effects",
    "negatives_within",
    "pairs_within",
    "preference_data",
    "preference_signature",
    "selected_columns",
    "selected_names",
    "story_features",
    "text_key",
    "train_preference",
    "wrong_sign_note",
]
