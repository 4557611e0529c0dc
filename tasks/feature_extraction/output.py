"""extract_features' output: the original's JSON lines, or pooled vectors, written resumably.

`json_line` formats one example exactly as the original: `{"linex_index": n, "features": [{"token":
t, "layers": [{"index": i, "values": [...]}]}]}`, each value `round(float(x), 6)`, keys in that
order, `json.dumps` defaults (non-ASCII tokens escaped). `embedding_line` is one pooled vector:
`{"linex_index": n, "embedding": [...]}` (values to 8 decimals).

`ShardedOutput` writes the lines in shards of `lines_per_shard` under a hidden folder beside the
output (`.NAME.parts/`), each shard renamed into place when complete, then joins them into the
output file under a temporary name and renames it: a killed run leaves whole shards, and the next
run with the same settings resumes after the last one; the output file appears only when complete.
A `.npy` output holds the vectors as one float32 array, [lines, hidden].
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil

import numpy as np

from bert_tf2.process import fault_points, interrupts
from bert_tf2.process.atomic_files import atomic_path, remove_partial_files

logger = logging.getLogger(__name__)


def json_line(index: int, tokens: list, layers: list, outputs: dict) -> str:
    """The original's JSON line; `outputs["layer_output_J"]` is [length, hidden] for layers[J]."""
    features = []
    for i, token in enumerate(tokens):
        features.append({"token": token, "layers": [
            {"index": layer, "values": [round(x, 6) for x in outputs[f"layer_output_{j}"][i]
                                        .tolist()]}
            for j, layer in enumerate(layers)]})
    return json.dumps({"linex_index": index, "features": features})


def embedding_line(index: int, vector: np.ndarray) -> str:
    return json.dumps({"linex_index": index,
                       "embedding": [round(x, 8) for x in vector.tolist()]})


@contextlib.contextmanager
def naming(path: str):
    """An OSError without a file name (a write that found the disk full) names `path`."""
    try:
        yield
    except OSError as error:
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror, path) from None


class ShardedOutput:
    """Lines (JSON text) or vectors (`.npy`) written in resumable shards (see the module
    docstring). `done` is the number of lines already written by an earlier run."""

    def __init__(self, output_file: str, lines_per_shard: int, fingerprint: dict):
        self.output_file = output_file
        self.npy = output_file.endswith(".npy")
        self.lines_per_shard = lines_per_shard
        folder, name = os.path.split(os.path.abspath(output_file))
        self.parts = os.path.join(folder, f".{name}.parts")
        self.vectors, self.handle, self.in_shard = [], None, 0
        for path in remove_partial_files(output_file):
            logger.info("removed %s, a partial file left by an interrupted run", path)
        self.created = not os.path.isdir(self.parts)
        settings = os.path.join(self.parts, "settings.json")
        previous = None
        if os.path.isfile(settings):
            with open(settings, encoding="utf-8") as f:
                previous = json.load(f)
        if previous != fingerprint:
            if os.path.isdir(self.parts):
                logger.info("%s holds shards of a run with other settings: starting afresh",
                            self.parts)
                shutil.rmtree(self.parts)
            os.makedirs(self.parts)
            with atomic_path(settings) as tmp, open(tmp, "w", encoding="utf-8") as f:
                json.dump(fingerprint, f, indent=1, sort_keys=True)
        for name in os.listdir(self.parts):
            if name.endswith(".tmp"):
                os.remove(os.path.join(self.parts, name))
                logger.info("removed %s, a partial shard left by an interrupted run",
                            os.path.join(self.parts, name))
        self.shards = len(self._shard_files())
        self.done = self.shards * lines_per_shard
        self.total = self.done
        if self.shards:
            logger.info("resuming: %d lines already written in %d shards of %s", self.done,
                        self.shards, self.parts)
            self._resume_point()

    def _resume_point(self) -> None:
        interrupts.rerun(f"resumes after line {self.shards * self.lines_per_shard:,} "
                         f"({self.shards} complete part(s) kept in {self.parts})")

    def _shard_files(self) -> list:
        suffix = ".npy" if self.npy else ".jsonl"
        return sorted(n for n in os.listdir(self.parts)
                      if n.startswith("part-") and n.endswith(suffix))

    def _shard_path(self) -> str:
        return os.path.join(self.parts, f"part-{self.shards:06d}" +
                            (".npy" if self.npy else ".jsonl"))

    def write(self, item) -> None:
        """One line of text, or one vector for `.npy`."""
        if self.npy:
            self.vectors.append(np.asarray(item, np.float32))
        else:
            if self.handle is None:
                self.handle = open(self._shard_path() + ".tmp", "w", encoding="utf-8")
            with naming(self.output_file):
                self.handle.write(item + "\n")
        self.in_shard += 1
        if self.in_shard == 1:
            interrupts.at(f"while writing part {self.shards + 1} (lines {self.total + 1:,} "
                          f"to {self.total + self.lines_per_shard:,})")
            fault_points.reached("parts")
        self.total += 1
        if self.in_shard == self.lines_per_shard:
            self._close_shard()

    def _close_shard(self) -> None:
        with naming(self.output_file):
            self._write_shard()

    def _write_shard(self) -> None:
        if self.in_shard == 0:
            return
        path = self._shard_path()
        if self.npy:
            with open(path + ".tmp", "wb") as f:
                np.save(f, np.stack(self.vectors))
            self.vectors = []
        else:
            self.handle.close()
            self.handle = None
        os.replace(path + ".tmp", path)
        self.shards += 1
        self.in_shard = 0
        self._resume_point()

    def discard_partial(self) -> None:
        """Remove the shard being written (the run was interrupted); complete ones are kept."""
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        self.vectors = []
        partial = self._shard_path() + ".tmp"
        if os.path.exists(partial):
            os.remove(partial)

    def discard_new(self) -> None:
        """Remove the shards folder if this run made it (a run refused on bad input)."""
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        if self.created:
            shutil.rmtree(self.parts, ignore_errors=True)

    def finish(self, width: int | None = None) -> int:
        """Join the shards into the output file (atomically) and remove them; returns the number
        of lines. `width`: the vector size, for an empty `.npy` output."""
        self._close_shard()
        shards = [os.path.join(self.parts, n) for n in self._shard_files()]
        with naming(self.output_file), atomic_path(self.output_file) as tmp:
            if self.npy:  # the header, then each shard's rows: one shard in memory at a time
                shapes = [np.load(p, mmap_mode="r").shape for p in shards]
                rows = sum(shape[0] for shape in shapes)
                header = {"descr": np.lib.format.dtype_to_descr(np.dtype("<f4")),
                          "fortran_order": False,
                          "shape": (rows, shapes[0][1] if shapes else (width or 0))}
                with open(tmp, "wb") as f:
                    np.lib.format.write_array_header_1_0(f, header)
                    for p in shards:
                        f.write(np.ascontiguousarray(np.load(p), "<f4").tobytes())
            else:
                rows = self.total
                with open(tmp, "wb") as f:
                    for p in shards:
                        with open(p, "rb") as part:
                            shutil.copyfileobj(part, f, 1 << 22)
        shutil.rmtree(self.parts)
        return rows
