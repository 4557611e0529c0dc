"""Two workers of one search: on one study they run each trial once; one killed mid-trial leaves
its trial to the other, which runs it to the end. (PostgreSQL, workers sharing nothing else:
test_search_postgres.py.)"""
import subprocess
import time

import pytest
import warm_python
from search_runs import kill_tree, logged_runs, runner_flags, search_command, table

pytestmark = pytest.mark.integration


def test_two_workers_share_one_study_and_run_each_trial_once(tmp_path, mrpc_search, tiny_checkpoint):
    search = tmp_path / "search"
    command = search_command(search, "--space=learning_rate=loguniform(1e-4,1e-3)",
                             "--num_trials=4", "--sampler=random",
                             runner=runner_flags(mrpc_search, tiny_checkpoint, "--num_train_epochs=1"))
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


def test_a_worker_killed_mid_trial_leaves_its_trial_to_the_other_worker(
        tmp_path, mrpc_search, tiny_checkpoint):
    search = tmp_path / "search"
    command = search_command(search, "--grid=learning_rate=1e-3,2e-4",
                             runner=runner_flags(mrpc_search, tiny_checkpoint, "--num_train_epochs=2"))
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
    assert [r["state"] for r in rows] == ["finished"] * 2
    assert sorted(r["attempts"] for r in rows) == ["1", "2"]
    for row in rows:  # every start of a runner is an attempt: none lost, none duplicated
        assert logged_runs(search / "trials" / f"{row['trial']}.log") == int(row["attempts"])
