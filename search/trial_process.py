"""One trial: a runner's command in a child process, watched for its evaluations, stopped if pruned.

The runner is the ordinary command line (`python -m bert_tf2.run_classifier ...
--output_dir=TRIAL`, started by `process.child_python`), so a trial has every run's behaviour: features cached, checkpoints, `best/`,
resume, locks and one-line errors. Each time the run writes `eval_results.txt` (every epoch's end)
the search hears of it; the run waits for the search to read each one (`process.evaluation_gate`),
so none is missed and a run is never past the epoch it is pruned at. To prune, the search sends
SIGTERM, which a runner answers by stopping cleanly (exit status 143, nothing half-written). The
child gets SIGTERM too when the search dies, however it dies (Linux's parent-death signal), so a
killed search leaves no orphan holding a trial's folder; and the search forwards its own Ctrl-C or
SIGTERM to the child before it unwinds.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Callable

from bert_tf2.engine.results import RESULTS_FILE, read_eval_results
from bert_tf2.process import child_python, evaluation_gate

STOP_WAIT_S = 120  # how long a stopped runner may take to leave (then it is killed)


@dataclasses.dataclass
class Outcome:
    returncode: int
    pruned: bool  # stopped by the search after an evaluation
    wall_s: float
    last_line: str  # the run's last line of output (a one-line error, when it failed)


def run_trial(command: list, output_dir: str, log_path: str,
              on_evaluation: Callable[[dict], bool], on_tick: Callable[[], None] = lambda: None,
              poll_s: float = 0.5) -> Outcome:
    """Run `command` (python's arguments: `-m runner --flags`), appending its output to
    `log_path`; call `on_evaluation(results)` for each new evaluation in
    `output_dir/eval_results.txt` (True: prune, the run is stopped) and `on_tick()` every poll."""
    start = time.time()
    results_path = os.path.join(output_dir, RESULTS_FILE)
    seen = _stamp(results_path)  # a resumed run's earlier evaluation is not news
    pruned = False
    gate = log_path + ".gate"
    with contextlib.suppress(FileNotFoundError):
        os.remove(gate)
    environment = dict(os.environ, **{evaluation_gate.VARIABLE: gate})
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {shlex.join([sys.executable, *command])}\n")
        log.flush()
        child = child_python.start(command, die_with_parent=True, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                 env=environment)
        try:
            while True:
                finished = child.poll() is not None
                stamp = _stamp(results_path)
                if stamp != seen and stamp is not None:
                    seen = stamp
                    results = read_eval_results(results_path)
                    if on_evaluation(results) and not finished:
                        pruned = True
                        child.send_signal(signal.SIGTERM)
                        finished = _wait(child, on_tick, poll_s)
                    else:
                        evaluation_gate.open_to(gate, int(results.get("global_step", 0)))
                if finished:
                    break
                on_tick()
                time.sleep(poll_s)
        except BaseException:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
                _wait(child, lambda: None, poll_s)
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(gate)
    return Outcome(child.returncode, pruned, time.time() - start, last_line(log_path))


def _stamp(path: str):
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return status.st_mtime_ns, status.st_size, status.st_ino


def _wait(child, on_tick: Callable[[], None], poll_s: float) -> bool:
    """Wait for a signalled child (killed after STOP_WAIT_S), ticking meanwhile (heartbeats)."""
    deadline = time.time() + STOP_WAIT_S
    while child.poll() is None:
        if time.time() > deadline:
            child.kill()
            child.wait()
            break
        on_tick()
        time.sleep(poll_s)
    return True


def last_line(path: str) -> str:
    """The last non-empty line of a log (its tail only is read)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 8192))
            lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return ""
    lines = [line for line in lines if line]
    return lines[-1] if lines else ""
