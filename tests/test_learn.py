"""Learned metrics: UNION trained on the example stories, the NSP head, the shared training
machinery (dev split, early stopping, checkpoints with signatures, resuming), the `union`
metric through `storyeval score`, and clear errors.

Training is kept short (short inputs, sentence windows, one model per session)."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

from storyeval.base.errors import ModelLoadError, StoryevalError
from storyeval.base.signature import Signature
from storyeval.corpus import Story
from storyeval.learn import (
    InsufficientDataError,
    OutputDirectoryError,
    TrainingConfig,
    TrainingInterrupted,
    read_metadata,
)

pytestmark = pytest.mark.slow

NSP_SETTINGS = {"max_length": 32}
NSP_TRAINING = {"epochs": 1, "max_steps": 6, "batch_size": 16, "seed": 3, "eval_every": 3}


@pytest.fixture(scope="session")
def nsp_model(tmp_path_factory, human):
    """The default head on the offline encoder (siamese), trained for 16 steps on 45 example
    stories: the model whose learning test_siamese_nsp_head_separates_unseen_sentence_pairs
    checks, and which the loading and metric tests read (one training for all of them)."""
    from storyeval.learn.nsp import NspConfig, train_nsp

    return train_nsp(
        human[:45],
        tmp_path_factory.mktemp("nsp") / "model",
        config=NspConfig(max_length=64),
        training=TrainingConfig(epochs=1, max_steps=16, batch_size=16, seed=1, eval_every=8),
        progress=False,
    )


@pytest.fixture(scope="session")
def nsp_cross_model(tmp_path_factory, human):
    """BERT's own NSP architecture (a head on the pair's [CLS]), a few steps."""
    from storyeval.learn.nsp import NspConfig, train_nsp

    return train_nsp(
        human[:12],
        tmp_path_factory.mktemp("nsp-cross") / "model",
        config=NspConfig(**NSP_SETTINGS, architecture="cross"),
        training=TrainingConfig(**{**NSP_TRAINING, "max_steps": 3}),
        progress=False,
    )


def test_union_separates_unseen_perturbed_stories(union_model, human, nlp):
    """Windows of the 15 held-out stories (never seen in training) against two UNION
    negatives each, drawn with the paper's mixture under a seed training never used.

    With ~100 CPU steps on 45 stories the model has learned mostly the negation cue (the
    paper trained on 88,344 stories); the mixture is still separated far above chance
    (seen here: pairwise 0.73 over 181 pairs, p = 3e-10; negation alone 0.96)."""
    from storyeval.learn.union import sentence_windows
    from storyeval.learn.union_scoring import heldout_discrimination, load_union

    scorer = load_union(union_model.directory)
    heldout = sentence_windows(human[45:], 2, stride=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a few windows exceed 48 tokens and are cut
        mixture = heldout_discrimination(scorer, heldout, seed=2024, samples=2, nlp=nlp).iloc[0]
        negation = heldout_discrimination(
            scorer, heldout, seed=2024, techniques=["negation"], nlp=nlp
        ).iloc[0]
    print(f"\nUNION held-out discrimination, mixture: {mixture}\nnegation only: {negation}")
    assert mixture["n_pairs"] >= 150 and mixture["metric"] == "union"
    assert mixture["estimate"] >= 0.62 and mixture["p_value"] < 1e-4, mixture
    assert mixture["mean_human"] > mixture["mean_perturbed"] + 0.05, mixture
    assert negation["estimate"] >= 0.8 and negation["accuracy"] >= 0.7, negation


def test_union_training_metadata_and_checkpoint_round_trip(union_model, tmp_path, human):
    from storyeval.learn.union import HEADS_FILE
    from storyeval.learn.union_scoring import UnionScorer

    directory = union_model.directory
    meta = read_metadata(directory)
    assert meta["kind"] == "union"
    assert Signature.from_dict(meta["signature"]) == union_model.signature
    fields = union_model.signature.fields
    assert fields["encoder"].startswith("all-MiniLM-L6-v2@")
    assert fields["techniques"] == "repetition,substitution,reordering,negation"
    assert fields["recon"] is True and fields["lambda"] == 0.1 and fields["seed"] == 1
    assert len(fields["data"]) == 12 and fields["stories"] == 40  # 5 of 45 held out for dev
    training = meta["training"]
    assert training["best_dev"]["loss"] == min(h["loss"] for h in training["history"])
    assert not (directory / "checkpoint").exists() and (directory / HEADS_FILE).is_file()
    # the saved model scores exactly like the trained model in memory (on texts within the
    # 48-token input: longer ones are scored in sentence windows, not as one input); the
    # in-memory scores were computed by the test process that trained it, right after
    from unionhelpers import union_round_trip_stories

    stories = union_round_trip_stories(human)
    in_memory = json.loads((directory.parent / "in_memory.json").read_text())
    reloaded = UnionScorer(directory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = reloaded.score(stories)
    assert scores == pytest.approx(in_memory, abs=1e-5)
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert UnionScorer(copy).score(stories) == pytest.approx(scores, abs=1e-6)
    assert all(0.0 <= s <= 1.0 for s in scores)


def test_union_retraining_reuses_or_refuses(union_model, union_recipe, human, nlp):
    from storyeval.learn.union import UnionConfig, train_union

    settings, training = union_recipe
    again = train_union(
        human[:45],
        union_model.directory,
        config=UnionConfig(**settings),
        training=TrainingConfig(**training),
        progress=False,
        nlp=nlp,
    )
    assert again.reused and again.signature == union_model.signature
    with pytest.raises(OutputDirectoryError, match=r"other settings \(differs in lr\)"):
        train_union(
            human[:45],
            union_model.directory,
            config=UnionConfig(**settings),
            training=TrainingConfig(**{**training, "learning_rate": 3e-5}),
            progress=False,
            nlp=nlp,
        )


def test_score_cli_with_union_metric(union_model, examples_dir, tmp_path, run_cli):
    out = tmp_path / "scores.jsonl"
    stories = examples_dir / "human.jsonl"  # the command's plumbing: one system's 60 stories
    code, _, stderr = run_cli(
        "score",
        str(stories),
        "--metrics",
        "union",
        "--option",
        f"union.model={union_model.directory}",
        "-o",
        str(out),
        "--bootstrap",
        "100",
        "--no-progress",
    )
    assert code == 0, stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 60 and {r["metric"] for r in rows} == {"union"}
    assert all(0.0 <= r["value"] <= 1.0 for r in rows)
    signature = rows[0]["signature"]
    assert signature.startswith("union|model:model@") and "|techniques:" in signature
    code, _, stderr = run_cli("score", str(stories), "--metrics", "union", "-o", str(out))
    assert code == 2 and "union.model" in stderr


def test_union_metric_is_registered_with_its_metadata():
    from storyeval.metrics import get_metric

    spec = get_metric("union")
    assert spec.higher_is_better is True and spec.value_range == (0.0, 1.0)
    assert "model" in spec.option_map and spec.option_map["model"].required
    assert spec.runnable_offline()[0] is False  # needs a trained model: not in the default suite


def test_loaders_refuse_models_without_the_needed_head(union_model, nsp_model, encoder):
    from storyeval.learn.nsp import NspScorer, has_nsp_head
    from storyeval.learn.union_scoring import UnionScorer

    with pytest.raises(ModelLoadError, match="no UNION heads"):
        UnionScorer(nsp_model.directory)
    with pytest.raises(ModelLoadError, match="no UNION heads"):
        UnionScorer(encoder.path)
    with pytest.raises(ModelLoadError, match="no next-sentence-prediction head"):
        NspScorer(union_model.directory)
    with pytest.raises(ModelLoadError, match="no next-sentence-prediction head"):
        NspScorer(encoder.path)
    assert has_nsp_head(nsp_model.directory) and not has_nsp_head(encoder.path)


def test_cross_nsp_directory_loads_with_transformers(nsp_cross_model):
    from transformers import BertForNextSentencePrediction

    from storyeval.learn.nsp import NspScorer

    model = BertForNextSentencePrediction.from_pretrained(str(nsp_cross_model.directory))
    assert model.cls.seq_relationship.out_features == 2
    meta = read_metadata(nsp_cross_model.directory)
    assert meta["kind"] == "nsp" and meta["config"]["is_next_label"] == 0
    signature = Signature.from_dict(meta["signature"])
    assert signature.fields["max_steps"] == 3 and signature.fields["architecture"] == "cross"
    scorer = NspScorer(nsp_cross_model.directory)
    assert scorer.architecture == "cross"
    pairs = [("He opened the door.", "It was dark inside."), ("He opened the door.", "Stocks.")]
    probabilities = scorer.probabilities(pairs)
    assert len(probabilities) == 2 and all(0.0 <= p <= 1.0 for p in probabilities)
    model.eval()
    from storyeval.learn.encoding import encode_pair, pad_batch

    encoded = pad_batch([encode_pair(scorer.tokenizer, *pairs[0], 32)], 0)
    direct = model(**encoded).logits.softmax(dim=-1)[0, 0].item()
    assert probabilities[0] == pytest.approx(direct, abs=1e-5)


def test_auto_architecture_follows_the_base_checkpoint(nsp_cross_model, encoder):
    """A base whose checkpoint has trained NSP weights (like bert-base-uncased; here the cross
    model trained above) gets the cross head; the offline sentence encoder the siamese one."""
    from storyeval.learn.nsp import NspConfig, has_trained_nsp_head, resolve_architecture

    assert has_trained_nsp_head(nsp_cross_model.directory) is True
    assert has_trained_nsp_head(encoder.path) is False
    assert resolve_architecture(NspConfig(encoder=str(nsp_cross_model.directory))) == "cross"
    assert resolve_architecture(NspConfig()) == "siamese"
    assert resolve_architecture(NspConfig(architecture="cross")) == "cross"


def test_offline_encoder_gets_a_siamese_head(nsp_model):
    """all-MiniLM-L6-v2 has no trained NSP weights, so `auto` picks the siamese head: the
    directory holds the fine-tuned encoder and nsp_head.safetensors, and the head was started
    at the logistic fit of the untrained cosines (already above chance on dev)."""
    from transformers import AutoModel

    from storyeval.learn.nsp import HEAD_FILE, NspScorer

    directory = nsp_model.directory
    assert (directory / HEAD_FILE).is_file()
    assert nsp_model.signature.fields["architecture"] == "siamese"
    assert AutoModel.from_pretrained(str(directory)).config.model_type == "bert"
    initial = nsp_model.metadata["training"]["data"]["initial_dev"]
    assert set(initial) == {"loss", "accuracy"} and initial["loss"] < 0.693
    scorer = NspScorer(directory)
    assert scorer.architecture == "siamese"
    values = scorer.probabilities(
        [("He opened the door.", "It was dark inside."), ("He opened the door.", "Stocks.")]
    )
    assert all(0.0 <= p <= 1.0 for p in values)


def test_siamese_nsp_head_separates_unseen_sentence_pairs(human, nsp_model):
    """Trained for 16 steps on 45 stories, the head ranks the true next sentence above a
    random one for the same first sentence in the 15 held-out stories far above chance, and
    fine-tuning lowered the dev loss below that of the fitted initial head (seen here:
    pairwise 0.83 over 108 held-out pairs; dev loss 0.61 -> 0.59; after a whole epoch of 37
    steps, 0.83 and 0.61 -> 0.54, dev accuracy 0.70 -> 0.77)."""
    from scipy.stats import binomtest

    from storyeval.learn.nsp import NspScorer, nsp_pairs

    result = nsp_model
    initial = result.metadata["training"]["data"]["initial_dev"]
    assert result.dev["loss"] < initial["loss"]
    heldout = nsp_pairs(human[45:], seed=2024)
    scorer = NspScorer(result.directory)
    values = scorer.probabilities([(p.first, p.second) for p in heldout])
    true_pairs, random_pairs = values[0::2], values[1::2]
    assert all(p.label == 0 for p in heldout[0::2]) and all(p.label == 1 for p in heldout[1::2])
    wins = sum(t > r for t, r in zip(true_pairs, random_pairs, strict=True))
    n = len(true_pairs)
    print(f"\nNSP held-out pairwise {wins}/{n} = {wins / n:.3f}; dev {initial} -> {result.dev}")
    assert n >= 80 and wins / n >= 0.7, (wins, n)
    assert binomtest(wins, n, 0.5, alternative="greater").pvalue < 1e-4


def test_training_resumes_after_interruption(human, tmp_path, tiny_models):
    """Interrupt at step 3, resume: the result equals an uninterrupted run exactly (the
    mechanics, on a two-layer BERT with the offline encoder's tokenizer)."""
    import torch
    from safetensors.torch import load_file

    from storyeval.learn.nsp import NspConfig, train_nsp

    directory = tmp_path / "resumed"

    def interrupt(step: int) -> None:
        if step == 3:
            raise KeyboardInterrupt

    args = {
        "config": NspConfig(**NSP_SETTINGS, encoder=str(tiny_models["encoder"])),
        "training": TrainingConfig(**NSP_TRAINING),
        "progress": False,
    }
    uninterrupted = train_nsp(human[:12], tmp_path / "straight", **args)
    with pytest.raises(TrainingInterrupted, match=r"step 3 of 6.*run the same command again"):
        train_nsp(human[:12], directory, on_step=interrupt, **args)
    assert (directory / "checkpoint" / "state.pt").is_file()
    with pytest.raises(ModelLoadError, match="has not finished"):
        read_metadata(directory)
    result = train_nsp(human[:12], directory, **args)
    assert result.resumed and result.metadata["training"]["steps"] == 6
    assert result.signature == uninterrupted.signature
    resumed = load_file(str(directory / "model.safetensors"))
    straight = load_file(str(uninterrupted.directory / "model.safetensors"))
    assert resumed.keys() == straight.keys()
    for key in straight:
        assert torch.allclose(resumed[key], straight[key], atol=1e-6), key
    assert result.metadata["training"]["history"] == [
        {**h, "seconds": result.metadata["training"]["history"][i]["seconds"]}
        for i, h in enumerate(uninterrupted.metadata["training"]["history"])
    ]


def test_corpus_too_small_to_split(write_file, run_cli):
    from storyeval.learn.nsp import train_nsp
    from storyeval.learn.union import train_union

    few = [Story(str(i), "", f"Sentence {i}. Another one {i}.") for i in range(3)]
    with pytest.raises(InsufficientDataError, match="3 stories is too small to split"):
        train_union(few, "/nonexistent/never-written", progress=False)
    with pytest.raises(InsufficientDataError, match="too small"):
        train_nsp(few, "/nonexistent/never-written", progress=False)
    path = write_file(
        "few.jsonl", "".join(json.dumps({"id": s.id, "story": s.story}) + "\n" for s in few)
    )
    code, _, stderr = run_cli("train", "union", "--stories", str(path), "-o", str(path) + ".d")
    assert code == 2 and "too small to split" in stderr and "at least 6" in stderr


def test_cli_train_union_and_nsp_end_to_end(human, tmp_path, run_cli):
    source = tmp_path / "human.jsonl"
    source.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in human[:8]))
    union_dir = tmp_path / "union"
    args = ["--stories", str(source), "-o", str(union_dir), "--max-steps", "2", "--epochs", "1"]
    code, stdout, stderr = run_cli(
        "train",
        "union",
        *args,
        "--max-length",
        "32",
        "--window",
        "3",
        "--no-recon",
        "--without",
        "negation",
        "--seed",
        "5",
        "-q",
    )
    assert code == 0, stderr
    assert "signature: union|encoder:all-MiniLM-L6-v2@" in stdout
    assert "|techniques:repetition,substitution,reordering|recon:no|" in stdout
    meta = read_metadata(union_dir)
    assert meta["training"]["steps"] == 2 and meta["config"]["reconstruction"] is False
    code, stdout, _ = run_cli(
        "train",
        "union",
        *args,
        "--max-length",
        "32",
        "--window",
        "3",
        "--no-recon",
        "--without",
        "negation",
        "--seed",
        "5",
        "-q",
    )
    assert code == 0 and "already trained with these settings" in stdout
    nsp_dir = tmp_path / "nsp"
    code, stdout, stderr = run_cli(
        "train",
        "nsp",
        "--stories",
        str(source),
        "-o",
        str(nsp_dir),
        "--max-steps",
        "2",
        "--max-length",
        "32",
        "-q",
    )
    assert code == 0, stderr
    assert "signature: nsp|encoder:all-MiniLM-L6-v2@" in stdout
    assert "|architecture:siamese|" in stdout
    assert "dev (before fine-tuning): loss" in stdout
    assert (nsp_dir / "model.safetensors").is_file() and (nsp_dir / "storyeval.json").is_file()
    assert (nsp_dir / "nsp_head.safetensors").is_file()
    code, _, stderr = run_cli(
        "train", "nsp", "--stories", str(source), "-o", str(tmp_path / "x"), "--architecture", "x"
    )
    assert code == 2 and "architecture must be one of auto, cross, siamese" in stderr


@pytest.mark.parametrize("fixture", ["nsp_model", "nsp_cross_model"])
def test_trained_nsp_head_serves_the_coherence_metrics(
    fixture, request, examples_dir, tmp_path, run_cli
):
    """The contract with the metric suite: nsp_prompt / nsp_prev load the trained directory,
    siamese or cross."""
    nsp_model = request.getfixturevalue(fixture)
    source = tmp_path / "few.jsonl"
    source.write_text("".join((examples_dir / "stories.jsonl").read_text().splitlines(True)[:6]))
    out = tmp_path / "nsp.jsonl"
    code, _, stderr = run_cli(
        "score",
        str(source),
        "--metrics",
        "nsp_prompt,nsp_prev",
        "--option",
        f"nsp.model={nsp_model.directory}",
        "-o",
        str(out),
        "--bootstrap",
        "50",
        "--no-progress",
    )
    assert code == 0, stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["metric"] for r in rows} == {"nsp_prompt", "nsp_prev"} and len(rows) == 12
    assert all(0.0 <= r["value"] <= 1.0 for r in rows)


def test_unreachable_base_model_names_the_model_flag(human, tmp_path, monkeypatch):
    from storyeval.learn.nsp import NspConfig, train_nsp
    from storyeval.learn.union import UnionConfig, train_union
    from storyeval.models import loading

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loading._hub_reachable.cache_clear()
    try:
        with pytest.raises(ModelLoadError, match=r"'bert-base-uncased'.*e\.g\. --model=/path"):
            train_nsp(human[:12], tmp_path / "n", config=NspConfig(encoder="bert-base-uncased"))
        with pytest.raises(ModelLoadError, match=r"e\.g\. --model=/path"):
            train_union(human[:12], tmp_path / "u", config=UnionConfig(encoder="bert-base-uncased"))
    finally:
        loading._hub_reachable.cache_clear()
    assert not (tmp_path / "n").exists() and not (tmp_path / "u").exists()


def test_union_negatives_are_cached_and_can_come_from_a_perturb_file(
    human, nlp, tmp_path, monkeypatch
):
    import json

    from storyeval.learn.union import UnionConfig, cached_examples, examples_from_file
    from storyeval.perturb import perturb_stories

    monkeypatch.setenv("STORYEVAL_CACHE", str(tmp_path / "cache"))
    train, dev = human[:6], human[6:8]
    config = UnionConfig()
    first = cached_examples(train, dev, config, seed=3, nlp=nlp)
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 1, "the negatives were written to the cache"
    assert cached_examples(train, dev, config, seed=3, nlp=nlp) == first  # read back, equal
    assert cached_examples(train, dev, config, seed=4, nlp=nlp) != first  # another seed: drawn
    run = perturb_stories(train, mode="mix", seed=1, nlp=nlp, skip_inapplicable=True)
    path = tmp_path / "negatives.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in run.records()))
    examples, missing = examples_from_file(train, path)
    negatives = [e for e in examples if e.label == 0]
    assert len(negatives) == len(run.stories) and not set(missing) & {
        e.source_id for e in negatives
    }
    assert all(e.original == next(s.story for s in train if s.id == e.source_id) for e in negatives)
    from storyeval.learn.union import train_union

    for setting in ({"delexicalize": True}, {"window": 2}):
        # positives prepared, the file's negatives raw: a shortcut the model would learn
        with pytest.raises(ValueError, match="a negatives file cannot be used with"):
            train_union(train, tmp_path / "m", config=UnionConfig(**setting), negatives=path)  # type: ignore[arg-type]


@pytest.mark.slow
def test_bfloat16_training_runs_and_is_in_the_signature(human, nlp, tmp_path):
    import warnings

    from storyeval.learn import TrainingConfig
    from storyeval.learn.union import UnionConfig, train_union

    training = TrainingConfig(epochs=1, max_steps=2, batch_size=4, precision="bfloat16", seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = train_union(
            human[:12],
            tmp_path / "u",
            config=UnionConfig(max_length=32),
            training=training,
            progress=False,
            nlp=nlp,
        )
    assert result.signature.fields["precision"] == "bfloat16"
    assert result.metadata["training"]["steps"] == 2
    assert "precision" not in TrainingConfig().signature_fields()  # float32 signatures unchanged
    with pytest.raises(ValueError, match="precision must be float32 or bfloat16"):
        TrainingConfig(precision="float16")


def test_length_buckets_cover_every_example_once_and_pad_little():
    import random

    from storyeval.learn.trainer import _batches

    rng = random.Random(0)
    lengths = [rng.randint(20, 400) for _ in range(1003)]
    bucketed = _batches(len(lengths), 10, 7, 0, lengths)
    plain = _batches(len(lengths), 10, 7, 0)
    for batches in (bucketed, plain):
        assert sorted(i for batch in batches for i in batch) == list(range(1003))

    def padding(batches):  # padded positions, the waste dynamic padding leaves
        return sum(
            max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches
        )

    assert padding(bucketed) < 0.1 * padding(plain)
    assert bucketed == _batches(len(lengths), 10, 7, 0, lengths)  # seeded
    assert bucketed != _batches(len(lengths), 10, 7, 1, lengths)  # a new order every epoch
    assert TrainingConfig().signature_fields()["bucket"] == "length"
    assert "bucket" not in TrainingConfig(bucket=False).signature_fields()


def test_sampled_reconstruction_softmax_keeps_every_target_and_bounds_the_full_loss():
    import torch

    from storyeval.learn.union import (
        UnionConfig,
        UnionExample,
        UnionTask,
        _base_encoder,
        _union_model_class,
    )

    original = "Kim baked bread for her friends. They ate it warm."
    batch = [
        UnionExample(
            "a", "", "Kim did not bake bread for her friends. They ate it warm.", original, 0
        ),
        UnionExample("b", "", "They ate it warm. Kim baked bread for her friends.", original, 0),
        UnionExample("c", "", original, original, 1),
    ]
    encoder, tokenizer, _ = _base_encoder(None)
    torch.manual_seed(0)
    model = _union_model_class()(encoder, True).eval()
    full = UnionTask(model, tokenizer, UnionConfig(max_length=32, recon_sample=None))
    sampled = UnionTask(model, tokenizer, UnionConfig(max_length=32, recon_sample=256))
    with torch.no_grad():
        _, full_recon, _, _ = full._losses(batch, sampled=True)  # None: the full softmax
        _, exact_recon, _, _ = full._losses(batch)
        _, sampled_recon, _, _ = sampled._losses(batch, sampled=True)
    assert torch.equal(full_recon, exact_recon)
    # a softmax over a subset that holds the target: each token's loss can only shrink
    assert bool((sampled_recon <= full_recon + 1e-5).all()) and bool((sampled_recon > 0).all())
    tensors = sampled._tensors(batch)
    wanted = tensors["recon"][2]
    vocabulary, positions = sampled._sampled_vocabulary(tensors["host_input_ids"], wanted)
    assert len(wanted) > 10  # every target is in the vocabulary:
    assert vocabulary[positions].tolist() == wanted
    assert len(vocabulary) < 0.05 * model.reconstructor.out_features
    model.zero_grad()
    sampled._losses(batch, sampled=True)[3].backward()
    touched = model.reconstructor.weight.grad.abs().sum(dim=1).nonzero().flatten()
    assert len(touched) < 0.05 * model.reconstructor.out_features
    with pytest.raises(ValueError, match="recon_sample must be an integer >= 0 or None"):
        UnionConfig(recon_sample=-1)
    assert UnionConfig.from_dict({"techniques": ["negation"]}).recon_sample is None  # 0.1 models


def test_tied_reconstruction_head_keeps_checkpoints_and_heads_small(human, nlp, tmp_path):
    from storyeval.learn.union import HEADS_FILE, UnionConfig, train_union
    from storyeval.learn.union_scoring import load_union

    sizes: dict[int, int] = {}
    state = tmp_path / "u" / "checkpoint" / "state.pt"

    def on_step(step: int) -> None:  # the checkpoint of the step before is on disk
        if state.is_file():
            sizes[step] = state.stat().st_size

    training = TrainingConfig(epochs=1, max_steps=3, batch_size=4, seed=1, save_every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = train_union(
            human[:12],
            tmp_path / "u",
            config=UnionConfig(max_length=32),
            training=training,
            progress=False,
            nlp=nlp,
            on_step=on_step,
        )
    model = result.model
    assert model.tied  # the decoder is the input embedding matrix, not a copy
    unique = sum(p.numel() for p in model.parameters())  # shared parameters counted once
    # weights, AdamW's two moments, a little bookkeeping: no second vocabulary matrix
    assert sizes and max(sizes.values()) < 3.05 * 4 * unique, (sizes, unique)
    assert (tmp_path / "u" / HEADS_FILE).stat().st_size < 200_000  # bias + classifier only
    assert result.signature.fields["recon_tied"] is True
    assert result.signature.fields["recon_softmax"] == "sampled:1024"
    scorer = load_union(result.directory)
    assert scorer.model.tied
    embeddings = scorer.model.encoder.get_input_embeddings().weight
    assert scorer.model.reconstructor.weight.data_ptr() == embeddings.data_ptr()


def test_readme_per_technique_check_on_heldout_windows(union_model, human, tmp_path, run_cli):
    """The README's check: each technique's negatives of unseen stories against the stories,
    from the command line, with a one-sided sign (binomial) test per technique."""
    import pandas as pd
    from scipy.stats import binomtest

    from storyeval.learn.union import sentence_windows

    heldout = tmp_path / "heldout.jsonl"
    windows = sentence_windows(human[45:], 2, stride=1)
    heldout.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in windows))
    negatives = tmp_path / "heldout-neg.jsonl"
    code, _, stderr = run_cli(
        "perturb", str(heldout), "--each", "--seed", "7", "-o", str(negatives), "-q"
    )
    assert code == 0, stderr
    model = f"union.model={union_model.directory}"
    for source, out in ((heldout, "s-human.jsonl"), (negatives, "s-neg.jsonl")):
        code, _, stderr = run_cli(
            "score", str(source), "--metrics", "union", "--option", model,
            "-o", str(tmp_path / out), "--no-progress",
        )  # fmt: skip
        assert code == 0, stderr

    def discriminate(by: str) -> pd.DataFrame:
        table = tmp_path / f"per-{by}.csv"
        code, _, stderr = run_cli(
            "discriminate", "-s", str(tmp_path / "s-human.jsonl"), "-s", str(tmp_path / "s-neg.jsonl"),
            "--perturbed", str(negatives), "--by", by, "-o", str(table),
        )  # fmt: skip
        assert code == 0, stderr
        return pd.read_csv(table).set_index("group")

    rows = discriminate("techniques")
    print(f"\nper technique on held-out windows:\n{rows[['n_pairs', 'estimate', 'p_value']]}")
    assert set(rows.index) == {"(all)", "repetition", "substitution", "reordering", "negation"}
    for _, row in rows.iterrows():
        decided = int(row["wins"] + row["losses"])
        expected = binomtest(int(row["wins"]), decided, 0.5, alternative="greater").pvalue
        assert row["p_value"] == pytest.approx(expected, rel=1e-6)
    assert rows.loc["negation", "n_pairs"] >= 60
    assert rows.loc["negation", "estimate"] > 0.8 and rows.loc["negation", "p_value"] < 1e-6
    # seen: repetition 0.70 (p = 1e-5), and 0.62 (p = 0.011) once 2 of the 246 training
    # negatives (edits past the 48-token cut) were left out and the batches shifted; substitution
    # and reordering near 0.5 on 45 stories
    assert rows.loc["repetition", "p_value"] < 0.05
    operations = discriminate("operations")
    assert {"ngram_repetition", "sentence_repetition", "reorder"} <= set(operations.index)
    repeated = operations.loc[["ngram_repetition", "sentence_repetition"], "n_pairs"].sum()
    assert repeated == rows.loc["repetition", "n_pairs"]  # each repetition edit is one of two


def test_union_scores_a_long_story_in_sentence_windows_never_cut(union_model, human):
    """A story longer than the model's 48 tokens: every token of it is read, in windows of
    whole sentences, and its score is the token-weighted mean of the windows' scores."""
    import torch

    from storyeval.learn.encoding import pad_batch, pad_id
    from storyeval.learn.union import UnionTask
    from storyeval.learn.union_scoring import load_union
    from storyeval.text import TruncationWarning

    scorer = load_union(union_model.directory)
    story = max(human, key=lambda s: len(s.story))
    with pytest.warns(TruncationWarning, match="windows of whole sentences"):
        [score] = scorer.score([story])
    prepared = scorer._prepare([story])[0]
    task = UnionTask(scorer.model, scorer.tokenizer, scorer.config)
    windows = scorer._windows(task, prepared)
    assert len(windows) > 2 and not any(w.cut_second for w in windows)
    read = []
    for k, window in enumerate(windows):
        part = 1 if k == 0 and prepared.prompt.strip() else 0
        read += [
            token
            for token, special, kind in zip(
                window.input_ids, window.special, window.token_type_ids, strict=True
            )
            if not special and kind == part
        ]
    expected = scorer.tokenizer(prepared.story, add_special_tokens=False)["input_ids"]
    assert read == expected, "the windows read every token of the story, once"
    with torch.no_grad():
        logits, _ = scorer.model(
            **{
                k: v
                for k, v in pad_batch(windows, pad_id(scorer.tokenizer)).items()
                if k != "token_type_ids"
            },
            token_type_ids=pad_batch(windows, pad_id(scorer.tokenizer))["token_type_ids"],
        )
    values = torch.sigmoid(logits).tolist()
    sizes = [len(w.input_ids) for w in windows]
    assert score == pytest.approx(
        sum(v * n for v, n in zip(values, sizes, strict=True)) / sum(sizes), abs=1e-6
    )
    assert "long:sentence-windows" in scorer.signature.render()


def test_batches_pad_to_a_multiple_within_the_limit():
    """On a GPU UNION pads its batches to steps of 64 tokens (few shapes, so few kernel
    set-ups), never past its max_length unless a row is longer; the CPU pads to the longest."""
    from storyeval.learn.encoding import Encoded, pad_batch_on_host

    def rows(*lengths: int) -> list[Encoded]:
        return [Encoded([7] * n, [0] * n, [False] * n, False) for n in lengths]

    def width(*lengths: int, **options: int) -> int:
        return int(pad_batch_on_host(rows(*lengths), 0, **options)["input_ids"].shape[1])

    assert width(3, 70) == 70
    assert (
        width(3, 70, multiple=64, limit=256) == 128 and width(3, 250, multiple=64, limit=256) == 256
    )
    assert width(3, 300, multiple=64, limit=256) == 300 and width(3, 70, multiple=64) == 128
    host = pad_batch_on_host(rows(2, 5), 9, multiple=4)
    assert host["input_ids"].tolist() == [[7, 7, 9, 9, 9, 9, 9, 9], [7] * 5 + [9] * 3]
    assert host["attention_mask"].tolist() == [[1, 1, 0, 0, 0, 0, 0, 0], [1] * 5 + [0] * 3]


def test_union_editing_behaviour_of_appendix_d(union_model, human, tmp_path, run_cli):
    """Guan & Huang (2020), Appendix D: a story is edited when the reconstruction head
    predicts some token of it otherwise; checked against the head run by hand."""
    import torch

    from storyeval.corpus import read_scores
    from storyeval.learn.encoding import pad_batch, pad_id
    from storyeval.learn.union import UnionTask, sentence_windows
    from storyeval.learn.union_edits import story_positions, union_edits
    from storyeval.learn.union_scoring import UnionScorer

    scorer = UnionScorer(union_model.directory)
    task = UnionTask(scorer.model, scorer.tokenizer, scorer.config)
    windows = sentence_windows(human[45:], 2, stride=2)
    fitting = [w for w in windows if not task._encode(w.prompt, w.story).cut_second]
    stories = [human[45], *fitting[:4]]  # a long story (read in windows) and four that fit
    edits = union_edits(scorer, stories, batch_size=3)
    assert [e.item_id for e in edits] == [s.id for s in stories]
    assert edits[0].tokens > scorer.config.max_length  # every window of it was read
    assert sum(e.edited for e in edits) >= 1
    story = stories[1]
    encoded = task._encode(story.prompt, story.story)
    positions = story_positions(encoded.special, bool(scorer.config.use_prompt and story.prompt))
    tensors = pad_batch([encoded], pad_id(scorer.tokenizer))
    with torch.no_grad():
        _, logits = scorer.model(
            tensors["input_ids"], tensors["attention_mask"], tensors["token_type_ids"],
            positions=(torch.zeros(len(positions), dtype=torch.long), torch.tensor(positions)),
        )  # fmt: skip
    guesses = logits.argmax(-1).tolist()
    changed = sum(g != encoded.input_ids[p] for g, p in zip(guesses, positions, strict=True))
    assert edits[1].changed_tokens == changed and edits[1].tokens == len(positions)
    assert edits[1].edited == (changed > 0)
    stories_file = tmp_path / "s.jsonl"
    stories_file.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in stories))
    code, out, err = run_cli(
        "union-edits", str(stories_file), "--model", str(union_model.directory),
        "-o", str(tmp_path / "edits.jsonl"),
    )  # fmt: skip
    assert code == 0, out + err
    scores = read_scores(tmp_path / "edits.jsonl")
    assert {s.metric for s in scores} == {"union_edited", "union_changed"}
    assert [s.value for s in scores if s.metric == "union_edited"] == [
        float(e.edited) for e in edits
    ]
    scorer.model.reconstructor = None  # a model trained without it (-Recon)
    with pytest.raises(StoryevalError, match="-Recon"):
        union_edits(scorer, stories)
