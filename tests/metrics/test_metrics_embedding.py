"""BERTScore, the encoder cache, MoverScore and embedding coherence against independent
references.

Provenance: the ``bert-score`` package 0.3.13 (``bert_score.score`` with ``model_type`` the
offline encoder's directory and ``num_layers``), transformers hidden states fed to POT's
``ot.emd2`` exactly as ``moverscore_v2.word_mover_score`` prepares them, and
sentence-transformers' own encoding of the offline all-MiniLM-L6-v2.
"""

from __future__ import annotations

import string
import warnings
from collections import defaultdict
from math import log

import numpy as np
import pytest

from storyeval.corpus import Story
from storyeval.metrics import score_stories
from storyeval.metrics.context import EncoderCache, LongTextWarning, ScoringContext


@pytest.fixture(scope="module")
def referenced(example_stories):
    return [s for s in example_stories if s.references][:12]


def _values(run, metric):
    return np.array([s.value for s in run.scores if s.metric == metric])


def _bert_score(cands, refs, encoder, **kwargs):
    import bert_score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p, r, f = bert_score.score(cands, refs, model_type=encoder.path, lang="en", **kwargs)
    return p.numpy(), r.numpy(), f.numpy()


def test_bertscore_matches_the_bert_score_package(  # the fast suite's bert-score parity test
    referenced, encoder, tmp_path
):
    cands = [s.story for s in referenced]
    refs = [s.references[0] for s in referenced]
    context = ScoringContext()
    distinct = len(set(cands) | set(refs))
    for layer, idf, encoded in ((4, False, distinct), (2, True, 2 * distinct)):
        run = score_stories(
            referenced,
            "bertscore_p,bertscore_r,bertscore_f",
            options={"bertscore.layer": layer, "bertscore.idf": idf},
            bootstrap=0,
            context=context,
        )
        expected = _bert_score(cands, refs, encoder, num_layers=layer, idf=idf)
        for metric, column in zip(
            ("bertscore_p", "bertscore_r", "bertscore_f"), expected, strict=True
        ):
            assert np.abs(_values(run, metric) - column).max() < 1e-4
        # each distinct text is encoded once per layer asked for, whatever reads it
        assert context.cache(None).stats.texts == encoded
    # rescaling with a user-given baseline file gives bert-score's rescaled numbers
    baseline = tmp_path / "baseline.csv"
    baseline.write_text(
        "LAYER,P,R,F\n0,0.1,0.1,0.1\n1,0.2,0.2,0.2\n2,0.3,0.3,0.3\n3,0.35,0.36,0.37\n4,0.4,0.41,0.42\n"
    )
    run = score_stories(
        referenced,
        "bertscore_f,bertscore_p",
        options={
            "bertscore.layer": 4,
            "bertscore.rescale": True,
            "bertscore.baseline": str(baseline),
        },
        bootstrap=0,
        context=context,
    )
    p, _, f = _bert_score(
        cands, refs, encoder, num_layers=4, rescale_with_baseline=True, baseline_path=str(baseline)
    )
    assert np.abs(_values(run, "bertscore_f") - f).max() < 1e-4
    assert np.abs(_values(run, "bertscore_p") - p).max() < 1e-4
    assert "baseline:baseline.csv" in run.scores[0].signature
    # three numbers work the same way
    run = score_stories(
        referenced[:3], "bertscore_f",
        options={"bertscore.layer": 4, "bertscore.rescale": True, "bertscore.baseline": "0.4,0.41,0.42"},
        bootstrap=0, context=context,
    )  # fmt: skip
    assert np.abs(_values(run, "bertscore_f") - f[:3]).max() < 1e-4
    # the layer-4 states were reused by the later runs: nothing was encoded again
    assert context.cache(None).stats.texts == 2 * distinct


@pytest.mark.slow
def test_bertscore_takes_the_max_over_references_like_bert_score(encoder):
    story = Story(
        "a",
        "",
        "The fox jumped over the sleeping dog and ran into the woods.",
        reference=["A dog slept while a fox jumped.", "The fox ran into the forest after a jump."],
    )
    run = score_stories([story], "bertscore_p,bertscore_r,bertscore_f", bootstrap=0)
    expected = _bert_score([story.story], [story.references], encoder, num_layers=4)
    for metric, column in zip(("bertscore_p", "bertscore_r", "bertscore_f"), expected, strict=True):
        assert _values(run, metric)[0] == pytest.approx(float(column[0]), abs=1e-4)


def test_shipped_baseline_rescales_and_is_named_in_the_signature(referenced):
    run = score_stories(
        referenced[:4], "bertscore_f", options={"bertscore.rescale": "true"}, bootstrap=0
    )
    raw = score_stories(referenced[:4], "bertscore_f", bootstrap=0)
    base = 0.47010276  # layer 4 F of src/storyeval/metrics/data/bertscore_baseline_all-MiniLM-L6-v2.csv
    assert np.allclose(
        _values(run, "bertscore_f"), (_values(raw, "bertscore_f") - base) / (1 - base)
    )
    assert "baseline:storyeval:bertscore_baseline_all-MiniLM-L6-v2.csv" in run.scores[0].signature


def test_encoder_cache_encodes_each_text_once_in_sorted_batches(encoder):
    cache = EncoderCache(encoder, batch_tokens=64)
    texts = ["A short one.", "A somewhat longer sentence with more words in it.", "A short one."]
    cache.request(texts, [2, 4])
    cache.request(["A short one."], [4])
    cache.run()
    assert cache.stats.texts == 2 and cache.stats.batches >= 1
    assert cache.embeddings("A short one.", 4).shape == (len(cache.token_ids("A short one.")), 384)
    # the cached layer equals a direct forward pass
    import torch

    with torch.no_grad():
        direct = encoder.model(
            **encoder.tokenizer(["A short one."], return_tensors="pt"), output_hidden_states=True
        ).hidden_states[2][0]
    assert np.abs(cache.embeddings("A short one.", 2) - direct.numpy()).max() < 1e-5
    assert cache.stats.texts == 2  # reading never re-encodes


def test_long_texts_are_windowed_never_truncated(encoder):
    cache = EncoderCache(encoder)
    pieces = cache._pieces(0, list(range(100, 140)), limit=12)  # 38 content tokens, windows of 10
    covered = []
    for piece in pieces:
        assert len(piece.ids) <= 12
        covered += list(
            range(piece.target_from, piece.target_from + piece.keep_to - piece.keep_from)
        )
    assert covered == list(range(40))  # every token (special ones included) exactly once
    text = " ".join(["The lighthouse keeper counted the ships that passed in the night."] * 60)
    with pytest.warns(LongTextWarning, match="overlapping windows"):
        states = cache.embeddings(text, 4)
    assert states.shape[0] == len(cache.token_ids(text)) > 512
    assert np.isfinite(states).all()


def test_moverscore_matches_a_direct_pot_computation(referenced, encoder):
    """Recompute moverscore_v2's word_mover_score by hand: last-layer states, idf dicts over
    the references and the stories, '##' and punctuation removed, L2 normalisation,
    Euclidean distances over the concatenated tokens, emd, 1 / (1 + cost)."""
    import ot
    import torch

    stories = referenced[:6]
    run = score_stories(stories, "moverscore", bootstrap=0)
    tokenizer, model = encoder.tokenizer, encoder.model

    def idf_dict(texts):
        count = defaultdict(int)
        for text in texts:
            for token in set(tokenizer(text)["input_ids"]):
                count[token] += 1
        table = defaultdict(lambda: log(len(texts) + 1))
        table.update({k: log((len(texts) + 1) / (c + 1)) for k, c in count.items()})
        return table

    hyps, refs = [s.story for s in stories], [s.references[0] for s in stories]
    idf_hyp, idf_ref = idf_dict(hyps), idf_dict(refs)

    def embed(text, table):
        encoded = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            states = model(**encoded, output_hidden_states=True).hidden_states[-1][0].double()
        tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
        weights = torch.tensor([table[int(i)] for i in encoded["input_ids"][0]], dtype=torch.double)
        for k, token in enumerate(tokens):
            if "##" in token or token in set(string.punctuation):
                states[k] = 0
                weights[k] = 0
        return states, weights

    for story, ours in zip(stories, _values(run, "moverscore"), strict=True):
        ref_states, ref_w = embed(story.references[0], idf_ref)
        hyp_states, hyp_w = embed(story.story, idf_hyp)
        raw = torch.cat([ref_states, hyp_states])
        raw = raw / (raw.norm(dim=-1, keepdim=True) + 1e-30)
        distance = torch.cdist(raw, raw).numpy()
        c1 = np.zeros(len(raw))
        c2 = np.zeros(len(raw))
        c1[: len(ref_w)] = ref_w.numpy()
        c2[len(ref_w) :] = hyp_w.numpy()
        cost = ot.emd2(c1 / c1.sum(), c2 / c2.sum(), distance)
        assert ours == pytest.approx(1 / (1 + cost), abs=1e-6)


def test_embedding_coherence_matches_sentence_transformers(encoder):
    from sentence_transformers import SentenceTransformer

    from storyeval.text import split_sentences

    text = "Mara opened the door. The hallway was dark. She lit a candle and walked on. A cat followed her."
    run = score_stories([Story("a", "", text, system="x")], "embedding_coherence", bootstrap=0)
    model = SentenceTransformer(encoder.path, device="cpu")
    vectors = model.encode(split_sentences(text), normalize_embeddings=True)
    expected = float(np.mean([vectors[i] @ vectors[i + 1] for i in range(len(vectors) - 1)]))
    assert run.scores[0].value == pytest.approx(expected, abs=1e-5)
    single = score_stories(
        [Story("b", "", "Only one sentence.", system="x")], "embedding_coherence", bootstrap=0
    )
    assert np.isnan(single.scores[0].value)
