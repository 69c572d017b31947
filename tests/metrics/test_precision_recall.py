"""Precision and recall for text (k-NN supports): equal to the prdc package's on random
features, quality and diversity told apart on planted cases, the registered metrics end to
end."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storyeval.metrics.precision_recall import prdc, precision_recall


@pytest.mark.parametrize(("n_people", "n_system", "k"), [(80, 80, 3), (120, 70, 5), (50, 90, 1)])
def test_equal_to_the_prdc_package(n_people: int, n_system: int, k: int) -> None:
    from prdc import compute_prdc

    rng = np.random.default_rng(k)
    people = rng.normal(size=(n_people, 8))
    system = rng.normal(loc=0.3, scale=0.8, size=(n_system, 8))
    with contextlib.redirect_stdout(io.StringIO()):  # prdc prints the set sizes
        theirs = compute_prdc(people, system, k)
    ours = prdc(people, system, k=k)
    for name in ("precision", "recall", "density", "coverage"):
        assert ours[name] == pytest.approx(float(theirs[name]), abs=1e-12), name


def test_quality_and_diversity_are_told_apart() -> None:
    rng = np.random.default_rng(0)
    people = rng.normal(size=(300, 4))
    alike = rng.normal(size=(300, 4)) * 0.25  # good stories, all alike
    off = rng.normal(size=(300, 4)) + 4.0  # another distribution
    same = rng.normal(size=(300, 4))
    collapsed, strange, faithful = (prdc(people, s, k=5) for s in (alike, off, same))
    assert collapsed["precision"] > 0.95 and collapsed["recall"] < 0.4
    assert strange["precision"] < 0.1 and strange["recall"] < 0.1
    assert faithful["precision"] > 0.8 and faithful["recall"] > 0.8


def test_subsamples_give_an_interval() -> None:
    rng = np.random.default_rng(1)
    people, system = rng.normal(size=(200, 4)), rng.normal(size=(150, 4)) * 0.7
    result = precision_recall(people, system, k=5, seeds=6, seed=3)
    assert result.sample == 150 and len(result.per_seed["recall"]) == 6
    sd, low, high = result.spread("recall")
    assert sd > 0 and low < result.estimate("recall") < high
    assert precision_recall(people, system, k=5, seeds=6, seed=3) == result  # seeded
    with pytest.raises(ValueError, match="more than k=5"):
        prdc(people[:5], system, k=5)


def test_large_sets_are_subsampled_to_bound_the_quadratic_cost() -> None:
    from storyeval.metrics.precision_recall import DEFAULT_MAX_SAMPLE

    rng = np.random.default_rng(2)
    size = DEFAULT_MAX_SAMPLE + 300
    people, system = rng.normal(size=(size, 4)), rng.normal(size=(size + 50, 4))
    capped = precision_recall(people, system, k=5, seeds=1)
    assert capped.sample == DEFAULT_MAX_SAMPLE  # the default stops at the cap
    assert precision_recall(people, system, k=5, seeds=1, sample=size).sample == size
    assert precision_recall(people[:300], system, k=5, seeds=1).sample == 300


def test_the_registered_metrics_score_each_system(
    tmp_path: Path, run_cli: Any, examples_dir: Path
) -> None:
    out = tmp_path / "scores.jsonl"
    code, stdout, err = run_cli(
        "score", str(examples_dir / "stories.jsonl"), "--metrics", "text_precision,text_recall",
        "-O", "precision_recall.k=3", "-O", "precision_recall.sample=40", "-o", str(out),
        "--per-system", str(tmp_path / "systems.csv"),
    )  # fmt: skip
    assert code == 0, err
    import pandas as pd

    table = pd.read_csv(tmp_path / "systems.csv")
    assert set(table["metric"]) == {"text_precision", "text_recall"}
    assert table["estimate"].between(0, 1).all() and (table["ci_high"] > table["ci_low"]).all()
    assert "text_precision|model:all-MiniLM-L6-v2" in stdout and "|k:3|sample:40|" in stdout
    assert not [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
