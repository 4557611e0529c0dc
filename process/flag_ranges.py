"""Range checks of numeric flags, made when the flags are parsed: before any file is read or written.

`--train_batch_size=0`, `--learning_rate=nan` or `--doc_stride=0` cannot work; left to the code they
fail minutes later with a traceback (a division by zero, a NaN loss, a loop that never advances).
Each program registers the range of each of its numeric flags with `check`; absl then refuses a
value outside it as any bad flag, one line and exit status 2 (`process.errors`):

    run_classifier.py: error: flag --train_batch_size=0: must be at least 1 (--helpshort ...)

Floats must also be finite. A flag left at None (an optional one) is not checked.
"""
from __future__ import annotations

import math


def check(name: str, low=None, high=None, *, above: bool = False, why: str = "") -> None:
    """Register the range of flag `name`: `low <= value <= high` (`low < value` with `above`);
    `why` says what the value means, for the message."""
    from absl import flags

    def valid(value) -> bool:
        if value is None:
            return True
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if low is not None and (value <= low if above else value < low):
            return False
        return high is None or value <= high

    flags.register_validator(name, valid, message=describe(low, high, above) + (
        f" ({why})" if why else ""))


def describe(low=None, high=None, above: bool = False) -> str:
    if low is not None and high is not None:
        return f"must be in {'(' if above else '['}{low}, {high}]"
    if low is not None:
        return f"must be above {low}" if above else f"must be at least {low}"
    if high is not None:
        return f"must be at most {high}"
    return "must be a finite number"


def at_least_one(*names: str) -> None:
    """Counts and sizes: each of `names` must be at least 1."""
    for name in names:
        check(name, 1)
