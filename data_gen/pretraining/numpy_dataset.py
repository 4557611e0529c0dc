"""The pretraining input in NumPy, for the backends without tf.data (JAX, PyTorch).

The twin of `dataset.pretraining_dataset` and `dynamic_masking`, rule for rule:
- training: the file list in a fresh seeded order each pass, records interleaved one at a time
  from up to `num_cpu_threads` open files (a finished file replaced by the next), through a
  seeded shuffle buffer of the original's 100 records, endlessly; evaluation: the files in order,
  once; batches drop the remainder; int64 features become int32, `masked_lm_weights` stays
  float32;
- several input pipelines (processes) split the files, or, with fewer files than pipelines, each
  reads every record and keeps its share;
- `--dynamic_masking`: each batch un-masked and masked afresh by the original's rule
  (`dynamic_masking.mask_batch`'s), from a generator seeded by (seed, batch number), so a resumed
  run sees the same masks.
The draws are NumPy's, not tf.data's: the same rules, another order (docs/backends.md).

At tf.data's pace: a file is opened and its frames found and checked once
(`tfrecord_frames.RecordFile`) when the stream reaches it; the order above is worked out on
record references (file and record numbers, whole rounds of the interleave at once, the shuffle
buffer compiled), so no bytes are touched to decide it and a resumed run skips the batches it had
used by references alone; each batch's records are then read from their files (a read per run of
nearby records) and parsed into the batch's arrays (`compiled_examples`) and masked (compiled),
by the worker threads of `numpy_datasets.Batches`, ahead of the step. Files are read, never
memory-mapped: a mapped file rewritten in place under a run kills it with SIGBUS, where a read
file is a `DataError` naming it. A damaged file is a `DataError` naming it and the byte where its
framing breaks; a record of other lengths, naming the record.
"""
from __future__ import annotations

import threading
from typing import Iterator

import numpy as np

from bert_tf2.data_gen import tfrecord_frames
from bert_tf2.data_gen.compiled_examples import FixedSpec
from bert_tf2.data_gen.errors import DataError
from bert_tf2.data_gen.numpy_datasets import Batches
from bert_tf2.data_gen.pretraining import schema
from bert_tf2.data_gen.pretraining.schema import SHUFFLE_BUFFER_RECORDS
from bert_tf2.process import compiled

_BLOCK = 8192  # records whose order is worked out at a time
CHECK_EVERY = 16  # batches between two checks that the files are as they were opened
_REMAKE = ("make the file again with create_pretraining_data and rerun (training resumes from "
           "the last checkpoint)")


class _Files:
    """The record files of a stream, opened and indexed when the stream reaches them and let go
    when every record of theirs has been taken: a file is known by its number in the stream."""

    def __init__(self):
        self.opened = {}  # stream number -> [RecordFile, records not yet taken]
        self.takes = 0

    def open(self, number: int, path: str) -> int:
        """Opens `path` as file `number`; returns its record count."""
        try:
            records = tfrecord_frames.RecordFile(path)
        except ValueError as e:
            raise DataError(f"{e}; {_REMAKE}") from None
        except OSError as e:
            raise DataError(f"{path}: cannot read it ({e.strerror or e})") from None
        if len(records.starts):
            self.opened[number] = [records, len(records.starts)]
        else:
            records.close()
        return len(records.starts)

    def take(self, refs: np.ndarray) -> tuple:
        """The records `refs` (`file number << 32 | record number`) as what `_read` reads: the
        files they come from, where each file's records begin, their bytes in their files, their
        rows of the batch and their numbers in their files. Every `CHECK_EVERY` batches the
        files are checked to be as they were opened (`RecordFile.check`; a file that shrank is
        caught by every read): a system call gives the GIL up, and taking it back can wait on
        the other threads."""
        numbers, records = refs >> 32, refs & 0xFFFFFFFF
        rows = np.argsort(numbers, kind="stable")
        files, first = np.unique(numbers[rows], return_index=True)
        opened = [self.opened[number][0] for number in files.tolist()]
        chosen = records[rows]
        first = np.append(first, len(rows))
        starts, ends = np.empty(len(rows), np.int64), np.empty(len(rows), np.int64)
        for p, record_file in enumerate(opened):
            part = slice(first[p], first[p + 1])
            starts[part] = record_file.starts[chosen[part]]
            ends[part] = record_file.ends[chosen[part]]
        self.takes += 1
        if self.takes % CHECK_EVERY == 0:
            for record_file in opened:
                _checked(record_file.check)
        self.drop(refs)
        return opened, first, starts, ends, rows, chosen

    def drop(self, refs: np.ndarray) -> None:
        """Counts the records `refs` as taken (or passed over)."""
        numbers, counts = np.unique(refs >> 32, return_counts=True)
        for number, count in zip(numbers.tolist(), counts.tolist()):
            entry = self.opened[number]
            entry[1] -= count
            if entry[1] <= 0:  # closed when the last batch reading it lets it go
                del self.opened[number]


def _interleaved(order: list, cycle: int, files: _Files, first_number: int) -> Iterator[tuple]:
    """Blocks `(file numbers, record numbers)` of one record from each of `cycle` open files in
    turn, a finished file giving way to the next of `order`, as tf.data's `interleave` with
    `block_length=1` (the original's input function) orders them; file numbers count up from
    `first_number`."""
    pending = iter(enumerate(order, first_number))
    slots = []  # [file number, records, next record]
    for number, path in (next(pending, (None, None)) for _ in range(cycle)):
        if path is not None:
            slots.append([number, files.open(number, path), 0])
    while slots:
        rounds = min(min(count - at for _, count, at in slots), _BLOCK // len(slots) + 1)
        if rounds:  # every open file has `rounds` more records: whole rounds at once
            numbers = np.array([number for number, _, _ in slots], np.int64)
            firsts = np.array([at for _, _, at in slots], np.int64)
            yield (np.tile(numbers, rounds),
                   (firsts[None, :] + np.arange(rounds)[:, None]).reshape(-1))
            for slot in slots:
                slot[2] += rounds
        numbers, records = [], []  # a round in which some file runs out
        for slot in list(slots):
            number, count, at = slot
            if at == count:
                slots.remove(slot)
                following, path = next(pending, (None, None))
                if path is not None:
                    slots.append([following, files.open(following, path), 0])
            else:
                numbers.append(number)
                records.append(at)
                slot[2] += 1
        if numbers:
            yield np.array(numbers, np.int64), np.array(records, np.int64)


@compiled.njit(nogil=True)
def _through_buffer(incoming, buffer, filled, slots, out):
    """The shuffle buffer: each incoming record fills the buffer until it is full, then takes the
    place of the record at `slots[k]` (drawn beforehand), which goes out. Returns how many went
    out and how full the buffer is."""
    k = 0
    for i in range(len(incoming)):
        if filled < len(buffer):
            buffer[filled] = incoming[i]
            filled += 1
            continue
        out[k] = buffer[slots[k]]
        buffer[slots[k]] = incoming[i]
        k += 1
    return k, filled


def _training_refs(paths: list, seed: int, cycle: int, files: _Files) -> Iterator[np.ndarray]:
    """Blocks of records `file number * 2**32 + record number` in training order: every pass over
    the files in a fresh seeded order, interleaved, through a seeded shuffle buffer of the
    original's 100 records, endlessly."""
    draws = np.random.default_rng([seed, 2])
    buffer, filled = np.zeros(SHUFFLE_BUFFER_RECORDS, np.int64), 0
    epoch, first = 0, 0
    while True:
        order = [paths[i] for i in np.random.default_rng([seed, 3, epoch]).permutation(len(paths))]
        emitted = 0
        for numbers, records in _interleaved(order, min(cycle, len(paths)), files, first):
            emitted += len(numbers)
            incoming = (numbers << 32) | records
            out = np.empty(len(incoming), np.int64)
            slots = draws.integers(len(buffer), size=max(0, len(incoming) - (len(buffer)
                                                                                - filled)))
            went, filled = _through_buffer(incoming, buffer, filled, slots, out)
            if went:
                yield out[:went]
        if not emitted:
            raise DataError(f"{', '.join(paths)}: no records")
        first += len(order)
        epoch += 1


def _evaluation_refs(paths: list, files: _Files) -> Iterator[np.ndarray]:
    for number, path in enumerate(paths):
        count = files.open(number, path)
        yield (np.int64(number) << 32) | np.arange(count, dtype=np.int64)


def _batches_of_refs(blocks: Iterator[np.ndarray], batch_size: int) -> Iterator[np.ndarray]:
    """Full batches of record references (a last partial batch is dropped)."""
    pending = np.zeros(0, np.int64)
    for block in blocks:
        pending = np.concatenate([pending, block]) if len(pending) else block
        while len(pending) >= batch_size:
            batch, pending = pending[:batch_size], pending[batch_size:]
            yield batch


@compiled.njit(nogil=True)
def _masked_rows(ids, input_mask, positions, lm_ids, weights, scores, roll, random_ids, mask_id,
                 cls_id, sep_id, masked_lm_prob, out_positions, out_lm_ids, out_weights):
    """`mask_batch`'s rule, row by row, in place on `ids` (a copy of the batch's input ids)."""
    rows, width = ids.shape
    slots = positions.shape[1]
    top = np.empty(slots, np.int64)
    for r in range(rows):
        for p in range(slots):  # un-mask: the original ids back at the masked positions
            if weights[r, p] > 0:
                ids[r, positions[r, p]] = lm_ids[r, p]
        length, available = 0, 0
        for t in range(width):
            if input_mask[r, t] > 0:
                length += 1
                if ids[r, t] != cls_id and ids[r, t] != sep_id:
                    available += 1
        wanted = np.float32(length) * masked_lm_prob
        to_predict = min(slots, max(1, int(np.round(wanted))), available)
        # The candidates with the largest scores (ties: the earlier position), kept sorted.
        chosen = 0
        for t in range(width):
            if input_mask[r, t] <= 0 or ids[r, t] == cls_id or ids[r, t] == sep_id:
                continue
            k = chosen
            while k > 0 and scores[r, top[k - 1]] < scores[r, t]:
                k -= 1
            if k >= to_predict:
                continue
            for m in range(min(chosen, to_predict - 1), k, -1):
                top[m] = top[m - 1]
            top[k] = t
            chosen = min(chosen + 1, to_predict)
        used = np.sort(top[:chosen])
        for p in range(slots):
            if p < chosen:
                position = used[p]
                original = ids[r, position]
                out_positions[r, p] = position
                out_lm_ids[r, p] = original
                out_weights[r, p] = 1.0
            else:
                out_positions[r, p] = 0
                out_lm_ids[r, p] = 0
                out_weights[r, p] = 0.0
        for p in range(chosen):
            position = out_positions[r, p]
            if roll[r, p] < 0.8:
                ids[r, position] = mask_id
            elif roll[r, p] >= 0.9:
                ids[r, position] = random_ids[r, p]


def mask_batch(batch: dict, rng: np.random.Generator, vocab_size: int, mask_id: int,
               cls_id: int, sep_id: int, masked_lm_prob: float = 0.15) -> dict:
    """`dynamic_masking.mask_batch`'s rule (see its module docstring), compiled: the scores that
    choose the positions, the rolls and the random ids are drawn from `rng` for the whole batch
    first (in that order), so the masks depend only on `rng`'s seed."""
    ids = batch["input_ids"].copy()
    positions = batch["masked_lm_positions"]
    scores = rng.random(ids.shape)
    roll = rng.random(positions.shape)
    random_ids = rng.integers(0, vocab_size, positions.shape)
    out_positions = np.empty_like(positions)
    out_lm_ids = np.empty_like(batch["masked_lm_ids"])
    out_weights = np.empty_like(batch["masked_lm_weights"])
    _masked_rows(ids, batch["input_mask"], positions, batch["masked_lm_ids"],
                 batch["masked_lm_weights"], scores, roll, random_ids, mask_id, cls_id, sep_id,
                 np.float32(masked_lm_prob), out_positions, out_lm_ids, out_weights)
    return {**batch, "input_ids": ids, "masked_lm_positions": out_positions,
            "masked_lm_ids": out_lm_ids, "masked_lm_weights": out_weights}


def pretraining_batches(input_files, batch_size: int, max_seq_length: int,
                        max_predictions_per_seq: int, is_training: bool,
                        num_cpu_threads: int = 4, seed: int = 0, input_context=None,
                        masking: dict | None = None) -> Batches:
    """Batches of the seven features from `input_files` (see the module docstring)."""
    paths = list(input_files)
    if not paths:
        raise ValueError("pretraining_batches: no input files")
    pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline = input_context.input_pipeline_id if input_context else 0
    shard_records = 1 < pipelines and len(paths) < pipelines
    if 1 < pipelines and not shard_records:
        paths = paths[pipeline::pipelines]
    spec = FixedSpec(schema.fixed_spec(max_seq_length, max_predictions_per_seq))

    def stream():
        files = _Files()
        blocks = (_training_refs(paths, seed, num_cpu_threads, files) if is_training
                  else _evaluation_refs(paths, files))
        if shard_records:
            blocks = _dealt(blocks, pipelines, pipeline, files)
        for number, refs in enumerate(_batches_of_refs(blocks, batch_size)):
            yield number, files.take(refs)

    def make(item):
        number, taken = item
        pieces = _read(taken)  # a DataError of its own when a file changed
        try:
            batch = spec.parse_pieces(pieces, batch_size, int_dtype=np.int32)
        except ValueError as error:  # a record of other lengths (files of two runs concatenated)
            raise DataError(f"{error}; {_REMAKE}") from None
        if masking:
            batch = mask_batch(batch, np.random.default_rng([seed, 4, number]), **masking)
        return batch

    return Batches(stream, make)


def _checked(action):
    """`action()`, a changed file as the DataError the run stops with."""
    try:
        return action()
    except tfrecord_frames.FileChanged as e:
        raise DataError(f"{e}; do not rewrite the records of a running training (make new "
                        f"ones under another name); the same command resumes from the "
                        f"last checkpoint") from None


_buffers = threading.local()  # each input thread's read buffer, reused batch after batch


def _read(taken: tuple) -> list:
    """What `_Files.take` took, read from the files (`tfrecord_frames.read_runs`) into the
    thread's buffer, as one piece for `FixedSpec.parse_pieces` (which copies what it parses: the
    buffer is free again once the batch is made)."""
    opened, first, starts, ends, rows, chosen = taken
    buffer = getattr(_buffers, "array", None)
    data, starts, ends = _checked(lambda: tfrecord_frames.read_runs(
        opened, first, starts, ends, buffer))
    if buffer is None or len(buffer) < len(data):  # the records went into a new array
        _buffers.array = np.empty(int(len(data) * 1.25) + 4096, np.uint8)
    return [(data, starts, ends, rows,
             lambda i: f"{opened[int(np.searchsorted(first, i, 'right')) - 1].path}: ", chosen)]


def _dealt(blocks: Iterator[np.ndarray], pipelines: int, pipeline: int,
           files: _Files) -> Iterator[np.ndarray]:
    """Every `pipelines`-th record of the stream, from the `pipeline`-th on."""
    seen = 0
    for block in blocks:
        keep = (seen + np.arange(len(block))) % pipelines == pipeline
        seen += len(block)
        files.drop(block[~keep])
        yield block[keep]
