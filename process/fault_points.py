"""Named points of a run where a test can kill (or freeze) the process, to prove a kill is harmless.

The promise "a killed run resumes to the same result" is only as good as the kill points it was
tried at. Each program calls `reached("NAME")` where a kill would be worst (inside an evaluation,
between the two renames of a swap, while a checkpoint is written, ...). In normal runs this is one
dictionary lookup. A test sets

    BERT_TEST_KILL_AT=NAME        SIGKILL at the first time NAME is reached
    BERT_TEST_KILL_AT=NAME@3      ... at the third time
    BERT_TEST_STOP_AT=NAME[@N]    SIGSTOP instead: the process freezes there, holding what it
                                  holds (a second process can then be tried against it)

A frozen process that is continued (SIGCONT) stays at the point for up to `SIGNAL_WAIT_S` seconds,
so that a signal a test sent while it was frozen is handled there, where the test means it to
land. Without the wait it may land later: CPython runs signal handlers in the main thread only, and
when the kernel hands the signal to another thread (TensorFlow's, the interrupt watcher), the main
thread notices it at its next switch of the interpreter lock, up to 5 ms later, by when it may have
finished an export and begun the evaluation. Sleeping releases the lock; taking it back makes the
main thread see the pending signal at once.

`checkpoint_write` is special: the process dies as soon as a checkpoint's temporary folder
(`*_temp`) is in the folder given, i.e. in the middle of the write: at once where the writer made
that folder before reaching the point (ours, on JAX), else when a watcher sees TensorFlow's own.
The points are listed in `POINTS` and in docs/drop-in.md.
"""
from __future__ import annotations

import os
import signal
import time

KILL_VARIABLE = "BERT_TEST_KILL_AT"
STOP_VARIABLE = "BERT_TEST_STOP_AT"
SIGNAL_WAIT_S = 60.0

# Every point a program reaches, and where.
POINTS = {
    "features": "a split's features are half written (fine-tuning)",
    "train_loop": "a training loop ended, before its checkpoint is saved",
    "train_step": "JAX: a step dispatched inside a loop, its variables donated, not yet assigned",
    "checkpoint_write": "inside a checkpoint's write (its *_temp folder exists)",
    "evaluation": "an evaluation's predictions are made, before anything is recorded",
    "best_swap": "between the two renames that swap a new best/ in",
    "eval_results": "best/ is updated, eval_results.txt not yet",
    "prediction": "the first prediction file is written, the others not yet",
    "export": "between the two renames that swap a new SavedModel in",
    "tf1_export": "pretraining: between the two renames that swap the TF1 export in",
    "records": "pretraining data: a shard is half written",
    "parts": "extract_features: a part is half written",
}

_counts: dict = {}


def _wanted(variable: str, name: str) -> bool:
    spec = os.environ.get(variable)
    if not spec:
        return False
    point, _, nth = spec.partition("@")
    return point == name and _counts[name] == int(nth or 1)


def reached(name: str, folder: str | None = None) -> None:
    """Kill or freeze the process here if a test asked for it (see the module docstring)."""
    if not (os.environ.get(KILL_VARIABLE) or os.environ.get(STOP_VARIABLE)):
        return
    if name not in POINTS:
        raise KeyError(f"unknown fault point {name!r}")
    _counts[name] = _counts.get(name, 0) + 1
    if _wanted(STOP_VARIABLE, name):
        os.kill(os.getpid(), signal.SIGSTOP)
        _wait_for_signal()
    if not _wanted(KILL_VARIABLE, name):
        return
    if name == "checkpoint_write":
        _kill_when_partial(folder or ".")
        return
    os.kill(os.getpid(), signal.SIGKILL)


def _wait_for_signal() -> None:
    """Continued after a freeze: give the signal sent meanwhile (its handler raises here) up to
    `SIGNAL_WAIT_S` seconds to arrive; go on if none does."""
    deadline = time.monotonic() + SIGNAL_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.01)


def _kill_when_partial(folder: str) -> None:
    """Kill the process as soon as a `*_temp` folder (a checkpoint being written) is in `folder`:
    at once where the writer made it before reaching the point (ours, on JAX), else from a thread
    that watches for TensorFlow's own. Only at once is the kill sure to land in this write: a
    small file is written and renamed in a few milliseconds, and a watcher that a loaded machine
    did not schedule meanwhile killed the run in the next checkpoint's write instead (the JAX kill
    chain then resumed one checkpoint later than its plan)."""
    import threading

    def partial() -> bool:
        try:
            names = os.listdir(folder)
        except OSError:
            names = []
        return any(name.endswith("_temp") for name in names)

    if partial():
        os.kill(os.getpid(), signal.SIGKILL)

    def watch():
        while True:
            if partial():
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.0005)

    threading.Thread(target=watch, daemon=True).start()
