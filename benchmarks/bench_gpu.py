"""GPU speed, as ratios measured in one run on one card (issue 25): storyeval against the bare
model call that does the same work, on random-initialised models of real sizes built from
configs (nothing downloaded; the tokenizers are the offline models', or a folder of them).

Parts and targets:

* ``bertscore``: BERTScore of N stories against their references, against one bare encoder
  pass over the same texts (batch 64): >= 0.8x the bare throughput;
* ``perplexity``: storyeval's perplexity against a bare forward pass over the same tokens
  with log-softmax and gather (batch 64): >= 0.8x;
* ``judge``: the local judge's probabilities (the default rubric) against a bare batched
  prefill of the same prompts (batch 48, left-padded, last position): >= 0.5x;
* ``generate``: ``storyeval.generate`` (sampling, its seeded sampler) against a bare
  ``model.generate`` at the same batch size and settings: >= 0.8x;
* ``union``: UNION training steps per second against a bare forward + backward of the encoder
  at the batch size: >= 0.8x;
* ``union_recipe``: the learned-metrics guide's GPU recipe at UNION's paper scale (a
  BERT-base-sized encoder, 128 tokens, batch 10): examples per second and what one epoch over
  ROCStories' 88,344 training stories with a negative each would take (a time, no target).

Shapes: a BERT-large-sized encoder (24 layers, 1024 hidden), a Llama LM of SmolLM2-1.7B's shape
(24 layers, 2048 hidden), and ``--large`` adds a 7B-shaped LM (32 layers, 4096 hidden; about
28 GB in float32) that the judge runs too (``judge_7b``). Models are initialised on the GPU.
``--small`` uses 2-layer models (a smoke test on a CPU).

    python benchmarks/bench_gpu.py [--device cuda] [--precision bfloat16] [--copies 17]
        [--parts bertscore,perplexity,judge,generate,union,union_recipe] [--large] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("bertscore", "perplexity", "judge", "generate", "union", "union_recipe")
TARGETS: dict[str, float | None] = {
    "bertscore": 0.8,
    "perplexity": 0.8,
    "judge": 0.5,
    "generate": 0.8,
    "union": 0.8,
    "judge_7b": 0.5,
    "union_recipe": None,  # a time, not a ratio
}
ROC_TRAINING_STORIES = 88_344  # ROCStories' training stories, as UNION (Guan and Huang 2020)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, work: Callable[[], Any]) -> float:
    """Seconds of ``work()`` (the device synchronised before and after)."""
    _sync(device)
    started = time.perf_counter()
    work()
    _sync(device)
    return time.perf_counter() - started


def tokenizers() -> tuple[Any, Any]:
    """The encoder's and the LM's tokenizers: ``$STORYEVAL_TOKENIZERS/{encoder,lm}`` when set
    (a machine without the offline packages), else the offline models'."""
    folder = os.environ.get("STORYEVAL_TOKENIZERS")
    if folder:
        from transformers import AutoTokenizer

        return (
            AutoTokenizer.from_pretrained(Path(folder) / "encoder"),
            AutoTokenizer.from_pretrained(Path(folder) / "lm"),
        )
    from storyeval.models import load_causal_lm, load_encoder

    return load_encoder().tokenizer, load_causal_lm().tokenizer


def build_models(root: Path, *, small: bool, large: bool, device: str = "cpu") -> dict[str, Path]:
    """Random-initialised models of real sizes saved with real tokenizers under ``root``
    (initialised on ``device`` when it is a GPU: a 7B model's initialisation takes minutes
    on a CPU)."""
    import torch

    with torch.device(device if device.startswith("cuda") else "cpu"):
        return _build_models(root, small=small, large=large)


def _build_models(root: Path, *, small: bool, large: bool) -> dict[str, Path]:
    import torch
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

    encoder_tokenizer, lm_tokenizer = tokenizers()
    torch.manual_seed(0)
    made: dict[str, Path] = {}
    # BERT-large's size for the metrics, BERT-base's for UNION's recipe at the paper's scale
    for name, (layers, hidden) in (("encoder", (24, 1024)), ("encoder_base", (12, 768))):
        layers, hidden = (2, 128) if small else (layers, hidden)
        BertModel(
            BertConfig(
                vocab_size=len(encoder_tokenizer),
                hidden_size=hidden,
                num_hidden_layers=layers,
                num_attention_heads=hidden // 64,
                intermediate_size=4 * hidden,
            )
        ).save_pretrained(root / name)
        encoder_tokenizer.save_pretrained(root / name)
        made[name] = root / name
    shapes = {"lm": (2, 128, 2) if small else (24, 2048, 32)}
    if large and not small:
        shapes["lm7b"] = (32, 4096, 32)
    for name, (n_layers, width, heads) in shapes.items():
        config = LlamaConfig(
            vocab_size=len(lm_tokenizer),
            hidden_size=width,
            intermediate_size=int(width * 8 / 3) // 64 * 64,
            num_hidden_layers=n_layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            max_position_embeddings=4096,
            bos_token_id=lm_tokenizer.bos_token_id,
            eos_token_id=lm_tokenizer.eos_token_id,
            tie_word_embeddings=True,
        )
        model = LlamaForCausalLM(config).to(torch.bfloat16)  # saved in half the bytes
        made[name] = root / name
        model.save_pretrained(made[name])
        lm_tokenizer.save_pretrained(made[name])
        del model
    return made


def stories(copies: int) -> list[Any]:
    """The example stories copied ``copies`` times (each copy's ids and texts distinct)."""
    from dataclasses import replace

    from storyeval.corpus import read_stories

    base = read_stories(ROOT / "examples" / "stories.jsonl")

    def mark(text: str, k: int) -> str:  # each copy's texts distinct: no cache can dedupe
        return text if k == 0 else f"({k}) {text}"

    return [
        replace(
            s,
            id=f"{s.id}-{k}",
            story=mark(s.story, k),
            reference=[mark(r, k) for r in s.references] if s.reference is not None else None,
        )
        for k in range(copies)
        for s in base
    ]


# --------------------------------------------------------------------------- parts


def bertscore_part(
    models: dict[str, Path], corpus: list[Any], device: str, precision: str
) -> dict[str, Any]:
    import torch

    from storyeval.metrics import score_stories
    from storyeval.models import load_encoder

    with_refs = [s for s in corpus if s.references]
    options = {"bertscore.model": str(models["encoder"])}
    score_stories(
        with_refs[:8],
        "bertscore_f",
        options=options,
        device=device,
        precision=precision,
        bootstrap=0,
    )
    ours = timed(device, lambda: score_stories(
        with_refs, "bertscore_f", options=options, device=device, precision=precision, bootstrap=0
    ))  # fmt: skip
    encoder = load_encoder(str(models["encoder"]))
    texts = list(
        dict.fromkeys([s.story for s in with_refs] + [r for s in with_refs for r in s.references])
    )

    def bare() -> None:
        from storyeval.models.devices import autocast

        order = sorted(texts, key=len)
        with torch.inference_mode(), autocast(device, precision):
            for start in range(0, len(order), 64):
                batch = encoder.tokenizer(
                    order[start : start + 64],
                    padding=True,
                    truncation=True,
                    max_length=512,
                    return_tensors="pt",
                ).to(device)
                hidden = encoder.model(**batch).last_hidden_state
                hidden.float().cpu()

    bare_seconds = timed(device, bare)
    return {
        "stories": len(with_refs),
        "storyeval_s": ours,
        "bare_s": bare_seconds,
        "ratio": bare_seconds / ours,
    }


def perplexity_part(
    models: dict[str, Path], corpus: list[Any], device: str, precision: str
) -> dict[str, Any]:
    import torch

    from storyeval.metrics import score_stories
    from storyeval.models import load_causal_lm

    options = {"perplexity.model": str(models["lm"]), "perplexity.context": "none"}
    score_stories(
        corpus[:8], "perplexity", options=options, device=device, precision=precision, bootstrap=0
    )
    ours = timed(device, lambda: score_stories(
        corpus, "perplexity", options=options, device=device, precision=precision, bootstrap=0
    ))  # fmt: skip
    lm = load_causal_lm(str(models["lm"]))
    texts = sorted((s.story for s in corpus), key=len)
    tokens = 0

    def bare() -> None:
        nonlocal tokens
        from storyeval.models.devices import autocast

        tokenizer = lm.tokenizer
        tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
        with torch.inference_mode(), autocast(device, precision):
            for start in range(0, len(texts), 64):
                batch = tokenizer(texts[start : start + 64], padding=True, return_tensors="pt").to(
                    device
                )
                logits = lm.model(**batch, use_cache=False).logits[:, :-1].float()
                picked = torch.log_softmax(logits, -1).gather(-1, batch["input_ids"][:, 1:, None])
                (picked.squeeze(-1) * batch["attention_mask"][:, 1:]).sum(-1).cpu()
                tokens += int(batch["attention_mask"].sum())

    bare_seconds = timed(device, bare)
    return {
        "stories": len(corpus),
        "tokens": tokens,
        "storyeval_s": ours,
        "bare_s": bare_seconds,
        "ratio": bare_seconds / ours,
    }


def judge_part(
    models: dict[str, Path],
    corpus: list[Any],
    device: str,
    precision: str,
    batch: int,
    lm: str = "lm",
) -> dict[str, Any]:
    import torch

    from storyeval.judge import judge_stories, load_rubric
    from storyeval.judge.backends import TransformersJudge, chat_text
    from storyeval.judge.prompts import absolute_request

    rubric = load_rubric("hanna")
    chosen = corpus[:60]
    judge = TransformersJudge(str(models[lm]), device=device, precision=precision, batch_size=batch)
    judge_stories(chosen[:4], rubric, [judge])
    ours = timed(device, lambda: judge_stories(chosen, rubric, [judge]))
    requests = [absolute_request(s, rubric, c) for c in rubric.criteria for s in chosen]
    tokenizer, model = judge.lm.tokenizer, judge.lm.model
    texts = [chat_text(tokenizer, r.messages) for r in requests]
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token

    def bare() -> None:
        with torch.inference_mode(), judge._autocast():
            for start in range(0, len(texts), 48):
                encoded = tokenizer(
                    texts[start : start + 48],
                    padding=True,
                    padding_side="left",
                    add_special_tokens=False,
                    return_tensors="pt",
                ).to(device)
                model(**encoded, logits_to_keep=1).logits[:, -1].float().cpu()

    bare_seconds = timed(device, bare)
    return {
        "prompts": len(texts),
        "storyeval_s": ours,
        "bare_s": bare_seconds,
        "ratio": bare_seconds / ours,
        "model_calls": judge.calls,
    }


def generate_part(
    models: dict[str, Path], corpus: list[Any], device: str, precision: str
) -> dict[str, Any]:
    """Top-p 0.9 sampling (no top-k) on both sides; ``generate``'s own default adds top-k 50
    unless told ``top_k=0``, so the bare call is told. The same with top-k 50 on both sides
    is reported beside (``ratio_top_k50``)."""
    from dataclasses import replace

    from storyeval.generate.core import DecodingConfig, generate_raw, seeded_generator
    from storyeval.models import load_causal_lm
    from storyeval.models.devices import place

    lm = place(load_causal_lm(str(models["lm"])), device)
    prompts = [s.prompt for s in corpus if s.system == "human"][:60]
    config = DecodingConfig(
        do_sample=True, temperature=1.0, top_k=None, top_p=0.9, max_new_tokens=100
    )
    generator = seeded_generator(0)
    tokenizer = lm.tokenizer
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    found: dict[str, Any] = {"prompts": len(prompts)}
    for top_k, suffix in ((None, ""), (50, "_top_k50")):
        made: list[str] = []

        def ours(
            chosen: DecodingConfig = replace(config, top_k=top_k), made: list[str] = made
        ) -> None:
            for start in range(0, len(prompts), 32):
                made.extend(
                    generate_raw(
                        lm,
                        prompts[start : start + 32],
                        chosen,
                        separator=None,
                        generator=generator,
                        precision=precision,
                    )
                )

        # twice each, alternating, the faster kept: the first runs set up kernels
        ours_seconds = bare_seconds = float("inf")
        for _ in range(2):
            made.clear()
            ours_seconds = min(ours_seconds, timed(device, ours))
            bare_seconds = min(
                bare_seconds,
                timed(device, lambda k=top_k: _bare_generate(lm, prompts, device, precision, k)),
            )

        new_tokens = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in made)
        found.update(
            {
                f"storyeval_s{suffix}": ours_seconds,
                f"storyeval_new_tokens{suffix}": new_tokens,
                f"bare_s{suffix}": bare_seconds,
                f"ratio{suffix}": bare_seconds / ours_seconds,
            }
        )
    return found


def _bare_generate(
    lm: Any, prompts: list[str], device: str, precision: str, top_k: int | None
) -> None:
    """``model.generate`` at batch 32, 100 new tokens per row, top-p 0.9 and ``top_k``."""
    import torch

    from storyeval.models.devices import autocast

    tokenizer = lm.tokenizer
    torch.manual_seed(0)
    with torch.no_grad(), autocast(device, precision):
        for start in range(0, len(prompts), 32):
            encoded = tokenizer(
                prompts[start : start + 32], padding=True, padding_side="left", return_tensors="pt"
            ).to(device)
            lm.model.generate(
                **encoded,
                do_sample=True,
                top_p=0.9,
                top_k=top_k or 0,
                max_new_tokens=100,
                min_new_tokens=100,
                pad_token_id=tokenizer.pad_token_id,
            )


def union_part(
    models: dict[str, Path], corpus: list[Any], device: str, precision: str, steps: int
) -> dict[str, Any]:
    import torch

    from storyeval.learn import TrainingConfig
    from storyeval.learn.union import UnionConfig
    from storyeval.models import load_encoder
    from storyeval.models.devices import autocast

    human = [s for s in corpus if s.system == "human"]
    training = TrainingConfig(
        epochs=1, max_steps=steps, batch_size=10, device=device, precision=precision
    )
    examples_per_s = _union_examples_per_s(
        human, UnionConfig(encoder=str(models["encoder"]), max_length=256), training
    )
    # Optimizer steps only (the trainer's own clock: loading, tokenising, evaluation and the
    # checkpoint are not steps), against bare steps on a batch of the same make-up.
    ours_steps_per_s = examples_per_s / training.batch_size
    encoder = load_encoder(str(models["encoder"]))
    model = encoder.model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    half = training.batch_size // 2  # a UNION batch: stories and their (longer) negatives
    texts = [s.story for s in human[:half]] + [s.story + " " + s.story for s in human[:half]]

    def bare_step() -> None:
        batch = encoder.tokenizer(
            texts, padding=True, truncation=True, max_length=256, return_tensors="pt"
        ).to(device)
        with autocast(device, precision):
            loss = model(**batch).last_hidden_state.float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    def bare() -> None:
        for _ in range(steps):
            bare_step()

    timed(device, bare_step)  # the first step's kernel set-up, as the trainer's warm-up
    bare_seconds = timed(device, bare)
    model.eval()
    bare_steps_per_s = steps / bare_seconds
    return {
        "steps": steps,
        "storyeval_steps_per_s": ours_steps_per_s,
        "bare_steps_per_s": bare_steps_per_s,
        "ratio": ours_steps_per_s / bare_steps_per_s,
    }


def _union_examples_per_s(human: list[Any], config: Any, training: Any) -> float:
    """UNION's training speed (examples per second of optimizer steps, the trainer's own
    clock) in the second of two identical runs: the first step of each batch shape sets up
    kernels, which a long run pays once."""
    from storyeval.learn.union import train_union

    with tempfile.TemporaryDirectory() as tmp:
        negatives = Path(tmp) / "negatives.jsonl"
        _negatives(human, negatives)
        for name in ("warm-up", "model"):
            result = train_union(
                human,
                Path(tmp) / name,
                config=config,
                training=training,
                progress=False,
                negatives=negatives,
            )
    return float(result.metadata["training"]["examples_per_second"])


def _negatives(stories: list[Any], path: Path) -> None:
    """A negatives file (each story repeated sentence by sentence: no spaCy needed)."""
    with open(path, "w", encoding="utf-8") as handle:
        for story in stories:
            record = {
                "id": f"{story.id}-neg",
                "source_id": story.id,
                "prompt": story.prompt,
                "story": story.story + " " + story.story,
                "techniques": ["repetition"],
            }
            handle.write(json.dumps(record) + "\n")


def union_recipe_part(
    models: dict[str, Path], corpus: list[Any], device: str, precision: str, steps: int
) -> dict[str, Any]:
    """The GPU recipe at the paper's scale (the learned-metrics guide): a BERT-base-sized
    encoder, ``--max-length 128 --batch-size 10``, one negative per story. Its training
    speed, and the time one epoch over ROCStories' 88,344 training stories would take. Each
    human example story is cut to its first 50 words (about a ROCStories story's length), so
    a story and its negative (the story twice, whose edit the model can see) fill the 128
    tokens: an upper bound on a ROCStories batch."""
    from dataclasses import replace

    from storyeval.learn import TrainingConfig
    from storyeval.learn.union import UnionConfig

    human = [
        replace(s, story=" ".join(s.story.split()[:50])) for s in corpus if s.system == "human"
    ]
    training = TrainingConfig(
        epochs=1, max_steps=steps, batch_size=10, device=device, precision=precision
    )
    examples_per_s = _union_examples_per_s(
        human, UnionConfig(encoder=str(models["encoder_base"]), max_length=128), training
    )
    epoch_s = 2 * ROC_TRAINING_STORIES / examples_per_s  # each story and its negative
    return {
        "steps": steps,
        "examples_per_s": examples_per_s,
        "epoch_minutes_88k": epoch_s / 60,
        "five_epochs_hours_88k": 5 * epoch_s / 3600,
    }


def _profiled(part: str, run: Callable[[], Any]) -> None:
    """Run ``part`` under cProfile and print where its host time went (on a GPU, waits for
    the device show as time in the calls that copy to the host)."""
    import cProfile
    import io
    import pstats

    profile = cProfile.Profile()
    profile.enable()
    try:
        run()
    finally:
        profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(40)
    print(f"--- profile of {part}\n{text.getvalue()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="bfloat16")
    parser.add_argument("--copies", type=int, default=17)
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--judge-batch", type=int, default=48)
    parser.add_argument("--union-steps", type=int, default=30)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--profile", action="store_true", help="profile each part that misses its target"
    )
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    corpus = stories(args.copies)
    results: dict[str, Any] = {
        "device": args.device,
        "precision": args.precision,
        "copies": args.copies,
    }
    if args.device.startswith("cuda"):
        import torch

        results["card"] = torch.cuda.get_device_name(0)
    with tempfile.TemporaryDirectory() as tmp:
        models = build_models(Path(tmp), small=args.small, large=args.large, device=args.device)
        if "lm7b" in models and "judge" in parts:  # the judge again with the 7B shape
            parts.append("judge_7b")
        runners = {
            "bertscore": lambda: bertscore_part(models, corpus, args.device, args.precision),
            "perplexity": lambda: perplexity_part(models, corpus, args.device, args.precision),
            "judge": lambda: judge_part(
                models, corpus, args.device, args.precision, args.judge_batch
            ),
            "judge_7b": lambda: judge_part(
                models, corpus, args.device, args.precision, args.judge_batch, lm="lm7b"
            ),
            "generate": lambda: generate_part(models, corpus, args.device, args.precision),
            "union": lambda: union_part(
                models, corpus, args.device, args.precision, args.union_steps
            ),
            "union_recipe": lambda: union_recipe_part(
                models, corpus, args.device, args.precision, 2 * args.union_steps
            ),
        }
        for part in parts:
            try:
                found = runners[part]()
                target = TARGETS[part]
                if target is not None:
                    found["target"] = target
                    found["met"] = found["ratio"] >= target
            except Exception as exc:  # a part that fails is reported, the others still run
                found = {"error": f"{type(exc).__name__}: {exc}"}
            results[part] = found
            print(f"{part:11s} {json.dumps(found)}", flush=True)
        if args.json is not None:  # before the profiles: a run stopped during them keeps these
            args.json.write_text(json.dumps(results, indent=1) + "\n")
        if args.profile:  # after the timings: a missed target's part again, under cProfile
            for part in parts:
                if not results[part].get("met", True):
                    _profiled(part, runners[part])


if __name__ == "__main__":
    sys.exit(main())
