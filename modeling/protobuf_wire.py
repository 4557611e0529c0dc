"""The protocol-buffer wire format, read and written by hand: varints and the fields of a message.

Two readers and writers of this project work without TensorFlow's message classes and share it:
`modeling.tensor_bundle` (a TF1 checkpoint's index, whose entries are `BundleEntryProto`s in a
table of varint-prefixed keys) and `data_gen.example_proto` (`tf.train.Example` records).
"""
from __future__ import annotations


def write_varint(value: int) -> bytes:
    """A base-128 varint; a negative value as its int64 two's complement, as protobuf writes it."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(data: bytes, at: int) -> tuple:
    """(the varint at `at`, the offset after it); a `ValueError` where it runs past the end."""
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


def fields(data: bytes):
    """(field number, wire type, value) of each field of a message, in order: an int for a
    varint, the payload's bytes for a length-delimited field, the 4 or 8 raw little-endian bytes
    of a fixed32 or fixed64. A field past the end, or a group (wire types 3 and 4: no message of
    ours has one), is a `ValueError`."""
    at, end = 0, len(data)
    while at < end:
        key, at = read_varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = read_varint(data, at)
        elif wire == 2:
            size, at = read_varint(data, at)
            value, at = data[at:at + size], at + size
        elif wire in (5, 1):
            size = 4 if wire == 5 else 8
            value, at = data[at:at + size], at + size
        else:
            raise ValueError(f"wire type {wire} of field {number}")
        if at > end:
            raise ValueError(f"field {number} runs past the end of the message")
        yield number, wire, value


def length_delimited(number: int, payload: bytes) -> bytes:
    """Field `number` holding `payload` (a message, bytes or packed values)."""
    return write_varint(number << 3 | 2) + write_varint(len(payload)) + payload
