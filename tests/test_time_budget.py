"""Pretraining on a time budget: the schedule against Cramming's own expression, the clock, and
the record each checkpoint keeps of the time spent."""
import json

import numpy as np
import pytest

from bert_tf2.engine import time_budget
from bert_tf2.engine.time_budget import BudgetClock, TimeBudget
from bert_tf2.modeling.optimization import budget_learning_rate
from bert_tf2.process.errors import SettingsError

PROGRESS = np.linspace(0.0, 1.0, 201)


def test_the_budget_triangle_is_crammings():
    # Cramming's get_budget_triangle (base_percentage 0.25, falloff 0.25), as a fraction of the
    # peak: min(0.25 + p * 0.75 / 0.75, 1 / 0.25 - p / 0.25).
    expected = np.minimum(0.25 + PROGRESS, 4.0 - 4.0 * PROGRESS) * 1e-3
    got = [budget_learning_rate(p, 1e-3, 0.75, 0.25) for p in PROGRESS]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-18)


@pytest.mark.parametrize("warmup, start", [(0.1, 0.0), (0.5, 0.1), (0.01, 0.9)])
def test_the_schedule_joins_its_three_points_with_lines(warmup, start):
    # The piecewise-linear curve through (0, start * peak), (warmup, peak) and (1, 0).
    expected = np.interp(PROGRESS, [0.0, warmup, 1.0], [start * 5e-5, 5e-5, 0.0])
    got = [budget_learning_rate(p, 5e-5, warmup, start) for p in PROGRESS]
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-18)
    assert budget_learning_rate(-1.0, 5e-5, warmup, start) == start * 5e-5
    assert budget_learning_rate(2.0, 5e-5, warmup, start) == 0.0
    assert budget_learning_rate(0.5, 5e-5, 1.0) == pytest.approx(2.5e-5)  # warm-up throughout


def test_the_clock_counts_from_what_the_checkpoint_recorded_and_cuts_loops():
    now = [100.0]
    clock = BudgetClock(TimeBudget(600.0, 1e-3, 0.75, 0.25), spent_before=150.0,
                        clock=lambda: now[0])
    assert clock.spent() == 150.0 and clock.share() == 0.25 and not clock.done()
    assert clock.learning_rate() == pytest.approx(0.5e-3)  # 0.25 + 0.25 of the peak
    assert clock.loop_steps(1000, None) == 1  # speed unknown: the first loop compiles
    assert clock.loop_steps(1000, 0.5) == 12  # 1% of 600 s at 0.5 s a step
    assert clock.loop_steps(5, 0.5) == 5
    now[0] += 448.0  # 2 s left
    assert clock.loop_steps(1000, 0.5) == 4 and clock.remaining() == pytest.approx(2.0)
    now[0] += 2.0
    assert clock.done() and clock.learning_rate() == 0.0 and clock.loop_steps(1000, 0.5) == 1


def test_the_record_keeps_each_checkpoints_time_and_refuses_a_missing_one(tmp_path):
    assert time_budget.read_spent(str(tmp_path), 0) == 0.0
    for step in range(1, 41):
        time_budget.record_spent(str(tmp_path), step * 10, step * 1.5, keep=32)
    record = json.loads((tmp_path / time_budget.RECORD_FILE).read_text())
    assert list(record) == [str(10 * s) for s in range(9, 41)]  # the newest 32
    assert time_budget.read_spent(str(tmp_path), 400) == 60.0
    with pytest.raises(SettingsError, match=r"time_budget.json: no time spent recorded for the "
                                            r"checkpoint of step 50 .*use a new --output_dir"):
        time_budget.read_spent(str(tmp_path), 50)
    assert [p.name for p in tmp_path.iterdir()] == [time_budget.RECORD_FILE]  # no temporary


def test_the_batch_size_ramp_rises_linearly_to_its_full_count_at_its_share():
    # 1 + floor((most - 1) x share / ramp): equal shares of the ramp for each count below `most`.
    counts = [time_budget.ramp_micro_batches(p, 0.6, 4) for p in PROGRESS]
    expected = np.minimum(4, 1 + np.floor(3 * PROGRESS / 0.6 + 1e-12)).astype(int)
    assert counts == list(expected)
    assert counts[:41] == [1] * 40 + [2] and counts[120:] == [4] * 81  # 0.2 -> 2, 0.6 -> 4
    assert time_budget.ramp_micro_batches(0.3, 0.0, 8) == 8  # no ramp: the full batch
    assert time_budget.ramp_micro_batches(0.99, 1.0, 16) == 15
    clock = BudgetClock(TimeBudget(100.0, 1e-3, batch_size_ramp=0.5), 25.0, clock=lambda: 0.0)
    assert clock.micro_batches(3) == 2  # half-way up the ramp


def test_a_ramped_runs_record_keeps_its_micro_batches_and_reads_the_older_figures(tmp_path):
    folder = str(tmp_path)
    time_budget.record_spent(folder, 10, 4.5, keep=3)  # a run without a ramp: seconds alone
    time_budget.record_spent(folder, 20, 9.25, keep=3, micro_batches=57)
    assert json.loads((tmp_path / time_budget.RECORD_FILE).read_text()) == {
        "10": 4.5, "20": {"seconds": 9.25, "micro_batches": 57}}
    assert time_budget.read_spent(folder, 20) == 9.25
    assert time_budget.read_micro_batches(folder, 20) == 57
    assert time_budget.read_spent(folder, 10) == 4.5
    assert time_budget.read_micro_batches(folder, 10) is None
    assert time_budget.read_micro_batches(folder, 0) == 0
