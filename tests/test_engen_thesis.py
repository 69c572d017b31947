"""ENGEN as Clark's thesis describes it (sections 3.2-3.4): the class-factored softmax over
exchange-clustered word classes, the data pipeline (downcasing, NUM, min count, 50-sentence
segments, head words of long mentions from every source), SGD at 0.1, the new entity of
Eqs. 3.3-3.4, and models saved before these settings loading as they were trained."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storyeval.entities import (
    AnnotatedText,
    Mention,
    mention_head,
    read_entity_texts,
    reduce_long_mentions,
)
from storyeval.tuning.engen import (
    EncodedText,
    EngenConfig,
    EngenModel,
    build_vocabulary,
    encode,
    train_engen,
)
from storyeval.tuning.engen_text import NUM, exchange_clusters, segments

TEXT = "Emily saw Seth. She waved at him. Seth smiled."
MENTIONS = (Mention(0, 5, "e"), Mention(10, 14, "s"), Mention(16, 19, "e"), Mention(29, 32, "s"))


def _class_objective(sequences: list[list[int]], assignment: list[int], classes: int) -> float:
    counts = np.zeros((classes, classes))
    for seq in sequences:
        for a, b in itertools.pairwise(seq):
            counts[assignment[a], assignment[b]] += 1

    def xlogx(v: np.ndarray) -> float:
        v = v[v > 0]
        return float((v * np.log(v)).sum())

    return xlogx(counts) - xlogx(counts.sum(1)) - xlogx(counts.sum(0))


def test_exchange_clusters_reach_a_local_optimum_of_the_class_bigram_likelihood() -> None:
    rng = np.random.default_rng(3)
    size, classes = 24, 4
    # two "parts of speech": even words follow odd ones and the other way round
    sequences = [
        [int(rng.integers(0, size // 2)) * 2 + (k % 2) for k in range(int(rng.integers(3, 15)))]
        for _ in range(80)
    ]
    assignment = exchange_clusters(sequences, size, classes)
    assert sorted(set(assignment)) == list(range(classes))  # no class emptied
    best = _class_objective(sequences, assignment, classes)
    for word in range(size):  # no single move improves it
        for other in range(classes):
            moved = list(assignment)
            moved[word] = other
            if moved.count(assignment[word]) == 0:
                continue
            assert _class_objective(sequences, moved, classes) <= best + 1e-9
    frequency = np.bincount([w for seq in sequences for w in seq], minlength=size)
    start = np.empty(size, dtype=int)
    start[np.argsort(-frequency, kind="stable")] = np.arange(size) % classes
    assert best > _class_objective(sequences, start.tolist(), classes)
    assert not {assignment[w] for w in range(0, size, 2)} & {
        assignment[w] for w in range(1, size, 2)
    }
    with pytest.raises(ValueError, match="classes must be at least 1"):
        exchange_clusters(sequences, size, 0)


def test_the_thesis_data_pipeline() -> None:
    text = AnnotatedText(
        "t", "Emily saw 3 dogs in 1999. Emily smiled. The END.", (Mention(0, 5, "e"),)
    )
    config = EngenConfig(min_count=2)
    assert list(build_vocabulary([text], config)) == ["<unk>", "<s>", "</s>", ".", "emily", NUM]
    vocab = build_vocabulary([text], EngenConfig(min_count=1))
    assert "end" in vocab and "END" not in vocab
    kept = build_vocabulary([text], EngenConfig(min_count=1, lowercase=False, numbers=False))
    assert {"END", "1999", "3"} <= set(kept)
    encoded = encode(text, vocab, EngenConfig(min_count=1))
    assert encoded.ids[3] == vocab[NUM]  # "3"
    pieces = segments(text, 2)
    assert [p.text for p in pieces] == ["Emily saw 3 dogs in 1999. Emily smiled.", "The END."]
    assert [pieces[0].words(m) for m in pieces[0].mentions] == ["Emily"]
    assert segments(text, 0) == [text] and segments(text, 3) == [text]


def test_long_mentions_become_head_words_for_every_source(tmp_path: Path) -> None:
    assert [
        w[slice(*mention_head(w))]
        for w in (
            "the old man with the hat",
            "a girl named Sue",
            "the very tall tree",
            "Dr. Jane Smith of Boston",
        )
    ] == ["man", "girl", "tree", "Smith"]
    text = "The old man with the hat waved. He left."
    annotated = AnnotatedText("a", text, (Mention(0, 24, "m"), Mention(32, 34, "m")))
    reduced = reduce_long_mentions(annotated)
    assert [reduced.words(m) for m in reduced.mentions] == ["man", "He"]
    assert reduce_long_mentions(annotated, None) == annotated
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text(json.dumps(annotated.to_dict()) + "\n")
    conll = tmp_path / "a.v4_gold_conll"
    words = ["The", "old", "man", "with", "the", "hat", "waved", "."]
    corefs = ["(1", "-", "-", "-", "-", "1)", "-", "-"]
    conll.write_text(
        "#begin document (a); part 000\n"
        + "".join(
            f"a 0 {i} {w} X - - - - - * {c}\n"
            for i, (w, c) in enumerate(zip(words, corefs, strict=True))
        )
        + "\n#end document\n"
    )
    for path in (jsonl, conll):
        texts, _ = read_entity_texts(path)
        assert texts[0].words(texts[0].mentions[0]) == "man"
        whole, _ = read_entity_texts(path, max_words=None)
        assert whole[0].words(whole[0].mentions[0]).startswith("The old man with the hat")


@pytest.fixture(scope="module")
def texts(human: Any, nlp: Any) -> list[AnnotatedText]:
    from storyeval.entities import detect_mentions

    return detect_mentions([(s.id, s.story) for s in human[:24]], nlp=nlp)


@pytest.fixture(scope="module")
def thesis_model(texts: list[AnnotatedText]) -> EngenModel:
    return train_engen(texts, config=EngenConfig(epochs=2, hidden=32, embedding=16, classes=12))


def test_class_factored_softmax_is_a_distribution_and_is_saved(
    thesis_model: EngenModel, tmp_path: Path
) -> None:
    import torch

    module, config = thesis_model.module, thesis_model.config
    fields = thesis_model.signature.fields
    assert (config.softmax, config.optimizer, config.learning_rate) == ("class", "sgd", 0.1)
    assert fields["softmax"] == "class" and fields["word_classes"] == "exchange"
    assert fields["min_count"] == 10 and fields["segment_sentences"] == 50
    classes = module.word_class.tolist()
    assert len(classes) == len(thesis_model.vocab) and len(set(classes)) == 12
    log_probs = module.word_log_probs(torch.randn(5, config.hidden) * 3)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(5), atol=1e-5)
    # P(word) = P(class) P(word | class)
    c = torch.randn(1, config.hidden)
    class_p = torch.softmax(module.class_out(c), -1)[0]
    per_class = torch.zeros(12).index_add(0, module.word_class, module.word_log_probs(c)[0].exp())
    assert torch.allclose(per_class, class_p, atol=1e-5)
    loaded = EngenModel.load(thesis_model.save(tmp_path / "m"))
    assert loaded.module.word_class.tolist() == classes
    assert torch.allclose(loaded.module.word_log_probs(c), module.word_log_probs(c))


def test_new_entities_follow_eqs_3_3_and_3_4(thesis_model: EngenModel) -> None:
    import torch

    module = thesis_model.module
    assert not hasattr(module, "new_score")  # the new entity is scored with r, as Eq. 3.3
    h = torch.randn(thesis_model.config.hidden)
    entities = torch.randn(2, thesis_model.config.hidden)
    scores = _entity_scores(module, h, entities, 2, torch.tensor([0, 3]), 5)
    logits = torch.cat(
        [entities @ module.e_score(h), (module.new_entity @ module.e_score(h))[None]]
    )
    logits[:2] += module.recency * torch.log1p(torch.tensor([5.0, 2.0]))
    assert torch.allclose(scores, torch.log_softmax(logits, 0), atol=1e-6)
    drawn = [module.new_vector(True, torch.Generator().manual_seed(k)) for k in range(2)]
    assert not torch.equal(drawn[0], drawn[1])
    spread = (drawn[0] - module.new_entity).std().item()
    assert 0.005 < spread < 0.02  # sigma = 0.01
    assert torch.equal(module.new_vector(False), module.new_entity)


def test_old_models_load_with_their_settings(
    texts: list[AnnotatedText], tmp_path: Path, thesis_model: EngenModel
) -> None:
    import torch

    from storyeval.tuning.engen import LEGACY_CONFIG

    old = EngenConfig(
        **{**LEGACY_CONFIG, "learning_rate": 3e-3},
        epochs=1,
        hidden=8,
        embedding=8,
    )
    model = train_engen(texts[:8], config=old)
    assert hasattr(model.module, "new_score") and not hasattr(model.module, "class_out")
    assert "Emily" in model.vocab or any(w[:1].isupper() for w in model.vocab)
    directory = model.save(tmp_path / "old")
    meta_file = directory / "storyeval.json"
    meta = json.loads(meta_file.read_text())
    meta["config"] = {
        k: v
        for k, v in meta["config"].items()
        if k in ("variant", "embedding", "hidden", "max_entities", "epochs", "batch_size",
                 "learning_rate", "dropout", "seed", "max_tokens")
    }  # fmt: skip
    meta_file.write_text(json.dumps(meta))
    loaded = EngenModel.load(directory)
    assert loaded.config == old
    c = torch.randn(2, 8)
    assert torch.allclose(loaded.module.word_log_probs(c), model.module.word_log_probs(c))


def test_train_engen_command_takes_the_thesis_options(
    texts: list[AnnotatedText], tmp_path: Path, run_cli: Any
) -> None:
    annotated = tmp_path / "texts.jsonl"
    annotated.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in texts[:12]))
    code, out, err = run_cli(
        "train", "engen", "--texts", str(annotated), "-o", str(tmp_path / "m"), "--epochs", "1",
        "--hidden", "16", "--embedding", "8", "--softmax", "full", "--optimizer", "adam",
        "--lr", "0.003", "--min-count", "2", "--keep-case", "--segment-sentences", "3", "-q",
    )  # fmt: skip
    assert code == 0, out + err
    assert "softmax:full" in out and "optimizer:adam" in out and "min_count:2" in out
    assert "lowercase:no" in out or "lowercase:false" in out.lower()
    assert "vocabulary:" in out
    code, out, err = run_cli(
        "train", "engen", "--texts", str(annotated), "-o", str(tmp_path / "x"),
        "--optimizer", "rmsprop", "-q",
    )  # fmt: skip
    assert code == 2 and "optimizer must be one of sgd, adam" in err


def _one_text_terms(
    model: Any, text: EncodedText, states: Any, previous: Any, cfg: EngenConfig
) -> tuple[Any, Any]:
    """The definition the batched pass must meet: one text, position by position, with
    Python lists of entities (storyeval's implementation before 0.7.0)."""
    import torch
    import torch.nn.functional as F

    n = len(text.ids)
    h_all, p_all = states[: n - 1], previous[: n - 1]
    device = states.device
    zero = torch.zeros(cfg.hidden, dtype=states.dtype, device=device)
    entity_ctx = [zero] * (n - 1)
    decisions = torch.zeros(n - 1, dtype=states.dtype, device=device)
    if cfg.entities:
        r_logits = model.r(h_all).squeeze(-1)
        starts = torch.tensor(
            [1.0 if t + 1 in text.starts else 0.0 for t in range(n - 1)], device=device
        )
        decisions = -F.binary_cross_entropy_with_logits(r_logits, starts, reduction="none")
        entities: list[Any] = []
        last: list[int] = []
        salient: int | None = None
        extra: dict[int, Any] = {}
        fresh: dict[int, Any] = {}  # a new entity's drawn vector until its mention ends
        for t in range(n - 1):  # predicting word t + 1 from the state after word t
            h, target = states[t], t + 1
            starting = text.starts.get(target)
            if starting is not None:
                entity, length = starting
                known = len(entities)
                stack = torch.stack(entities) if entities else None
                recent = torch.tensor(last or [0], device=device)
                scores = _entity_scores(model, h, stack, known, recent, t)
                if entity >= known:
                    fresh[entity] = model.new_vector(model.training)
                vector = entities[entity] if entity < known else fresh[entity]
                length_logp = torch.log_softmax(model.length(torch.cat([h, vector])), dim=0)
                extra[t] = scores[min(entity, known)] + length_logp[length - 1]
            inside = text.inside[target]
            if inside >= 0:
                entity_ctx[t] = (
                    entities[inside] if inside < len(entities) else fresh.get(inside, zero)
                )
            elif salient is not None:
                entity_ctx[t] = entities[salient]
            ended = text.ends.get(target)
            if ended is not None:
                base = (
                    entities[ended] if ended < len(entities) else fresh.pop(ended, model.new_entity)
                )
                updated = model.update(base, states[target])
                if ended < len(entities):
                    entities = [*entities[:ended], updated, *entities[ended + 1 :]]
                    last[ended] = target
                else:
                    entities, last = [*entities, updated], [*last, target]
                salient = ended
        if extra:
            index = torch.tensor(sorted(extra), device=device)
            decisions = decisions.index_add(
                0, index, torch.stack([extra[t] for t in sorted(extra)])
            )
    e_all = torch.stack(entity_ctx)
    combined = model.combine(h_all, p_all, e_all)
    log_probs = model.word_log_probs(model.drop(combined))
    words = log_probs.gather(1, torch.tensor(text.ids[1:], device=device).unsqueeze(1))
    return words.squeeze(1), decisions


@pytest.mark.parametrize(
    "settings",
    [
        {"variant": "engen"},
        {"variant": "entitynlm"},
        {"variant": "s2sa"},
        {"softmax": "full", "new_entity": "linear", "combine": "tanh"},
    ],
)
def test_the_batched_entity_pass_equals_one_text_at_a_time(
    texts: list[AnnotatedText], settings: dict[str, Any]
) -> None:
    import torch

    from storyeval.tuning.engen import _batch_terms, _forward

    config = EngenConfig(epochs=1, hidden=16, embedding=8, min_count=2, classes=6, **settings)
    model = train_engen(texts, config=config, max_steps=2)
    encoded = [encode(t, model.vocab, config) for t in texts[:6]]
    assert any(e.starts for e in encoded)
    with torch.no_grad():
        states, previous = _forward(model.module, encoded)
        batched = _batch_terms(model.module, encoded, states, previous, config)
        for row, text in enumerate(encoded):
            words, decisions = _one_text_terms(
                model.module, text, states[row], previous[row], config
            )
            assert torch.allclose(words, batched[row][0], atol=1e-5)
            assert torch.allclose(decisions, batched[row][1], atol=1e-5)


def test_batched_generation_equals_one_prompt_at_a_time(texts: list[AnnotatedText]) -> None:
    """Without entity draws (s2sa) and with greedy decoding, a batch of prompts of different
    lengths continues each prompt as it would alone (padding, packing and the sentence
    buffers change nothing); with entities and sampling, a seed gives the same batch twice."""
    import torch

    from storyeval.generate.core import DecodingConfig
    from storyeval.tuning.engen_generate import EngenLM

    prompts = [texts[0].text[:60], texts[1].text[:150], texts[2].text[:20] + "."]
    config = EngenConfig(variant="s2sa", epochs=1, hidden=16, embedding=8, min_count=2, classes=6)
    lm = EngenLM(train_engen(texts, config=config, max_steps=3))
    greedy = DecodingConfig(do_sample=False, max_new_tokens=25)
    together = lm.generate_texts(prompts, greedy, generator=torch.Generator().manual_seed(0))
    alone = [
        lm.generate_texts([p], greedy, generator=torch.Generator().manual_seed(0))[0]
        for p in prompts
    ]
    assert together == alone and all(together)
    engen = EngenLM(
        train_engen(
            texts,
            config=EngenConfig(epochs=1, hidden=16, embedding=8, min_count=2, classes=6),
            max_steps=3,
        )
    )
    sampling = DecodingConfig(do_sample=True, top_p=0.9, max_new_tokens=25)
    runs = [
        engen.generate_texts(prompts, sampling, generator=torch.Generator().manual_seed(5))
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and len(runs[0]) == 3
    other = engen.generate_texts(prompts, sampling, generator=torch.Generator().manual_seed(6))
    assert other != runs[0]


def _entity_scores(model: Any, h: Any, entities: Any, known: int, last: Any, t: int) -> Any:
    """One text's entity scores at position ``t`` (known + 1 values) through the batched
    :meth:`entity_scores_batch`, as the one-text definition above uses them."""
    import torch

    table = entities[:known] if known else h.new_zeros(0, h.shape[-1])
    distance = (t - last[:known]).to(h.dtype) if known else h.new_zeros(0)
    valid = torch.ones(1, known, dtype=torch.bool, device=h.device)
    return model.entity_scores_batch(h[None], table[None], valid, distance[None])[0]
