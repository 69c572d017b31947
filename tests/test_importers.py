"""Importers of public benchmark formats (fixtures in tests/data/importers, written for
these tests in the formats as issue 4 describes them)."""

from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from storyeval.base.errors import DataFileError
from storyeval.cli import app
from storyeval.corpus import read_judgments, read_scores, read_stories
from storyeval.importers import import_deltascore, import_hanna, import_union, write_import
from storyeval.meta import agreement, load_meta_table, quality_drift

DATA = Path(__file__).parent / "data" / "importers"
runner = CliRunner(env={"COLUMNS": "240", "NO_COLOR": "1"})


def test_union_stories_contexts_and_binary_judgments(tmp_path):
    result = import_union(DATA / "union_roc_sample.txt", system="gpt2-ft")
    assert [s.id for s in result.stories] == [f"roc-000{i}" for i in range(1, 6)]
    first = result.stories[0]
    assert first.prompt == "[MALE] wanted to learn to play the guitar."
    assert first.story.startswith("he bought a cheap one")
    assert first.extra["text"].startswith("[MALE] wanted") and first.system == "gpt2-ft"
    assert len(result.judgments) == 35
    labels = [j.value for j in result.judgments if j.item_id == "roc-0001"]
    assert labels == [1, 1, 1, 1, 0, 1, 1]
    assert {j.rater_id for j in result.judgments} == {f"a{i}" for i in range(1, 8)}
    assert {j.criterion for j in result.judgments} == {"reasonable"}
    written = write_import(result, tmp_path)
    assert set(written) == {"stories", "judgments"}
    assert len(read_judgments(written["judgments"])) == 35
    whole = import_union(DATA / "union_roc_sample.txt", context_sentences=0)
    assert whole.stories[0].prompt == "" and whole.stories[0].story == first.extra["text"]


def test_union_judgments_feed_agreement_and_quality_drift(tmp_path):
    written = write_import(import_union(DATA / "union_roc_sample.txt"), tmp_path)
    judgments = read_judgments(written["judgments"])
    nominal = agreement(judgments, statistics=["alpha"], alpha_levels=["nominal"], n_boot=0)
    assert nominal["n"].iloc[0] == 5 and -1 <= nominal["estimate"].iloc[0] <= 1
    from storyeval.corpus import Score, write_scores

    scores = [
        Score(s.id, "length", float(len(s.story.split()))) for s in read_stories(written["stories"])
    ]
    write_scores(tmp_path / "scores.jsonl", scores)
    table = load_meta_table([tmp_path / "scores.jsonl"], [written["judgments"]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, composition = quality_drift(table, criterion="reasonable", low=0, high=1, repeats=3)
    assert composition["set"].max() == 8  # K = 7 annotators: sets 1..8 as in Guan and Huang (2020)


def test_union_errors_name_file_and_line(write_file):
    bad = write_file(
        "bad.txt",
        "a ||| Some story. More. ||| 1 0 1\n"
        "b ||| Two fields only\n"
        "c ||| Text. ||| 1 2 0\n"
        "a ||| Again. Again. ||| 1 1 1\n"
        " ||| No id. ||| 1\n",
    )
    with pytest.raises(DataFileError) as info:
        import_union(bad)
    text = str(info.value)
    assert f"{bad}:2: expected 3 fields" in text
    assert f"{bad}:3: labels must be 0 or 1; got '2'" in text
    assert f"{bad}:4: duplicate ID 'a' (first on line 1)" in text
    assert f"{bad}:5: the ID field is empty" in text


def test_hanna_keeps_metric_names_verbatim_and_imports_raters(tmp_path):
    result = import_hanna(DATA / "hanna_sample.csv")
    metrics = sorted({s.metric for s in result.scores})
    assert metrics == sorted(["BLEU", "BERTScore‑F", "Mover’s Score", "chrF++", "Δ perplexity"])
    assert len(result.scores) == 5 * 3 * 4
    item = "prompt-2:Fusion"
    value = {s.metric: s.value for s in result.scores if s.item_id == item}
    assert math.isnan(value["Δ perplexity"]) and value["BLEU"] == pytest.approx(10.828)
    coherence = [j for j in result.judgments if j.criterion == "Coherence" and j.item_id == item]
    assert sorted((j.rater_id, j.value) for j in coherence) == [
        ("Human 1", 3.0),
        ("Human 2", 3.0),
        ("Human 3", 3.0),
    ]
    relevance = [j for j in result.judgments if j.criterion == "Relevance" and j.item_id == item]
    assert [(j.rater_id, j.value, j.extra["aggregate"]) for j in relevance] == [
        ("mean", 2.9955, "mean")
    ]
    assert all(
        j.extra["system"] == "Fusion" and j.extra["prompt_id"] == "prompt-2" for j in coherence
    )
    written = write_import(result, tmp_path)
    assert set(written) == {"judgments", "scores"}  # no story texts in this file
    assert any("stories.jsonl is not written" in note for note in result.notes)
    raw = (tmp_path / "scores.jsonl").read_text(encoding="utf-8")
    assert "Mover’s Score" in raw and "Δ perplexity" in raw  # not escaped, verbatim
    back = read_scores(written["scores"])
    assert {s.metric for s in back} == set(metrics)
    assert back[0].signature.startswith("imported|format:hanna|file:hanna_sample.csv|sha256:")


def test_hanna_errors_name_file_and_line(write_file):
    bad = write_file(
        "bad.csv",
        "Model,Coherence,BLEU\n"
        'A,"[1, 2]","[0.1, 0.2]"\n'
        'B,"[1, 2]","[0.1]"\n'
        'C,"[1, ""x""]","[0.1, 0.2]"\n'
        'A,"[1, 2]","[0.1, 0.2]"\n'
        'D,"{""a"": 1}","[0.1, 0.2]"\n',
    )
    with pytest.raises(DataFileError) as info:
        import_hanna(bad)
    text = str(info.value)
    assert f"{bad}:3: the lists of one row must have the same length" in text
    assert f"{bad}:4: column 'Coherence': could not convert string to float: 'x'" in text
    assert f"{bad}:5: duplicate Model 'A' (first on line 2)" in text
    assert f"{bad}:6: column 'Coherence': expected a JSON list, got dict" in text


def test_deltascore_string_ratings_and_prompts(tmp_path):
    result = import_deltascore(DATA / "deltascore_sample.jsonl")
    ids = ["d00001", "d00002", "d00003", "d00004"]
    assert [s.id for s in result.stories] == [f"deltascore_sample:{i}" for i in ids]
    assert result.stories[0].system == "gpt2" and result.stories[0].reference.startswith("Ada kept")
    prompt_ids = {s.extra["prompt_id"] for s in result.stories}
    assert len(prompt_ids) == 2
    ratings = {(j.item_id, j.criterion): j.value for j in result.judgments}
    assert ratings[("deltascore_sample:d00001", "fluency")] == pytest.approx(4.33)
    assert ratings[("deltascore_sample:d00002", "relatedness")] == pytest.approx(2.33)
    assert {j.criterion for j in result.judgments} == {
        "fluency",
        "coherence",
        "relatedness",
        "logicality",
        "interestingness",
    }
    assert {j.rater_id for j in result.judgments} == {"mean"}
    written = write_import(result, tmp_path)
    assert len(read_stories(written["stories"])) == 4


def test_deltascore_errors(write_file):
    bad = write_file(
        "bad.jsonl",
        '{"title": "T", "story": "S", "model": "m", "fluency": "4"}\n'
        '{"title": "T", "story": "S", "model": "m", "fluency": "very good"}\n'
        '{"title": "T", "model": "m", "fluency": 3}\n'
        "{not json}\n",
    )
    with pytest.raises(DataFileError) as info:
        import_deltascore(bad)
    assert f"{bad}:4: malformed JSON" in str(info.value)
    fixed = write_file("bad2.jsonl", "\n".join(bad.read_text().splitlines()[:3]) + "\n")
    with pytest.raises(DataFileError) as info:
        import_deltascore(fixed)
    text = str(info.value)
    assert f"{fixed}:2: aspect 'fluency' must be a number; got 'very good'" in text
    assert f"{fixed}:3: missing field(s) story" in text


def test_cli_import_then_correlate_at_system_level(tmp_path):
    out = tmp_path / "hanna"
    result = runner.invoke(
        app, ["import", "hanna", str(DATA / "hanna_sample.csv"), "--out-dir", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "wrote 60 scores" in result.output and "Mover’s Score" in result.output
    table = tmp_path / "corr.csv"
    result = runner.invoke(
        app,
        [
            "correlate",
            "-s",
            str(out / "scores.jsonl"),
            "-j",
            str(out / "judgments.jsonl"),
            "--level",
            "system",
            "--level",
            "story",
            "--method",
            "kendall",
            "--n-boot",
            "50",
            "-o",
            str(table),
        ],
    )
    assert result.exit_code == 0, result.output
    import pandas as pd

    frame = pd.read_csv(table)
    assert set(frame["metric"]) == {
        "BLEU",
        "BERTScore‑F",
        "Mover’s Score",
        "chrF++",
        "Δ perplexity",
    }
    system = frame[
        (frame.level == "system") & (frame.metric == "BLEU") & (frame.criterion == "Coherence")
    ]
    assert system["n"].iloc[0] == 3
    story = frame[
        (frame.level == "story") & (frame.metric == "BLEU") & (frame.criterion == "Coherence")
    ]
    assert story["n_groups"].iloc[0] + story["skipped"].iloc[0] == 4


def test_cli_import_errors_exit_2_with_file_line(tmp_path, write_file):
    bad = write_file("u.txt", "x ||| story ||| 1 0 yes\n")
    result = runner.invoke(app, ["import", "union", str(bad), "--out-dir", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert f"{bad}:1: labels must be 0 or 1; got 'yes'" in result.output
    result = runner.invoke(app, ["import", "bogus", str(bad), "--out-dir", str(tmp_path / "o")])
    assert (
        result.exit_code == 2
        and "must be one of union, hanna, deltascore, judgments" in result.output
    )


def test_cli_import_long_judgments(tmp_path):
    result = runner.invoke(
        app, ["import", "judgments", str(DATA / "judgments_sample.csv"), "--out-dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (tmp_path / "judgments.jsonl").read_text().splitlines()]
    assert lines[0] == {
        "item_id": "s001",
        "rater_id": "t1",
        "criterion": "coherence",
        "value": 5.0,
        "time_s": 41.5,
    }


RELEASE = DATA / "union_release"


def test_union_release_side_files_contexts_references_metric_outputs_error_types(tmp_path):
    result = import_union(
        RELEASE / "ant_data_all.txt",
        prompts=RELEASE / "reference_ipt.txt",
        references=RELEASE / "reference_opt.txt",
        metric_outputs=RELEASE / "metric_output",
    )
    first = result.stories[0]
    # the whole two-sentence context is the prompt, not only its first sentence
    assert first.prompt == "a dragon guards the last library . the librarian is a child ."
    assert first.story.startswith("the dragon let the child read")
    assert (
        first.reference
        == "the child read to the dragon until it slept . in the morning the books were still there ."
    )
    types = {s.id: s.extra["error_type"] for s in result.stories}
    assert types == {
        "wp-0": ["reasonable"],
        "wp-1": ["repeated_plots"],
        "wp-2": ["conflicting_logic", "chaotic_scenes"],
        "wp-3": ["poor_coherence", "chaotic_scenes"],
        "wp-4": ["reasonable"],
        "wp-5": ["unagreed"],
    }
    assert len(result.judgments) == 42
    values = {(s.metric, s.item_id): s.value for s in result.scores}
    assert values[("bleu", "wp-2")] == 0.08 and values[("union", "wp-4")] == 0.87
    assert len(result.scores) == 12
    strict = import_union(RELEASE / "ant_data_all.txt", error_min_votes=5)
    assert strict.stories[1].extra["error_type"] == ["repeated_plots"]
    assert strict.stories[2].extra["error_type"] == ["unagreed"]
    written = write_import(result, tmp_path)
    assert set(written) == {"stories", "judgments", "scores"}
    assert read_stories(written["stories"])[2].extra["error_type"] == [
        "conflicting_logic",
        "chaotic_scenes",
    ]


def test_union_release_error_type_subsets_table7_from_the_cli(tmp_path):
    out = tmp_path / "imported"
    result = runner.invoke(
        app,
        [
            "import", "union", str(RELEASE / "ant_data_all.txt"), "--out-dir", str(out),
            "--prompts", str(RELEASE / "reference_ipt.txt"),
            "--references", str(RELEASE / "reference_opt.txt"),
            "--metric-outputs", str(RELEASE / "metric_output"),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "metric outputs: bleu, union" in result.output
    assert "error types (>= 3 votes): chaotic_scenes 2" in result.output
    table = tmp_path / "subsets.csv"
    result = runner.invoke(
        app,
        [
            "drift", "subsets", "--scores", str(out / "scores.jsonl"),
            "--judgments", str(out / "judgments.jsonl"), "--stories", str(out / "stories.jsonl"),
            "--by", "error_type", "--include-with-each", "reasonable", "--min-items", "3",
            "--n-boot", "0", "-o", str(table),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    import pandas as pd

    frame = pd.read_csv(table)
    sizes = frame.groupby("subset")["n"].max().to_dict()
    # each error type's stories with the two reasonable ones (Guan and Huang 2020 Table 7); "unagreed"
    # (one story + 2) is a subset too
    assert sizes == {
        "(all)": 6,
        "chaotic_scenes + reasonable": 4,
        "conflicting_logic + reasonable": 3,
        "poor_coherence + reasonable": 3,
        "repeated_plots + reasonable": 3,
        "unagreed + reasonable": 3,
    }


def test_union_release_bad_side_files_name_file_and_line(tmp_path):
    short = tmp_path / "reference_opt.txt"
    short.write_text("one\ntwo\n")
    with pytest.raises(DataFileError, match=r"reference_opt.txt:3: references: 2 lines for 6"):
        import_union(RELEASE / "ant_data_all.txt", references=short)
    bad_types = tmp_path / "ant.txt"
    bad_types.write_text("x ||| a story . more . ||| 1 0 ||| 1 sideways\n")
    with pytest.raises(DataFileError, match=r"ant.txt:1: unknown error type 'sideways'"):
        import_union(bad_types)
    metrics = tmp_path / "metric_output"
    metrics.mkdir()
    (metrics / "ppl.txt").write_text("1.0\n2.0\nthree\n4\n5\n6\n")
    with pytest.raises(DataFileError, match=r"ppl.txt:3: not a number: 'three'"):
        import_union(RELEASE / "ant_data_all.txt", metric_outputs=metrics)


RELEASE_IDS = DATA / "union_release_ids"


def test_union_release_layout_ids_point_into_the_side_files(tmp_path):
    """UNION's release: reference_ipt.txt / reference_opt.txt hold every test story (line N
    is test story N's context and human ending) and the annotated stories' first field is
    their index in those files, so 4 annotated stories point into 10 lines by id."""
    result = import_union(
        RELEASE_IDS / "ant_data.txt",
        prompts=RELEASE_IDS / "reference_ipt.txt",
        references=RELEASE_IDS / "reference_opt.txt",
    )
    by_id = {s.id: s for s in result.stories}
    assert [s.id for s in result.stories] == ["7", "2", "9", "0"]
    assert by_id["7"].prompt == "the team lost every game ."
    assert by_id["7"].story.startswith("the coach made them run .")
    assert by_id["7"].reference == (
        "the coach made them practice more . they won the last game . the fans cheered . "
        "they felt proud ."
    )
    assert by_id["0"].prompt == "kelly went to the beach ."
    assert any("story's id is its line number counted from 0" in n for n in result.notes)
    # a shifted file (ids counted from 1) is recognised by which contexts the stories start with
    shifted = tmp_path / "ant_data.txt"
    shifted.write_text(
        "".join(
            f"{int(line.split(' ||| ')[0]) + 1} ||| {line.split(' ||| ', 1)[1]}"
            for line in (RELEASE_IDS / "ant_data.txt").read_text().splitlines(keepends=True)
        )
    )
    again = import_union(
        shifted,
        prompts=RELEASE_IDS / "reference_ipt.txt",
        references=RELEASE_IDS / "reference_opt.txt",
    )
    assert [s.prompt for s in again.stories] == [s.prompt for s in result.stories]
    assert [s.reference for s in again.stories] == [s.reference for s in result.stories]
    assert any("counted from 1" in n for n in again.notes)


def test_union_side_files_that_fit_neither_layout_say_both(tmp_path):
    ant = tmp_path / "ant.txt"
    ant.write_text("a ||| one . two . ||| 1 0\nb ||| three . four . ||| 0 1\n")
    contexts = tmp_path / "reference_ipt.txt"
    contexts.write_text("one .\nthree .\nfive .\n")
    with pytest.raises(DataFileError, match=r"3 lines for 2 stories: line N must be story N's, or"):
        import_union(ant, prompts=contexts)
    ids = tmp_path / "ids.txt"
    ids.write_text("3 ||| five . six . ||| 1 0\n8 ||| one . two . ||| 0 1\n")
    with pytest.raises(DataFileError, match=r"every story id must be the index of its line"):
        import_union(ids, prompts=contexts)


def _release_layout(root: Path) -> Path:
    """UNION's repository layout: Data/ROCStories/ant_data/ (the annotated stories and side
    files) beside ini_data/, metric_output/ and train_data/; Data/WritingPrompts alike."""
    ant = root / "Data" / "ROCStories" / "ant_data"
    ant.mkdir(parents=True)
    for name in ("ant_data.txt", "reference_ipt.txt", "reference_opt.txt"):
        shutil.copy(RELEASE_IDS / name, ant / name)
    (ant / "reference.txt").write_text("whole stories\n")
    for other in ("ini_data", "metric_output", "train_data"):
        (ant.parent / other).mkdir()
    (root / "Data" / "WritingPrompts" / "ant_data").mkdir(parents=True)
    return ant


def test_union_release_folders_are_found_from_the_root_the_set_or_ant_data(tmp_path):
    """Before 0.9.0 the benchmark looked for reference_ipt.txt beside ant_data/, where the
    release does not keep it; now the release's root, Data/<set> and ant_data/ all work."""
    from storyeval.importers.union import union_release_files

    ant = _release_layout(tmp_path / "UNION")
    expected = import_union(
        ant / "ant_data.txt",
        prompts=ant / "reference_ipt.txt",
        references=ant / "reference_opt.txt",
    )
    for folder in (tmp_path / "UNION", ant.parent, ant):
        found = union_release_files(folder)
        assert found.annotations == ant / "ant_data.txt"
        assert found.contexts == ant / "reference_ipt.txt"
        assert found.metric_outputs == ant.parent / "metric_output"
        result = import_union(folder)
        assert [(s.id, s.prompt, s.story, s.reference) for s in result.stories] == [
            (s.id, s.prompt, s.story, s.reference) for s in expected.stories
        ]
    with pytest.raises(FileNotFoundError, match=r"not UNION's release layout.*ant_data.txt"):
        union_release_files(tmp_path / "UNION" / "Data" / "WritingPrompts")
    out = tmp_path / "imported"
    result = runner.invoke(app, ["import", "union", str(tmp_path / "UNION"), "--out-dir", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote 4 stories" in result.output and "counted from 0" in result.output
