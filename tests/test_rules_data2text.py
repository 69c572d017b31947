"""Rule-based data-to-text data with an input side ("Evaluation rules!", van Miltenburg et al.
2020): records rendered by templates, splits with controlled overlap, noise, aggregation, the
template ratio, conformance of each output to its own record, and the WebNLG import."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storyeval.base.errors import DataFileError
from storyeval.rules import GrammarError
from storyeval.rules.data2text import (
    DataGrammar,
    data_conformance,
    generate_records,
    import_webnlg,
    load_data_grammar,
    make_splits,
    read_data_records,
    template_ratios,
    template_uses,
)


@pytest.fixture(scope="module")
def people() -> DataGrammar:
    return load_data_grammar("people")


def test_records_render_their_facts_and_are_reproducible(people: DataGrammar) -> None:
    records = generate_records(people, 200, seed=3)
    assert records == generate_records(people, 200, seed=3)
    assert records != generate_records(people, 200, seed=4)
    aggregations = {u["aggregation"] for r in records for u in r["rules"]}
    assert aggregations == {"separate", "conjunction", "insertion"}
    for record in records:
        subjects = {f["values"][people.predicates[f["predicate"]].subject] for f in record["input"]}
        assert len(subjects) == 1  # every fact is about one subject
        assert record["prompt"].count(" ; ") == len(record["input"]) - 1
        covered = sorted(i for u in record["rules"] for i in u["facts"])
        assert covered == list(range(len(record["input"])))  # every fact rendered once
    # the gold texts conform to their own records completely and faithfully
    tables = data_conformance(people, [(r["id"], "gold", r["story"]) for r in records], records)
    rates = tables["systems"].set_index("measure")["rate"]
    assert rates["fact_recall"] == 1.0 and rates["faithful_records"] == 1.0
    insertion = tables["facts"][tables["facts"]["how"].str.startswith("combination")]
    assert not insertion.empty


def test_conformance_catches_omissions_wrong_values_and_other_records(people: DataGrammar) -> None:
    records = [r for r in generate_records(people, 60, seed=1) if len(r["input"]) >= 2][:10]
    first = records[0]
    outputs = [(r["id"], "gold", r["story"]) for r in records]
    outputs += [(r["id"], "first-sentence", r["rules"][0]["text"]) for r in records]
    outputs += [
        (r["id"], "other-record", records[(i + 1) % len(records)]["story"])
        for i, r in enumerate(records)
    ]
    tables = data_conformance(people, outputs, records)
    systems = tables["systems"].set_index(["system", "measure"])["rate"]
    assert systems[("gold", "complete_records")] == 1.0
    assert systems[("first-sentence", "fact_recall")] < 1.0
    assert systems[("first-sentence", "faithful_records")] == 1.0
    assert systems[("other-record", "faithful_records")] < 0.5  # its entities are not the record's
    assert systems[("other-record", "fact_recall")] < systems[("first-sentence", "fact_recall")]
    row = tables["records"].query("system == 'other-record'").iloc[0]
    assert row["unsupported"]
    with pytest.raises(ValueError, match="have no record"):
        data_conformance(people, [("nope", "s", first["story"])], records)


def test_splits_hold_out_templates_and_values_at_the_stated_overlap(people: DataGrammar) -> None:
    sizes = {"train": 400, "validation": 100, "test": 300}
    splits, statement = make_splits(
        people, sizes, template_overlap=0.3, entity_overlap=0.6, noise=0.2, seed=2
    )
    held = statement["held_out_templates"]
    train_uses = {u for r in splits["train"] for u in template_uses(r)}
    assert all((p, t) not in train_uses for p, ts in held.items() for t in ts)
    measured = statement["measured"]
    assert measured["train"]["template_overlap"] == 1.0
    # combinations are never held out, so the measured overlap sits a little above the target
    assert 0.25 < measured["test"]["template_overlap"] < 0.5
    assert 0.5 < measured["test"]["entity_overlap"] < 0.72
    noisy = [r for r in splits["train"] if r["noise"]]
    assert 0.12 < len(noisy) / 400 < 0.28 and not any(r["noise"] for r in splits["test"])
    assert set(measured["train"]["noisy_records"]) <= {"drop", "swap", "add"}
    _, whole = make_splits(people, sizes, template_overlap=1.0, entity_overlap=1.0, seed=2)
    assert not whole["held_out_templates"] and not whole["held_out_values"]
    # a noisy training record no longer conforms to its own record
    tables = data_conformance(people, [(r["id"], "gold", r["story"]) for r in noisy], noisy)
    assert (~tables["records"]["complete"] | ~tables["records"]["faithful"]).mean() > 0.9
    with pytest.raises(ValueError, match="template_overlap must be in"):
        make_splits(people, sizes, template_overlap=1.5)


def test_template_ratios_count_unique_and_total_templates(people: DataGrammar) -> None:
    splits, _ = make_splits(people, {"train": 300, "test": 100}, template_overlap=0.0, seed=0)
    ratios = template_ratios(splits["train"] + splits["test"]).set_index(["split", "predicate"])
    location = ratios.loc[("train", "location")]
    assert location["ratio"] == location["unique"] / location["total"]
    assert location["unique"] == 1  # two of location's three templates are held out of training
    assert ratios.loc[("test", "location"), "unique"] >= 2


def test_bad_grammars_and_records_are_refused(tmp_path: Path, people: DataGrammar) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "entities: {person: [Ann]}\n"
        "predicates:\n  born:\n    slots: {subject: person, object: city}\n"
        "    templates: ['{subject} was born.']\n"
    )
    with pytest.raises(GrammarError, match="no entity lexicon city"):
        load_data_grammar(bad)
    records = tmp_path / "records.jsonl"
    records.write_text('{"id": "a", "input": [{"predicate": "flies", "values": {}}]}\n')
    with pytest.raises(DataFileError, match=r"records\.jsonl:1"):
        read_data_records(records, people)


WEBNLG = """<?xml version="1.0" ?>
<benchmark><entries>
<entry category="Company" eid="Id1" size="1">
  <originaltripleset><otriple>SAGE_Publications | founder | Sara_Miller_McCune</otriple></originaltripleset>
  <modifiedtripleset><mtriple>SAGE_Publications | founder | Sara_Miller_McCune</mtriple></modifiedtripleset>
  <lex comment="good" lid="Id1">
    <references>
      <reference entity="Sara_Miller_McCune" number="1" tag="PATIENT-1" type="name">Sara Miller McCune</reference>
      <reference entity="SAGE_Publications" number="2" tag="AGENT-1" type="name">SAGE Publications</reference>
    </references>
    <text>Sara Miller McCune founded SAGE Publications.</text>
    <template>PATIENT-1 founded AGENT-1 .</template>
  </lex>
  <lex comment="good" lid="Id2">
    <references>
      <reference entity="SAGE_Publications" number="1" tag="AGENT-1" type="name">SAGE</reference>
      <reference entity="Sara_Miller_McCune" number="2" tag="PATIENT-1" type="name">McCune</reference>
    </references>
    <text>SAGE was founded by McCune.</text>
    <template>AGENT-1 was founded by PATIENT-1 .</template>
  </lex>
</entry>
<entry category="Company" eid="Id2" size="1">
  <modifiedtripleset><mtriple>Kestrel | founder | Ann_Lee</mtriple></modifiedtripleset>
  <lex comment="good" lid="Id1">
    <references>
      <reference entity="Ann_Lee" number="1" tag="PATIENT-1" type="name">Ann Lee</reference>
      <reference entity="Kestrel" number="2" tag="AGENT-1" type="name">Kestrel</reference>
    </references>
    <template>PATIENT-1 founded AGENT-1 .</template>
  </lex>
</entry>
<entry category="Company" eid="Id3" size="2">
  <modifiedtripleset><mtriple>Kestrel | founder | Ann_Lee</mtriple><mtriple>Kestrel | location | Oslo</mtriple></modifiedtripleset>
</entry>
</entries></benchmark>
"""


def test_webnlg_import_builds_a_grammar_and_table_1(tmp_path: Path, run_cli: Any) -> None:
    xml = tmp_path / "1triples.xml"
    xml.write_text(WEBNLG)
    grammar, table = import_webnlg([xml])
    founder = grammar.predicates["founder"]
    assert founder.templates == [
        "{object} founded {subject}.",
        "{subject} was founded by {object}.",
    ]
    assert founder.weights["corpus"] == [2.0, 1.0]
    assert grammar.entities["Company"]["SAGE_Publications"] == ["SAGE Publications", "SAGE"]
    assert table.to_dict("records") == [
        {"predicate": "founder", "unique": 2, "total": 3, "ratio": pytest.approx(2 / 3)}
    ]
    out = tmp_path / "webnlg.yaml"
    code, stdout, err = run_cli("rules", "import-webnlg", str(xml), "-o", str(out))
    assert code == 0, stdout + err
    assert "founder: 2 unique of 3 templates (0.67)" in stdout
    assert load_data_grammar(out).predicates["founder"].templates == founder.templates
    original = tmp_path / "original.xml"
    original.write_text(WEBNLG.replace("<template>", "<x>").replace("</template>", "</x>"))
    code, stdout, err = run_cli("rules", "import-webnlg", str(original), "-o", str(out))
    assert code == 2 and "enriched WebNLG" in err


def test_data_and_conform_commands(tmp_path: Path, run_cli: Any) -> None:
    out = tmp_path / "d"
    code, stdout, err = run_cli(
        "rules", "data", "people", "-o", str(out), "--train", "50", "--validation", "10",
        "--test", "20", "--template-overlap", "0.5", "--noise", "0.1",
    )  # fmt: skip
    assert code == 0, stdout + err
    assert "test: 20 records" in stdout
    statement = json.loads((out / "splits.json").read_text())
    assert statement["settings"]["template_overlap"] == 0.5
    assert (out / "template_ratios.csv").read_text().startswith("split,predicate,unique,total")
    test = [json.loads(line) for line in (out / "test.jsonl").open()]
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text(
        "".join(
            json.dumps(
                {"id": r["id"], "prompt": r["prompt"], "story": r["story"], "system": "gold"}
            )
            + "\n"
            for r in test
        )
    )
    code, stdout, err = run_cli(
        "rules", "conform", "people", str(outputs), "--records", str(out / "test.jsonl"),
        "-o", str(tmp_path / "c"),
    )  # fmt: skip
    assert code == 0, stdout + err
    systems = (tmp_path / "c" / "systems.csv").read_text()
    facts = sum(len(r["input"]) for r in test)
    assert f"gold,test,fact_recall,{facts},1.0" in systems  # n counts facts
    assert "gold,test,complete_records,20,1.0" in systems
