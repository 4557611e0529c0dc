"""The input of extract_features: one example per line, a pair written `A ||| B`, read as a stream.

As the original's `read_examples`: each line (split at "\n") is stripped of surrounding
whitespace; a line matching `^(.*) \|\|\| (.*)$` is a pair, any other line is text A alone. An
empty line is an example too, with no text (its features are `[CLS] [SEP]`): the original stops
only at the end of the file. Lines are numbered from 0 (`linex_index`). Unlike the original, the
file is read line by line, never whole, and a line that is not UTF-8 is an error naming it.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Iterator

from data_gen.errors import DataError

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


def read_lines(path: str, start: int = 0) -> Iterator[Line]:
    """The examples of `path` from line `start` on, streamed."""
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        for index, raw in enumerate(f):
            if index < start:
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{index + 1}: not UTF-8 text (byte 0x{raw[e.start]:02x} "
                                f"at column {e.start + 1}); save the file as UTF-8") from None
            yield parse(index, text)


def count_lines(path: str) -> int:
    """The number of examples in `path` (for the progress line), counted without decoding."""
    import tensorflow as tf

    count, last = 0, b"\n"
    with tf.io.gfile.GFile(path, "rb") as f:
        while True:
            chunk = f.read(1 << 22)
            if not chunk:
                break
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")
