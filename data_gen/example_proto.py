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

from bert_tf2.modeling.protobuf_wire import fields, write_varint


class FixedLen(NamedTuple):
    """A feature with a fixed number of values (`tf.io.FixedLenFeature` without a default)."""

    shape: tuple  # () for one value
    dtype: str  # "int64" or "float32"

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


# ------------------------------------------------------------------------------------ writing
# Ids of every released vocabulary (multilingual: 119,547) encode by table look-up.
VARINTS = [write_varint(value) for value in range(1 << 17)]


def encode_varints(values: Sequence[int]) -> bytes:
    """Packed varints of `values` (ints)."""
    if not len(values):
        return b""
    smallest, largest = min(values), max(values)
    if smallest >= 0 and largest < 0x80:
        return bytes(values)  # one byte each: masks, segment ids, positions, labels
    if smallest >= 0 and largest < len(VARINTS):
        return b"".join(map(VARINTS.__getitem__, values))
    return b"".join(map(write_varint, values))


TAG_1, TAG_2, TAG_3 = b"\x0a", b"\x12", b"\x1a"  # (field << 3) | 2: length-delimited fields


def length_delimited(tag: bytes, payload: bytes) -> bytes:
    size = len(payload)
    return tag + (VARINTS[size] if size < len(VARINTS) else write_varint(size)) + payload


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
    for number, wire, value in fields(payload):
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
    for number, _, value in fields(record):
        if number != 1:  # Example.features
            continue
        for entry_number, _, entry in fields(value):
            if entry_number != 1:
                continue
            name, values = None, np.zeros(0, np.int64)
            for field, _, payload in fields(entry):
                if field == 1:
                    name = payload.decode("utf-8")
                elif field == 2:
                    for kind_number, _, list_payload in fields(payload):
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
