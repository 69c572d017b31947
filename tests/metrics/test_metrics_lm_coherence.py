"""Perplexity and the coherence metrics against direct computations.

Provenance: perplexity against the causal LM's own ``labels`` loss (transformers) and a
hand-written sliding-window loop over the model's log-probabilities; BERTScore-1/2 against
``bert_score.score`` on the same sentence pairs; BERT-NSP-1/2 against a
``BertForNextSentencePrediction`` loaded independently from the same checkpoint.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from storyeval.base.errors import ModelLoadError
from storyeval.corpus import Story
from storyeval.metrics import score_stories
from storyeval.metrics.lm import perplexity_stats
from storyeval.text import split_sentences

TEXT = "The lighthouse keeper climbed the stairs every evening. One night the lamp would not light."
PROMPT = "Nobody had visited the island for years."


def _logprobs(lm, ids):
    with torch.no_grad():
        logits = lm.model(torch.tensor([ids])).logits[0].double()
    return torch.log_softmax(logits, -1)


def test_perplexity_matches_the_models_own_loss(causal_lm):
    """Against the model's float64 log-probabilities to 1e-6, and its own float32 ``labels``
    loss to 1e-4 (whose float32 reduction differs by about 1e-5 on some CPUs)."""
    tokenizer = causal_lm.tokenizer
    ids = [tokenizer.bos_token_id, *tokenizer(TEXT, add_special_tokens=False)["input_ids"]]
    with torch.no_grad():
        loss = causal_lm.model(torch.tensor([ids]), labels=torch.tensor([ids])).loss.item()
    logprobs = _logprobs(causal_lm, ids)
    exact = -sum(logprobs[k - 1, ids[k]].item() for k in range(1, len(ids))) / (len(ids) - 1)
    run = score_stories(
        [Story("a", PROMPT, TEXT, system="x")],
        "perplexity",
        options={"perplexity.context": "none"},
        bootstrap=0,
    )
    assert run.scores[0].value == pytest.approx(math.exp(exact), rel=1e-6)
    assert run.scores[0].value == pytest.approx(math.exp(loss), rel=1e-4)
    assert "context:none" in run.scores[0].signature and "SmolLM2" in run.scores[0].signature


def test_prompt_is_context_and_only_story_tokens_are_scored(causal_lm):
    tokenizer = causal_lm.tokenizer
    context = [tokenizer.bos_token_id, *tokenizer(PROMPT, add_special_tokens=False)["input_ids"]]
    target = tokenizer(" " + TEXT, add_special_tokens=False)["input_ids"]
    logprobs = _logprobs(causal_lm, context + target)
    nll = -sum(logprobs[len(context) + k - 1, t].item() for k, t in enumerate(target))
    stats = perplexity_stats(causal_lm, [TEXT], [PROMPT])
    assert stats[0, 1] == len(target)
    assert stats[0, 0] == pytest.approx(nll, rel=1e-5)


def test_sliding_window_scores_every_token_once_with_left_context(causal_lm):
    tokenizer = causal_lm.tokenizer
    ids = [tokenizer.bos_token_id, *tokenizer(TEXT, add_special_tokens=False)["input_ids"]]
    window, stride = 8, 3
    expected, scored, previous_end = 0.0, 0, 0
    for begin in range(0, len(ids), stride):  # the Hugging Face perplexity recipe, by hand
        end = min(begin + window, len(ids))
        first = max(previous_end, begin + 1)
        logprobs = _logprobs(causal_lm, ids[begin:end])
        for position in range(first, end):
            expected -= logprobs[position - begin - 1, ids[position]].item()
            scored += 1
        previous_end = end
        if end == len(ids):
            break
    stats = perplexity_stats(causal_lm, [TEXT], window=window, stride=stride)
    assert stats[0, 1] == scored == len(ids) - 1  # nothing truncated
    assert stats[0, 0] == pytest.approx(expected, rel=1e-5)
    full = perplexity_stats(causal_lm, [TEXT])
    assert stats[0, 0] > full[0, 0]  # less context, higher loss


def test_bfloat16_perplexity_is_close_to_float32_and_signed(causal_lm):
    stories = [Story("a", PROMPT, TEXT, system="x"), Story("b", "", PROMPT, system="x")]
    exact = score_stories(stories, "perplexity", bootstrap=0)
    fast = score_stories(
        stories, "perplexity", options={"perplexity.precision": "bfloat16"}, bootstrap=0
    )
    for a, b in zip(exact.scores, fast.scores, strict=True):
        # mean NLL per token within 0.1 nats (seen: 0.05 on the 8-token text; on the example
        # corpus the median story moves by 0.2%)
        assert abs(math.log(b.value) - math.log(a.value)) < 0.1
        assert "precision:float32" in a.signature and "precision:bfloat16" in b.signature
    # autocast must not leak out of the scoring call
    assert not torch.is_autocast_enabled("cpu")
    with pytest.raises(ValueError, match="float16 is not supported on cpu"):
        perplexity_stats(causal_lm, [TEXT], precision="float16")


def test_corpus_and_mean_item_perplexity_in_the_system_table(causal_lm):
    stories = [
        Story("a", "", "The cat sat on the mat.", system="x"),
        Story(
            "b",
            "",
            "Colourless green ideas sleep furiously beneath the quiet violet engine.",
            system="x",
        ),
    ]
    run = score_stories(stories, "perplexity", bootstrap=50)
    table = run.systems.set_index("statistic")
    values = np.array([s.value for s in run.scores])
    stats = perplexity_stats(causal_lm, [s.story for s in stories])
    assert np.allclose(values, np.exp(stats[:, 0] / stats[:, 1]))
    assert table.loc["mean_item_perplexity", "estimate"] == pytest.approx(values.mean())
    assert table.loc["corpus_perplexity", "estimate"] == pytest.approx(
        math.exp(stats[:, 0].sum() / stats[:, 1].sum())
    )
    assert table.loc["corpus_perplexity", "ci_low"] <= table.loc["corpus_perplexity", "estimate"]


def test_bertscore_prompt_and_prev_match_bert_score_on_sentence_pairs(short_stories, encoder):
    import bert_score

    stories = short_stories[:3]
    run = score_stories(stories, "bertscore_prompt,bertscore_prev", bootstrap=0)
    values = {(s.item_id, s.metric): s.value for s in run.scores}
    for story in stories:
        sentences = split_sentences(story.story)
        previous = [story.prompt, *sentences[:-1]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, _, f1 = bert_score.score(
                sentences,
                [story.prompt] * len(sentences),
                model_type=encoder.path,
                num_layers=4,
                lang="en",
            )
            _, _, f2 = bert_score.score(
                sentences, previous, model_type=encoder.path, num_layers=4, lang="en"
            )
        assert values[(story.id, "bertscore_prompt")] == pytest.approx(f1.mean().item(), abs=1e-4)
        assert values[(story.id, "bertscore_prev")] == pytest.approx(f2.mean().item(), abs=1e-4)


def test_nsp_refuses_the_offline_encoder_with_a_helpful_error(short_stories):
    with pytest.raises(ModelLoadError) as caught:
        score_stories(short_stories[:1], "nsp_prompt", bootstrap=0)
    message = str(caught.value)
    assert "bert-base-uncased" in message
    assert "storyeval train nsp --stories HUMAN.jsonl -o DIR" in message
    assert "nsp.model" in message


def test_nsp_with_a_trained_head_checkpoint(short_stories, nsp_checkpoint):
    from transformers import BertForNextSentencePrediction, BertTokenizerFast

    stories = short_stories[:3]
    run = score_stories(
        stories, "nsp_prompt,nsp_prev", options={"nsp.model": str(nsp_checkpoint)}, bootstrap=0
    )
    values = {(s.item_id, s.metric): s.value for s in run.scores}
    model = BertForNextSentencePrediction.from_pretrained(nsp_checkpoint).eval()
    tokenizer = BertTokenizerFast.from_pretrained(nsp_checkpoint)

    def follows(first, second):
        with torch.no_grad():
            logits = model(**tokenizer(first, second, return_tensors="pt")).logits[0]
        return torch.softmax(logits, -1)[0].item()

    for story in stories:
        sentences = split_sentences(story.story)
        nsp1 = np.mean([follows(story.prompt, s) for s in sentences])
        nsp2 = np.mean(
            [
                follows(story.prompt if i == 0 else sentences[i - 1], s)
                for i, s in enumerate(sentences)
            ]
        )
        assert values[(story.id, "nsp_prompt")] == pytest.approx(nsp1, abs=1e-5)
        assert values[(story.id, "nsp_prev")] == pytest.approx(nsp2, abs=1e-5)
    assert f"{nsp_checkpoint.name}@" in run.scores[0].signature.split("|")[1]
    labels = score_stories(
        stories[:1],
        "nsp_prompt",
        options={"nsp.model": str(nsp_checkpoint), "nsp.score": "label"},
        bootstrap=0,
    )
    assert labels.scores[0].value in {k / len(split_sentences(stories[0].story)) for k in range(4)}


def test_nsp_hub_model_without_network_names_the_nsp_option(short_stories, monkeypatch):
    from storyeval.models import loading

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loading._hub_reachable.cache_clear()
    try:
        with pytest.raises(ModelLoadError, match=r"--option nsp\.model=/path/to/model"):
            score_stories(short_stories[:1], "nsp_prev", options={"nsp.model": "bert-base-uncased"})
    finally:
        loading._hub_reachable.cache_clear()


def test_nsp_reports_contexts_it_reads_in_part(nsp_checkpoint):
    """A prompt of ~600 tokens is longer than the 512 the NSP head reads beside a sentence:
    the run says so in a note instead of cutting it silently."""
    from storyeval.corpus import Story
    from storyeval.learn.metrics import load_nsp_model, nsp_cuts
    from storyeval.metrics import score_stories

    prompt = " ".join(["The old lighthouse keeper counted the ships."] * 75)
    story = Story("a", prompt, "He slept. The sea was calm.", system="x")
    run = score_stories(
        [story], "nsp_prompt", options={"nsp.model": str(nsp_checkpoint)}, bootstrap=0
    )
    assert any("2 of 2 contexts" in note for note in run.metrics["nsp_prompt"].notes)
    model = load_nsp_model(str(nsp_checkpoint))
    assert nsp_cuts(model, [("A short prompt.", "A sentence.")]) == (0, 0)
