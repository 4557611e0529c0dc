"""Checkpoints written by a thread while training goes on.

Saving a checkpoint is two parts. Copying the state off the devices must happen between two
updates (the next one reuses, or under `jax.jit`'s donation frees, the buffers). Writing the file
is most of the time (BERT-Base with Adam's two moments is 1.3 GB) and nothing in the next steps
needs it. `CheckpointWriter` runs the second part in one thread, one checkpoint at a time:

- a checkpoint is visible only once complete (the backend writes under a temporary name and
  renames; `then(path, seconds)` runs after the rename: the "saved" line, the rerun message);
- the next checkpoint, the end of training (or its interruption: the write in flight finishes,
  so an interrupted run leaves no half-written file) and anything that records progress against
  a checkpoint (an evaluation's results, `best/`) wait for the write in flight first
  (`wait()`), so that nothing on disk refers to a checkpoint that is not there yet;
- an error in the thread (a full disk) is raised in the training thread by the next `wait()`.
"""
from __future__ import annotations

import threading
import time
from typing import Callable


class CheckpointWriter:
    """One background write at a time (see the module docstring)."""

    def __init__(self):
        self._thread = None
        self._error = None

    def submit(self, write: Callable[[], str], then: Callable[[str, float], None]) -> None:
        """Run `write()` (returns the checkpoint's path), then `then(path, seconds it took)`, in
        the thread, after the write in flight (if any) is complete."""
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(write, then), daemon=True,
                                        name="checkpoint-writer")
        self._thread.start()

    def _run(self, write: Callable[[], str], then: Callable[[str, float], None]) -> None:
        start = time.perf_counter()
        try:
            path = write()
            then(path, time.perf_counter() - start)
        except BaseException as error:  # noqa: BLE001 - raised in the training thread by wait()
            self._error = error

    def wait(self) -> None:
        """Block until the write in flight is complete; raise its error, if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
