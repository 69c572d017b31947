"""Classifier-based evaluation of style transfer (issue 14 section 2, De Mattei et al. 2021):
the corpus, its split and the classifiers' training pairs; the checks and the compliancy
score worked out by hand with stand-in classifiers; real classifiers trained on a two-register
corpus the test builds; `storyeval classify-eval` end to end."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from storyeval.analyses.classifier_eval import (
    Classifiers,
    ClassifyEvalWarning,
    TransferOutput,
    ah_examples,
    check_transfers,
    compliancy_table,
    evaluate_transfers,
    hh_examples,
    split_corpus,
    styled_texts,
    train_classifiers,
)
from storyeval.base.errors import StoryevalError
from storyeval.corpus import Story, read_stories
from storyeval.learn.trainer import TrainingConfig

CHARACTERS = ["Anna", "Boris", "Clara", "Dmitri", "Elena", "Felix", "Greta", "Hugo"]
OBJECTS = ["lantern", "violin", "map", "letter", "compass", "kettle", "bicycle", "painting"]
PLACES = ["harbour", "library", "garden", "station", "market", "chapel", "bakery", "museum"]


def formal(character: str, thing: str, place: str) -> str:
    return (
        f"{character} discovered the {thing} at the {place} and subsequently examined it "
        "with considerable care."
    )


def casual(character: str, thing: str, place: str) -> str:
    return f"omg so {character} totally found this {thing} at the {place} lol, like super weird!!"


def two_register_corpus(groups: int) -> list[Story]:
    """Aligned formal and casual texts of the same content, each with its source document."""
    combos = list(itertools.product(CHARACTERS, OBJECTS, PLACES))
    random.Random(0).shuffle(combos)
    stories = []
    for i, content in enumerate(combos[:groups]):
        document = "Write about {}, who finds a {} at the {}.".format(*content)
        for style, write in (("formal", formal), ("casual", casual)):
            stories.append(
                Story(
                    f"{style[0]}{i}",
                    document,
                    write(*content),
                    system=style,
                    extra={"pair": f"g{i}"},
                )
            )
    return stories


def write_stories(path: Path, stories: list[Story]) -> Path:
    path.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in stories), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- corpus


def test_styled_texts_need_exactly_two_styles():
    stories = two_register_corpus(3)
    texts, pair = styled_texts(stories)
    assert pair == ("casual", "formal") and len(texts) == 6
    assert {t.group for t in texts} == {"g0", "g1", "g2"} and texts[0].document.startswith("Write")
    third = [*stories, Story("x", "", "Yo.", system="slang")]
    with pytest.raises(StoryevalError, match=r"two styles.*--styles"):
        styled_texts(third)
    assert len(styled_texts(third, styles=["formal", "slang"])[0]) == 4
    with pytest.raises(StoryevalError, match="no style"):
        styled_texts([*stories, Story("y", "", "Hm.")])


def test_split_keeps_groups_together_and_is_reproducible():
    texts, _ = styled_texts(two_register_corpus(30))
    split = split_corpus(texts, test_fraction=0.2, dev_fraction=0.1, seed=3)
    groups = [{t.group for t in part} for part in (split.train, split.dev, split.test)]
    assert not (groups[0] & groups[1] or groups[0] & groups[2] or groups[1] & groups[2])
    assert (len(groups[2]), len(groups[1]), len(groups[0])) == (6, 3, 21)
    again = split_corpus(texts, test_fraction=0.2, dev_fraction=0.1, seed=3)
    assert [t.id for t in again.test] == [t.id for t in split.test]
    assert [t.id for t in split_corpus(texts, seed=4).test] != [t.id for t in split.test]


def test_training_pairs_are_aligned_matches_and_random_mismatches():
    texts, _ = styled_texts(two_register_corpus(5))
    group_of = {t.text: t.group for t in texts}
    style_of = {t.text: t.style for t in texts}
    hh = hh_examples(texts, seed=0)
    assert len(hh) == 20 and sum(e.match for e in hh) == 10  # 5 groups x 2 directions, balanced
    for example in hh:
        assert style_of[example.first] != style_of[example.second]
        assert (group_of[example.first] == group_of[example.second]) == example.match
    ah = ah_examples(texts, seed=0)
    document_of = {t.text: t.document for t in texts}
    assert len(ah) == 20 and sum(e.match for e in ah) == 10
    for example in ah:
        assert (document_of[example.second] == example.first) == example.match
    assert [e.second for e in hh_examples(texts, seed=0)] == [e.second for e in hh]


# --------------------------------------------------------------------------- by hand


class FixedStyle:
    """A stand-in style classifier: the style named in a lookup table."""

    identity = "fixed-style"

    def __init__(self, decisions: dict[str, str]) -> None:
        self.decisions = decisions

    def predict(self, texts: list[str]) -> list[str]:
        return [self.decisions[t] for t in texts]


class FixedMatch:
    """A stand-in match classifier: P(match) from a lookup table of pairs."""

    identity = "fixed-match"

    def __init__(self, probabilities: dict[tuple[str, str], float]) -> None:
        self.table = probabilities

    def probabilities(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        return np.array([self.table[p] for p in pairs])


def test_checks_and_compliancy_by_hand():
    corpus = [
        Story("s1", "D1", "source one", system="a"),
        Story("s2", "D2", "source two", system="a"),
        Story("s3", "", "source three", system="b"),  # no document: AH does not apply
    ]
    sources, _ = styled_texts(corpus)
    outputs = [
        TransferOutput("o1", "sys", "s1", "out one"),  # b, content kept, fits: compliant
        TransferOutput("o2", "sys", "s2", "out two"),  # still a: style not reversed
        TransferOutput("o3", "sys", "s3", "out three"),  # a from b, content lost (HH 0.2)
        TransferOutput("o4", "sys", "s1", "out four"),  # b, content kept, AH fails (0.4)
    ]
    # s2 is misclassified as b; its output stays a: the decision is reversed, but the output
    # is the source's own style, so "main" passes and "target" fails (the paper's rule).
    style = FixedStyle(
        {
            "source one": "a",
            "source two": "b",
            "source three": "b",
            "out one": "b",
            "out two": "a",
            "out three": "a",
            "out four": "b",
        }
    )
    hh = FixedMatch(
        {
            ("source one", "out one"): 0.9,
            ("source two", "out two"): 0.8,
            ("source three", "out three"): 0.2,
            ("source one", "out four"): 0.7,
        }
    )
    ah = FixedMatch({("D1", "out one"): 0.6, ("D2", "out two"): 0.9, ("D1", "out four"): 0.4})
    classifiers = Classifiers(Path("."), ("a", "b"), style, hh, ah)  # type: ignore[arg-type]
    items = check_transfers(classifiers, sources, outputs)
    assert items["main"].tolist() == [True, True, True, True]
    assert items["target"].tolist() == [True, False, True, True]
    assert items["hh"].tolist() == [True, True, False, True]
    assert items["ah"].tolist() == [True, True, None, False]
    assert items["compliant"].tolist() == [True, True, False, False]
    assert items["direction"].tolist() == ["a->b", "a->b", "b->a", "a->b"]

    table = compliancy_table(items).set_index(["direction", "measure"])
    assert table.loc[("all", "compliancy"), "estimate"] == pytest.approx(2 / 4)
    assert table.loc[("all", "ah"), "n"] == 3  # s3 has no document
    assert table.loc[("all", "ah"), "estimate"] == pytest.approx(2 / 3)
    assert table.loc[("a->b", "target"), "estimate"] == pytest.approx(2 / 3)
    assert table.loc[("b->a", "compliancy"), "estimate"] == 0.0
    low, high = table.loc[("all", "compliancy"), ["ci_low", "ci_high"]]
    assert 0.0 < low < 0.5 < high < 1.0  # Clopper-Pearson for 2 of 4: [0.068, 0.932]
    assert (round(low, 3), round(high, 3)) == (0.068, 0.932)


# --------------------------------------------------------------------------- real classifiers


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("classify-eval")
    return write_stories(folder / "corpus.jsonl", two_register_corpus(40))


@pytest.fixture(scope="module")
def trained(corpus_file: Path, encoder: Any) -> tuple[Path, dict[str, Any]]:
    output = corpus_file.parent / "classifiers"
    summary = train_classifiers(
        read_stories(corpus_file),
        output,
        max_length=48,
        training=TrainingConfig(epochs=1, batch_size=16, learning_rate=2e-5, seed=1),
        progress=False,
    )
    return output, summary


def test_trained_classifiers_on_held_out_gold_data(trained):
    directory, summary = trained
    gold = pd.DataFrame(summary["gold"]).set_index(["classifier", "class"])
    assert set(gold.index.get_level_values(0)) == {"main", "hh", "ah"}
    assert gold.loc[("main", "formal"), "support"] == 8  # 8 held-out groups, one text each
    assert (gold.loc["main", "f1"] >= 0.9).all()  # two clearly different registers
    assert (gold.loc["hh", "f1"] >= 0.8).all() and (gold.loc["ah", "f1"] >= 0.8).all()
    bound = pd.DataFrame(summary["upper_bound"]).set_index(["direction", "measure"])
    assert bound.loc[("all", "main"), "estimate"] >= 0.9
    assert bound.loc[("all", "compliancy"), "n"] == 16
    for name in ("main", "hh", "ah"):
        assert (directory / name / "storyeval.json").is_file()
    loaded = Classifiers.load(directory)
    assert loaded.styles == ("casual", "formal")
    assert loaded.main.predict(["omg lol this is so cool!!"]) == ["casual"]
    assert "style_classifier" in summary["signatures"]["main"]


def transfer_systems(corpus: list[Story], test_ids: set[str]) -> list[Story]:
    """copy (the source unchanged), good (the other register, same content) and drift (the
    other register, another content) for every held-out source."""
    by_id = {s.id: s for s in corpus}
    outputs = []
    for story in corpus:
        if story.id not in test_ids:
            continue
        counterpart = by_id[("c" if story.id[0] == "f" else "f") + story.id[1:]]
        drift = next(
            s
            for s in corpus
            if s.system == counterpart.system and s.extra["pair"] != story.extra["pair"]
        )
        for system, text in (
            ("copy", story.story),
            ("good", counterpart.story.replace("found", "got")),
            ("drift", drift.story),
        ):
            outputs.append(
                Story(f"{system}-{story.id}", "", text, system=system, extra={"source": story.id})
            )
    return outputs


def test_compliancy_separates_systems_that_bleu_ranks_the_other_way(trained, corpus_file):
    directory, summary = trained
    corpus = read_stories(corpus_file)
    outputs = transfer_systems(corpus, set(summary["split"]["test"]))
    result = evaluate_transfers(Classifiers.load(directory), corpus, outputs)
    table = result.summary.set_index(["system", "direction"])
    copy, good, drift = (table.loc[(s, "all")] for s in ("copy", "good", "drift"))
    assert (
        copy["main"] == 0.0 and copy["compliancy"] == 0.0 and copy["bleu"] == pytest.approx(100.0)
    )
    assert good["compliancy"] >= 0.8 and good["main"] >= 0.9
    assert drift["main"] >= 0.9 and drift["hh"] <= 0.2 and drift["compliancy"] <= 0.2
    assert copy["bleu"] > good["bleu"] > drift["bleu"]
    assert ("(gold)", "all") in table.index
    assert set(table.loc["good"].index) == {"casual->formal", "formal->casual", "all"}
    assert result.signature.name == "classify_eval"


def test_evaluating_training_sources_warns(trained, corpus_file):
    directory, summary = trained
    corpus = read_stories(corpus_file)
    outputs = transfer_systems(corpus, set(summary["split"]["train"][:2]))
    with pytest.warns(ClassifyEvalWarning, match="trained on"):
        result = evaluate_transfers(Classifiers.load(directory), corpus, outputs, overlap=False)
    assert result.notes and "bleu" not in result.summary.columns


def test_classify_eval_cli(trained, corpus_file, tmp_path, run_cli, tiny_models):
    directory, summary = trained
    corpus = read_stories(corpus_file)
    outputs = write_stories(
        tmp_path / "outputs.jsonl", transfer_systems(corpus, set(summary["split"]["test"]))
    )
    code, stdout, stderr = run_cli(
        "classify-eval", "evaluate", str(outputs), "--classifiers", str(directory),
        "--corpus", str(corpus_file), "-o", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, stderr
    assert "compliancy" in stdout and "signature: classify_eval" in stdout
    for name in (
        "items.csv",
        "compliancy.csv",
        "summary.csv",
        "classifiers.csv",
        "classify-eval.md",
    ):
        assert (tmp_path / "out" / name).is_file()
    report = (tmp_path / "out" / "classify-eval.md").read_text(encoding="utf-8")
    assert "held-out gold data" in report and "(gold)" in report

    bad = write_stories(
        tmp_path / "bad.jsonl", [Story("o", "", "x", system="s", extra={"source": "nope"})]
    )
    code, _, stderr = run_cli(
        "classify-eval", "evaluate", str(bad), "-c", str(directory), "--corpus", str(corpus_file),
        "-o", str(tmp_path / "bad"),
    )  # fmt: skip
    assert code == 2 and "'nope' is not in the corpus" in stderr

    small = write_stories(tmp_path / "small.jsonl", two_register_corpus(12))
    code, stdout, stderr = run_cli(
        "classify-eval", "train", str(small), "-o", str(tmp_path / "cls"), "--checks", "hh",
        "--max-steps", "2", "--max-length", "32", "--quiet", "--model", str(tiny_models["encoder"]),
    )  # fmt: skip
    assert code == 0, stderr
    assert "held-out gold data" in stdout and "Upper bound" in stdout
    assert json.loads((tmp_path / "cls" / "classify-eval.json").read_text())["checks"] == ["hh"]
    assert not (tmp_path / "cls" / "ah").exists()


def test_align_then_train_with_the_papers_per_classifier_settings(tmp_path, run_cli, tiny_models):
    """De Mattei et al. (2021): tf-idf alignment of the documents into strong pairs (SA, A1-A3)
    and the rest (R), then each classifier with its own settings and splits (the plan and the
    settings, on the two-layer encoder: `trained` above shows what the classifiers learn)."""
    corpus = [
        Story(s.id, s.prompt, s.story, system=s.system) for s in two_register_corpus(20)
    ]  # the pairs are to be found, not given
    corpus += [
        Story("fx", "A storm closes the northern mountain pass overnight.", formal("Ivo", "hat", "pass"), system="formal"),
        Story("cx", "Bakers protest the new flour tax in the capital.", casual("Jana", "cake", "shop"), system="casual"),
    ]  # fmt: skip
    source = write_stories(tmp_path / "corpus.jsonl", corpus)
    code, stdout, stderr = run_cli(
        "classify-eval", "align", str(source), "-o", str(tmp_path / "aligned.jsonl"),
        "--held-out", "0.2",
    )  # fmt: skip
    assert code == 0, stderr
    assert "SA: 8, A1:" in stdout and "R: 2" in stdout
    aligned = {s.id: s for s in read_stories(tmp_path / "aligned.jsonl")}
    splits = [s.extra["split"] for s in aligned.values()]
    assert splits.count("SA") == 8 and splits.count("R") == 2  # 4 of 20 pairs held out
    assert splits.count("A1") + splits.count("A2") + splits.count("A3") == 32
    assert aligned["f3"].extra["pair"] == aligned["c3"].extra["pair"]  # the same document
    assert aligned["fx"].extra["split"] == "R" and "pair" not in aligned["fx"].extra
    code, out, stderr = run_cli(
        "classify-eval", "train", str(tmp_path / "aligned.jsonl"), "-o", str(tmp_path / "cls"),
        "--preset", "demattei2021", "--set", "ah.max_length=64", "--set", "main.batch_size=16",
        "--max-steps", "2", "--quiet", "--model", str(tiny_models["encoder"]),
    )  # fmt: skip
    assert code == 0, stderr
    assert "The classifiers on held-out gold data:" in out
    summary = json.loads((tmp_path / "cls" / "classify-eval.json").read_text())
    assert sorted(summary["split"]["test"]) == sorted(
        i for i, s in aligned.items() if s.extra["split"] == "SA"
    )
    assert summary["plan"]["train_on"] == {"hh": ["A1"], "ah": ["R", "A3", "A1"]}
    assert summary["plan"]["settings"]["main"]["batch_size"] == 16
    meta = {
        name: json.loads((tmp_path / "cls" / name / "storyeval.json").read_text())
        for name in ("main", "hh", "ah")
    }
    settings = {
        n: (m["optimization"]["epochs"], m["optimization"]["batch_size"]) for n, m in meta.items()
    }
    assert settings == {"main": (6, 16), "hh": (2, 128), "ah": (6, 8)}
    assert {m["optimization"]["learning_rate"] for m in meta.values()} == {1e-5}
    assert "max_length:32" in summary["signatures"]["main"]
    assert "max_length:64" in summary["signatures"]["hh"]
    a1_groups = {s.extra["pair"] for s in aligned.values() if s.extra["split"] == "A1"}
    trained_on = meta["hh"]["training"]["train_examples"]
    assert trained_on <= 4 * len(a1_groups)  # HH on A1 only: each pair both ways, and negatives
    code, _, stderr = run_cli(
        "classify-eval", "train", str(tmp_path / "aligned.jsonl"), "-o", str(tmp_path / "c2"),
        "--set", "main.depth=3",
    )  # fmt: skip
    assert code == 2 and "unknown setting(s) ['depth']" in stderr
