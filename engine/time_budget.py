"""A training run on a time budget (`--train_budget_minutes`): its clock and the record of it.

The learning rate follows the share of the budget spent (`modeling.optimization.
budget_learning_rate`), set before each of the training loop's loops; loops are cut to about
1% of the budget each, so the rate moves in steps of at most 1% of its range and the run stops
within about 1% of the budget. When the budget is spent the run checkpoints and ends, as at
`num_train_steps` (which stays an upper bound).

The time spent is the training's wall time in this process (the loops and the waits for
checkpoints, from the first loop on), added over every process that trained the run. Each checkpoint
records it: `time_budget.json` beside the checkpoints, written before the checkpoint itself, so
every complete checkpoint has its figure. A resumed run goes on from the figure of the checkpoint
it restored, into the same schedule; what a killed run spent after its last checkpoint is not
counted (its steps are done again), nor is starting a process (imports, building the model).

A batch-size ramp (`--batch_size_ramp`, Cramming's `batch_size_ramp`) is also set against the
budget: each update averages the gradients of `ramp_micro_batches(share)` micro-batches, from 1
at the start up to `num_accumulation_steps` at the share `batch_size_ramp` of the budget, so the
batch grows linearly with the time spent; the input then yields one micro-batch per element.
Each checkpoint's figure also records the micro-batches used so far, since with the batch set by
time they are not a function of the step: a backend that rebuilds its input on resume skips
that many.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Callable

from bert_tf2.modeling.optimization import budget_learning_rate
from bert_tf2.process import atomic_files
from bert_tf2.process.errors import SettingsError

RECORD_FILE = "time_budget.json"
LOOP_SHARE = 0.01  # the longest loop, as a share of the budget


@dataclasses.dataclass(frozen=True)
class TimeBudget:
    seconds: float
    peak_learning_rate: float
    warmup_proportion: float = 0.1
    warmup_start_fraction: float = 0.0
    batch_size_ramp: float = 0.0  # the share at which updates reach their full batch; 0: none

    def learning_rate(self, spent: float) -> float:
        return budget_learning_rate(spent / self.seconds, self.peak_learning_rate,
                                    self.warmup_proportion, self.warmup_start_fraction)


def ramp_micro_batches(share: float, ramp: float, most: int) -> int:
    """Micro-batches per update at `share` of the budget spent: 1 at the start, rising linearly
    (in equal shares of the ramp per count) to `most` at the share `ramp` and after it."""
    if ramp <= 0 or share >= ramp:
        return most
    return max(1, min(most, 1 + math.floor((most - 1) * share / ramp)))


def read_spent(folder: str, step: int) -> float:
    """The seconds spent up to the checkpoint of `step` (0 at step 0)."""
    return _read(folder, step)[0]


def read_micro_batches(folder: str, step: int) -> int | None:
    """The micro-batches used up to the checkpoint of `step` (0 at step 0; None: the run did
    not ramp its batch, so they were not recorded)."""
    return _read(folder, step)[1]


def _read(folder: str, step: int) -> tuple[float, int | None]:
    if step == 0:
        return 0.0, 0
    path = os.path.join(folder, RECORD_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            figure = json.load(f)[str(step)]
        if isinstance(figure, dict):  # a ramped run's: {"seconds": ..., "micro_batches": ...}
            return float(figure["seconds"]), int(figure["micro_batches"])
        return float(figure), None
    except (OSError, KeyError, ValueError, TypeError) as error:
        raise SettingsError(
            f"{path}: no time spent recorded for the checkpoint of step {step} ({error}); "
            f"this output_dir was trained without --train_budget_minutes, or the file was "
            f"removed: use a new --output_dir") from None


def record_spent(folder: str, step: int, seconds: float, keep: int,
                 micro_batches: int | None = None) -> None:
    """Adds `step`'s figure to the record (atomically; the newest `keep` kept: the checkpoints
    kept, and the one being written): its seconds, and with a batch-size ramp the micro-batches
    used."""
    path = os.path.join(folder, RECORD_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        record = {}
    record[str(step)] = (round(seconds, 3) if micro_batches is None
                         else {"seconds": round(seconds, 3), "micro_batches": micro_batches})
    newest = sorted(record, key=int)[-keep:]
    atomic_files.write_text(path, json.dumps({k: record[k] for k in newest}, indent=1) + "\n")


class BudgetClock:
    """The seconds a run has spent against its budget, from `spent_before` (what the checkpoint
    it resumed from recorded) on; `clock` is a monotonic clock (the tests give their own)."""

    def __init__(self, budget: TimeBudget, spent_before: float,
                 clock: Callable[[], float] = time.monotonic):
        self.budget = budget
        self._clock = clock
        self._start = clock() - spent_before

    def spent(self) -> float:
        return self._clock() - self._start

    def done(self) -> bool:
        return self.spent() >= self.budget.seconds

    def share(self) -> float:
        return min(self.spent() / self.budget.seconds, 1.0)

    def learning_rate(self) -> float:
        return self.budget.learning_rate(self.spent())

    def micro_batches(self, most: int) -> int:
        """Micro-batches per update now, of at most `most` (`ramp_micro_batches`)."""
        return ramp_micro_batches(self.share(), self.budget.batch_size_ramp, most)

    def remaining(self) -> float:
        return max(self.budget.seconds - self.spent(), 0.0)

    def loop_steps(self, wanted: int, seconds_per_step: float | None) -> int:
        """`wanted` steps, cut to about `LOOP_SHARE` of the budget and to what is left of it
        (one step while the speed is unknown: the first loop also compiles)."""
        if seconds_per_step is None:
            return 1
        cap = min(LOOP_SHARE * self.budget.seconds, self.remaining()) / max(seconds_per_step,
                                                                           1e-9)
        return max(1, min(wanted, int(cap)))
