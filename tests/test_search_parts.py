"""The parts of run_search.py that need no training: the spread statistics against enumeration,
the search-space syntax and its one-line refusals, and a watched trial stopped when pruned."""
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bert_tf2.search.space import (
    PAPER_GRID,
    SearchSpace,
    SearchSpaceError,
    config_name,
    parse_dimension,
)
from bert_tf2.search.statistics import expected_best, expected_best_curve, spread
from bert_tf2.search.trial_process import run_trial

MRPC_LIKE = [0.842, 0.861, 0.813, 0.868, 0.684, 0.855, 0.850]  # one degenerate restart


@pytest.mark.parametrize("k", [1, 2, 3])
def test_expected_best_of_k_equals_the_mean_over_every_draw_of_k(k):
    """Every one of the N^k equally likely draws (with replacement), enumerated."""
    scores = MRPC_LIKE[:5]
    bests = [max(draw) for draw in itertools.product(scores, repeat=k)]
    mean, std = expected_best(scores, k)
    assert mean == pytest.approx(np.mean(bests), abs=1e-12)
    assert std == pytest.approx(np.std(bests), abs=1e-12)
    low_mean, low_std = expected_best(scores, k, lower_is_better=True)
    lows = [min(draw) for draw in itertools.product(scores, repeat=k)]
    assert low_mean == pytest.approx(np.mean(lows), abs=1e-12)
    assert low_std == pytest.approx(np.std(lows), abs=1e-12)


def test_the_curve_starts_at_the_mean_and_climbs_towards_the_best():
    curve = expected_best_curve(MRPC_LIKE)
    assert [k for k, _, _ in curve] == list(range(1, len(MRPC_LIKE) + 1))
    assert curve[0][1] == pytest.approx(np.mean(MRPC_LIKE), abs=1e-12)
    means = [m for _, m, _ in curve]
    assert all(b > a for a, b in zip(means, means[1:]))
    assert means[-1] < max(MRPC_LIKE)
    # Ties count once each: all-equal scores have no spread at any k.
    assert expected_best([0.5, 0.5, 0.5], 3) == (0.5, 0.0)
    # Monte Carlo agrees with the closed form at k = 4.
    rng = np.random.default_rng(0)
    draws = rng.choice(MRPC_LIKE, size=(200_000, 4)).max(axis=1)
    assert means[3] == pytest.approx(draws.mean(), abs=1e-3)


def test_spread_is_the_sample_standard_deviation():
    s = spread(MRPC_LIKE)
    assert (s.n, s.low, s.high) == (7, 0.684, 0.868)
    assert s.mean == pytest.approx(sum(MRPC_LIKE) / 7)
    assert s.std == pytest.approx(math.sqrt(sum((v - s.mean) ** 2 for v in MRPC_LIKE) / 6))
    assert s.expected_best[0] == pytest.approx(s.mean)
    assert spread([0.7]).std == 0.0


def test_the_paper_preset_is_the_24_point_grid_in_order():
    space = SearchSpace.from_flags("paper", None, None)
    grid = space.grid()
    assert len(grid) == 4 * 2 * 3 and space.is_grid
    assert grid[0] == {"learning_rate": "5e-5", "train_batch_size": "16", "num_train_epochs": "2"}
    assert grid[-1] == {"learning_rate": "2e-5", "train_batch_size": "32",
                        "num_train_epochs": "4"}
    assert {tuple(sorted(g.items())) for g in grid} == {
        tuple(sorted(zip([n for n, _ in PAPER_GRID], values)))
        for values in itertools.product(*(v for _, v in PAPER_GRID))}
    assert config_name(grid[0]) == "lr5e-5_bs16_ep2"


def test_sampled_dimensions_and_their_ends():
    space = SearchSpace.from_flags(None, ["max_seq_length=64,128"], [
        "learning_rate=loguniform(1e-5, 1e-4)", "warmup_proportion=uniform(0,0.2)",
        "num_train_epochs=int(2,4)", "train_batch_size=16,32"])
    assert not space.is_grid
    kinds = {d.name: d.kind for d in space.dimensions}
    assert kinds == {"max_seq_length": "values", "learning_rate": "loguniform",
                     "warmup_proportion": "uniform", "num_train_epochs": "int",
                     "train_batch_size": "choice"}
    distributions = space.distributions()
    assert distributions["learning_rate"].log and distributions["learning_rate"].low == 1e-5
    assert distributions["num_train_epochs"].high == 4
    checked = space.texts_to_check()
    assert {c["learning_rate"] for c in checked} == {"1e-05", "0.0001"}
    assert {c["num_train_epochs"] for c in checked} == {"2", "4"}


@pytest.mark.parametrize("spec, message", [
    ("learning_rate", "write NAME=VALUE,VALUE,... or NAME=KIND(LOW,HIGH)"),
    ("learning_rate=", "write NAME=VALUE"),
    ("learning_rate=1e-5,,2e-5", "an empty value"),
    ("learning_rate=1e-5,1e-5", "a value is listed twice"),
    ("learning_rate=normal(0,1)", "normal(...) is not a range"),
    ("learning_rate=uniform(1e-4,1e-5)", "needs LOW < HIGH"),
    ("learning_rate=loguniform(0,1e-4)", "loguniform needs LOW > 0"),
    ("learning_rate=uniform(a,b)", "takes two numbers"),
    ("num_train_epochs=int(2.5,4)", "takes two integers"),
    ("learning_rate=uniform(1)", "takes two numbers"),
    ("random_seed=1,2", "use --seeds and --restarts"),
    ("output_dir=a,b", "its own folder"),
    ("export_dir=a", "--export_dir (it exports the chosen trial)"),
])
def test_a_bad_dimension_is_one_line_naming_it(spec, message):
    with pytest.raises(SearchSpaceError) as error:
        parse_dimension(spec, "--grid")
    assert message in str(error.value) and "\n" not in str(error.value)
    assert f"--grid {spec!r}" in str(error.value) or spec.split("=")[0] in str(error.value)


def test_a_flag_searched_twice_is_refused():
    with pytest.raises(SearchSpaceError, match="--learning_rate is searched twice"):
        SearchSpace.from_flags("paper", ["learning_rate=1e-5,2e-5"], None)


FAKE_RUN = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[2])
from bert_tf2.process import evaluation_gate
out = sys.argv[1]
signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
os.makedirs(out, exist_ok=True)
for step in (10, 20, 30, 40):  # back to back: far quicker than the watcher's poll
    with open(os.path.join(out, "eval_results.tmp"), "w") as f:
        f.write(f"eval_main = {step / 100}\nglobal_step = {step}\n")
    os.replace(os.path.join(out, "eval_results.tmp"), os.path.join(out, "eval_results.txt"))
    print("evaluated", step, flush=True)
    evaluation_gate.wait(step)
print("done", flush=True)
"""


@pytest.mark.integration
def test_a_watched_run_reports_each_evaluation_and_stops_when_pruned(tmp_path):
    """The run writes its evaluations back to back and the watcher polls slowly and decides
    slowly: the run waits at each one, so none is missed and none follows the pruned one."""
    script = tmp_path / "fake_run.py"
    script.write_text(FAKE_RUN)
    repo = str(Path(__file__).resolve().parent.parent)
    out = tmp_path / "trial"
    seen = []

    def on_evaluation(results):
        seen.append(results)
        time.sleep(0.3)  # a busy study database
        return results["global_step"] == 20  # prune after the second evaluation

    outcome = run_trial([str(script), str(out), repo], str(out), str(tmp_path / "trial.log"),
                        on_evaluation, poll_s=0.25)
    assert outcome.pruned and outcome.returncode == 143
    assert [r["global_step"] for r in seen] == [10.0, 20.0]
    log = (tmp_path / "trial.log").read_text()
    assert "evaluated 20" in log and "evaluated 30" not in log and "done" not in log
    assert log.startswith(f"$ {sys.executable} {script} {out} {repo}\n")
    assert not (tmp_path / "trial.log.gate").exists()

    # Unpruned, every evaluation is heard, and the last line is the run's.
    seen.clear()
    again = tmp_path / "again"
    outcome = run_trial([str(script), str(again), repo], str(again), str(tmp_path / "again.log"),
                        lambda r: seen.append(r) or False, poll_s=0.25)
    assert (outcome.returncode, outcome.pruned, outcome.last_line) == (0, False, "done")
    assert [r["global_step"] for r in seen] == [10.0, 20.0, 30.0, 40.0]


def test_an_ungated_run_does_not_wait_and_a_gate_nobody_opens_times_out(tmp_path, monkeypatch,
                                                                        caplog):
    from bert_tf2.process import evaluation_gate

    monkeypatch.delenv(evaluation_gate.VARIABLE, raising=False)
    start = time.monotonic()
    evaluation_gate.wait(10, timeout_s=5)
    assert time.monotonic() - start < 0.5
    gate = tmp_path / "gate"
    monkeypatch.setenv(evaluation_gate.VARIABLE, str(gate))
    evaluation_gate.open_to(str(gate), 20)
    evaluation_gate.wait(10, timeout_s=5)  # opened past it already
    evaluation_gate.wait(20, timeout_s=5)
    start = time.monotonic()
    evaluation_gate.wait(30, timeout_s=0.3)
    assert 0.3 <= time.monotonic() - start < 2
    assert "nothing opened it to step 30" in caplog.text


@pytest.mark.integration
def test_the_runner_check_loads_every_fine_tuning_runners_flags():
    from bert_tf2.search.runner_check import RUNNERS, check_command_lines

    for runner in RUNNERS:
        check_command_lines(runner, [["--learning_rate=3e-5", "--train_batch_size=16"]], ["x"])
    with pytest.raises(Exception, match="x: run_ner refuses it:.*train_batch_size"):
        check_command_lines("run_ner", [["--train_batch_size=0"]], ["x"])


def test_an_evaluation_is_compared_at_the_epoch_it_closes():
    """Epoch ends are rounded steps (MRPC less 408 pairs at batch 16: 203.75 steps an epoch,
    evaluated at step 204); the last evaluation is at num_train_steps; half epochs round up."""
    from bert_tf2.search.study import SearchSettings, epoch_of

    settings = SearchSettings("x", "run_classifier", ["--num_train_epochs=2.5"], SearchSpace([]))
    assert [epoch_of(g, 407, settings, {"num_train_epochs": "2"}) for g in (204, 407)] == [1, 2]
    assert [epoch_of(g, 611, settings, {"num_train_epochs": "3"})
            for g in (204, 408, 611)] == [1, 2, 3]
    assert [epoch_of(g, 25, settings, {}) for g in (10, 20, 25)] == [1, 2, 3]


def test_only_a_configurations_first_run_is_pruned():
    """Further seeds and restarts measure the spread: pruning their low runs would flatter it."""
    from bert_tf2.search.study import EvaluationWatcher, Search, SearchSettings, Slot

    search = Search(SearchSettings("x", "run_classifier", [], SearchSpace([]), seeds=3,
                                   restarts=2))
    watcher = EvaluationWatcher.__new__(EvaluationWatcher)
    watcher.search = search
    prunable = {}
    for phase, seed in ((1, 12345), (1, 12346), (1, 12347), (2, 12348)):
        watcher.slot = Slot(f"default_seed{seed}", phase, "default", seed, ())
        prunable[(phase, seed)] = watcher.prunable()
    assert prunable == {(1, 12345): True, (1, 12346): False, (1, 12347): False,
                        (2, 12348): False}
    search.settings.prune = False
    watcher.slot = Slot("default_seed12345", 1, "default", 12345, ())
    assert not watcher.prunable()
