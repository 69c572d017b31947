"""Story generation from prompts with any causal LM and decoding setting."""

from storyeval.generate.core import DecodingConfig, clean_continuation, generate_stories

__all__ = ["DecodingConfig", "clean_continuation", "generate_stories"]
