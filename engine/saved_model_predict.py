"""Prediction with any exported task SavedModel over text files, locally or on Apache Beam.

Every task's `--export_dir` SavedModel has a raw-string signature (`serving_default`: the
classifier's `text_a`/`text_b`, SQuAD's `question`/`context`, NER's `text`, multiple choice's
`context`/`question`/`choices`, the embedder's `text_a`). `SavedModelPredictor` feeds it lines of
a file, in batches of `batch_size` consecutive lines of a shard (`engine.line_shards`):
- JSON lines whose keys are the signature's inputs (`{"text_a": "...", "text_b": "..."}`; a list
  of strings for `choices`, padded with "" to the batch's longest), or
- TSV (`columns`: the input each column feeds, in order, "" for a column to skip; `header`: each
  file's first line is skipped),
and writes one JSON object per line: `{"index": n, OUTPUT: value, ...}`, with every output of the
signature for that line (strings decoded, numbers as JSON numbers). The lines of a shard are
batched in order of their length, so a batch holds texts of similar length and little padding,
and written back in input order. `predict_file` is the local run (one output file, written
atomically); `engine.beam_jobs` runs the same predictor per shard on Beam, so the lines are equal
and only their order differs.
"""
from __future__ import annotations

import json
import logging
import os

import numpy as np

from bert_tf2.data_gen.errors import DataError, decode_line
from bert_tf2.process.errors import SettingsError

logger = logging.getLogger(__name__)


class SavedModelPredictor:
    """Shards of lines -> output JSON lines; the SavedModel is loaded on first use (once per
    Beam worker)."""

    def __init__(self, export_dir: str, signature: str = "serving_default", batch_size: int = 32,
                 columns: list | None = None, header: bool = False):
        self.export_dir, self.signature_name = export_dir, signature
        self.batch_size, self.columns, self.header = batch_size, columns, header
        self.signature = None

    def unloaded(self) -> "SavedModelPredictor":
        """A copy without the loaded model (picklable: what a Beam worker starts from)."""
        return SavedModelPredictor(self.export_dir, self.signature_name, self.batch_size,
                                   self.columns, self.header)

    def load(self):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (the ops of the in-graph tokenizer)

        if "://" not in self.export_dir and not os.path.isfile(
                os.path.join(self.export_dir, "saved_model.pb")):
            raise SettingsError(f"--saved_model={self.export_dir}: no saved_model.pb there (a "
                                f"runner's --export_dir folder)")
        try:
            model = tf.saved_model.load(self.export_dir)
        except Exception as e:  # noqa: BLE001 - TensorFlow, protobuf and OS errors alike
            first = (getattr(e, "message", None) or str(e) or type(e).__name__).strip()
            raise DataError(f"{self.export_dir}: not a readable SavedModel "
                            f"({first.splitlines()[0][:200]}); export it again with the runner's "
                            f"--export_dir") from None
        if self.signature_name not in model.signatures:
            raise SettingsError(f"--signature={self.signature_name}: {self.export_dir} has "
                                f"{', '.join(sorted(model.signatures))}")
        self.model = model  # keeps the variables alive
        self.signature = model.signatures[self.signature_name]
        specs = self.signature.structured_input_signature[1]
        self.inputs = sorted(specs)
        # A [batch] input takes one text per line; a [batch, n] input (choices) a list of them.
        self.takes_list = {name: specs[name].shape.rank == 2 for name in self.inputs}
        self.check_columns()
        return self

    def check_columns(self) -> None:
        if self.columns and sorted(c for c in self.columns if c) != self.inputs:
            raise SettingsError(f"--columns={','.join(self.columns)}: the signature takes "
                                f"{', '.join(self.inputs)}")

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
            if self.takes_list[name]:
                if not (isinstance(text, list) and all(isinstance(t, str) for t in text)):
                    raise DataError(f"{path}:{line + 1}: {name!r} must be a list of texts (JSON "
                                    f"strings), not {json.dumps(text)[:60]}")
            elif not isinstance(text, str):
                raise DataError(f"{path}:{line + 1}: {name!r} must be text (a JSON string), not "
                                f"{json.dumps(text)[:60]}")
        return {name: value[name] for name in self.inputs}

    def __call__(self, shard):
        if self.signature is None:
            self.load()
        rows = [(shard.first_index + i, self.parse(shard, i)) for i in range(len(shard.lines))]
        rows = [(index, row) for index, row in rows if row is not None]
        by_length = sorted(rows, key=lambda item: _text_length(item[1]))
        lines = {}
        for start in range(0, len(by_length), self.batch_size):
            batch = by_length[start:start + self.batch_size]
            outputs = self.predict([row for _, row in batch])
            for j, (index, _) in enumerate(batch):
                lines[index] = json.dumps({"index": index, **{
                    name: _jsonable(value[j]) for name, value in sorted(outputs.items())}})
        for index, _ in rows:
            yield lines[index]

    def predict(self, rows: list) -> dict:
        import tensorflow as tf

        feed = {}
        for name in self.inputs:
            values = [row[name] for row in rows]
            if values and isinstance(values[0], list):
                width = max(len(v) for v in values)
                values = [list(v) + [""] * (width - len(v)) for v in values]
            feed[name] = tf.constant(values, tf.string)
        return {name: value.numpy() for name, value in self.signature(**feed).items()}


class LiteRTPredictor(SavedModelPredictor):
    """`batch_predict.py --litert`: the lines of a file through an export's LiteRT fast path,
    with `serve_text`'s inputs and outputs, batched by length as the SavedModel predictor
    batches them. `load_runtime(export_dir, quantization)` (module-level, so the predictor
    pickles for Beam) gives the task's runtime: `input_names`, and a call on their lists."""

    def __init__(self, load_runtime, export_dir: str, quantization: str, batch_size: int = 32,
                 columns: list | None = None, header: bool = False):
        super().__init__(export_dir, "serve_text", batch_size, columns, header)
        self.load_runtime, self.quantization = load_runtime, quantization

    def unloaded(self) -> "LiteRTPredictor":
        return LiteRTPredictor(self.load_runtime, self.export_dir, self.quantization,
                               self.batch_size, self.columns, self.header)

    def load(self):
        self.signature = self.load_runtime(self.export_dir, self.quantization)
        self.inputs = sorted(self.signature.input_names)
        self.takes_list = {name: name in getattr(self.signature, "list_inputs", ())
                           for name in self.inputs}
        self.check_columns()
        return self

    def predict(self, rows: list) -> dict:
        return self.signature(*[[row[name] for row in rows]
                                for name in self.signature.input_names])


def _text_length(row: dict) -> int:
    """Characters of a line's texts: what its tokens' count grows with, without tokenising."""
    return sum(sum(map(len, v)) if isinstance(v, list) else len(v) for v in row.values())


def _jsonable(value):
    """A signature's output for one line as JSON values: numbers as they are, strings decoded."""
    value = np.asarray(value)
    if value.dtype.kind in "SO":
        value = np.vectorize(lambda b: b.decode("utf-8") if isinstance(b, bytes) else b,
                             otypes=[object])(value)
    return value.tolist()


def predict_file(predictor: SavedModelPredictor, input_file: str, output_file: str,
                 lines_per_shard: int = 1000) -> int:
    """The local run: every line of `input_file`, in order, into `output_file` (atomically)."""
    from bert_tf2.engine.line_shards import count_lines, file_shards
    from bert_tf2.engine.streaming import Progress
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
