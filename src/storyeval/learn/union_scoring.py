"""Scoring with a trained UNION model: the scorer, loading a checkpoint, and the held-out
discrimination a training run reports."""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from storyeval.base.errors import ModelLoadError, StoryevalError
from storyeval.base.signature import Signature
from storyeval.corpus import Story
from storyeval.learn.encoding import (
    Encoded,
    pad_batch,
    pad_id,
)
from storyeval.learn.trainer import (
    read_metadata,
)
from storyeval.learn.union import (
    HEADS_FILE,
    UnionConfig,
    UnionTask,
    _union_model_class,
    mixture_negatives,
)
from storyeval.perturb.base import PerturbOptions

# --------------------------------------------------------------------------- scoring


class UnionScorer:
    """A trained UNION model, ready to score stories.

    Parameters
    ----------
    directory : path
        A directory written by :func:`train_union` (``storyeval train union``).

    Raises
    ------
    storyeval.base.errors.ModelLoadError
        When the directory is not a finished UNION model (e.g. an NSP model or a bare
        encoder without the UNION heads).
    """

    def __init__(self, directory: str | Path) -> None:
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModel, AutoTokenizer

        from storyeval.models import file_identity
        from storyeval.models.loading import quiet_transformers

        quiet_transformers()
        path = Path(directory).expanduser().resolve()
        heads_file = path / HEADS_FILE
        if path.is_dir() and not heads_file.is_file():
            raise ModelLoadError(
                f"{directory}: has no UNION heads ({HEADS_FILE}); it is not a UNION model. "
                "Train one with `storyeval train union --stories HUMAN.jsonl -o DIR`"
            )
        metadata = read_metadata(path)
        if metadata.get("kind") != "union":
            raise ModelLoadError(
                f"{directory}: is a {metadata.get('kind')!r} model, not a UNION model"
            )
        self.directory = path
        self.metadata = metadata
        self.config = UnionConfig.from_dict(
            {k: v for k, v in metadata["config"].items() if k != "base_identity"}
        )
        self.training_signature = Signature.from_dict(metadata["signature"])
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        encoder = AutoModel.from_pretrained(str(path), dtype=torch.float32)
        heads = load_file(str(heads_file))
        reconstruction = "reconstructor.bias" in heads
        tied = reconstruction and "reconstructor.weight" not in heads
        model = _union_model_class()(encoder, reconstruction, tie=tied)
        model.classifier.load_state_dict(
            {k.split(".", 1)[1]: v for k, v in heads.items() if k.startswith("classifier.")}
        )
        if model.reconstructor is not None:
            recon = {
                k.split(".", 1)[1]: v for k, v in heads.items() if k.startswith("reconstructor.")
            }
            model.reconstructor.load_state_dict(recon, strict=not tied)
        model.eval()
        self.model = model
        self.identity = f"{path.name}@{file_identity(str(path))}"
        self._delex: Any = None

    @property
    def signature(self) -> Signature:
        """The signature of scores from this model."""
        fields = self.training_signature.fields
        return Signature(
            "union",
            {
                "model": self.identity,
                "encoder": fields.get("encoder"),
                "techniques": fields.get("techniques"),
                "recon": fields.get("recon"),
                "max_length": self.config.max_length,
                "long": "sentence-windows",
                "prompt": self.config.use_prompt,
                "delex": self.config.delexicalize,
                "seed": fields.get("seed"),
                "data": fields.get("data"),
            },
        )

    def _prepare(self, stories: Sequence[Story]) -> list[Story]:
        if not self.config.delexicalize:
            return list(stories)
        if self._delex is None:
            from storyeval.perturb.delex import Delexicalizer

            self._delex = Delexicalizer()
        return [self._delex.story(story) for story in stories]

    def score(
        self, stories: Sequence[Story], *, batch_size: int = 32, progress: bool = False
    ) -> list[float]:
        """The UNION score (probability of being human-written, in [0, 1]) of each story.

        A story whose input (prompt and story) is longer than the model's ``max_length``
        tokens is never cut: it is scored in windows of consecutive sentences that fit (the
        first with the prompt, the others without, as windows are trained), and its score is
        the mean of the windows' scores weighted by their tokens; a
        :class:`storyeval.text.TruncationWarning` says how many stories were. A prompt keeps
        at most its last ``max_length // 2 - 2`` tokens, the context nearest the story (see
        :func:`storyeval.learn.encoding.encode_pair`).
        """
        import torch

        from storyeval.text import TruncationWarning

        prepared = self._prepare(stories)
        task = UnionTask(self.model, self.tokenizer, replace(self.config))
        pieces: list[tuple[int, Encoded]] = []
        long = 0
        for index, story in enumerate(prepared):
            whole = task._encode(story.prompt, story.story)
            if not whole.cut_second:
                pieces.append((index, whole))
                continue
            long += 1
            pieces += [(index, encoded) for encoded in self._windows(task, story)]
        order = sorted(range(len(pieces)), key=lambda i: len(pieces[i][1].input_ids))
        values = [math.nan] * len(pieces)
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        iterator: Any = batches
        if progress:
            from tqdm import tqdm

            iterator = tqdm(batches, desc="union", unit="batch", leave=False)
        with torch.no_grad():
            for batch in iterator:
                tensors = pad_batch([pieces[i][1] for i in batch], pad_id(self.tokenizer))
                logits, _ = self.model(
                    tensors["input_ids"], tensors["attention_mask"], tensors["token_type_ids"]
                )
                for index, value in zip(batch, torch.sigmoid(logits).tolist(), strict=True):
                    values[index] = float(value)
        totals = [0.0] * len(prepared)
        weights = [0.0] * len(prepared)
        for (index, encoded), value in zip(pieces, values, strict=True):
            totals[index] += value * len(encoded.input_ids)
            weights[index] += len(encoded.input_ids)
        if long:
            warnings.warn(
                f"{long} of {len(prepared)} inputs were longer than the model's max_length "
                f"({self.config.max_length} tokens): each was scored in windows of whole "
                "sentences that fit (the token-weighted mean of the windows' scores)",
                TruncationWarning,
                stacklevel=2,
            )
        return [t / w if w else math.nan for t, w in zip(totals, weights, strict=True)]

    def _windows(self, task: UnionTask, story: Story) -> list[Encoded]:
        """The encoded windows of consecutive sentences of a story too long for one input."""
        from storyeval.text import split_sentences

        encoded: list[Encoded] = []
        current: list[str] = []
        for sentence in split_sentences(story.story) or [story.story]:
            context = story.prompt if not encoded else ""
            candidate = " ".join([*current, sentence])
            if current and task._encode(context, candidate).cut_second:
                encoded += _fitting(task, context, " ".join(current))
                current = []
            current.append(sentence)
        if current:
            context = story.prompt if not encoded else ""
            encoded += _fitting(task, context, " ".join(current))
        return encoded


def _fitting(task: UnionTask, context: str, text: str) -> list[Encoded]:
    """``text`` encoded whole when it fits, else in consecutive runs of words that fit (a
    single sentence longer than the model's input)."""
    whole = task._encode(context, text)
    if not whole.cut_second:
        return [whole]
    words = text.split()
    result: list[Encoded] = []
    start = 0
    while start < len(words):
        end = len(words)
        low, high = start + 1, len(words)
        while low <= high:  # the longest run of words from start that fits
            middle = (low + high) // 2
            if task._encode(
                context if not result else "", " ".join(words[start:middle])
            ).cut_second:
                high = middle - 1
            else:
                end, low = middle, middle + 1
        end = max(end, start + 1)
        result.append(task._encode(context if not result else "", " ".join(words[start:end])))
        start = end
    return result


@functools.lru_cache(maxsize=8)
def _cached_scorer(path: str, stamp: float) -> UnionScorer:
    return UnionScorer(path)


def load_union(directory: str | Path) -> UnionScorer:
    """Load a trained UNION model once per process (reloaded when the directory changes)."""
    path = Path(directory).expanduser()
    meta = path / "storyeval.json"
    stamp = meta.stat().st_mtime if meta.is_file() else 0.0
    if not path.exists():
        raise ModelLoadError(f"{directory}: no such UNION model directory")
    return _cached_scorer(str(path.resolve()), stamp)


def heldout_discrimination(
    scorer: UnionScorer,
    stories: Sequence[Story],
    *,
    seed: int = 0,
    techniques: Sequence[str] | None = None,
    samples: int = 1,
    nlp: Any = None,
    by_operation: bool = False,
    options: PerturbOptions | None = None,
) -> Any:
    """How well a UNION model tells ``stories`` (human) from UNION negatives of them.

    The pairs (each story and its ``samples`` negatives) go through
    :func:`storyeval.meta.discrimination.discrimination`, so the table has its columns
    (``n_pairs, wins, losses, ties, estimate`` = share of pairs where the original scores
    higher, a Clopper-Pearson interval, ``p_value`` of the one-sided sign test), plus
    ``accuracy`` (balanced accuracy at threshold 0.5), ``mean_human`` and
    ``mean_perturbed``. Use stories the model was not trained on. With ``by_operation``,
    one row per edit operation as well (``group``: ``ngram_repetition``,
    ``sentence_repetition``, ``keyword``, ``reorder``, ...; a negative with several counts
    for each), after the ``(all)`` row. ``options``: the perturbation settings of the
    negatives (default: the model's own).

    Returns
    -------
    pandas.DataFrame
        One row (and one per operation).
    """
    from storyeval.corpus import Score
    from storyeval.meta.discrimination import discrimination

    run = mixture_negatives(
        stories,
        tuple(techniques) if techniques is not None else scorer.config.techniques,
        seed=seed,
        samples=samples,
        options=options or scorer.config.perturb,
        nlp=nlp,
    )
    if not run.stories:
        raise StoryevalError("no story could be perturbed; cannot measure discrimination")
    by_id = {story.id: story for story in stories}
    originals = [Story(s.id, s.prompt, s.story) for s in stories]
    altered = [Story(n.id, by_id[n.source_id].prompt, n.story) for n in run.stories]
    values = scorer.score(originals + altered)
    score_of = {story.id: float(v) for story, v in zip(originals + altered, values, strict=True)}
    rendered = scorer.signature.render()
    scores = [Score(key, "union", value, rendered) for key, value in score_of.items()]
    pairs = _heldout_pairs(run.stories)
    table = discrimination(
        scores, pairs, metrics=["union"], by="operations" if by_operation else None
    )
    true_positive = sum(score_of[s.id] >= 0.5 for s in originals) / len(originals)
    true_negative = sum(score_of[s.id] < 0.5 for s in altered) / len(altered)
    return table.assign(
        accuracy=(true_positive + true_negative) / 2,
        mean_human=sum(score_of[s.id] for s in originals) / len(originals),
        mean_perturbed=sum(score_of[s.id] for s in altered) / len(altered),
    )


def _heldout_pairs(negatives: Sequence[Any]) -> Any:
    """The (original, negative, operations) pairs of perturbed stories, in story order."""
    import pandas as pd

    from storyeval.meta.discrimination import edit_operations

    return pd.DataFrame(
        [(n.source_id, n.id, edit_operations([e.to_dict() for e in n.edits])) for n in negatives],
        columns=["original_id", "altered_id", "operations"],
    )
