"""ENGEN (Clark 2021, chapter 3): encoding of mentions, training (the loss falls), the two
ablations, saving and loading, the entity tasks on it, and generation with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storyeval.base.errors import StoryevalError
from storyeval.entities import AnnotatedText, Mention, detect_mentions
from storyeval.tuning.engen import (
    EngenConfig,
    EngenModel,
    EngenScorer,
    build_vocabulary,
    encode,
    tokenize,
    train_engen,
)

TEXT = "Emily saw Seth. She waved at him. Seth smiled."
MENTIONS = (Mention(0, 5, "e"), Mention(10, 14, "s"), Mention(16, 19, "e"), Mention(29, 32, "s"))


@pytest.fixture(scope="module")
def texts(human: Any, nlp: Any) -> list[AnnotatedText]:
    return detect_mentions([(s.id, s.story) for s in human[:40]], nlp=nlp)


@pytest.fixture(scope="module")
def trained(texts: list[AnnotatedText]) -> EngenModel:
    return train_engen(texts, config=EngenConfig(epochs=3, hidden=64, embedding=32, seed=1))


def test_encoding_marks_mention_starts_ends_and_entities() -> None:
    text = AnnotatedText("t", TEXT, MENTIONS)
    config = EngenConfig(min_count=1)
    vocab = build_vocabulary([text], config)
    encoded = encode(text, vocab, config)
    words = ["<s>"] + [w for w, _, _ in tokenize(TEXT)] + ["</s>"]
    assert [encoded.ids[i] for i in (1, 3)] == [vocab["emily"], vocab["seth"]]
    # entities numbered by first mention; every mention is one word here
    assert encoded.starts == {1: (0, 1), 3: (1, 1), 5: (0, 1), 8: (1, 1)}
    assert encoded.ends == {1: 0, 3: 1, 5: 0, 8: 1}
    assert [words[i] for i, e in enumerate(encoded.inside) if e >= 0] == [
        "Emily",
        "Seth",
        "She",
        "him",
    ]
    assert encoded.sentence[:5] == [0, 0, 0, 0, 0] and encoded.sentence[5] == 1
    assert encoded.ids[-1] == vocab["</s>"]


def test_training_lowers_the_loss_and_the_variants_differ(trained: EngenModel, texts) -> None:
    first, last = trained.history[0], trained.history[-1]
    assert last["train_word_nll"] < first["train_word_nll"] - 0.3
    assert last["dev_entity_nll"] < first["dev_entity_nll"]
    s2sa = train_engen(texts, config=EngenConfig(variant="s2sa", epochs=1, hidden=32, embedding=16))
    assert s2sa.history[0]["dev_entity_nll"] == 0.0  # no entity decisions to predict
    assert trained.signature.fields["variant"] == "engen"
    with pytest.raises(StoryevalError, match="needs mention annotations"):
        train_engen([AnnotatedText(str(i), "A b c.", ()) for i in range(5)])
    with pytest.raises(ValueError, match="variant must be one of"):
        EngenConfig(variant="gpt")


def test_max_pooling_is_the_default_and_the_best_epoch_is_kept(
    trained: EngenModel, texts: list[AnnotatedText], tmp_path: Path
) -> None:
    import json

    import torch

    assert trained.config.combine == "max" and trained.signature.fields["combine"] == "max"
    assert not hasattr(trained.module, "w_h")  # Eq. 3.5 has no parameters
    h, p, e = (torch.randn(4, 64) for _ in range(3))
    assert torch.equal(trained.module.combine(h, p, e), torch.maximum(torch.maximum(h, p), e))
    kept = [row for row in trained.history if row["kept"]]
    assert len(kept) == 1
    best = min(row["dev_word_nll"] + row["dev_entity_nll"] for row in trained.history)
    assert kept[0]["dev_word_nll"] + kept[0]["dev_entity_nll"] == best
    tanh = train_engen(
        texts[:8], config=EngenConfig(combine="tanh", epochs=1, hidden=16, embedding=8)
    )
    assert hasattr(tanh.module, "w_h")
    tanh.save(tmp_path / "old")  # a model saved before 0.4.0 has no combine: it was tanh
    meta_file = next(
        f for f in (tmp_path / "old").iterdir() if f.suffix == ".json" and "config" in f.read_text()
    )
    meta = json.loads(meta_file.read_text())
    del meta["config"]["combine"]
    meta_file.write_text(json.dumps(meta))
    assert EngenModel.load(tmp_path / "old").config.combine == "tanh"
    with pytest.raises(ValueError, match="combine must be one of"):
        EngenConfig(combine="sum")


def test_saved_model_scores_like_the_trained_one(trained: EngenModel, tmp_path: Path) -> None:
    trained.save(tmp_path / "engen")
    loaded = EngenModel.load(tmp_path / "engen")
    text = AnnotatedText("t", TEXT, MENTIONS)
    requests = [(TEXT[:16], "She", "e"), (TEXT[:16], "She", "s"), (TEXT[:16], "", "s")]
    here = EngenScorer(trained).bind([text]).score_mentions(requests)
    there = EngenScorer(loaded).bind([text]).score_mentions(requests)
    assert here == pytest.approx(there, abs=1e-5)
    assert here[0] != here[1]  # the cluster changes the score
    assert loaded.identity == trained.identity


def test_entity_tasks_and_generation_from_the_command_line(
    trained: EngenModel,
    texts: list[AnnotatedText],
    tmp_path: Path,
    run_cli: Any,
    examples_dir: Path,
) -> None:
    model_dir = trained.save(tmp_path / "engen")
    annotated = tmp_path / "annotated.jsonl"
    # one text: the commands' plumbing (every candidate of every mention reads the text again)
    annotated.write_text(json.dumps(texts[0].to_dict()) + "\n")
    code, out, err = run_cli(
        "entity-eval",
        "mentions",
        str(annotated),
        "--model",
        str(model_dir),
        "-o",
        str(tmp_path / "m"),
    )
    assert code == 0, out + err
    summary = (tmp_path / "m" / "mention_generation.csv").read_text()
    for task in ("cluster_and_mention", "cluster_only", "mention_only"):
        assert f"{trained.identity},{task}" in summary
    prompts = tmp_path / "prompts.jsonl"
    rows = [json.loads(line) for line in (examples_dir / "human.jsonl").open()][:2]
    prompts.write_text(
        "".join(json.dumps({"id": r["id"], "prompt": r["prompt"]}) + "\n" for r in rows)
    )
    outputs = []
    for name in ("a", "b"):
        code, out, err = run_cli(
            "generate", str(prompts), "--model", str(model_dir), "--top-p", "0.9",
            "--max-new-tokens", "80", "--seed", "4", "-o", str(tmp_path / f"{name}.jsonl"), "--no-progress",
        )  # fmt: skip
        assert code == 0, out + err
        outputs.append([json.loads(line) for line in (tmp_path / f"{name}.jsonl").open()])
    assert outputs[0] == outputs[1] and len(outputs[0]) == 2
    assert outputs[0][0]["signature"].startswith(f"generate|model:{trained.identity}")
    assert all(r["story"] for r in outputs[0])
    code, out, err = run_cli(
        "train", "engen", "--texts", str(annotated), "-o", str(tmp_path / "x"), "-q"
    )
    assert code == 2 and "at least 4 texts" in err


def test_every_token_of_a_long_text_is_read_and_scored(trained: EngenModel) -> None:
    """Before 0.9.0 ENGEN kept a text's first 398 tokens: a continuation after them scored 0
    (an empty sum), so every sentence-selection decision past them tied. Now a 900-word
    context is read whole: the encoding holds every token, and two continuations after it get
    different, real log-probabilities."""
    sentence = "Emily walked to the market and bought bread for her brother ."
    context = " ".join([sentence] * 75)  # 900 words
    config = trained.config
    encoded = encode(AnnotatedText("t", context, ()), trained.vocab, config)
    assert len(encoded.ids) == len(tokenize(context)) + 2 > 900
    scorer = EngenScorer(trained)
    good, odd = scorer.score([(context, "She smiled ."), (context, "The the of market .")])
    assert good < 0 and odd < 0 and good != odd


def test_attention_by_blocks_equals_attention_at_once(
    trained: EngenModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The previous-sentence attention and the softmax run by blocks of positions (memory
    linear in the text's length); the block size moves no number."""
    import torch

    from storyeval.tuning import engen

    words = "Seth ran home . He was late again . Emily laughed at him . They ate ."
    texts = [AnnotatedText(str(n), " ".join([words] * (n + 1)), ()) for n in range(3)]
    encoded = [encode(t, trained.vocab, trained.config) for t in texts]
    with torch.no_grad():
        whole = engen._forward(trained.module, encoded)
        again = engen._batch_terms(trained.module, encoded, *whole, trained.config)
        monkeypatch.setattr(engen, "BLOCK", 5)
        blocks = engen._forward(trained.module, encoded)
        terms = engen._batch_terms(trained.module, encoded, *blocks, trained.config)
    assert torch.allclose(whole[1], blocks[1], atol=1e-6)
    for (a, b), (c, d) in zip(terms, again, strict=True):
        assert torch.allclose(a, c, atol=1e-5) and torch.allclose(b, d, atol=1e-5)


def test_generation_passes_the_entities_distances_to_eq_3_3(
    trained: EngenModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eq. 3.3 scores an entity by its vector and the words since its last mention, in
    training and so in generation (before 0.9.0 generation passed 0 for every entity)."""
    import torch

    from storyeval.generate import DecodingConfig
    from storyeval.tuning.engen_generate import EngenLM

    lm = EngenLM(trained)
    seen: list[Any] = []
    scores = trained.module.entity_scores_batch

    def spy(h: Any, table: Any, valid: Any, distance: Any) -> Any:
        seen.append(distance.masked_fill(~valid, 0))
        return scores(h, table, valid, distance)

    monkeypatch.setattr(trained.module, "entity_scores_batch", spy)
    decoding = DecodingConfig(do_sample=True, max_new_tokens=30, top_p=1.0)
    lm.generate_texts([TEXT + " Emily"], decoding, generator=torch.Generator().manual_seed(0))
    assert seen and max(float(d.max()) for d in seen) > 0
