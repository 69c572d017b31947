"""The trained preference model: training, fine-tuning folds, saving and loading."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from storyeval.base.signature import Signature
from storyeval.corpus import Score, Story
from storyeval.learn.preference.config import (
    FEATURES_DIR,
    HELDOUT_FILE,
    MODEL_FILE,
    TRAINING_TEXTS_FILE,
    PreferenceConfig,
    text_key,
)
from storyeval.learn.preference.data import PreferenceData
from storyeval.learn.preference.features import (
    _feature_texts,
    _lengths,
    feature_encoder,
    metric_columns,
    story_features,
)
from storyeval.learn.preference.head import PreferenceHead, fit_temperature
from storyeval.learn.preference.validation import (
    _fit_subset,
    _head_notes,
    chosen_l2,
    cross_validate,
    heldout_scores,
    negatives_within,
    pairs_within,
)

# --------------------------------------------------------------------------- the model


@dataclass
class PreferenceModel:
    """A trained preference model: its head, settings, signature and data scale.

    ``score(stories)`` gives each story's score on the rating scale when the model learned
    one criterion's ratings (the mean rating it predicts), else in standard deviations.
    """

    directory: Path
    config: PreferenceConfig
    head: PreferenceHead
    signature: Signature
    feature_identity: str
    target_mean: float = 0.0
    target_sd: float = 1.0
    scale: tuple[float, float] | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    levels: tuple[float, ...] = ()

    @property
    def feature_config(self) -> PreferenceConfig:
        """The settings its features are computed with: a fine-tuned model reads its own
        encoder, saved beside it."""
        if not self.config.fine_tune_epochs:
            return self.config
        from storyeval.learn.preference.tune import ENCODER_DIR

        return replace(self.config, model=str(self.directory / ENCODER_DIR))

    @property
    def identity(self) -> str:
        """The model's name and the hash of its file (for signatures)."""
        digest = hashlib.sha256((self.directory / MODEL_FILE).read_bytes()).hexdigest()[:12]
        return f"{self.directory.name}@{digest}"

    def score(
        self,
        stories: Sequence[Story],
        *,
        device: str = "cpu",
        precision: str = "float32",
        scoring: Any = None,
    ) -> np.ndarray:
        """Each story's score (see the class docstring; ``scoring``: see story_features)."""
        features, _, _ = story_features(
            stories, self.feature_config, device=device, precision=precision, scoring=scoring
        )
        return self.to_scale(self.head.scores(features))

    def trained_on(self, stories: Sequence[Story]) -> int | None:
        """How many of ``stories`` (by text) the model was trained on; None for a model
        whose directory does not list its training texts (trained before storyeval 0.8)."""
        path = self.directory / TRAINING_TEXTS_FILE
        if not path.is_file():
            return None
        keys = set(path.read_text(encoding="utf-8").split())
        return sum(text_key(story.story) in keys for story in stories)

    def to_scale(self, standard: np.ndarray) -> np.ndarray:
        """Standardised scores on the rating scale (unchanged without one criterion)."""
        if self.scale is None:
            return standard
        if self.levels:  # the ordinal loss: the expected rating
            from storyeval.learn.ordinal import expected_ratings

            return expected_ratings(self.head.weights, np.atleast_1d(standard), self.levels)
        return standard * self.target_sd + self.target_mean

    def level_probabilities(self, standard: np.ndarray) -> np.ndarray:
        """With the ordinal rating loss: each standardised score's probability of each of
        the scale's ``levels``, shape ``(n, len(levels))``."""
        from storyeval.learn.ordinal import level_probabilities

        if not self.levels:
            raise ValueError("this model learned mean ratings, not a distribution over levels")
        return level_probabilities(self.head.weights, np.atleast_1d(standard))

    def pair_probability(self, first: Story, second: Story) -> float:
        """P(``first`` preferred to ``second``), calibrated."""
        features, _, _ = story_features([first, second], self.feature_config)
        a, b = self.head.scores(features)
        return self.head.pair_probability(float(a), float(b))

    def label_probabilities(self, value: float, labels: Sequence[float]) -> list[float]:
        """A distribution over a rating scale's labels whose expected value is the predicted
        rating (clipped to the scale): a normal of the model's held-out error (its
        cross-validated residual sd, else 1), discretised, its centre moved until the mean
        is ``value``."""
        points = np.asarray(labels, dtype=float)
        spread = float(self.summary.get("residual_sd") or 1.0)
        target = float(np.clip(value, points.min(), points.max()))

        def distribution(centre: float) -> np.ndarray:
            weights: np.ndarray = np.exp(-0.5 * ((points - centre) / spread) ** 2)
            return weights / float(weights.sum())

        low, high = points.min() - 10 * spread, points.max() + 10 * spread
        for _ in range(80):  # the mean grows with the centre: bisection
            middle = (low + high) / 2
            if float(distribution(middle) @ points) < target:
                low = middle
            else:
                high = middle
        return [float(p) for p in distribution((low + high) / 2)]


def preference_signature(
    config: PreferenceConfig, data: PreferenceData, feature_identity: str
) -> Signature:
    """The model's signature: the feature model, every setting, and the data's hash."""
    return Signature(
        "preference",
        {
            "features_model": feature_identity,
            **config.signature_fields(),
            "stories": len(data.stories),
            "pairs": len(data.pairs),
            "data": data.data_hash(),
        },
    )


def train_preference(
    data: PreferenceData,
    output: str | Path,
    *,
    config: PreferenceConfig | None = None,
    folds: int = 5,
    n_boot: int = 1000,
    overwrite: bool = False,
    device: str = "cpu",
    precision: str = "float32",
    progress: Callable[[str], None] | None = None,
    scoring: Any = None,
) -> PreferenceModel:
    """Cross-validate (``folds`` > 1), then train on every story and write the model to
    ``output``: the head, fitted on the training groups, with the pair temperature fitted on
    the held-out ``dev_fraction`` of groups, refitted on all stories. A directory holding a
    model trained with the same signature is returned as it is (a re-run does not train
    again); another model there is replaced only with ``overwrite``.

    The stories' features are kept in ``output/features/`` as they are computed: a run that
    was interrupted resumes from them, and a retraining (other head settings, more stories)
    encodes only the texts it has not seen. ``progress`` hears how many were reused.
    ``scoring`` (a ScoringContext, whose device and precision then apply) shares its encoder
    cache: several trainings in one program on the same stories encode them once."""
    config = config or PreferenceConfig()
    if scoring is not None:
        device, precision = scoring.device, scoring.precision
    encode, identity = feature_encoder(config, device=device, precision=precision, scoring=scoring)
    signature = preference_signature(config, data, identity)
    directory = Path(output)
    reused = _existing(directory, signature, overwrite)
    if reused is not None:
        return reused
    summary: dict[str, Any] = {"notes": list(data.notes)}
    columns = np.zeros((len(data.stories), 0))
    if config.metric_features:
        columns, summary["metric_signatures"] = metric_columns(
            data.stories, config, device=device, precision=precision, scoring=scoring
        )
    lengths = _lengths(data.stories)
    tuning = (
        _FoldTuning(data, config, columns, device, precision, directory, identity, progress)
        if config.fine_tune_epochs
        else None
    )
    if tuning is None:
        stored, _ = _stored_features(data, config, encode, identity, precision, directory, progress)
        features = np.hstack([stored, columns])
    if folds > 1:
        result = cross_validate(
            data,
            None if tuning else features,
            lengths,
            config,
            folds=folds,
            n_boot=n_boot,
            tuned=tuning,
        )
        summary["cross_validation"] = result.table.to_dict("records")
        summary["folds"] = folds
        summary["residual_sd"] = _residual_sd(result.predictions, data)
    if tuning is not None:
        features, identity = tuning.final()
    final = config
    if config.l2 == "auto":  # chosen once on every story, and reported
        everything = np.arange(len(data.stories))
        final = replace(config, l2=chosen_l2(data, features, lengths, config, everything))
        summary["l2_chosen"] = final.l2
    head = _final_head(data, features, lengths, final)
    if tuning is not None and folds > 1:  # the final encoder saw every story: use held-out
        head.temperature = fit_temperature(head, result.predictions, data.pairs)
    summary["length_effect"] = head.length_effect
    _head_notes(summary, head, config, features.shape[1])
    if config.metric_features:
        summary["metric_effects"] = metric_feature_effects(head, config.metric_features)
    model = PreferenceModel(
        directory,
        config,
        head,
        signature,
        identity,
        data.target_mean,
        data.target_sd,
        data.scale,
        summary,
        levels=data.levels,
    )
    heldout = heldout_scores(data, result, signature, name=directory.name) if folds > 1 else []
    _write_beside(directory, data, heldout)
    _save(model)
    return load_preference(directory)


def _write_beside(directory: Path, data: PreferenceData, scores: Sequence[Score]) -> None:
    """The files beside the model, before the model file (the run's commit point): the keys
    of the judged stories' texts (a judge notes stories it was trained on), and the held-out
    scores (a stale file of an earlier run is removed when there are none)."""
    from storyeval.base.io import write_text_atomic
    from storyeval.corpus import write_scores

    directory.mkdir(parents=True, exist_ok=True)
    judged = {
        text_key(s.story) for s, copy in zip(data.stories, data.synthetic, strict=True) if not copy
    }
    write_text_atomic(directory / TRAINING_TEXTS_FILE, "".join(f"{k}\n" for k in sorted(judged)))
    path = directory / HELDOUT_FILE
    if scores:
        write_scores(path, scores)
    else:
        path.unlink(missing_ok=True)


#: The settings a fine-tuning depends on (the head's do not: a new head reuses the tuning).
TUNING_FIELDS = (
    "with_prompt",
    "criterion",
    "pointwise",
    "pairwise",
    "margin",
    "tie_margin",
    "seed",
    "fine_tune_epochs",
    "fine_tune_lr",
    "fine_tune_batch_size",
    "fine_tune_max_length",
)
#: The model directory's store of fine-tuned features (a re-run does not tune again).
TUNING_DIR = "tuning"


@dataclass
class _FoldTuning:
    """Fine-tuned features: for a fold, an encoder tuned on its training stories only; at the
    end, one tuned on every story and saved in the model directory. Each tuning's features
    are saved in ``directory/tuning/``, so an interrupted or repeated training (other head
    settings) does not tune again what it tuned before."""

    data: PreferenceData
    config: PreferenceConfig
    columns: np.ndarray
    device: str
    precision: str
    directory: Path
    base: str
    progress: Callable[[str], None] | None = None
    runs: int = 0

    def __call__(self, members: np.ndarray) -> np.ndarray:
        """Every story's features under an encoder tuned on the stories ``members``."""
        from storyeval.learn.preference.tune import store_tuning, stored_tuning, tuning_key

        key = tuning_key(self._fields(), members)
        tuned = stored_tuning(self.directory / TUNING_DIR, key)
        self.runs += 1
        if tuned is None:
            tuned = self._features(self._tune(members))
            store_tuning(self.directory / TUNING_DIR, key, tuned)
        else:
            self._say(f"fine-tuning {self.runs}: reused from {self.directory / TUNING_DIR}")
        return np.hstack([tuned, self.columns])

    def final(self) -> tuple[np.ndarray, str]:
        """The features of an encoder tuned on every story, saved, and its identity."""
        from storyeval.learn.preference.tune import (
            ENCODER_DIR,
            save_encoder,
            saved_encoder_identity,
            tuning_key,
        )

        key = "final-" + tuning_key(self._fields(), np.arange(len(self.data.stories)))
        reused = self._final_reused(key)
        if reused is not None:
            return reused
        self.runs += 1
        encoder = self._tune(np.arange(len(self.data.stories)))
        save_encoder(encoder, self.directory)
        self._say(f"fine-tuned encoder saved in {self.directory / ENCODER_DIR}")
        tuned = self._features(encoder)
        identity = str(saved_encoder_identity(self.directory))
        self._store_final(key, tuned, identity)
        return np.hstack([tuned, self.columns]), identity

    def _final_reused(self, key: str) -> tuple[np.ndarray, str] | None:
        """The final tuning's features when they and the encoder they came from are saved."""
        from storyeval.learn.preference.tune import (
            ENCODER_DIR,
            saved_encoder_identity,
            stored_tuning,
        )

        tuned = stored_tuning(self.directory / TUNING_DIR, key)
        record = self.directory / TUNING_DIR / f"{key}.identity"
        if tuned is None or not record.is_file():
            return None
        identity = record.read_text().strip()
        if identity != saved_encoder_identity(self.directory):
            return None
        self._say(f"fine-tuned encoder reused from {self.directory / ENCODER_DIR}")
        return np.hstack([tuned, self.columns]), identity

    def _store_final(self, key: str, tuned: np.ndarray, identity: str) -> None:
        from storyeval.base.io import write_text_atomic
        from storyeval.learn.preference.tune import store_tuning

        store_tuning(self.directory / TUNING_DIR, key, tuned)
        write_text_atomic(self.directory / TUNING_DIR / f"{key}.identity", identity + "\n")

    def _fields(self) -> dict[str, Any]:
        fields = {name: getattr(self.config, name) for name in TUNING_FIELDS}
        fields.update(base=self.base, data=self.data.data_hash(), device=self.device)
        fields["precision"] = self.precision
        if self.config.negatives:  # the keys of tunings without them stay as they were
            fields["negative_weight"] = self.config.negative_weight
        return fields

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)

    def _tune(self, members: np.ndarray) -> Any:
        from storyeval.learn.preference.tune import fine_tune_encoder

        copies = self.data.synthetic[members]
        if not self.config.negative_weight:  # measured only: tuned as without them
            members, copies = members[~copies], copies[~copies]
        pairs = pairs_within(self.data.pairs, members)
        texts = _feature_texts([self.data.stories[i] for i in members], self.config)
        epochs = self.config.fine_tune_epochs
        extra = f" and {int(copies.sum())} perturbed copies" if copies.any() else ""
        self._say(
            f"fine-tuning {self.runs}: the encoder on {int((~copies).sum())} stories{extra} "
            f"({epochs} epoch{'' if epochs == 1 else 's'})"
        )
        return fine_tune_encoder(
            texts,
            self.data.targets[members],
            pairs,
            [self.data.groups[i] for i in members],
            self.config,
            device=self.device,
            precision=self.precision,
            negatives=negatives_within(self.data.negatives, members),
        )

    def _features(self, encoder: Any) -> np.ndarray:
        from storyeval.learn.preference.tune import tuned_features

        features: np.ndarray = np.vstack(
            [
                tuned_features(encoder, part, device=self.device, precision=self.precision)
                for part in _encoded_apart(self.data, self.config)
            ]
        )
        return features


def _encoded_apart(data: PreferenceData, config: PreferenceConfig) -> list[list[str]]:
    """The feature texts of the judged stories, then those of their perturbed copies (which
    come last) as a second part: encoded apart, the judged stories' features are exactly
    those of a training without copies (a batch's padding does not change with them)."""
    texts = _feature_texts(data.stories, config)
    judged = len(texts) - len(data.negatives)
    return [texts[:judged], texts[judged:]] if data.negatives else [texts]


def _stored_features(
    data: PreferenceData,
    config: PreferenceConfig,
    encode: Callable[[list[str]], np.ndarray],
    identity: str,
    precision: str,
    directory: Path,
    progress: Callable[[str], None] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The stories' features through the model directory's store (``features/``), so an
    interrupted training resumes and a retraining encodes only what it has not seen."""
    from storyeval.learn.feature_store import FeatureStore
    from storyeval.metrics.context import windowed_texts

    store = FeatureStore.for_model(directory / FEATURES_DIR, identity, precision)
    with windowed_texts() as windowed:
        parts = [store.features(part, encode) for part in _encoded_apart(data, config)]
    note = (
        f"{len(windowed)} stories longer than the encoder's input were read in overlapping "
        "windows (never truncated)"
    )
    if windowed and note not in data.notes:
        data.notes.append(note)
    features = np.vstack([part for part, _ in parts])
    encoded = sum(count for _, count in parts)
    if progress is not None and encoded < len(data.stories):
        progress(
            f"features: {len(data.stories) - encoded} of {len(data.stories)} stories from "
            f"an earlier run ({store.directory}), {encoded} encoded now"
        )
    return features, _lengths(data.stories)


def metric_feature_effects(head: PreferenceHead, names: Sequence[str]) -> dict[str, float]:
    """A linear head's weight of each metric feature: the score sd one sd of the metric adds
    (the last columns of the features); empty for a head with a hidden layer."""
    if not names or "w1" in head.weights:
        return {}
    tail = head.weights["w"][-len(names) :]
    return {name: float(weight) for name, weight in zip(names, tail, strict=True)}


def _residual_sd(predictions: np.ndarray, data: PreferenceData) -> float | None:
    """The held-out prediction error, in rating points (one criterion)."""
    rated = np.isfinite(predictions) & np.isfinite(data.targets)
    if rated.sum() < 3 or data.scale is None:
        return None
    return float(np.std(predictions[rated] - data.targets[rated]) * data.target_sd)


def _final_head(
    data: PreferenceData, features: np.ndarray, lengths: np.ndarray, config: PreferenceConfig
) -> PreferenceHead:
    """Fit on the training groups, calibrate the pair temperature on the dev groups, refit on
    every story and keep the temperature."""
    names = sorted(set(data.groups))
    rng = np.random.default_rng(config.seed)
    dev_groups = set(rng.permutation(names)[: max(1, int(len(names) * config.dev_fraction))])
    dev = np.array([i for i, g in enumerate(data.groups) if g in dev_groups], dtype=np.int64)
    train = np.setdiff1d(np.arange(len(data.stories)), dev)
    temperature = 1.0
    if len(train) and len(dev):
        head = _fit_subset(data, features, lengths, config, train)
        dev_pairs = pairs_within(data.pairs, dev)
        temperature = fit_temperature(head, head.scores(features[dev]), dev_pairs)
    everything = np.arange(len(data.stories))
    head = _fit_subset(data, features, lengths, config, everything)
    head.temperature = temperature
    return head


def _existing(directory: Path, signature: Signature, overwrite: bool) -> PreferenceModel | None:
    """The model already in ``directory`` when trained with ``signature``; refuse another."""
    if not (directory / MODEL_FILE).is_file():
        return None
    found = load_preference(directory)
    if found.signature == signature:
        return found
    if not overwrite:
        from storyeval.learn.trainer import OutputDirectoryError

        raise OutputDirectoryError(
            f"{directory} holds a preference model trained with other settings or data; "
            "pass --overwrite to replace it"
        )
    return None


def _save(model: PreferenceModel) -> None:
    from storyeval.base.io import write_text_atomic

    model.directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "kind": "preference",
        "signature": model.signature.to_dict(),
        "config": asdict(model.config),
        "feature_identity": model.feature_identity,
        "head": model.head.to_dict(),
        "target_mean": model.target_mean,
        "target_sd": model.target_sd,
        "scale": list(model.scale) if model.scale else None,
        "summary": model.summary,
    }
    if model.levels:  # the ordinal loss (files of the squared error stay as they were)
        payload["levels"] = list(model.levels)
    write_text_atomic(
        model.directory / MODEL_FILE, json.dumps(payload, indent=1, default=_json_default) + "\n"
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


def load_preference(directory: str | Path) -> PreferenceModel:
    """A model written by :func:`train_preference`.

    Raises
    ------
    ModelLoadError
        When the directory holds no preference model.
    """
    from storyeval.base.errors import ModelLoadError

    path = Path(directory)
    file = path / MODEL_FILE
    if not file.is_file():
        raise ModelLoadError(
            f"{path}: no preference model ({MODEL_FILE}); train one with storyeval train preference"
        )
    data = json.loads(file.read_text(encoding="utf-8"))
    config = replace(PreferenceConfig(), **data["config"])
    if config.fine_tune_epochs:
        _check_tuned_encoder(path, str(data["feature_identity"]))
    return PreferenceModel(
        path,
        config,
        PreferenceHead.from_dict(data["head"]),
        Signature.from_dict(data["signature"]),
        str(data["feature_identity"]),
        float(data["target_mean"]),
        float(data["target_sd"]),
        tuple(data["scale"]) if data.get("scale") else None,
        dict(data.get("summary") or {}),
        tuple(float(v) for v in data.get("levels") or ()),
    )


def _check_tuned_encoder(directory: Path, expected: str) -> None:
    """Refuse a fine-tuned model whose saved encoder is missing or is not the one it was
    trained with (its files' hash is in the model file)."""
    from storyeval.base.errors import ModelLoadError
    from storyeval.learn.preference.tune import ENCODER_DIR, saved_encoder_identity

    encoder = directory / ENCODER_DIR
    found = saved_encoder_identity(directory)
    if found is None:
        raise ModelLoadError(f"{directory}: the fine-tuned encoder ({ENCODER_DIR}/) is missing")
    if found != expected:
        raise ModelLoadError(
            f"{encoder} is not the encoder this model was trained with ({found}, trained "
            f"with {expected}): train again"
        )
