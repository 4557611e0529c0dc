"""An ordered map over worker processes, with bounded work in flight.

Results come back in the order of the inputs whatever the number of processes, so output made from
them is the same for 1 or N workers. At most `2 * num_workers` inputs are handed out ahead of the
result being consumed (`multiprocessing.Pool.imap` would read its whole input at once), which keeps
memory bounded. `OrderedPool` keeps one set of workers for several maps (the two phases of
pretraining data), so they start, and load what they need, once.

How workers start: by "fork" when this process has not imported TensorFlow (which is not
fork-safe), so they start at once with everything the parent has loaded, such as a tokenizer and
compiled code built before the pool; otherwise by "spawn", importing only what the mapped function
needs (for pretraining data that is the tokenizer and the compiled code, not TensorFlow: about
650 MB and seconds of start-up each).
"""
import collections
import multiprocessing
import signal
import sys
from typing import Callable, Iterable, Iterator
from process.errors import SettingsError


class OrderedPool:
    """`with OrderedPool(n, initializer, initargs) as pool: pool.map(function, items)`; with one
    worker everything runs in this process."""

    def __init__(self, num_workers: int, initializer: Callable = None, initargs: tuple = ()):
        if num_workers < 1:
            raise SettingsError(f"--num_workers={num_workers}: must be at least 1")
        self.num_workers = num_workers
        self._initializer, self._initargs = initializer, initargs
        self._pool = None

    def __enter__(self) -> "OrderedPool":
        if self.num_workers == 1:
            if self._initializer is not None:
                self._initializer(*self._initargs)
        else:
            self._pool = multiprocessing.get_context(start_method()).Pool(
                self.num_workers, _start_worker, (self._initializer, self._initargs))
        return self

    def map(self, function: Callable, items: Iterable) -> Iterator:
        """`map(function, items)` on the workers, in order, at most 2 x workers in flight."""
        if self._pool is None:
            yield from map(function, items)
            return
        pending = collections.deque()
        for item in items:
            pending.append(self._pool.apply_async(function, (item,)))
            if len(pending) >= 2 * self.num_workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()

    def __exit__(self, *error) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()


def start_method() -> str:
    """"fork" where it is safe and available, else "spawn" (see the module docstring)."""
    if "tensorflow" in sys.modules or "fork" not in multiprocessing.get_all_start_methods():
        return "spawn"
    return "fork"


def _die_with_parent() -> None:
    """On Linux, have the kernel kill this worker when the parent process dies (a killed run's
    workers would otherwise go on computing, then print a broken pipe's traceback)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the worker ends at its next write instead
        pass


def ordered_map(function: Callable, items: Iterable, num_workers: int,
                initializer: Callable = None, initargs: tuple = ()) -> Iterator:
    """`map(function, items)` on `num_workers` processes (in this process if 1), in order."""
    with OrderedPool(num_workers, initializer, initargs) as pool:
        yield from pool.map(function, items)


def _start_worker(initializer, initargs) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _die_with_parent()
    if initializer is not None:
        initializer(*initargs)
