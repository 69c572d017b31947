"""A UNION training step against a bare encoder forward + backward pass on the same batch,
measured in one run (target: <= 1.3x, issue 18).

    python benchmarks/bench_union_step.py [--steps 20] [--batch 10] [--max-length 96] [--threads 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--max-length", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    from storyeval.corpus import read_stories
    from storyeval.learn.trainer import TrainingConfig, _optimizer
    from storyeval.learn.union import (
        UnionConfig,
        UnionTask,
        _base_encoder,
        _union_model_class,
        cached_examples,
    )
    from storyeval.models import load_spacy

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    stories = read_stories(EXAMPLES / "human.jsonl")
    config = UnionConfig(max_length=args.max_length)
    (train, _), _ = cached_examples(stories[:50], stories[50:], config, seed=0, nlp=load_spacy())
    batches = [
        [train[(step * args.batch + j) % len(train)] for j in range(args.batch)]
        for step in range(args.steps)
    ]
    encoder, tokenizer, _ = _base_encoder(None)
    model = _union_model_class()(encoder, True, tie=True)
    task = UnionTask(model, tokenizer, config)
    optimizer = _optimizer(model, TrainingConfig(), UnionTask.head_prefixes)  # the trainer's
    model.train()

    def bare(batch: list) -> None:  # the encoder alone: forward, a scalar loss, backward
        tensors = task._tensors(batch)
        out = encoder(input_ids=tensors["input_ids"], attention_mask=tensors["attention_mask"])
        out.last_hidden_state[:, 0].sum().backward()
        optimizer.zero_grad(set_to_none=True)

    def step(batch: list) -> None:  # what the trainer does per step
        loss, _ = task.batch_loss(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for run in (bare, step):
        run(batches[0])  # warm-up
    timings = {}
    for name, run in (("bare encoder forward+backward", bare), ("UNION training step", step)):
        started = time.perf_counter()
        for batch in batches:
            run(batch)
        timings[name] = (time.perf_counter() - started) / len(batches)
        print(f"{name:32s} {timings[name] * 1000:8.1f} ms/step")
    ratio = timings["UNION training step"] / timings["bare encoder forward+backward"]
    print(
        f"\nratio: {ratio:.2f}x (target <= 1.3x); {args.batch / timings['UNION training step']:.1f} examples/s"
    )


if __name__ == "__main__":
    main()
