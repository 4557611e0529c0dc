"""`tf.train.Example` without TensorFlow: its protocol-buffer bytes written and read in Python.

Every record file of this project (pretraining records, the fine-tuning feature caches) holds
`tf.train.Example` messages. Where TensorFlow is not installed (`make venv-jax`) they are still
written and read, here:
- `encode(features, float_features)` writes the bytes of
  `tf.train.Example.SerializeToString(deterministic=True)`: the map's keys in the order of
  protobuf's deterministic mode (byte order, but a key before any key it is a prefix of: `empty_x`
  before `empty`; `map_key_order`), each value list packed (int64 varints, little-endian float32s), an empty list as an empty
  `Int64List`/`FloatList`;
- `decode(record)` reads any `tf.train.Example` (packed or not, bytes lists too) into
  `{name: NumPy array}`;
- `parse_fixed(records, spec)` is `tf.io.parse_example` with `FixedLen` features: arrays of
  `[records, *shape]`, a missing feature or a wrong count named in a `ValueError`.
`tests/test_example_proto.py` holds both directions equal to TensorFlow's on every record of the
test files.
"""
from __future__ import annotations

import struct
from typing import NamedTuple, Sequence

import numpy as np


class FixedLen(NamedTuple):
    """A feature with a fixed number of values (`tf.io.FixedLenFeature` without a default)."""

    shape: tuple  # () for one value
    dtype: str  # "int64" or "float32"

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


# ------------------------------------------------------------------------------------ writing
def varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 two's complement, as protobuf encodes negative int64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Ids of every released vocabulary (multilingual: 119,547) encode by table look-up.
VARINTS = [varint(value) for value in range(1 << 17)]


def encode_varints(values: Sequence[int]) -> bytes:
    """Packed varints of `values` (ints)."""
    if not len(values):
        return b""
    smallest, largest = min(values), max(values)
    if smallest >= 0 and largest < 0x80:
        return bytes(values)  # one byte each: masks, segment ids, positions, labels
    if smallest >= 0 and largest < len(VARINTS):
        return b"".join(map(VARINTS.__getitem__, values))
    return b"".join(map(varint, values))


TAG_1, TAG_2, TAG_3 = b"\x0a", b"\x12", b"\x1a"  # (field << 3) | 2: length-delimited fields


def length_delimited(tag: bytes, payload: bytes) -> bytes:
    size = len(payload)
    return tag + (VARINTS[size] if size < len(VARINTS) else varint(size)) + payload


def encode_feature(dtype: str, values: Sequence) -> bytes:
    """A `Feature` (without its map entry): `float_list` = 2 or `int64_list` = 3, each holding
    its packed `value` = 1 (absent when the list is empty)."""
    if dtype == "int64":
        packed, tag = encode_varints([int(v) for v in values]), TAG_3
    else:
        packed, tag = struct.pack(f"<{len(values)}f", *values), TAG_2
    return length_delimited(tag, length_delimited(TAG_1, packed) if packed else b"")


def map_key_order(name: str) -> bytes:
    """Sort key of the deterministic map order protobuf (upb) writes: the keys' bytes compared,
    and of two keys where one is a prefix of the other, the longer first (UTF-8 has no 0xff)."""
    return name.encode("utf-8") + b"\xff"


def encode(features: dict, float_features=()) -> bytes:
    """The deterministic bytes of a `tf.train.Example` of `{name: list of values}`: int64 lists,
    float lists for the names in `float_features`."""
    entries = []
    for name in sorted(features, key=map_key_order):
        feature = encode_feature("float" if name in float_features else "int64", features[name])
        entry = length_delimited(TAG_1, name.encode()) + length_delimited(TAG_2, feature)
        entries.append(length_delimited(TAG_1, entry))  # Features.feature map entry = 1
    body = b"".join(entries)
    return length_delimited(TAG_1, body) if features else b""  # Example.features = 1


# ------------------------------------------------------------------------------------ reading
class _Reader:
    """Fields of one message: (field number, wire type, value or payload bytes)."""

    def __init__(self, data: bytes):
        self.data = data

    def fields(self):
        data, at, end = self.data, 0, len(self.data)
        while at < end:
            key, at = _read_varint(data, at)
            number, wire = key >> 3, key & 7
            if wire == 0:
                value, at = _read_varint(data, at)
            elif wire == 2:
                size, at = _read_varint(data, at)
                if at + size > end:
                    raise ValueError("a field runs past the end of the message")
                value, at = data[at:at + size], at + size
            elif wire == 5:
                value, at = data[at:at + 4], at + 4
            elif wire == 1:
                value, at = data[at:at + 8], at + 8
            else:
                raise ValueError(f"wire type {wire} of field {number} is not in a tf.train.Example")
            yield number, wire, value


def _read_varint(data: bytes, at: int) -> tuple:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("a varint runs past the end of the message")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def decode_varints(payload: bytes) -> np.ndarray:
    """Packed varints as int64 (two's complement, as protobuf writes a negative int64)."""
    raw = np.frombuffer(payload, dtype=np.uint8)
    if not len(raw):
        return np.zeros(0, np.int64)
    if raw.max() < 0x80:
        return raw.astype(np.int64)
    ends = np.flatnonzero(raw < 0x80)
    if not len(ends) or ends[-1] != len(raw) - 1:
        raise ValueError("a packed varint runs past the end of its list")
    starts = np.concatenate([[0], ends[:-1] + 1])
    position = np.arange(len(raw)) - np.repeat(starts, ends - starts + 1)
    parts = (raw & 0x7F).astype(np.uint64) << (7 * position).astype(np.uint64)
    return np.add.reduceat(parts, starts).view(np.int64)


def _value_list(payload: bytes, kind: str) -> np.ndarray:
    """The values of an Int64List, FloatList or BytesList message."""
    chunks = []
    for number, wire, value in _Reader(payload).fields():
        if number != 1:
            continue
        if kind == "int64":
            chunks.append(decode_varints(value) if wire == 2 else
                          np.array([value], np.uint64).view(np.int64))
        elif kind == "float":
            chunks.append(np.frombuffer(value, "<f4").astype(np.float32))
        else:
            chunks.append(np.array([value], dtype=object))
    if not chunks:
        return np.zeros(0, {"int64": np.int64, "float": np.float32}.get(kind, object))
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


_KINDS = {1: "bytes", 2: "float", 3: "int64"}  # Feature's oneof fields


def decode(record: bytes) -> dict:
    """`{name: values}` of a serialized `tf.train.Example` (int64, float32 or object arrays)."""
    features = {}
    for number, _, value in _Reader(record).fields():
        if number != 1:  # Example.features
            continue
        for entry_number, _, entry in _Reader(value).fields():
            if entry_number != 1:
                continue
            name, values = None, np.zeros(0, np.int64)
            for field, _, payload in _Reader(entry).fields():
                if field == 1:
                    name = payload.decode("utf-8")
                elif field == 2:
                    for kind_number, _, list_payload in _Reader(payload).fields():
                        if kind_number in _KINDS:
                            values = _value_list(list_payload, _KINDS[kind_number])
            if name is not None:
                features[name] = values  # a repeated map key: the last one wins, as protobuf
    return features


def parse_fixed(records: Sequence[bytes], spec: dict, where: str = "") -> dict:
    """`{name: array [len(records), *shape]}` of every record, as `tf.io.parse_example` with
    `FixedLen` features (int64 or float32); a record without a feature of the spec, or with
    another number of values, is a ValueError naming the record (`where`: the file)."""
    out = {name: np.empty((len(records), feature.size),
                          np.int64 if feature.dtype == "int64" else np.float32)
           for name, feature in spec.items()}
    for i, record in enumerate(records):
        try:
            features = decode(record)
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"{where}record {i}: not a tf.train.Example ({e})") from None
        for name, feature in spec.items():
            values = features.get(name)
            if values is None:
                raise ValueError(f"{where}record {i}: no feature {name!r}")
            if len(values) != feature.size or values.dtype == object:
                raise ValueError(f"{where}record {i}: feature {name!r} has {len(values)} "
                                 f"values, {feature.size} expected")
            out[name][i] = values
    return {name: out[name].reshape((len(records), *feature.shape))
            for name, feature in spec.items()}
