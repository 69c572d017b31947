"""Rule-based controlled test data ("Evaluation rules!", issue 14 section 3): the generator's
determinism and rule records, conformance worked out by hand, grammar errors by line, and
`storyeval rules` end to end."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from storyeval.rules import (
    GrammarError,
    conformance,
    generate_corpus,
    load_grammar,
    match_outputs,
)


@pytest.fixture(scope="module")
def grammar():
    return load_grammar("story")


def test_same_grammar_and_seed_give_the_same_corpus(grammar):
    first = generate_corpus(grammar, 30, distribution="skewed", seed=4)
    again = generate_corpus(grammar, 30, distribution="skewed", seed=4)
    other = generate_corpus(grammar, 30, distribution="skewed", seed=5)
    assert [s.to_record() for s in first] == [s.to_record() for s in again]
    assert [s.text for s in first] != [s.text for s in other]
    assert [s.text for s in generate_corpus(grammar, 10, distribution="skewed", seed=4)] == [
        s.text for s in first[:10]
    ]  # story i depends only on i, not on how many are made


def test_rule_records_reproduce_every_sentence(grammar):
    for story in generate_corpus(grammar, 40, seed=1):
        sections = [s.section for s in story.sentences]
        assert sections[0] == "opening" and sections[-1] == "ending"
        assert 2 <= sections.count("events") <= 4
        for sentence in story.sentences:
            template = grammar.rules[sentence.rule].realisations[sentence.realisation]
            filled = template.format(**sentence.slots)
            assert sentence.text == filled[:1].upper() + filled[1:]
            for slot, value in sentence.slots.items():
                assert value in grammar.lexicons[slot]
        heroes = {s.slots["hero"] for s in story.sentences if "hero" in s.slots}
        assert len(heroes) == 1  # bound: one protagonist per story
        assert story.text == " ".join(s.text for s in story.sentences)


def test_the_distribution_controls_the_rule_frequencies(grammar):
    def share(distribution: str, rule: str) -> float:
        events = [
            s.rule
            for story in generate_corpus(grammar, 400, distribution=distribution, seed=2)
            for s in story.sentences
            if s.section == "events"
        ]
        return events.count(rule) / len(events)

    assert share("skewed", "lose") == pytest.approx(8 / 11, abs=0.04)
    assert share("uniform", "lose") == pytest.approx(1 / 4, abs=0.04)


def test_conformance_by_hand(grammar):
    outputs = [
        ("a", "s1", "Mara lived near the mill. Mara lost a key. Mara went home happy."),
        ("b", "s1", "Mara went home happy. Mara lost a key."),  # every rule, wrong order
        ("c", "s2", "Tom lived near the mill. A dragon ate the moon. Tom went home happy."),
    ]
    sentences = match_outputs(grammar, outputs)
    assert list(sentences["rule"]) == [
        "live",
        "lose",
        "return",
        "return",
        "lose",
        "live",
        "",
        "return",
    ]
    tables = conformance(grammar, outputs, distribution="skewed")
    systems = tables["systems"].set_index(["system", "measure"])["rate"]
    assert systems[("s1", "sentence_conformance")] == 1.0
    assert systems[("s1", "story_conformance")] == 1.0
    assert systems[("s1", "order_conformance")] == 0.5  # story b ends before it begins
    assert systems[("s2", "sentence_conformance")] == pytest.approx(2 / 3)
    assert systems[("s2", "story_conformance")] == 0.0
    rules = tables["rules"].set_index(["system", "rule"])
    assert rules.loc[("s1", "lose"), "count"] == 2 and rules.loc[("s1", "lose"), "rate"] == 0.4
    expected = rules.loc["s1", "expected_share"]
    assert expected.sum() == pytest.approx(1.0) and expected["lose"] > expected["find"]
    realisations = tables["realisations"].set_index(["system", "rule", "realisation"])
    assert realisations.loc[("s1", "return", 0), "count"] == 2
    assert realisations.loc[("s1", "return", 1), "count"] == 0


def test_grammar_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "g.yaml"
    bad.write_text(
        "lexicons:\n  hero: [Ann]\nrules:\n  go:\n    realisations: ['{hero} met {friend}.']\n"
        "sections:\n  - name: only\n    rules: [go, fly]\n"
    )
    with pytest.raises(GrammarError) as info:
        load_grammar(bad)
    text = str(info.value)
    assert "g.yaml:1" in text and "no lexicon for slot(s) friend" in text
    assert "unknown rule(s) fly" in text


def test_rules_cli_generate_and_evaluate_two_systems(tmp_path, run_cli):
    skewed, uniform = tmp_path / "skewed.jsonl", tmp_path / "uniform.jsonl"
    for path, dist in ((skewed, "skewed"), (uniform, "uniform")):
        code, _, stderr = run_cli(
            "rules", "generate", "story", "-n", "60", "--distribution", dist, "-o", str(path)
        )
        assert code == 0, stderr
    records = [json.loads(line) for line in skewed.read_text().splitlines()]
    assert len(records) == 60 and records[0]["rules"][0]["section"] == "opening"
    outputs = tmp_path / "outputs.jsonl"
    rows = []
    for path, system in ((skewed, "trained-skewed"), (uniform, "trained-uniform")):
        for record in map(json.loads, path.read_text().splitlines()):
            rows.append(
                {
                    "id": f"{system}-{record['id']}",
                    "prompt": "",
                    "story": record["story"],
                    "system": system,
                }
            )
    outputs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, stderr = run_cli(
        "rules",
        "evaluate",
        "story",
        str(outputs),
        "--distribution",
        "skewed",
        "-o",
        str(tmp_path / "c"),
    )
    assert code == 0, stderr
    rules = pd.read_csv(tmp_path / "c" / "rules.csv").set_index(["system", "rule"])
    assert (
        rules.loc[("trained-skewed", "lose"), "rate"]
        > 2 * rules.loc[("trained-uniform", "lose"), "rate"]
    )
    systems = pd.read_csv(tmp_path / "c" / "systems.csv")
    assert (systems["rate"] == 1.0).all()  # generated text conforms to its own grammar
    code, _, stderr = run_cli(
        "rules", "generate", "story", "-o", str(tmp_path / "x.jsonl"), "--distribution", "nope"
    )
    assert code == 2 and "unknown distribution 'nope'" in stderr
