"""Train UNION on the example corpus on this CPU and report speed and held-out discrimination.

Prints, from one run:
* training throughput: training examples (human stories or windows, and their negatives)
  processed per second, and human stories per second;
* scoring throughput: stories scored per second (examples/stories.jsonl, 180 stories);
* held-out discrimination: stories never seen in training against UNION negatives of them
  (the paper's mixture, a fresh seed; then each technique alone): balanced accuracy at
  threshold 0.5 and pairwise accuracy (the original scores higher than its perturbation),
  with a one-sided binomial p-value against chance.

Usage::

    python benchmarks/bench_union.py        # sentence windows, 48 tokens (as `make demo`)
    python benchmarks/bench_union.py --whole-stories --max-length 256 --lr 5e-5 --head-lr 0
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--train-stories", type=int, default=50, help="first N stories train")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--head-lr", type=float, default=2e-3, help="0: same as --lr (the paper)")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--max-length", type=int, default=48)
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--whole-stories", action="store_true", help="no sentence windows")
    parser.add_argument("--no-recon", action="store_true")
    parser.add_argument("--techniques", default=None, help="comma-separated (default: all four)")
    parser.add_argument("--negatives", type=int, default=1, help="negatives per story")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    import torch

    from storyeval.corpus import read_stories
    from storyeval.learn import TrainingConfig
    from storyeval.learn.union import UnionConfig, sentence_windows, train_union
    from storyeval.learn.union_scoring import heldout_discrimination, load_union

    torch.set_num_threads(args.threads)
    human = read_stories(REPO / "examples" / "human.jsonl")
    train, heldout = human[: args.train_stories], human[args.train_stories :]
    window = None if args.whole_stories else args.window
    config = UnionConfig(
        max_length=args.max_length,
        window=window,
        stride=None if window is None else args.stride,
        reconstruction=not args.no_recon,
        negatives=args.negatives,
        **({"techniques": tuple(args.techniques.split(","))} if args.techniques else {}),
    )
    training = TrainingConfig(
        epochs=args.epochs,
        learning_rate=args.lr,
        head_learning_rate=args.head_lr or None,
        batch_size=args.batch_size,
        seed=args.seed,
        patience=args.epochs,
    )
    print(f"settings: {config}")
    print(f"          {training}")
    print(
        f"threads: {torch.get_num_threads()}; {len(train)} training stories, {len(heldout)} held out"
    )
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = time.perf_counter()
        result = train_union(
            train, Path(tmp) / "union", config=config, training=training, progress=False
        )
        wall = time.perf_counter() - started
        info = result.metadata["training"]
        loop = info["seconds"]
        examples = info["steps"] * training.batch_size
        print(
            f"training: {info['steps']} steps, {examples} examples in {loop:.1f} s of optimization "
            f"({wall:.1f} s with data preparation): {examples / loop:.2f} examples/s, "
            f"{examples / 2 / loop:.2f} human stories/s (each with one negative)"
        )
        print(f"dev (best): {info['best_dev']}")
        scorer = load_union(result.directory)
        stories = read_stories(REPO / "examples" / "stories.jsonl")
        started = time.perf_counter()
        scorer.score(stories)
        seconds = time.perf_counter() - started
        print(
            f"scoring: {len(stories)} stories in {seconds:.2f} s: {len(stories) / seconds:.1f} stories/s "
            f"(max_length {config.max_length})"
        )
        units = heldout if window is None else sentence_windows(heldout, window, stride=1)
        kinds = "stories" if window is None else "windows"
        for techniques in (None, *([name] for name in config.techniques)):
            held = heldout_discrimination(
                scorer, units, seed=2024, samples=2, techniques=techniques
            ).iloc[0]
            label = "mixture" if techniques is None else techniques[0]
            print(
                f"held-out discrimination, {label} ({int(held['n_pairs'])} pairs of held-out "
                f"{kinds} and negatives): balanced accuracy {held['accuracy']:.3f}, pairwise "
                f"{held['estimate']:.3f} (p = {held['p_value']:.2g}), mean score human "
                f"{held['mean_human']:.3f} vs perturbed {held['mean_perturbed']:.3f}"
            )


if __name__ == "__main__":
    main()
