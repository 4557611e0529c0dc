"""An ordered map over worker processes, with bounded work in flight.

Results come back in the order of the inputs whatever the number of processes, so output made from
them is the same for 1 or N workers. At most `2 * num_workers` inputs are handed out ahead of the
result being consumed (`multiprocessing.Pool.imap` would read its whole input at once), which keeps
memory bounded. Workers are started with "spawn": the parent may hold TensorFlow, which is not
fork-safe. They import only what the mapped function needs; for pretraining data that is the
tokenizer, not TensorFlow (about 650 MB and seconds of start-up each).
"""
import collections
import multiprocessing
import signal
from typing import Callable, Iterable, Iterator


def ordered_map(function: Callable, items: Iterable, num_workers: int,
                initializer: Callable = None, initargs: tuple = ()) -> Iterator:
    """`map(function, items)` on `num_workers` processes (in this process if 1), in order."""
    if num_workers < 1:
        raise ValueError(f"--num_workers={num_workers}: must be at least 1")
    if num_workers == 1:
        if initializer is not None:
            initializer(*initargs)
        yield from map(function, items)
        return
    pool = multiprocessing.get_context("spawn").Pool(num_workers, _start_worker,
                                                      (initializer, initargs))
    try:
        pending = collections.deque()
        for item in items:
            pending.append(pool.apply_async(function, (item,)))
            if len(pending) >= 2 * num_workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
        pool.close()
    finally:
        pool.terminate()
        pool.join()


def _start_worker(initializer, initargs) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if initializer is not None:
        initializer(*initargs)
