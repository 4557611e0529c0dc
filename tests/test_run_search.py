"""run_search.py end to end: a small BERT fine-tuned on a slice of MRPC by the search's trials.

A grid with a restart, its tables, the chosen weights, a rerun that runs nothing again, an export
of the chosen trial; a search killed (SIGKILL) mid-trial and run again; two workers sharing one
study; and every bad search or flag refused in one line before anything is written.
"""
import csv
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import warm_python
from conftest import REPO
from test_run_classifier import glue_slice

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def mrpc(shared_data, tmp_path_factory):
    return glue_slice(shared_data, "MRPC", tmp_path_factory.mktemp("search_data") / "MRPC",
                      {"train": 64, "dev": 48, "test": 16})


def runner_flags(mrpc, tiny_checkpoint, *more):
    return ["--task_name=MRPC", f"--data_dir={mrpc}",
            f"--init_checkpoint={tiny_checkpoint}/bert_model.ckpt", "--max_seq_length=48",
            "--train_batch_size=16", "--eval_batch_size=48", *more]


def search_command(search_dir, *flags, runner=()):
    return [sys.executable, str(REPO / "run_search.py"), "--runner=run_classifier",
            f"--search_dir={search_dir}", "--heartbeat_seconds=2", *flags, "--", *runner]


def run(command, check=True):
    result = warm_python.run(command, cwd=REPO)
    if check and result.returncode:
        raise AssertionError(result.stderr[-4000:])
    return result


def table(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def best_score(trial_dir):
    lines = (pathlib.Path(trial_dir) / "best" / "eval_results.txt").read_text().splitlines()
    return dict(line.split(" = ") for line in lines)["eval_main"]


def logged_runs(log):
    """How many times the search started the runner in a trial's folder."""
    return sum(line.startswith("$ ") for line in pathlib.Path(log).read_text().splitlines())


def test_a_grid_with_a_restart_reports_chooses_promotes_and_resumes_to_nothing(
        tmp_path, mrpc, tiny_checkpoint):
    search = tmp_path / "search"
    command = search_command(search, "--grid=learning_rate=1e-3,2e-4", "--grid=num_train_epochs=2",
                             "--restarts=1", runner=runner_flags(mrpc, tiny_checkpoint))
    result = run(command)
    rows = table(search / "trials.tsv")
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
    chosen = max(rows, key=lambda r: float(r["dev_score"]))
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
    assert "chosen: trial " + chosen["trial"] in result.stderr

    # The same command again runs no trial again, and the tables stay.
    run(command)
    assert all(logged_runs(search / "trials" / f"{r['trial']}.log") == 1 for r in rows)
    assert [r["dev_score"] for r in table(search / "trials.tsv")] == [r["dev_score"] for r in rows]

    # Another search in the same folder is refused in one line, before anything runs.
    other = run(search_command(search, "--grid=learning_rate=1e-3", "--grid=num_train_epochs=2",
                               runner=runner_flags(mrpc, tiny_checkpoint)), check=False)
    assert other.returncode == 2
    assert other.stderr.strip().count("\n") == 0
    assert "holds a search with other settings (space was" in other.stderr

    # --export_dir and --do_predict use the chosen trial: the export serves its predictions.
    export = tmp_path / "export"
    with_outputs = (command[:-len(runner_flags(mrpc, tiny_checkpoint)) - 1]
                    + ["--do_predict", f"--export_dir={export}", "--"]
                    + runner_flags(mrpc, tiny_checkpoint))
    run(with_outputs)
    assert (export / "saved_model.pb").is_file()
    assert (search / "trials" / chosen["trial"] / "test_results.tsv").is_file()
    assert logged_runs(search / "trials" / f"{chosen['trial']}.log") == 2  # trained, predicted
    # Asked again (a second worker, a rerun), the same outputs of the same trial are not redone.
    run(with_outputs)
    assert logged_runs(search / "trials" / f"{chosen['trial']}.log") == 2
    assert json.loads((search / "best" / "trial.json").read_text())["outputs"] == {
        "do_predict": True, "export_dirs": [str(export)]}


def kill_tree(pid):
    children = pathlib.Path(f"/proc/{pid}/task/{pid}/children")
    for child in (children.read_text().split() if children.exists() else []):
        kill_tree(int(child))
    os.kill(pid, signal.SIGKILL)


def test_a_search_killed_mid_trial_resumes_it_and_ends_as_an_unbroken_one(
        tmp_path, mrpc, tiny_checkpoint):
    flags = ["--grid=learning_rate=1e-3", "--grid=num_train_epochs=3"]
    runner = runner_flags(mrpc, tiny_checkpoint)
    whole = tmp_path / "whole"
    run(search_command(whole, *flags, runner=runner))

    broken = tmp_path / "broken"
    command = search_command(broken, *flags, runner=runner)
    trial_dir = broken / "trials" / "lr1e-3_ep3_seed12345"
    process = warm_python.start(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not (trial_dir / "eval_results.txt").exists():  # the first epoch is evaluated
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.2)
    kill_tree(process.pid)  # the search and its trial, SIGKILL, mid-trial
    process.wait()
    assert not (broken / "trials.tsv").exists()

    result = run(command)
    assert "its worker (pid" in result.stderr and "is gone; it will resume" in result.stderr
    rows = table(broken / "trials.tsv")
    assert [(r["state"], r["attempts"]) for r in rows] == [("finished", "2")]
    log = (trial_dir.parent / (trial_dir.name + ".log")).read_text()
    assert logged_runs(trial_dir.parent / (trial_dir.name + ".log")) == 2
    assert "resum" in log.split("\n$ ")[-1]  # the second run resumed from the checkpoint
    # The interrupted search ends with the weights and score of the unbroken one.
    assert best_score(trial_dir) == best_score(whole / "trials" / trial_dir.name)
    assert (trial_dir / "best" / "model.data-00000-of-00001").read_bytes() == (
        whole / "trials" / trial_dir.name / "best" / "model.data-00000-of-00001").read_bytes()


def test_two_workers_share_one_study_and_run_each_trial_once(tmp_path, mrpc, tiny_checkpoint):
    search = tmp_path / "search"
    command = search_command(search, "--space=learning_rate=loguniform(1e-4,1e-3)",
                             "--num_trials=4", "--sampler=random",
                             runner=runner_flags(mrpc, tiny_checkpoint, "--num_train_epochs=1"))
    workers = [warm_python.start(command, stdout=subprocess.DEVNULL) for _ in range(2)]
    errors = [w.communicate(timeout=600)[1] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], errors
    rows = table(search / "trials.tsv")
    assert sorted(r["trial"] for r in rows) == [f"t00{i}_seed12345" for i in range(4)]
    assert all(r["state"] == "finished" and r["attempts"] == "1" for r in rows)
    assert all(logged_runs(search / "trials" / f"{r['trial']}.log") == 1 for r in rows)
    assert len({r["worker"] for r in rows}) == 2  # both workers ran trials
    rates = [float(r["learning_rate"]) for r in rows]
    assert len(set(rates)) == 4 and all(1e-4 <= r <= 1e-3 for r in rates)


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
        tmp_path, mrpc, shared_data, runner, flags, runner_flags, message):
    search = tmp_path / "search"
    command = search_command(search, "--seeds=2", *flags,
                             runner=[f.format(mrpc=mrpc, swag=shared_data / "swag_sample",
                                              conll=shared_data / "conll2003")
                                     for f in runner_flags])
    command[command.index("--runner=run_classifier")] = f"--runner={runner}"
    result = run(command, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"run_search.py: error: {message}"]
    assert not search.exists()


def test_sigterm_stops_the_search_and_its_trial_in_one_line_and_the_rerun_resumes(
        tmp_path, mrpc, tiny_checkpoint):
    search = tmp_path / "search"
    command = search_command(search, "--grid=learning_rate=1e-3", "--grid=num_train_epochs=2",
                             runner=runner_flags(mrpc, tiny_checkpoint))
    trial_dir = search / "trials" / "lr1e-3_ep2_seed12345"
    process = warm_python.start(command, stdout=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not (trial_dir / "eval_results.txt").exists():
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.2)
    # The trial's runner, from the lock it holds on its folder (pid, program, since).
    runner = int((trial_dir.parent / f".{trial_dir.name}.lock").read_text().split()[0])
    assert pathlib.Path(f"/proc/{runner}").exists()
    process.send_signal(signal.SIGTERM)
    stderr = process.communicate(timeout=180)[1]
    assert process.returncode == 143
    last = stderr.strip().splitlines()[-1]
    assert last == ("run_search.py: interrupted by SIGTERM in trial lr1e-3_ep2_seed12345; nothing "
                    "half-written is left; the same command resumes the search: finished trials "
                    "are kept and lr1e-3_ep2_seed12345 resumes from its last checkpoint")
    assert not pathlib.Path(f"/proc/{runner}").exists()  # it stopped with the search
    run(command)
    rows = table(search / "trials.tsv")
    assert [(r["state"], r["attempts"]) for r in rows] == [("finished", "2")]


def test_a_worker_killed_mid_trial_leaves_its_trial_to_the_other_worker(
        tmp_path, mrpc, tiny_checkpoint):
    search = tmp_path / "search"
    command = search_command(search, "--grid=learning_rate=1e-3,5e-4,2e-4",
                             runner=runner_flags(mrpc, tiny_checkpoint, "--num_train_epochs=2"))
    doomed = warm_python.start(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not list((search / "trials").glob("*/eval_results.txt")):  # mid-trial: epoch 1 done
        assert doomed.poll() is None and time.time() < deadline
        time.sleep(0.2)
    survivor = warm_python.start(command, stdout=subprocess.DEVNULL)
    kill_tree(doomed.pid)
    doomed.wait()
    stderr = survivor.communicate(timeout=600)[1]
    assert survivor.returncode == 0, stderr
    assert f"its worker (pid {doomed.pid}) is gone; it will resume" in stderr
    rows = table(search / "trials.tsv")
    assert [r["state"] for r in rows] == ["finished"] * 3
    assert sorted(r["attempts"] for r in rows) == ["1", "1", "2"]
    for row in rows:  # every start of a runner is an attempt: none lost, none duplicated
        assert logged_runs(search / "trials" / f"{row['trial']}.log") == int(row["attempts"])


def test_a_hopeless_trial_is_pruned_by_the_median_rule_of_a_loss(tmp_path, mrpc,
                                                                  tiny_checkpoint):
    """--metric=eval_loss: lower is better. A learning rate of 1e-9 leaves the loss where it
    starts; after its first epoch it is worse than the finished trial's at that epoch, so the
    median rule stops it there."""
    search = tmp_path / "search"
    result = run(search_command(search, "--grid=learning_rate=1e-3,1e-9",
                                "--grid=num_train_epochs=3", "--prune_startup_trials=1",
                                "--metric=eval_loss", runner=runner_flags(
                                    mrpc, tiny_checkpoint,
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
