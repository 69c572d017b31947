"""The perturbation engine: each technique on crafted sentences, Table 8 negation rules in
both directions, UNION's mixing distribution, reproducibility, delexicalization, the CLI."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter

import pytest

from storyeval.corpus import Story
from storyeval.perturb import (
    TECHNIQUES,
    UNION_COUNT_PROBABILITIES,
    Delexicalizer,
    NotApplicableError,
    PerturbationCorpus,
    PerturbOptions,
    affirm,
    antonyms,
    apply_techniques,
    inflect,
    negation_sites,
    perturb_stories,
    sample_mixture,
    technique_names,
)
from storyeval.perturb.negation import apply_site
from storyeval.text import split_sentences

# Guan & Huang (2020), appendix A, Table 8: one row per verb type, with the paper's example
# sentence (affirmative, negated, contracted where the rule allows "n't").
TABLE_8 = [
    ("be", "Failure was an option.", "Failure was not an option.", "Failure wasn't an option."),
    ("modal", "I can walk well.", "I can not walk well.", "I can't walk well."),
    (
        "base",
        "I go through the park.",
        "I do not go through the park.",
        "I don't go through the park.",
    ),
    (
        "third_singular_present",
        "He goes through the park.",
        "He does not go through the park.",
        "He doesn't go through the park.",
    ),
    (
        "simple_past",
        "He went through the park.",
        "He did not go through the park.",
        "He didn't go through the park.",
    ),
    (
        "past_participle",
        "His insurance rate had gone up.",
        "His insurance rate had not gone up.",
        "His insurance rate hadn't gone up.",
    ),
    ("gerund", "She ended up going elsewhere.", "She ended up not going elsewhere.", None),
]


def _add_by_rule(nlp, sentence: str, rule: str, contract: bool) -> str:
    doc = nlp(sentence)
    sites = [s for s in negation_sites(doc) if s.direction == "add" and s.rule == rule]
    assert sites, f"no '{rule}' site found in {sentence!r}"
    return apply_site(doc, sites[0], contract=contract)


@pytest.mark.parametrize(("rule", "affirmative", "negative", "contracted"), TABLE_8)
def test_table8_adding_negation(nlp, rule, affirmative, negative, contracted):
    assert _add_by_rule(nlp, affirmative, rule, contract=False) == negative
    if contracted is not None:
        assert _add_by_rule(nlp, affirmative, rule, contract=True) == contracted


@pytest.mark.parametrize(("rule", "affirmative", "negative", "contracted"), TABLE_8)
def test_table8_removing_negation(nlp, rule, affirmative, negative, contracted):
    assert affirm(negative, nlp=nlp) == affirmative
    if contracted is not None:
        assert affirm(contracted, nlp=nlp) == affirmative
    removal = [s for s in negation_sites(nlp(negative)) if s.direction == "remove"]
    assert [s.rule for s in removal] == [rule]


@pytest.mark.parametrize(
    ("negative", "affirmative"),
    [
        ("He won't come.", "He will come."),
        ("I cannot swim.", "I can swim."),
        ("Don't go home.", "Go home."),
        ("He didn't have a dog.", "He had a dog."),
        ("She decided not to go.", "She decided to go."),
        ("Not going was a mistake.", "Going was a mistake."),
    ],
)
def test_negation_removal_of_contractions_and_nonfinite_verbs(nlp, negative, affirmative):
    assert affirm(negative, nlp=nlp) == affirmative


def test_negation_leaves_negative_subjects_and_infinitives_alone(nlp):
    doc = nlp("Nobody wanted cake.")
    assert [s for s in negation_sites(doc) if s.direction == "add"] == []
    doc = nlp("He decided to stay.")
    rules = [(doc[s.verb].text, s.rule) for s in negation_sites(doc)]
    assert rules == [("decided", "simple_past")]  # "to stay" is not negated
    question = nlp("Did you see it?")
    (site,) = negation_sites(question)
    assert site.must_contract and apply_site(question, site) == "Didn't you see it?"


# --------------------------------------------------------------------------- techniques

STORIES = [
    Story(
        "ken",
        "Ken was out jogging one morning.",
        "The weather was crisp and cool. Ken felt good and energetic. He decided to keep "
        "jogging longer than normal. Ken went several more miles out of his way.",
    ),
    Story(
        "mia",
        "",
        "Mia loved the quiet library. She read old books every night. One evening the lights "
        "failed. She laughed and lit a small candle.",
    ),
    Story("one", "", "A single sentence stands here alone."),
]


@pytest.fixture(scope="module")
def corpus(nlp):
    return PerturbationCorpus(((s.id, s.story) for s in STORIES), nlp=nlp)


def _apply(corpus, technique, story, seed=0, **options):
    return apply_techniques(
        story.story,
        [technique],
        random.Random(seed),
        corpus,
        story_id=story.id,
        options=PerturbOptions(**options),
    )


def test_ngram_repetition_repeats_adjacent_ngram(corpus):
    story = STORIES[0]
    for seed in range(20):
        text, applied, (edit,) = _apply(
            corpus, "repetition", story, seed, sentence_repetition_probability=0.0
        )
        assert applied == ["repetition"] and edit.operation == "ngram_repetition"
        assert 1 <= edit.detail["n"] <= 4
        ngram = edit.detail["ngram"]
        assert len(ngram.split()) == edit.detail["n"]
        assert f"{ngram} {ngram}" in edit.after and edit.after in text
        assert len(split_sentences(text)) == len(split_sentences(story.story))


def test_sentence_repetition_keeps_the_sentence_count(corpus):
    story = STORIES[0]
    original = split_sentences(story.story)
    for seed in range(10):
        text, _, (edit,) = _apply(
            corpus, "repetition", story, seed, sentence_repetition_probability=1.0
        )
        sentences = split_sentences(text)
        assert edit.operation == "sentence_repetition"
        index = edit.sentence
        assert len(sentences) == len(original)
        assert sentences[index] == sentences[index - 1] == original[index - 1]
        assert edit.before == original[index] and original[index] not in sentences


def test_keyword_substitution_uses_inflected_wordnet_antonyms(corpus):
    story = STORIES[1]
    text, _, edits = _apply(
        corpus, "substitution", story, 0, sentence_substitution_probability=0.0, keyword_rate=1.0
    )
    by_word = {e.before: e for e in edits}
    assert by_word["loved"].operation == "antonym" and by_word["loved"].after == "hated"
    assert by_word["quiet"].after in antonyms("quiet", "ADJ")
    assert by_word["failed"].after in {inflect(a, "VBD") for a in antonyms("fail", "VERB")}
    assert text.startswith(f"Mia hated the {by_word['quiet'].after} ")
    for edit in edits:
        if edit.operation == "keyword":  # no antonym: a corpus keyword with the same tag
            assert edit.after.lower() in corpus.keyword_counts[edit.detail["tag"]]


def test_antonym_file_joins_wordnet_for_substitution(corpus, tmp_path):
    from storyeval.base.errors import DataFileError
    from storyeval.perturb.lexicon import antonym_file_identity, file_antonyms

    lexicon = tmp_path / "antonyms.txt"
    lexicon.write_text(
        "# ConceptNet antonyms\n"
        "library|||/r/Antonym|||open_street\n"
        "pamphlet|||/r/Antonym|||book\n"  # read both ways: book -> pamphlet
        "library|||/r/RelatedTo|||book\n"  # another relation: skipped
        "cat|||/r/NotDesires|||bath\n"  # UNION's negated relations count as antonymy
        "fish|||/r/NotCapableOf|||walk\n"
        "ice|||/r/NotHasProperty|||warm\n"
    )
    assert file_antonyms(lexicon, "library") == ("open street",)
    assert file_antonyms(lexicon, "cat") == ("bath",) and file_antonyms(lexicon, "walk") == (
        "fish",
    )
    assert file_antonyms(lexicon, "ice") == ("warm",)
    assert file_antonyms(lexicon, "book") == ("pamphlet",)
    assert file_antonyms(lexicon, "table") == ()
    story = STORIES[1]
    options = {"sentence_substitution_probability": 0.0, "keyword_rate": 1.0}
    _, _, plain = _apply(corpus, "substitution", story, 0, **options)
    assert {e.before: e.operation for e in plain}["library"] == "keyword"  # WordNet: none
    text, _, edits = _apply(corpus, "substitution", story, 0, antonyms_file=str(lexicon), **options)
    by_word = {e.before: e for e in edits}
    assert by_word["library"].operation == "antonym" and by_word["library"].after == "open street"
    assert by_word["books"].operation == "antonym" and by_word["books"].after == "pamphlets"
    assert by_word["loved"].after == "hated"  # WordNet's antonyms are still used
    assert "open street" in text and "pamphlets" in text
    fields = PerturbOptions(antonyms_file=str(lexicon)).signature_fields()
    assert fields["antonyms"] == antonym_file_identity(lexicon)
    assert str(fields["antonyms"]).startswith("antonyms.txt@")
    bad = tmp_path / "bad.txt"
    bad.write_text("hot|||/r/Antonym|||cold\nwarm /r/Antonym cool\n")
    with pytest.raises(DataFileError, match=r"bad.txt:2: expected 'word\|\|\|/r/RELATION"):
        file_antonyms(bad, "hot")


def test_keyword_substitution_replaces_about_15_percent(nlp, examples_dir):
    from storyeval.corpus import read_stories
    from storyeval.perturb import is_keyword

    stories = read_stories(examples_dir / "human.jsonl")[:20]
    corpus = PerturbationCorpus(((s.id, s.story) for s in stories), nlp=nlp)
    for seed, story in enumerate(stories[:8]):
        keywords = [
            token
            for sentence in split_sentences(story.story)
            for token in corpus.parse(sentence)
            if is_keyword(token)
        ]
        _, _, edits = _apply(
            corpus, "substitution", story, seed, sentence_substitution_probability=0.0
        )
        assert len(keywords) >= 20 and len(edits) == int(0.15 * len(keywords) + 0.5)
        assert {e.before for e in edits} <= {t.text for t in keywords}


def test_sentence_substitution_takes_a_sentence_from_another_story(corpus):
    story = STORIES[0]
    for seed in range(5):
        text, _, (edit,) = _apply(
            corpus, "substitution", story, seed, sentence_substitution_probability=1.0
        )
        assert edit.operation == "sentence_substitution"
        assert edit.detail["source_id"] != "ken"
        assert edit.after in split_sentences(
            next(s.story for s in STORIES if s.id == edit.detail["source_id"])
        )
        assert split_sentences(text)[edit.sentence] == edit.after


def test_reordering_never_returns_the_original_order(corpus):
    story = STORIES[0]
    original = split_sentences(story.story)
    for seed in range(30):
        text, _, (edit,) = _apply(corpus, "reordering", story, seed)
        shuffled = split_sentences(text)
        assert shuffled != original and sorted(shuffled) == sorted(original)
        assert [original[i] for i in edit.detail["order"]] == shuffled
    two = Story("two", "", "First this. Then that.")
    small = PerturbationCorpus([(two.id, two.story)], nlp=corpus.nlp)
    for seed in range(10):
        assert _apply(small, "reordering", two, seed)[0] == "Then that. First this."


def test_techniques_that_cannot_apply_raise_clear_errors(corpus):
    with pytest.raises(NotApplicableError, match=r"story 'one'.*1 sentence.*at least 2"):
        _apply(corpus, "reordering", STORIES[2])
    same = Story("same", "", "Again. Again.")
    small = PerturbationCorpus([(same.id, same.story)], nlp=corpus.nlp)
    with pytest.raises(NotApplicableError, match=r"reordering.*all the same text"):
        _apply(small, "reordering", same)
    verbless = Story("v", "", "Oh. Hm.")
    small = PerturbationCorpus([(verbless.id, verbless.story)], nlp=corpus.nlp)
    with pytest.raises(NotApplicableError, match="negation"):
        _apply(small, "negation", verbless)


def test_negation_technique_records_the_rule(corpus):
    story = STORIES[0]
    text, _, (edit,) = _apply(corpus, "negation", story, 1)
    assert edit.operation in ("add_negation", "remove_negation")
    assert edit.detail["rule"] in (
        "be",
        "modal",
        "base",
        "third_singular_present",
        "simple_past",
        "past_participle",
        "gerund",
    )
    assert edit.after in text and edit.before not in text


# --------------------------------------------------------------------------- mixing


def test_mixture_follows_the_paper_distribution():
    """Section 3.2: number of techniques ~ {1: .5, 2: .2, 3: .2, 4: .1}; techniques drawn
    without replacement with weights repetition .1, substitution .3, reordering .4,
    negation .2 (so a single technique follows those weights)."""
    rng = random.Random(1234)
    names = list(technique_names())
    draws = [sample_mixture(rng, names) for _ in range(20000)]
    sizes = Counter(len(d) for d in draws)
    for size, p in UNION_COUNT_PROBABILITIES.items():
        assert abs(sizes[size] / len(draws) - p) < 0.015
    singles = Counter(d[0] for d in draws if len(d) == 1)
    n_single = sum(singles.values())
    for name in names:
        assert abs(singles[name] / n_single - TECHNIQUES[name].mix_weight) < 0.02
    assert all(len(set(d)) == len(d) for d in draws)
    assert all(d == [n for n in names if n in d] for d in draws)  # registry order


def test_mixture_without_a_technique_never_draws_it():
    rng = random.Random(5)
    kept = ["repetition", "substitution", "negation"]
    draws = [sample_mixture(rng, kept) for _ in range(2000)]
    assert all("reordering" not in d and 1 <= len(d) <= 3 for d in draws)


def test_mixture_weights_replace_the_papers():
    """``mix_weights`` replaces the weights it names (the others keep the paper's): a single
    technique then follows the new weights; they are in the signature only when given."""
    from storyeval.perturb import parse_mix_weights

    options = PerturbOptions(mix_weights=parse_mix_weights("repetition=0.4, negation=.1"))
    assert options.mix_weight_pairs == (("negation", 0.1), ("repetition", 0.4))
    assert options.signature_fields()["mix_weights"] == "negation=0.1,repetition=0.4"
    assert "mix_weights" not in PerturbOptions().signature_fields()
    rng = random.Random(99)
    names = list(technique_names())
    draws = [sample_mixture(rng, names, options) for _ in range(20000)]
    singles = Counter(d[0] for d in draws if len(d) == 1)
    weights = {"repetition": 0.4, "substitution": 0.3, "reordering": 0.4, "negation": 0.1}
    for name in names:
        share = singles[name] / sum(singles.values())
        assert abs(share - weights[name] / sum(weights.values())) < 0.02, name
    assert sample_mixture(random.Random(0), names, PerturbOptions()) == sample_mixture(
        random.Random(0), names
    )
    assert PerturbOptions(mix_weights=[["repetition", 1]]).mix_weight("repetition") == 1.0
    for bad, message in [
        ({"shuffle": 1.0}, "unknown technique 'shuffle'"),
        ({"repetition": 0.0}, "must be > 0"),
        ({"repetition": float("nan")}, "must be > 0"),
        ({"repetition": "1"}, "must be > 0"),
        ([("repetition", 1), ("repetition", 2)], "named twice"),
        (["repetition"], "must map technique names"),
    ]:
        with pytest.raises(ValueError, match=message):
            PerturbOptions(mix_weights=bad)
    with pytest.raises(ValueError, match="NAME=WEIGHT pairs; got 'repetition'"):
        parse_mix_weights("repetition")
    assert parse_mix_weights(None) == {} == parse_mix_weights(" , ")


# --------------------------------------------------------------------------- corpus runs


def test_perturbation_is_reproducible_and_order_independent(nlp, examples_dir):
    from storyeval.corpus import read_stories

    stories = read_stories(examples_dir / "human.jsonl")[:12]
    first = perturb_stories(stories, mode="mix", seed=11, nlp=nlp).records()
    again = perturb_stories(stories, mode="mix", seed=11, nlp=nlp).records()
    assert first == again
    reversed_run = perturb_stories(list(reversed(stories)), mode="mix", seed=11, nlp=nlp)
    assert sorted(first, key=lambda r: r["id"]) == sorted(
        reversed_run.records(), key=lambda r: r["id"]
    )
    other = perturb_stories(stories, mode="mix", seed=12, nlp=nlp).records()
    assert [r["story"] for r in other] != [r["story"] for r in first]
    for record, source in zip(first, stories, strict=True):
        assert record["source_id"] == source.id and record["prompt"] == source.prompt
        assert record["story"] != source.story and record["techniques"]
        assert {e["technique"] for e in record["edits"]} == set(record["techniques"])
        assert "seed:11" in record["signature"]


def test_modes_all_and_each(nlp):
    stories = STORIES[:2]
    combined = perturb_stories(stories, ["reordering", "negation"], seed=2, nlp=nlp)
    assert [s.techniques for s in combined.stories] == [["reordering", "negation"]] * 2
    each = perturb_stories(stories, ["reordering", "negation"], mode="each", seed=2, nlp=nlp)
    assert [s.id for s in each.stories] == [
        "ken-reordering",
        "ken-negation",
        "mia-reordering",
        "mia-negation",
    ]
    with pytest.raises(ValueError, match="must be one of"):
        perturb_stories(stories, "shuffle", nlp=nlp)


def test_skip_inapplicable_reports_skipped_stories(nlp):
    from storyeval.perturb import SkippedStoriesWarning

    with pytest.raises(NotApplicableError, match="'one'"):
        perturb_stories(STORIES, "reordering", nlp=nlp)
    with pytest.warns(SkippedStoriesWarning, match="one-p0"):
        run = perturb_stories(STORIES, "reordering", nlp=nlp, skip_inapplicable=True)
    assert [s.source_id for s in run.stories] == ["ken", "mia"] and list(run.skipped) == ["one-p0"]


# --------------------------------------------------------------------------- delexicalization


def test_delexicalization_masks_names_by_gender(nlp):
    delex = Delexicalizer(nlp=nlp)
    text = (
        "Mary met James at the station. She gave him a map. Mister Alvarez waved. "
        "Later, James thanked Mary for her help."
    )
    assert delex(text) == (
        "[FEMALE] met [MALE] at the station. She gave him a map. [MALE] waved. "
        "Later, [MALE] thanked [FEMALE] for her help."
    )
    # an unknown name gets its gender from the pronouns that refer back to it
    assert delex("Zorvath opened the gate. She looked inside.").startswith("[FEMALE]")
    assert delex("Zorvath opened the gate quietly.").startswith("[NEUTRAL]")
    # a user table overrides everything else
    table = Delexicalizer(nlp=nlp, names={"james": "neutral"})
    assert table("James smiled at his dog.") == "[NEUTRAL] smiled at his dog."
    story = delex.story(Story("x", "Clara woke early.", "She made coffee. Clara sang."))
    assert (story.prompt, story.story) == (
        "[FEMALE] woke early.",
        "She made coffee. [FEMALE] sang.",
    )


# --------------------------------------------------------------------------- CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "storyeval", *args], capture_output=True, text=True, check=False
    )


def test_cli_perturb_end_to_end(tmp_path, examples_dir, run_cli):
    source = tmp_path / "human.jsonl"
    lines = (examples_dir / "human.jsonl").read_text().splitlines()[:12]
    source.write_text("\n".join(lines) + "\n")
    inputs = {json.loads(line)["id"]: json.loads(line) for line in lines}
    out = tmp_path / "neg.jsonl"
    args = ["perturb", str(source), "--techniques", "reordering,negation", "--seed", "3", "-q"]
    code, stdout, stderr = run_cli(*args, "-o", str(out))
    assert code == 0, stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == len(inputs) == 12
    for record in records:
        assert {"id", "source_id", "story", "techniques", "prompt", "edits"} <= set(record)
        assert record["techniques"] == ["reordering", "negation"]
        assert record["prompt"] == inputs[record["source_id"]]["prompt"]
        assert record["story"] != inputs[record["source_id"]]["story"]
    assert "signature: perturb|techniques:reordering,negation|mode:all" in stdout
    again = tmp_path / "again.jsonl"
    assert run_cli(*args, "-o", str(again))[0] == 0
    assert again.read_text() == out.read_text()
    mixed = tmp_path / "mix.jsonl"
    code, _, stderr = run_cli(
        "perturb", str(source), "--mix", "--seed", "1", "-o", str(mixed), "-q"
    )
    assert code == 0, stderr
    drawn = [json.loads(line)["techniques"] for line in mixed.read_text().splitlines()]
    assert len({tuple(t) for t in drawn}) > 2 and all(1 <= len(t) <= 4 for t in drawn)
    heavy = tmp_path / "heavy.jsonl"
    code, stdout, stderr = run_cli(
        "perturb", str(source), "--mix", "--mix-weights", "repetition=100", "--seed", "1",
        "-o", str(heavy), "-q",
    )  # fmt: skip
    assert code == 0, stderr
    weighted = [json.loads(line)["techniques"] for line in heavy.read_text().splitlines()]
    assert sum("repetition" in t for t in weighted) >= 11 > sum("repetition" in t for t in drawn)
    assert "|mix_weights:repetition=100|" in stdout


def test_cli_perturb_errors(write_file, run_cli):
    one = write_file(
        "one.jsonl", json.dumps({"id": "s1", "story": "Only one sentence here."}) + "\n"
    )
    code, _, stderr = run_cli(
        "perturb", str(one), "-t", "reordering", "-o", str(one) + ".out.jsonl"
    )
    assert code == 2
    assert "story 's1'" in stderr and "needs at least 2" in stderr
    code, _, stderr = run_cli("perturb", str(one), "-t", "shuffle", "-o", str(one) + ".o.jsonl")
    assert code == 2 and "must be one of repetition, substitution" in stderr
    code, stdout, stderr = run_cli(
        "perturb",
        str(one),
        "-t",
        "reordering,negation",
        "--skip-inapplicable",
        "-o",
        str(one) + ".s.jsonl",
    )
    assert code == 0 and "wrote 0 perturbed stories" in stdout and "s1-p0" in stderr
    for extra, message in [
        (["--mix-weights", "repetition=2"], "--mix-weights weighs the techniques of --mix"),
        (["--mix", "--mix-weights", "repetition=-1"], "--mix-weights: mix_weights: the weight"),
        (["--mix", "--mix-weights", "repetition"], "NAME=WEIGHT pairs"),
    ]:
        code, _, stderr = run_cli("perturb", str(one), *extra, "-o", str(one) + ".w.jsonl")
        assert code == 2 and message in stderr, stderr


@pytest.mark.slow
def test_cli_perturb_in_a_fresh_process_exits_2_on_bad_input(write_file):
    one = write_file(
        "one.jsonl", json.dumps({"id": "s1", "story": "Only one sentence here."}) + "\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "storyeval",
            "perturb",
            str(one),
            "-t",
            "reordering",
            "-o",
            str(one) + ".x.jsonl",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2 and result.stderr.startswith("error: story 's1'")


def test_cli_help_lists_the_registry():
    from storyeval.cli.perturb import _TECHNIQUES_HELP

    assert ", ".join(technique_names()) in _TECHNIQUES_HELP


TOKENIZED = [
    "Kim went to her friends ' house . She did n't like the food . Her dog was n't there . She left early . It was a long night .",
    "Tom wanted a bike . He could n't pay for it . He saved for a month . He bought the bike . He rode it every day .",
    "Ana lost her keys . She looked in the car . They were n't in her bag . She called her brother . He had the keys .",
    "The rain did n't stop . Joe stayed inside . He read a book . He made some tea . He fell asleep on the couch .",
]


def test_negation_follows_the_corpus_style_and_leaves_no_surface_cue(nlp):
    """A tokenized corpus that writes "n't" apart and never "not": negated stories keep that
    form (no "didn't", no "did not"), and tokenized sentences are split one by one."""
    import re

    from storyeval.perturb import PerturbOptions, perturb_stories
    from storyeval.text import split_sentences

    assert all(len(split_sentences(text)) == 5 for text in TOKENIZED)
    stories = [Story(f"t{i}", "", text) for i, text in enumerate(TOKENIZED)]
    for contraction in (0.0, 0.5, None):
        run = perturb_stories(
            stories,
            "negation",
            seed=5,
            samples=4,
            nlp=nlp,
            options=PerturbOptions(contraction_probability=contraction),
        )
        added = [s for s in run.stories if any(e.operation == "add_negation" for e in s.edits)]
        assert added, "some negations were added"
        for story in run.stories:
            assert not re.search(r"\wn't\b", story.story), story.story  # never "didn't"
            assert not re.search(r"\bnot\b", story.story), (
                story.story
            )  # the corpus never writes "not"
        assert "negation_style:tokenized,n't=5,not=0" in run.signature.render()
    plain = [
        Story(f"p{i}", "", re.sub(r" n't", " not", t).replace(" .", ".").replace(" '", "'"))
        for i, t in enumerate(TOKENIZED)
    ]
    run = perturb_stories(
        plain,
        "negation",
        seed=5,
        samples=4,
        nlp=nlp,
        options=PerturbOptions(contraction_probability=1.0),
    )
    assert all("n't" not in s.story for s in run.stories)  # a plain corpus that never contracts


def test_perturb_and_train_union_report_a_bad_antonym_file_by_line(tmp_path, examples_dir):
    from typer.testing import CliRunner

    from storyeval.cli import app

    bad = tmp_path / "ants.txt"
    bad.write_text("hot|||/r/Antonym|||cold\nwarm|||cool\n")
    runner = CliRunner()
    stories = str(examples_dir / "human.jsonl")
    for args in (
        ["perturb", stories, "-o", str(tmp_path / "p.jsonl"), "--antonyms", str(bad)],
        ["train", "union", "--stories", stories, "-o", str(tmp_path / "m"), "--antonyms", str(bad)],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert f"{bad}:2: expected 'word|||/r/RELATION|||word'" in result.output
        assert not (tmp_path / "p.jsonl").exists() and not (tmp_path / "m").exists()
    missing = runner.invoke(app, [*args[:-1], str(tmp_path / "none.txt")])
    assert missing.exit_code == 2 and "no such antonym file" in missing.output
