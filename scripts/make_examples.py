"""Regenerate the machine continuations of the example corpus (examples/stories.jsonl).

The human stories in examples/human.jsonl were written for this project. Each prompt is
continued by the default offline LM under two decoding settings; the human story is each
machine story's reference. Run: .venv/bin/python scripts/make_examples.py
"""

from __future__ import annotations

from pathlib import Path

from storyeval.corpus import Story, read_stories, write_stories
from storyeval.generate import DecodingConfig, generate_stories

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SETTINGS = {
    "smollm2-p0.9": DecodingConfig(top_p=0.9, max_new_tokens=170),
    "smollm2-k40-t0.7": DecodingConfig(top_k=40, temperature=0.7, max_new_tokens=170),
}


def main() -> None:
    human = read_stories(EXAMPLES / "human.jsonl")
    prompts = [Story(h.id, h.prompt, h.story, reference=h.story, system="human") for h in human]
    stories: list[Story] = [
        Story(h.id, h.prompt, h.story, system="human", extra={"prompt_id": h.id, **h.extra})
        for h in human
    ]
    for offset, (system, decoding) in enumerate(SETTINGS.items()):
        stories += generate_stories(
            prompts,
            decoding=decoding,
            seed=2026 + offset,
            max_words=130,
            system=system,
            batch_size=10,
        )
    write_stories(EXAMPLES / "stories.jsonl", stories)
    print(f"wrote {len(stories)} stories to {EXAMPLES / 'stories.jsonl'}")


if __name__ == "__main__":
    main()
