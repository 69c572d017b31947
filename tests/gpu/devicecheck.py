"""Comparing a GPU's numbers with the CPU's."""

from __future__ import annotations

from typing import Any

#: Relative tolerance of a GPU's numbers against the CPU's, per precision.
TOLERANCE = {"float32": 2e-4, "bfloat16": 5e-2, "float16": 2e-2}


def close(gpu_values: Any, cpu_values: Any, kind: str, precision: str = "float32") -> None:
    """Assert GPU numbers equal the CPU's: exactly on the fake device, within the precision's
    tolerance on a real one (NaN where the CPU has NaN)."""
    import numpy as np

    got, want = np.asarray(gpu_values, dtype=float), np.asarray(cpu_values, dtype=float)
    assert got.shape == want.shape
    if kind == "fake-cuda":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=TOLERANCE[precision], atol=1e-5)
