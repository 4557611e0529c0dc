"""Run a LiteRT file from `engine.litert` on token ids: one interpreter, resized to each shape.

Why one: each request runs at its own shape, `[rows, longest row]`, with no padding to a bucket.
Resizing costs 25-35 microseconds on MiniLM (XNNPACK keeps its packed weights and reshapes), less
than the padding it saves. The project once kept an interpreter planned for each (batch, length)
bucket, 44 of them for a 128-token classifier; each held its own copy of the packed weights
(about 12 MB), 820 MB in all, and switching between them pushed the weights out of the CPU's
caches: on bench/serving.py's MRPC model one interpreter answers a single sentence in 0.72 ms
where the buckets took 0.91 (docs/serving.md#where-a-request-goes). A second interpreter, on one
thread, takes the one-row calls that find the process idle (`IDLE_SECONDS`). Padding is masked,
so a padded row gives its unpadded outputs up to float round-off (tests/test_litert.py). Inputs
may hold fixed axes between the batch and the length (multiple choice: `[batch, num_choices,
length]`), read from the file.

A call of several rows is sorted by length and cut into groups of neighbouring rows, each run cut
to its own longest row, then put back in order: a batch of 32 MRPC pairs padded to its longest
pair holds about twice the tokens it needs, and attention's cost grows with the square of it.
Where to cut is worked out per call (`cut_points`): the cuts that make the least work under a
cost of `overhead + rows * longest * (1 + longest / attention_length)` tokens per group, the two
constants timed on the file at `warm_up` (`GroupCost`). Groups of a fixed 8 rows left padding
where a batch's lengths spread and paid a call's overhead where they did not; on bench/serving.py's
MRPC model, the cuts raise the model's rate on batches of 16 single sentences by 11% and of 16
pairs by 15% (batches of 32: 5% and 8%), by the timed costs of every shape.

The interpreter is `ai_edge_litert`'s (the LiteRT package that replaces `tf.lite.Interpreter`),
or TensorFlow's where that is not installed; it needs no TensorFlow.
"""
from __future__ import annotations

import gc
import json
import os
import time

import numpy as np

from bert_tf2.inference.litert_layout import (
    DESCRIPTION,
    FOLDER,
    LiteRTError,
    model_file,
    require_export,
)

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
GROUP_ROWS = 8  # a group holds at most this many rows' worth of max_length tokens
IDLE_SECONDS = 0.002  # a one-row call after this long without one runs on one thread


def _interpreter_class():
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:  # pragma: no cover - the project installs ai-edge-litert
        from tensorflow.lite import Interpreter
    return Interpreter


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def padded_inputs(rows: list) -> dict:
    """The encoder's int32 inputs `[rows, longest row]` from rows of token ids, each a pair
    `(first segment, second segment)` already packed (`[CLS] A [SEP]`, `B [SEP]` or `[]`):
    zeros past each row's end, type ids 1 on its second segment."""
    length = max((len(a) + len(b) for a, b in rows), default=2)
    word_ids = np.zeros((len(rows), length), np.int32)
    mask = np.zeros((len(rows), length), np.int32)
    type_ids = np.zeros((len(rows), length), np.int32)
    for i, (a, b) in enumerate(rows):
        word_ids[i, :len(a) + len(b)] = [*a, *b]
        mask[i, :len(a) + len(b)] = 1
        type_ids[i, len(a):len(a) + len(b)] = 1
    return {"input_word_ids": word_ids, "input_mask": mask, "input_type_ids": type_ids}


def fixed_axes(flat: bytes) -> tuple:
    """The sizes of the inputs' axes between batch and length (`()` for `[batch, length]`)."""
    return _axes_between(_interpreter_class()(model_content=flat).get_input_details()[0])


def _axes_between(detail: dict) -> tuple:
    return tuple(int(size) for size in detail["shape_signature"][1:-1])


class GroupCost:
    """The work of one call of the interpreter on `rows` rows of `length` tokens, in tokens:
    `overhead + rows * length * (1 + length / attention_length)`. The defaults are those timed on
    MiniLM-L6 (bench/serving.py's MRPC model, 2 cores); `timed` measures them on a model."""

    def __init__(self, overhead: float = 12.0, attention_length: float = 640.0):
        self.overhead, self.attention_length = overhead, attention_length

    def __call__(self, rows: int, length: int) -> float:
        return self.overhead + rows * length * (1 + length / self.attention_length)

    @classmethod
    def timed(cls, run, rows: int, max_length: int, repeats: int = 3) -> "GroupCost":
        """From the median times of `run(rows, length)` at one row of 8 tokens and `rows` rows
        of a quarter and all of `max_length`: the three unknowns of `time = a + b * tokens +
        c * tokens * length` (the call, the tokens, attention), solved exactly; the defaults
        where the times do not fit that shape (noise, or too short a model to tell)."""
        def seconds(r, length):
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                run(r, length)
                times.append(time.perf_counter() - start)
            return float(np.median(times))

        short = min(8, max_length)
        shapes = [(1, short), (rows, max(short, max_length // 4)), (rows, max_length)]
        if len(set(shapes)) < 3:  # a model too short to tell the three apart
            return cls()
        terms = np.array([[1.0, r * n, r * n * n] for r, n in shapes])
        a, b, c = np.linalg.solve(terms, np.array([seconds(r, n) for r, n in shapes]))
        if b <= 0 or c <= 0:
            return cls()
        return cls(min(max(a / b, 0.0), 4.0 * max_length), max(b / c, 16.0))


def cut_points(lengths: list, cost: GroupCost, max_tokens: int) -> list:
    """Where to cut rows sorted by length (ascending) into groups of neighbours, each run at its
    longest row, so that the groups' summed `cost` is least and none holds more than
    `max_tokens` tokens (or more than one row where a row alone is longer): the end of each
    group. Dynamic programming over the cut before each row."""
    count = len(lengths)
    best = [0.0] + [float("inf")] * count
    start_of = [0] * (count + 1)
    overhead, attention_length = cost.overhead, cost.attention_length
    for end in range(1, count + 1):
        longest = max(int(lengths[end - 1]), 1)
        per_row = longest * (1 + longest / attention_length)
        for start in range(max(0, end - max(1, max_tokens // longest)), end):
            total = best[start] + overhead + (end - start) * per_row
            if total < best[end]:
                best[end], start_of[end] = total, start
    ends, end = [], count
    while end > 0:
        ends.append(end)
        end = start_of[end]
    return ends[::-1]


class _Interpreter:
    """An interpreter of the file, resized to each call's shape, with its tensor indices."""

    def __init__(self, flat: bytes, outputs: dict, threads: int):
        self.interpreter = _interpreter_class()(model_content=flat, num_threads=threads)
        inputs = self.interpreter.get_input_details()
        self.inputs = {d["name"]: d["index"] for d in inputs}
        self.fixed_axes = _axes_between(inputs[0])  # of [batch, *fixed axes, length]
        length_axis = len(self.fixed_axes) + 1
        details = self.interpreter.get_output_details()
        self.outputs = {outputs.get(d["name"], d["name"]): d["index"] for d in details}
        # Outputs with a position axis (a tagger's or a reader's logits: [batch, length, ...]).
        self.per_token = {outputs.get(d["name"], d["name"]) for d in details
                          if len(d["shape_signature"]) > length_axis
                          and d["shape_signature"][length_axis] == -1}
        self.shape = None
        self.resizes = 0
        self.calls = 0

    def resize(self, shape: tuple) -> None:
        """Resize the inputs to `shape` and re-plan, unless they have it already (25-35
        microseconds on MiniLM; the weights stay packed)."""
        if shape != self.shape:
            for index in self.inputs.values():
                self.interpreter.resize_tensor_input(index, shape)
            self.interpreter.allocate_tensors()
            self.shape = shape
            self.resizes += 1

    def __call__(self, feeds: dict) -> dict:
        interpreter = self.interpreter
        self.resize(feeds["input_word_ids"].shape)
        for name, index in self.inputs.items():
            interpreter.set_tensor(index, feeds[name])
        interpreter.invoke()
        self.calls += 1
        return {name: interpreter.get_tensor(index) for name, index in self.outputs.items()}


class LiteRTModel:
    """`model(input_word_ids, input_mask, input_type_ids)` (int32 `[batch, length]`, or
    `[batch, *fixed_axes, length]`; any batch, length up to `max_length`) -> the export's
    `serve_token_ids` outputs as NumPy arrays."""

    def __init__(self, flat: bytes, outputs: dict, max_length: int, threads: int | None = None,
                 group_rows: int = GROUP_ROWS):
        self.flat = flat
        self.max_length = max_length
        self.threads = threads or default_threads()
        self.group_rows = group_rows
        self.interpreter = _Interpreter(flat, outputs, self.threads)
        # A one-row call that finds the process idle runs here: XNNPACK's helper threads sleep
        # when idle and waking them cost more than they give (bench/serving.py's MRPC model,
        # single sentences 10 ms apart: 1.96 ms p50 on one thread against 3.27 ms on two; back
        # to back, 1.25 against 1.03).
        self.single_thread = _Interpreter(flat, outputs, 1) if self.threads > 1 else None
        self.cost = GroupCost()  # timed on this model at warm_up
        self.last_call = 0.0
        self.fixed_axes = self.interpreter.fixed_axes
        self.per_token = self.interpreter.per_token

    @classmethod
    def load(cls, export_dir: str, quantization: str | None = None,
             task: tuple | None = None, **kwargs) -> tuple:
        """`(model, description)` from `export_dir/litert/`: `quantization` "int8" or "float32",
        or None for int8 where the export has it, else float32. `task`: (the task its
        description must name, what to call it in the refusal)."""
        require_export(export_dir)
        folder = os.path.join(export_dir, FOLDER)
        choices = [quantization] if quantization else ["int8", "float32"]
        path = next((os.path.join(folder, model_file(q)) for q in choices
                     if os.path.isfile(os.path.join(folder, model_file(q)))), None)
        if path is None:
            raise LiteRTError(f"{export_dir}: no {FOLDER}/{model_file(choices[0])}; make it "
                              f"with `python export_litert.py --saved_model={export_dir}`")
        with open(os.path.join(folder, DESCRIPTION), encoding="utf-8") as f:
            description = json.load(f)
        if task and description.get("task") != task[0]:
            raise LiteRTError(f"{export_dir}: a {description.get('task')} export, not {task[1]}")
        with open(path, "rb") as f:
            flat = f.read()
        try:
            model = cls(flat, description["outputs"], description["max_seq_length"], **kwargs)
        except (ValueError, RuntimeError) as e:  # a cut or corrupt file: the flatbuffer check
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
            quantization = os.path.basename(path).split(".")[0]
            raise LiteRTError(f"{path}: not a readable LiteRT file ({first}); make it again with "
                              f"`python export_litert.py --saved_model={export_dir} "
                              f"--quantization={quantization}`") from None
        return model, description

    def warm_up(self, batches=(1,)) -> None:
        """Run, now rather than on first use, the largest shape a call can take (`max(batches)`
        rows of `max_length`, or `group_rows` rows where a call is cut into groups), so that
        XNNPACK packs the weights and the arena reaches its largest size; then one row of every
        length (on the single-thread interpreter too), and the other batch sizes every 8
        tokens. Without that sweep the first few hundred requests of new lengths ran slower
        (single MRPC sentences: p50 1.16 against 0.80 ms, p99 4.7 against 1.1 ms over the first
        200). Then time the groups' cost (`GroupCost.timed`, about 0.1 s on MiniLM at 128
        tokens) and take what is loaded out of the garbage collector's generations (`gc.freeze`):
        the collector's full passes over a loaded model were the batch-1 tail."""
        largest = min(max(batches), self.group_rows)
        rows_of_one = [(1, length) for length in range(1, self.max_length + 1)]
        shapes = [(largest, self.max_length), *rows_of_one]
        shapes += [(rows, length) for rows in sorted(set(batches) - {1})
                   if rows <= self.group_rows for length in range(8, self.max_length + 1, 8)]
        plans = [(self.interpreter, shapes)]
        if self.single_thread is not None:  # it runs one row only
            plans.append((self.single_thread, rows_of_one))
        for runner, planned in plans:
            for rows, length in planned:
                runner(self._zeros(rows, length))
        self.cost = GroupCost.timed(lambda rows, length: self.interpreter(
            self._zeros(rows, length)), largest, self.max_length)
        gc.collect()
        gc.freeze()

    def _zeros(self, rows: int, length: int) -> dict:
        """Inputs of `rows` rows of `length` tokens (what warm-up and timing run)."""
        return {name: np.zeros((rows, *self.fixed_axes, length), np.int32)
                for name in INPUT_NAMES}

    def __call__(self, input_word_ids, input_mask, input_type_ids) -> dict:
        feeds = {"input_word_ids": input_word_ids, "input_mask": input_mask,
                 "input_type_ids": input_type_ids}
        shape = np.shape(input_word_ids)
        rows, length = shape[0], shape[-1]
        if tuple(shape[1:-1]) != self.fixed_axes:
            raise LiteRTError(f"inputs shaped {list(shape)}; the model takes [batch, "
                              f"{''.join(f'{n}, ' for n in self.fixed_axes)}length]")
        if length > self.max_length:
            raise LiteRTError(f"{length} tokens in a row; the model takes at most "
                              f"{self.max_length}")
        if rows == 0:  # no shape has a zero axis: run one empty row and keep none
            out = self._run({k: np.zeros((1, *shape[1:]), np.int32) for k in feeds})
            return {name: value[:0] for name, value in out.items()}
        if rows == 1:
            return self._run(feeds)
        lengths = np.asarray(input_mask).reshape(rows, -1, length).sum(axis=2).max(axis=1)
        order = np.argsort(lengths, kind="stable")
        ends = cut_points(lengths[order].tolist(), self.cost, self.group_rows * self.max_length)
        if len(ends) == 1 and int(lengths.max()) == length:  # one group, as it came
            return self._run(feeds)
        pieces = []
        for start, end in zip([0, *ends[:-1]], ends):
            rows_of_group = order[start:end]
            longest = max(int(lengths[rows_of_group].max()), 1)
            piece = self._run({k: np.asarray(v)[rows_of_group, ..., :longest]
                               for k, v in feeds.items()})
            for name in self.per_token:  # back to the request's width (zeros where padded)
                width = [(0, 0)] * piece[name].ndim
                width[1 + len(self.fixed_axes)] = (0, length - longest)
                piece[name] = np.pad(piece[name], width)
            pieces.append(piece)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(rows)
        return {name: np.concatenate([p[name] for p in pieces])[inverse] for name in pieces[0]}

    def _run(self, feeds: dict) -> dict:
        runner = self.interpreter
        if (self.single_thread is not None and len(feeds["input_word_ids"]) == 1
                and time.perf_counter() - self.last_call > IDLE_SECONDS):
            runner = self.single_thread
        try:
            return runner({name: np.ascontiguousarray(value, np.int32)
                           for name, value in feeds.items()})
        finally:
            self.last_call = time.perf_counter()
