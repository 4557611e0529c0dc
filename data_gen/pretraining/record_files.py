"""What `run_pretraining` checks of its `--input_file` before building anything, and after a bad read.

The most common pretraining mistake is records made with another `--max_seq_length` or
`--max_predictions_per_seq` than the run is given; TensorFlow then fails deep in the input
pipeline with a traceback about feature shapes. So the first record of every input file is read
up front (`check_first_records`): a file that is empty, that is not TFRecord framing (a text file,
random bytes), whose first record is not a pretraining `tf.train.Example`, or whose feature
lengths differ from the flags, is a `DataError` naming the file and what to do. A file damaged
further on (a truncated copy) shows only when training reaches it; `find_damaged_frame` then walks
the files' framing to name the file and the byte where it breaks.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from data_gen import tfrecord_frames
from data_gen.errors import DataError
from data_gen.pretraining import schema

_REMAKE = "make it again with create_pretraining_data"


def _header(data: bytes) -> int | None:
    """The record length a 12-byte frame header gives, or None when its CRC does not match."""
    length = struct.unpack("<Q", data[:8])[0]
    buffer = np.frombuffer(data[:8], dtype=np.uint8)
    crc = tfrecord_frames.masked_crc32c(buffer, 0, 8, tfrecord_frames.table())
    return length if crc == struct.unpack("<I", data[8:12])[0] else None


def _body_ok(body: bytes, footer: bytes) -> bool:
    buffer = np.frombuffer(body, dtype=np.uint8)
    crc = tfrecord_frames.masked_crc32c(buffer, 0, len(body), tfrecord_frames.table())
    return crc == struct.unpack("<I", footer)[0]


def first_record(path: str) -> bytes:
    """The first record of a local TFRecord file, its framing and CRCs checked."""
    with open(path, "rb") as f:
        head = f.read(tfrecord_frames.HEADER_BYTES)
        if not head:
            raise DataError(f"{path}: empty file, no records; {_REMAKE}")
        length = _header(head) if len(head) == tfrecord_frames.HEADER_BYTES else None
        if length is None:
            raise DataError(f"{path}: not a TFRecord file (its first bytes are no record header); "
                            f"--input_file takes the record files of create_pretraining_data")
        body = f.read(length)
        footer = f.read(tfrecord_frames.FOOTER_BYTES)
    if len(body) < length or len(footer) < tfrecord_frames.FOOTER_BYTES:
        raise DataError(f"{path}: truncated in its first record (a record of {length} bytes, "
                        f"{os.path.getsize(path)} bytes in the file); {_REMAKE}")
    if not _body_ok(body, footer):
        raise DataError(f"{path}: damaged: the first record's checksum does not match; {_REMAKE}")
    return body


def record_lengths(path: str, record: bytes) -> dict:
    """Feature name -> number of values in one serialized `tf.train.Example`."""
    import tensorflow as tf
    from google.protobuf.message import DecodeError

    try:
        example = tf.train.Example.FromString(record)
    except DecodeError:
        raise DataError(f"{path}: its records are not tf.train.Example messages; "
                        f"--input_file takes the record files of create_pretraining_data") \
            from None
    lengths = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        lengths[name] = len(getattr(feature, kind).value) if kind else 0
    return lengths


def check_first_records(files: list, max_seq_length: int, max_predictions_per_seq: int) -> None:
    """Each local file's first record against the flags (see the module docstring)."""
    expected = schema.feature_lengths(max_seq_length, max_predictions_per_seq)
    for path in files:
        if "://" in path:
            continue  # remote files are read by TensorFlow only
        lengths = record_lengths(path, first_record(path))
        missing = [name for name in expected if name not in lengths]
        if missing:
            raise DataError(f"{path}: its records lack {', '.join(missing)}: not pretraining "
                            f"records; --input_file takes the files of create_pretraining_data")
        sequence, predictions = lengths["input_ids"], lengths["masked_lm_positions"]
        if (sequence, predictions) != (max_seq_length, max_predictions_per_seq):
            raise DataError(
                f"{path}: its records were made with --max_seq_length={sequence} "
                f"--max_predictions_per_seq={predictions}, but this run has "
                f"--max_seq_length={max_seq_length} --max_predictions_per_seq="
                f"{max_predictions_per_seq}: pass the values the records were made with")
        wrong = [name for name in expected if lengths[name] != expected[name]]
        if wrong:
            raise DataError(f"{path}: the records' {', '.join(wrong)} have "
                            f"{', '.join(str(lengths[n]) for n in wrong)} values, not "
                            f"{', '.join(str(expected[n]) for n in wrong)}; {_REMAKE}")


def find_damaged_frame(files: list) -> str | None:
    """The first place where a file's framing breaks, as 'PATH: ... at byte N (record K)'."""
    for path in files:
        if "://" in path:
            continue
        size, offset, number = os.path.getsize(path), 0, 0
        with open(path, "rb") as f:
            while offset < size:
                number += 1
                head = f.read(tfrecord_frames.HEADER_BYTES)
                length = (_header(head) if len(head) == tfrecord_frames.HEADER_BYTES else None)
                end = offset + tfrecord_frames.HEADER_BYTES + (length or 0) + \
                    tfrecord_frames.FOOTER_BYTES
                if length is None or end > size:
                    what = "truncated" if length is not None or len(head) < 12 else "damaged"
                    return (f"{path}: {what} at byte {offset} (record {number}, file of {size} "
                            f"bytes)")
                f.seek(end)
                offset = end
    return None
