"""NUBIA (Kane et al. 2020): neural features -> aggregator -> calibrator.

**Features** of a (reference, candidate) pair of stories, in the paper's six (``6dim``, the
default) or eight (``8dim``) or storyeval's both-ways NLI (``both-ways``, ``both-ways+lengths``):

* ``similarity``: the STS score of the pair from a cross-encoder regression model (``sts``,
  any hub cross-encoder, e.g. ``cross-encoder/stsb-roberta-large``, as the paper used RoBERTa
  fine-tuned on STS-B); offline, no STS model installs, so the fallback is the cosine of the two
  stories' embeddings (the mean of their sentences' mean-pooled, normalised encoder
  embeddings), named in the signature (``similarity:cosine``);
* ``entail_fwd``, ``neutral_fwd``, ``contra_fwd``: NLI probabilities with the reference as the
  premise and the candidate as the hypothesis (the paper's MNLI features), and in the
  both-ways sets ``*_bwd`` the other way round. Stories are documents, so NLI runs on aligned
  sentence pairs: each candidate sentence against the reference sentence most similar to it
  (encoder cosine), and the probabilities are averaged over the candidate's sentences;
* ``logppl_candidate``, ``logppl_reference``: log perplexity of each text under the causal LM
  (the paper's GPT-2 "intelligibility" features);
* in ``8dim`` and ``both-ways+lengths``: ``words_candidate``, ``words_reference`` (the paper's
  8-DIM variant adds the lengths).

The NLI model is any hub sequence classifier with entailment/neutral/contradiction labels
(``roberta-large-mnli``, as NUBIA used). No licensed three-way NLI model installs offline, so
the offline default is **zero-shot NLI with the causal LM**: the probabilities of " True",
" Neither" and " False" after the prompt ``PREMISE\\nQuestion: HYPOTHESIS True, False or
Neither?\\nAnswer:``, renormalised. It is much weaker than a trained NLI model and is named in
the signature (``nli:lm-zero-shot:...``).

**Aggregator**: a regression from the features (standardised) to the human score scaled to
[0, 1] by the observed rating range: linear (``-LREG``) or a one-hidden-layer tanh network of
10 units (``-NN``; ``mlp-deep``: ten hidden layers of 10 units, the literal reading of the
paper's "10 hidden layers"), cross-validated (held-out correlations reported), then fit on
everything.
**Calibrator** (paper, 3.3): the prediction divided by the prediction for the candidate
against itself, then clipped to [0, 1] (``calibration="self"``), or only clipped (``"clip"``).

The model is a JSON file of numbers (no pickle): ``DIR/nubia.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from storyeval.base.errors import StoryevalError
from storyeval.base.signature import Signature
from storyeval.base.validation import check_choice
from storyeval.corpus import Judgment, Story

NLI_FEATURES = ("entail", "neutral", "contra")
FORMAT_VERSION = 1
_LABEL_WORDS = (" True", " Neither", " False")


#: The feature sets: the paper's six and eight features, and NLI both ways (with lengths).
FEATURE_SETS = ("6dim", "8dim", "both-ways", "both-ways+lengths")


def feature_names(feature_set: str = "6dim") -> list[str]:
    """The features of a set, in order (see the module docstring).

    >>> feature_names("6dim")
    ['similarity', 'entail_fwd', 'neutral_fwd', 'contra_fwd', 'logppl_candidate', 'logppl_reference']
    >>> len(feature_names("8dim")), len(feature_names("both-ways+lengths"))
    (8, 11)
    """
    check_choice(feature_set, FEATURE_SETS, "features")
    names = ["similarity", *(f"{k}_fwd" for k in NLI_FEATURES)]
    if feature_set.startswith("both-ways"):
        names += [f"{k}_bwd" for k in NLI_FEATURES]
    names += ["logppl_candidate", "logppl_reference"]
    if feature_set in ("8dim", "both-ways+lengths"):
        names += ["words_candidate", "words_reference"]
    return names


def feature_set_of(names: Sequence[str]) -> str:
    """The feature set whose features include ``names`` (a saved model's list), the smallest.

    >>> feature_set_of(feature_names("both-ways"))
    'both-ways'
    """
    for feature_set in FEATURE_SETS:
        if set(names) <= set(feature_names(feature_set)):
            return feature_set
    raise ValueError(f"no feature set has the features {', '.join(names)}")


# --------------------------------------------------------------------------- NLI backends


class HubNli:
    """A sequence classifier fine-tuned on NLI (e.g. ``roberta-large-mnli``)."""

    def __init__(self, name: str) -> None:
        from transformers import AutoModelForSequenceClassification

        from storyeval.models.loading import load_pretrained

        self.loaded = load_pretrained(
            name, "encoder", AutoModelForSequenceClassification, option="--nli"
        )
        labels = {int(k): str(v).lower() for k, v in self.loaded.model.config.id2label.items()}
        order = []
        for stem in ("entail", "neutral", "contra"):
            found = [index for index, label in labels.items() if label.startswith(stem)]
            if not found:
                raise StoryevalError(
                    f"{name}: not an NLI classifier (labels {sorted(labels.values())}; need "
                    "entailment, neutral and contradiction)"
                )
            order.append(found[0])
        self.order = order
        self.identity = self.loaded.identity

    def probabilities(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
        """(n, 3) probabilities of entailment, neutral, contradiction."""
        import torch

        from storyeval.models.devices import model_device

        rows = []
        tokenizer, model = self.loaded.tokenizer, self.loaded.model
        device = model_device(model)
        for start in range(0, len(premises), 16):
            inputs = tokenizer(
                list(premises[start : start + 16]),
                list(hypotheses[start : start + 16]),
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=512,
            )
            with torch.no_grad():
                logits = model(**inputs.to(device)).logits
            rows.append(torch.softmax(logits.float(), dim=-1)[:, self.order].cpu().numpy())
        return np.concatenate(rows) if rows else np.zeros((0, 3))


class LmZeroShotNli:
    """Zero-shot NLI with a causal LM: the renormalised probabilities of the label words."""

    def __init__(self, name: str | None = None) -> None:
        from storyeval.models import load_causal_lm

        self.loaded = load_causal_lm(name, option="--lm")
        tokenizer = self.loaded.tokenizer
        self.label_ids = [
            tokenizer.encode(word, add_special_tokens=False)[0] for word in _LABEL_WORDS
        ]
        self.identity = f"lm-zero-shot:{self.loaded.identity}"

    def probabilities(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
        """(n, 3) probabilities of entailment (True), neutral (Neither), contradiction (False)."""
        import torch

        from storyeval.models.devices import model_device

        tokenizer, model = self.loaded.tokenizer, self.loaded.model
        device = model_device(model)
        prompts = [
            f"{premise}\nQuestion: {hypothesis} True, False or Neither?\nAnswer:"
            for premise, hypothesis in zip(premises, hypotheses, strict=True)
        ]
        rows = []
        pad = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        for start in range(0, len(prompts), 16):
            encoded = [tokenizer.encode(p)[-1024:] for p in prompts[start : start + 16]]
            width = max(len(ids) for ids in encoded)
            # left padding: the answer position is the last one of every row
            ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=device)
            mask = torch.tensor(
                [[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=device
            )
            positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
            with torch.no_grad():
                logits = model(  # the vocabulary projection of the last position only
                    input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1
                ).logits
            label_logits = logits[:, -1, self.label_ids].float()
            rows.append(torch.softmax(label_logits, dim=-1).cpu().numpy())
        return np.concatenate(rows) if rows else np.zeros((0, 3))


class StsCrossEncoder:
    """A cross-encoder regression model of semantic textual similarity (sentence-transformers'
    ``CrossEncoder``: a hub name such as ``cross-encoder/stsb-roberta-large`` or a local
    directory), scoring (reference, candidate) pairs as whole texts."""

    def __init__(self, name: str, device: str = "cpu") -> None:
        from pathlib import Path

        from storyeval.models.loading import file_identity, hub_identity

        try:
            from sentence_transformers import CrossEncoder

            self.model = CrossEncoder(name, device=device, num_labels=1)
        except (OSError, ValueError) as exc:
            raise StoryevalError(f"--sts {name}: cannot load the cross-encoder ({exc})") from None
        local = Path(name).exists()
        base = (
            f"{Path(name).name}@{file_identity(name)}"
            if local
            else hub_identity(self.model.model, name)
        )
        self.identity = "sts:" + base

    def scores(self, references: Sequence[str], candidates: Sequence[str]) -> np.ndarray:
        """One similarity per pair (the model's regression output)."""
        pairs = [(r, c) for r, c in zip(references, candidates, strict=True)]
        return np.asarray(self.model.predict(pairs, show_progress_bar=False), dtype=float).reshape(
            -1
        )


# --------------------------------------------------------------------------- features


@dataclass
class NubiaFeatures:
    """The feature extractor: an encoder, an NLI backend and a causal LM."""

    encoder: Any
    nli: Any
    lm_name: str | None
    feature_set: str = "6dim"
    device: str = "cpu"
    precision: str = "float32"
    sts: Any = None

    @classmethod
    def load(
        cls,
        *,
        encoder: str | None = None,
        nli: str | None = None,
        lm: str | None = None,
        features: str = "6dim",
        sts: str | None = None,
        device: str = "cpu",
        precision: str = "float32",
    ) -> NubiaFeatures:
        """Load the models (``nli=None``: zero-shot NLI with the causal LM ``lm``;
        ``sts=None``: the encoder's cosine as the similarity) on ``device``."""
        from storyeval.models import load_encoder

        feature_names(features)  # checks the name
        backend = HubNli(nli) if nli else LmZeroShotNli(lm)
        loaded = load_encoder(encoder, option="--encoder")
        cross = StsCrossEncoder(sts, device) if sts else None
        return cls(loaded, backend, lm, features, device, precision, cross)

    def _place(self) -> None:
        """Put every model on the extractor's device (they are shared: others may move them)."""
        from storyeval.models.devices import place

        place(self.encoder, self.device)
        loaded = getattr(self.nli, "loaded", None)
        if loaded is not None:
            place(loaded, self.device)

    def identity(self) -> dict[str, str]:
        """The models, for signatures."""
        from storyeval.models import load_causal_lm

        return {
            "encoder": self.encoder.identity,
            "similarity": self.sts.identity if self.sts is not None else "cosine",
            "nli": self.nli.identity,
            "lm": load_causal_lm(self.lm_name).identity,
        }

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        from storyeval.models.devices import model_device

        tokenizer, model = self.encoder.tokenizer, self.encoder.model
        device = model_device(model)
        out = []
        for start in range(0, len(texts), 64):
            inputs = tokenizer(
                list(texts[start : start + 64]),
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=256,
            ).to(device)
            with torch.no_grad():
                hidden = model(**inputs).last_hidden_state.float()
            mask = inputs["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 1))

    def extract(self, candidates: Sequence[str], references: Sequence[str]) -> pd.DataFrame:
        """One row of features per (candidate, reference) pair; columns :func:`feature_names`."""

        if len(candidates) != len(references):
            raise ValueError("candidates and references must have the same length")
        from storyeval.models.devices import autocast

        self._place()
        with autocast(self.device, self.precision):
            return self._extract(candidates, references)

    def _extract(self, candidates: Sequence[str], references: Sequence[str]) -> pd.DataFrame:
        from storyeval.metrics.lm import perplexity
        from storyeval.text import split_sentences

        cand_sents = [split_sentences(c) or [c] for c in candidates]
        ref_sents = [split_sentences(r) or [r] for r in references]
        flat = [s for group in cand_sents + ref_sents for s in group]
        unique = list(dict.fromkeys(flat))
        embedded = dict(zip(unique, self._embed(unique), strict=True))
        premises_f, hypotheses_f, owner = [], [], []
        similarity = []
        for index, (cands, refs) in enumerate(zip(cand_sents, ref_sents, strict=True)):
            cv = np.stack([embedded[s] for s in cands])
            rv = np.stack([embedded[s] for s in refs])
            doc_c, doc_r = cv.mean(0), rv.mean(0)
            similarity.append(
                float(doc_c @ doc_r / max(np.linalg.norm(doc_c) * np.linalg.norm(doc_r), 1e-12))
            )
            best = (cv @ rv.T).argmax(axis=1)
            for i, j in enumerate(best):
                premises_f.append(refs[j])
                hypotheses_f.append(cands[i])
                owner.append(index)
        forward = self.nli.probabilities(premises_f, hypotheses_f)
        both_ways = self.feature_set.startswith("both-ways")
        backward = self.nli.probabilities(hypotheses_f, premises_f) if both_ways else forward
        if self.sts is not None:
            similarity = list(self.sts.scores(references, candidates))
        owners = np.asarray(owner)
        rows = []
        on = {"device": self.device, "precision": self.precision}
        ppl_c = perplexity(list(candidates), model=self.lm_name, **on).values  # type: ignore[arg-type]
        ppl_r = perplexity(list(references), model=self.lm_name, **on).values  # type: ignore[arg-type]
        for index in range(len(candidates)):
            mine = owners == index
            row = {"similarity": similarity[index]}
            row.update(
                {
                    f"{k}_fwd": float(v)
                    for k, v in zip(NLI_FEATURES, forward[mine].mean(0), strict=True)
                }
            )
            if both_ways:
                row.update(
                    {
                        f"{k}_bwd": float(v)
                        for k, v in zip(NLI_FEATURES, backward[mine].mean(0), strict=True)
                    }
                )
            row["logppl_candidate"] = float(math.log(ppl_c[index]))
            row["logppl_reference"] = float(math.log(ppl_r[index]))
            if self.feature_set in ("8dim", "both-ways+lengths"):
                row["words_candidate"] = float(len(candidates[index].split()))
                row["words_reference"] = float(len(references[index].split()))
            rows.append(row)
        return pd.DataFrame(rows, columns=feature_names(self.feature_set))


# --------------------------------------------------------------------------- aggregator


@dataclass
class Aggregator:
    """Standardised features -> a score in the human scale mapped to [0, 1]."""

    kind: str
    mean: np.ndarray
    scale: np.ndarray
    weights: list[np.ndarray]
    biases: list[np.ndarray]

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Raw (uncalibrated) predictions."""
        x = (np.asarray(features, dtype=float) - self.mean) / self.scale
        for layer, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = x @ w + b
            if layer < len(self.weights) - 1:
                x = np.tanh(x)
        return np.asarray(x, dtype=float).reshape(-1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready numbers."""
        return {
            "kind": self.kind,
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "weights": [w.tolist() for w in self.weights],
            "biases": [b.tolist() for b in self.biases],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Aggregator:
        """The aggregator saved by :meth:`to_dict`."""
        return cls(
            str(data["kind"]),
            np.asarray(data["mean"], dtype=float),
            np.asarray(data["scale"], dtype=float),
            [np.asarray(w, dtype=float).reshape(len(w), -1) for w in data["weights"]],
            [np.asarray(b, dtype=float).reshape(-1) for b in data["biases"]],
        )


#: The hidden layers of the network aggregators. Kane et al. (2020, section 3.2) describe "6
#: (or 8) input layers ..., 10 hidden layers and a 1 dimension output layer": they count
#: input features as "layers", so ``mlp`` (the default network) reads "10 hidden layers" as
#: one hidden layer of 10 units; ``mlp-deep`` is the literal reading, ten hidden layers of 10.
AGGREGATOR_LAYERS: dict[str, tuple[int, ...]] = {"mlp": (10,), "mlp-deep": (10,) * 10}
AGGREGATORS: tuple[str, ...] = ("linear", *AGGREGATOR_LAYERS)


def fit_aggregator(
    features: np.ndarray, target: np.ndarray, *, kind: str = "linear", seed: int = 0
) -> Aggregator:
    """Fit a linear regressor or a tanh MLP (scikit-learn) on standardised features: ``mlp``
    is one hidden layer of 10 units, ``mlp-deep`` ten hidden layers of 10 units (see
    :data:`AGGREGATOR_LAYERS`)."""
    from sklearn.linear_model import Ridge
    from sklearn.neural_network import MLPRegressor

    x = np.asarray(features, dtype=float)
    mean, scale = x.mean(0), x.std(0)
    scale[scale < 1e-12] = 1.0
    z = (x - mean) / scale
    if kind == "linear":
        model = Ridge(alpha=1e-3).fit(z, target)
        return Aggregator(
            kind, mean, scale, [model.coef_.reshape(-1, 1)], [np.asarray([model.intercept_])]
        )
    if kind in AGGREGATOR_LAYERS:
        net = MLPRegressor(
            hidden_layer_sizes=AGGREGATOR_LAYERS[kind],
            activation="tanh",
            solver="adam",
            max_iter=3000,
            random_state=seed,
            alpha=1e-3,
        ).fit(z, target)
        return Aggregator(
            kind,
            mean,
            scale,
            [np.asarray(w) for w in net.coefs_],
            [np.asarray(b) for b in net.intercepts_],
        )
    raise ValueError(f"aggregator must be one of {', '.join(AGGREGATORS)}; got {kind!r}")


# --------------------------------------------------------------------------- model


@dataclass
class NubiaModel:
    """A trained NUBIA: the feature settings, the aggregator, the calibration and its target scale."""

    aggregator: Aggregator
    features: list[str]
    settings: dict[str, Any]
    target_range: tuple[float, float]
    calibration: str
    signature: Signature
    report: dict[str, Any]

    @property
    def identity(self) -> str:
        """``nubia@HASH`` of the aggregator's numbers and calibration (for signatures)."""
        import hashlib

        content = json.dumps(
            {"aggregator": self.aggregator.to_dict(), "calibration": self.calibration},
            sort_keys=True,
        ).encode()
        return f"nubia@{hashlib.sha256(content).hexdigest()[:12]}"

    def save(self, directory: str | Path) -> Path:
        """Write ``DIR/nubia.json`` atomically."""
        from storyeval.base.io import write_text_atomic

        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        data = {
            "format": FORMAT_VERSION,
            "kind": "nubia",
            "aggregator": self.aggregator.to_dict(),
            "features": self.features,
            "settings": self.settings,
            "target_range": list(self.target_range),
            "calibration": self.calibration,
            "signature": self.signature.to_dict(),
            "report": self.report,
        }
        path = folder / "nubia.json"
        write_text_atomic(path, json.dumps(data, indent=1) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | Path) -> NubiaModel:
        """A model saved by :meth:`save` (a directory or the JSON file)."""
        from storyeval.base.errors import ModelLoadError

        path = Path(directory)
        path = path / "nubia.json" if path.is_dir() else path
        if not path.is_file():
            raise ModelLoadError(
                f"{directory}: no nubia.json; train one with `storyeval train nubia --stories S "
                "--judgments J -o DIR`"
            )
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("kind") != "nubia":
            raise ModelLoadError(f"{path}: not a NUBIA model")
        return cls(
            Aggregator.from_dict(data["aggregator"]),
            list(data["features"]),
            dict(data["settings"]),
            (float(data["target_range"][0]), float(data["target_range"][1])),
            str(data["calibration"]),
            Signature.from_dict(data["signature"]),
            dict(data.get("report", {})),
        )

    def extractor(self, *, device: str = "cpu", precision: str = "float32") -> NubiaFeatures:
        """The feature extractor with the models the aggregator was trained on, on ``device``."""
        s = self.settings
        return NubiaFeatures.load(
            encoder=s.get("encoder"),
            nli=s.get("nli"),
            lm=s.get("lm"),
            features=feature_set_of(self.features),
            sts=s.get("sts"),
            device=device,
            precision=precision,
        )

    def score(
        self,
        candidates: Sequence[str],
        references: Sequence[str],
        *,
        extractor: NubiaFeatures | None = None,
        device: str = "cpu",
        precision: str = "float32",
    ) -> tuple[np.ndarray, pd.DataFrame]:
        """Calibrated scores in [0, 1] and the features behind them (models on ``device``)."""
        extractor = extractor or self.extractor(device=device, precision=precision)
        table = extractor.extract(candidates, references)
        raw = self.aggregator.predict(table[self.features].to_numpy())
        if self.calibration == "self":
            itself = extractor.extract(candidates, candidates)
            norm = self.aggregator.predict(itself[self.features].to_numpy())
            scores = np.where(
                np.abs(norm) > 1e-9, raw / np.where(np.abs(norm) > 1e-9, norm, 1.0), raw
            )
        else:
            scores = raw
        table = table.assign(raw=raw, nubia=np.clip(scores, 0.0, 1.0))
        return table["nubia"].to_numpy(), table


def _targets(
    stories: Sequence[Story], judgments: Sequence[Judgment], criterion: str | None
) -> tuple[list[Story], np.ndarray, str]:
    criteria = sorted({j.criterion for j in judgments})
    if criterion is None:
        if len(criteria) != 1:
            raise ValueError(
                f"the judgments hold several criteria ({', '.join(criteria)}): choose one with --criterion"
            )
        criterion = criteria[0]
    elif criterion not in criteria:
        raise ValueError(f"no judgment on criterion {criterion!r}; criteria: {', '.join(criteria)}")
    ratings: dict[str, list[float]] = {}
    for judgment in judgments:
        if judgment.criterion == criterion:
            ratings.setdefault(judgment.item_id, []).append(float(judgment.value))
    usable = [s for s in stories if s.id in ratings and s.references]
    if len(usable) < 10:
        raise ValueError(
            f"{len(usable)} stories have both a reference and a {criterion!r} rating; NUBIA needs at least 10"
        )
    return usable, np.asarray([np.mean(ratings[s.id]) for s in usable]), criterion


def _nubia_folds(stories: Sequence[Story], folds: int, seed: int) -> tuple[list[np.ndarray], str]:
    """The held-out stories of each fold, and how they were split: ``by prompt`` when prompts
    have several stories (the stories of one prompt share its reference, so a fold must not
    learn from its neighbours), else ``by story``, shuffled into folds as before
    (scikit-learn's KFold)."""
    from storyeval.corpus import prompt_id

    prompts = [str(prompt_id(s)) for s in stories]
    if len(set(prompts)) < len(prompts):
        from storyeval.learn.preference import group_folds

        return group_folds(prompts, min(folds, len(set(prompts))), seed), "by prompt"
    from sklearn.model_selection import KFold

    splits = KFold(min(folds, len(stories)), shuffle=True, random_state=seed).split(stories)
    return [test for _, test in splits], "by story"


def train_nubia(
    stories: Sequence[Story],
    judgments: Sequence[Judgment],
    output: str | Path,
    *,
    criterion: str | None = None,
    aggregator: str = "linear",
    calibration: str = "self",
    encoder: str | None = None,
    nli: str | None = None,
    lm: str | None = None,
    features: str = "6dim",
    sts: str | None = None,
    folds: int = 5,
    seed: int = 0,
    extractor: NubiaFeatures | None = None,
    device: str = "cpu",
    precision: str = "float32",
) -> tuple[NubiaModel, pd.DataFrame]:
    """Train NUBIA's aggregator on human judgments of stories with references.

    ``features`` is the feature set (:data:`FEATURE_SETS`: the paper's ``6dim`` by default,
    ``8dim`` with lengths, or NLI both ways); ``sts`` a cross-encoder for the similarity
    feature (default: the encoder's cosine). Returns the saved model and the feature table (one
    row per story, with ``target`` and the cross-validated ``heldout`` prediction). The model's
    ``report`` holds the held-out Pearson, Spearman and Kendall correlations.
    """
    from scipy.stats import kendalltau, pearsonr, spearmanr

    if calibration not in ("self", "clip"):
        raise ValueError(f"calibration must be self or clip; got {calibration!r}")
    check_choice(aggregator, AGGREGATORS, "aggregator")
    if folds < 2:
        raise ValueError(f"folds must be >= 2; got {folds}")
    usable, ratings, criterion = _targets(stories, judgments, criterion)
    low, high = float(ratings.min()), float(ratings.max())
    if high <= low:
        raise ValueError(f"every {criterion!r} rating is {low}: nothing to learn")
    target = (ratings - low) / (high - low)
    extractor = extractor or NubiaFeatures.load(
        encoder=encoder,
        nli=nli,
        lm=lm,
        features=features,
        sts=sts,
        device=device,
        precision=precision,
    )
    table = extractor.extract([s.story for s in usable], [s.references[0] for s in usable])
    names = feature_names(extractor.feature_set)
    x = table[names].to_numpy()
    heldout = np.zeros(len(target))
    splits, split = _nubia_folds(usable, folds, seed)
    for test_index in splits:
        train_index = np.setdiff1d(np.arange(len(target)), test_index)
        fitted = fit_aggregator(x[train_index], target[train_index], kind=aggregator, seed=seed)
        heldout[test_index] = fitted.predict(x[test_index])
    report = {
        "criterion": criterion,
        "n": len(target),
        "folds": len(splits),
        "split": split,
        "heldout_pearson": float(pearsonr(heldout, target)[0]),
        "heldout_spearman": float(spearmanr(heldout, target)[0]),
        "heldout_kendall": float(kendalltau(heldout, target)[0]),
    }
    final = fit_aggregator(x, target, kind=aggregator, seed=seed)
    settings = {"encoder": encoder, "nli": nli, "lm": lm, "sts": sts}
    signature = Signature(
        "nubia",
        {
            **extractor.identity(),
            "aggregator": aggregator,
            "calibration": calibration,
            "features": extractor.feature_set,
            "alignment": "best-cosine-sentence",
            "criterion": criterion,
            "n": len(target),
            "seed": seed,
        },
    )
    model = NubiaModel(final, names, settings, (low, high), calibration, signature, report)
    model.save(output)
    table = table.assign(id=[s.id for s in usable], target=target, heldout=heldout)
    return model, table


#: Kane et al. (2020), Table 5: the feature groups: semantic similarity (SS), linguistic
#: inference (LI: the NLI probabilities) and sentence intelligibility (SI: the perplexities).
FEATURE_GROUPS: dict[str, tuple[str, ...]] = {
    "SS": ("similarity",),
    "LI": tuple(f"{k}_{d}" for d in ("fwd", "bwd") for k in NLI_FEATURES),
    "SI": ("logppl_candidate", "logppl_reference"),
}
#: The subsets of Table 5, in its order.
ABLATION_SUBSETS = ("SI", "LI", "LI+SI", "SS", "SS+LI", "SS+SI", "SS+LI+SI")


def feature_ablation(
    table: pd.DataFrame,
    stories: Sequence[Story],
    *,
    aggregator: str = "linear",
    folds: int = 5,
    seed: int = 0,
    by: str | None = None,
) -> pd.DataFrame:
    """Kane et al. (2020), Table 5: the aggregator cross-validated on each subset of the
    feature groups (:data:`ABLATION_SUBSETS`) of a feature table (``train_nubia``'s: the
    features, ``id`` and ``target``), with the same folds as the model; held-out Pearson,
    Spearman and Kendall correlations overall and, with ``by`` (a story field such as
    ``language_pair``), within each group and their mean (the table's AVG column). Length
    features, when the set has them, belong to no group and are left out."""
    from scipy.stats import kendalltau, pearsonr, spearmanr

    by_id = {s.id: s for s in stories}
    ordered = [by_id[i] for i in table["id"]]
    target = table["target"].to_numpy(dtype=float)
    splits, _ = _nubia_folds(ordered, folds, seed)
    groups = np.asarray([str(s.extra.get(by, "")) for s in ordered]) if by is not None else None
    rows = []
    for subset in ABLATION_SUBSETS:
        names = [n for g in subset.split("+") for n in FEATURE_GROUPS[g] if n in table.columns]
        if not names:
            continue
        x = table[names].to_numpy(dtype=float)
        heldout = np.zeros(len(target))
        for test in splits:
            train = np.setdiff1d(np.arange(len(target)), test)
            fitted = fit_aggregator(x[train], target[train], kind=aggregator, seed=seed)
            heldout[test] = fitted.predict(x[test])
        parts = [("all", np.ones(len(target), dtype=bool))]
        if groups is not None:
            parts += [(str(g), groups == g) for g in sorted(set(groups))]
        found = []
        for name, mask in parts:
            if mask.sum() < 3:
                continue
            row: dict[str, Any] = {
                "subset": subset,
                "group": name,
                "features": ",".join(names),
                "n": int(mask.sum()),
                "pearson": float(pearsonr(heldout[mask], target[mask])[0]),
                "spearman": float(spearmanr(heldout[mask], target[mask])[0]),
                "kendall": float(kendalltau(heldout[mask], target[mask])[0]),
            }
            found.append(row)
        within = [r for r in found if r["group"] != "all"]
        if within:
            found.append(
                {
                    "subset": subset,
                    "group": "AVG",
                    "features": ",".join(names),
                    "n": sum(int(r["n"]) for r in within),
                    **{
                        m: float(np.mean([r[m] for r in within]))
                        for m in ("pearson", "spearman", "kendall")
                    },
                }
            )
        rows += found
    return pd.DataFrame(rows)
