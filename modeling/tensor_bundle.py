"""Google's TF1 checkpoints read and written without TensorFlow: the TensorBundle format in Python.

Where TensorFlow is not installed (JAX, PyTorch), users still bring `bert_model.ckpt.*`. Converting
once with TensorFlow elsewhere would work too, but asks for a second installation for a job a
hundred lines of reading do; so this reader is what `modeling.checkpoints.tf1_source` uses off
TensorFlow, and `tests/test_backends.py` holds it equal to `tf.train.load_checkpoint` on every
variable of the checkpoints the tests have.

The format (TensorFlow's `tensor_bundle`): `PREFIX.index` is a LevelDB-style table (uncompressed
blocks of prefix-compressed keys, a block index, a 48-byte footer ending in the table magic) whose
keys are the tensor names and whose values are `BundleEntryProto`s (dtype, shape, shard, offset,
size); the empty key holds the `BundleHeaderProto` (the number of shards). Each tensor's bytes
are little-endian in `PREFIX.data-SSSSS-of-NNNNN` at its offset, with its masked CRC-32C in the
entry. Sliced (partitioned) variables and string tensors are named as unreadable here; BERT
checkpoints have neither. A truncated index or data file, or a tensor whose CRC does not match,
is a `TensorBundleError` naming the file.

`write(prefix, tensors)` writes one shard as TensorFlow's `SaveV2` does (one data block of
entries sorted by name, restart points every 16 entries, an index block, the footer; every CRC),
so that pretraining on JAX still ends with the original's `tf1/bert_model.ckpt`; the tests read
it back with `tf.train.load_checkpoint`.
"""
from __future__ import annotations

import struct

import numpy as np

from bert_tf2.modeling.protobuf_wire import (
    fields,
    length_delimited,
    read_varint,
    write_varint,
)
from bert_tf2.process.errors import UserError

_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_BYTES = 48
_TRAILER_BYTES = 5  # a block's compression type and CRC

# DataType enum values -> NumPy dtypes (types.proto).
_DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16, 6: np.int8,
           9: np.int64, 10: np.bool_, 17: np.uint16, 19: np.float16, 22: np.uint32,
           23: np.uint64}


class TensorBundleError(UserError):
    """A TF1 checkpoint that cannot be read or does not check out; the message names the file.
    (`modeling.checkpoints` raises it on as its `CheckpointError`.)"""


def _error(message: str) -> TensorBundleError:
    return TensorBundleError(message)


def _block(data: bytes, offset: int, size: int, path: str) -> list:
    """The (key, value) entries of one table block."""
    if offset + size + _TRAILER_BYTES > len(data):
        raise ValueError("a block runs past the end of the file")
    if data[offset + size] != 0:
        raise _error(f"{path}: a compressed checkpoint index (TensorBundle blocks are written "
                     f"uncompressed); read it where TensorFlow is installed")
    block = data[offset:offset + size]
    restarts = struct.unpack("<I", block[-4:])[0]
    end = len(block) - 4 - 4 * restarts
    entries, at, key = [], 0, b""
    while at < end:
        shared, at = read_varint(block, at)
        unshared, at = read_varint(block, at)
        length, at = read_varint(block, at)
        key = key[:shared] + block[at:at + unshared]
        at += unshared
        entries.append((key, block[at:at + length]))
        at += length
    return entries


def _handle(data: bytes, at: int) -> tuple:
    offset, at = read_varint(data, at)
    size, at = read_varint(data, at)
    return offset, size, at


class BundleEntry:
    def __init__(self, value: bytes):
        self.dtype, self.shape, self.shard, self.offset, self.size = 0, (), 0, 0, 0
        self.crc32c = None
        self.sliced = False
        for number, wire, field in fields(value):
            if number == 1:
                self.dtype = field
            elif number == 2:
                dims = []
                for dim_number, _, dim in fields(field):
                    if dim_number == 2:
                        dims.append(next((v for n, _, v in fields(dim) if n == 1), 0))
                self.shape = tuple(dims)
            elif number == 3:
                self.shard = field
            elif number == 4:
                self.offset = field
            elif number == 5:
                self.size = field
            elif number == 6 and wire == 5:
                self.crc32c = struct.unpack("<I", field)[0]
            elif number == 7:
                self.sliced = True


class TensorBundle:
    """The tensors of a TF1 checkpoint `prefix` (`prefix.index`, `prefix.data-*`)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        index = prefix + ".index"
        with open(index, "rb") as f:
            data = f.read()
        try:
            if len(data) < _FOOTER_BYTES or struct.unpack(
                    "<Q", data[-8:])[0] != _TABLE_MAGIC:
                raise ValueError("no table footer")
            footer = data[-_FOOTER_BYTES:]
            _, _, at = _handle(footer, 0)  # the meta-index block (empty)
            index_offset, index_size, _ = _handle(footer, at)
            self.entries = {}
            num_shards = 1
            for _, handle in _block(data, index_offset, index_size, index):
                offset, size, _ = _handle(handle, 0)
                for key, value in _block(data, offset, size, index):
                    if key == b"":
                        num_shards = next((v for n, _, v in fields(value) if n == 1), 1)
                    else:
                        self.entries[key.decode("utf-8")] = BundleEntry(value)
        except (ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
            raise _error(f"{index}: not a readable TF1 checkpoint index ({e}); copy the "
                         f"checkpoint again") from None
        self.num_shards = num_shards

    def shapes(self) -> dict:
        return {name: entry.shape for name, entry in self.entries.items()}

    def data_file(self, shard: int) -> str:
        return f"{self.prefix}.data-{shard:05d}-of-{self.num_shards:05d}"

    def read(self, name: str) -> np.ndarray:
        entry = self.entries[name]
        dtype = _DTYPES.get(entry.dtype)
        if dtype is None and entry.dtype == 14:
            import ml_dtypes

            dtype = ml_dtypes.bfloat16
        if dtype is None or entry.sliced:
            raise _error(f"{self.prefix}.index: {name} is a "
                         f"{'sliced' if entry.sliced else f'dtype {entry.dtype}'} tensor, which "
                         f"only TensorFlow reads; read it where TensorFlow is installed")
        path = self.data_file(entry.shard)
        try:
            with open(path, "rb") as f:
                f.seek(entry.offset)
                raw = f.read(entry.size)
        except OSError as e:
            raise _error(f"{path}: cannot read {name} ({e.strerror}); copy the checkpoint "
                         f"again") from None
        expected = int(np.prod(entry.shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if len(raw) != entry.size or entry.size != expected:
            raise _error(f"{path}: cannot read {name} ({len(raw)} of {expected} bytes): the file "
                         f"is truncated or damaged; copy the checkpoint again")
        from bert_tf2.modeling import crc32c

        if entry.crc32c is not None and crc32c.masked(raw) != entry.crc32c:
            raise _error(f"{path}: {name} does not match its checksum: the file is damaged; copy "
                         f"the checkpoint again")
        return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(
            entry.shape).astype(dtype)


# ------------------------------------------------------------------------------------ writing
_RESTART_INTERVAL = 16  # LevelDB's block_restart_interval
_DTYPE_NUMBERS = {np.dtype(v): k for k, v in _DTYPES.items()}


def _int_field(number: int, value: int) -> bytes:
    return write_varint(number << 3) + write_varint(value) if value else b""


def _entry_proto(dtype: int, shape: tuple, offset: int, size: int, checksum: int) -> bytes:
    dims = b"".join(length_delimited(2, _int_field(1, d) if d else b"") for d in shape)
    return (_int_field(1, dtype) + length_delimited(2, dims) + _int_field(4, offset)
            + _int_field(5, size) + write_varint(6 << 3 | 5) + struct.pack("<I", checksum))


def _table_block(entries: list) -> bytes:
    """A block of sorted (key, value) entries, keys prefix-compressed between restarts."""
    out, restarts, previous = bytearray(), [], b""
    for i, (key, value) in enumerate(entries):
        if i % _RESTART_INTERVAL == 0:
            restarts.append(len(out))
            shared = 0
        else:
            shared = 0
            while shared < min(len(key), len(previous)) and key[shared] == previous[shared]:
                shared += 1
        out += (write_varint(shared) + write_varint(len(key) - shared) + write_varint(len(value))
                + key[shared:] + value)
        previous = key
    restarts = restarts or [0]
    out += b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))
    return bytes(out)


def _with_trailer(block: bytes) -> bytes:
    from bert_tf2.modeling import crc32c

    return block + b"\x00" + struct.pack("<I", crc32c.masked(block + b"\x00"))


def write(prefix: str, tensors: dict) -> None:
    """Write `{name: array}` as the TF1 checkpoint `prefix` (one shard); the index is written
    last, so a checkpoint is there only once whole (the caller renames into place)."""
    from bert_tf2.modeling import crc32c

    entries, data_parts, offset = [], [], 0
    for name in sorted(tensors):
        array = np.array(tensors[name], order="C")  # (ascontiguousarray makes 0-d 1-d)
        if array.dtype not in _DTYPE_NUMBERS:
            raise ValueError(f"{name}: dtype {array.dtype} is not written to TF1 checkpoints")
        raw = array.astype(array.dtype.newbyteorder("<")).tobytes()
        entries.append((name.encode("utf-8"), _entry_proto(
            _DTYPE_NUMBERS[array.dtype], array.shape, offset, len(raw), crc32c.masked(raw))))
        data_parts.append(raw)
        offset += len(raw)
    header = _int_field(1, 1) + length_delimited(3, _int_field(1, 1))  # one shard; VersionDef producer 1
    data_block = _with_trailer(_table_block([(b"", header)] + entries))
    meta_block = _with_trailer(_table_block([]))
    last_key = entries[-1][0] if entries else b""
    index_block = _with_trailer(_table_block([(last_key, write_varint(0) + write_varint(
        len(data_block) - _TRAILER_BYTES))]))
    meta_offset = len(data_block)
    index_offset = meta_offset + len(meta_block)
    handles = (write_varint(meta_offset) + write_varint(len(meta_block) - _TRAILER_BYTES)
               + write_varint(index_offset) + write_varint(len(index_block) - _TRAILER_BYTES))
    footer = handles.ljust(_FOOTER_BYTES - 8, b"\x00") + struct.pack("<Q", _TABLE_MAGIC)
    with open(f"{prefix}.data-00000-of-00001", "wb") as f:
        for part in data_parts:
            f.write(part)
    with open(f"{prefix}.index", "wb") as f:
        f.write(data_block + meta_block + index_block + footer)
