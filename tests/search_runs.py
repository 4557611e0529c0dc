"""The search's command lines and what it writes, for the search's tests (test_run_search,
test_search_interrupted, test_search_workers, test_search_postgres): a search of run_classifier
trials on conftest's `mrpc_search` slice with the small random checkpoint."""
import csv
import os
import pathlib
import signal
import sys

import warm_python

REPO = warm_python.REPO


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


def kill_tree(pid):
    """SIGKILL to `pid` and every process below it."""
    children = pathlib.Path(f"/proc/{pid}/task/{pid}/children")
    for child in (children.read_text().split() if children.exists() else []):
        kill_tree(int(child))
    os.kill(pid, signal.SIGKILL)
