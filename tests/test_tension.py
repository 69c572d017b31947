"""Tension curves: the miss rate of an LM's predicted endings sentence by sentence, and the
ending's surprisal, with the offline models; turning points on hand-made curves; the curves
command draws them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from storyeval.analyses.tension import TensionSettings, tension_curves, turning_points
from storyeval.corpus import Story

STORY = Story(
    "t1",
    "",
    "Mara found a key under the mat. It did not fit the front door. She tried the shed, "
    "the car and the mailbox. At last she tried the old piano. The lid opened on a letter "
    "from her father.",
    system="human",
)


class Always:
    """An LM stand-in is not needed: the real offline models run; this encoder stand-in says
    every predicted ending is (dis)similar, to check the miss-rate arithmetic."""

    identity = "always"

    def __init__(self, similarity: float) -> None:
        self.similarity = similarity

    def text_embeddings(self, texts: list[str]) -> np.ndarray:
        angle = np.arccos(self.similarity)
        first = np.array([[1.0, 0.0]])
        other = np.array([[np.cos(angle), np.sin(angle)]])
        return np.vstack(
            [first if k == 0 and len(texts) == 1 else other for k in range(len(texts))]
        )


@pytest.mark.slow
def test_sampled_endings_give_a_miss_rate_per_sentence(tiny_models: dict[str, Path]) -> None:
    """The sampling's mechanics (seeded, one value a sentence, the encoder's verdict), on a
    two-layer model of SmolLM2's architecture."""
    from storyeval.models import load_causal_lm

    causal_lm = load_causal_lm(str(tiny_models["lm"]))
    settings = TensionSettings(samples=3, max_new_tokens=12, threshold=0.5)
    table, signature = tension_curves([STORY], lm=causal_lm, settings=settings)
    assert list(table["metric"].unique()) == ["tension"] and len(table) == 4  # 5 sentences
    assert table["value"].between(0, 1).all() and table["position"].is_monotonic_increasing
    assert signature.fields["samples"] == 3 and signature.fields["lm"] == causal_lm.identity
    again, _ = tension_curves([STORY], lm=causal_lm, settings=settings)
    assert again["value"].tolist() == table["value"].tolist()  # seeded
    never, _ = tension_curves([STORY], lm=causal_lm, encoder=Always(0.99), settings=settings)
    always, _ = tension_curves([STORY], lm=causal_lm, encoder=Always(0.1), settings=settings)
    assert never["value"].tolist() == [0.0] * 4 and always["value"].tolist() == [1.0] * 4


@pytest.mark.slow
def test_the_ending_is_less_surprising_after_its_setup(causal_lm: Any) -> None:
    story = Story("t2", "", "Tom found an old safe. He tried every date he knew. Nothing "
                  "worked. His aunt wrote that the code was violet falcon nine. The code was "
                  "violet falcon nine.", system="x")  # fmt: skip
    table, signature = tension_curves(
        [story, Story("short", "", "One. Two.")], lm=causal_lm,
        settings=TensionSettings(method="likelihood"),
    )  # fmt: skip
    assert set(table["item_id"]) == {"t2"} and signature.name == "ending_surprisal"
    values = table["value"].to_numpy()
    assert len(values) == 4 and values[-1] < 0.5 * values[0]  # the clue makes it expected


def test_turning_points_and_settings() -> None:
    assert turning_points([0.1, 0.9, 0.2, 0.8, 0.3]) == [(1, "peak"), (2, "trough"), (3, "peak")]
    assert turning_points([0.1, 0.9, 0.2, 0.8, 0.75]) == [(1, "peak"), (2, "trough")]
    assert turning_points([0.3, 0.35, 0.3], min_change=0.1) == []
    with pytest.raises(ValueError, match="method must be"):
        TensionSettings(method="guess").check()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threshold"):
        TensionSettings(threshold=2.0).check()


@pytest.mark.slow
def test_the_curves_command_draws_tension(tmp_path: Path, run_cli: Any) -> None:
    stories = tmp_path / "s.jsonl"
    stories.write_text(json.dumps(STORY.to_dict()) + "\n")
    code, _, err = run_cli(
        "curves",
        str(stories),
        "--metrics",
        "none",
        "--tension",
        "likelihood",
        "-o",
        str(tmp_path / "c"),
    )
    assert code == 0, err
    table = pd.read_csv(tmp_path / "c" / "curves.csv")
    assert set(table["metric"]) == {"ending_surprisal"} and len(table) == 4
    assert "ending_surprisal" in json.loads((tmp_path / "c" / "curves.json").read_text())
    code, _, err = run_cli("curves", str(stories), "--metrics", "none", "-o", str(tmp_path / "d"))
    assert code == 2 and "give --metrics, --tension or both" in err
