"""A pool's instances -> framed TFRecord bytes in one compiled pass: `schema` without a Python loop.

`schema.serialize_example` is the readable statement of a record's bytes; this is its compiled
twin for a whole pool at once. Each record is the `tf.train.Example` of the seven features in
sorted key order (as `SerializeToString(deterministic=True)` writes it), framed as in a TFRecord
file (`data_gen.tfrecord_frames`). A first pass sizes every record, a second writes them all into
one buffer; the writer then copies slices of it to the shards. The tests hold the bytes equal to
`schema.serialize_example` and TensorFlow's writer.
"""
from typing import Iterator, NamedTuple

import numpy as np

from bert_tf2.data_gen import tfrecord_frames
from bert_tf2.data_gen.pretraining import schema
from bert_tf2.data_gen.tfrecord_frames import FOOTER_BYTES, HEADER_BYTES, frame
from bert_tf2.process import compiled

# Sorted key order; ids say which feature each is in the compiled code.
_INPUT_IDS, _INPUT_MASK, _MASKED_IDS, _MASKED_POSITIONS, _WEIGHTS, _NSP, _SEGMENT_IDS = range(7)
_NAMES = sorted(schema.FEATURE_NAMES)
assert _NAMES == ["input_ids", "input_mask", "masked_lm_ids", "masked_lm_positions",
                  "masked_lm_weights", "next_sentence_labels", "segment_ids"]
_KEY_BYTES = np.frombuffer(b"".join(name.encode() for name in _NAMES), dtype=np.uint8).copy()
_KEY_STARTS = np.cumsum([0] + [len(name) for name in _NAMES]).astype(np.int64)
_FLOAT_FEATURE = np.array([name == "masked_lm_weights" for name in _NAMES])


class FramedRecords(NamedTuple):
    """Records back to back as in a TFRecord file; record k is `data[offsets[k]:offsets[k+1]]`."""
    data: bytes
    offsets: np.ndarray  # int64, len(records) + 1

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def dealt(self, shards: int) -> list:
        """`shards` byte strings: the j-th holds records j, j + shards, j + 2 * shards, ... back to
        back (`ShardedRecordWriter.write_dealt`)."""
        view, offsets = memoryview(self.data), self.offsets.tolist()
        if shards == 1:
            return [self.data]
        return [b"".join(view[offsets[k]:offsets[k + 1]] for k in range(j, len(self), shards))
                for j in range(shards)]

    def examples(self) -> Iterator[bytes]:
        """Each serialized `tf.train.Example`, without the framing (for Beam's TFRecord sink)."""
        view, offsets = memoryview(self.data), self.offsets.tolist()
        return (bytes(view[a + HEADER_BYTES:b - FOOTER_BYTES])
                for a, b in zip(offsets[:-1], offsets[1:]))


def framed_records(instances) -> FramedRecords:
    """The records of `compiled_instances.PoolInstances`, in its order."""
    args = (instances.input_ids, instances.lengths, instances.first_segment_lengths,
            instances.is_random_next, instances.masked_lm_positions, instances.masked_lm_ids,
            instances.masked_counts, _KEY_BYTES, _KEY_STARTS, _FLOAT_FEATURE)
    sizes = _record_sizes(*args)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes + HEADER_BYTES + FOOTER_BYTES, out=offsets[1:])
    buffer = np.empty(offsets[-1], dtype=np.uint8)
    _write_records(buffer, offsets, sizes, tfrecord_frames.table(), *args)
    return FramedRecords(buffer.tobytes(), offsets)


# ------------------------------------------------------------------ compiled
@compiled.njit()
def _varint_size(value) -> int:
    size = 1
    while value > 0x7F:
        value >>= 7
        size += 1
    return size


@compiled.njit()
def _put_varint(buffer, at, value) -> int:
    while value > 0x7F:
        buffer[at] = (value & 0x7F) | 0x80
        value >>= 7
        at += 1
    buffer[at] = value
    return at + 1


@compiled.njit()
def _packed_size(feature, ids, lengths, first_lengths, random_next, positions, labels, counts,
                 n) -> int:
    seq, predictions = ids.shape[1], positions.shape[1]
    if feature == _WEIGHTS:
        return 4 * predictions
    if feature == _INPUT_MASK or feature == _SEGMENT_IDS:
        return seq  # 0 and 1: one byte each
    if feature == _NSP:
        return 1
    size = 0
    if feature == _INPUT_IDS:
        for k in range(seq):
            size += _varint_size(ids[n, k])
    else:
        values = positions if feature == _MASKED_POSITIONS else labels
        for k in range(predictions):
            size += _varint_size(values[n, k])
    return size


@compiled.njit()
def _entry_sizes(feature, packed, key_starts):
    """(value list, feature, map entry payload) sizes of one feature with `packed` bytes."""
    value_list = 1 + _varint_size(packed) + packed
    feature_size = 1 + _varint_size(value_list) + value_list
    key = key_starts[feature + 1] - key_starts[feature]
    entry = 1 + _varint_size(key) + key + 1 + _varint_size(feature_size) + feature_size
    return value_list, feature_size, entry


@compiled.njit()
def _features_size(n, ids, lengths, first_lengths, random_next, positions, labels, counts,
                   key_starts) -> int:
    total = 0
    for feature in range(7):
        packed = _packed_size(feature, ids, lengths, first_lengths, random_next, positions,
                              labels, counts, n)
        entry = _entry_sizes(feature, packed, key_starts)[2]
        total += 1 + _varint_size(entry) + entry
    return total


@compiled.njit()
def _record_sizes(ids, lengths, first_lengths, random_next, positions, labels, counts,
                  key_bytes, key_starts, float_feature):
    sizes = np.zeros(len(lengths), dtype=np.int64)
    for n in range(len(lengths)):
        features = _features_size(n, ids, lengths, first_lengths, random_next, positions,
                                  labels, counts, key_starts)
        sizes[n] = 1 + _varint_size(features) + features
    return sizes


@compiled.njit()
def _write_records(buffer, offsets, sizes, table, ids, lengths, first_lengths, random_next,
                   positions, labels, counts, key_bytes, key_starts, float_feature):
    for n in range(len(lengths)):
        at = offsets[n] + HEADER_BYTES
        buffer[at] = 0x0A  # Example.features
        at = _put_varint(buffer, at + 1, _features_size(n, ids, lengths, first_lengths,
                                                        random_next, positions, labels, counts,
                                                        key_starts))
        for feature in range(7):
            packed = _packed_size(feature, ids, lengths, first_lengths, random_next, positions,
                                  labels, counts, n)
            value_list, feature_size, entry = _entry_sizes(feature, packed, key_starts)
            buffer[at] = 0x0A  # Features.feature map entry
            at = _put_varint(buffer, at + 1, entry)
            buffer[at] = 0x0A  # key
            key_start, key_end = key_starts[feature], key_starts[feature + 1]
            at = _put_varint(buffer, at + 1, key_end - key_start)
            for k in range(key_start, key_end):
                buffer[at] = key_bytes[k]
                at += 1
            buffer[at] = 0x12  # value: a Feature
            at = _put_varint(buffer, at + 1, feature_size)
            buffer[at] = 0x12 if float_feature[feature] else 0x1A  # float_list / int64_list
            at = _put_varint(buffer, at + 1, value_list)
            buffer[at] = 0x0A  # packed values
            at = _put_varint(buffer, at + 1, packed)
            if feature == _WEIGHTS:
                for k in range(positions.shape[1]):
                    # 1.0 is 0x3F800000 little-endian; 0.0 is four zero bytes
                    buffer[at] = 0
                    buffer[at + 1] = 0
                    buffer[at + 2] = 0x80 if k < counts[n] else 0
                    buffer[at + 3] = 0x3F if k < counts[n] else 0
                    at += 4
            elif feature == _INPUT_IDS:
                for k in range(ids.shape[1]):
                    at = _put_varint(buffer, at, ids[n, k])
            elif feature == _MASKED_POSITIONS:
                for k in range(positions.shape[1]):
                    at = _put_varint(buffer, at, positions[n, k])
            elif feature == _MASKED_IDS:
                for k in range(labels.shape[1]):
                    at = _put_varint(buffer, at, labels[n, k])
            elif feature == _NSP:
                buffer[at] = random_next[n]
                at += 1
            else:  # input_mask, segment_ids: 0 or 1, one byte each
                start = 0 if feature == _INPUT_MASK else first_lengths[n]
                for k in range(ids.shape[1]):
                    buffer[at] = 1 if start <= k < lengths[n] else 0
                    at += 1
        frame(buffer, offsets[n], sizes[n], table)
