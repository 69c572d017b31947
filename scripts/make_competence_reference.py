"""Write the reference outputs of crowd-kit (Ustalov et al. 2024) for storyeval's competence
tests: a simulated crowd study (seeded) and crowd-kit 1.4.2's Dawid-Skene posteriors and MACE
labels and competences on it. crowd-kit is not a dependency of storyeval; install it apart:

    pip install --target /tmp/cklib crowd-kit==1.4.2 attrs
    PYTHONPATH=/tmp/cklib python scripts/make_competence_reference.py

The study: 60 items with a true label in 1-5, 10 raters who each label 40 items; 7 answer
right with their own accuracy (0.55-0.95) and otherwise a neighbouring label, 2 answer at
random (spammers), 1 always answers 3 (constant).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "competence"


def simulate(seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 6, 60)
    accuracy = {f"r{k}": a for k, a in enumerate([0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.55])}
    rows = []
    raters = [*accuracy, "spam1", "spam2", "const"]
    for rater in raters:
        for item in rng.choice(60, 40, replace=False):
            if rater in accuracy:
                right = rng.random() < accuracy[rater]
                label = (
                    truth[item] if right else int(np.clip(truth[item] + rng.choice([-1, 1]), 1, 5))
                )
            elif rater == "const":
                label = 3
            else:
                label = int(rng.integers(1, 6))
            rows.append({"item_id": f"i{item:02d}", "rater_id": rater, "label": int(label)})
    truths = pd.DataFrame({"item_id": [f"i{i:02d}" for i in range(60)], "truth": truth})
    return pd.DataFrame(rows), truths


def main() -> None:
    from crowdkit.aggregation import MACE, DawidSkene

    annotations, truths = simulate()
    OUT.mkdir(parents=True, exist_ok=True)
    annotations.to_csv(OUT / "annotations.csv", index=False)
    truths.to_csv(OUT / "truth.csv", index=False)
    data = annotations.rename(columns={"item_id": "task", "rater_id": "worker"})
    ds = DawidSkene(n_iter=100, tol=1e-5).fit(data)
    probas = ds.probas_.copy()
    probas.columns = [f"p_{c}" for c in probas.columns]
    probas.rename_axis("item_id").reset_index().to_csv(
        OUT / "crowdkit_dawid_skene.csv", index=False
    )
    mace = MACE(n_restarts=10, n_iter=50, random_state=0).fit(data)
    labels = mace.labels_.rename("label").rename_axis("item_id").reset_index()
    labels.to_csv(OUT / "crowdkit_mace_labels.csv", index=False)
    # crowd-kit's spamming_ holds [P(spam), P(knows)] per worker, in order of appearance
    _, workers = pd.factorize(data["worker"])
    knows = pd.DataFrame({"rater_id": workers, "competence": mace.spamming_[:, 1]})
    knows.to_csv(OUT / "crowdkit_mace_competence.csv", index=False)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
