"""Loading models and language resources, once per process, shared by every caller.

Names resolve in this order:

1. ``None`` or an alias of an offline default (see :data:`OFFLINE_DEFAULTS`) loads the
   packaged copy installed by ``make setup``;
2. an existing local directory (or file) loads from disk;
3. anything else is a Hugging Face hub name, loaded through ``from_pretrained(name)``. When
   the hub cannot be reached, a one-line :class:`~storyeval.base.errors.ModelLoadError` says so and
   how to pass a local path instead.

Every loaded model carries an ``identity`` (name plus file hash or hub revision) for
signatures. Heavy imports (torch, transformers, spaCy) happen inside the loaders.
"""

from storyeval.models.loading import (
    DEFAULT_CAUSAL_LM,
    DEFAULT_ENCODER,
    DEFAULT_GLOVE,
    DEFAULT_SPACY,
    OFFLINE_DEFAULTS,
    LoadedModel,
    WordVectors,
    cache_dir,
    clear_cache,
    file_identity,
    load_causal_lm,
    load_encoder,
    load_glove,
    load_pretrained,
    load_spacy,
    prepare_offline_models,
    resolve_model_path,
    spacy_identity,
    wrap_model,
)

__all__ = [
    "DEFAULT_CAUSAL_LM",
    "DEFAULT_ENCODER",
    "DEFAULT_GLOVE",
    "DEFAULT_SPACY",
    "OFFLINE_DEFAULTS",
    "LoadedModel",
    "WordVectors",
    "cache_dir",
    "clear_cache",
    "file_identity",
    "load_causal_lm",
    "load_encoder",
    "load_glove",
    "load_pretrained",
    "load_spacy",
    "prepare_offline_models",
    "resolve_model_path",
    "spacy_identity",
    "wrap_model",
]
