"""run_search.py end to end: a small BERT fine-tuned on a slice of MRPC by the search's trials.

A grid with a restart, its tables, the chosen weights, a rerun that runs nothing again, an export
of the chosen trial; a hopeless trial pruned; and every bad search or flag refused in one line
before anything is written. (A search killed or stopped: test_search_interrupted.py; several
workers: test_search_workers.py and test_search_postgres.py.)
"""
import json
import sys

import pytest
from search_runs import REPO, best_score, logged_runs, run, runner_flags, search_command, table

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def grid(tmp_path_factory, mrpc_search, tiny_checkpoint):
    """A grid of two learning rates with one restart of the better, run to its end."""
    search = tmp_path_factory.mktemp("grid") / "search"
    command = search_command(search, "--grid=learning_rate=1e-3,2e-4", "--grid=num_train_epochs=2",
                             "--restarts=1", runner=runner_flags(mrpc_search, tiny_checkpoint))
    result = run(command)
    rows = table(search / "trials.tsv")
    return {"search": search, "command": command, "log": result.stderr, "rows": rows,
            "chosen": max(rows, key=lambda r: float(r["dev_score"]))}


def test_a_grid_with_a_restart_reports_chooses_and_promotes(grid):
    search, rows, chosen = grid["search"], grid["rows"], grid["chosen"]
    assert [(r["phase"], r["state"], r["attempts"]) for r in rows] == [
        ("search", "finished", "1"), ("search", "finished", "1"), ("restart", "finished", "1")]
    first = rows[:2]
    # Every trial's dev score is its run's best/ score; the restart repeats the better setting.
    for row in rows:
        assert float(row["dev_score"]) == pytest.approx(float(best_score(
            search / "trials" / row["trial"])), abs=5e-5)
        assert row["steps_trained"] == row["num_train_steps"] == "8"  # int(64 / 16 * 2)
    better = max(first, key=lambda r: float(r["dev_score"]))
    assert rows[2]["learning_rate"] == better["learning_rate"]
    assert rows[2]["trial"] == f"lr{better['learning_rate']}_ep2_seed12346"
    assert rows[2]["seed"] == "12346" and first[0]["seed"] == "12345"
    # The chosen trial is the best finished one, and best/ is a copy of its best/.
    trial = json.loads((search / "best" / "trial.json").read_text())
    assert trial["slot"] == chosen["trial"] and trial["metric"] == "eval_main"
    for name in ("model.index", "model.data-00000-of-00001", "eval_results.txt"):
        assert (search / "best" / name).read_bytes() == (
            search / "trials" / chosen["trial"] / "best" / name).read_bytes()
    # The chosen configuration's two seeds: their mean and sample standard deviation.
    configs = {c["learning_rate"]: c for c in table(search / "configurations.tsv")}
    pair = [float(best_score(search / "trials" / r["trial"])) for r in rows
            if r["learning_rate"] == better["learning_rate"]]
    spread = configs[better["learning_rate"]]
    assert spread["n"] == "2"
    assert float(spread["mean"]) == pytest.approx(sum(pair) / 2, abs=5e-5)
    assert float(spread["std"]) == pytest.approx(abs(pair[0] - pair[1]) / 2 ** 0.5, abs=5e-5)
    assert (search / "expected_validation_performance.png").read_bytes()[:4] == b"\x89PNG"
    assert "Chosen: trial `" + chosen["trial"] in (search / "report.md").read_text()
    assert "chosen: trial " + chosen["trial"] in grid["log"]


def test_the_same_grid_again_runs_nothing_and_another_search_is_refused(grid, mrpc_search,
                                                                         tiny_checkpoint):
    search, rows = grid["search"], grid["rows"]
    # The same command again runs no trial again, and the tables stay.
    run(grid["command"])
    assert all(logged_runs(search / "trials" / f"{r['trial']}.log") == 1 for r in rows)
    assert [r["dev_score"] for r in table(search / "trials.tsv")] == [r["dev_score"] for r in rows]

    # Another search in the same folder is refused in one line, before anything runs.
    other = run(search_command(search, "--grid=learning_rate=1e-3", "--grid=num_train_epochs=2",
                               runner=runner_flags(mrpc_search, tiny_checkpoint)), check=False)
    assert other.returncode == 2
    assert other.stderr.strip().count("\n") == 0
    assert "holds a search with other settings (space was" in other.stderr


def test_the_chosen_trial_predicts_and_exports_once(grid, mrpc_search, tiny_checkpoint,
                                                    tmp_path):
    """--export_dir and --do_predict use the chosen trial: the export serves its predictions."""
    search, chosen, command = grid["search"], grid["chosen"], grid["command"]
    export = tmp_path / "export"
    with_outputs = (command[:-len(runner_flags(mrpc_search, tiny_checkpoint)) - 1]
                    + ["--do_predict", f"--export_dir={export}", "--"]
                    + runner_flags(mrpc_search, tiny_checkpoint))
    run(with_outputs)
    assert (export / "saved_model.pb").is_file()
    assert (search / "trials" / chosen["trial"] / "test_results.tsv").is_file()
    assert logged_runs(search / "trials" / f"{chosen['trial']}.log") == 2  # trained, predicted
    # Asked again (a second worker, a rerun), the same outputs of the same trial are not redone.
    run(with_outputs)
    assert logged_runs(search / "trials" / f"{chosen['trial']}.log") == 2
    assert json.loads((search / "best" / "trial.json").read_text())["outputs"] == {
        "do_predict": True, "export_dirs": [str(export)]}


@pytest.mark.parametrize("flags, runner, message", [
    (["--grid=lerning_rate=1e-5"], [], "learning_rate=1e-5"),
    (["--grid=learning_rate=-1,1e-5"], [], "--learning_rate=-1: run_classifier refuses it"),
    (["--grid=learning_rate=3e-5"], ["--learning_rate=2e-5"],
     "--learning_rate=2e-5: --learning_rate is searched"),
    (["--seeds=3"], ["--output_dir=/tmp/x"], "--output_dir=/tmp/x: the search gives each trial"),
    (["--seeds=3"], ["--random_seed=3"], "give --random_seed to run_search"),
    (["--seeds=3"], ["--export_dir=/tmp/x"], "use run_search's --export_dir"),
    (["--space=learning_rate=uniform(1e-5,1e-4)"], [], "--num_trials is required with --space"),
    (["--grid=learning_rate=1e-5,2e-5", "--num_trials=3"], [], "--num_trials: a grid runs"),
    (["--grid=learning_rate=uniform(2,1)"], [], "needs LOW < HIGH"),
    (["--seeds=0"], [], "flag --seeds=0: must be at least 1"),
    (["--runner=run_pretraining"], [], "a search runs one of run_classifier"),
    (["--seeds=2", "--metric=eval_f1"], ["--best_metric=eval_accuracy"],
     "--metric=eval_f1: the runner's --best_metric=eval_accuracy keeps best/ by another key"),
    (["--seeds=2"], ["--eval_every_steps=50"], "--eval_every_steps: pruning compares trials at "
     "epoch ends; with --eval_every_steps use --noprune"),
    (["--grid=learning_rate=a/b,a-b"], [], "two configurations would share the folder name"),
])
def test_a_bad_search_or_flag_is_one_line_and_writes_nothing(tmp_path, flags, runner, message):
    search = tmp_path / "search"
    command = search_command(search, *flags, runner=["--task_name=MRPC", *runner])
    if any(f.startswith("--runner=") for f in flags):
        command.remove("--runner=run_classifier")
    result = run(command, check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("run_search.py: error: "), result.stderr
    assert message in lines[0] or (message == "learning_rate=1e-5"
                                   and "Unknown command line flag 'lerning_rate'" in lines[0])
    assert not search.exists()


@pytest.mark.parametrize("runner, flags, runner_flags, message", [
    ("run_classifier", ["--metric=eval_f2"], ["--task_name=MRPC", "--data_dir={mrpc}"],
     "--metric=eval_f2: run_classifier never writes it (evaluation writes eval_acc_and_f1, "
     "eval_accuracy, eval_f1, eval_loss, eval_main)"),
    ("run_multiple_choice", [], ["--task_name=swag", "--data_dir={swag}",
                                 "--best_metric=eval_f1"],
     "the runner's --best_metric=eval_f1: run_multiple_choice never writes it (evaluation "
     "writes eval_accuracy, eval_loss)"),
    ("run_ner", ["--metric=eval_loss"], ["--data_dir={conll}"],
     "--metric=eval_loss: run_ner never writes it (evaluation writes eval_*_f1, "
     "eval_*_precision, eval_*_recall, eval_accuracy, eval_f1, eval_precision, eval_recall (* "
     "stands for a name the data gives))"),
])
def test_a_metric_the_runner_never_writes_is_refused_before_anything_is_written(
        tmp_path, mrpc_search, shared_data, runner, flags, runner_flags, message):
    search = tmp_path / "search"
    command = search_command(search, "--seeds=2", *flags,
                             runner=[f.format(mrpc=mrpc_search, swag=shared_data / "swag_sample",
                                              conll=shared_data / "conll2003")
                                     for f in runner_flags])
    command[command.index("--runner=run_classifier")] = f"--runner={runner}"
    result = run(command, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"run_search.py: error: {message}"]
    assert not search.exists()


def test_a_hopeless_trial_is_pruned_by_the_median_rule_of_a_loss(tmp_path, mrpc_search,
                                                                  tiny_checkpoint):
    """--metric=eval_loss: lower is better. A learning rate of 1e-9 leaves the loss where it
    starts; after its first epoch it is worse than the finished trial's at that epoch, so the
    median rule stops it there."""
    search = tmp_path / "search"
    result = run(search_command(search, "--grid=learning_rate=1e-3,1e-9",
                                "--grid=num_train_epochs=3", "--prune_startup_trials=1",
                                "--metric=eval_loss", runner=runner_flags(
                                    mrpc_search, tiny_checkpoint,
                                    "--train_batch_size=2", "--eval_batch_size=2")))
    rows = table(search / "trials.tsv")
    assert [(r["learning_rate"], r["state"]) for r in rows] == [("1e-3", "finished"),
                                                               ("1e-9", "pruned")]
    assert (rows[1]["steps_trained"], rows[1]["num_train_steps"]) == ("32", "96")
    assert float(rows[1]["dev_score"]) > float(rows[0]["dev_score"])  # a higher loss
    assert "trial lr1e-9_ep3_seed12345 pruned after epoch 1" in result.stderr
    chosen = json.loads((search / "best" / "trial.json").read_text())
    assert (chosen["slot"], chosen["metric"]) == ("lr1e-3_ep3_seed12345", "eval_loss")
    report = (search / "report.md").read_text()
    assert "1 finished, 1 pruned" in report
    assert "Cost: 128 training steps of the 192 that running every started trial" in report
    # Every trial kept best/ by the key the search chose by.
    assert '"best_metric": "eval_loss"' in (search / "trials" / rows[1]["trial"]
                                             / "run_config.json").read_text()


@pytest.mark.slow  # repeats the classifier's searches on another runner (make test-all)
def test_any_runner_ner_with_seeds_chooses_by_its_own_metric(tmp_path, shared_data,
                                                              tiny_checkpoint):
    """run_ner keeps best/ by entity F1: the search reads that from the runs and reports the
    spread of one recipe over two seeds."""
    from test_run_ner import conll_slice

    data = conll_slice(shared_data, tmp_path / "conll", {"train.txt": 2500, "valid.txt": 700})
    search = tmp_path / "search"
    result = run([sys.executable, str(REPO / "run_search.py"), "--runner=run_ner",
                  f"--search_dir={search}", "--seeds=2", "--", f"--data_dir={data}",
                  f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt", "--max_seq_length=32",
                  "--train_batch_size=16", "--num_train_epochs=1", "--learning_rate=2e-3"])
    rows = table(search / "trials.tsv")
    assert [r["trial"] for r in rows] == ["default_seed12345", "default_seed12346"]
    assert json.loads((search / "best" / "trial.json").read_text())["metric"] == "eval_f1"
    scores = []
    for row in rows:
        lines = (search / "trials" / row["trial"] / "best" / "eval_results.txt").read_text()
        scores.append(float(dict(line.split(" = ") for line in lines.splitlines())["eval_f1"]))
        assert float(row["dev_score"]) == pytest.approx(scores[-1], abs=5e-5)
    (config,) = table(search / "configurations.tsv")
    assert config["n"] == "2" and float(config["mean"]) == pytest.approx(sum(scores) / 2, abs=5e-5)
    assert "eval_f1" in result.stderr


@pytest.mark.parametrize("storage", ["sqlite:///{tmp}/missing/x.db", "nosuchdb://somewhere/x"])
@pytest.mark.parametrize("existing", [False, True], ids=["new_folder", "existing_folder"])
def test_a_refused_storage_leaves_nothing_that_was_not_there(tmp_path, storage, existing):
    """No lock file, no study, no folder (the PostgreSQL errors: tests/test_search_postgres.py)."""
    search = tmp_path / "runs" / "search"
    if existing:
        search.mkdir(parents=True)
    result = run(search_command(search, "--grid=learning_rate=1e-3",
                                f"--storage={storage.format(tmp=tmp_path)}",
                                runner=["--task_name=MRPC", "--data_dir=x",
                                        "--init_checkpoint=x"]), check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("run_search.py: error: --storage="), lines
    if existing:
        assert list(search.iterdir()) == []
    else:
        assert list(tmp_path.iterdir()) == []
