"""Prediction with any export over text files, locally or on Apache Beam.

`LinePredictor` feeds a runtime (`inference.runtime`: the export's SavedModel text signature, or
its LiteRT fast path) lines of a file, in batches of `batch_size` consecutive lines of a shard
(`inference.line_shards`):
- JSON lines whose keys are the runtime's inputs (`{"text_a": "...", "text_b": "..."}`; a list
  of strings for `choices`, padded with "" to the batch's longest), or
- TSV (`columns`: the input each column feeds, in order, "" for a column to skip; `header`: each
  file's first line is skipped),
and writes one JSON object per line: `{"index": n, OUTPUT: value, ...}`, with every output of the
runtime for that line (strings decoded, numbers as JSON numbers). The lines of a shard are
batched in order of their length, so a batch holds texts of similar length and little padding,
and written back in input order. `predict_file` is the local run (one output file, written
atomically); `inference.beam_jobs` runs the same predictor per shard on Beam, so the lines are
equal and only their order differs.
"""
from __future__ import annotations

import json
import logging
from typing import Callable

from bert_tf2.data_gen.errors import DataError, decode_line
from bert_tf2.inference.runtime import jsonable, list_inputs, predict_rows
from bert_tf2.process.errors import SettingsError

logger = logging.getLogger(__name__)


class LinePredictor:
    """Shards of lines -> output JSON lines, through a runtime that `load_runtime()` gives (once
    per Beam worker: a module-level function or a `functools.partial` of one, so that the
    predictor pickles)."""

    def __init__(self, load_runtime: Callable, batch_size: int = 32, columns: list | None = None,
                 header: bool = False):
        self.load_runtime = load_runtime
        self.batch_size, self.columns, self.header = batch_size, columns, header
        self.runtime = None

    def unloaded(self) -> LinePredictor:
        """A copy without the loaded runtime (picklable: what a Beam worker starts from)."""
        return LinePredictor(self.load_runtime, self.batch_size, self.columns, self.header)

    def load(self) -> LinePredictor:
        self.runtime = self.load_runtime()
        self.inputs = sorted(self.runtime.input_names)
        self.takes_list = list_inputs(self.runtime)
        if self.columns and sorted(c for c in self.columns if c) != self.inputs:
            raise SettingsError(f"--columns={','.join(self.columns)}: the signature takes "
                                f"{', '.join(self.inputs)}")
        return self

    def parse(self, shard, i: int) -> dict | None:
        path, line = shard.path, shard.first_line + i
        if self.header and line == 0:
            return None
        text = decode_line(path, line + 1, shard.lines[i]).rstrip("\r")
        if self.columns:
            fields = text.split("\t")
            if len(fields) != len(self.columns):
                raise DataError(f"{path}:{line + 1}: {len(fields)} fields, --columns names "
                                f"{len(self.columns)}")
            return {name: field for name, field in zip(self.columns, fields) if name}
        try:
            value = json.loads(text)
        except ValueError as e:
            raise DataError(f"{path}:{line + 1}: not a JSON object ({e})") from None
        missing = [name for name in self.inputs if not isinstance(value, dict) or name not in value]
        if missing:
            raise DataError(f"{path}:{line + 1}: no {', '.join(missing)} (the signature takes "
                            f"{', '.join(self.inputs)})")
        for name in self.inputs:
            text = value[name]
            if name in self.takes_list:
                if not (isinstance(text, list) and all(isinstance(t, str) for t in text)):
                    raise DataError(f"{path}:{line + 1}: {name!r} must be a list of texts (JSON "
                                    f"strings), not {json.dumps(text)[:60]}")
            elif not isinstance(text, str):
                raise DataError(f"{path}:{line + 1}: {name!r} must be text (a JSON string), not "
                                f"{json.dumps(text)[:60]}")
        return {name: value[name] for name in self.inputs}

    def __call__(self, shard):
        if self.runtime is None:
            self.load()
        rows = [(shard.first_index + i, self.parse(shard, i)) for i in range(len(shard.lines))]
        rows = [(index, row) for index, row in rows if row is not None]
        by_length = sorted(rows, key=lambda item: _text_length(item[1]))
        lines = {}
        for start in range(0, len(by_length), self.batch_size):
            batch = by_length[start:start + self.batch_size]
            outputs = predict_rows(self.runtime, [row for _, row in batch])
            for j, (index, _) in enumerate(batch):
                lines[index] = json.dumps({"index": index, **{
                    name: jsonable(value[j]) for name, value in sorted(outputs.items())}})
        for index, _ in rows:
            yield lines[index]


def _text_length(row: dict) -> int:
    """Characters of a line's texts: what its tokens' count grows with, without tokenising."""
    return sum(sum(map(len, v)) if isinstance(v, list) else len(v) for v in row.values())


def predict_file(predictor: LinePredictor, input_file: str, output_file: str,
                 lines_per_shard: int = 1000) -> int:
    """The local run: every line of `input_file`, in order, into `output_file` (atomically)."""
    from bert_tf2.inference.line_shards import count_lines, file_shards
    from bert_tf2.inference.streaming import Progress
    from bert_tf2.process import output_lock
    from bert_tf2.process.atomic_files import atomic_path, remove_partial_files

    output_lock.check_file_output(output_file, "--output_file")
    predictor.load()
    progress = Progress(count_lines(input_file))
    written = 0
    with output_lock.holding({output_file: "--output_file"}):
        for path in remove_partial_files(output_file):
            logger.info("removed %s, a partial file left by an interrupted run", path)
        with atomic_path(output_file) as tmp, open(tmp, "w", encoding="utf-8") as out:
            for shard in file_shards(input_file, 0, lines_per_shard):
                for line in predictor(shard):
                    out.write(line + "\n")
                    written += 1
                progress.update(len(shard.lines))
    progress.log()
    logger.info("wrote %d predictions to %s", written, output_file)
    return written
