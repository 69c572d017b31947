"""Shared state of one scoring run: loaded models and the encoder cache.

The encoder cache encodes each distinct text (story, reference, prompt, sentence) once per
run and per encoder, in batches sorted by length, keeping only the hidden layers that the
selected metrics asked for. BERTScore, MoverScore, the BERTScore coherence metrics, the
contextual variants of WMS/SMS and embedding coherence all read from it.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from storyeval.base.errors import ModelLoadError, StoryevalWarning
from storyeval.models.devices import progress_bar as open_progress_bar


class UndefinedScoreWarning(StoryevalWarning):
    """Some scores are undefined (NaN) for a reason the user can act on."""


class LongTextWarning(StoryevalWarning):
    """A text was longer than the model's input and was encoded in overlapping windows."""


@contextlib.contextmanager
def windowed_texts() -> Iterator[list[str]]:
    """Collect the encoder's long-text warnings (each a text read in windows) into the list
    it yields, so that the run's notes count them instead of a warning per text; every
    other warning goes on as it came."""
    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LongTextWarning)
        yield found
    for warning in caught:
        if issubclass(warning.category, LongTextWarning):
            found.append(str(warning.message))
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )


def _layer_modules(model: Any) -> tuple[Any, str] | None:
    """The ModuleList of transformer layers of a BERT-like model and its attribute name."""
    for owner_name in ("encoder", "transformer", ""):
        owner = getattr(model, owner_name, None) if owner_name else model
        if owner is None:
            continue
        for attr in ("layer", "layers"):
            modules = getattr(owner, attr, None)
            if (
                modules is not None
                and hasattr(modules, "__len__")
                and hasattr(modules, "__getitem__")
            ):
                return owner, attr
    return None


def num_layers(model: Any) -> int:
    """Number of transformer layers of an encoder (hidden states 0..n, 0 = embeddings)."""
    found = _layer_modules(model)
    if found is not None:
        owner, attr = found
        return len(getattr(owner, attr))
    count = getattr(model.config, "num_hidden_layers", None)
    if not isinstance(count, int):
        raise ModelLoadError("cannot tell how many layers the encoder has")
    return count


def resolve_layer(model: Any, layer: int | None, *, default: int | None = None) -> int:
    """Turn a layer option (negative counts from the top, None means ``default`` or the last
    layer) into an index of ``hidden_states`` (0 = embeddings, n = last layer)."""
    total = num_layers(model)
    if layer is None:
        layer = total if default is None else default
    index = layer if layer >= 0 else total + 1 + layer
    if not 0 <= index <= total:
        raise ValueError(
            f"layer must be between {-total - 1} and {total} for this encoder; got {layer}"
        )
    return index


@dataclass
class _Piece:
    text_index: int
    ids: list[int]
    keep_from: int  # positions (in ids) whose embeddings this piece provides
    keep_to: int
    target_from: int  # where they go in the text's token sequence


@dataclass
class CacheStats:
    """What the cache did: texts encoded, forward passes, tokens, and seconds spent."""

    texts: int = 0
    requests: int = 0
    hits: int = 0
    batches: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    seconds: float = 0.0
    long_texts: int = 0


@dataclass
class EncoderCache:
    """Hidden states of each distinct text under one encoder, computed once.

    Parameters
    ----------
    encoder : LoadedModel
        From :func:`storyeval.models.load_encoder` (``.tokenizer``, ``.model``).
    batch_tokens : int
        Token budget of one batch (rows times the longest row, after sorting by length).
    progress : bool
        Show a progress bar.

    Examples
    --------
    >>> from storyeval.models import load_encoder
    >>> cache = EncoderCache(load_encoder())
    >>> cache.request(["It rained.", "It rained."], layers=[4])
    >>> cache.run()
    >>> cache.stats.texts, cache.embeddings("It rained.", 4).shape[1]
    (1, 384)
    """

    encoder: Any
    batch_tokens: int = 4096
    max_batch: int = 32
    progress: bool = False
    stats: CacheStats = field(default_factory=CacheStats)
    device: str = "cpu"
    precision: str = "float32"

    def __post_init__(self) -> None:
        self._ids: dict[str, np.ndarray] = {}
        # numpy arrays, or float32 tensors on the GPU when the cache runs there
        self._layers: dict[str, dict[int, Any]] = {}
        self._host: dict[str, dict[int, np.ndarray]] = {}
        self._gpu_bytes, self._gpu_budget = 0, cast("int | None", None)
        self._pending: dict[str, set[int]] = {}

    # ------------------------------------------------------------------ public

    @property
    def identity(self) -> str:
        """The encoder's identity (for signatures)."""
        return str(self.encoder.identity)

    @property
    def n_layers(self) -> int:
        """The encoder's number of hidden layers."""
        return num_layers(self.encoder.model)

    def request(self, texts: Iterable[str], layers: Iterable[int]) -> None:
        """Ask for ``layers`` (indices of hidden states) of ``texts``; nothing runs yet."""
        wanted = {int(layer) for layer in layers}
        for text in texts:
            key = _key(text)
            self.stats.requests += 1
            have = self._layers.get(key, {})
            missing = wanted - set(have)
            if missing:
                self._pending.setdefault(key, set()).update(missing)
            else:
                self.stats.hits += 1

    def run(self) -> None:
        """Encode every pending text in one pass per set of layers."""
        if not self._pending:
            return
        pending = self._pending
        self._pending = {}
        all_layers = sorted({layer for layers in pending.values() for layer in layers})
        self._encode(list(pending), all_layers, pending)

    def embeddings(self, text: str, layer: int) -> np.ndarray:
        """Token embeddings (including the special tokens) of ``text`` at ``layer``,
        shape ``(n_tokens, hidden)``; encodes on demand if not requested before."""
        key, value = self._stored(text, layer)
        if isinstance(value, np.ndarray):
            return value
        host = self._host.setdefault(key, {})
        if layer not in host:  # kept on the GPU: copied to the host once, when first asked
            host[layer] = value.cpu().numpy()
        return host[layer]

    def device_embeddings(self, text: str, layer: int) -> Any:
        """:meth:`embeddings` as a float32 torch tensor where the cache keeps it (on a GPU,
        there: no copy through the host)."""
        _, value = self._stored(text, layer)
        if isinstance(value, np.ndarray):
            import torch

            return torch.from_numpy(value)
        return value

    def _stored(self, text: str, layer: int) -> tuple[str, Any]:
        key = _key(text)
        if layer not in self._layers.get(key, {}):
            self.request([text], [layer])
            self.run()
        else:
            self.stats.hits += 1
        return key, self._layers[key][layer]

    def token_ids(self, text: str) -> np.ndarray:
        """The token ids (including special tokens) the encoder saw for ``text``."""
        key = _key(text)
        if key not in self._ids:
            self._ids[key] = np.asarray(self._tokenize([key])[0], dtype=np.int64)
        return self._ids[key]

    def sentence_embedding(self, text: str, layer: int) -> np.ndarray:
        """Mean of the token embeddings (special tokens included, as sentence-transformers
        mean pooling does), shape ``(hidden,)``."""
        return cast("np.ndarray", self.embeddings(text, layer).mean(axis=0))

    def text_embeddings(self, texts: Sequence[str], layer: int | None = None) -> np.ndarray:
        """The mean-pooled ``layer`` (default: the last) of each text, encoded in one pass,
        shape ``(len(texts), hidden)``, float64."""
        chosen = self.n_layers if layer is None else layer
        self.request(texts, [chosen])
        self.run()
        return np.vstack([self.sentence_embedding(t, chosen) for t in texts]).astype(np.float64)

    # ------------------------------------------------------------------ internals

    def _tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        tokenizer = self.encoder.tokenizer
        encoded = tokenizer(list(texts), add_special_tokens=True, truncation=False)["input_ids"]
        return [list(ids) for ids in encoded]

    def _pieces(self, index: int, ids: list[int], limit: int) -> list[_Piece]:
        if len(ids) <= limit:
            return [_Piece(index, ids, 0, len(ids), 0)]
        # overlapping windows over the content; each token takes its embedding from the window
        # in which it is farthest from an edge (most context on both sides)
        first, content, last = ids[:1], ids[1:-1], ids[-1:]
        width = limit - 2
        step = max(1, width // 2)
        starts = list(range(0, max(1, len(content) - width) + step, step))
        starts = sorted({min(s, max(0, len(content) - width)) for s in starts})
        owner = np.zeros(len(content), dtype=np.int64)
        best = np.full(len(content), -1)
        positions = np.arange(len(content))
        for w, start in enumerate(starts):
            end = min(start + width, len(content))
            inside = (positions >= start) & (positions < end)
            margin = np.minimum(positions - start, end - 1 - positions)
            better = inside & (margin > best)
            owner[better] = w
            best[better] = margin[better]
        pieces = []
        for w, start in enumerate(starts):
            end = min(start + width, len(content))
            mine = np.flatnonzero(owner == w)
            if len(mine) == 0:
                continue
            window = first + content[start:end] + last
            lo, hi = int(mine[0]), int(mine[-1]) + 1
            keep_from, keep_to = lo - start + 1, hi - start + 1
            target = lo + 1
            if w == 0:  # the first window also provides the leading special token
                keep_from, target = 0, 0
            if hi == len(content):  # the last one provides the trailing special token
                keep_to += 1
            pieces.append(_Piece(index, window, keep_from, keep_to, target))
        return pieces

    def _batches(self, pieces: Sequence[_Piece]) -> list[list[int]]:
        """Pieces sorted by length, in batches within the token budget and the row cap."""
        order = sorted(range(len(pieces)), key=lambda i: len(pieces[i].ids))
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            longest = len(pieces[i].ids)
            if current and (
                (len(current) + 1) * longest > self.batch_tokens or len(current) >= self.max_batch
            ):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _encode(self, keys: list[str], layers: list[int], wanted: dict[str, set[int]]) -> None:
        import torch

        from storyeval.models.devices import autocast, place

        place(self.encoder, self.device)
        model = self.encoder.model
        limit = int(self.encoder.max_length)
        started = time.perf_counter()
        all_ids = self._tokenize(keys)
        pieces: list[_Piece] = []
        for index, (key, ids) in enumerate(zip(keys, all_ids, strict=True)):
            self._ids[key] = np.asarray(ids, dtype=np.int64)
            made = self._pieces(index, ids, limit)
            if len(made) > 1:
                self.stats.long_texts += 1
                warnings.warn(
                    f"a text of {len(ids)} tokens is longer than the encoder's {limit}; it was "
                    f"encoded in {len(made)} overlapping windows (never truncated)",
                    LongTextWarning,
                    stacklevel=4,
                )
            pieces.extend(made)
        top = max(layers)
        on_gpu = self._room_on_gpu(sum(len(ids) for ids in all_ids) * len(layers))
        filled: dict[int, dict[int, Any]] = {}
        batches = self._batches(pieces)
        pad_id = self.encoder.tokenizer.pad_token_id or 0
        bar = open_progress_bar(len(batches), "encoding", self.progress)
        with (
            torch.inference_mode(),
            _truncated(model, top),
            autocast(self.device, self.precision),
        ):
            for batch in batches:
                rows = [pieces[i].ids for i in batch]
                width = max(len(r) for r in rows)
                input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for r, row in enumerate(rows):
                    input_ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
                    mask[r, : len(row)] = 1
                result = model(
                    input_ids=input_ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    output_hidden_states=True,
                )
                hidden = result.hidden_states
                if hidden is None or len(hidden) <= top:
                    raise RuntimeError(
                        f"the encoder returned {0 if hidden is None else len(hidden)} hidden states; "
                        f"layer {top} was asked for"
                    )
                self.stats.batches += 1
                self.stats.tokens += int(mask.sum())
                self.stats.padded_tokens += len(rows) * width
                chosen = [pieces[i] for i in batch]
                self._keep(hidden, layers, chosen, all_ids, filled, on_gpu=on_gpu)
                bar.update(1)
        bar.close()
        for index, key in enumerate(keys):
            store = self._layers.setdefault(key, {})
            for layer in wanted[key]:
                store[layer] = filled[index][layer]
        self.stats.texts += len(keys)
        self.stats.seconds += time.perf_counter() - started

    def _room_on_gpu(self, token_rows: int) -> bool:
        """Whether ``token_rows`` more hidden-state rows may stay on the GPU: the cache keeps
        at most a quarter of the free memory it found (the rest is the models' and batches');
        past that, texts are kept on the host as on a CPU."""
        if not self.device.startswith("cuda"):
            return False
        from storyeval.models.devices import batch_scale

        if self._gpu_budget is None:  # batch_scale: free memory in units of 4 GiB
            self._gpu_budget = int(batch_scale(self.device) * 2**30)
        width = int(getattr(self.encoder.model.config, "hidden_size", 1024))
        needed = token_rows * width * 4
        if self._gpu_bytes + needed > self._gpu_budget:
            return False
        self._gpu_bytes += needed
        return True

    def _keep(
        self,
        hidden: Any,
        layers: list[int],
        pieces: list[_Piece],
        all_ids: list[list[int]],
        filled: dict[int, dict[int, Any]],
        *,
        on_gpu: bool,
    ) -> None:
        """Each piece's rows of a batch's hidden states into its text's arrays: ``on_gpu``
        they stay there (device copies, no wait; :meth:`embeddings` copies a text to the
        host when asked); else one copy to the host per layer and batch."""
        import torch

        source = {
            layer: hidden[layer].float() if on_gpu else hidden[layer].float().cpu().numpy()
            for layer in layers
        }
        for row, piece in enumerate(pieces):
            target = filled.setdefault(piece.text_index, {})
            n_tokens = len(all_ids[piece.text_index])
            for layer in layers:
                states = source[layer][row, piece.keep_from : piece.keep_to]
                if layer not in target:
                    shape = (n_tokens, states.shape[1])
                    target[layer] = (
                        torch.empty(shape, dtype=torch.float32, device=states.device)
                        if on_gpu
                        else np.empty(shape, dtype=np.float32)
                    )
                target[layer][piece.target_from : piece.target_from + len(states)] = states


def _key(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"texts must be str; got {type(text).__name__}")
    key = text.strip()
    if not key:
        raise ValueError("cannot encode an empty text")
    return key


def _warm_up(model: Any) -> None:
    """Run the full model once so that lazily installed hooks (transformers 5 collects hidden
    states through forward hooks installed on the first call) cover every layer before a
    truncated pass."""
    if getattr(model, "_storyeval_warmed_up", False):
        return
    import torch

    from storyeval.models.devices import model_device

    device = model_device(model)  # the warm-up batch goes where the model is (a GPU too)
    with torch.inference_mode():
        model(
            input_ids=torch.tensor([[0, 0]], dtype=torch.long, device=device),
            attention_mask=torch.ones((1, 2), dtype=torch.long, device=device),
            output_hidden_states=True,
        )
    model._storyeval_warmed_up = True


class _truncated:
    """Run only the first ``top`` layers (what bert-score does with ``num_layers``)."""

    def __init__(self, model: Any, top: int) -> None:
        self.model = model
        self.top = top
        self.saved: Any = None
        self.found = _layer_modules(model)

    def __enter__(self) -> None:
        if self.found is None:
            return
        owner, attr = self.found
        modules = getattr(owner, attr)
        if self.top < len(modules):
            _warm_up(self.model)
            self.saved = modules
            setattr(owner, attr, modules[: max(self.top, 0)] if self.top > 0 else modules[:0])

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None and self.found is not None:
            owner, attr = self.found
            setattr(owner, attr, self.saved)
            self.saved = None


class ScoringContext:
    """Models and caches shared by the metrics of one run (each model loaded once).

    Parameters
    ----------
    progress : bool
        Show progress bars for long work.
    device : str
        Where models run: ``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto``
        (:func:`storyeval.models.devices.resolve_device`).
    precision : {"float32", "bfloat16", "float16"}
        Matrix products of every model in this precision (float16 on GPUs only); recorded
        in the signatures.
    """

    def __init__(
        self, *, progress: bool = False, device: str = "cpu", precision: str = "float32"
    ) -> None:
        from storyeval.models.devices import batch_scale, check_precision, resolve_device

        self.device = resolve_device(device)
        self.precision = check_precision(precision, self.device)
        self.batch_scale = batch_scale(self.device)
        self.progress = progress
        self._caches: dict[str, EncoderCache] = {}
        self.notes: list[str] = []
        #: results shared between metrics of one run (e.g. spaCy parses), keyed by the caller
        self.memo: dict[Any, Any] = {}
        self._given: dict[str, Any] = {}

    def fork(self) -> ScoringContext:
        """A new context on the same device, with the same given models and fresh caches."""
        other = ScoringContext(progress=False, device=self.device, precision=self.precision)
        other._given = dict(self._given)
        return other

    def block_context(self, whole: bool) -> ScoringContext:
        """The context a block of a run scores in: this one for a block spanning the whole
        run, else a fork (each block has its own encoder caches, so memory stays bounded)."""
        return self if whole else self.fork()

    def use(self, model: Any) -> str | None:
        """A name under which the metrics of this context find ``model``: a name or None is
        returned as is; a loaded model object (an encoder, causal LM, word vectors or spaCy
        pipeline the caller already has) is kept and a name for it returned."""
        if model is None or isinstance(model, str):
            return model
        if not hasattr(model, "identity") and not hasattr(model, "pipe_names"):
            raise TypeError(
                "a model must be a name, a path or a loaded model (storyeval.models.load_* or "
                f"storyeval.models.wrap_model); got {type(model).__name__}"
            )
        key = f"<given:{id(model)}>"
        self._given[key] = model
        return key

    def given(self, name: str | None) -> Any | None:
        """The model object registered under ``name`` by :meth:`use`, if any."""
        return self._given.get(name) if name is not None else None

    def encoder(self, name: str | None = None) -> Any:
        """The encoder ``name`` (a model given to :meth:`use`, or loaded once per process)."""
        if name in self._given:
            return self._given[name]
        from storyeval.models import load_encoder

        return load_encoder(name)

    def cache(self, name: str | None = None) -> EncoderCache:
        """The encoder cache of the encoder ``name`` (None: the offline default)."""
        encoder = self.encoder(name)
        key = encoder.identity
        if key not in self._caches:
            self._caches[key] = EncoderCache(
                encoder,
                batch_tokens=int(4096 * self.batch_scale),
                max_batch=int(32 * self.batch_scale),
                progress=self.progress,
                device=self.device,
                precision=self.precision,
            )
        return self._caches[key]

    @property
    def caches(self) -> list[EncoderCache]:
        """The encoder caches of this context."""
        return list(self._caches.values())

    def causal_lm(self, name: str | None = None) -> Any:
        """The causal LM ``name`` (a model given to :meth:`use`, or loaded once per process),
        on this context's device."""
        from storyeval.models.devices import place

        if name in self._given:
            return place(self._given[name], self.device)
        from storyeval.models import load_causal_lm

        return place(load_causal_lm(name), self.device)

    def compute_fields(self) -> dict[str, str]:
        """Where and how the models of this context run, for signatures."""
        from storyeval.models.devices import compute_fields

        return compute_fields(self.device, self.precision)

    def glove(self, name: str | None = None) -> Any:
        """The word vectors ``name`` (given to :meth:`use`, or loaded once per process)."""
        if name in self._given:
            return self._given[name]
        from storyeval.models import load_glove

        return load_glove(name)

    def spacy(self, name: str | None = None) -> Any:
        """The spaCy pipeline ``name`` (given to :meth:`use`, or loaded once per process)."""
        if name in self._given:
            return self._given[name]
        from storyeval.models import load_spacy

        return load_spacy(name)

    def sentences(self, text: str, method: str = "pysbd") -> list[str]:
        """The sentences of ``text`` (memoised: every metric of a run splits alike)."""
        key = ("sentences", method, text)
        if key not in self.memo:
            from storyeval.text import split_sentences

            self.memo[key] = split_sentences(text, method=method)  # type: ignore[arg-type]
        return list(self.memo[key])

    def progress_bar(self, total: int, description: str) -> Any:
        """A progress bar (a no-op unless the context shows progress)."""
        return open_progress_bar(total, description, self.progress)
