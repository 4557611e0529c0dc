"""What `run_pretraining` checks of its `--input_file` before building anything, and after a bad read.

The most common pretraining mistake is records made with another `--max_seq_length` or
`--max_predictions_per_seq` than the run is given; TensorFlow then fails deep in the input
pipeline with a traceback about feature shapes. So the first record of every input file is read
up front (`check_record_files`): a file that is empty, that is not TFRecord framing (a text file,
random bytes), whose first record is not a pretraining `tf.train.Example`, or whose feature
lengths differ from the flags, is a `DataError` naming the file and what to do. Each file's
framing is then walked to its end (record lengths only, compiled, at the speed of reading the
file), so that a truncated copy is refused too, not met hours into training. Damage the walk
cannot see (a flipped byte inside a record) shows when training reaches it; `find_damaged_frame`
then names the file and the byte where a frame breaks, `find_unparsable_record` the record that
whole frames hold but that is no record of the flags' shape (files of two lengths concatenated),
or TensorFlow's message stands.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from bert_tf2.data_gen import tfrecord_frames
from bert_tf2.data_gen.errors import DataError
from bert_tf2.data_gen.pretraining import schema
from bert_tf2.process import compiled

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
    from bert_tf2.data_gen import example_proto

    try:
        example = example_proto.decode(record)
    except (ValueError, UnicodeDecodeError):
        raise DataError(f"{path}: its records are not tf.train.Example messages; "
                        f"--input_file takes the record files of create_pretraining_data") \
            from None
    return {name: len(values) for name, values in example.items()}


@compiled.njit()
def _walk(data) -> tuple:
    """(offset where the framing stops, records before it, whether it ends at the file's end),
    from the records' lengths alone."""
    size, offset, count = data.shape[0], 0, 0
    while offset + 12 <= size:
        length = 0
        for k in range(8):
            length |= np.int64(data[offset + k]) << (8 * k)
        end = offset + 16 + length
        if length < 0 or end > size:
            return offset, count, False
        offset, count = end, count + 1
    return offset, count, offset == size


def walk_frames(path: str, chunk_bytes: int = tfrecord_frames.CHUNK_BYTES) -> str | None:
    """None when `path` is whole TFRecord frames to its last byte, else where it breaks. Read a
    chunk at a time, never mapped (a mapped file that shrinks faults its reader)."""
    size = os.path.getsize(path)
    if size == 0:
        return None
    offset, count = 0, 0  # the file offset of buffer[0]; whole records before it
    buffer = np.empty(min(chunk_bytes, size), np.uint8)
    with open(path, "rb", buffering=0) as f:
        while True:
            want = min(len(buffer), size - offset)
            got = os.preadv(f.fileno(), [memoryview(buffer)[:want]], offset)
            if got < want:  # cut while it is read (as `cp` over it does first)
                return tfrecord_frames.changed_while_read(path, size,
                                                          os.fstat(f.fileno()).st_size)
            at, walked, whole = _walk(buffer[:got])
            count += walked
            if whole and offset + got == size:
                return None
            if whole:  # the chunk ended between two frames
                offset += got
                continue
            # The frame at `at` does not fit in the chunk: the next chunk starts there, unless
            # it does not fit in the file either.
            if at + 12 > got:  # its header is cut by the chunk's end, or by the file's
                if offset + got == size:
                    break
                length = 0
            else:
                length = int.from_bytes(buffer[at:at + 8].tobytes(), "little", signed=True)
                if length < 0 or offset + at + 16 + length > size:
                    break
            if at == 0:  # one frame longer than the buffer
                buffer = np.empty(max(2 * len(buffer), 16 + length), np.uint8)
            offset += at
    return (f"{path}: truncated or damaged at byte {offset + at} (after {count} whole records, "
            f"in a file of {size} bytes)")


def check_record_files(files: list, max_seq_length: int, max_predictions_per_seq: int) -> None:
    """Each local file's first record against the flags, and its framing to the end (see the
    module docstring)."""
    check_first_records(files, max_seq_length, max_predictions_per_seq)
    for path in files:
        if "://" not in path:
            broken = walk_frames(path)
            if broken:
                raise DataError(f"{broken}; {_REMAKE}")


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
    """The first place where a file's framing breaks ('PATH: truncated or damaged at byte N
    ...'), or None when every file is whole frames."""
    for path in files:
        if "://" not in path:
            broken = walk_frames(path)
            if broken:
                return broken
    return None


def find_unparsable_record(files: list, max_seq_length: int, max_predictions_per_seq: int,
                           chunk: int = 4096) -> str | None:
    """The first record that is no pretraining record of these lengths ('PATH: record 17:
    feature 'input_ids' has 64 values, 128 expected'), or None when every record parses."""
    from bert_tf2.data_gen.compiled_examples import FixedSpec

    spec = FixedSpec(schema.fixed_spec(max_seq_length, max_predictions_per_seq))
    for path in files:
        if "://" in path:
            continue
        try:
            records = tfrecord_frames.RecordFile(path)
        except (ValueError, OSError) as error:  # a record's own checksum (the walk reads lengths)
            return str(error)
        try:
            for first in range(0, len(records.starts), chunk):
                numbers = np.arange(first, min(first + chunk, len(records.starts)))
                data, starts, ends = records.read(numbers)
                try:
                    spec.parse_pieces([(data, starts, ends, None, f"{path}: ", numbers)],
                                      len(numbers))
                except ValueError as error:
                    return str(error)
        finally:
            records.close()
    return None
