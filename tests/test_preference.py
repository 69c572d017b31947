"""Story reward models trained from people's judgments: ``storyeval train preference``, the
``preference`` metric and the reward-model judge, on the example corpus and on synthetic
features whose answer is known."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from storyeval.corpus import Judgment, Story, read_judgments, read_stories
from storyeval.learn.preference import (
    PreferenceConfig,
    PreferenceData,
    PreferenceDataError,
    cross_validate,
    fit_head,
    group_folds,
    load_preference,
    preference_data,
    train_preference,
)
from storyeval.learn.trainer import OutputDirectoryError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CONFIG = PreferenceConfig(criterion="coherence")


@pytest.fixture(scope="module")
def example_data() -> PreferenceData:
    stories = read_stories(EXAMPLES / "stories.jsonl")
    return preference_data(stories, read_judgments(EXAMPLES / "judgments.jsonl"), config=CONFIG)


@pytest.fixture(scope="module")
def trained(  # type: ignore[no-untyped-def]
    example_data: PreferenceData, tmp_path_factory: pytest.TempPathFactory, scoring_context
):
    directory = tmp_path_factory.mktemp("preference") / "model"
    return train_preference(
        example_data, directory, config=CONFIG, folds=3, n_boot=100, scoring=scoring_context
    )


def test_ratings_become_targets_and_pairs_within_a_prompt(example_data: PreferenceData) -> None:
    data = example_data
    assert len(data.stories) == 180 and np.isfinite(data.targets).all()
    assert abs(float(data.targets.mean())) < 1e-9 and data.scale == (1.0, 5.0)
    prompts = [s.prompt for s in data.stories]
    raw = data.targets * data.target_sd + data.target_mean
    for i, j, outcome in data.pairs:
        assert prompts[i] == prompts[j]  # pairs never cross prompts
        gap = raw[i] - raw[j]
        assert (outcome == 1.0 and gap > CONFIG.margin) or (outcome == 0.5 and abs(gap) < 1e-9)
    assert {o for _, _, o in data.pairs} == {1.0, 0.5}


def test_bad_judgments_are_named() -> None:
    stories = [Story("a", "p", "One."), Story("b", "p", "Two.")]
    with pytest.raises(PreferenceDataError, match="not in the stories"):
        preference_data(stories, [Judgment("zzz", "r", "coherence", 3.0)])
    with pytest.raises(PreferenceDataError, match="the criteria are coherence"):
        preference_data(
            stories, [Judgment("a", "r", "coherence", 3.0)], config=PreferenceConfig(criterion="x")
        )
    with pytest.raises(PreferenceDataError, match="neither a story id nor a system"):
        preference_data(stories, comparisons=[{"system_a": "a", "system_b": "q", "winner": "a"}])


def test_folds_keep_each_prompt_in_one_fold(example_data: PreferenceData) -> None:
    folds = group_folds(example_data.groups, 5, seed=3)
    assert sorted(np.concatenate(folds).tolist()) == list(range(180))
    seen = [{example_data.groups[i] for i in fold} for fold in folds]
    assert all(not (a & b) for k, a in enumerate(seen) for b in seen[k + 1 :])
    with pytest.raises(PreferenceDataError, match="folds need"):
        group_folds(["p1", "p2"], 3, seed=0)


def test_a_known_preference_is_learned_and_length_is_left_out() -> None:
    rng = np.random.default_rng(0)
    n = 240
    features = rng.normal(size=(n, 6))
    lengths = rng.normal(size=n)
    features[:, 2] = lengths + rng.normal(scale=0.3, size=n)  # encoders see length too
    quality = features[:, 0] - 0.5 * features[:, 1]
    rated = quality + 0.8 * lengths  # raters who reward length
    targets = rated / np.std(rated)
    head = fit_head(features, lengths, targets, [], PreferenceConfig(steps=400))
    scores = head.scores(features)
    assert np.corrcoef(scores, quality)[0, 1] > 0.95
    assert abs(np.corrcoef(scores, lengths)[0, 1]) < 0.15  # length's credit removed
    assert head.length_effect > 0.4  # and reported
    plain = fit_head(
        features, lengths, targets, [], PreferenceConfig(steps=400, length_covariate=False)
    )
    assert np.corrcoef(plain.scores(features), lengths)[0, 1] > 0.4
    pairs = [
        (i, i + 1, 1.0) if quality[i] > quality[i + 1] else (i + 1, i, 1.0) for i in range(0, n, 2)
    ]
    pairs += [(0, 2, 0.5), (4, 6, 0.5)]  # Davidson's ties
    both = fit_head(features, lengths, targets, pairs, PreferenceConfig(steps=400))
    assert np.corrcoef(both.scores(features), quality)[0, 1] > 0.95
    assert both.pair_scale > 0


@pytest.mark.parametrize(
    "setting",
    ["ratings and pairs", "ratings without length", "pairs alone", "negatives", "free columns"],
)
def test_the_closed_form_gradient_fits_the_head_autograd_fits(setting: str) -> None:
    """The linear head is fitted in NumPy with its gradient in closed form; torch's autograd
    (which still fits the hidden layer and the ordinal loss) fits the same head, equal to
    rounding. A rating-free head's offset has no gradient: rounding noise moves it, by about
    1e-8 (measured 2e-8), and it moves every score alike."""
    from storyeval.learn.preference import head as heads

    rng = np.random.default_rng(0)
    features, lengths = rng.normal(size=(200, 40)), rng.normal(size=200)
    targets = rng.normal(size=200)
    targets[150:] = np.nan  # the copies (and a few stories) have no rating
    targets[::7] = np.nan
    pairs = [(int(i), int(j), float(rng.choice([1.0, 0.5])))
             for i, j in rng.integers(0, 150, size=(300, 2)) if i != j]  # fmt: skip
    negatives: list[tuple[int, int]] = []
    config = PreferenceConfig()
    if setting == "ratings without length":
        config, pairs = PreferenceConfig(length_covariate=False, l2=0.3), []
    elif setting == "pairs alone":
        targets[:] = np.nan
    elif setting in ("negatives", "free columns"):
        negatives = [(i, 150 + i) for i in range(50)]
        config = PreferenceConfig(negatives=("repetition",), l2=1.0)
        if setting == "free columns":
            config = replace(config, metric_features=("distinct2", "repeated_ngram_rate"))

    closed = fit_head(features, lengths, targets, pairs, config, negatives=negatives)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(heads, "_fit_linear", heads._fit_with_autograd)
        reference = fit_head(features, lengths, targets, pairs, config, negatives=negatives)
    assert closed.weights.keys() == reference.weights.keys()
    tolerance = 1e-7 if setting == "pairs alone" else 1e-12
    for name, value in reference.weights.items():
        np.testing.assert_allclose(closed.weights[name], value, rtol=0, atol=tolerance)
    if not pairs:  # untouched without pairs, as autograd leaves them
        assert closed.weights["log_tie"][0] == -1.0 and closed.weights["log_scale"][0] == 0.0
    if not config.length_covariate:
        assert closed.weights["length"][0] == 0.0
    assert np.corrcoef(closed.scores(features), reference.scores(features))[0, 1] > 1 - 1e-12


def test_pairs_alone_train_a_model(example_data: PreferenceData) -> None:
    rng = np.random.default_rng(1)
    features = rng.normal(size=(180, 4))
    pairs_only = PreferenceConfig(criterion="coherence", pointwise=False)
    data = preference_data(
        example_data.stories,
        read_judgments(EXAMPLES / "judgments.jsonl"),
        config=pairs_only,
    )
    assert not np.isfinite(data.targets).any() and data.pairs
    quality = np.zeros(180)
    for i, j, outcome in data.pairs:
        quality[i] += outcome
        quality[j] += 1 - outcome
    features[:, 0] = quality + rng.normal(scale=0.1, size=180)
    result = cross_validate(data, features, np.zeros(180), pairs_only, folds=3, n_boot=50)
    accuracy = result.table.query("predictor == 'model' and statistic == 'pairwise_accuracy'")
    assert float(accuracy["estimate"].iloc[0]) > 0.7


def test_training_on_the_examples_beats_length_on_held_out_prompts(trained) -> None:  # type: ignore[no-untyped-def]
    table = {
        (row["predictor"], row["statistic"]): row for row in trained.summary["cross_validation"]
    }
    model = table[("model", "pairwise_accuracy")]
    length = table[("length (log words)", "pairwise_accuracy")]
    assert model["ci_low"] <= model["estimate"] <= model["ci_high"]
    assert model["estimate"] > 0.65 and model["estimate"] > length["estimate"]
    assert table[("model", "kendall_tau_b")]["estimate"] > 0.2
    assert trained.summary["residual_sd"] > 0
    saved = json.loads((trained.directory / "preference.json").read_text())
    assert saved["signature"]["fields"]["criterion"] == "coherence"


def test_trainings_sharing_a_scoring_context_encode_each_text_once(  # type: ignore[no-untyped-def]
    trained, example_data: PreferenceData, tmp_path: Path, scoring_context
) -> None:
    """A second training with other head settings, in a new directory (no stored features),
    encodes nothing through the shared context, and the context's features are those of a
    fresh encoder: a model scores stories the same either way."""
    cache = scoring_context.cache(CONFIG.model)
    texts_before = cache.stats.texts
    other = PreferenceConfig(criterion="coherence", hidden=4)
    shared = train_preference(
        example_data, tmp_path / "shared", config=other, folds=0, scoring=scoring_context
    )
    assert cache.stats.texts == texts_before and shared.signature.fields["hidden"] == 4
    stories = example_data.stories[:6]  # encoded alone here, in a batch of 180 in the context
    np.testing.assert_allclose(
        trained.score(stories), trained.score(stories, scoring=scoring_context), atol=1e-6
    )


def test_a_second_run_reuses_the_model_and_other_settings_are_refused(  # type: ignore[no-untyped-def]
    trained, example_data: PreferenceData
) -> None:
    before = (trained.directory / "preference.json").read_bytes()
    again = train_preference(example_data, trained.directory, config=CONFIG, folds=3, n_boot=100)
    assert again.signature == trained.signature
    assert (trained.directory / "preference.json").read_bytes() == before
    with pytest.raises(OutputDirectoryError, match="--overwrite"):
        train_preference(
            example_data, trained.directory, config=PreferenceConfig(hidden=4), folds=0
        )


def test_an_interrupted_training_resumes_from_its_stored_features(  # type: ignore[no-untyped-def]
    trained,
    example_data: PreferenceData,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scoring_context,
) -> None:
    """The store's texts are counted at the encoder function; the texts behind it come from
    the tests' shared scoring context (what is counted is what the store asked for)."""
    import storyeval.learn.feature_store as feature_store
    import storyeval.learn.preference.model as preference  # where training reads features

    monkeypatch.setattr(feature_store, "FEATURE_CHUNK", 50)
    encoder, encoded, stop_after = preference.feature_encoder, [], [2]

    def interrupted(*args, **kwargs):  # type: ignore[no-untyped-def]
        encode, identity = encoder(*args, **kwargs)

        def counted(texts: list[str]) -> np.ndarray:
            if stop_after and len(encoded) == stop_after[0]:
                raise KeyboardInterrupt  # the user's Ctrl-C in the third chunk
            encoded.append(len(texts))
            return encode(texts)

        return counted, identity

    monkeypatch.setattr(preference, "feature_encoder", interrupted)
    directory = tmp_path / "model"
    settings = {"config": CONFIG, "folds": 3, "n_boot": 100, "scoring": scoring_context}
    with pytest.raises(KeyboardInterrupt):
        train_preference(example_data, directory, **settings)
    assert encoded == [50, 50] and not (directory / "preference.json").exists()
    distinct = len({s.story for s in example_data.stories})
    stop_after.clear()
    encoded.clear()
    heard: list[str] = []
    resumed = train_preference(example_data, directory, **settings, progress=heard.append)
    assert sum(encoded) == distinct - 100  # only what the interrupted run had not saved
    assert heard and f"{len(example_data.stories) - sum(encoded)} of" in heard[0]
    assert resumed.signature == trained.signature
    stories = example_data.stories
    np.testing.assert_allclose(
        resumed.score(stories, scoring=scoring_context),
        trained.score(stories, scoring=scoring_context),
        atol=1e-5,
    )
    encoded.clear()
    other = PreferenceConfig(criterion="coherence", hidden=4)
    train_preference(
        example_data, directory, config=other, folds=0, overwrite=True, scoring=scoring_context
    )
    assert encoded == []  # other head settings: nothing encoded again


def test_the_metric_scores_on_the_rating_scale(trained, example_data: PreferenceData) -> None:  # type: ignore[no-untyped-def]
    from storyeval import functional as F

    texts = [s.story for s in example_data.stories[:12]]
    result = F.preference(texts, model=str(trained.directory))
    direct = trained.score(example_data.stories[:12])
    np.testing.assert_allclose(result.values, direct)
    assert 0.0 < float(np.mean(result.values)) < 6.0
    assert result.signature.fields["model"] == trained.identity
    assert result.signature.fields["criterion"] == "coherence"
    with pytest.raises(Exception, match="no preference model"):
        F.preference(texts, model=str(trained.directory.parent))


def test_the_reward_model_judge_answers_with_the_models_numbers(
    trained, example_data: PreferenceData
) -> None:  # type: ignore[no-untyped-def]
    from storyeval.judge import load_rubric
    from storyeval.judge.backends import Decoding
    from storyeval.judge.prompts import absolute_request, pairwise_request
    from storyeval.learn.preference.judge import RewardModelJudge

    judge = RewardModelJudge(str(trained.directory))
    rubric = load_rubric("karpinska")
    criterion = next(c for c in rubric.criteria if c.name == "coherence")
    stories = example_data.stories[:6]
    answers = judge.answer([absolute_request(s, rubric, criterion) for s in stories], Decoding())
    labels = np.array([float(label) for label in criterion.labels])
    expected = [float(np.dot(a.probabilities, labels)) for a in answers]
    np.testing.assert_allclose(expected, np.clip(trained.score(stories), 1, 5), atol=5e-3)
    a, b = stories[0], stories[1]
    forward, backward = judge.answer(
        [pairwise_request(a, b, rubric, criterion), pairwise_request(b, a, rubric, criterion)],
        Decoding(),
    )
    assert forward.probabilities is not None and backward.probabilities is not None
    assert forward.probabilities[0] == pytest.approx(backward.probabilities[1])
    assert (forward.probabilities[0] > 0.5) == (trained.score([a])[0] > trained.score([b])[0])


def test_the_commands_train_score_and_judge(trained, tmp_path: Path, tiny_models) -> None:  # type: ignore[no-untyped-def]
    """The commands' plumbing (the training from pairs on the two-layer encoder's features)."""
    from storyeval.cli import app

    runner = CliRunner()
    comparisons = tmp_path / "comparisons.jsonl"
    prompts = [f"s{k:03d}" for k in range(1, 41)]  # the human story wins for 40 prompts
    rows = [
        {
            "item_id": f"c{p}",
            "prompt_id": p,
            "system_a": "human",
            "system_b": "smollm2-p0.9",
            "winner": "human",
        }
        for p in prompts
    ]
    comparisons.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = tmp_path / "from-pairs"
    result = runner.invoke(
        app,
        [
            "train",
            "preference",
            "--stories",
            str(EXAMPLES / "stories.jsonl"),
            "--pairs",
            str(comparisons),
            "--objective",
            "pairs",
            "--model",
            str(tiny_models["encoder"]),
            "-o",
            str(model),
            "--folds",
            "2",
            "--bootstrap",
            "20",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "40 pairs (40 decided, 0 ties)" in result.output
    assert "held out (2 prompt-disjoint folds" in result.output
    assert load_preference(model).config.pointwise is False
    judged = tmp_path / "judged.jsonl"
    result = runner.invoke(
        app,
        [
            "judge",
            str(EXAMPLES / "human.jsonl"),
            "--backend",
            "reward-model",
            "--model",
            str(trained.directory),
            "-o",
            str(judged),
            "--no-cache",
        ],
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in judged.read_text().splitlines()]
    assert len(records) == 60 * 4 and all(r["parse_status"] == "probabilities" for r in records)
    refused = runner.invoke(
        app,
        ["judge", str(EXAMPLES / "human.jsonl"), "--backend", "reward-model", "-o", str(judged)],
    )
    assert refused.exit_code == 2 and "needs --model DIR" in refused.output


def test_the_ordinal_loss_recovers_the_scale_and_the_ratings_distribution() -> None:
    from storyeval.learn.ordinal import level_probabilities, thresholds

    rng = np.random.default_rng(3)
    n, raters = 300, 3
    features = rng.normal(size=(n, 5))
    quality = 1.5 * (features[:, 0] - 0.5 * features[:, 1])
    true_cuts = np.array([-2.5, -1.5, 1.5, 2.5])  # 2 and 4 are rare: the points are not equal
    below = 1 / (1 + np.exp(-(true_cuts[None, :] - quality[:, None])))
    probabilities = np.diff(np.concatenate([np.zeros((n, 1)), below, np.ones((n, 1))], 1), axis=1)
    ratings = [(i, int(rng.choice(5, p=probabilities[i]))) for i in range(n) for _ in range(raters)]
    config = PreferenceConfig(criterion="x", rating_loss="ordinal", steps=600, l2=0.0)
    means = np.array([np.mean([lvl for s, lvl in ratings if s == i]) for i in range(n)])
    head = fit_head(features, np.zeros(n), means, [], config, ratings, 5)
    scores = head.scores(features)
    assert np.corrcoef(scores, quality)[0, 1] > 0.95
    cuts = thresholds(head.weights)
    assert np.all(np.diff(cuts) > 0)  # ordered
    assert cuts[2] - cuts[1] > 1.5 * (cuts[1] - cuts[0])  # the wide middle step is learned
    fitted = level_probabilities(head.weights, scores)
    np.testing.assert_allclose(fitted.sum(axis=1), 1.0)
    assert np.abs(fitted - probabilities).mean() < 0.05


def test_ordinal_models_train_score_and_judge_on_their_scale(  # type: ignore[no-untyped-def]
    example_data: PreferenceData, tmp_path: Path, scoring_context
) -> None:
    from storyeval.judge import load_rubric
    from storyeval.judge.backends import Decoding
    from storyeval.judge.prompts import absolute_request
    from storyeval.learn.preference.judge import RewardModelJudge

    config = PreferenceConfig(criterion="coherence", rating_loss="ordinal")
    judgments = read_judgments(EXAMPLES / "judgments.jsonl")
    data = preference_data(example_data.stories, judgments, config=config)
    assert data.levels == (1.0, 2.0, 3.0, 4.0, 5.0)
    assert len(data.ratings) == sum(j.criterion == "coherence" for j in judgments)
    assert data.data_hash() != example_data.data_hash()
    model = train_preference(
        data, tmp_path / "ordinal", config=config, folds=3, n_boot=50, scoring=scoring_context
    )
    assert model.signature.fields["rating_loss"] == "ordinal"
    assert "rating_loss" not in CONFIG.signature_fields()  # squared-error signatures unchanged
    table = {(r["predictor"], r["statistic"]): r for r in model.summary["cross_validation"]}
    assert table[("model", "kendall_tau_b")]["estimate"] > 0.2
    loaded = load_preference(tmp_path / "ordinal")
    assert loaded.levels == data.levels
    stories = example_data.stories[:6]
    predicted = loaded.score(stories)
    assert np.all((predicted >= 1) & (predicted <= 5))
    rubric = load_rubric("karpinska")
    criterion = next(c for c in rubric.criteria if c.name == "coherence")
    judge = RewardModelJudge(str(tmp_path / "ordinal"))
    answers = judge.answer([absolute_request(s, rubric, criterion) for s in stories], Decoding())
    labels = np.array([float(label) for label in criterion.labels])
    np.testing.assert_allclose([np.dot(a.probabilities, labels) for a in answers], predicted)
    with pytest.raises(ValueError, match="one criterion"):
        PreferenceConfig(rating_loss="ordinal")
    continuous = [
        Judgment(j.item_id, j.rater_id, j.criterion, j.value + 0.01 * k)
        for k, j in enumerate(judgments)
    ]
    with pytest.raises(PreferenceDataError, match="discrete scale"):
        preference_data(example_data.stories, continuous, config=config)


def test_the_ordinal_loss_from_the_command_line(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """The option's plumbing, on features of the two-layer encoder."""
    from storyeval.cli import app

    runner = CliRunner()
    common = ["train", "preference", "--stories", str(EXAMPLES / "stories.jsonl")]
    common += ["--model", str(tiny_models["encoder"])]
    common += ["--judgments", str(EXAMPLES / "judgments.jsonl"), "--rating-loss", "ordinal"]
    refused = runner.invoke(app, [*common, "-o", str(tmp_path / "a")])
    assert refused.exit_code == 2 and "one criterion" in refused.output
    done = runner.invoke(
        app, [*common, "--criterion", "coherence", "--folds", "0", "-o", str(tmp_path / "b")]
    )
    assert done.exit_code == 0, done.output
    assert "rating_loss:ordinal" in done.output
    assert load_preference(tmp_path / "b").levels == (1.0, 2.0, 3.0, 4.0, 5.0)


def test_the_feature_store_finds_texts_by_content_and_names_a_broken_chunk(
    tmp_path: Path,
) -> None:
    from storyeval.base.errors import StoryevalError
    from storyeval.learn.feature_store import FeatureStore

    calls: list[list[str]] = []

    def encode(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        return np.array([[float(len(t)), float(t.count("a"))] for t in texts])

    store = FeatureStore.for_model(tmp_path, "encoder@1", "float32")
    first, encoded = store.features(["a", "bb", "a", "ccc", "dddd"], encode, chunk=2)
    assert encoded == 4 and calls == [["a", "bb"], ["ccc", "dddd"]]  # each text once, 2 a save
    assert len(list(store.directory.glob("chunk-*.npz"))) == 2
    again = FeatureStore.for_model(tmp_path, "encoder@1", "float32")
    rows, encoded = again.features(["dddd", "a", "eeeee"], encode)
    assert encoded == 1 and calls[-1] == ["eeeee"]
    np.testing.assert_array_equal(rows[:2], first[[4, 0]])
    other = FeatureStore.for_model(tmp_path, "encoder@1", "bfloat16")  # another precision
    assert len(other) == 0 and other.directory != store.directory
    (store.directory / "chunk-0-broken.npz").write_bytes(b"not a chunk")
    with pytest.raises(StoryevalError, match=r"chunk-0-broken\.npz"):
        FeatureStore(store.directory)
