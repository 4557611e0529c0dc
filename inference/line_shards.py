"""Text files as shards of consecutive lines: the unit of work of every batch job.

A shard is `lines_per_shard` consecutive lines of one file (the last one of a file may be shorter),
with the global index of its first line: files are taken in the order given and numbered as if
they were one file. A shard's output depends only on its lines, so the local tools (which write
one shard after another and resume after the last whole one) and the Beam pipelines (which spread
shards over workers) compute every shard the same way, and their outputs are equal line for line.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator


@dataclasses.dataclass
class Shard:
    path: str
    first_line: int  # 0-based line number of lines[0] within `path`
    first_index: int  # its global index over all the files
    lines: list  # raw lines (bytes, without the newline)


def _open(path: str):
    """Local files directly; `gs://` and other schemes through TensorFlow's file systems."""
    from bert_tf2.process.atomic_files import is_remote

    if not is_remote(path):
        return open(path, "rb")
    import tensorflow as tf

    return tf.io.gfile.GFile(path, "rb")


def count_lines(path: str) -> int:
    """Lines in `path`, a last line without a newline included, counted without decoding."""
    count, last = 0, b"\n"
    with _open(path) as f:
        while True:
            chunk = f.read(1 << 22)
            if not chunk:
                break
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def file_offsets(paths: list) -> list:
    """(path, global index of its first line) for each file, in order."""
    offsets, start = [], 0
    for path in paths:
        offsets.append((path, start))
        start += count_lines(path)
    return offsets


def file_shards(path: str, first_index: int, lines_per_shard: int,
                skip_shards: int = 0) -> Iterator[Shard]:
    """The shards of one file, from shard `skip_shards` on (earlier ones are read, not kept)."""
    lines, first_line, number = [], 0, 0
    with _open(path) as f:
        for line_number, raw in enumerate(f):
            if not lines:
                first_line = line_number
            lines.append(raw[:-1] if raw.endswith(b"\n") else raw)
            if len(lines) == lines_per_shard:
                if number >= skip_shards:
                    yield Shard(path, first_line, first_index + first_line, lines)
                lines, number = [], number + 1
    if lines and number >= skip_shards:
        yield Shard(path, first_line, first_index + first_line, lines)
