"""Benchmark: entity-eval's mention scoring against a bare batched LM pass, same model.

Takes the mention-only candidates of the first stories of examples/human.jsonl (mentions
detected by storyeval's approximate detector) and scores every (context, candidate) pair
twice in one process: with storyeval's scorer (each context read once, a growing context
read from where the last one ended, candidates packed into shared forward passes) and with
the pass a user would write (each context + candidate as one row, rows sorted by length,
padded batches of ``--batch`` rows, log-softmax and gather). Prints candidates per second of
each, their ratio (the target is >= 0.8) and the largest difference of the log probabilities.

Run: python benchmarks/bench_entity_eval.py [--stories 3] [--batch 32] [--threads 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def candidates(n_stories: int) -> list[tuple[str, str, str]]:
    """The mention-only requests of the first ``n_stories`` example stories."""
    from storyeval.analyses.entity_eval import mention_slots
    from storyeval.entities import read_entity_texts

    texts, _ = read_entity_texts(ROOT / "examples" / "human.jsonl", limit=n_stories)
    slots = [slot for text in texts for slot in mention_slots(text)]
    return [(s.context, w, c) for s in slots for w, c in s.candidates["mention_only"]]


def bare_pass(lm: object, requests: list[tuple[str, str, str]], batch: int) -> np.ndarray:
    """log P(candidate | context) with one padded row per pair."""
    import torch

    tokenizer, model = lm.tokenizer, lm.model  # type: ignore[attr-defined]
    start = [
        tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    ]
    rows = []
    for context, words, _ in requests:
        stripped = context.rstrip()
        gap = " " if stripped != context and stripped else ""
        head = start + tokenizer(stripped, add_special_tokens=False)["input_ids"]
        tail = tokenizer(gap + words, add_special_tokens=False)["input_ids"]
        rows.append((head, tail))
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]) + len(rows[i][1]))
    scores = np.zeros(len(rows))
    with torch.inference_mode():
        for k in range(0, len(order), batch):
            chunk = order[k : k + batch]
            width = max(len(rows[i][0]) + len(rows[i][1]) for i in chunk)
            ids = torch.zeros((len(chunk), width), dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, i in enumerate(chunk):
                full = rows[i][0] + rows[i][1]
                ids[r, : len(full)] = torch.tensor(full)
                mask[r, : len(full)] = 1
            logp = model(input_ids=ids, attention_mask=mask).logits.float().log_softmax(-1)
            for r, i in enumerate(chunk):
                head, tail = rows[i]
                positions = torch.arange(len(head) - 1, len(head) + len(tail) - 1)
                scores[i] = float(logp[r, positions, torch.tensor(tail)].sum())
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stories", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    from storyeval.analyses.entity_eval import LanguageModelScorer

    torch.set_num_threads(args.threads)
    requests = candidates(args.stories)
    scorer = LanguageModelScorer()
    scorer.score_mentions(requests[:20])  # warm up
    bare_pass(scorer.lm, requests[:20], args.batch)
    began = time.perf_counter()
    ours = np.array(scorer.score_mentions(requests))
    ours_s = time.perf_counter() - began
    began = time.perf_counter()
    bare = bare_pass(scorer.lm, requests, args.batch)
    bare_s = time.perf_counter() - began
    print(f"{len(requests)} candidates of {args.stories} stories, {args.threads} threads")
    print(f"storyeval: {len(requests) / ours_s:8.1f} candidates/s ({ours_s:.1f} s)")
    print(f"bare pass: {len(requests) / bare_s:8.1f} candidates/s ({bare_s:.1f} s)")
    print(f"ratio storyeval / bare: {bare_s / ours_s:.2f} (target >= 0.8)")
    print(f"largest difference of log P: {float(np.abs(ours - bare).max()):.2e}")


if __name__ == "__main__":
    main()
