"""TFRecord framing without TensorFlow: the bytes `tf.io.TFRecordWriter` writes around a record.

A TFRecord file is a run of frames: the record's length (uint64, little-endian), the masked
CRC-32C of those 8 bytes, the record, and the masked CRC-32C of the record (both uint32,
little-endian). Masking is `((crc >> 15) | (crc << 17)) + 0xa282ead8` (mod 2**32), as in
TensorFlow's `crc32c::Mask`. Framing here lets the pretraining-data workers hand the writer whole
shards' worth of finished bytes, and lets the writer run without importing TensorFlow for local
files; `tests/test_tfrecord_frames.py` holds the bytes equal to TensorFlow's writer's.
"""
import numpy as np

from bert_tf2.modeling.crc32c import crc32c, masked_crc32c  # noqa: F401
from bert_tf2.modeling.crc32c import table as crc32c_table
from bert_tf2.process import compiled

HEADER_BYTES, FOOTER_BYTES = 12, 4
_TABLE = crc32c_table()


@compiled.njit()
def put_uint(buffer, at, value, size) -> None:
    """`value` as `size` little-endian bytes at `buffer[at:]`."""
    for k in range(size):
        buffer[at + k] = (value >> (8 * k)) & 0xFF


@compiled.njit()
def frame(buffer, start, length, table) -> None:
    """Fill the header and footer around the record already at `buffer[start + 12:][:length]`."""
    put_uint(buffer, start, length, 8)
    put_uint(buffer, start + 8, masked_crc32c(buffer, start, start + 8, table), 4)
    body = start + HEADER_BYTES
    put_uint(buffer, body + length, masked_crc32c(buffer, body, body + length, table), 4)


def framed(record: bytes) -> bytes:
    """One record as it appears in a TFRecord file."""
    buffer = np.zeros(HEADER_BYTES + len(record) + FOOTER_BYTES, dtype=np.uint8)
    buffer[HEADER_BYTES:HEADER_BYTES + len(record)] = np.frombuffer(record, dtype=np.uint8)
    frame(buffer, 0, len(record), _TABLE)
    return buffer.tobytes()


def table() -> np.ndarray:
    """The CRC tables, for compiled callers of `frame`."""
    return _TABLE


def read_frames(path: str):
    """The records of a local TFRecord file, in order, their lengths and CRCs checked as
    TensorFlow's reader checks them; a damaged or truncated frame is a ValueError naming the
    file and the byte where it starts."""
    with open(path, "rb") as f:
        offset = 0
        while True:
            head = f.read(HEADER_BYTES)
            if not head:
                return
            header = np.frombuffer(head, dtype=np.uint8)
            if len(head) < HEADER_BYTES or masked_crc32c(header, 0, 8, _TABLE) != int.from_bytes(
                    head[8:12], "little"):
                raise ValueError(f"{path}: truncated or damaged at byte {offset} (a record "
                                 f"header)")
            length = int.from_bytes(head[:8], "little")
            body = f.read(length + FOOTER_BYTES)
            data = np.frombuffer(body, dtype=np.uint8)
            if len(body) < length + FOOTER_BYTES or masked_crc32c(
                    data, 0, length, _TABLE) != int.from_bytes(body[length:], "little"):
                raise ValueError(f"{path}: truncated or damaged at byte {offset} (a record of "
                                 f"{length} bytes)")
            yield body[:length]
            offset += HEADER_BYTES + length + FOOTER_BYTES


@compiled.njit(nogil=True)
def get_uint(buffer, at, size) -> int:
    """The `size` little-endian bytes at `buffer[at:]` as an integer (`put_uint`'s inverse)."""
    value = 0
    for k in range(size):
        value |= np.int64(buffer[at + k]) << (8 * k)
    return value


@compiled.njit(nogil=True)
def _frame_count(data) -> int:
    """How many frames the headers of `data` chain together (unchecked; a short tail ends it)."""
    at, count = 0, 0
    while at + HEADER_BYTES <= len(data):
        length = get_uint(data, at, 8)
        if length < 0:
            break
        at += HEADER_BYTES + length + FOOTER_BYTES
        count += 1
    return count


@compiled.njit(nogil=True)
def _frame_bounds(data, table, starts, ends):
    """Fills `starts`/`ends` with where each record's bytes lie, checking every length and CRC;
    returns (frames read, byte offset of the first broken frame or -1, its record length or -1
    when its header is what broke)."""
    at = 0
    for i in range(len(starts)):
        if at + HEADER_BYTES > len(data) or masked_crc32c(data, at, at + 8, table) != get_uint(
                data, at + 8, 4):
            return i, at, -1
        length = get_uint(data, at, 8)
        body = at + HEADER_BYTES
        end = body + length
        if end + FOOTER_BYTES > len(data) or masked_crc32c(data, body, end, table) != get_uint(
                data, end, 4):
            return i, at, length
        starts[i], ends[i] = body, end
        at = end + FOOTER_BYTES
    if at != len(data):
        return len(starts), at, -1
    return len(starts), -1, -1


def frame_bounds(data: np.ndarray, where: str = "") -> tuple:
    """`(starts, ends)`: where every record of the TFRecord bytes `data` (a uint8 array: a file
    read or memory-mapped whole) lies, every frame checked as `read_frames` checks it; a damaged
    or truncated frame is the same ValueError naming `where` and the byte where it starts."""
    count = _frame_count(data)
    starts, ends = np.empty(count, np.int64), np.empty(count, np.int64)
    _, broken, length = _frame_bounds(data, _TABLE, starts, ends)
    if broken >= 0:
        what = "a record header" if length < 0 else f"a record of {length} bytes"
        raise ValueError(f"{where}: truncated or damaged at byte {broken} ({what})")
    return starts, ends


def mapped(path: str) -> np.ndarray:
    """The bytes of a local file as a read-only uint8 array, mapped rather than read (an empty
    file: an empty array)."""
    import os

    if os.path.getsize(path) == 0:
        return np.zeros(0, np.uint8)
    return np.asarray(np.memmap(path, dtype=np.uint8, mode="r"))
