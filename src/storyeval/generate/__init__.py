"""Story generation from prompts with any causal LM and decoding setting."""

from storyeval.generate.core import (
    DEFAULT_MAX_ATTEMPTS,
    DROP_FIELDS,
    Continuation,
    DecodingConfig,
    GenerationError,
    block_seed,
    build_context,
    clean_continuation,
    continue_text,
    default_separator,
    generate_stories,
    generation_summary,
)
from storyeval.generate.filters import (
    COPY_THRESHOLD,
    WordListFilter,
    copy_overlap,
    max_copy_overlap,
)
from storyeval.generate.prompts import read_priming_texts, read_prompts

__all__ = [
    "COPY_THRESHOLD",
    "DEFAULT_MAX_ATTEMPTS",
    "DROP_FIELDS",
    "Continuation",
    "DecodingConfig",
    "GenerationError",
    "WordListFilter",
    "block_seed",
    "build_context",
    "clean_continuation",
    "continue_text",
    "copy_overlap",
    "default_separator",
    "generate_stories",
    "generation_summary",
    "max_copy_overlap",
    "read_priming_texts",
    "read_prompts",
]
