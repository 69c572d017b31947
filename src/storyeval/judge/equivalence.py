"""The LLM judge that decides whether two samples tell essentially the same story, for
``functional_diversity(kernel="judge")`` (Zhang et al. 2025, NoveltyBench).

Registered in :data:`storyeval.metrics.set_diversity.EQUIVALENCE_JUDGES` as ``llm``: the
metric asks for it by name, so the metrics need nothing of the judge code.
"""

from __future__ import annotations

from storyeval.judge.backends import BackendSpec, Decoding
from storyeval.judge.parse import yes_probability
from storyeval.judge.prompts import equivalence_request
from storyeval.metrics.set_diversity import EQUIVALENCE_JUDGES, SameStory


def llm_equivalence(model: str | None, device: str, precision: str) -> tuple[SameStory, str]:
    """A local causal LM asked whether two texts are essentially the same story: the
    probability of *yes*, renormalised over yes and no, at least one half (an answer that is
    neither counts as different). Returns the decision and the model's identity."""
    spec = BackendSpec(models=(model,), device=device, precision=precision)
    backend = spec.build()[0]

    def same(first: str, second: str, prompt: str = "") -> bool:
        (answer,) = backend.answer(
            [equivalence_request(first, second, prompt)], Decoding(max_new_tokens=8)
        )
        p_yes = yes_probability(answer)
        return p_yes is not None and p_yes >= 0.5

    return same, backend.identity


EQUIVALENCE_JUDGES.register("llm", llm_equivalence, replace=True)
