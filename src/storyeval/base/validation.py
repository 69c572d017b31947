"""Checks of arguments, written once (scikit-learn's ``utils.validation`` way): every public
function validates its input with these, so one kind of mistake gets one kind of message.

>>> check_choice("spearman", ("pearson", "spearman"), "method")
'spearman'
>>> check_choice("tau", ("pearson", "spearman"), "method")
Traceback (most recent call last):
...
ValueError: method must be one of pearson, spearman; got 'tau'
>>> check_fraction(1.2, "dev_fraction")
Traceback (most recent call last):
...
ValueError: dev_fraction must be in (0, 1); got 1.2
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def check_choice(
    value: T, choices: Collection[T], name: str, *, error: type[Exception] = ValueError
) -> T:
    """``value`` if it is one of ``choices``, else ``error`` naming ``name`` and them."""
    if value not in choices:
        raise error(f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}")
    return value


def check_fraction(value: float, name: str) -> float:
    """``value`` if it is strictly between 0 and 1 (a held-out share), else ``ValueError``."""
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be in (0, 1); got {value!r}")
    return value


def check_confidence(confidence: float) -> float:
    """``confidence`` if it is strictly between 0 and 1, else ``ValueError``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive); got {confidence!r}")
    return confidence


def check_n_boot(n_boot: int) -> int:
    """``n_boot`` if it is a non-negative integer, else ``ValueError``."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, int | np.integer) or n_boot < 0:
        raise ValueError(f"n_boot must be a non-negative integer; got {n_boot!r}")
    return int(n_boot)
