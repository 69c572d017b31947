"""Which of UNION's techniques a model learns, per technique and per edit operation.

Trains UNION on stories of the built-in ``story`` grammar (five-sentence stories like
ROCStories; the first sentence is the prompt) or on your own story file, then tells stories
it never saw from negatives made by each technique alone (pairwise accuracy with a
Clopper-Pearson interval), broken down by edit operation: an n-gram repeated inside a
sentence vs a whole sentence repeated, keywords vs a sentence substituted, and so on.

This is the experiment behind the learned-metrics guide's UNION recipe: with the paper's
mixture weights, n-gram repetition is rarely a negative's only cue and stays near chance;
``--ngram-only`` trains on n-gram repetition alone (it is learned), ``--mix-weights``
gives repetition more weight, and ``--rank-weight`` adds the pairwise ranking loss (with
repetition at 0.4, every operation is then learned: the guide's recipe).

Usage::

    python benchmarks/union_techniques.py                                   # the paper's mixture
    python benchmarks/union_techniques.py --mix-weights repetition=0.4,substitution=0.3,reordering=0.2,negation=0.1
    python benchmarks/union_techniques.py --ngram-only --epochs 1
    python benchmarks/union_techniques.py --rank-weight 1 --mix-weights repetition=0.4,substitution=0.3,reordering=0.2,negation=0.1
    python benchmarks/union_techniques.py --stories my-stories.jsonl --train 4000 --heldout 400
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path


def corpus(path: str | None, count: int, seed: int) -> list:  # type: ignore[type-arg]
    """Stories whose first sentence is the prompt (as UNION reads ROCStories)."""
    from storyeval.corpus import Story, read_stories
    from storyeval.rules import generate_corpus, load_grammar
    from storyeval.text import split_sentences

    if path:
        texts = [(s.id, s.story) for s in read_stories(path)]
    else:
        stories = generate_corpus(load_grammar("story"), count, seed=seed)
        texts = [(r["id"], r["story"]) for r in (s.to_record() for s in stories)]
    prepared = []
    for story_id, text in texts:
        sentences = split_sentences(text)
        if len(sentences) >= 3:
            prepared.append(Story(story_id, sentences[0], " ".join(sentences[1:])))
    return prepared


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--stories", default=None, help="a story file (default: the grammar)")
    parser.add_argument("--train", type=int, default=1500, help="stories to train on")
    parser.add_argument("--heldout", type=int, default=200, help="stories held out")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--mix-weights", default=None, help="e.g. repetition=0.4,negation=0.1")
    parser.add_argument("--ngram-only", action="store_true", help="negatives: n-grams repeated")
    parser.add_argument("--rank-weight", type=float, default=0.0, help="pairwise ranking loss")
    parser.add_argument("--max-length", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="of the grammar's corpus")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import torch

    from storyeval.learn import TrainingConfig
    from storyeval.learn.union import UnionConfig, train_union
    from storyeval.learn.union_scoring import UnionScorer, heldout_discrimination
    from storyeval.models import load_spacy
    from storyeval.perturb import PerturbOptions, parse_mix_weights

    torch.set_num_threads(args.threads)
    stories = corpus(args.stories, args.train + args.heldout, args.seed)
    train, held = stories[: args.train], stories[args.train : args.train + args.heldout]
    perturb = PerturbOptions(
        mix_weights=parse_mix_weights(args.mix_weights),
        sentence_repetition_probability=0.0 if args.ngram_only else 0.5,
    )
    techniques = ("repetition",) if args.ngram_only else UnionConfig.techniques
    config = UnionConfig(
        max_length=args.max_length,
        techniques=techniques,
        perturb=perturb,
        rank_weight=args.rank_weight,
    )
    # the README's CPU recipe
    training = TrainingConfig(epochs=args.epochs, learning_rate=5e-5, head_learning_rate=1e-3,
                              batch_size=10, seed=1, eval_every=200, patience=3)  # fmt: skip
    nlp = load_spacy()
    output = Path(tempfile.mkdtemp()) / "union"
    started = time.perf_counter()
    train_union(train, output, config=config, training=training, progress=False, nlp=nlp)
    print(f"trained on {len(train)} stories in {time.perf_counter() - started:.0f} s "
          f"({args.epochs} epochs, weights {args.mix_weights or 'the paper'}"
          f"{', n-grams only' if args.ngram_only else ''}"
          f"{f', rank weight {args.rank_weight}' if args.rank_weight else ''})")  # fmt: skip
    scorer = UnionScorer(output)
    print(f"{len(held)} held-out stories: the original preferred to its negative")
    for name in ("repetition", "substitution", "reordering", "negation"):
        table = heldout_discrimination(
            scorer,
            held,
            techniques=[name],
            seed=7,
            nlp=nlp,
            by_operation=True,
            options=PerturbOptions(),  # every operation, whatever the model trained on
        )
        for row in table.to_dict("records"):
            label = name if row["group"] == "(all)" else f"  {row['group']}"
            print(f"{label:34} {row['estimate']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
                  f"  n={row['n_pairs']}")  # fmt: skip


if __name__ == "__main__":
    main()
