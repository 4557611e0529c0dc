"""A search interrupted: killed (SIGKILL) mid-trial, the same command resumes the trial and ends as
an unbroken search; stopped by SIGTERM, it says so in one line, its trial's runner stops with it,
and the rerun resumes. (test_run_search.py: the search's grid, tables and refusals.)"""
import pathlib
import signal
import subprocess
import time

import pytest
import warm_python
from search_runs import best_score, kill_tree, logged_runs, run, runner_flags, search_command, table

pytestmark = pytest.mark.integration


def test_a_search_killed_mid_trial_resumes_it_and_ends_as_an_unbroken_one(
        tmp_path, mrpc_search, tiny_checkpoint):
    flags = ["--grid=learning_rate=1e-3", "--grid=num_train_epochs=3"]
    runner = runner_flags(mrpc_search, tiny_checkpoint)
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


def test_sigterm_stops_the_search_and_its_trial_in_one_line_and_the_rerun_resumes(
        tmp_path, mrpc_search, tiny_checkpoint):
    search = tmp_path / "search"
    command = search_command(search, "--grid=learning_rate=1e-3", "--grid=num_train_epochs=2",
                             runner=runner_flags(mrpc_search, tiny_checkpoint))
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
