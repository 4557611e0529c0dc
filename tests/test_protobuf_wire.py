"""modeling.protobuf_wire against protobuf's own library: the bytes it writes, the fields it reads."""
import struct

import pytest
from google.protobuf import descriptor_pb2
from tensorflow.core.framework import tensor_shape_pb2
from tensorflow.core.protobuf import tensor_bundle_pb2

from bert_tf2.modeling import protobuf_wire

INT64S = [0, 1, 127, 128, 300, 16_383, 16_384, 2**31 - 1, 2**32, 2**63 - 1, -1, -300, -2**63]


def test_varints_are_protobufs_bytes_and_read_back():
    for value in INT64S:
        # UninterpretedOption.negative_int_value: int64, field 5 (proto2: a 0 is written too).
        theirs = descriptor_pb2.UninterpretedOption(negative_int_value=value).SerializeToString()
        assert protobuf_wire.write_varint(5 << 3) + protobuf_wire.write_varint(value) == theirs
        assert protobuf_wire.read_varint(theirs, 1) == (value % 2**64, len(theirs))
    name = "x" * 300  # a length of two varint bytes
    assert protobuf_wire.length_delimited(1, name.encode()) == descriptor_pb2.FieldDescriptorProto(
        name=name).SerializeToString()


def test_fields_of_a_message_protobuf_wrote():
    shape = tensor_shape_pb2.TensorShapeProto(dim=[{"size": 3}, {"size": 4}])
    entry = tensor_bundle_pb2.BundleEntryProto(dtype=1, shape=shape, offset=300, size=48,
                                               crc32c=0xDEADBEEF)
    data = entry.SerializeToString()
    assert list(protobuf_wire.fields(data)) == [
        (1, 0, 1), (2, 2, shape.SerializeToString()), (4, 0, 300), (5, 0, 48),
        (6, 5, struct.pack("<I", 0xDEADBEEF))]
    assert [size for _, _, dim in protobuf_wire.fields(shape.SerializeToString())
            for _, _, size in protobuf_wire.fields(dim)] == [3, 4]
    double = descriptor_pb2.UninterpretedOption(double_value=1.5).SerializeToString()
    assert list(protobuf_wire.fields(double)) == [(6, 1, struct.pack("<d", 1.5))]


@pytest.mark.parametrize("data, words", [
    (b"\x08\x80", "a varint runs past the end"),  # field 1, a varint cut short
    (b"\x12\x05abc", "field 2 runs past the end"),  # 5 bytes announced, 3 there
    (b"\x35\x01\x02", "field 6 runs past the end"),  # a fixed32 of 2 bytes
    (b"\x0b", "wire type 3 of field 1"),  # a group's start
])
def test_a_damaged_message_is_a_value_error(data, words):
    with pytest.raises(ValueError, match=words):
        list(protobuf_wire.fields(data))
