"""How long a fine-tuning run takes to finish once its work is done: consecutive short
`run_classifier.py` runs, each watched from outside.

Why: a user saw finished runs hang for 30-60 s after training (issue 29: the training input
iterator's destructor waiting on a tf.data thread, in 2 of 13 runs). This counts it: for every run,
the silence at the end of training (from the line of the last evaluation, which runs inside the
training loop, to the next line, written once training has returned: where the stall was), the
longest silence after the last training step, and the time from the last line to the process's
exit. When a run is silent for more than `--dump_after` seconds after training,
every thread's Python stack is written into its log (faulthandler, SIGUSR1), so a stall names the
line it waits under. Evaluation is silent too: a dump during it is expected, and the exit delay is
the figure that counts.

    python bench/exit_latency.py                     # 20 runs of MRPC, 20 steps each
    python bench/exit_latency.py --runs 5 --steps 10

Prints one line per run and a summary; logs under bench/results/logs/exit-latency/.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.finetune_vs_pytorch import minilm_dir  # noqa: E402

TRAIN_LINE = re.compile(r"step (\d+)/(\d+) \|")
EVALUATION_LINE = re.compile(r"evaluation at step (\d+)")
STACK_LINE = re.compile(r"\s+File |Current thread 0x|Thread 0x|\s*$")  # faulthandler's dump


# The runner under Python's faulthandler: SIGUSR1 writes every thread's Python stack to stderr
# (into the run's log) without stopping it; a stall then names the Python line it waits under.
LAUNCH = ("import faulthandler, runpy, signal, sys; "
          "faulthandler.register(signal.SIGUSR1, all_threads=True); "
          "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def watch(command: list, log: pathlib.Path, dump_after: float, py_spy: str = "") -> dict:
    """Runs `command`; returns the longest silence after training and the exit delay (s)."""
    start = time.perf_counter()
    state = {"last": start, "trained": False, "dumped": False, "steps": None,
             "after_evaluation": False, "release": 0.0, "native": False}
    native = log.with_suffix(".native.txt")
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, cwd=REPO)

    def watchdog():
        while child.poll() is None:
            time.sleep(0.5)
            silent = time.perf_counter() - state["last"] > dump_after
            if state["trained"] and not state["dumped"] and silent:
                state["dumped"] = True
                os.kill(child.pid, signal.SIGUSR1)
            if py_spy and state["after_evaluation"] and silent and not state["native"]:
                state["native"] = True  # a stall at the end of training: native stacks too
                dump = subprocess.run([py_spy, "dump", "--native", "--pid", str(child.pid)],
                                      capture_output=True, text=True)
                native.write_text(dump.stdout + dump.stderr)

    threading.Thread(target=watchdog, daemon=True).start()
    gaps = []
    with log.open("w") as out:
        for line in child.stdout:
            now = time.perf_counter()
            out.write(f"{now - start:8.1f} {line}")
            out.flush()
            if STACK_LINE.match(line):  # a stack dump's line, not the run's output
                continue
            if state["trained"]:
                gaps.append(now - state["last"])
            if state["after_evaluation"]:  # the first line after training returned
                state["release"], state["after_evaluation"] = now - state["last"], False
            state["last"] = now
            match = TRAIN_LINE.search(line)
            if match and match.group(1) == match.group(2):
                state["trained"], state["steps"] = True, match.group(1)
            match = EVALUATION_LINE.search(line)
            if state["trained"] and match and match.group(1) == state["steps"]:
                state["after_evaluation"] = True
    child.wait()
    end = time.perf_counter()
    if child.returncode:
        raise SystemExit(f"failed ({child.returncode}); see {log}")
    return {"wall": end - start, "longest_gap": max(gaps, default=0.0),
            "release": state["release"], "exit_delay": end - state["last"],
            "stacks": state["dumped"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--task", default="MRPC")
    parser.add_argument("--dump_after", type=float, default=5.0)
    parser.add_argument("--py_spy", default="",
                        help="a py-spy executable: on a stall at the end of training, every "
                             "thread's native stack goes to runN.native.txt beside the log")
    args = parser.parse_args()
    data = pathlib.Path(os.environ.get("BERT_DATA_DIR") or REPO.parent / "shared" / "data")
    logs = REPO / "bench" / "results" / "logs" / "exit-latency"
    logs.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="exit-latency-"))
    rows = []
    for run in range(args.runs):
        out = work / f"run{run}"
        command = [sys.executable, "-c", LAUNCH, "run_classifier.py", f"--task_name={args.task}",
                   f"--data_dir={data / 'glue' / args.task}", f"--output_dir={out}",
                   f"--init_checkpoint={minilm_dir()}", "--do_train", "--do_eval",
                   "--max_seq_length=128", "--train_batch_size=32",
                   f"--num_train_steps={args.steps}", f"--random_seed={run}"]
        row = watch(command, logs / f"run{run}.log", args.dump_after, args.py_spy)
        rows.append(row)
        print(f"run {run}: wall {row['wall']:.1f} s, end of training (last evaluation line to "
              f"the next) {row['release']:.1f} s, longest silence after training "
              f"{row['longest_gap']:.1f} s, last line to exit {row['exit_delay']:.1f} s"
              + (" (Python stacks in its log)" if row["stacks"] else ""), flush=True)
        shutil.rmtree(out, ignore_errors=True)
    stalled = [r["release"] for r in rows if r["release"] > 2.0]
    print(f"{len(stalled)} of {len(rows)} runs stalled more than 2 s at the end of training "
          f"({', '.join(f'{s:.1f}' for s in stalled) or 'none'} s); longest "
          f"{max(r['release'] for r in rows):.1f} s")
    late = sum(1 for r in rows if r["exit_delay"] > 2.0)
    print(f"{late} of {len(rows)} runs took more than 2 s from their last line to exit (longest "
          f"{max(r['exit_delay'] for r in rows):.1f} s); longest silence after training "
          f"{max(r['longest_gap'] for r in rows):.1f} s (evaluation is silent for a few seconds "
          "too: read the stacks in the logs)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
