"""The search on a real PostgreSQL server, as on several machines: workers that share the database
and nothing else (each its own --search_dir, standing for its own machine; no lock file shared),
started in the same instant, one of them killed with SIGKILL mid-trial; their tables and best/
against a one-worker search's; and a bad URL, an unreachable server and wrong credentials, each one
line that leaves nothing behind. The server is a throwaway cluster (tests/postgres_cluster.py)."""
import os
import signal
import subprocess
import time

import postgres_cluster
import pytest
import warm_python
from conftest import REPO, free_port
from search_runs import logged_runs, run, runner_flags, search_command, table

# One configuration, two seeds: a trial for each worker, and configurations.tsv's mean and
# standard deviation over trials that ran on different machines.
GRID = ["--grid=learning_rate=1e-3", "--grid=num_train_epochs=2", "--seeds=2"]
SLOTS = [f"lr1e-3_ep2_seed{seed}" for seed in (12345, 12346)]


@pytest.fixture(scope="module")
def postgres():
    why = postgres_cluster.missing()
    if why:
        pytest.skip(why)
    cluster = postgres_cluster.Cluster().start()
    yield cluster
    cluster.stop()


def fresh_url(cluster, name):
    cluster.sql(f"CREATE DATABASE {name} OWNER {postgres_cluster.USER}")
    return cluster.url(database=name)


def start(command):
    return warm_python.start(command, cwd=REPO, stdout=subprocess.DEVNULL)


def finished_rows(folder):
    """trials.tsv's rows, by trial, without what depends on the worker (who, how long)."""
    return {row["trial"]: {k: v for k, v in row.items() if k not in ("worker", "wall_s")}
            for row in table(folder / "trials.tsv")}


def ran_in(folder):
    return sorted(p.name for p in (folder / "trials").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def searches(postgres, mrpc_search, tiny_checkpoint, tmp_path_factory):
    """The same grid (one configuration x 2 seeds) by two workers in two folders on one database,
    started together (and by one worker alone: `alone`)."""
    root = tmp_path_factory.mktemp("postgres_search")
    url = fresh_url(postgres, "two_workers")
    flags = runner_flags(mrpc_search, tiny_checkpoint)
    workers = [start(search_command(root / f"machine{i}", *GRID, f"--storage={url}",
                                    runner=flags)) for i in range(2)]
    errors = [w.communicate(timeout=900)[1] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], errors
    return {"root": root, "url": url, "logs": errors}


@pytest.fixture(scope="module")
def alone(searches, mrpc_search, tiny_checkpoint):
    """The same grid by one worker alone (SQLite, its own folder)."""
    folder = searches["root"] / "alone"
    run(search_command(folder, *GRID, runner=runner_flags(mrpc_search, tiny_checkpoint)))
    return folder


@pytest.mark.integration
def test_two_workers_sharing_only_the_database_run_every_trial_once(searches):
    one, two = searches["root"] / "machine0", searches["root"] / "machine1"
    # Each machine ran its own trials in its own folder; together, every trial exactly once.
    assert ran_in(one) and ran_in(two)
    assert sorted(ran_in(one) + ran_in(two)) == SLOTS
    for folder in (one, two):
        for slot in ran_in(folder):
            assert logged_runs(folder / "trials" / f"{slot}.log") == 1
    # Both write the same tables, from the database: every trial finished at its first attempt.
    rows = finished_rows(one)
    assert rows == finished_rows(two)
    assert sorted(rows) == SLOTS
    assert all(r["state"] == "finished" and r["attempts"] == "1" for r in rows.values())
    assert not any((folder / ".schedule.lock").exists() for folder in (one, two))
    # One study, though both workers created it in the same instant.
    import optuna

    summaries = optuna.get_all_study_summaries(storage=searches["url"].replace(
        "postgresql://", "postgresql+psycopg://"))
    assert [s.study_name for s in summaries] == ["search"] and summaries[0].n_trials == 2


@pytest.mark.integration
def test_the_tables_and_best_are_a_one_worker_searchs(searches, alone):
    root = searches["root"]
    alone = finished_rows(alone)
    for folder in ("machine0", "machine1"):
        assert finished_rows(root / folder) == alone
        assert table(root / folder / "configurations.tsv") == table(root / "alone" /
                                                                    "configurations.tsv")
    # best/ is where the chosen trial ran, a copy of that trial's best/, and the one worker's.
    chosen = max(alone.values(), key=lambda r: float(r["dev_score"]))["trial"]
    owner = next(root / f for f in ("machine0", "machine1") if chosen in ran_in(root / f))
    other = next(root / f for f in ("machine0", "machine1") if root / f != owner)
    assert not (other / "best").exists()
    assert "ran on" in searches["logs"][0] + searches["logs"][1]
    for name in ("model.index", "model.data-00000-of-00001", "eval_results.txt"):
        assert (owner / "best" / name).read_bytes() == (
            owner / "trials" / chosen / "best" / name).read_bytes()
        assert (owner / "best" / name).read_bytes() == (root / "alone" / "best" /
                                                        name).read_bytes()


@pytest.mark.slow  # repeats test_run_search's killed worker on PostgreSQL (make test-all)
def test_a_worker_killed_mid_trial_leaves_its_trial_to_the_other(postgres, mrpc_search, tiny_checkpoint,
                                                                  tmp_path):
    url = fresh_url(postgres, "killed_worker")
    flags = runner_flags(mrpc_search, tiny_checkpoint)
    command = search_command(tmp_path / "first", "--grid=learning_rate=1e-3,2e-4",
                             "--grid=num_train_epochs=2", f"--storage={url}", runner=flags)
    first = start(command)
    trials = tmp_path / "first" / "trials"
    deadline = time.time() + 300
    while not any(trials.glob("*/eval_results.txt")):  # mid-trial: an epoch evaluated
        assert first.poll() is None and time.time() < deadline, first.stderr.read()[-3000:]
        time.sleep(0.2)
    killed = ran_in(tmp_path / "first")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    second = run(search_command(tmp_path / "second", "--grid=learning_rate=1e-3,2e-4",
                                "--grid=num_train_epochs=2", f"--storage={url}", runner=flags))
    rows = finished_rows(tmp_path / "second")
    assert all(r["state"] == "finished" for r in rows.values()) and len(rows) == 2
    # The killed trial was taken up by the second worker and run to its end there.
    assert len(killed) == 1 and rows[killed[0]]["attempts"] == "2"
    assert killed[0] in ran_in(tmp_path / "second")
    assert logged_runs(tmp_path / "second" / "trials" / f"{killed[0]}.log") == 1
    assert "taken up" in second.stderr or "is gone" in second.stderr


@pytest.mark.integration
@pytest.mark.parametrize("url, message", [
    ("postgresql://search:wrong@127.0.0.1:{port}/search",
     "cannot use the database at 127.0.0.1:{port} (password authentication failed for user "
     "\"search\"); check the user and password in --storage"),
    ("postgresql://search:secret-pw@127.0.0.1:{closed}/search",
     "cannot use the database at 127.0.0.1:{closed} ("),
    ("postgresql://search:secret-pw@127.0.0.1:{port}/nodb",
     "database \"nodb\" does not exist); create the database"),
    ("mysql://search:secret-pw@127.0.0.1:3306/search", "a mysql database is not supported"),
])
def test_a_bad_database_is_one_line_and_writes_nothing(postgres, tmp_path, url, message):
    closed = free_port()
    url = url.format(port=postgres.port, closed=closed)
    result = run(search_command(tmp_path / "search", "--grid=learning_rate=1e-3",
                                f"--storage={url}", runner=["--task_name=MRPC"]), check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("run_search.py: error: --storage="), lines
    assert message.format(port=postgres.port, closed=closed) in lines[0]
    assert "secret-pw" not in lines[0] and "wrong" not in lines[0]  # the password is not shown
    if url.startswith("postgresql") and str(closed) in url:
        assert "check that the server runs there" in lines[0]
    assert not (tmp_path / "search").exists()
