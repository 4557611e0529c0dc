"""An ordered map over worker processes, with bounded work in flight.

Results come back in the order of the inputs whatever the number of processes, so output made from
them is the same for 1 or N workers. At most `2 * num_workers` inputs are handed out ahead of the
result being consumed (`multiprocessing.Pool.imap` would read its whole input at once), which keeps
memory bounded. Each worker has a pipe of its own, so stopping the workers on an error or Ctrl-C
is a kill that cannot leave a shared lock taken, and a worker that dies (out of memory) is an
error, not a hang. `OrderedPool` keeps one set of workers for several maps (the two phases of
pretraining data), so they start, and load what they need, once.

How workers start: by "fork" when this process has not imported TensorFlow (which is not
fork-safe), so they start at once with everything the parent has loaded, such as a tokenizer and
compiled code built before the pool; otherwise by "spawn", importing only what the mapped function
needs (for pretraining data that is the tokenizer and the compiled code, not TensorFlow: about
650 MB and seconds of start-up each).
"""
import multiprocessing
import multiprocessing.connection
import signal
import sys
from typing import Callable, Iterable, Iterator

from bert_tf2.process import interrupts
from bert_tf2.process.errors import SettingsError


class OrderedPool:
    """`with OrderedPool(n, initializer, initargs) as pool: pool.map(function, items)`; with one
    worker everything runs in this process."""

    def __init__(self, num_workers: int, initializer: Callable = None, initargs: tuple = ()):
        if num_workers < 1:
            raise SettingsError(f"--num_workers={num_workers}: must be at least 1")
        self.num_workers = num_workers
        self._initializer, self._initargs = initializer, initargs
        self._workers = []  # (process, this end of its pipe)

    def __enter__(self) -> "OrderedPool":
        if self.num_workers == 1:
            if self._initializer is not None:
                self._initializer(*self._initargs)
            return self
        context = multiprocessing.get_context(start_method())
        for _ in range(self.num_workers):
            ours, theirs = context.Pipe()
            process = context.Process(target=_serve, daemon=True,
                                      args=(theirs, self._initializer, self._initargs))
            process.start()
            theirs.close()
            self._workers.append((process, ours))
        return self

    def map(self, function: Callable, items: Iterable) -> Iterator:
        """`map(function, items)` on the workers, in order, at most 2 x workers in flight: each
        item goes to a worker with fewer than two of its own (the least loaded), and results
        that come back ahead of an earlier one wait for it."""
        if not self._workers:
            yield from map(function, items)
            return
        items = iter(items)
        loads = {connection: 0 for _, connection in self._workers}
        done, sent, wanted, exhausted = {}, 0, 0, False
        while True:
            while not exhausted and sent - wanted < 2 * self.num_workers:
                try:
                    item = next(items)
                except StopIteration:
                    exhausted = True
                    break
                connection = min(loads, key=loads.get)
                try:
                    connection.send((sent, function, item))
                except OSError:  # the worker died since its last result: a broken pipe
                    raise _died(connection, self._workers) from None
                loads[connection] += 1
                sent += 1
            if wanted == sent:
                return
            while wanted not in done:
                for connection in multiprocessing.connection.wait(list(loads)):
                    index, ok, value = _receive(connection, self._workers)
                    loads[connection] -= 1
                    if not ok:
                        raise value
                    done[index] = value
            yield done.pop(wanted)
            wanted += 1

    def __exit__(self, error_type, *error) -> None:
        """Normal end: each worker is told to stop and joined. On an error or an interrupt, the
        workers are killed at once: nothing they hold is shared (each has its own pipe), so no
        lock is left taken (`multiprocessing.Pool.terminate` can hang when a worker is killed
        while it sends a large result)."""
        for process, connection in self._workers:
            if error_type is None:
                try:
                    connection.send(None)
                except OSError:
                    pass
            else:
                process.kill()
        for process, connection in self._workers:
            while process.is_alive():  # results nobody will read (a map left early): take them
                try:
                    if connection.poll(0.05):
                        connection.recv()
                except (EOFError, OSError):
                    break
            process.join()
            connection.close()
        self._workers = []


def _receive(connection, workers) -> tuple:
    try:
        return connection.recv()
    except (EOFError, OSError):
        raise _died(connection, workers) from None


def _died(connection, workers) -> "WorkerDied":
    """The error for the worker at the other end of `connection`, which has ended (whether its
    result was being read or its next item sent)."""
    process = next(p for p, c in workers if c is connection)
    process.join()
    why = "; killed by the system: out of memory?" if process.exitcode == -9 else ""
    return WorkerDied(f"a worker process ended before returning its result (exit status "
                      f"{process.exitcode}{why})")


class WorkerDied(RuntimeError):
    """A worker process ended before returning its result."""


def _serve(connection, initializer, initargs) -> None:
    """A worker: start, then run each `(index, function, item)` received until None arrives."""
    _start_worker(initializer, initargs)
    while True:
        try:
            task = connection.recv()
        except EOFError:  # the parent is gone
            return
        if task is None:
            return
        index, function, item = task
        try:
            answer = (index, True, function(item))
        except Exception as error:  # noqa: BLE001 - raised again in the parent
            answer = (index, False, _picklable(error))
        connection.send(answer)


def _picklable(error: Exception) -> Exception:
    """`error` if it survives pickling (user errors do), else a RuntimeError with its text."""
    import pickle
    import traceback

    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - any failure to pickle
        return RuntimeError("".join(traceback.format_exception(error)))


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
    interrupts.default_handlers()  # Ctrl-C is the parent's to handle; SIGTERM ends it quietly
    _die_with_parent()
    if initializer is not None:
        initializer(*initargs)
