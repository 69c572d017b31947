"""Bootstrap speed of the meta-evaluation: vectorised replicates against one library call per
replicate, measured in one run on the same data. Prints times and ratios (no assertions).

    python benchmarks/meta_bootstrap.py [--n 180] [--boot 1000]
"""

from __future__ import annotations

import argparse
import time

import krippendorff
import numpy as np
from scipy import stats

from storyeval.base.stats import kendall_resampled
from storyeval.meta.agreement import alpha_resampled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=180, help="items")
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap replicates")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n, b = args.n, args.boot
    x = rng.integers(1, 6, n).astype(float)
    y = np.round(x + rng.normal(0, 1, n))
    idx = rng.integers(0, n, (b, n))
    weights = np.zeros((b, n))
    np.add.at(weights, (np.repeat(np.arange(b), n), idx.ravel()), 1.0)

    start = time.perf_counter()
    ours = kendall_resampled(x, y, weights)
    t_ours = time.perf_counter() - start
    start = time.perf_counter()
    ref = np.array([stats.kendalltau(x[i], y[i]).statistic for i in idx])
    t_ref = time.perf_counter() - start
    print(
        f"kendall tau-b, n={n}, {b} replicates: vectorised {t_ours:.3f}s, scipy loop "
        f"{t_ref:.3f}s, ratio {t_ref / t_ours:.1f}x, max |diff| {np.max(np.abs(ours - ref)):.2e}"
    )

    ratings = rng.integers(1, 6, (3, n)).astype(float)
    domain = np.arange(1.0, 6.0)
    for level in ("nominal", "ordinal", "interval"):
        start = time.perf_counter()
        ours = alpha_resampled(ratings, weights, level=level, domain=domain)
        t_ours = time.perf_counter() - start
        start = time.perf_counter()
        ref = np.array(
            [
                krippendorff.alpha(
                    reliability_data=ratings[:, i], level_of_measurement=level, value_domain=domain
                )
                for i in idx
            ]
        )
        t_ref = time.perf_counter() - start
        print(
            f"krippendorff alpha {level}, 3 raters x {n} items, {b} replicates: vectorised "
            f"{t_ours:.3f}s, package loop {t_ref:.3f}s, ratio {t_ref / t_ours:.1f}x, "
            f"max |diff| {np.max(np.abs(ours - ref)):.2e}"
        )


if __name__ == "__main__":
    main()
