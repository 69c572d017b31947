"""Study files: the examples load, every protocol builds the right items, and mistakes are
reported as FILE:LINE: key: reason."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from storyeval.human.study import PROTOCOLS, StudyFileError, answer_keys, load_study

BASE = """name: s
title: T
protocol: likert
stories: stories.jsonl
criteria:
  - name: coherence
    question: How coherent?
    scale: 5
    labels: {1: lowest, 5: highest}
"""


def write(folder: Path, text: str) -> Path:
    path = folder / "study.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(StudyFileError) as info:
        load_study(path)
    return info.value.problems


@pytest.mark.parametrize(
    "name", ["likert", "side_by_side", "pairwise", "detection", "triangle", "spans"]
)
def test_the_example_studies_load(name, examples_dir):
    study = load_study(examples_dir / "studies" / f"{name}.yaml")
    assert study.protocol == name and study.items and len(study.version) == 16
    assert set(PROTOCOLS) >= {study.protocol}


def test_karpinskas_criteria_are_reproduced_verbatim(examples_dir):
    study = load_study(examples_dir / "studies" / "likert.yaml")
    questions = {c.name: c.question for c in study.criteria}
    assert questions == {
        "grammar": "How grammatically correct is the text of the story fragment?",
        "coherence": "How well do the sentences in the story fragment fit together?",
        "likability": "How enjoyable do you find the story fragment?",
        "relevance": "How relevant is the story fragment to the prompt?",
    }
    assert all(
        c.scale == 5 and c.point_labels() == {1: "lowest", 5: "highest"} for c in study.criteria
    )


def test_side_by_side_items_pair_each_model_story_with_its_reference(examples_dir):
    study = load_study(examples_dir / "studies" / "side_by_side.yaml")
    for item in study.items:
        model, reference = item.texts
        assert model.system != "human" and reference.system == "human"
        assert reference.id == model.id.split("-")[0]  # the human story of the same prompt
        assert reference.prompt == model.prompt
    assert answer_keys(study.config)["coherence@2"] == (1, 2, 3, 4, 5)


def test_pairwise_items_hold_both_systems_for_one_prompt(examples_dir):
    study = load_study(examples_dir / "studies" / "pairwise.yaml")
    assert len(study.items) == 60
    for item in study.items:
        a, b = item.texts
        assert (a.system, b.system) == ("smollm2-p0.9", "smollm2-k40-t0.7") and a.prompt == b.prompt


PAIRS = """name: heads
title: T
protocol: pairwise
stories: stories.jsonl
pairwise:
  pairs: [[human, smollm2-p0.9], [human, smollm2-k40-t0.7]]
  allow_tie: true
criteria:
  - name: overall
    question: Which is better?
"""


def test_pairwise_compares_several_pairs_and_keeps_old_versions(corpus_dir, examples_dir):
    study = load_study(write(corpus_dir, PAIRS))
    pairs = Counter((i.texts[0].system, i.texts[1].system) for i in study.items)
    assert pairs == {("human", "smollm2-p0.9"): 60, ("human", "smollm2-k40-t0.7"): 60}
    assert len({i.key for i in study.items}) == 120  # one item per prompt and pair
    assert all(i.group == i.key.split("|")[0] for i in study.items)  # a prompt once per person
    assert {i.condition for i in study.items} == {
        "human vs smollm2-p0.9",
        "human vs smollm2-k40-t0.7",
    }
    # a file with `systems` keeps the version it had before `pairs` existed
    assert load_study(examples_dir / "studies" / "pairwise.yaml").version == "f5e45c3d13b0f8d3"
    both = PAIRS.replace("  allow_tie: true", "  systems: [human, smollm2-p0.9]")
    assert any("not both" in p for p in problems(write(corpus_dir, both)))
    twice = PAIRS.replace("[human, smollm2-k40-t0.7]]", "[human, smollm2-p0.9]]")
    assert any("listed twice" in p for p in problems(write(corpus_dir, twice)))


def test_the_reward_experiments_pairwise_study_reads_its_stories(tmp_path, examples_dir):
    folder = tmp_path / "out" / "reward-experiment"
    folder.mkdir(parents=True)
    lines = [
        f'{{"id": "{system}-{i}", "prompt": "Prompt {i}.", "story": "Story {i} by {system}.", "system": "{system}"}}\n'
        for system in ("mle", "rougeL", "wms", "sms", "swms")
        for i in range(6)
    ]
    (folder / "stories.jsonl").write_text("".join(lines), encoding="utf-8")
    target = tmp_path / "examples" / "reward"
    target.mkdir(parents=True)
    text = (examples_dir / "reward" / "pairwise.yaml").read_text(encoding="utf-8")
    study = load_study(write(target, text))
    assert [c.name for c in study.criteria] == ["non_redundancy", "coherence", "focus", "overall"]
    assert len(study.items) == 18 and study.raters_per_item == 3
    assert {i.texts[0].system for i in study.items} == {"rougeL"}


def test_triangle_triads_are_balanced_and_use_three_prompts(examples_dir):
    study = load_study(examples_dir / "studies" / "triangle.yaml")
    assert len(study.items) == 23  # from the plan: alpha = beta = 0.05, pd = 50%
    orders = Counter(item.meta["order"] for item in study.items)
    assert sorted(orders.values()) == [3, 4, 4, 4, 4, 4]
    for item in study.items:
        systems = [t.system for t in item.texts]
        letters = {"human": "A", "smollm2-p0.9": "B"}
        assert "".join(letters[s] for s in systems) == item.meta["order"]
        assert systems[item.meta["odd_position"] - 1] == item.meta["odd_system"]
        assert len({t.prompt for t in item.texts}) == 3


def test_detection_items_know_their_truth_and_training_prompts_are_kept_out(examples_dir):
    study = load_study(examples_dir / "studies" / "detection.yaml")
    truths = Counter(item.meta["truth"] for item in study.items)
    assert truths == {"human": 25, "machine": 25}
    training_prompts = {t.prompt for example in study.training for t in example.texts}
    assert not any(t.prompt in training_prompts for item in study.items for t in item.texts)


def test_the_version_changes_with_the_file_and_with_the_stories(corpus_dir):
    first = load_study(write(corpus_dir, BASE))
    assert load_study(write(corpus_dir, BASE)).version == first.version
    assert (
        load_study(write(corpus_dir, BASE.replace("How coherent?", "How coherent is it?"))).version
        != first.version
    )
    with open(corpus_dir / "stories.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"id": "new", "prompt": "P", "story": "S.", "system": "human"}\n')
    assert load_study(write(corpus_dir, BASE)).version != first.version


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ("scale: 5", "scale: 6"),
            ":8: criteria[0].scale: must be 5 or 7 (points on the Likert scale); got 6",
        ),
        (
            ("protocol: likert", "protocol: ranking"),
            ":3: protocol: must be one of likert, side_by_side, pairwise, detection, triangle, best_worst, spans; got 'ranking'",
        ),
        (("title: T", "title: T\nshow_promt: true"), ":3: show_promt: unknown key 'show_promt'"),
        (
            ("{1: lowest, 5: highest}", "{1: lowest, 3: mid}"),
            ":9: criteria[0].labels: label the two endpoints (1 and 5) or every point; missing [2, 4, 5]",
        ),
        (("stories: stories.jsonl", "stories: nowhere.jsonl"), ":4: stories: story file"),
        (("name: s", "name: 'bad name'"), ":1: name: the study name must start with a letter"),
        (("    scale: 5\n", ""), ":6: criteria[0].scale: required: the number of points (5 or 7)"),
    ],
)
def test_mistakes_name_the_line_and_the_key(corpus_dir, change, expected):
    path = write(corpus_dir, BASE.replace(*change))
    found = problems(path)
    assert any(p.startswith(str(path)) and expected in p for p in found), found


def test_cross_field_mistakes_are_all_reported(corpus_dir):
    text = BASE + (
        "assignment: {items_per_participant: 5, max_items_per_participant: 2}\n"
        "attention_checks:\n  - id: c1\n    text: {story: Pick 1.}\n    expect: {coherance: [1]}\n"
        "training:\n  - story: s999\n    answers: {coherence: 9}\n    explanation: Why.\n"
        "select: {systems: [gpt-5]}\n"
    )
    found = "\n".join(problems(write(corpus_dir, text)))
    assert (
        "assignment.max_items_per_participant: must be >= items_per_participant (5); got 2" in found
    )
    assert "attention_checks[0].expect.coherance: unknown answer 'coherance'" in found


def test_protocol_rules(corpus_dir):
    triangle = (
        "name: t\ntitle: T\nprotocol: triangle\nstories: stories.jsonl\n"
        "triangle: {systems: [human, smollm2-p0.9], test: similarity, judges: 30}\n"
        "assignment: {items_per_participant: 3}\n"
    )
    assert any(
        "allows no repeated evaluations: must be 1" in p
        for p in problems(write(corpus_dir, triangle))
    )
    pairwise = (
        BASE.replace("protocol: likert", "protocol: pairwise")
        + "pairwise: {systems: [human, human]}\n"
    )
    found = "\n".join(problems(write(corpus_dir, pairwise)))
    assert "the two systems must differ" in found and "remove 'scale' and 'labels'" in found
    detection = "name: d\ntitle: T\nprotocol: detection\nstories: stories.jsonl\nselect: {systems: [human]}\n"
    assert any(
        "needs both human-written and machine-generated" in p
        for p in problems(write(corpus_dir, detection))
    )
    with_criteria = (
        detection.replace("select: {systems: [human]}\n", "")
        + "criteria: [{name: x, question: q}]\n"
    )
    assert any(
        "asks a fixed question; remove 'criteria'" in p
        for p in problems(write(corpus_dir, with_criteria))
    )


def test_malformed_yaml_reports_the_line(corpus_dir):
    path = write(corpus_dir, BASE + "criteria: [unclosed\n")
    found = problems(path)
    assert len(found) == 1 and found[0].startswith(f"{path}:") and "malformed YAML" in found[0]


def test_callan_and_fosters_questions_on_seven_points(examples_dir):
    study = load_study(examples_dir / "studies" / "likert7.yaml")
    assert [c.name for c in study.criteria] == ["Q1", "Q2", "Q3", "Q4"]
    assert (
        study.criteria[3].question == "How interesting is the STORY to you? (Would you read more?)"
    )
    assert all(c.scale == 7 and c.labelling == "endpoints" for c in study.criteria)
    assert answer_keys(study.config)["Q2"] == (1, 2, 3, 4, 5, 6, 7)
