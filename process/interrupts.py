"""Ctrl-C and SIGTERM: a run stopped by its user or its scheduler says, in one line, where it
stopped and what the same command will do.

`install()` (every front door calls it through `errors.run_main`) makes SIGINT (Ctrl-C) and
SIGTERM (what `kill`, `docker stop` and job schedulers send) raise `Interrupted`, a
`KeyboardInterrupt`, in the main thread. The run then unwinds as it does for any error: every
`finally` and context manager runs, so temporary files and partial checkpoints are removed,
worker pools stopped and output locks released. The front door prints

    run_classifier.py: interrupted by Ctrl-C (SIGINT) at training step 57 of 300; nothing
        half-written is left; the same command resumes from out/model.ckpt-50 (step 50)

(one line) and exits with 130 for SIGINT and 143 for SIGTERM, the statuses a shell gives a process
these signals end. The first signal puts the operating system's default handlers back, so a second
Ctrl-C stops the process at once, as a kill does (a kill, too, leaves a run the next one resumes).

A run deep in native code (a TensorFlow loop of a hundred training steps) would only see the
exception when that call returns. So `install()` also has the operating system write each
signal's number to a pipe (`signal.set_wakeup_fd`) that a thread watches: it calls the functions
registered with `on_signal` at once, and the training loop, which checks a flag each step, stops
after the step it is in.

Programs keep two phrases current, each a cheap assignment: `at(where)`, what the run is doing
("at training step 57 of 300"), and `rerun(what)`, what the same command does next ("resumes from
out/model.ckpt-50 (step 50)"); the default is "starts again from the beginning".
"""
from __future__ import annotations

import os
import signal
import sys
import threading

# The exit statuses of a process ended by SIGINT and SIGTERM, as shells report them.
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
NAMES = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}
START_OVER = "starts again from the beginning"

_where = ""
_rerun = START_OVER


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; `signal_number` says which."""

    def __init__(self, signal_number: int):
        super().__init__(NAMES.get(signal_number, f"signal {signal_number}"))
        self.signal_number = signal_number


_callbacks: list = []
_watching = False


def install() -> None:
    """Turn SIGINT and SIGTERM into `Interrupted` in this (main) thread of this process, and
    start the thread that calls the `on_signal` functions."""
    global _watching
    for number in STATUS:
        signal.signal(number, _raise)
    if not _watching:
        read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        threading.Thread(target=_watch, args=(read,), daemon=True,
                         name="interrupt-watcher").start()
        _watching = True


def _watch(read: int) -> None:
    while True:
        numbers = os.read(read, 64)
        if not numbers:
            return
        if any(number in STATUS for number in numbers):
            for callback in list(_callbacks):
                try:
                    callback()
                except Exception:  # noqa: BLE001 - the exception in the main thread matters
                    pass


def on_signal(callback) -> None:
    """Call `callback()` from a watcher thread as soon as SIGINT or SIGTERM arrives, while the
    main thread may be inside a long native call (it must be thread-safe and quick)."""
    _callbacks.append(callback)


def forget(callback) -> None:
    """Stop calling `callback` (registered with `on_signal`)."""
    if callback in _callbacks:
        _callbacks.remove(callback)


def _raise(signal_number, frame) -> None:
    for number in STATUS:  # a second signal stops the process at once
        signal.signal(number, signal.SIG_DFL)
    raise Interrupted(signal_number)


def default_handlers() -> None:
    """For worker processes: SIGINT is the parent's to handle (ignored), SIGTERM (the parent
    stopping its pool) ends the worker without a word."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def at(where) -> None:
    """What the run is doing now, as the message will say it ("at training step 57 of 300"); a
    function returning it is called when the message is made."""
    global _where
    _where = where


def rerun(what: str) -> None:
    """What the same command does next ("resumes from out/model.ckpt-50 (step 50)")."""
    global _rerun
    _rerun = what


def reset() -> None:
    """Forget the phrases (a program that runs several jobs in one process, tests)."""
    global _where, _rerun
    _where, _rerun = "", START_OVER


def status(interrupt: KeyboardInterrupt) -> int:
    return STATUS.get(getattr(interrupt, "signal_number", signal.SIGINT), 130)


def message(interrupt: KeyboardInterrupt) -> str:
    """`interrupted by ... at ...; nothing half-written is left; the same command ...`."""
    name = NAMES.get(getattr(interrupt, "signal_number", signal.SIGINT), "Ctrl-C (SIGINT)")
    where = _where
    if callable(where):
        try:
            where = where()
        except Exception:  # noqa: BLE001 - the run is stopping; say less rather than fail
            where = ""
    where = f" {where}" if where else ""
    return (f"interrupted by {name}{where}; nothing half-written is left; the same command "
            f"{_rerun}")


def report(program: str, interrupt: KeyboardInterrupt) -> None:
    """Print `PROGRAM: interrupted ...` on stderr and exit with 130 or 143."""
    # A terminal has echoed "^C" where the cursor was: start on a line of our own.
    echoed = status(interrupt) == STATUS[signal.SIGINT] and sys.stderr.isatty()
    sys.stderr.write(f"{chr(10) if echoed else ''}{program}: {message(interrupt)}\n")
    sys.stderr.flush()
    sys.exit(status(interrupt))
