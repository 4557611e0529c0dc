"""Batch jobs on Apache Beam: a shard processor run over text files of any size, on any runner.

`shard_pipeline` reads the input files as shards of lines (`inference.line_shards`: numbered across
the files, a first pass counts each file's lines), spreads the shards over the workers
(`Reshuffle`), and runs on each one a processor that `ShardFn` builds once per worker (loading a
model is slow): `processor(shard)` yields the shard's output lines. The local tools run the same
processor on the same shards, so the outputs are equal line for line; only the order of lines in
the output files differs. The runner is Beam's choice: `--runner=DirectRunner` (the default; add
`--direct_num_workers=2 --direct_running_mode=multi_processing` to use the cores), `DataflowRunner`,
`FlinkRunner`, `SparkRunner`, with their options after `--` on the command line, as for the
pretraining-data pipeline (`process.errors.parse_known_flags`).
"""
from __future__ import annotations

from typing import Callable

import apache_beam as beam


class ShardFn(beam.DoFn):
    """Shards -> output lines, with a processor made by `factory()` once per worker."""

    def __init__(self, factory: Callable):
        self._factory = factory
        self._processor = None

    def setup(self):
        self._processor = self._factory()

    def process(self, shard):
        yield from self._processor(shard)


def _file_shards(item: tuple, lines_per_shard: int):
    from bert_tf2.inference.line_shards import file_shards

    path, first_index = item
    yield from file_shards(path, first_index, lines_per_shard)


def shard_pipeline(root: beam.Pipeline, files: list, lines_per_shard: int, factory: Callable):
    """The output lines of every shard of `files` (a PCollection of str, in no order)."""
    from bert_tf2.inference.line_shards import file_offsets

    return (root
            | "Files" >> beam.Create(file_offsets(files))
            | "Shards" >> beam.FlatMap(_file_shards, lines_per_shard)
            | "Spread" >> beam.Reshuffle()
            | "Process" >> beam.ParDo(ShardFn(factory)))


def write_lines(lines, output_prefix: str, num_shards: int = 0):
    """Text shards `PREFIX-00000-of-0000N`, one element per line."""
    return lines | "Write" >> beam.io.WriteToText(output_prefix, num_shards=num_shards)
