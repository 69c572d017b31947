"""Comparing a GPU's numbers with the CPU's."""

from __future__ import annotations

from typing import Any

#: Relative tolerance of a GPU's numbers against the CPU's, per precision.
TOLERANCE = {"float32": 2e-4, "bfloat16": 5e-2, "float16": 2e-2}
#: On the simulated device (CPU arithmetic): float32 rounding only.
FAKE_TOLERANCE = 1e-6


def close(gpu_values: Any, cpu_values: Any, kind: str, precision: str = "float32") -> None:
    """Assert GPU numbers equal the CPU's: on the fake device to float32 rounding (the same
    arithmetic, except where the GPU path is another algorithm: BERTScore matches in torch,
    batched, the CPU in numpy), within the precision's tolerance on a real one (NaN where
    the CPU has NaN)."""
    import numpy as np

    got, want = np.asarray(gpu_values, dtype=float), np.asarray(cpu_values, dtype=float)
    assert got.shape == want.shape
    if kind == "fake-cuda":
        np.testing.assert_allclose(got, want, rtol=FAKE_TOLERANCE, atol=0)
    else:
        np.testing.assert_allclose(got, want, rtol=TOLERANCE[precision], atol=1e-5)
