"""Dynamic batching: the rows of requests that arrive together run as one call of the model.

Why: one MiniLM call on 8 rows costs far less than 8 calls on one, and concurrent clients send
rows one or a few at a time. The knobs are TF Serving's batching parameters, under their names:
a batch closes when it holds `max_batch_size` rows or `batch_timeout_micros` after its first row
arrived, whichever comes first; the model's runtime then sorts the batch's rows by length and runs
them in groups of similar length (`inference.litert_runtime`). A request larger than
`max_batch_size` runs alone, whole.

The queue is bounded: `max_enqueued_batches` batches of `max_batch_size` rows. A request that
would overflow it is refused at once (`Overloaded`, answered 503 with Retry-After), never left
to time out; so is one that comes before warm-up or while the server stops (`NotServing`). The
model runs on `num_batch_threads` threads of its own (one by default: the LiteRT interpreter uses
every core within a call), so the event loop that reads requests never waits on it.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time

from bert_tf2.model_server.settings import ServerSettings

logger = logging.getLogger(__name__)


class Overloaded(RuntimeError):
    """The queue is full: try again shortly (503, Retry-After)."""


class NotServing(RuntimeError):
    """Not warmed up yet, or stopping (503, Retry-After)."""


class _Request:
    """Rows of texts to run in a batch; or, with `call`, a call of its own (`size` rows)."""
    __slots__ = ("rows", "future", "loop", "arrived", "call", "size")

    def __init__(self, rows: list, future, loop, call=None, size: int | None = None):
        self.rows, self.future, self.loop, self.call = rows, future, loop, call
        self.size = len(rows) if size is None else size
        self.arrived = time.monotonic()


class DynamicBatcher:
    """`await batcher.predict(rows)` -> the model's outputs for those rows (name -> array).

    `model(rows)` runs a list of rows and returns `{name: array or list over the rows}`;
    `observe(rows_in_batch, queued_rows)` is called once per batch (for the metrics)."""

    def __init__(self, model, max_batch_size: int = ServerSettings.max_batch_size,
                 batch_timeout_micros: int = ServerSettings.batch_timeout_micros,
                 max_enqueued_batches: int = ServerSettings.max_enqueued_batches,
                 num_batch_threads: int = ServerSettings.num_batch_threads, observe=None):
        self.model = model
        self.max_batch_size = max_batch_size
        self.timeout_s = batch_timeout_micros / 1e6
        self.capacity = max_batch_size * max_enqueued_batches
        self.observe = observe or (lambda rows, queued: None)
        self.queue = collections.deque()
        self.queued_rows = 0
        self.accepting = False
        self.stopping = False
        self.condition = threading.Condition()
        self.threads = [threading.Thread(target=self._work, name=f"batch-{i}", daemon=True)
                        for i in range(num_batch_threads)]
        for thread in self.threads:
            thread.start()

    def start_accepting(self) -> None:
        with self.condition:
            self.accepting = True

    async def predict(self, rows: list) -> dict:
        loop = asyncio.get_running_loop()
        return await self._enqueue(_Request(rows, loop.create_future(), loop))

    async def run_alone(self, call, rows: int) -> dict:
        """`call()` on the model's thread as a batch of its own, counted as `rows` rows against
        the queue's limit: what cannot share a batch of texts (a request of token ids)."""
        loop = asyncio.get_running_loop()
        return await self._enqueue(_Request([], loop.create_future(), loop, call, rows))

    async def _enqueue(self, request: _Request) -> dict:
        rows = request.size
        with self.condition:
            if not self.accepting:
                raise NotServing("the model is not serving (warming up or stopping)")
            if self.queued_rows and self.queued_rows + rows > self.capacity:
                raise Overloaded(f"{self.queued_rows} rows are waiting (the queue holds "
                                 f"{self.capacity}); try again shortly")
            self.queue.append(request)
            self.queued_rows += rows
            self.condition.notify()
        return await request.future

    def stop(self, timeout_s: float) -> bool:
        """Refuse new rows, finish the queued and running ones; whether all ended in time."""
        with self.condition:
            self.accepting = False
            self.stopping = True
            self.condition.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self.threads)

    # ------------------------------------------------------------------ the model's threads
    def _take_batch(self) -> list | None:
        with self.condition:
            while not self.queue:
                if self.stopping:
                    return None
                self.condition.wait()
            first = self.queue[0]
            # Wait for more rows until the batch is full or its first row has waited enough.
            while (self.queued_rows < self.max_batch_size and not self.stopping
                   and time.monotonic() < first.arrived + self.timeout_s):
                self.condition.wait(first.arrived + self.timeout_s - time.monotonic())
            batch, rows = [], 0
            while self.queue and (not batch or (
                    batch[0].call is None and self.queue[0].call is None
                    and rows + self.queue[0].size <= self.max_batch_size)):
                request = self.queue.popleft()
                batch.append(request)
                rows += request.size
            self.queued_rows -= rows
            self.observe(rows, self.queued_rows)
            return batch

    def _answers(self, batch: list) -> list:
        """`(request, outputs, None)` for each request of `batch`: its rows run as one call of
        the model, each request given its share; or a request's call of its own, alone."""
        if batch[0].call is not None:
            return [(batch[0], batch[0].call(), None)]
        outputs = self.model([row for request in batch for row in request.rows])
        answers, start = [], 0
        for request in batch:
            end = start + len(request.rows)
            answers.append((request, {name: value[start:end] for name, value in outputs.items()},
                            None))
            start = end
        return answers

    def _work(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            try:
                answers = self._answers(batch)
            except Exception as e:  # noqa: BLE001 - answered as the request's error
                logger.exception("the model failed on a batch of %d requests", len(batch))
                answers = [(request, None, e) for request in batch]
            # One wake-up of each event loop per batch, not one per request.
            for loop in {request.loop for request in batch}:
                loop.call_soon_threadsafe(_resolve_all, [(request.future, result, error) for
                                                         request, result, error in answers
                                                         if request.loop is loop])


def _resolve_all(answers: list) -> None:
    for future, result, error in answers:
        if future.done():  # the client went away
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
