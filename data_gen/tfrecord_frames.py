"""TFRecord framing without TensorFlow: the bytes `tf.io.TFRecordWriter` writes around a record.

A TFRecord file is a run of frames: the record's length (uint64, little-endian), the masked
CRC-32C of those 8 bytes, the record, and the masked CRC-32C of the record (both uint32,
little-endian). Masking is `((crc >> 15) | (crc << 17)) + 0xa282ead8` (mod 2**32), as in
TensorFlow's `crc32c::Mask`. Framing here lets the pretraining-data workers hand the writer whole
shards' worth of finished bytes, and lets the writer run without importing TensorFlow for local
files; `tests/test_tfrecord_frames.py` holds the bytes equal to TensorFlow's writer's.
"""
import os

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


def read_whole(path: str) -> np.ndarray:
    """The bytes of a local file as a uint8 array. Read, never memory-mapped: a mapped file that
    shrinks under its reader (rewritten in place, as `cp` does) kills the reader with SIGBUS."""
    return np.fromfile(path, dtype=np.uint8)


CHUNK_BYTES = 16 << 20  # what `file_frame_bounds` reads at a time
RUN_GAP_BYTES = 64 << 10  # `read_runs` reads the bytes between two records this close


def file_frame_bounds(file, where: str, size: int, chunk_bytes: int = CHUNK_BYTES) -> tuple:
    """`frame_bounds` of the open local file `file` (`size` bytes), read a chunk at a time: the
    same starts and ends, the same ValueError for a damaged or truncated frame, without the whole
    file in memory."""
    fd, offset = file.fileno(), 0  # the file offset of buffer[0]
    buffer = np.empty(max(1, min(chunk_bytes, size)), np.uint8)
    all_starts, all_ends = [], []
    while offset < size:
        want = min(len(buffer), size - offset)
        got = os.preadv(fd, [memoryview(buffer)[:want]], offset)
        if got < want:  # cut while it is read (as `cp` over it does first)
            raise FileChanged(changed_while_read(where, size, os.fstat(fd).st_size))
        data = buffer[:got]
        starts, ends = np.empty(_frame_count(data), np.int64), np.empty(_frame_count(data),
                                                                       np.int64)
        done, broken, length = _frame_bounds(data, _TABLE, starts, ends)
        all_starts.append(starts[:done] + offset)
        all_ends.append(ends[:done] + offset)
        if broken < 0:
            offset += got
            continue
        needed = HEADER_BYTES + (length + FOOTER_BYTES if length >= 0 else 0)
        cut_by_the_chunk = (got == want and offset + got < size and broken + needed > got
                            and offset + broken + needed <= size)
        if not cut_by_the_chunk:
            what = "a record header" if length < 0 else f"a record of {length} bytes"
            raise ValueError(f"{where}: truncated or damaged at byte {offset + broken} ({what})")
        if broken == 0:  # one frame longer than the buffer
            buffer = np.empty(max(2 * len(buffer), needed), np.uint8)
        offset += broken
    if not all_starts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(all_starts), np.concatenate(all_ends)


def _libc_pread():
    """libc's `pread`, for compiled code (which reads without holding the GIL), or None."""
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).pread
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64]
    function.restype = ctypes.c_ssize_t
    return function


_PREAD = _libc_pread()


@compiled.njit(nogil=True)
def _read_runs(pread, fds, starts, ends, first, gap, buffer):
    """The records of every piece read from its file (`fds[p]`; its records are
    `first[p]:first[p + 1]`, their bytes `starts`/`ends` in it) by `pread` (libc's, handed in),
    as runs (records at most `gap` bytes apart share one), into `buffer` if it is large enough:
    (data, each record's start and end there, the piece whose file ended early or -1)."""
    n = len(starts)
    run_piece, run_lo = np.empty(n, np.int64), np.empty(n, np.int64)
    run_hi, run_at = np.empty(n, np.int64), np.empty(n, np.int64)
    new_starts, new_ends = np.empty(n, np.int64), np.empty(n, np.int64)
    runs, placed = 0, 0
    for p in range(len(first) - 1):
        order = first[p] + np.argsort(starts[first[p]:first[p + 1]])
        i = 0
        while i < len(order):
            lo, hi = starts[order[i]], ends[order[i]]
            j = i + 1
            while j < len(order) and starts[order[j]] - hi <= gap:
                hi = max(hi, ends[order[j]])
                j += 1
            for k in range(i, j):
                new_starts[order[k]] = starts[order[k]] - lo + placed
                new_ends[order[k]] = ends[order[k]] - lo + placed
            run_piece[runs], run_lo[runs], run_hi[runs], run_at[runs] = p, lo, hi, placed
            placed += hi - lo
            runs += 1
            i = j
    data = buffer[:placed] if len(buffer) >= placed else np.empty(placed, np.uint8)
    for r in range(runs):
        want = run_hi[r] - run_lo[r]
        if pread(fds[run_piece[r]], data[run_at[r]:].ctypes.data, want, run_lo[r]) != want:
            return data, new_starts, new_ends, run_piece[r]
    return data, new_starts, new_ends, -1


def read_runs(files: list, first: np.ndarray, starts: np.ndarray, ends: np.ndarray,
              buffer: np.ndarray | None = None) -> tuple:
    """`(data, starts, ends)`: records of `files` (`RecordFile`s) read into one array, the i-th
    at `data[starts[i]:ends[i]]`; those of `files[p]` are `first[p]:first[p + 1]`, their bytes
    `starts`/`ends` in it. One compiled call that holds no GIL (the input's
    worker threads read side by side) reads them, by runs of nearby records. A file that ended
    early is a `FileChanged`. `buffer`: where to put them when it is large enough (a fresh array
    of a batch's size each time is mapped and unmapped by malloc, and every unmap interrupts the
    process's other threads)."""
    fds = np.array([records.file.fileno() for records in files], np.int64)
    if buffer is None:
        buffer = np.empty(0, np.uint8)
    if _PREAD is not None:
        data, new_starts, new_ends, short = _read_runs(_PREAD, fds, starts, ends, first,
                                                       RUN_GAP_BYTES, buffer)
    else:
        data, new_starts, new_ends, short = _read_runs_in_python(fds, starts, ends, first)
    if short >= 0:
        files[short].changed()
    return data, new_starts, new_ends


def _read_runs_in_python(fds, starts, ends, first) -> tuple:
    """`_read_runs` without libc's pread: each record read on its own."""
    new_ends = np.cumsum(ends - starts)
    new_starts = new_ends - (ends - starts)
    data = np.empty(int(new_ends[-1]) if len(new_ends) else 0, np.uint8)
    view = memoryview(data)
    for p in range(len(first) - 1):
        for i in range(first[p], first[p + 1]):
            want = int(ends[i] - starts[i])
            got = os.preadv(int(fds[p]), [view[int(new_starts[i]):int(new_ends[i])]],
                            int(starts[i]))
            if got != want:
                return data, new_starts, new_ends, p
    return data, new_starts, new_ends, -1


class FileChanged(ValueError):
    """A record file changed (was rewritten, grew or shrank) while it was being read."""


def changed_while_read(where: str, size: int, now: int) -> str:
    """What `FileChanged` says: the file, and its size before and now."""
    return f"{where}: the file changed while it was being read (it had {size} bytes, now {now})"


class RecordFile:
    """A local TFRecord file held open while its records are read: its frames found and checked
    once (`file_frame_bounds`), then the records asked for read from the file (`read`), never
    mapped. A file rewritten in place meanwhile (its size or modification time no longer what it
    was when opened) is a `FileChanged` naming it, where a mapping would have faulted the reader;
    a file replaced by a rename is read as it was, from the handle held."""

    def __init__(self, path: str):
        self.path = path
        self.file = open(path, "rb", buffering=0)  # noqa: SIM115 - held while records are read
        try:
            self._identity = self._stat()
            self.starts, self.ends = file_frame_bounds(self.file, path, self._identity[0])
        except BaseException:
            self.file.close()
            raise

    def _stat(self) -> tuple:
        stat = os.fstat(self.file.fileno())
        return stat.st_size, stat.st_mtime_ns

    def read(self, chosen: np.ndarray) -> tuple:
        """`(data, starts, ends)`: the records `chosen` (record numbers) in `data`, the i-th at
        `data[starts[i]:ends[i]]`; then `check`."""
        chosen = np.asarray(chosen, np.int64)
        read = read_runs([self], np.array([0, len(chosen)], np.int64), self.starts[chosen],
                         self.ends[chosen])
        self.check()
        return read

    def check(self) -> None:
        """A `FileChanged` if the file's size or modification time is not what it was."""
        if self._stat() != self._identity:
            self.changed()

    def changed(self):
        raise FileChanged(f"{changed_while_read(self.path, self._identity[0], self._stat()[0])}: "
                          f"records were rewritten in place")

    def close(self) -> None:
        self.file.close()
