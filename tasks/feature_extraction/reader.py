r"""The input of extract_features: one example per line, a pair written `A ||| B`, read as a stream.

As the original's `read_examples`: each line (split at "\n") is stripped of surrounding
whitespace; a line matching `^(.*) \|\|\| (.*)$` is a pair, any other line is text A alone. An
empty line is an example too, with no text (its features are `[CLS] [SEP]`): the original stops
only at the end of the file. Lines are numbered from 0 (`linex_index`). Unlike the original, the
file is read in shards of lines (`inference.line_shards`), never whole, and a line that is not UTF-8
is an error naming it.
"""
from __future__ import annotations

import dataclasses
import re

from bert_tf2.data_gen.errors import decode_line

PAIR = re.compile(r"^(.*) \|\|\| (.*)$")


@dataclasses.dataclass(frozen=True)
class Line:
    index: int  # 0-based line number: the original's `unique_id` / `linex_index`
    text_a: str
    text_b: str | None


def parse(index: int, text: str) -> Line:
    """One line as the original reads it."""
    text = text.strip()
    match = PAIR.match(text)
    if match is None:
        return Line(index, text, None)
    return Line(index, match.group(1), match.group(2))


def shard_lines(shard) -> list:
    """The `Line`s of an `inference.line_shards.Shard`, numbered by their global index."""
    return [parse(shard.first_index + i, decode_line(shard.path, shard.first_line + i + 1, raw))
            for i, raw in enumerate(shard.lines)]
