"""Every model path on a GPU gives the CPU's numbers (see conftest.py: ``fake-cuda`` on every
machine, ``cuda`` on a real card)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from devicecheck import close  # type: ignore[import-not-found]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stories(examples_dir: Path) -> list[Any]:
    from storyeval.corpus import read_stories

    every = read_stories(examples_dir / "stories.jsonl")
    chosen = [s for s in every if s.system == "human"][:6]
    chosen += [s for s in every if s.system == "smollm2-p0.9"][:6]
    return chosen


def _values(run: Any, metric: str) -> list[float]:
    return [s.value for s in run.scores if s.metric == metric]


HALF_TOLERANCE = {"bfloat16": 5e-2, "float16": 2e-2}

ENCODER_METRICS = (
    "bertscore_f",
    "bertscore_prompt",
    "embedding_coherence",
    "moverscore",
    "sms",
)


def test_encoder_metrics_and_perplexity(
    gpu: str, stories: list[Any], tiny_models: dict[str, Path]
) -> None:
    """The shared encoder pass (with its warm-up: the crash an H200 found), contextual mover
    metrics and perplexity, on the GPU and on the CPU."""
    from storyeval.metrics import score_stories

    alone = {"bertscore.model": str(tiny_models["encoder"]), "bertscore.layer": "1"}
    first = score_stories(  # below the top layer, on a model never run: the warm-up runs
        stories, "bertscore_f", options=alone, bootstrap=0, missing="skip", device="cuda"
    )
    assert len(first.scores) == 6
    import importlib.util

    needs = {"sms": ("spacy", "ot"), "moverscore": ("ot",)}  # not on every GPU image
    chosen = [
        m for m in ENCODER_METRICS if all(importlib.util.find_spec(p) for p in needs.get(m, ()))
    ]
    names = ",".join([*chosen, "perplexity"])
    options = {
        "encoder.model": str(tiny_models["encoder"]),
        "bertscore.layer": "1",
        "sms.embeddings": "contextual",
        "sms.model": str(tiny_models["encoder"]),
        "perplexity.model": str(tiny_models["lm"]),
    }
    runs = {
        device: score_stories(
            stories, names, options=options, bootstrap=0, missing="skip", device=device
        )
        for device in ("cuda", "cpu")  # the GPU first: a model's first run is on it
    }
    for name in names.split(","):
        close(_values(runs["cuda"], name), _values(runs["cpu"], name), gpu)
    assert "device:cuda" in runs["cuda"].metrics["bertscore_f"].signature.render()


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_half_precision_on_the_gpu_is_close_and_signed(
    gpu: str, precision: str, stories: list[Any], tiny_models: dict[str, Path]
) -> None:
    from storyeval.metrics import score_stories

    options = {
        "bertscore.model": str(tiny_models["encoder"]),
        "perplexity.model": str(tiny_models["lm"]),
    }
    half = score_stories(
        stories,
        "bertscore_f,perplexity",
        options=options,
        bootstrap=0,
        device="cuda",
        precision=precision,
        missing="skip",
    )
    cpu = score_stories(
        stories, "bertscore_f,perplexity", options=options, bootstrap=0, missing="skip"
    )
    for name in ("bertscore_f", "perplexity"):
        got, want = np.array(_values(half, name)), np.array(_values(cpu, name))
        if gpu == "cuda":  # the guide's tolerances against float32 on the CPU
            np.testing.assert_allclose(got, want, rtol=HALF_TOLERANCE[precision])
        assert f"precision:{precision}" in half.metrics[name].signature.render()


def test_mauve_features_on_the_gpu(
    gpu: str, stories: list[Any], tiny_models: dict[str, Path]
) -> None:
    from storyeval import functional as F

    texts = [s.story for s in stories]
    for features in ("encoder", "causal-lm"):
        model = str(tiny_models["encoder" if features == "encoder" else "lm"])
        on_gpu = F.mauve_features(texts, features=features, model=model, device="cuda")
        on_cpu = F.mauve_features(texts, features=features, model=model)
        close(on_gpu.features, on_cpu.features, gpu)


def test_functional_metrics_take_a_device(
    gpu: str, stories: list[Any], tiny_models: dict[str, Path]
) -> None:
    from storyeval import functional as F

    texts = [s.story for s in stories]
    prompts = [s.prompt for s in stories]
    encoder, lm = str(tiny_models["encoder"]), str(tiny_models["lm"])
    pairs = [
        (
            F.bertscore_prev(texts, prompts, model=encoder, device="cuda"),
            F.bertscore_prev(texts, prompts, model=encoder),
        ),
        (
            F.perplexity(texts, prompts, model=lm, device="cuda"),
            F.perplexity(texts, prompts, model=lm),
        ),
    ]
    for on_gpu, on_cpu in pairs:
        close(on_gpu.values, on_cpu.values, gpu)
        assert on_gpu.signature.fields["device"] == "cuda"


def test_judge_probabilities_and_written_answers(
    gpu: str,
    stories: list[Any],
    tiny_models: dict[str, Path],
    run_cli: Any,
    tmp_path: Path,
    examples_dir: Path,
) -> None:
    """The local judge reads label probabilities (prefix cache on and off) and writes answers
    on the GPU as on the CPU."""
    from storyeval.corpus import write_stories

    source = tmp_path / "stories.jsonl"
    write_stories(source, stories[:4])
    results = {}
    for device in ("cuda", "cpu"):
        for cache in ("--prefix-cache", "--no-prefix-cache"):
            out = tmp_path / f"{device}{cache}.jsonl"
            code, _, err = run_cli(
                "judge",
                str(source),
                "-o",
                str(out),
                "--model",
                str(tiny_models["lm"]),
                "--device",
                device,
                "--no-cache",
                cache,
            )
            assert code == 0, err
            results[(device, cache)] = [
                json.loads(line)["value"] for line in out.read_text().splitlines()
            ]
    close(results[("cuda", "--prefix-cache")], results[("cpu", "--prefix-cache")], gpu)
    close(
        results[("cuda", "--no-prefix-cache")],
        results[("cpu", "--prefix-cache")],
        gpu if gpu == "cuda" else "cuda",
    )


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_the_judge_in_half_precision_on_the_gpu(
    gpu: str,
    precision: str,
    stories: list[Any],
    tiny_models: dict[str, Path],
    run_cli: Any,
    tmp_path: Path,
) -> None:
    """The local judge's answers in half precision on the GPU: close to float32 on the CPU
    (the guide's tolerances) and signed with the precision they were made in."""
    from storyeval.corpus import write_stories

    source = tmp_path / "stories.jsonl"
    write_stories(source, stories[:4])
    records = {}
    for device, chosen in (("cuda", precision), ("cpu", "float32")):
        out = tmp_path / f"{device}.jsonl"
        code, _, err = run_cli(
            "judge", str(source), "-o", str(out), "--model", str(tiny_models["lm"]),
            "--device", device, "--precision", chosen, "--no-cache",
        )  # fmt: skip
        assert code == 0, err
        records[device] = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(f"precision:{precision}" in r["rater_id"] for r in records["cuda"])  # its signature
    if gpu == "cuda":
        np.testing.assert_allclose(
            [r["value"] for r in records["cuda"]],
            [r["value"] for r in records["cpu"]],
            rtol=HALF_TOLERANCE[precision],
        )


def test_generation_on_the_gpu(
    gpu: str, offline_lm: Any, run_cli: Any, tmp_path: Path, examples_dir: Path
) -> None:
    """The offline SmolLM2 (a random model never ends a sentence, which generation needs);
    sampling draws with a generator of the model's device, the same seed the same stories."""
    outputs = {}
    for run, device in enumerate(("cuda", "cuda", "cpu")):
        out = tmp_path / f"{run}.jsonl"
        code, _, err = run_cli(
            "generate", str(examples_dir / "human.jsonl"), "--limit", "1", "--top-k", "50",
            "--seed", "3", "--max-new-tokens", "32", "--max-attempts", "3", "--device", device,
            "--no-progress", "-o", str(out),
        )  # fmt: skip
        assert code == 0, err
        outputs[run] = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["story"] for r in outputs[0]] == [r["story"] for r in outputs[1]]
    assert len(outputs[0]) == len(outputs[2]) == 1
    assert (
        "device:cuda" in outputs[0][0]["signature"] and "device:cpu" in outputs[2][0]["signature"]
    )


def test_union_trains_and_scores_on_the_gpu_without_spacy(
    gpu: str,
    tiny_models: dict[str, Path],
    run_cli: Any,
    tmp_path: Path,
    examples_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``train union --negatives-file`` needs no spaCy (the H200 had none), trains on the GPU,
    and the trained model scores on the GPU as on the CPU."""
    import storyeval.models
    from storyeval.corpus import read_stories

    human = tmp_path / "human.jsonl"
    human.write_text(
        "".join((examples_dir / "human.jsonl").read_text().splitlines(keepends=True)[:20])
    )
    negatives = tmp_path / "negatives.jsonl"  # made without spaCy: each story repeated
    with open(negatives, "w", encoding="utf-8") as handle:
        for story in read_stories(human):
            record = {"id": f"{story.id}-neg", "source_id": story.id, "prompt": story.prompt}
            record |= {"story": f"{story.story} {story.story}", "techniques": ["repetition"]}
            handle.write(json.dumps(record) + "\n")

    def no_spacy(*args: Any, **kwargs: Any) -> Any:
        raise ImportError("spacy is missing")

    monkeypatch.setattr(storyeval.models, "load_spacy", no_spacy)
    model = tmp_path / "union"
    code, _, err = run_cli(
        "train",
        "union",
        "--stories",
        str(human),
        "--negatives-file",
        str(negatives),
        "-o",
        str(model),
        "--model",
        str(tiny_models["encoder"]),
        "--epochs",
        "1",
        "--max-steps",
        "3",
        "--max-length",
        "48",
        "--rank-weight",  # the ranking loss's pairs index the logits on the device
        "1",
        "--device",
        "cuda",
        "--threads",
        "2",
        "-q",
    )
    assert code == 0, err
    signature = json.loads((model / "storyeval.json").read_text())["signature"]
    assert signature["fields"].get("device") == "cuda", signature
    scores = {}
    for device in ("cuda", "cpu"):
        out = tmp_path / f"union-{device}.jsonl"
        code, _, err = run_cli(
            "score",
            str(human),
            "--metrics",
            "union",
            "--option",
            f"union.model={model}",
            "--device",
            device,
            "--no-progress",
            "-o",
            str(out),
        )
        assert code == 0, err
        scores[device] = [json.loads(line)["value"] for line in out.read_text().splitlines()]
    close(scores["cuda"], scores["cpu"], gpu)


def test_nsp_trains_and_scores_on_the_gpu(
    gpu: str,
    stories: list[Any],
    tiny_models: dict[str, Path],
    run_cli: Any,
    tmp_path: Path,
    examples_dir: Path,
) -> None:
    human = tmp_path / "human.jsonl"
    human.write_text(
        "".join((examples_dir / "human.jsonl").read_text().splitlines(keepends=True)[:20])
    )
    model = tmp_path / "nsp"
    code, _, err = run_cli(
        "train", "nsp", "--stories", str(human), "-o", str(model), "--model",
        str(tiny_models["encoder"]), "--epochs", "1", "--max-steps", "2", "--device", "cuda",
        "--threads", "2", "-q",
    )  # fmt: skip
    assert code == 0, err
    from storyeval.metrics import score_stories

    options = {"nsp.model": str(model)}
    runs = {
        device: score_stories(stories, "nsp_prompt,nsp_prev", options=options, device=device, bootstrap=0)
        for device in ("cuda", "cpu")
    }  # fmt: skip
    for name in ("nsp_prompt", "nsp_prev"):
        close(_values(runs["cuda"], name), _values(runs["cpu"], name), gpu)


def test_robustness_paraphrases_and_curves_on_the_gpu(
    gpu: str, stories: list[Any], tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    """The paraphrase test (an LM rewriting, an encoder checking) and per-window curves."""
    from storyeval.analyses.curves import story_curves
    from storyeval.perturb.paraphrase import Paraphraser

    rewriter = Paraphraser(str(tiny_models["lm"]), str(tiny_models["encoder"]))
    sentence = "The keeper lit the lamp before the storm."
    found = {}
    for device in ("cuda", "cpu"):
        rewriter.place(device)
        samples = rewriter.samples(sentence, seed=1, n=2)
        found[device] = (samples, rewriter.similarities(sentence, samples))
    if gpu == "fake-cuda":
        assert found["cuda"] == found["cpu"]
    options = {"perplexity.model": str(tiny_models["lm"])}
    curves = {
        device: story_curves(stories[:4], ["perplexity"], options=options, device=device, window_words=40)[0]
        for device in ("cuda", "cpu")
    }  # fmt: skip
    close(curves["cuda"]["value"], curves["cpu"]["value"], gpu)


def test_nubia_features_on_the_gpu(
    gpu: str, stories: list[Any], tiny_models: dict[str, Path]
) -> None:
    from storyeval.learn.nubia import NubiaFeatures

    with_refs = [s for s in stories if s.references][:3]
    candidates = [". ".join(s.story.split(". ")[:2]) for s in with_refs]
    references = [". ".join(s.references[0].split(". ")[:2]) for s in with_refs]
    tables = {
        device: NubiaFeatures.load(
            encoder=str(tiny_models["encoder"]), lm=str(tiny_models["lm"]), device=device
        ).extract(candidates, references)
        for device in ("cuda", "cpu")
    }
    close(tables["cuda"].to_numpy(), tables["cpu"].to_numpy(), gpu)


def test_slogans_on_the_gpu(
    gpu: str, tiny_models: dict[str, Path], run_cli: Any, tmp_path: Path, nlp: Any
) -> None:
    """Slogan suggestions (spaCy tags the skeletons) from an LM on the GPU."""
    request = tmp_path / "slogan.jsonl"
    request.write_text(json.dumps({"id": "a", "keywords": ["boots", "hiking"], "draft": "Boots that walk further"}) + "\n")  # fmt: skip
    written = {}
    for device in ("cuda", "cpu"):
        out = tmp_path / f"slogans-{device}.jsonl"
        code, _, err = run_cli(
            "slogans", str(request), "-o", str(out), "--model", str(tiny_models["lm"]),
            "--device", device, "--suggestions", "1", "--beam", "2",
        )  # fmt: skip
        assert code == 0, err
        written[device] = json.loads(out.read_text())["suggestions"]
    if gpu == "fake-cuda":
        assert written["cuda"] == written["cpu"]


def test_engen_trains_scores_and_generates_on_the_gpu(
    gpu: str, run_cli: Any, tmp_path: Path, examples_dir: Path, nlp: Any
) -> None:
    """ENGEN (the thesis' settings: class-factored softmax, SGD) trains on the GPU as on the
    CPU, its mention scores match, and generation samples there with the seed's stories."""
    from storyeval.entities import detect_mentions
    from storyeval.tuning.engen import EngenConfig, EngenScorer, train_engen

    human = read_human(examples_dir)[:12]
    texts = detect_mentions([(s.id, s.story) for s in human], nlp=nlp)
    config = EngenConfig(epochs=1, hidden=16, embedding=8, classes=8, min_count=2, seed=3)
    device = "cuda"
    on_gpu = train_engen(texts, config=config, device=device, max_steps=3)
    on_cpu = train_engen(texts, config=config, device="cpu", max_steps=3)
    close(
        [on_gpu.history[0]["dev_word_nll"], on_gpu.history[0]["dev_entity_nll"]],
        [on_cpu.history[0]["dev_word_nll"], on_cpu.history[0]["dev_entity_nll"]],
        gpu,
    )
    assert on_gpu.signature.fields["device"] == "cuda"
    requests = [(texts[0].text[:40], "she", ""), (texts[0].text[:40], "the dog", "")]
    close(
        EngenScorer(on_gpu).bind(texts).score_mentions(requests),
        EngenScorer(on_cpu).bind(texts).score_mentions(requests),
        gpu,
    )
    model = on_gpu.save(tmp_path / "engen")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"id": s.id, "prompt": s.prompt}) + "\n" for s in human[:2])
    )
    stories = []
    for run, where in enumerate(("cuda", "cuda")):
        out = tmp_path / f"g{run}.jsonl"
        code, _, err = run_cli(
            "generate", str(prompts), "--model", str(model), "--top-p", "0.9", "--seed", "4",
            "--max-new-tokens", "80", "--device", where, "--no-progress", "-o", str(out),
        )  # fmt: skip
        assert code == 0, err
        stories.append([json.loads(line)["story"] for line in out.read_text().splitlines()])
    assert stories[0] == stories[1] and len(stories[0]) == 2


def read_human(examples_dir: Path) -> list[Any]:
    from storyeval.corpus import read_stories

    return read_stories(examples_dir / "human.jsonl")


def test_dask_runs_one_worker_on_the_card_with_the_local_numbers(
    gpu: str, tiny_models: dict[str, Path], run_cli: Any, tmp_path: Path, examples_dir: Path
) -> None:
    """``score --engine dask --num-gpus 1`` on a real card: the worker sees the card and its
    encoder and LM run there, with the numbers the local engine gives on the same card."""
    if gpu == "fake-cuda":
        pytest.skip(
            "Dask's worker processes do not inherit the simulated device: this runs on a real "
            "card (tests/test_engine.py checks one worker per GPU and its placement here)"
        )
    pytest.importorskip("distributed")
    args = [
        "score", str(examples_dir / "stories.jsonl"), "--metrics", "bertscore_f,perplexity",
        "--skip-missing", "--no-progress", "--block-size", "70", "--device", "cuda",
        "-O", f"bertscore.model={tiny_models['encoder']}",
        "-O", f"perplexity.model={tiny_models['lm']}",
    ]  # fmt: skip
    rows = {}
    for engine in ("local", "dask"):
        out = tmp_path / f"{engine}.jsonl"
        extra = ["--engine", "dask", "--num-gpus", "1"] if engine == "dask" else []
        code, _, err = run_cli(*args, *extra, "-o", str(out))
        assert code == 0, err
        rows[engine] = [json.loads(line) for line in out.read_text().splitlines()]
    key = [(r["item_id"], r["metric"]) for r in rows["local"]]
    assert [(r["item_id"], r["metric"]) for r in rows["dask"]] == key and len(key) > 100
    close([r["value"] for r in rows["dask"]], [r["value"] for r in rows["local"]], gpu)
    assert all("device:cuda" in r["signature"] for r in rows["dask"])


def test_reward_and_mle_training_on_the_gpu(
    gpu: str, tiny_models: dict[str, Path], tmp_path: Path, examples_dir: Path
) -> None:
    """``train mle`` gives the CPU's weights on the GPU (one step, no sampling), and ``train
    reward`` (GRPO, a perplexity reward) trains and signs its device there."""
    pytest.importorskip("trl")
    from storyeval import functional as F
    from storyeval.generate import read_prompts
    from storyeval.tuning.reward import RewardSpec, RewardTraining, train_mle, train_reward

    prompts = read_prompts(examples_dir / "human.jsonl")[:2]
    lm = str(tiny_models["lm"])
    texts = [p.references[0] for p in prompts]
    trained = {}
    for device in ("cuda", "cpu"):
        train_mle(prompts, tmp_path / f"mle-{device}", model=lm, steps=1, device=device)
        # both models scored on the CPU: the GPU's training, not its scoring, is compared
        trained[device] = F.perplexity(texts, model=str(tmp_path / f"mle-{device}")).values
    close(trained["cuda"], trained["cpu"], gpu)
    assert not np.allclose(trained["cpu"], F.perplexity(texts, model=lm).values)  # it moved
    settings = RewardTraining(steps=1, max_new_tokens=8, seed=0)
    result = train_reward(
        prompts,
        tmp_path / "reward",
        reward=RewardSpec("perplexity", {"model": lm}),
        model=lm,
        settings=settings,
        device="cuda",
    )
    assert np.isfinite(result.reward_before) and np.isfinite(result.reward_after)
    assert (tmp_path / "reward" / "config.json").is_file()


def test_bertscore_matching_on_the_gpu_equals_the_cpus(
    gpu: str, stories: list[Any], tiny_models: dict[str, Path]
) -> None:
    """Greedy matching runs batched on a GPU (pairs of different lengths, several references
    per story, idf weights) and gives the CPU's numbers."""
    from storyeval.metrics.context import EncoderCache
    from storyeval.metrics.embedding import Greedy, idf_weights
    from storyeval.models import load_encoder

    encoder = load_encoder(str(tiny_models["encoder"]))
    candidates = [s.story for s in stories]
    references = [[s.prompt, *s.references] for s in stories]
    results = {}
    for device in ("cuda", "cpu"):
        cache = EncoderCache(encoder, device=device)
        cache.request([*candidates, *(r for refs in references for r in refs)], [1])
        cache.run()
        idf = idf_weights(cache.token_ids(r) for refs in references for r in refs)
        greedy = Greedy(cache, 1, idf=idf)
        greedy.PAIRS_PER_BATCH = 5  # several batches, each with padding
        results[device] = greedy.all_best(candidates, references)
    assert results["cpu"].shape == (len(candidates), 3) and np.isfinite(results["cpu"]).all()
    close(results["cuda"], results["cpu"], gpu)


def test_the_encoder_cache_keeps_what_fits_on_the_gpu_and_the_rest_on_the_host(
    gpu: str, stories: list[Any], tiny_models: dict[str, Path]
) -> None:
    """Hidden states stay on the GPU up to the cache's budget; texts past it are kept on the
    host, and BERTScore over a mix of both gives the CPU's numbers."""
    import torch

    from storyeval.metrics.context import EncoderCache
    from storyeval.metrics.embedding import Greedy
    from storyeval.models import load_encoder

    encoder = load_encoder(str(tiny_models["encoder"]))
    first, second = [s.story for s in stories[:6]], [s.story for s in stories[6:]]
    references = [[s.prompt] for s in stories]
    cache = EncoderCache(encoder, device="cuda")
    cache._gpu_budget = 10**9  # room for the first texts
    cache.request(first, [1])
    cache.run()
    cache._gpu_budget = cache._gpu_bytes  # none for the rest
    cache.request([*second, *(r for refs in references for r in refs)], [1])
    cache.run()
    assert isinstance(cache.device_embeddings(first[0], 1), torch.Tensor)
    assert isinstance(cache._layers[second[0].strip()][1], np.ndarray)
    mixed = Greedy(cache, 1).all_best(first + second, references)
    on_cpu = EncoderCache(encoder)
    close(mixed, Greedy(on_cpu, 1).all_best(first + second, references), gpu)


@pytest.mark.parametrize("features", ["encoder", "causal-lm"])
def test_preference_models_train_score_and_judge_on_the_gpu(
    gpu: str, features: str, tiny_models: dict[str, Path], tmp_path: Path, examples_dir: Path
) -> None:
    """``train preference`` computes its features on the GPU (both kinds), stores them, and
    gives the CPU's model; the metric and the reward-model judge score there too."""
    from storyeval.corpus import read_judgments, read_stories
    from storyeval.judge import load_rubric
    from storyeval.judge.backends import Decoding
    from storyeval.judge.prompts import absolute_request
    from storyeval.learn.preference import PreferenceConfig, preference_data, train_preference
    from storyeval.learn.preference.judge import RewardModelJudge

    model = str(tiny_models["encoder" if features == "encoder" else "lm"])
    config = PreferenceConfig(criterion="coherence", features=features, model=model)  # type: ignore[arg-type]
    every = [  # the stories of 20 prompts (three systems each): the mechanics
        s for s in read_stories(examples_dir / "stories.jsonl") if s.extra["prompt_id"] <= "s020"
    ]
    ids = {s.id for s in every}
    ratings = [j for j in read_judgments(examples_dir / "judgments.jsonl") if j.item_id in ids]
    data = preference_data(every, ratings, config=config)
    trained = {
        device: train_preference(data, tmp_path / device, config=config, folds=0, device=device)
        for device in ("cuda", "cpu")
    }
    assert any((tmp_path / "cuda" / "features").rglob("chunk-*.npz"))
    sample = every[:8]
    close(trained["cuda"].score(sample, device="cuda"), trained["cpu"].score(sample), gpu)
    rubric = load_rubric("karpinska")
    criterion = next(c for c in rubric.criteria if c.name == "coherence")
    requests = [absolute_request(s, rubric, criterion) for s in sample]
    answers = {
        device: RewardModelJudge(str(tmp_path / "cpu"), device=device).answer(requests, Decoding())
        for device in ("cuda", "cpu")
    }
    close(
        [a.probabilities for a in answers["cuda"]], [a.probabilities for a in answers["cpu"]], gpu
    )


def test_a_reward_model_fine_tuned_on_the_gpu_scores_the_same_on_the_cpu(
    gpu: str, tiny_models: dict[str, Path], tmp_path: Path, examples_dir: Path
) -> None:
    """``train preference --fine-tune-epochs`` trains the encoder on the GPU; the encoder it
    saves scores the same on the GPU and the CPU."""
    from storyeval.corpus import read_judgments, read_stories
    from storyeval.learn.preference import PreferenceConfig, preference_data, train_preference
    from storyeval.models import load_encoder

    model = str(tiny_models["encoder"])
    config = PreferenceConfig(
        criterion="coherence", model=model, fine_tune_epochs=1, fine_tune_max_length=32
    )
    every = read_stories(examples_dir / "stories.jsonl")[:30]
    ids = {s.id for s in every}
    ratings = [j for j in read_judgments(examples_dir / "judgments.jsonl") if j.item_id in ids]
    data = preference_data(every, ratings, config=config)
    trained = train_preference(data, tmp_path / "tuned", config=config, folds=0, device="cuda")
    base = load_encoder(model).model.state_dict()
    tuned = load_encoder(str(tmp_path / "tuned" / "encoder")).model.state_dict()
    assert any(not np.allclose(base[name], tuned[name]) for name in base)
    sample = every[:8]
    close(trained.score(sample, device="cuda"), trained.score(sample), gpu)
