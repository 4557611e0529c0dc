"""Inference over a stream of any length, fast and in input order, in bounded memory.

`predict_in_order` takes `window` items at a time (a few dozen batches' worth), sorts them by
length, cuts batches of `batch_size` rows of similar length, pads each batch only to its own
longest row, runs `predict` on it, and yields every item with its outputs in the order the items
came. Sorting within a window keeps padding low (short and long lines do not share a batch) while
memory holds one window, never the whole input. Batch jobs call it once per shard of lines
(`inference.line_shards`), so that a shard's batches, and so its float results, do not depend on
where a run started or which worker ran it. `Progress` logs lines/s and the time left.
"""
from __future__ import annotations

import itertools
import logging
import time
from typing import Callable, Iterable, Iterator

import numpy as np

logger = logging.getLogger(__name__)


def pad_rows(rows: list, pad: int = 0) -> np.ndarray:
    """Lists of ints -> int32 [len(rows), longest], padded with `pad`."""
    out = np.full((len(rows), max(len(r) for r in rows)), pad, np.int32)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def predict_in_order(items: Iterable, inputs: Callable[[object], dict],
                     predict: Callable[[dict], dict], batch_size: int,
                     window: int) -> Iterator[tuple]:
    """(item, {output name: its row}) for every item, in input order.

    `inputs(item)` gives the item's model inputs, each a list of ints of the item's length;
    `predict({name: int32 [batch, length]})` returns NumPy arrays with a leading batch axis.
    """
    iterator = iter(items)
    while True:
        chunk = list(itertools.islice(iterator, window))
        if not chunk:
            return
        features = [inputs(item) for item in chunk]
        lengths = [len(next(iter(f.values()))) for f in features]
        order = sorted(range(len(chunk)), key=lambda i: lengths[i])
        results = [None] * len(chunk)
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            batch = {name: pad_rows([features[i][name] for i in rows])
                     for name in features[rows[0]]}
            outputs = predict(batch)
            for j, i in enumerate(rows):
                results[i] = {name: value[j] for name, value in outputs.items()}
        yield from zip(chunk, results)


class Progress:
    """Logs `done/total lines | lines/s | eta` at most every `every` seconds, and at the end."""

    def __init__(self, total: int | None, done: int = 0, every: float = 10.0, what="lines"):
        self.total, self.done, self.every, self.what = total, done, every, what
        self.start_done = done
        self.start = self.last = time.time()

    def update(self, count: int = 1) -> None:
        self.done += count
        now = time.time()
        if now - self.last >= self.every:
            self.last = now
            self.log()

    def rate(self) -> float:
        elapsed = time.time() - self.start
        return (self.done - self.start_done) / elapsed if elapsed > 0 else 0.0

    def log(self) -> None:
        from bert_tf2.process.progress import format_duration

        rate = self.rate()
        text = f"{self.done}" + (f"/{self.total}" if self.total is not None else "")
        eta = ""
        if self.total is not None and rate > 0:
            eta = f" | eta {format_duration((self.total - self.done) / rate)}"
        logger.info("%s %s | %.1f %s/s%s", text, self.what, rate, self.what, eta)
