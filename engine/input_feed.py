"""Batches laid on the devices ahead of the step, and the time the step waited for them.

A training step that asks for its batch only when it needs it waits for the batch to be read,
parsed and copied to the device, every step. `DeviceFeed` does that in a thread, `depth` batches
ahead: it takes host batches from the input pipeline and places them (`put`: the strategy's,
which shards them over the devices), so that the step finds its batch already there. It counts
the seconds the training thread spent waiting in `next()`: the input-wait share that the runners
log with every loop and that `bench/input_pipeline.py` reports (under 5% means the input keeps
up). An error in the pipeline is raised in the training thread, at the batch where it happened.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Iterator

_END = object()


class DeviceFeed:
    """`put(batch)` of every batch of `batches`, made `depth` ahead in a thread."""

    def __init__(self, batches: Iterator, put: Callable, depth: int = 2):
        self.waited = 0.0  # seconds the consumer spent blocked in `__next__`
        self._queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(iter(batches), put),
                                        name="device-feed", daemon=True)
        self._thread.start()

    def _run(self, batches: Iterator, put: Callable) -> None:
        try:
            self._feed(batches, put)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()  # a generator's own clean-up (its worker threads), in its thread

    def _feed(self, batches: Iterator, put: Callable) -> None:
        try:
            for batch in batches:
                if not self._offer(put(batch)):
                    return
            self._offer(_END)
        except BaseException as error:  # raised again in the consumer
            self._offer(error)

    def _offer(self, item) -> bool:
        """Queues `item` once there is room; False if the feed was closed first."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> "DeviceFeed":
        return self

    def __next__(self):
        start = time.perf_counter()
        item = self._queue.get()
        self.waited += time.perf_counter() - start
        if item is _END:
            self._queue.put(_END)  # later calls end too
            raise StopIteration
        if isinstance(item, BaseException):
            self._queue.put(item)
            raise item
        return item

    def close(self) -> None:
        """Stops the thread (the pipeline's pending batches are dropped)."""
        self._stop.set()
        self._thread.join(timeout=10)

    def __enter__(self) -> "DeviceFeed":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
