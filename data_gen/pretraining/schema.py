"""The pretraining TFRecord contract (SPEC.md section 6), defined once for writer and reader.

Each record is a `tf.train.Example` with the original's seven features: `input_ids`, `input_mask`,
`segment_ids` (int64, `max_seq_length` values), `masked_lm_positions`, `masked_lm_ids` (int64) and
`masked_lm_weights` (float, `max_predictions_per_seq` values), and `next_sentence_labels` (int64,
one value). Padding is id 0, mask 0, segment 0; unused prediction slots are position 0, id 0,
weight 0.0.

`serialize_example` writes the protocol buffer by hand so that the worker processes that make
records never import TensorFlow (650 MB and seconds per process). Its bytes equal
`tf.train.Example.SerializeToString(deterministic=True)` (map keys in sorted order), which the
tests check; the original wrote the same message with map order left to the library.
"""
import struct
from typing import NamedTuple, Sequence


class Feature(NamedTuple):
    name: str
    dtype: str  # "int64" or "float"
    length: str  # "max_seq_length", "max_predictions_per_seq" or "one"


FEATURES = (
    Feature("input_ids", "int64", "max_seq_length"),
    Feature("input_mask", "int64", "max_seq_length"),
    Feature("segment_ids", "int64", "max_seq_length"),
    Feature("masked_lm_positions", "int64", "max_predictions_per_seq"),
    Feature("masked_lm_ids", "int64", "max_predictions_per_seq"),
    Feature("masked_lm_weights", "float", "max_predictions_per_seq"),
    Feature("next_sentence_labels", "int64", "one"),
)
FEATURE_NAMES = tuple(feature.name for feature in FEATURES)


def feature_lengths(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """Name -> number of values of every feature."""
    sizes = {"max_seq_length": max_seq_length, "max_predictions_per_seq": max_predictions_per_seq,
             "one": 1}
    return {feature.name: sizes[feature.length] for feature in FEATURES}


def feature_spec(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """The `tf.io.parse_example` spec of the original's `run_pretraining.py` input function."""
    import tensorflow as tf

    dtypes = {"int64": tf.int64, "float": tf.float32}
    lengths = feature_lengths(max_seq_length, max_predictions_per_seq)
    return {feature.name: tf.io.FixedLenFeature([lengths[feature.name]], dtypes[feature.dtype])
            for feature in FEATURES}


def padded_features(input_ids: Sequence[int], segment_ids: Sequence[int],
                    masked_lm_positions: Sequence[int], masked_lm_ids: Sequence[int],
                    next_sentence_label: int, max_seq_length: int,
                    max_predictions_per_seq: int) -> dict:
    """The seven features of one instance, padded as the original pads them."""
    if len(input_ids) > max_seq_length:
        raise ValueError(f"{len(input_ids)} tokens exceed max_seq_length={max_seq_length}")
    if len(masked_lm_positions) > max_predictions_per_seq:
        raise ValueError(f"{len(masked_lm_positions)} predictions exceed "
                         f"max_predictions_per_seq={max_predictions_per_seq}")
    seq_pad = [0] * (max_seq_length - len(input_ids))
    pred_pad = [0] * (max_predictions_per_seq - len(masked_lm_positions))
    return {
        "input_ids": list(input_ids) + seq_pad,
        "input_mask": [1] * len(input_ids) + seq_pad,
        "segment_ids": list(segment_ids) + seq_pad,
        "masked_lm_positions": list(masked_lm_positions) + pred_pad,
        "masked_lm_ids": list(masked_lm_ids) + pred_pad,
        "masked_lm_weights": [1.0] * len(masked_lm_positions) + [0.0] * len(pred_pad),
        "next_sentence_labels": [next_sentence_label],
    }


# ------------------------------------------------------------------ protocol buffer encoding
def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 two's complement, as protobuf encodes negative int64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Ids of every released vocabulary (multilingual: 119,547) encode by table look-up.
_VARINTS = [_varint(value) for value in range(1 << 17)]


def _encode_varints(values: Sequence[int]) -> bytes:
    smallest, largest = min(values), max(values)
    if smallest >= 0 and largest < 0x80:
        return bytes(values)  # one byte each: masks, segment ids, positions, labels
    if smallest >= 0 and largest < len(_VARINTS):
        return b"".join(map(_VARINTS.__getitem__, values))
    return b"".join(map(_varint, values))


def _length_delimited(field_tag: int, payload: bytes) -> bytes:
    size = len(payload)
    return _TAGS[field_tag] + (_VARINTS[size] if size < len(_VARINTS) else _varint(size)) + payload


# Tags: (field number << 3) | 2 for length-delimited fields.
_TAG_1, _TAG_2, _TAG_3 = 0x0A, 0x12, 0x1A
_TAGS = {tag: bytes([tag]) for tag in (_TAG_1, _TAG_2, _TAG_3)}
_FEATURE_TAG = {"float": _TAG_2, "int64": _TAG_3}  # Feature.float_list = 2, Feature.int64_list = 3
_FEATURE_KEYS = {feature.name: _length_delimited(_TAG_1, feature.name.encode())
                 for feature in FEATURES}
_DTYPES = {feature.name: feature.dtype for feature in FEATURES}
_SORTED_NAMES = sorted(FEATURE_NAMES)


def _encode_feature(dtype: str, values: Sequence) -> bytes:
    if dtype == "int64":
        packed = _encode_varints(values)
    else:
        packed = struct.pack(f"<{len(values)}f", *values)
    value_list = _length_delimited(_TAG_1, packed)  # Int64List/FloatList.value = 1, packed
    return _length_delimited(_FEATURE_TAG[dtype], value_list)


def serialize_example(features: dict) -> bytes:
    """A `tf.train.Example` of the seven features (name -> list of values), keys in sorted order."""
    entries = []
    for name in _SORTED_NAMES:
        entry = _FEATURE_KEYS[name] + _length_delimited(_TAG_2, _encode_feature(_DTYPES[name],
                                                                               features[name]))
        entries.append(_length_delimited(_TAG_1, entry))  # Features.feature map entry = 1
    return _length_delimited(_TAG_1, b"".join(entries))  # Example.features = 1
